// argmax / argmin over the last dim on a device: ONNX's ArgMax / ArgMin
// (a segmentation head's per-pixel class over NHWC channels).
//
// Input: a ROW_MAJOR float32 or bfloat16 device tensor (..., n), any memory
// config. Output: float32 ROW_MAJOR, DRAM interleaved, shaped as the input
// less its last dim (a rank-1 input gives (1); reshape for ONNX's keepdims),
// each value the index in [0, n) as an exact float (n at most 2^24), the
// way Tessera carries integer tensors on the device. The first index of the extreme
// value wins, the last with select_last_index. A NaN beats every number
// (PyTorch's argmax / argmin: a row holding a NaN names it, the first one,
// or the last with select_last_index), so a NaN input is not hidden behind
// a confident class. The reference (reference.h) defines the same.
#pragma once

#include "tessera/tensor/tensor.h"

namespace tessera {

struct ArgReduceParams {
  bool select_last_index = false;
  uint8_t cq_id = 0;
};

StatusOr<Tensor> argmax(const Tensor& input, const ArgReduceParams& params = {});
StatusOr<Tensor> argmin(const Tensor& input, const ArgReduceParams& params = {});

}  // namespace tessera
