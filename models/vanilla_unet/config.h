// The Vanilla UNet's per-layer TT-CNN configurations, as the original's
// tt/config.py sets them for Wormhole (../shared/reference/tt-cnn-and-ttnn.md
// §4.2): bfloat8_b weights, height sharding with the listed act_block_h
// values, L1-full slicing, ReLU, LoFi with fp32 accumulation, bfloat8_b
// activations on the listed layers, the final 1x1 conv in bfloat16 weights at
// HiFi2 with no activation.
//
// Two other precisions share the layer table: all-float32 (the accuracy
// reference, PCC >= 0.9999) and bfloat16.
#pragma once

#include <string>
#include <vector>

#include "tessera/cnn/builder.h"
#include "tessera/cnn/weights.h"

namespace tessera::models {

enum class UNetPrecision : uint8_t { ORIGINAL_BFLOAT8_B, BFLOAT16, FLOAT32 };

struct UNetConfigOptions {
  uint32_t batch = 1, height = 480, width = 640;
  UNetPrecision precision = UNetPrecision::ORIGINAL_BFLOAT8_B;
  // true: the original's sharding and L1 slicing (for the wormhole_b0
  // descriptor); false: DRAM interleaved activations (the native CPU
  // descriptor, whose L1 is a core's cache).
  bool sharded = true;
};

struct UNetConvLayer {
  std::string name;  // "encoder1.enc1conv1", ... as the reference model's modules
  cnn::Conv2dConfiguration configuration;
};

// The 18 3x3 convs (BN folded) and the final 1x1 conv, in model order, from
// the reference model's parameters (state_dict names; BN not yet folded).
StatusOr<std::vector<UNetConvLayer>> unet_conv_configurations(const cnn::WeightMap& state_dict,
                                                              const UNetConfigOptions& options);

// The reference model's state_dict with fixed-seed random weights (conv
// weights He-normal, BN statistics and affine parameters near identity),
// under the reference model's names.
cnn::WeightMap unet_random_state_dict(uint32_t seed = 0);

}  // namespace tessera::models
