// ResNet-50 v1.5 built from Tessera ops (NHWC): batch norms folded into conv
// biases, fixed-seed random weights (models/common/random_weights.h).
// Input (B, 224, 224, 3) on the device; output (B, 1000) logits.
#pragma once

#include <memory>
#include <vector>

#include "tessera/cnn/layers.h"

namespace tessera::models {

struct ResNet50Options {
  uint32_t batch = 1;
  uint32_t image_size = 224;
  DataType weights_dtype = DataType::FLOAT32;  // bfloat16 inputs need bfloat16 / block-float weights
  uint32_t seed = 0;
};

class ResNet50 {
 public:
  explicit ResNet50(const ResNet50Options& options);
  StatusOr<Tensor> operator()(const Tensor& input);
  Shape input_shape() const { return Shape{options_.batch, options_.image_size, options_.image_size, 3}; }
  uint64_t flops() const;  // 2 * MACs of the convolutions and the classifier

 private:
  struct Bottleneck {
    std::unique_ptr<cnn::DirectConv2d> reduce, conv, expand, downsample;
  };
  ResNet50Options options_;
  std::unique_ptr<cnn::DirectConv2d> stem_;
  std::vector<Bottleneck> blocks_;
  std::unique_ptr<cnn::Linear> fc_;
};

}  // namespace tessera::models
