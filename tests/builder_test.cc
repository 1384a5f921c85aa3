// The TT-CNN builder and testing utilities: the original's builder test
// matrix (every sharding strategy x kernels x batches x sizes, PCC >= 0.999
// against the reference kernels), channel slicing, the down block, the
// original's error messages, comp_pcc's rules and the device perf check.
#include "tessera/cnn/builder.h"

#include "tessera/cnn/testing.h"
#include "tessera/numerics/bfloat16.h"
#include "tessera/ops/reference.h"
#include "test_util.h"

namespace tessera::cnn {
namespace {

using ::testing::HasSubstr;
constexpr double kPcc = 0.999;  // the original's PCC_THRESHOLD

std::shared_ptr<Device> open(std::string_view descriptor) {
  auto d = open_device({.descriptor = std::string(descriptor), .l1_small_size = 32768});
  EXPECT_TRUE(d.ok()) << d.status().message();
  return d.ok() ? *d : nullptr;
}

const char* strategy_name(size_t i) {
  static const char* names[] = {"auto", "height", "width", "block"};
  return names[i];
}

ShardingStrategy strategy(size_t i) {
  switch (i) {
    case 1: return HeightShardedStrategyConfiguration{};
    case 2: return WidthShardedStrategyConfiguration{};
    case 3: return BlockShardedStrategyConfiguration{};
    default: return AutoShardedStrategyConfiguration{};
  }
}

TEST(Builder, ConvMatrixMatchesTheReference) {
  for (const char* desc : {"cpu", "wormhole_b0"}) {
    auto dev = open(desc);
    ASSERT_TRUE(dev);
    for (size_t s = 0; s < 4; ++s)
      for (uint32_t k : {3u, 5u})
        for (uint32_t batch : {1u, 2u})
          for (auto hw : {std::array<uint32_t, 2>{8, 8}, std::array<uint32_t, 2>{16, 8}}) {
            SCOPED_TRACE(fmt::format("{} {} k{} b{} {}x{}", desc, strategy_name(s), k, batch, hw[0], hw[1]));
            Conv2dConfiguration c =
                Conv2dConfiguration::with_random_weights(hw[0], hw[1], 32, 64, batch, {k, k}, 1, k * 10 + batch);
            c.padding = {k / 2, k / 2};
            c.sharding_strategy = strategy(s);
            c.activation = UnaryWithParam{UnaryOpType::RELU};
            ASSERT_OK_AND_ASSIGN(double pcc, verify_conv2d_from_config(c, dev, kPcc));
            EXPECT_GE(pcc, kPcc);
          }
  }
}

TEST(Builder, ConvOutputsFollowTheConfiguration) {
  auto dev = open("wormhole_b0");
  Conv2dConfiguration c = Conv2dConfiguration::with_random_weights(16, 16, 16, 32, 1, {3, 3});
  c.padding = {1, 1};
  c.sharding_strategy = HeightShardedStrategyConfiguration{.act_block_h_override = 64};
  c.weights_dtype = DataType::BFLOAT8_B;
  c.output_dtype = DataType::BFLOAT8_B;
  c.slice_strategy = L1FullSliceStrategyConfiguration{};
  ASSERT_OK_AND_ASSIGN(Conv2d conv, Conv2d::create(c, dev));
  ASSERT_OK_AND_ASSIGN(RandomInput in, create_random_input_tensor({.input_channels = 16, .input_height = 16,
                                                                   .input_width = 16, .pad = false, .device = dev}));
  ASSERT_OK_AND_ASSIGN(LayerOutput y, conv.forward(in.input));
  EXPECT_EQ(y.output_height, 16u);
  EXPECT_EQ(y.output_width, 16u);
  EXPECT_EQ(y.output.layout(), Layout::TILE);
  EXPECT_EQ(y.output.dtype(), DataType::BFLOAT8_B);
  EXPECT_EQ(y.output.memory_config().memory_layout, TensorMemoryLayout::HEIGHT_SHARDED);
  EXPECT_EQ(y.output.memory_config().buffer_type, BufferType::L1);
  // The second call reuses the prepared weights: no new program, same output.
  const size_t programs = dev->program_cache().size();
  ASSERT_OK_AND_ASSIGN(Tensor again, conv(in.input));
  EXPECT_EQ(dev->program_cache().size(), programs);
  ASSERT_OK_AND_ASSIGN(PccResult same, comp_pcc(y.output, again, 1.0));
  EXPECT_TRUE(same.passed);
}

TEST(Builder, ChannelSlicingSumsPartialConvolutions) {
  auto dev = open("cpu");
  for (uint32_t slices : {2u, 4u}) {
    Conv2dConfiguration c = Conv2dConfiguration::with_random_weights(12, 10, 64, 32, 1, {3, 3}, 1, slices);
    c.padding = {1, 1};
    c.activation = UnaryWithParam{UnaryOpType::RELU};
    c.slice_strategy = ChannelSliceStrategyConfiguration{slices};
    ASSERT_OK_AND_ASSIGN(double pcc, verify_conv2d_from_config(c, dev, kPcc));
    EXPECT_GE(pcc, kPcc);
  }
}

TEST(Builder, DownBlock) {
  // Conv(16->32) -> Conv(32->32) -> MaxPool 2x2, height sharded with
  // act_block_h_override 64, as the original's down-block test.
  auto dev = open("wormhole_b0");
  const uint32_t h = 32, w = 32;
  ShardingStrategy hs = HeightShardedStrategyConfiguration{.act_block_h_override = 64};
  Conv2dConfiguration c1 = Conv2dConfiguration::with_random_weights(h, w, 16, 32, 1, {3, 3}, 1, 1);
  c1.padding = {1, 1}, c1.sharding_strategy = hs, c1.activation = UnaryWithParam{UnaryOpType::RELU};
  Conv2dConfiguration c2 = Conv2dConfiguration::with_random_weights(h, w, 32, 32, 1, {3, 3}, 1, 2);
  c2.padding = {1, 1}, c2.sharding_strategy = hs, c2.activation = UnaryWithParam{UnaryOpType::RELU};
  MaxPool2dConfiguration p{.input_height = h, .input_width = w, .channels = 32, .batch_size = 1,
                           .kernel_size = {2, 2}, .stride = {2, 2}};
  ASSERT_OK_AND_ASSIGN(Conv2d conv1, Conv2d::create(c1, dev));
  ASSERT_OK_AND_ASSIGN(Conv2d conv2, Conv2d::create(c2, dev));
  ASSERT_OK_AND_ASSIGN(MaxPool2d pool, MaxPool2d::create(p, dev));
  ASSERT_OK_AND_ASSIGN(RandomInput in,
                       create_random_input_tensor({.input_channels = 16, .input_height = h, .input_width = w,
                                                   .fold = false, .pad = false, .device = dev, .seed = 3}));
  ASSERT_OK_AND_ASSIGN(Tensor y1, conv1(in.input));
  ASSERT_OK_AND_ASSIGN(Tensor y2, conv2(y1));
  ASSERT_OK_AND_ASSIGN(Tensor y, pool(y2));
  EXPECT_EQ(y.shape(), (Shape{1, 1, 16 * 16, 32}));
  // The reference chain in double precision from the same bfloat16 input.
  ASSERT_OK_AND_ASSIGN(Tensor x, in.input.cpu());
  ASSERT_OK_AND_ASSIGN(Tensor r1, reference::conv2d(x, c1.weight, c1.bias, c1.params(), DataType::FLOAT32));
  ASSERT_OK_AND_ASSIGN(Tensor r1v, r1.view(Shape{1, h, w, 32}));
  ASSERT_OK_AND_ASSIGN(Tensor r2, reference::conv2d(r1v, c2.weight, c2.bias, c2.params(), DataType::FLOAT32));
  ASSERT_OK_AND_ASSIGN(Tensor r, reference::max_pool2d(r2, p.params(), DataType::FLOAT32));
  ASSERT_OK_AND_ASSIGN(double pcc, assert_with_pcc(r, y, kPcc));
  EXPECT_GE(pcc, kPcc);
}

TEST(Builder, PoolAndUpsampleLayers) {
  auto dev = open("cpu");
  for (auto slicing : {std::optional<SliceStrategy>(), std::optional<SliceStrategy>(ChannelSliceStrategyConfiguration{2})}) {
    MaxPool2dConfiguration p{.input_height = 15, .input_width = 10, .channels = 32, .batch_size = 2,
                             .kernel_size = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true,
                             .slice_strategy = slicing};
    ASSERT_OK_AND_ASSIGN(double pp, verify_maxpool2d_from_config(p, dev));
    EXPECT_EQ(pp, 1.0);  // max pooling picks values: exact
    for (const char* mode : {"nearest", "bilinear"}) {
      UpsampleConfiguration u{.input_height = 6, .input_width = 5, .channels = 32, .batch_size = 1,
                              .scale_factor = {2, 3}, .mode = mode, .slice_strategy = slicing};
      ASSERT_OK_AND_ASSIGN(double pu, verify_upsample_from_config(u, dev));
      EXPECT_GE(pu, 0.9999) << mode;
    }
  }
}

TEST(Builder, ConfigurationErrorsAreTheOriginals) {
  Conv2dConfiguration c = Conv2dConfiguration::with_random_weights(8, 8, 16, 32, 1, {3, 3});
  c.out_channels = 64;
  EXPECT_EQ(c.validate().message(),
            "Weight shape [32,16,3,3] doesn't match expected shape (64, 16, 3, 3) for configuration parameters");
  c = Conv2dConfiguration::with_random_weights(8, 8, 16, 32, 1, {3, 3});
  c.bias = Tensor::from_vector(std::vector<float>(32), Shape{32}, DataType::FLOAT32).value();
  EXPECT_EQ(c.validate().message(),
            "Bias shape [32] doesn't match expected shape (1, 1, 1, 32) for out_channels=32");
  c = Conv2dConfiguration::with_random_weights(8, 8, 16, 32, 1, {3, 3});
  c.sharding_strategy = HeightShardedStrategyConfiguration{.act_block_h_override = 48};
  EXPECT_EQ(c.validate().message(), "Config Error: act_block_h_override must be a multiple of 32 (tile height).");
  c.sharding_strategy = AutoShardedStrategyConfiguration{};
  c.slice_strategy = ChannelSliceStrategyConfiguration{1};
  EXPECT_EQ(c.validate().message(), "Channel slicing requires num_slices > 1");
  auto dev = open("cpu");
  EXPECT_EQ(Conv2d::create(c, dev).status().message(), "Channel slicing requires num_slices > 1");

  MaxPool2dConfiguration p{.input_height = 8, .input_width = 8, .channels = 32, .batch_size = 1,
                           .kernel_size = {2, 2}, .stride = {2, 2}, .slice_strategy = HeightSliceStrategyConfiguration{}};
  EXPECT_EQ(p.validate().message(),
            "Height and Width slicing are not supported for MaxPool2d. Only channel slicing is supported.");
  p.slice_strategy = ChannelSliceStrategyConfiguration{3};
  EXPECT_EQ(p.validate().message(), "Number of channels (32) must be divisible by number of slices (3)");
  UpsampleConfiguration u{.input_height = 8, .input_width = 8, .channels = 32, .batch_size = 1, .mode = "bicubic"};
  EXPECT_EQ(u.validate().message(), "Mode must be one of {'nearest', 'bilinear'}, got 'bicubic'");
  u.mode = "nearest";
  u.slice_strategy = WidthSliceStrategyConfiguration{};
  EXPECT_EQ(u.validate().message(),
            "Height and Width slicing are not supported for Upsample. Only channel slicing is supported.");
}

TEST(Builder, L1ThatDoesNotFitFailsOnWormhole) {
  auto dev = open("wormhole_b0");
  Conv2dConfiguration c = Conv2dConfiguration::with_random_weights(480, 640, 32, 32, 1, {3, 3});
  c.padding = {1, 1};
  c.slice_strategy = L1FullSliceStrategyConfiguration{};
  ASSERT_OK_AND_ASSIGN(CoreRangeSet four, get_core_grid_from_num_cores(4, 8, 8));
  c.sharding_strategy = HeightShardedStrategyConfiguration{.override_core_grid = four, .act_block_h_override = 32};
  ASSERT_OK_AND_ASSIGN(Conv2d conv, Conv2d::create(c, dev));
  ASSERT_OK_AND_ASSIGN(RandomInput in, create_random_input_tensor({.input_channels = 32, .input_height = 480,
                                                                   .input_width = 640, .pad = false, .device = dev}));
  Status s = conv(in.input).status();
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("Statically allocated circular buffers on core range [(x=0,y=0) - (x=3,y=0)]"));
  // On 64 cores the same layer fits.
  c.sharding_strategy = HeightShardedStrategyConfiguration{.act_block_h_override = 32};
  ASSERT_OK_AND_ASSIGN(Conv2d wide, Conv2d::create(c, dev));
  EXPECT_OK(wide(in.input).status());
}

TEST(Builder, CoreGridFromNumCores) {
  ASSERT_OK_AND_ASSIGN(CoreRangeSet one, get_core_grid_from_num_cores(1, 8, 8));
  EXPECT_EQ(one.num_cores(), 1u);
  ASSERT_OK_AND_ASSIGN(CoreRangeSet s63, get_core_grid_from_num_cores(63, 8, 8));
  EXPECT_EQ(s63.num_cores(), 63u);
  EXPECT_EQ(s63.ranges().size(), 2u);
  EXPECT_FALSE(get_core_grid_from_num_cores(65, 8, 8).ok());
}

TEST(Testing, CompPccRules) {
  const float nan = std::nanf(""), inf = INFINITY;
  std::vector<float> a{1, 2, 3, 4}, b{1, 2, 3, 5};
  auto r = comp_pcc(a, a);
  EXPECT_TRUE(r.passed);
  EXPECT_EQ(r.pcc, 1.0);
  r = comp_pcc(a, b, 0.99);
  EXPECT_NEAR(r.pcc, 0.9827076298239907, 1e-12);  // numpy.corrcoef
  EXPECT_FALSE(r.passed);
  std::vector<float> nans{nan, nan, nan, nan}, zeros{0, 0, 0, 0};
  EXPECT_TRUE(comp_pcc(nans, nans).passed);
  r = comp_pcc(nans, a);
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.pcc, 0.0);
  r = comp_pcc(zeros, a);
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.pcc, 0.0);
  EXPECT_TRUE(comp_pcc(zeros, zeros).passed);
  // NaN and inf count as zero once past the all-NaN and all-zero rules.
  std::vector<float> with_inf{1, 2, inf, 4}, with_zero{1, 2, 0, 4};
  EXPECT_EQ(comp_pcc(with_inf, with_zero).pcc, 1.0);
  // A constant tensor has no correlation: numpy masks it, the rule passes it.
  std::vector<float> ones{1, 1, 1, 1};
  EXPECT_TRUE(comp_pcc(ones, a).passed);
  // A bfloat16 golden rounds the calculated values first.
  std::vector<float> g{1.0f, 2.0f, 3.0f}, c{1.001f, 2.0f, 3.0f};
  EXPECT_EQ(comp_pcc(g, c, 0.99, DataType::BFLOAT16).pcc, 1.0);
  ASSERT_OK_AND_ASSIGN(Tensor ta, Tensor::from_vector(a, Shape{2, 2}, DataType::FLOAT32));
  ASSERT_OK_AND_ASSIGN(Tensor tb, Tensor::from_vector(b, Shape{4}, DataType::FLOAT32));
  EXPECT_EQ(assert_with_pcc(ta, tb).status().code(), StatusCode::kInvalidArgument);
  ASSERT_OK_AND_ASSIGN(Tensor tc, Tensor::from_vector(b, Shape{2, 2}, DataType::FLOAT32));
  Status low = assert_with_pcc(ta, tc).status();
  EXPECT_EQ(low.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(low.message(), HasSubstr("PCC 0.982708 is below the required 0.9999"));
}

