// max_pool2d, avg_pool2d and global_avg_pool2d on a device, and their
// geometry.
//
// Input: a ROW_MAJOR device tensor in NHWC, (N, H, W, C) or flattened
// (1, 1, N*H*W, C), float32 or bfloat16, interleaved or height sharded (a
// pixel's channels contiguous). Output: (1, 1, N*OH*OW, C), ROW_MAJOR, in the
// input's dtype, as the original returns it; an interleaved input keeps its
// memory config, a sharded one gives DRAM interleaved (its shard spec does
// not fit the pooled rows).
//
// avg_pool2d divides each window's float32 sum by the window size
// (count_include_pad, PyTorch's default) or by the number of input pixels it
// covers; it matches the double-precision reference within 1e-5 relative
// plus 1e-6 absolute in float32, one ulp in bfloat16.
// global_avg_pool2d: (N, H, W, C) -> (N, 1, 1, C), the mean of every channel
// over H*W pixels (float32 accumulation), same tolerance.
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
  bool count_include_pad = true;  // avg_pool2d only

  uint32_t output_height() const;
  uint32_t output_width() const;
  // INVALID_ARGUMENT for zero sizes, padding over half the kernel (PyTorch's
  // limit), or an empty output.
  // `op` names the pool in messages and descriptors.
  Status validate(std::string_view op = "max_pool2d") const;
  Status check_input_shape(std::span<const uint32_t> input, std::string_view op = "max_pool2d") const;
  std::string descriptor(std::string_view op = "max_pool2d") const;  // "max_pool2d:n1h480w640c32:k2x2s2x2p0x0d1x1"
};

StatusOr<Tensor> max_pool2d(const Tensor& input, const Pool2dParams& params, uint8_t cq_id = 0);
StatusOr<Tensor> avg_pool2d(const Tensor& input, const Pool2dParams& params, uint8_t cq_id = 0);
// Input (N, H, W, C) ROW_MAJOR float32 / bfloat16, interleaved or height
// sharded; output (N, 1, 1, C) interleaved in the input's buffer type.
StatusOr<Tensor> global_avg_pool2d(const Tensor& input, uint8_t cq_id = 0);

}  // namespace tessera
