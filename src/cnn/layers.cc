#include "tessera/cnn/layers.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>

#include "tessera/device/profiler.h"

namespace tessera::cnn {

namespace {
// Output pixels up to which a timed conv reads copies of its weights (below).
constexpr uint64_t kMaxColdPixels = 4096;
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
StatusOr<std::vector<std::string>> algorithms(const Tensor& x, const Conv2dParams& p, const Conv2dConfig& c) {
  return conv2d_algorithms(x, p, c);
}
StatusOr<std::vector<std::string>> algorithms(const Tensor& x, const ConvTranspose2dParams& p, const Conv2dConfig& c) {
  return conv_transpose2d_algorithms(x, p, c);
}
StatusOr<std::string> explain(const Tensor& x, const Conv2dParams& p, const Conv2dConfig& c) {
  return explain_conv2d(x, p, c);
}
StatusOr<std::string> explain(const Tensor& x, const ConvTranspose2dParams& p, const Conv2dConfig& c) {
  return explain_conv_transpose2d(x, p, c);
}
}  // namespace

template <class Params>
void ConvLayer<Params>::set_prepared(PreparedConv2dWeights weights, std::string selection) {
  if (const size_t at = weights.key.rfind(":as_"); at != std::string::npos)
    config_.algorithm = weights.key.substr(at + 4);
  prepared_ = std::move(weights);
  selection_ = std::move(selection);
}

template <class Params>
template <class First, class Again, class Explain, class Choose>
StatusOr<Tensor> ConvLayer<Params>::prepared_once(First first, Again again, Explain explain, Choose choose) {
  if (prepared_) {
    TS_ASSIGN_OR_RETURN(Conv2dResult r, again(*prepared_));
    return r.output;
  }
  if (chooser_ && config_.algorithm.empty()) TS_RETURN_IF_ERROR(choose());
  // The problem the call makes; a failure is the call's own, reported by it.
  StatusOr<std::string> why = explain();
  selection_ = why.ok() ? *why : "not explained: " + why.status().to_string();
  if (!chosen_why_.empty()) selection_ += "\n  " + chosen_why_;
  TS_ASSIGN_OR_RETURN(Conv2dResult r, first());
  prepared_ = r.weights;
  return r.output;
}

template <class Params>
template <class List, class Run>
Status ConvLayer<Params>::choose(const TensorSpec& input, std::optional<TensorSpec> residual, uint8_t cq_id,
                                 List algorithms, Run run) {
  TS_ASSIGN_OR_RETURN(std::vector<std::string> algs, algorithms());
  if (algs.size() < 2) return ok_status();
  ConvChoice c;
  if constexpr (std::is_same_v<Params, Conv2dParams>) {
    c.op = "conv2d";
    c.conv2d = &params_;
  } else {
    c.op = "conv_transpose2d";
    c.conv_transpose2d = &params_;
  }
  c.input = input;
  c.residual = residual;
  c.config = &config_;
  c.algorithms = algs;
  c.key = fmt::format("{}:{}->{}:w{}:{}{}", params_.descriptor(), input.to_string(),
                      data_type_name(config_.dtype.value_or(input.dtype)), data_type_name(config_.weights_dtype),
                      math_fidelity_name(config_.compute_config.math_fidelity),
                      residual ? "+" + residual->to_string() : std::string());
  // Each candidate's weights are prepared once, on its first timing, and
  // copied until the copies outgrow the shared cache (at most 16): the
  // timed calls take them in turn, so each reads its weights cold, as a
  // model does that streams every layer's weights once a run. On one hot
  // copy, ResNet-50's 7x7 512 -> 512 3x3 conv took 0.34 ms on rows3x3_avx512
  // and 0.42 on the thresholds' direct_avx512 (1.24x); on cold copies 0.40
  // and 0.44 (1.10x); the hot-copy choices made the model 1-5% slower.
  std::map<std::string, std::vector<PreparedConv2dWeights>> prepared;
  c.time = [&](const std::string& algorithm, int runs) -> StatusOr<double> {
    Conv2dConfig forced = config_;
    if (algorithm != algs.front()) forced.algorithm = algorithm;
    auto it = prepared.find(algorithm);
    if (it == prepared.end()) {
      TS_ASSIGN_OR_RETURN(Conv2dResult first, run(forced, nullptr));
      std::vector<PreparedConv2dWeights> copies{first.weights};
      Device& device = *first.weights.weight.device();
      const uint64_t cache = device.descriptor().shared_cache_size ? device.descriptor().shared_cache_size : 32 << 20;
      const uint64_t bytes = std::max<uint64_t>(first.weights.weight.spec().storage_bytes(), 1);
      // Each weight is read once per output pixel: past kMaxColdPixels the
      // compute hides a cold read, and copies would only lengthen the timing.
      const uint64_t pixels = uint64_t{params_.batch_size} * params_.output_height() * params_.output_width();
      const uint64_t want =
          pixels > kMaxColdPixels ? 1 : std::clamp<uint64_t>((cache * 3 / 2 + bytes - 1) / bytes, 1, 16);
      if (want > 1) {
        TS_ASSIGN_OR_RETURN(Tensor host, first.weights.weight.cpu());
        for (uint64_t k = 1; k < want; ++k) {
          TS_ASSIGN_OR_RETURN(Tensor w, to_device(host, device, first.weights.weight.memory_config()));
          copies.push_back({first.weights.key, std::move(w), first.weights.bias});
        }
      }
      it = prepared.emplace(algorithm, std::move(copies)).first;
    }
    const std::vector<PreparedConv2dWeights>& copies = it->second;
    Device& device = *copies.front().weight.device();
    // Kernel time from the device profiler, of the calls replayed in a
    // trace as a traced model runs them (no host dispatch between launches).
    const auto call = [&]() -> Status {
      for (const PreparedConv2dWeights& w : copies) TS_RETURN_IF_ERROR(run(forced, &w).status());
      return ok_status();
    };
    // About `runs` timed calls in all (at least two replays of the copies):
    // sixteen copies of a long conv replayed five times each made a UNet's
    // first measured compile take minutes.
    const uint32_t n =
        std::max<uint32_t>(2, static_cast<uint32_t>((std::max(runs, 1) + copies.size() - 1) / copies.size()));
    TS_ASSIGN_OR_RETURN(TracedTimes t, traced_kernel_times(device, call, n, cq_id));
    for (double& x : t.ns) x /= static_cast<double>(copies.size());
    std::vector<double>& ns = t.ns;
    std::nth_element(ns.begin(), ns.begin() + ns.size() / 2, ns.end());
    return ns[ns.size() / 2];
  };
  TS_ASSIGN_OR_RETURN(ConvChosen chosen, chooser_(c));
  if (std::find(algs.begin(), algs.end(), chosen.algorithm) == algs.end())
    return invalid_argument_error("{}: the chooser answered '{}', which is not one of the kernels that can run it ({})",
                                  c.key, chosen.algorithm, fmt::join(algs, ", "));
  // The selection's own choice stays unnamed: its programs and prepared weights are the usual ones.
  if (chosen.algorithm != algs.front()) config_.algorithm = chosen.algorithm;
  chosen_why_ = std::move(chosen.why);
  return ok_status();
}

template <class Params>
StatusOr<Tensor> ConvLayer<Params>::operator()(const Tensor& input, uint8_t cq_id) {
  return prepared_once([&] { return run(input, weight_, bias_, params_, config_, cq_id); },
                       [&](const PreparedConv2dWeights& w) { return run(input, w, params_, config_, cq_id); },
                       [&] { return explain(input, params_, config_); },
                       [&] {
                         return choose(
                             input.spec(), std::nullopt, cq_id, [&] { return algorithms(input, params_, config_); },
                             [&](const Conv2dConfig& c, const PreparedConv2dWeights* w) {
                               return w ? run(input, *w, params_, c, cq_id)
                                        : run(input, weight_, bias_, params_, c, cq_id);
                             });
                       });
}

template <class Params>
StatusOr<Tensor> ConvLayer<Params>::operator()(const Tensor& input, const Conv2dResidual& residual,
                                               uint8_t cq_id) requires std::is_same_v<Params, Conv2dParams> {
  return prepared_once(
      [&] { return conv2d_with_residual(input, weight_, bias_, params_, residual, config_, cq_id); },
      [&](const PreparedConv2dWeights& w) { return conv2d_with_residual(input, w, params_, residual, config_, cq_id); },
      [&] { return explain_conv2d(input, params_, config_, &residual); },
      [&] {
        // Timed runs leave the residual as it is: they never write over it.
        const Conv2dResidual kept{residual.tensor, residual.activation, false};
        return choose(
            input.spec(), residual.tensor.spec(), cq_id,
            [&] { return conv2d_algorithms(input, params_, config_, &kept); },
            [&](const Conv2dConfig& c, const PreparedConv2dWeights* w) {
              return w ? conv2d_with_residual(input, *w, params_, kept, c, cq_id)
                       : conv2d_with_residual(input, weight_, bias_, params_, kept, c, cq_id);
            });
      });
}

template <class Params>
StatusOr<Tensor> ConvLayer<Params>::operator()(std::span<const Tensor> inputs,
                                               uint8_t cq_id) requires std::is_same_v<Params, Conv2dParams> {
  return prepared_once(
      [&] { return conv2d_concat(inputs, weight_, bias_, params_, config_, cq_id); },
      [&](const PreparedConv2dWeights& w) { return conv2d_concat(inputs, w, params_, config_, cq_id); },
      [&] { return explain_conv2d_concat(inputs, params_, config_); },
      [&] {
        TensorSpec whole = inputs.front().spec();
        std::vector<uint32_t> dims(whole.shape.dims().begin(), whole.shape.dims().end());
        dims.back() = params_.in_channels;
        whole.shape = Shape(std::span<const uint32_t>(dims));
        return choose(
            whole, std::nullopt, cq_id, [&] { return conv2d_concat_algorithms(inputs, params_, config_); },
            [&](const Conv2dConfig& c, const PreparedConv2dWeights* w) {
              return w ? conv2d_concat(inputs, *w, params_, c, cq_id)
                       : conv2d_concat(inputs, weight_, bias_, params_, c, cq_id);
            });
      });
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
