#include "tessera/cnn/layers.h"

namespace tessera::cnn {

namespace {
StatusOr<Conv2dResult> run(const Tensor& x, const Tensor& w, const std::optional<Tensor>& b, const Conv2dParams& p,
                           const Conv2dConfig& c, uint8_t cq) {
  return conv2d(x, w, b, p, c, cq);
}
StatusOr<Conv2dResult> run(const Tensor& x, const PreparedConv2dWeights& w, const Conv2dParams& p,
                           const Conv2dConfig& c, uint8_t cq) {
  return conv2d(x, w, p, c, cq);
}
StatusOr<Conv2dResult> run(const Tensor& x, const Tensor& w, const std::optional<Tensor>& b,
                           const ConvTranspose2dParams& p, const Conv2dConfig& c, uint8_t cq) {
  return conv_transpose2d(x, w, b, p, c, cq);
}
StatusOr<Conv2dResult> run(const Tensor& x, const PreparedConv2dWeights& w, const ConvTranspose2dParams& p,
                           const Conv2dConfig& c, uint8_t cq) {
  return conv_transpose2d(x, w, p, c, cq);
}
StatusOr<std::string> explain(const Tensor& x, const Conv2dParams& p, const Conv2dConfig& c) {
  return explain_conv2d(x, p, c);
}
StatusOr<std::string> explain(const Tensor& x, const ConvTranspose2dParams& p, const Conv2dConfig& c) {
  return explain_conv_transpose2d(x, p, c);
}
}  // namespace

template <class Params>
template <class First, class Again, class Explain>
StatusOr<Tensor> ConvLayer<Params>::prepared_once(First first, Again again, Explain explain) {
  if (prepared_) {
    TS_ASSIGN_OR_RETURN(Conv2dResult r, again(*prepared_));
    return r.output;
  }
  // The problem the call makes; a failure is the call's own, reported by it.
  StatusOr<std::string> why = explain();
  selection_ = why.ok() ? *why : "not explained: " + why.status().to_string();
  TS_ASSIGN_OR_RETURN(Conv2dResult r, first());
  prepared_ = r.weights;
  return r.output;
}

template <class Params>
StatusOr<Tensor> ConvLayer<Params>::operator()(const Tensor& input, uint8_t cq_id) {
  return prepared_once([&] { return run(input, weight_, bias_, params_, config_, cq_id); },
                       [&](const PreparedConv2dWeights& w) { return run(input, w, params_, config_, cq_id); },
                       [&] { return explain(input, params_, config_); });
}

template <class Params>
StatusOr<Tensor> ConvLayer<Params>::operator()(const Tensor& input, const Conv2dResidual& residual,
                                               uint8_t cq_id) requires std::is_same_v<Params, Conv2dParams> {
  return prepared_once(
      [&] { return conv2d_with_residual(input, weight_, bias_, params_, residual, config_, cq_id); },
      [&](const PreparedConv2dWeights& w) { return conv2d_with_residual(input, w, params_, residual, config_, cq_id); },
      [&] { return explain_conv2d(input, params_, config_, &residual); });
}

template <class Params>
StatusOr<Tensor> ConvLayer<Params>::operator()(std::span<const Tensor> inputs,
                                               uint8_t cq_id) requires std::is_same_v<Params, Conv2dParams> {
  return prepared_once(
      [&] { return conv2d_concat(inputs, weight_, bias_, params_, config_, cq_id); },
      [&](const PreparedConv2dWeights& w) { return conv2d_concat(inputs, w, params_, config_, cq_id); },
      [&] { return explain_conv2d_concat(inputs, params_, config_); });
}

template class ConvLayer<Conv2dParams>;
template class ConvLayer<ConvTranspose2dParams>;

Linear::Linear(Tensor weight, std::optional<Tensor> bias, MatmulParams params)
    : weight_(std::move(weight)), bias_(std::move(bias)), params_(params) {}

StatusOr<Tensor> Linear::operator()(const Tensor& input) {
  if (!device_weight_) {
    if (!input.is_on_device()) return invalid_argument_error("Linear: expected a device input");
    TS_ASSIGN_OR_RETURN(Tensor w, host_typecast(weight_, input.dtype()));
    TS_ASSIGN_OR_RETURN(device_weight_, to_device(w, *input.device(), DRAM_MEMORY_CONFIG, params_.cq_id));
    if (bias_) {
      TS_ASSIGN_OR_RETURN(device_bias_, to_device(*bias_, *input.device(), DRAM_MEMORY_CONFIG, params_.cq_id));
    }
  }
  if (device_bias_) return linear(input, *device_weight_, device_bias_, params_);
  return matmul(input, *device_weight_, params_);
}

}  // namespace tessera::cnn