TEST(Testing, RandomInputTensors) {
  ASSERT_OK_AND_ASSIGN(RandomInput last, create_random_input_tensor({.batch = 2, .input_channels = 3,
                                                                     .input_height = 4, .input_width = 5}));
  EXPECT_EQ(last.reference.shape(), (Shape{2, 3, 4, 5}));
  EXPECT_EQ(last.input.shape(), (Shape{2, 1, 20, 16}));  // padded to 16, NHWC, folded
  EXPECT_EQ(last.input.dtype(), DataType::BFLOAT16);
  ASSERT_OK_AND_ASSIGN(std::vector<float> ref, last.reference.to_vector());
  ASSERT_OK_AND_ASSIGN(std::vector<float> in, last.input.to_vector());
  // Element (n=1, c=2, h=3, w=4) lands at row 3*5+4 of batch 1, channel 2; padding is 0.
  EXPECT_EQ(in[(1 * 20 + 19) * 16 + 2], round_to_bfloat16(ref[((1 * 3 + 2) * 4 + 3) * 5 + 4]));
  EXPECT_EQ(in[(1 * 20 + 19) * 16 + 7], 0.0f);
  auto dev = open("cpu");
  ASSERT_OK_AND_ASSIGN(RandomInput first,
                       create_random_input_tensor({.input_channels = 3, .input_height = 4, .input_width = 5,
                                                   .channel_order = ChannelOrder::FIRST, .pad = false, .device = dev}));
  EXPECT_EQ(first.input.shape(), (Shape{1, 1, 3, 20}));
  EXPECT_TRUE(first.input.is_on_device());
}

