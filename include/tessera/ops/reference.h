// Reference kernels: the oracle every fast kernel is tested against.
//
// They work on host tensors in logical element order, with the simplest
// possible code and the same rounding rules as the device ops, so for these
// ops the fast kernels must match them bit for bit.
#pragma once

#include "tessera/tensor/tensor.h"

namespace tessera::reference {

StatusOr<Tensor> relu(const Tensor& input, DataType out_dtype);
StatusOr<Tensor> add(const Tensor& a, const Tensor& b, DataType out_dtype);
StatusOr<Tensor> typecast(const Tensor& input, DataType out_dtype);
StatusOr<Tensor> tilize(const Tensor& input, DataType out_dtype);
StatusOr<Tensor> untilize(const Tensor& input, DataType out_dtype);

}  // namespace tessera::reference
