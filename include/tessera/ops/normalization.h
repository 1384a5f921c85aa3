// softmax, layer_norm, group_norm and batch_norm (inference) on a device.
//
// Inputs are ROW_MAJOR device tensors, float32 or bfloat16, interleaved or
// sharded; outputs keep the input's spec. Parameter tensors (weight, bias,
// running mean and variance) are ROW_MAJOR device tensors holding C values,
// float32 or bfloat16. Statistics accumulate in double, element math runs in
// float32 (exp on the AVX-512 path as eltwise.h); results are within 1e-5
// relative + 1e-5 absolute of the reference kernels in float32, and one
// bfloat16 ulp more in bfloat16.
//
//   softmax     over the last dim: exp(x - max) / sum; a result below the
//               smallest normal float (2^-126) is 0, and denormal inputs
//               read as 0 (a row sums to 1: the change is below 2^-126,
//               where a denormal made Intel cores take a microcode assist
//               per element, 5x slower on masked attention);
//   log_softmax over the last dim: x - max - ln(sum), sum = sum of exp(x - max)
//               (finite where softmax underflows to 0; exp's denormals
//               flushed as softmax's);
//   layer_norm  over the last dim: (x - mean) / sqrt(var + eps) * w + b
//               (biased variance; ttnn's default eps 1e-12);
//   group_norm  NHWC input (N, H, W, C) or (N, 1, H*W, C): statistics per
//               image over H*W pixels and C / num_groups channels;
//   batch_norm  per channel (the last dim): (x - mean) / sqrt(var + eps) * w + b.
#pragma once

#include <optional>

#include "tessera/tensor/tensor.h"

namespace tessera {

struct NormParams {
  float epsilon = 1e-5f;
  std::optional<Tensor> weight;  // gamma, C values
  std::optional<Tensor> bias;    // beta, C values
  uint8_t cq_id = 0;
};

StatusOr<Tensor> softmax(const Tensor& input, int dim = -1, uint8_t cq_id = 0);
StatusOr<Tensor> log_softmax(const Tensor& input, int dim = -1, uint8_t cq_id = 0);
StatusOr<Tensor> layer_norm(const Tensor& input, const NormParams& params = {.epsilon = 1e-12f});
StatusOr<Tensor> group_norm(const Tensor& input, uint32_t num_groups, const NormParams& params = {});
StatusOr<Tensor> batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                            const NormParams& params = {});

}  // namespace tessera