TEST(Testing, DevicePerfTestMeasuresKernelTime) {
  auto dev = open("cpu");
  Conv2dConfiguration c = Conv2dConfiguration::with_random_weights(32, 32, 32, 32, 1, {3, 3});
  c.padding = {1, 1};
  c.output_layout = Layout::ROW_MAJOR;
  ASSERT_OK_AND_ASSIGN(Conv2d conv, Conv2d::create(c, dev));
  ASSERT_OK_AND_ASSIGN(RandomInput in, create_random_input_tensor({.input_channels = 32, .input_height = 32,
                                                                   .input_width = 32, .pad = false, .device = dev}));
  ASSERT_OK(conv(in.input).status());  // prepares weights outside the measurement
  DevicePerformanceTestConfiguration cfg{.model_name = "conv",
                                         .test_command = [&]() -> Status {
                                           for (int i = 0; i < 4; ++i) TS_RETURN_IF_ERROR(conv(in.input).status());
                                           return ok_status();
                                         },
                                         .device = dev,
                                         .batch_size = 1,
                                         .expected_throughput_fps = 1e12,
                                         .num_iterations = 4};
  Status slow = run_device_perf_test(cfg).status();
  EXPECT_EQ(slow.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(slow.message(), HasSubstr("AVG DEVICE KERNEL SAMPLES/S = "));
  // A margin that accepts anything: the numbers are consistent.
  cfg.margin = 1e30;
  ASSERT_OK_AND_ASSIGN(DevicePerformanceResult r, run_device_perf_test(cfg));
  EXPECT_TRUE(r.passed);
  const double fps = r.post_processed_results.at("AVG DEVICE KERNEL SAMPLES/S");
  const double ns = r.post_processed_results.at("AVG DEVICE KERNEL DURATION [ns]");
  EXPECT_GT(fps, 0);
  EXPECT_NEAR(fps * ns, 1e9, 1e-3);
  EXPECT_EQ(r.post_processed_results.at("NUM OPS PER ITERATION"), 1.0);
}

}  // namespace
}  // namespace tessera::cnn

