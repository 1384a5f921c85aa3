// Layer objects: an op with its weights, prepared on the first call and
// reused after, as the original's TtConv2d keeps the prepared weights that
// conv2d returns. The first call must happen outside trace capture (it
// writes weights to the device); a traced executor's compile run does that.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <type_traits>

#include "tessera/ops/conv2d.h"
#include "tessera/ops/conv_transpose2d.h"
#include "tessera/ops/matmul.h"

namespace tessera::cnn {

// A convolution layer: Params is Conv2dParams (weight (out, in/groups, kh,
// kw)) or ConvTranspose2dParams (weight (in, out/groups, kh, kw)); weight and
// bias (out) are host tensors. NHWC input, (N, H, W, C) or (1, 1, N*H*W, C);
// returns (1, 1, N*OH*OW, out).
template <class Params>
class ConvLayer {
 public:
  ConvLayer(Params params, Tensor weight, std::optional<Tensor> bias, Conv2dConfig config = {})
      : params_(params), weight_(std::move(weight)), bias_(std::move(bias)), config_(config) {}
  StatusOr<Tensor> operator()(const Tensor& input, uint8_t cq_id = 0);
  // With a skip connection added by the kernel (conv2d.h's Conv2dResidual).
  StatusOr<Tensor> operator()(const Tensor& input, const Conv2dResidual& residual,
                              uint8_t cq_id = 0) requires std::is_same_v<Params, Conv2dParams>;
  // Over the channel concatenation of `inputs` (conv2d.h's conv2d_concat).
  StatusOr<Tensor> operator()(std::span<const Tensor> inputs,
                              uint8_t cq_id = 0) requires std::is_same_v<Params, Conv2dParams>;
  const Params& params() const { return params_; }
  // The kernel chosen on the first call and why the candidates before it
  // declined (explain_conv2d); empty before the first call.
  const std::string& selection() const { return selection_; }
  // The weights as the chosen kernel reads them, once a call prepared them.
  const std::optional<PreparedConv2dWeights>& prepared() const { return prepared_; }
  // Weights prepared before (a compiled image's): calls run with them and
  // never read the host weights, which may then be empty. `selection`
  // stands for the explanation the first call would have made.
  void set_prepared(PreparedConv2dWeights weights, std::string selection) {
    prepared_ = std::move(weights);
    selection_ = std::move(selection);
  }

 private:
  // `first()` (conv2d on the host weights) on the first call, keeping the
  // weights it prepared and `explain()`'s line; `again(prepared)` after.
  template <class First, class Again, class Explain>
  StatusOr<Tensor> prepared_once(First first, Again again, Explain explain);

  Params params_;
  Tensor weight_;
  std::optional<Tensor> bias_;
  Conv2dConfig config_;
  std::optional<PreparedConv2dWeights> prepared_;
  std::string selection_;
};
using DirectConv2d = ConvLayer<Conv2dParams>;  // cnn::Conv2d (builder.h) is the configuration-built layer
using ConvTranspose2d = ConvLayer<ConvTranspose2dParams>;

// y = x W + b with W (in, out) and b (out) as host float32 tensors, moved to
// the device (in the input's dtype) on the first call.
class Linear {
 public:
  Linear(Tensor weight, std::optional<Tensor> bias, MatmulParams params = {});
  StatusOr<Tensor> operator()(const Tensor& input);

 private:
  Tensor weight_;
  std::optional<Tensor> bias_;
  MatmulParams params_;
  std::optional<Tensor> device_weight_, device_bias_;
};

}  // namespace tessera::cnn
