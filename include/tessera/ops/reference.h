// Reference kernels: the oracle every fast kernel is tested against.
//
// They work on host tensors in logical element order, with the simplest
// possible code and the same rounding rules as the device ops, so for these
// ops the fast kernels must match them bit for bit.
#pragma once

#include <optional>

#include "tessera/ops/conv2d_params.h"
#include "tessera/ops/eltwise.h"
#include "tessera/tensor/tensor.h"

namespace tessera::reference {

// Element-wise: a op b rounded to float32, then the activation in double,
// then one rounding to `out_dtype`; numpy broadcasting (eltwise.h).
StatusOr<Tensor> unary(const Tensor& input, const UnaryWithParam& activation, DataType out_dtype);
StatusOr<Tensor> binary(const Tensor& a, const Tensor& b, BinaryOpType op, const UnaryWithParam& activation,
                        DataType out_dtype);
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

}  // namespace tessera::reference
