// The whole Vanilla UNet built with the builder, against a reference built
// from Tessera's reference kernels with the batch norms unfolded (conv ->
// batch_norm -> relu, float32 between ops), from the same state dict:
// PCC >= 0.9999 all-float32 on the CPU descriptor, >= 0.977 (the original's
// threshold) with the original's mixed bfloat8_b table on wormhole_b0. The
// comparison with ONNX Runtime at 480x640 is bench/unet_vs_ort.sh.
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>

#include <filesystem>
#include <fstream>

#include "tessera/cnn/testing.h"
#include "tessera/import/onnx.h"
#include "tessera/import/onnx_weights.h"
#include "tessera/ops/conv_transpose2d.h"
#include "tessera/ops/manipulation.h"
#include "tessera/ops/normalization.h"
#include "tessera/ops/pool2d.h"
#include "tessera/ops/reference.h"
#include "test_util.h"
#include "vanilla_unet/reference_onnx.h"
#include "vanilla_unet/unet.h"

namespace tessera::models {
namespace {

constexpr uint32_t kH = 32, kW = 48;

// The reference model on host tensors: NHWC in, (1, 1, H*W, 1) out.
StatusOr<Tensor> reference_unet(const cnn::WeightMap& sd, const Tensor& x_nhwc) {
  const DataType f32 = DataType::FLOAT32;
  auto block = [&](Tensor x, const std::string& module, const std::string& prefix, uint32_t h, uint32_t w)
      -> StatusOr<Tensor> {
    for (int i = 1; i <= 2; ++i) {
      const Tensor& wt = sd.at(fmt::format("{}.{}conv{}.weight", module, prefix, i));
      Conv2dParams p;
      p.input_height = h, p.input_width = w, p.in_channels = wt.shape()[1], p.out_channels = wt.shape()[0];
      p.with_padding(1, 1);
      TS_ASSIGN_OR_RETURN(Tensor y, reference::conv2d(x, wt, std::nullopt, p, f32));
      const std::string n = fmt::format("{}.{}norm{}", module, prefix, i);
      TS_ASSIGN_OR_RETURN(y, reference::batch_norm(y, sd.at(n + ".running_mean"), sd.at(n + ".running_var"),
                                                   {.weight = sd.at(n + ".weight"), .bias = sd.at(n + ".bias")}, f32));
      TS_ASSIGN_OR_RETURN(std::vector<float> v, y.to_vector());
      for (float& e : v) e = std::max(e, 0.0f);
      TS_ASSIGN_OR_RETURN(x, Tensor::from_vector(v, Shape{1, h, w, p.out_channels}, f32));
    }
    return x;
  };
  Tensor x = x_nhwc, skips[4];
  uint32_t h = kH, w = kW;
  for (int i = 1; i <= 4; ++i) {
    TS_ASSIGN_OR_RETURN(x, block(x, fmt::format("encoder{}", i), fmt::format("enc{}", i), h, w));
    skips[i - 1] = x;
    Pool2dParams p{.batch_size = 1, .input_height = h, .input_width = w, .channels = x.shape()[3]};
    TS_ASSIGN_OR_RETURN(x, reference::max_pool2d(x, p, f32));
    h /= 2, w /= 2;
    TS_ASSIGN_OR_RETURN(x, x.view(Shape{1, h, w, p.channels}));
  }
  TS_ASSIGN_OR_RETURN(x, block(x, "bottleneck", "bottleneck", h, w));
  for (int i = 4; i >= 1; --i) {
    const Tensor& wt = sd.at(fmt::format("upconv{}.weight", i));
    ConvTranspose2dParams p;
    p.input_height = h, p.input_width = w, p.in_channels = wt.shape()[0], p.out_channels = wt.shape()[1];
    TS_ASSIGN_OR_RETURN(x, reference::conv_transpose2d(x, wt, sd.at(fmt::format("upconv{}.bias", i)), p, f32));
    h *= 2, w *= 2;
    TS_ASSIGN_OR_RETURN(x, x.view(Shape{1, h, w, p.out_channels}));
    const Tensor pair[] = {x, skips[i - 1]};
    TS_ASSIGN_OR_RETURN(x, reference::concat(pair, 3));
    TS_ASSIGN_OR_RETURN(x, block(x, fmt::format("decoder{}", i), fmt::format("dec{}", i), h, w));
  }
  Conv2dParams p;
  p.input_height = h, p.input_width = w, p.in_channels = 32, p.out_channels = 1;
  p.kernel_size = {1, 1};
  return reference::conv2d(x, sd.at("conv.weight"), sd.at("conv.bias"), p, f32);
}

struct ModelRun {
  double pcc;
  Tensor output;
};

StatusOr<ModelRun> run_model(const std::shared_ptr<Device>& dev, UNetOptions o, const Tensor& x_nhwc, DataType in_dtype,
                             bool chw) {
  const cnn::WeightMap sd = unet_random_state_dict(5);
  o.height = kH, o.width = kW, o.state_dict = sd;
  TS_ASSIGN_OR_RETURN(auto unet, VanillaUNet::create(o, dev));
  TS_ASSIGN_OR_RETURN(std::vector<float> v, x_nhwc.to_vector());
  Tensor in;
  if (chw) {
    const int perm[] = {0, 3, 1, 2};
    TS_ASSIGN_OR_RETURN(Tensor nchw, reference::permute(x_nhwc, perm));
    TS_ASSIGN_OR_RETURN(std::vector<float> c, nchw.to_vector());
    TS_ASSIGN_OR_RETURN(in, Tensor::from_vector(c, unet->chw_input_shape(), in_dtype));
  } else {
    TS_ASSIGN_OR_RETURN(in, Tensor::from_vector(v, unet->input_shape(), in_dtype));
  }
  MemoryConfig mc = DRAM_MEMORY_CONFIG;
  if (chw) {
    TS_ASSIGN_OR_RETURN(mc, unet->l1_input_memory_config(*dev));  // as the original feeds it
  }
  TS_ASSIGN_OR_RETURN(Tensor dx, to_device(in, *dev, mc));
  TS_ASSIGN_OR_RETURN(Tensor y, (*unet)(dx));
  // Twice: the second call runs on the prepared weights and must agree.
  TS_ASSIGN_OR_RETURN(Tensor y2, (*unet)(dx));
  TS_ASSIGN_OR_RETURN(Tensor host, y.cpu());
  TS_ASSIGN_OR_RETURN(Tensor host2, y2.cpu());
  if (testing::host_bytes(host) != testing::host_bytes(host2)) return internal_error("second run differs");
  TS_ASSIGN_OR_RETURN(Tensor ref, reference_unet(sd, x_nhwc));
  TS_ASSIGN_OR_RETURN(std::vector<float> got, host.to_vector());
  TS_ASSIGN_OR_RETURN(std::vector<float> want, ref.to_vector());
  const double pcc = cnn::comp_pcc(want, got, 0.0).pcc;
  std::printf("Vanilla UNet %ux%u on %s, precision %d%s: PCC %.6f against the reference\n", kH, kW,
              dev->descriptor().name.c_str(), static_cast<int>(o.precision), o.sharded ? " (sharded)" : "", pcc);
  return ModelRun{pcc, host};
}

Tensor random_image() {
  std::vector<float> v = testing::random_values(kH * kW * 3, 9, 1.0f);
  return Tensor::from_vector(v, Shape{1, kH, kW, 3}, DataType::FLOAT32).value();
}

TEST(UNetModel, Float32MatchesTheReference) {
  ASSERT_OK_AND_ASSIGN(auto cpu, open_device({}));
  ASSERT_OK_AND_ASSIGN(ModelRun r, run_model(cpu, {.precision = UNetPrecision::FLOAT32}, random_image(), DataType::FLOAT32,
                                        false));
  EXPECT_GE(r.pcc, 0.9999);
  EXPECT_EQ(r.output.shape(), (Shape{1, 1, kH * kW, 1}));
}

TEST(UNetModel, OriginalBfloat8ConfigurationOnWormhole) {
  ASSERT_OK_AND_ASSIGN(auto wh, open_device({.descriptor = "wormhole_b0", .l1_small_size = 12 * 8192}));
  // The original's input path: channels-first rows, convert_to_hwc, ... convert_to_chw.
  ASSERT_OK_AND_ASSIGN(ModelRun r, run_model(wh, {.precision = UNetPrecision::ORIGINAL_BFLOAT8_B, .sharded = true},
                                        random_image(), DataType::BFLOAT16, true));
  EXPECT_GE(r.pcc, 0.977);
  EXPECT_EQ(r.output.shape(), (Shape{1, 1, 1, kH * kW}));
  // The original's input configs at 480x640: 64 L1 shards of 3 x 4800, 12 DRAM shards of 3 x 25600.
  ASSERT_OK_AND_ASSIGN(auto full, VanillaUNet::create({.precision = UNetPrecision::ORIGINAL_BFLOAT8_B, .sharded = true},
                                                      wh));
  ASSERT_OK_AND_ASSIGN(MemoryConfig l1, full->l1_input_memory_config(*wh));
  EXPECT_EQ(l1.shard_spec->grid.num_cores(), 64u);
  EXPECT_EQ(l1.shard_spec->shape, (std::array<uint32_t, 2>{3, 4800}));
  ASSERT_OK_AND_ASSIGN(MemoryConfig dram, full->dram_input_memory_config(*wh));
  EXPECT_EQ(dram.shard_spec->shape, (std::array<uint32_t, 2>{3, 25600}));
  ASSERT_OK_AND_ASSIGN(auto cpu, open_device({}));
  ASSERT_OK_AND_ASSIGN(ModelRun b, run_model(cpu, {.precision = UNetPrecision::BFLOAT16}, random_image(),
                                        DataType::BFLOAT16, false));
  EXPECT_GE(b.pcc, 0.999);
}

TEST(UNetModel, ErrorsNameTheLayer) {
  ASSERT_OK_AND_ASSIGN(auto wh, open_device({.descriptor = "wormhole_b0", .l1_small_size = 12 * 8192}));
  // Eight 480x640 images at once do not fit the original's L1 plan.
  ASSERT_OK_AND_ASSIGN(auto unet, VanillaUNet::create({.batch = 8, .precision = UNetPrecision::ORIGINAL_BFLOAT8_B,
                                                       .sharded = true},
                                                      wh));
  Tensor x = testing::random_tensor(unet->input_shape(), DataType::BFLOAT16, Layout::ROW_MAJOR, 1);
  ASSERT_OK_AND_ASSIGN(Tensor dx, to_device(x, *wh, DRAM_MEMORY_CONFIG));
  Status s = (*unet)(dx).status();
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), ::testing::StartsWith("Vanilla UNet layer 'encoder1.enc1conv1': Statically allocated "
                                                 "circular buffers on core range [(x=0,y=0) - (x=7,y=7)]"));
  EXPECT_EQ(VanillaUNet::create({}, nullptr).status().message(), "VanillaUNet: expected a device, got none");
  EXPECT_THAT(write_unet_onnx(unet_random_state_dict(), "/nonexistent.onnx", 1, 100, 64).message(),
              ::testing::HasSubstr("write_unet_onnx: expected batch >= 1 and height, width multiples of 16"));
  cnn::WeightMap sd = unet_random_state_dict();
  sd.erase("upconv2.bias");
  EXPECT_EQ(VanillaUNet::create({.state_dict = sd}, wh).status().message(),
            "Vanilla UNet: the state dict has no 'upconv2' weights");
}

TEST(UNetModel, OnnxExportRoundTrips) {
  const cnn::WeightMap sd = unet_random_state_dict(3);
  const std::string path =
      (std::filesystem::temp_directory_path() / fmt::format("tessera_unet_{}.onnx", ::getpid())).string();
  ASSERT_OK(write_unet_onnx(sd, path, 1, kH, kW));
  onnx::ModelProto model;
  {
    std::ifstream in(path, std::ios::binary);
    ASSERT_TRUE(model.ParseFromIstream(&in));
  }
  EXPECT_NO_THROW(onnx::checker::check_model(model));
  EXPECT_EQ(model.graph().node_size(), 18 * 3 + 4 + 4 * 2 + 1);
  ASSERT_OK_AND_ASSIGN(cnn::WeightMap back, importer::load_onnx_initializers(path));
  ASSERT_EQ(back.size(), sd.size());
  for (const auto& [name, t] : sd) {
    ASSERT_TRUE(back.count(name)) << name;
    EXPECT_EQ(testing::host_bytes(back.at(name)), testing::host_bytes(t)) << name;
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace tessera::models
