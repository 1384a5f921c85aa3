// max_pool2d on a device, and its geometry.
//
// Input: a ROW_MAJOR device tensor in NHWC, (N, H, W, C) or flattened
// (1, 1, N*H*W, C), float32 or bfloat16, interleaved or height sharded (a
// pixel's channels contiguous). Output: (1, 1, N*OH*OW, C), ROW_MAJOR, in the
// input's dtype, as the original returns it; an interleaved input keeps its
// memory config, a sharded one gives DRAM interleaved (its shard spec does
// not fit the pooled rows).
//
// Padding positions never win the max (they are -infinity, as in PyTorch).
// With ceil_mode the output size rounds up, but a window must start inside
// the input or its left/top padding (PyTorch's rule). NaN propagates.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "tessera/tensor/tensor.h"

namespace tessera {

struct Pool2dParams {
  uint32_t batch_size = 1;
  uint32_t input_height = 0;
  uint32_t input_width = 0;
  uint32_t channels = 0;
  std::array<uint32_t, 2> kernel_size{2, 2};
  std::array<uint32_t, 2> stride{2, 2};
  std::array<uint32_t, 2> padding{0, 0};  // symmetric (pad_h, pad_w), as the original
  std::array<uint32_t, 2> dilation{1, 1};
  bool ceil_mode = false;

  uint32_t output_height() const;
  uint32_t output_width() const;
  // INVALID_ARGUMENT for zero sizes, padding over half the kernel (PyTorch's
  // limit), or an empty output.
  Status validate() const;
  Status check_input_shape(std::span<const uint32_t> input) const;
  std::string descriptor() const;  // "max_pool2d:n1h480w640c32:k2x2s2x2p0x0d1x1"
};

StatusOr<Tensor> max_pool2d(const Tensor& input, const Pool2dParams& params, uint8_t cq_id = 0);

namespace reference {
// Any float dtype and layout in; (1, 1, N*OH*OW, C) ROW_MAJOR of `out_dtype` out.
StatusOr<Tensor> max_pool2d(const Tensor& input, const Pool2dParams& params, DataType out_dtype);
}  // namespace reference

}  // namespace tessera
