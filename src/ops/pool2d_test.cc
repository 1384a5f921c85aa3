// max_pool2d against its reference kernel, bit for bit (max selects an input
// value: no rounding), over shapes, dtypes, memory configs and ISA paths.
#include "tessera/ops/reference.h"
#include "tessera/ops/pool2d.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "tessera/base/cpu_features.h"
#include "test_util.h"

namespace tessera {
namespace {

Pool2dParams pool(uint32_t n, uint32_t h, uint32_t w, uint32_t c, uint32_t k, uint32_t s, uint32_t pad = 0,
                  uint32_t d = 1, bool ceil_mode = false) {
  Pool2dParams p;
  p.batch_size = n;
  p.input_height = h;
  p.input_width = w;
  p.channels = c;
  p.kernel_size = {k, k};
  p.stride = {s, s};
  p.padding = {pad, pad};
  p.dilation = {d, d};
  p.ceil_mode = ceil_mode;
  return p;
}

std::vector<float> run_device(Device& dev, const std::vector<float>& x, const Pool2dParams& p, DataType dt,
                              const MemoryConfig& mc = DRAM_MEMORY_CONFIG) {
  Tensor h = Tensor::from_vector(x, Shape{p.batch_size, p.input_height, p.input_width, p.channels}, dt).value();
  Tensor d = to_device(h, dev, mc).value();
  return max_pool2d(d, p).value().cpu().value().to_vector().value();
}

TEST(MaxPool2d, HandComputed) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  std::vector<float> x(16);
  for (int i = 0; i < 16; ++i) x[static_cast<size_t>(i)] = static_cast<float>(i);
  EXPECT_EQ(run_device(*dev, x, pool(1, 4, 4, 1, 2, 2), DataType::FLOAT32), (std::vector<float>{5, 7, 13, 15}));
  // ceil_mode on 5x5: 3x3 output, the last windows are partial.
  std::vector<float> y(25);
  for (int i = 0; i < 25; ++i) y[static_cast<size_t>(i)] = static_cast<float>(i);
  auto p = pool(1, 5, 5, 1, 2, 2, 0, 1, true);
  EXPECT_EQ(p.output_height(), 3u);
  EXPECT_EQ(run_device(*dev, y, p, DataType::FLOAT32), (std::vector<float>{6, 8, 9, 16, 18, 19, 21, 23, 24}));
  // Padding never wins, even over negative values.
  auto pp = pool(1, 2, 2, 1, 3, 1, 1);
  EXPECT_EQ(run_device(*dev, {-4, -3, -2, -1}, pp, DataType::FLOAT32), (std::vector<float>{-1, -1, -1, -1}));
  // ceil_mode never starts a window in the trailing padding (PyTorch's rule).
  EXPECT_EQ(pool(1, 4, 4, 1, 2, 2, 1, 1, true).output_height(), 3u);
  EXPECT_EQ(pool(1, 3, 3, 1, 3, 2, 0, 1, true).output_height(), 1u);
}

TEST(MaxPool2d, NanPropagatesAndTiesKeepTheFirst) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  for (KernelIsa isa : {KernelIsa::kAvx512, KernelIsa::kAvx2, KernelIsa::kScalar}) {
    set_kernel_isa_limit(isa);
    const std::string_view isa_name = kernel_isa_name(kernel_isa());
    auto p = pool(1, 2, 2, 2, 2, 2);
    auto out = run_device(*dev, {1, -0.0f, NAN, 0.0f, 3, -0.0f, 2, 0.0f}, p, DataType::FLOAT32);
    EXPECT_TRUE(std::isnan(out[0])) << isa_name;
    EXPECT_TRUE(std::signbit(out[1])) << isa_name;  // -0 came first
  }
  set_avx512_kernels_enabled(true);
}