namespace tessera::cnn {
namespace {

TEST(Builder, ErrorPathsOfLayersAndPerfTest) {
  Conv2dConfiguration c = Conv2dConfiguration::with_random_weights(8, 8, 16, 32, 1, {3, 3});
  EXPECT_EQ(Conv2d::create(c, nullptr).status().message(), "Conv2d: expected a device, got none");
  auto dev = open("cpu");
  Conv2dConfiguration on_device = c;
  on_device.weight = to_device(c.weight, *dev).value();
  EXPECT_THAT(Conv2d::create(on_device, dev).status().message(), HasSubstr("expected host weight and bias tensors"));
  MaxPool2dConfiguration p{.input_height = 8, .input_width = 8, .channels = 32, .batch_size = 1, .kernel_size = {2, 2}};
  EXPECT_EQ(MaxPool2d::create(p, nullptr).status().message(), "MaxPool2d: expected a device, got none");
  p.slice_strategy = L1FullSliceStrategyConfiguration{};
  EXPECT_THAT(p.validate().message(), HasSubstr("Only channel slicing is supported"));
  UpsampleConfiguration u{.input_height = 8, .input_width = 0, .channels = 32, .batch_size = 1};
  EXPECT_THAT(u.validate().message(), HasSubstr("sizes and scale factors must be > 0"));
  u.input_width = 8;
  EXPECT_EQ(Upsample::create(u, nullptr).status().message(), "Upsample: expected a device, got none");

  DevicePerformanceTestConfiguration perf{.model_name = "m"};
  EXPECT_THAT(run_device_perf_test(perf).status().message(), HasSubstr("expected a device and a test command"));
  perf.device = dev;
  perf.test_command = [] { return ok_status(); };
  EXPECT_THAT(run_device_perf_test(perf).status().message(), HasSubstr("expected num_iterations >= 1"));
  perf.expected_throughput_fps = 10;
  Status nothing = run_device_perf_test(perf).status();
  EXPECT_EQ(nothing.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(nothing.message(), HasSubstr("the test command launched nothing on the device"));
  perf.test_command = [] { return invalid_argument_error("the model failed"); };
  EXPECT_EQ(run_device_perf_test(perf).status().message(), "the model failed");
}

}  // namespace
}  // namespace tessera::cnn
