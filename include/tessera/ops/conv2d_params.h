// Conv2dParams: the geometry of a 2D convolution, shared by the reference
// kernel and the fast ones, with the original's argument names.
//
// Tensors are NHWC. The input is (N, H, W, C) or flattened (1, 1, N*H*W, C);
// weights are (out_channels, in_channels / groups, kernel_h, kernel_w), as a
// PyTorch Conv2d stores them; bias is (out_channels) or (1, 1, 1, out_channels).
// The output is flattened (1, 1, N*OH*OW, out_channels), as the original's
// conv2d returns it.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "tessera/base/status.h"
#include "tessera/numerics/data_type.h"
#include "tessera/ops/activation.h"

namespace tessera {

struct Conv2dParams {
  uint32_t batch_size = 1;
  uint32_t input_height = 0;
  uint32_t input_width = 0;
  uint32_t in_channels = 0;
  uint32_t out_channels = 0;
  std::array<uint32_t, 2> kernel_size{3, 3};
  std::array<uint32_t, 2> stride{1, 1};
  std::array<uint32_t, 4> padding{0, 0, 0, 0};  // top, bottom, left, right
  std::array<uint32_t, 2> dilation{1, 1};
  uint32_t groups = 1;
  UnaryWithParam activation;

  // Symmetric padding (pad_h, pad_w), as the original's 2-element form.
  Conv2dParams& with_padding(uint32_t pad_h, uint32_t pad_w) {
    padding = {pad_h, pad_h, pad_w, pad_w};
    return *this;
  }

  uint32_t output_height() const;
  uint32_t output_width() const;
  uint64_t flops() const;  // 2 * MACs, the convention for GFLOP/s
  // INVALID_ARGUMENT for zero sizes, channels not divisible by groups, or a
  // kernel (with dilation) larger than the padded input.
  Status validate() const;
  // INVALID_ARGUMENT unless `input` is (N, H, W, C) or (1, 1, N*H*W, C).
  Status check_input_shape(std::span<const uint32_t> input) const;
  // "conv2d:n1h480w640c3k32:r3x3s1x1p1x1x1x1d1x1g1:relu" (the problem, no dtypes).
  std::string descriptor() const;
};

}  // namespace tessera
