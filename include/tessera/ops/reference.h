// Reference kernels: the oracle every fast kernel is tested against, all
// of them behind this one header, implemented in src/ops/reference/.
//
// NOTE: graph/host_eval.h is a second set of host kernels, on purpose: it
// evaluates ONNX nodes (NCHW, double, N-D, every ONNX attribute) for
// constant folding and host fallbacks, in the graph layer, which knows no
// device tensors. These kernels work on Tessera's device semantics (NHWC
// tensors, dtypes, layouts) in the ops layer. The compiler's tests compare
// the two on whole graphs (runtime/compiled_model_test.cc), so each checks
// the other.
//
// They work on host tensors in logical element order, with the simplest
// possible code and the same rounding rules as the device ops, so for these
// ops the fast kernels must match them bit for bit.
#pragma once

#include <optional>

#include "tessera/ops/concat_affine.h"
#include "tessera/ops/conv2d_params.h"
#include "tessera/ops/conv_transpose2d.h"
#include "tessera/ops/eltwise.h"
#include "tessera/ops/manipulation.h"
#include "tessera/ops/matmul.h"
#include "tessera/ops/normalization.h"
#include "tessera/ops/pool2d.h"
#include "tessera/ops/quantized_conv2d.h"
#include "tessera/ops/upsample.h"
#include "tessera/tensor/tensor.h"

namespace tessera::reference {

// Element-wise: a op b rounded to float32, then the activation in double,
// then one rounding to `out_dtype`; numpy broadcasting (eltwise.h).
StatusOr<Tensor> unary(const Tensor& input, const UnaryWithParam& activation, DataType out_dtype);
StatusOr<Tensor> binary(const Tensor& a, const Tensor& b, BinaryOpType op, const UnaryWithParam& activation,
                        DataType out_dtype);
// select.h's where: cond != 0 (a NaN is) ? a : b, numpy broadcasting; the
// chosen value rounded to `out_dtype` once.
StatusOr<Tensor> where(const Tensor& cond, const Tensor& a, const Tensor& b, DataType out_dtype);
StatusOr<Tensor> relu(const Tensor& input, DataType out_dtype);
StatusOr<Tensor> add(const Tensor& a, const Tensor& b, DataType out_dtype);
StatusOr<Tensor> typecast(const Tensor& input, DataType out_dtype);
StatusOr<Tensor> tilize(const Tensor& input, DataType out_dtype);
StatusOr<Tensor> untilize(const Tensor& input, DataType out_dtype);

// Direct convolution with double accumulation: bias added, activation applied
// in double, one rounding to `out_dtype`. Any float dtype and layout in; the
// output is (1, 1, N*OH*OW, out_channels) ROW_MAJOR (see conv2d_params.h).
StatusOr<Tensor> conv2d(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
                        const Conv2dParams& params, DataType out_dtype);

// quantized_conv2d (quantized_conv2d.h): the input quantized, the integer
// sums exact (int64), s[c] * acc and the bias as two float32 roundings, then
// the activation in double; host NHWC input, (1, 1, N*OH*OW, out) float32 out.
StatusOr<Tensor> quantized_conv2d(const Tensor& input, const QuantizedConv2dParams& params, const Tensor& weights,
                                  std::span<const float> weight_scales, std::span<const float> bias);

// conv_transpose2d (conv_transpose2d.h)
// Double accumulation, bias, activation, one rounding to `out_dtype`.
StatusOr<Tensor> conv_transpose2d(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
                                  const ConvTranspose2dParams& params, DataType out_dtype);

// matmul (matmul.h)
// Double accumulation; host tensors of any float dtype.
StatusOr<Tensor> matmul(const Tensor& a, const Tensor& b, const std::optional<Tensor>& bias, const MatmulParams& params,
                        DataType out_dtype);

// normalization (normalization.h)
// Host tensors in, host tensors of `out_dtype` out; parameters as host tensors.
StatusOr<Tensor> softmax(const Tensor& input, DataType out_dtype);
StatusOr<Tensor> log_softmax(const Tensor& input, DataType out_dtype);
StatusOr<Tensor> layer_norm(const Tensor& input, const NormParams& params, DataType out_dtype);
StatusOr<Tensor> group_norm(const Tensor& input, uint32_t num_groups, const NormParams& params, DataType out_dtype);
StatusOr<Tensor> batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                            const NormParams& params, DataType out_dtype);

// pool2d (pool2d.h)
// Any float dtype and layout in; (1, 1, N*OH*OW, C) ROW_MAJOR of `out_dtype` out.
StatusOr<Tensor> max_pool2d(const Tensor& input, const Pool2dParams& params, DataType out_dtype);
StatusOr<Tensor> avg_pool2d(const Tensor& input, const Pool2dParams& params, DataType out_dtype);
// (N, H, W, C) in, (N, 1, 1, C) out.
StatusOr<Tensor> global_avg_pool2d(const Tensor& input, DataType out_dtype);

// upsample (upsample.h)
StatusOr<Tensor> upsample(const Tensor& input, const UpsampleParams& params, DataType out_dtype);

// manipulation (manipulation.h)
// Host tensors of float dtypes in, ROW_MAJOR host tensors of the input dtype out.
StatusOr<Tensor> permute(const Tensor& input, std::span<const int> perm);
// argmax (max) / argmin over the last dim as arg_reduce.h defines them:
// float32 indices shaped as the input less its last dim.
StatusOr<Tensor> arg_reduce(const Tensor& input, bool max, bool select_last_index);
StatusOr<Tensor> pad(const Tensor& input, std::span<const std::array<uint32_t, 2>> padding, float value);
StatusOr<Tensor> slice(const Tensor& input, const SliceParams& slice);
StatusOr<Tensor> concat(std::span<const Tensor> inputs, int dim);
// concat_affine.h: the concat along the last dim, then per channel
// act(fma(x, scale, shift)) rounded to `dtype`.
StatusOr<Tensor> concat_affine(std::span<const Tensor> inputs, const Tensor& scale, const Tensor& shift,
                               const UnaryWithParam& act, DataType dtype);

}  // namespace tessera::reference
