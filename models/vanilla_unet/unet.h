// The Vanilla UNet (../shared/reference/tt-cnn-and-ttnn.md section 4.1) built
// from Tessera ops (NHWC): init_features 32, 18 3x3 convs with folded batch
// norms and ReLU, 4 max pools, 4 transposed convs, 4 channel concatenations,
// a final 1x1 conv returning logits. Fixed-seed random weights.
// Input (1, H, W, 3) on the device; output (1, 1, H*W, 1).
#pragma once

#include <memory>
#include <vector>

#include "tessera/cnn/layers.h"

namespace tessera::models {

struct UNetOptions {
  uint32_t batch = 1;
  uint32_t height = 480, width = 640;  // multiples of 16
  DataType weights_dtype = DataType::FLOAT32;
  uint32_t seed = 0;
};

class VanillaUNet {
 public:
  explicit VanillaUNet(const UNetOptions& options);
  StatusOr<Tensor> operator()(const Tensor& input);
  Shape input_shape() const { return Shape{options_.batch, options_.height, options_.width, 3}; }
  uint64_t flops() const;

 private:
  struct Block {
    std::unique_ptr<cnn::DirectConv2d> a, b;
  };
  UNetOptions options_;
  Block enc_[4], bottleneck_, dec_[4];
  std::unique_ptr<cnn::ConvTranspose2d> up_[4];
  std::unique_ptr<cnn::DirectConv2d> final_;
};

}  // namespace tessera::models
