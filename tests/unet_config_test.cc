// The Vanilla UNet's per-layer configurations (§4.2): every 480x640 layer
// fits wormhole_b0's L1 with the original's block sizes, and every layer
// configuration matches the reference kernel at PCC >= 0.999.
#include "vanilla_unet/config.h"

#include "tessera/cnn/testing.h"
#include "test_util.h"

namespace tessera::models {
namespace {

TEST(UNetConfig, EveryLayerFitsWormholeL1AtFullSize) {
  ASSERT_OK_AND_ASSIGN(auto wh, open_device({.descriptor = "wormhole_b0", .l1_small_size = 12 * 8192}));
  ASSERT_OK_AND_ASSIGN(auto layers, unet_conv_configurations(unet_random_state_dict(), {}));
  ASSERT_EQ(layers.size(), 19u);
  for (const UNetConvLayer& l : layers) {
    SCOPED_TRACE(l.name);
    const cnn::Conv2dConfiguration& c = l.configuration;
    ASSERT_OK_AND_ASSIGN(cnn::RandomInput in,
                         cnn::create_random_input_tensor({.input_channels = c.in_channels,
                                                          .input_height = c.input_height,
                                                          .input_width = c.input_width,
                                                          .pad = false,
                                                          .device = wh}));
    ASSERT_OK_AND_ASSIGN(cnn::Conv2d conv, cnn::Conv2d::create(c, wh));
    ASSERT_OK_AND_ASSIGN(Tensor y, conv(in.input));
    EXPECT_EQ(y.memory_config().buffer_type, BufferType::L1);
    EXPECT_TRUE(y.memory_config().is_sharded());
    if (std::holds_alternative<cnn::HeightShardedStrategyConfiguration>(c.sharding_strategy)) {
      EXPECT_EQ(y.memory_config().memory_layout, TensorMemoryLayout::HEIGHT_SHARDED);
    }
    EXPECT_EQ(y.dtype(), c.output_dtype);
  }
  // The same table with every act_block_h four times larger does not fit:
  // the original's message, from the first layer that overflows.
  cnn::Conv2dConfiguration big = layers[1].configuration;  // encoder1.enc1conv2
  big.sharding_strategy = cnn::HeightShardedStrategyConfiguration{.act_block_h_override = 150 * 32};
  ASSERT_OK_AND_ASSIGN(cnn::RandomInput in, cnn::create_random_input_tensor({.input_channels = 32, .input_height = 480,
                                                                             .input_width = 640, .pad = false,
                                                                             .device = wh}));
  ASSERT_OK_AND_ASSIGN(cnn::Conv2d conv, cnn::Conv2d::create(big, wh));
  Status s = conv(in.input).status();
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("Statically allocated circular buffers on core range "
                                                "[(x=0,y=0) - (x=7,y=7)]"));
}

TEST(UNetConfig, EveryLayerMatchesTheReference) {
  ASSERT_OK_AND_ASSIGN(auto wh, open_device({.descriptor = "wormhole_b0", .l1_small_size = 12 * 8192}));
  ASSERT_OK_AND_ASSIGN(auto cpu, open_device({}));
  // A 32x48 image keeps the reference kernel fast; a layer's numerics do not
  // depend on the image size. float32 weights do not fit wormhole_b0's L1 in
  // the bottleneck (as on the original): the float32 table runs on the CPU
  // descriptor's DRAM configuration.
  for (UNetPrecision p : {UNetPrecision::ORIGINAL_BFLOAT8_B, UNetPrecision::FLOAT32}) {
    for (bool sharded : {true, false}) {
      if (p == UNetPrecision::FLOAT32 && sharded) continue;
      ASSERT_OK_AND_ASSIGN(auto layers, unet_conv_configurations(unet_random_state_dict(),
                                                                 {.height = 32, .width = 48, .precision = p,
                                                                  .sharded = sharded}));
      for (const UNetConvLayer& l : layers) {
        SCOPED_TRACE(fmt::format("{} precision {} sharded {}", l.name, static_cast<int>(p), sharded));
        ASSERT_OK_AND_ASSIGN(double pcc, cnn::verify_conv2d_from_config(l.configuration, sharded ? wh : cpu, 0.999));
        EXPECT_GE(pcc, p == UNetPrecision::FLOAT32 ? 0.9999 : 0.999);
      }
    }
  }
}

TEST(UNetConfig, MissingWeightsAreNamed) {
  cnn::WeightMap sd = unet_random_state_dict();
  sd.erase("decoder3.dec3norm2.running_var");
  EXPECT_EQ(unet_conv_configurations(sd, {}).status().message(),
            "Vanilla UNet: the state dict has no 'decoder3.dec3norm2.running_var'");
  EXPECT_EQ(unet_conv_configurations(unet_random_state_dict(), {.height = 100}).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera::models