// NaN, infinities and signed zeros sprinkled over random values, through
// windows inside the image and at its borders (3x3/2 with padding, 2x2/2,
// 3x3/1 dilated): bit for bit the reference's choice (NaN wins, the first of
// equal values is kept) on every ISA path, float32 and bfloat16. A window
// holding an infinity takes the kernels' exact path too.
TEST(MaxPool2d, SpecialValuesMatchTheReference) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  for (const Pool2dParams& p : {pool(2, 23, 21, 67, 3, 2, 1), pool(1, 16, 18, 40, 2, 2), pool(1, 15, 14, 20, 3, 1, 1, 2)}) {
    for (DataType dt : {DataType::FLOAT32, DataType::BFLOAT16}) {
      const Shape shape{p.batch_size, p.input_height, p.input_width, p.channels};
      std::vector<float> x = testing::random_values(shape.volume(), 5);
      const float special[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f};
      for (size_t i = 0; i < x.size(); i += 7 + i % 13) x[i] = special[i % 6];
      ASSERT_OK_AND_ASSIGN(Tensor h, Tensor::from_vector(x, shape, dt));
      ASSERT_OK_AND_ASSIGN(Tensor ref, reference::max_pool2d(h, p, dt));
      for (KernelIsa isa : {KernelIsa::kAvx512, KernelIsa::kAvx2, KernelIsa::kScalar}) {
        set_kernel_isa_limit(isa);
        SCOPED_TRACE(fmt::format("{} {} isa={}", p.descriptor(), data_type_name(dt), kernel_isa_name(kernel_isa())));
        ASSERT_OK_AND_ASSIGN(Tensor d, to_device(h, *dev));
        ASSERT_OK_AND_ASSIGN(Tensor out, max_pool2d(d, p));
        ASSERT_OK_AND_ASSIGN(Tensor got, out.cpu());
        EXPECT_EQ(testing::host_bytes(got), testing::host_bytes(ref));
      }
      set_avx512_kernels_enabled(true);
    }
  }
}

// The AVX-512 kernel compares bfloat16 maxima as integers, 32 channels at a
// time (+0 above -0, NaNs past the infinities), and sends the windows where
// that would differ from the reference to its exact path: a NaN of either
// sign, or a max of +0 with a -0 in the window (equal numbers, of which the
// reference keeps the first). The exceptions are sparse, one channel of a
// few pixels, so that most windows take the integer path and some do not.
// Every eighth channel is negative, so that its windows' max is often a
// zero. 96 channels: two vectors, then one, no float32 tail.
TEST(MaxPool2d, BfloatSignedZerosAndNansOnTheIntegerPath) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  const Pool2dParams p = pool(2, 17, 19, 96, 3, 2, 1);
  const Shape shape{2, 17, 19, 96};
  std::vector<float> x = testing::random_values(shape.volume(), 11);
  for (size_t i = 0; i < x.size(); ++i)
    if (i % 8 == 5) x[i] = -1.0f - std::fabs(x[i]);
  // Two quiet NaNs of positive sign, whose bits differ (the first wins).
  const float special[] = {0.0f, -0.0f, NAN, -NAN, std::bit_cast<float>(0x7fe00000u), INFINITY, -INFINITY};
  for (size_t px = 0, k = 0; px < x.size() / 96; ++px) {
    const size_t r = px * 2654435761u >> 9;
    if (r % 2 == 0) x[px * 96 + (r / 2 % 3) * 32 + 5] = special[r / 6 % 2];  // a zero in a negative channel
    if (r % 23 == 1) x[px * 96 + r / 23 % 96] = special[2 + k++ % 5];
  }
  // One window (image 1, output pixel (0, 1)) whose only exceptions are the
  // two positive NaNs, in one channel: both key above +inf.
  for (size_t y = 0; y < 5; ++y)
    for (size_t xx = 0; xx < 5; ++xx)
      for (size_t c = 0; c < 96; ++c) {
        float& v = x[((17 + y) * 19 + xx) * 96 + c];
        if (std::isnan(v) || std::isinf(v) || v == 0) v = c % 8 == 5 ? -2.0f : 0.5f;
      }
  x[((17 + 1) * 19 + 1) * 96 + 40] = NAN;
  x[((17 + 1) * 19 + 2) * 96 + 40] = special[4];
  ASSERT_OK_AND_ASSIGN(Tensor h, Tensor::from_vector(x, shape, DataType::BFLOAT16));
  ASSERT_OK_AND_ASSIGN(Tensor ref, reference::max_pool2d(h, p, DataType::BFLOAT16));
  std::vector<float> want = ref.to_vector().value();
  auto count = [&](auto pred) { return std::count_if(want.begin(), want.end(), pred); };
  EXPECT_GT(count([](float v) { return v == 0 && std::signbit(v); }), 10);
  EXPECT_GT(count([](float v) { return v == 0 && !std::signbit(v); }), 10);
  EXPECT_GT(count([](float v) { return std::isnan(v) && std::signbit(v); }), 3);
  EXPECT_GT(count([](float v) { return std::isnan(v) && !std::signbit(v); }), 3);
  for (KernelIsa isa : {KernelIsa::kAvx512, KernelIsa::kAvx2, KernelIsa::kScalar}) {
    set_kernel_isa_limit(isa);
    SCOPED_TRACE(kernel_isa_name(kernel_isa()));
    ASSERT_OK_AND_ASSIGN(Tensor d, to_device(h, *dev));
    ASSERT_OK_AND_ASSIGN(Tensor out, max_pool2d(d, p));
    ASSERT_OK_AND_ASSIGN(Tensor got, out.cpu());
    EXPECT_EQ(testing::host_bytes(got), testing::host_bytes(ref));
  }
  set_avx512_kernels_enabled(true);
}

