// conv_transpose2d on a device: the transposed convolution of PyTorch's
// ConvTranspose2d, with the original's argument names.
//
// Input: ROW_MAJOR NHWC (N, H, W, C) or flattened (1, 1, N*H*W, C), float32 or
// bfloat16, interleaved. Weights: a host tensor (in_channels,
// out_channels / groups, kh, kw) as PyTorch stores them; bias (out_channels).
// Output: (1, 1, N*OH*OW, out_channels) ROW_MAJOR in the input's memory
// config, with
//   OH = (H - 1) * stride - 2 * padding + dilation * (kh - 1) + output_padding + 1
// and likewise OW. Weight preparation, dtypes, fused activations and the
// per-core row shards are conv2d's (conv2d.h); the kernel is oneDNN's
// deconvolution. Each shard of output rows reads the input rows that reach
// it, so shards never write the same row.
#pragma once

#include <array>
#include <optional>

#include "tessera/ops/conv2d.h"

namespace tessera {

struct ConvTranspose2dParams {
  uint32_t batch_size = 1;
  uint32_t input_height = 0;
  uint32_t input_width = 0;
  uint32_t in_channels = 0;
  uint32_t out_channels = 0;
  std::array<uint32_t, 2> kernel_size{2, 2};
  std::array<uint32_t, 2> stride{2, 2};
  std::array<uint32_t, 2> padding{0, 0};  // symmetric (pad_h, pad_w), as PyTorch
  std::array<uint32_t, 2> output_padding{0, 0};
  std::array<uint32_t, 2> dilation{1, 1};
  uint32_t groups = 1;
  UnaryWithParam activation;

  uint32_t output_height() const;
  uint32_t output_width() const;
  uint64_t flops() const;  // 2 * MACs
  // INVALID_ARGUMENT for zero sizes, channels not divisible by groups,
  // output_padding not smaller than stride or dilation (PyTorch's rule), or an
  // empty output.
  Status validate() const;
  Status check_input_shape(std::span<const uint32_t> input) const;
  // "conv_transpose2d:n1h30w40c512k256:r2x2s2x2p0x0op0x0d1x1g1:identity"
  std::string descriptor() const;
};

StatusOr<Conv2dResult> conv_transpose2d(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
                                        const ConvTranspose2dParams& params, const Conv2dConfig& config = {},
                                        uint8_t cq_id = 0);
StatusOr<Conv2dResult> conv_transpose2d(const Tensor& input, const PreparedConv2dWeights& weights,
                                        const ConvTranspose2dParams& params, const Conv2dConfig& config = {},
                                        uint8_t cq_id = 0);

// As explain_conv2d (conv2d.h): the algorithm conv_transpose2d runs for
// this call and why each candidate before it declined.
StatusOr<std::string> explain_conv_transpose2d(const Tensor& input, const ConvTranspose2dParams& params,
                                               const Conv2dConfig& config = {});

// As conv2d_algorithms (conv2d.h): the kernels that can run this call.
StatusOr<std::vector<std::string>> conv_transpose2d_algorithms(const Tensor& input,
                                                               const ConvTranspose2dParams& params,
                                                               const Conv2dConfig& config = {});

// As conv2d_rounds_input_to_bfloat16 (conv2d.h): kernels that equal their
// stride, at LoFi on CPUs with AMX.
bool conv_transpose2d_rounds_input_to_bfloat16(const ConvTranspose2dParams& params, const Conv2dConfig& config);

// The weights as the device computes with them (see round_conv2d_weights),
// float32 (in_channels, out_channels / groups, kh, kw) on the host.
StatusOr<Tensor> round_conv_transpose2d_weights(const Tensor& weight, const ConvTranspose2dParams& params,
                                                DataType weights_dtype, DataType input_dtype);

}  // namespace tessera
