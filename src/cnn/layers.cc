#include "tessera/cnn/layers.h"

namespace tessera::cnn {

Conv2d::Conv2d(Conv2dParams params, Tensor weight, std::optional<Tensor> bias, Conv2dConfig config)
    : params_(params), weight_(std::move(weight)), bias_(std::move(bias)), config_(config) {}

StatusOr<Tensor> Conv2d::operator()(const Tensor& input, uint8_t cq_id) {
  if (prepared_) {
    TS_ASSIGN_OR_RETURN(Conv2dResult r, conv2d(input, *prepared_, params_, config_, cq_id));
    return r.output;
  }
  TS_ASSIGN_OR_RETURN(Conv2dResult r, conv2d(input, weight_, bias_, params_, config_, cq_id));
  prepared_ = r.weights;
  return r.output;
}

ConvTranspose2d::ConvTranspose2d(ConvTranspose2dParams params, Tensor weight, std::optional<Tensor> bias,
                                 Conv2dConfig config)
    : params_(params), weight_(std::move(weight)), bias_(std::move(bias)), config_(config) {}

StatusOr<Tensor> ConvTranspose2d::operator()(const Tensor& input, uint8_t cq_id) {
  if (prepared_) {
    TS_ASSIGN_OR_RETURN(Conv2dResult r, conv_transpose2d(input, *prepared_, params_, config_, cq_id));
    return r.output;
  }
  TS_ASSIGN_OR_RETURN(Conv2dResult r, conv_transpose2d(input, weight_, bias_, params_, config_, cq_id));
  prepared_ = r.weights;
  return r.output;
}

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
