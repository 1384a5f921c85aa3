// Element-wise device ops: relu, add, typecast.
//
// Inputs must be allocated device tensors. Output memory config and dtype
// default to the first input's. Operands of add must have the same shape,
// layout and memory config (any dtypes). Arithmetic is float32; results are
// rounded to the output dtype with the rules of numerics/convert.h.
//   relu(x) = x < 0 ? 0 : x   (NaN and -0 pass through)
//
// Each call compiles (once per descriptor, cached on the device) and enqueues
// one program on `cq_id`; during trace capture it is recorded instead.
#pragma once

#include <optional>

#include "tessera/tensor/tensor.h"

namespace tessera {

struct EltwiseParams {
  std::optional<DataType> dtype;  // output dtype
  uint8_t cq_id = 0;
};

StatusOr<Tensor> relu(const Tensor& input, const EltwiseParams& params = {});
StatusOr<Tensor> add(const Tensor& a, const Tensor& b, const EltwiseParams& params = {});
// Float -> float, float <-> integer and integer -> integer conversion.
StatusOr<Tensor> typecast(const Tensor& input, DataType dtype, uint8_t cq_id = 0);

}  // namespace tessera
