// where on a device: ONNX's Where, y = cond != 0 ? a : b element by element,
// with numpy broadcasting of the three operands (trailing dims aligned,
// size-1 dims stretch). The chosen operand's value passes unchanged (NaN
// payloads, -0.0, +-Inf); a NaN condition is nonzero, so true (as a Cast of
// NaN to bool). Booleans live on the device as 1 / 0 in float slots (the
// comparisons make them so), and any nonzero condition selects `a`.
//
// Inputs: ROW_MAJOR float32 or bfloat16 device tensors on one device, any
// memory config, ranks 1 to 8. Output: `dtype` ROW_MAJOR, DRAM interleaved,
// of the broadcast shape (a float32 value rounds once to bfloat16 there).
// The reference (reference.h) defines the same.
#pragma once

#include "tessera/tensor/tensor.h"

namespace tessera {

struct WhereParams {
  DataType dtype = DataType::FLOAT32;
  uint8_t cq_id = 0;
};

StatusOr<Tensor> where(const Tensor& cond, const Tensor& a, const Tensor& b, const WhereParams& params = {});

}  // namespace tessera
