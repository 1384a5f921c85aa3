// Layer objects: an op with its weights, prepared on the first call and
// reused after, as the original's TtConv2d keeps the prepared weights that
// conv2d returns. The first call must happen outside trace capture (it
// writes weights to the device); a traced executor's compile run does that.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <type_traits>

#include "tessera/ops/conv2d.h"
#include "tessera/ops/conv_transpose2d.h"
#include "tessera/ops/matmul.h"

namespace tessera::cnn {

// One conv layer's choice of kernel, made on its first call when a chooser
// is set (the compiler's --select measured|predicted): the kernels that can
// run the call (conv2d_algorithms), what the call is, and a way to time one.
// It points into the call: valid only while the chooser is being asked.
struct ConvChoice {
  std::string_view op;                   // "conv2d" or "conv_transpose2d"
  const Conv2dParams* conv2d = nullptr;  // the op's params (one of the two)
  const ConvTranspose2dParams* conv_transpose2d = nullptr;
  TensorSpec input;                      // the rows read (every channel of a concatenation)
  std::optional<TensorSpec> residual;    // a skip connection the kernel adds
  const Conv2dConfig* config = nullptr;  // the layer's (algorithm empty)
  std::vector<std::string> algorithms;   // at least two; the selection's choice first
  // Names the problem (op, shapes, dtypes, memory configs, fidelity,
  // residual): equal keys are one choice on one machine.
  std::string key;
  // Runs the call with `algorithm` once to prepare its weights, then about
  // `runs` times in a trace (profiler.h's traced_kernel_times; on copies of
  // the weights that outgrow the shared cache, taken in turn) and returns
  // the median kernel time of one call in nanoseconds. The
  // profiler is off after (what it held is cleared). The layer's outputs
  // and residual are left as they were.
  std::function<StatusOr<double>(const std::string& algorithm, int runs)> time;
};
struct ConvChosen {
  std::string algorithm;  // one of ConvChoice::algorithms
  std::string why;        // for the layer's selection(): "measured: onednn 1.20 ms, rows3x3_avx512 0.98 ms"
};
using ConvChooser = std::function<StatusOr<ConvChosen>(const ConvChoice&)>;

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
  // Weights prepared for a named kernel (Conv2dConfig::algorithm, their
  // key's ":as_<name>") make the layer run that kernel.
  void set_prepared(PreparedConv2dWeights weights, std::string selection);
  // Asked on the first call, when more than one kernel can run it and the
  // config names none; its answer is kept in the config (an error fails
  // the call). Unset: conv2d's own selection.
  void set_chooser(ConvChooser chooser) { chooser_ = std::move(chooser); }
  const Conv2dConfig& config() const { return config_; }

 private:
  // `first()` (conv2d on the host weights) on the first call, keeping the
  // weights it prepared and `explain()`'s line; `again(prepared)` after.
  // `choose()` (the chooser asked, when set) then `first()` on the first call.
  template <class First, class Again, class Explain, class Choose>
  StatusOr<Tensor> prepared_once(First first, Again again, Explain explain, Choose choose);
  // The chooser's answer for a call: `algorithms()` lists the kernels, `run(config)` runs the call once.
  template <class List, class Run>
  Status choose(const TensorSpec& input, std::optional<TensorSpec> residual, uint8_t cq_id, List algorithms, Run run);

  Params params_;
  Tensor weight_;
  std::optional<Tensor> bias_;
  Conv2dConfig config_;
  std::optional<PreparedConv2dWeights> prepared_;
  std::string selection_;
  ConvChooser chooser_;
  std::string chosen_why_;  // the chooser's reason, added to selection_
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
