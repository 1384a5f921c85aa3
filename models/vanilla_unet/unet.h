// The Vanilla UNet (../shared/reference/tt-cnn-and-ttnn.md §4), built with the
// TT-CNN builder from the reference model's weights:
//   input   (1, 1, 3, H*W) channels-first rows, as the original feeds it
//           (convert_to_hwc), or NHWC (N, H, W, 3) / (1, 1, N*H*W, 3);
//   encoder 4 blocks of two 3x3 convs (BN folded, ReLU), the skip moved to
//           DRAM, MaxPool 2x2;
//   decoder ConvTranspose 2x2 (bias), channel concat with the skip (in the
//           upsampled tensor's height-sharded layout when sharded), two convs;
//   output  a 1x1 conv's logits: (1, 1, 1, H*W) (convert_to_chw) for a
//           channels-first input, else (1, 1, N*H*W, 1).
// Layer configurations come from config.h: the original's Wormhole table
// (sharded = true, for the wormhole_b0 descriptor) or DRAM-interleaved
// activations for the native CPU descriptor, in the original's mixed
// bfloat8_b, in bfloat16 or in float32 precision. Weights come from a state
// dict (load_onnx_initializers of write_unet_onnx's file, or
// unet_random_state_dict). Errors name the layer they come from.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "tessera/cnn/builder.h"
#include "tessera/cnn/layers.h"
#include "vanilla_unet/config.h"

namespace tessera::models {

struct UNetOptions {
  uint32_t batch = 1;
  uint32_t height = 480, width = 640;  // multiples of 16
  UNetPrecision precision = UNetPrecision::FLOAT32;
  bool sharded = false;  // the original's L1 configuration (wormhole_b0)
  uint32_t seed = 0;     // for unet_random_state_dict when no state dict is given
  std::optional<cnn::WeightMap> state_dict;
};

class VanillaUNet {
 public:
  static StatusOr<std::unique_ptr<VanillaUNet>> create(const UNetOptions& options, std::shared_ptr<Device> device);
  StatusOr<Tensor> operator()(const Tensor& input);
  // NHWC input shape (N, H, W, 3); a channels-first (1, 1, 3, H*W) input also works.
  Shape input_shape() const { return Shape{options_.batch, options_.height, options_.width, 3}; }
  Shape chw_input_shape() const { return Shape{1, 1, 3, options_.batch * options_.height * options_.width}; }
  uint64_t flops() const;
  const UNetOptions& options() const { return options_; }
  // The original's input memory configs for chw_input_shape() on `device`:
  // L1 width sharded over the grid's first 64 cores (or all of a smaller
  // grid) with shards (3, H*W / cores), and the persistent DRAM tensor
  // width sharded over the DRAM banks (12 x [3, 25600] on wormhole_b0).
  StatusOr<MemoryConfig> l1_input_memory_config(const Device& device) const;
  StatusOr<MemoryConfig> dram_input_memory_config(const Device& device) const;

 private:
  explicit VanillaUNet(UNetOptions o) : options_(std::move(o)) {}
  StatusOr<Tensor> forward(const Tensor& input);

  UNetOptions options_;
  std::vector<std::string> names_;       // conv layer names, in order
  std::vector<cnn::Conv2d> convs_;       // 18 block convs + the final 1x1
  std::vector<cnn::ConvTranspose2d> up_;  // upconv4 .. upconv1
  std::vector<uint64_t> up_flops_;
  std::vector<cnn::MaxPool2d> pools_;
};

}  // namespace tessera::models