struct Case {
  Pool2dParams p;
};

TEST(MaxPool2d, MatchesReferenceEverywhere) {
  ASSERT_OK_AND_ASSIGN(auto cpu, open_device({}));
  ASSERT_OK_AND_ASSIGN(auto wh, open_device({.descriptor = "wormhole_b0"}));
  const Pool2dParams cases[] = {
      pool(1, 8, 8, 32, 2, 2),          pool(2, 7, 9, 5, 2, 2),           pool(1, 13, 11, 37, 3, 2, 1),
      pool(1, 12, 12, 16, 3, 1, 1, 2),  pool(1, 17, 15, 3, 3, 2, 1, 1, true), pool(1, 6, 6, 1100, 2, 2),
      pool(1, 1, 1, 8, 1, 1),           pool(2, 9, 10, 83, 3, 2, 1),      pool(1, 5, 6, 128, 3, 2, 1),
  };
  for (KernelIsa isa : {KernelIsa::kAvx512, KernelIsa::kAvx2, KernelIsa::kScalar}) {
    set_kernel_isa_limit(isa);
    const std::string_view isa_name = kernel_isa_name(kernel_isa());
    for (const Pool2dParams& p : cases)
      for (DataType dt : {DataType::FLOAT32, DataType::BFLOAT16}) {
        SCOPED_TRACE(fmt::format("{} {} isa={}", p.descriptor(), data_type_name(dt), isa_name));
        Tensor h = testing::random_tensor(Shape{p.batch_size, p.input_height, p.input_width, p.channels}, dt,
                                          Layout::ROW_MAJOR, 3);
        ASSERT_OK_AND_ASSIGN(Tensor ref, reference::max_pool2d(h, p, dt));
        for (Device* dev : {cpu.get(), wh.get()})
          for (const MemoryConfig& mc : {DRAM_MEMORY_CONFIG, L1_MEMORY_CONFIG}) {
            ASSERT_OK_AND_ASSIGN(Tensor d, to_device(h, *dev, mc));
            ASSERT_OK_AND_ASSIGN(Tensor out, max_pool2d(d, p));
            EXPECT_EQ(out.memory_config(), mc);
            ASSERT_OK_AND_ASSIGN(Tensor got, out.cpu());
            ASSERT_EQ(testing::host_bytes(got), testing::host_bytes(ref)) << dev->descriptor().name;
          }
      }
  }
  set_avx512_kernels_enabled(true);
  // Height-sharded input (one pixel row of 8 pixels per core on 8 cores).
  auto p = pool(1, 8, 8, 32, 2, 2);
  Tensor h = testing::random_tensor(Shape{1, 8, 8, 32}, DataType::BFLOAT16, Layout::ROW_MAJOR, 4);
  MemoryConfig hs{TensorMemoryLayout::HEIGHT_SHARDED, BufferType::L1,
                  ShardSpec{CoreRange({0, 0}, {7, 0}), {8, 32}, ShardOrientation::ROW_MAJOR}};
  ASSERT_OK_AND_ASSIGN(Tensor d, to_device(h, *wh, hs));
  ASSERT_OK_AND_ASSIGN(Tensor out, max_pool2d(d, p));
  EXPECT_EQ(out.memory_config(), DRAM_MEMORY_CONFIG);
  ASSERT_OK_AND_ASSIGN(Tensor ref, reference::max_pool2d(h, p, DataType::BFLOAT16));
  EXPECT_EQ(testing::host_bytes(out.cpu().value()), testing::host_bytes(ref));
}

TEST(MaxPool2d, Errors) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  Tensor h = testing::random_tensor(Shape{1, 4, 4, 8}, DataType::FLOAT32, Layout::ROW_MAJOR, 1);
  ASSERT_OK_AND_ASSIGN(Tensor d, to_device(h, *dev));
  EXPECT_ERROR(max_pool2d(d, pool(1, 4, 4, 8, 2, 2, 2)), StatusCode::kInvalidArgument, "at most half the kernel");
  EXPECT_ERROR(max_pool2d(d, pool(1, 4, 4, 7, 2, 2)), StatusCode::kInvalidArgument, "expected input (1,4,4,7)");
  EXPECT_ERROR(max_pool2d(d, pool(1, 4, 4, 8, 5, 1)), StatusCode::kInvalidArgument, "does not fit");
  EXPECT_ERROR(max_pool2d(h, pool(1, 4, 4, 8, 2, 2)), StatusCode::kInvalidArgument, "must be a device tensor");
  MemoryConfig ws{TensorMemoryLayout::WIDTH_SHARDED, BufferType::L1,
                  ShardSpec{CoreRange({0, 0}, {1, 0}), {16, 4}, ShardOrientation::ROW_MAJOR}};
  ASSERT_OK_AND_ASSIGN(Tensor w, to_device(h, *dev, ws));
  EXPECT_ERROR(max_pool2d(w, pool(1, 4, 4, 8, 2, 2)), StatusCode::kUnimplemented, "channels must be contiguous");
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// avg_pool2d and global_avg_pool2d: float32 sums against the double
// reference, within 1e-5 relative + 1e-6 absolute (one ulp in bfloat16).
TEST(AvgPool2d, MatchesReference) {
  ASSERT_OK_AND_ASSIGN(auto cpu, open_device({}));
  ASSERT_OK_AND_ASSIGN(auto wh, open_device({.descriptor = "wormhole_b0"}));
  std::vector<Pool2dParams> cases = {pool(1, 8, 8, 32, 2, 2), pool(2, 7, 9, 5, 3, 2, 1), pool(1, 13, 11, 37, 3, 1, 1),
                                     pool(1, 17, 15, 3, 3, 2, 1, 1, true), pool(1, 6, 6, 1100, 2, 2),
                                     pool(1, 7, 7, 64, 7, 7), pool(2, 9, 10, 83, 3, 2, 1)};
  Pool2dParams exclude = pool(1, 9, 9, 16, 3, 2, 1);
  exclude.count_include_pad = false;
  cases.push_back(exclude);
  for (KernelIsa isa : {KernelIsa::kAvx512, KernelIsa::kAvx2, KernelIsa::kScalar}) {
    set_kernel_isa_limit(isa);
    const std::string_view isa_name = kernel_isa_name(kernel_isa());
    for (const Pool2dParams& p : cases)
      for (DataType dt : {DataType::FLOAT32, DataType::BFLOAT16}) {
        SCOPED_TRACE(fmt::format("{} {} isa={}", p.descriptor("avg_pool2d"), data_type_name(dt), isa_name));
        Tensor h = testing::random_tensor(Shape{p.batch_size, p.input_height, p.input_width, p.channels}, dt,
                                          Layout::ROW_MAJOR, 3);
        ASSERT_OK_AND_ASSIGN(Tensor ref, reference::avg_pool2d(h, p, dt));
        for (Device* dev : {cpu.get(), wh.get()}) {
          ASSERT_OK_AND_ASSIGN(Tensor d, to_device(h, *dev, L1_MEMORY_CONFIG));
          ASSERT_OK_AND_ASSIGN(Tensor out, avg_pool2d(d, p));
          testing::expect_allclose(out.cpu().value(), ref, testing::rounding_tolerance(dt, 1e-5), 1e-6);
        }
      }
  }
  set_avx512_kernels_enabled(true);
}

// NaN, infinities, -0.0 and denormals through the average pools: a window
// holding a NaN (or both infinities) averages to NaN, one infinity to it, as
// the reference's sums do, on every kernel set.
TEST(AvgPool2d, SpecialValuesAsTheReference) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  const Pool2dParams p = pool(2, 9, 10, 83, 3, 2, 1);
  const Shape shape{p.batch_size, p.input_height, p.input_width, p.channels};
  std::vector<float> v = testing::random_values(shape.volume(), 6, 2.0f);
  testing::add_special_values(v, 2, 173);
  Tensor h = Tensor::from_vector(v, shape, DataType::FLOAT32).value();
  ASSERT_OK_AND_ASSIGN(Tensor ref, reference::avg_pool2d(h, p, DataType::FLOAT32));
  ASSERT_OK_AND_ASSIGN(Tensor gref, reference::global_avg_pool2d(h, DataType::FLOAT32));
  for (KernelIsa isa : {KernelIsa::kAvx512, KernelIsa::kAvx2, KernelIsa::kScalar}) {
    set_kernel_isa_limit(isa);
    SCOPED_TRACE(kernel_isa_name(kernel_isa()));
    ASSERT_OK_AND_ASSIGN(Tensor d, to_device(h, *dev));
    ASSERT_OK_AND_ASSIGN(Tensor out, avg_pool2d(d, p));
    testing::expect_allclose(out.cpu().value(), ref, 1e-5, 1e-6);
    ASSERT_OK_AND_ASSIGN(Tensor g, global_avg_pool2d(d));
    testing::expect_allclose(g.cpu().value(), gref, 1e-5, 1e-6);
  }
  set_kernel_isa_limit(KernelIsa::kAvx512);
}

TEST(AvgPool2d, HandComputedDivisors) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  // 2x2 input of ones, 3x3 window, padding 1: 4 real pixels in 9 positions.
  auto p = pool(1, 2, 2, 1, 3, 1, 1);
  ASSERT_OK_AND_ASSIGN(Tensor d, to_device(Tensor::from_vector({1, 1, 1, 1}, Shape{1, 2, 2, 1}, DataType::FLOAT32).value(),
                                           *dev));
  ASSERT_OK_AND_ASSIGN(Tensor a, avg_pool2d(d, p));
  EXPECT_EQ(a.cpu().value().to_vector().value(), (std::vector<float>(4, 4.0f / 9.0f)));
  p.count_include_pad = false;
  ASSERT_OK_AND_ASSIGN(Tensor b, avg_pool2d(d, p));
  EXPECT_EQ(b.cpu().value().to_vector().value(), (std::vector<float>(4, 1.0f)));
  p.dilation = {2, 2};
  EXPECT_ERROR(avg_pool2d(d, p), StatusCode::kInvalidArgument, "avg_pool2d: dilation must be 1x1");
}

TEST(GlobalAvgPool2d, MatchesReference) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  for (KernelIsa isa : {KernelIsa::kAvx512, KernelIsa::kAvx2, KernelIsa::kScalar}) {
    set_kernel_isa_limit(isa);
    const std::string_view isa_name = kernel_isa_name(kernel_isa());
    for (const Shape& s : {Shape{1, 7, 7, 2048}, Shape{2, 3, 5, 37}, Shape{8, 1, 1, 16}, Shape{1, 14, 14, 1300},
                            Shape{1, 7, 7, 1280}, Shape{1, 2, 2, 100}, Shape{3, 3, 3, 2048}, Shape{2, 2, 3, 4100}})
      for (DataType dt : {DataType::FLOAT32, DataType::BFLOAT16}) {
        SCOPED_TRACE(fmt::format("{} {} isa={}", s.to_string(), data_type_name(dt), isa_name));
        Tensor h = testing::random_tensor(s, dt, Layout::ROW_MAJOR, 4);
        ASSERT_OK_AND_ASSIGN(Tensor ref, reference::global_avg_pool2d(h, dt));
        ASSERT_OK_AND_ASSIGN(Tensor d, to_device(h, *dev));
        ASSERT_OK_AND_ASSIGN(Tensor out, global_avg_pool2d(d));
        EXPECT_EQ(out.shape(), (Shape{s[0], 1, 1, s[3]}));
        testing::expect_allclose(out.cpu().value(), ref, testing::rounding_tolerance(dt, 1e-5), 1e-6);
      }
  }
  set_avx512_kernels_enabled(true);
  // AVX-512, evenly spaced rows (DRAM) sum each vector in a register; rows
  // spread over the L1 banks take the per-pixel accumulate path. The sums
  // are the same, bit for bit.
  set_kernel_isa_limit(KernelIsa::kAvx512);
  for (const Shape& s : {Shape{1, 7, 7, 2048}, Shape{2, 3, 5, 37}, Shape{2, 2, 3, 4100}})
    for (DataType dt : {DataType::FLOAT32, DataType::BFLOAT16}) {
      SCOPED_TRACE(fmt::format("{} {}", s.to_string(), data_type_name(dt)));
      Tensor h = testing::random_tensor(s, dt, Layout::ROW_MAJOR, 5);
      ASSERT_OK_AND_ASSIGN(Tensor in_dram, to_device(h, *dev, DRAM_MEMORY_CONFIG));
      ASSERT_OK_AND_ASSIGN(Tensor in_l1, to_device(h, *dev, L1_MEMORY_CONFIG));
      ASSERT_OK_AND_ASSIGN(Tensor a, global_avg_pool2d(in_dram));
      ASSERT_OK_AND_ASSIGN(Tensor b, global_avg_pool2d(in_l1));
      EXPECT_EQ(testing::host_bytes(a.cpu().value()), testing::host_bytes(b.cpu().value()));
    }
  ASSERT_OK_AND_ASSIGN(Tensor flat, to_device(testing::random_tensor(Shape{4, 8}, DataType::FLOAT32,
                                                                      Layout::ROW_MAJOR, 1), *dev));
  EXPECT_ERROR(global_avg_pool2d(flat), StatusCode::kInvalidArgument, "expected an (N, H, W, C) input, found [4,8]");
}

}  // namespace
}  // namespace tessera
