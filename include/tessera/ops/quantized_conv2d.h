// quantized_conv2d: a conv of quantized activations and int8 weights on a
// device, as a QDQ model's
//   Conv(DequantizeLinear(QuantizeLinear(x, sx, zx)), DequantizeLinear(wq, sw), bias)
// (ONNX's QLinearConv with a float output) defines it:
//   q(x)  = clamp(round_half_even(x / sx) + zx, 0, 255)   (QuantizeLinear to uint8)
//   y[c]  = act(s[c] * acc[c] + bias[c]),  s[c] = sx * sw[c] (float32),
//   acc[c] = sum over taps of (q(x) - zx) * wq   (exact, in integers)
// Padding taps hold the zero point (a 0.0 in the dequantized input). +-Inf
// saturates; a NaN input makes every output whose window holds it NaN (all
// channels), as the QDQ model's float ops compute it (ONNX Runtime's int8
// kernels quantize it to 0 instead). s[c] * acc and the bias are two float32
// roundings, then the activation, the way reference::quantized_conv2d
// computes them.
//
// Input: device rows in NHWC, (N, H, W, C) or (1, 1, N*H*W, C), float32 or
// bfloat16, ROW_MAJOR, any memory config. Output: (1, 1, N*OH*OW, out_channels)
// float32 ROW_MAJOR, DRAM interleaved. Groups: 1.
//
// Execution: each worker's shard (an image's band of output rows) quantizes
// the input rows it reads, halo included, and runs a single-threaded oneDNN
// convolution (Debian libdnnl) writing int32 sums, which the shard scales,
// biases and activates while they are in its cache. On CPUs with VNNI
// (AVX512-VNNI, AVX-VNNI) oneDNN's int8 kernels sum the products exactly, so
// the output matches the reference bit for bit (the activation's vector form
// aside). Without VNNI oneDNN's int8 kernels halve the weights (its
// pre-VNNI overflow guard) and lose their last bit: there the shard computes
// the same sums in float32 ((q - zx) and wq as floats; exact while a sum
// stays under 2^24), which quantized_conv2d_kernel() names.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>

#include "tessera/ops/conv2d_params.h"
#include "tessera/tensor/tensor.h"

namespace tessera {

// A QuantizeLinear -> DequantizeLinear pair after the activation, applied to
// the float output: (clamp(round(y / scale) + zero_point, lo, hi) - zero_point)
// * scale (a NaN stays NaN); lo / hi: the quantized type's range (uint8 0 /
// 255, int8 -128 / 127).
struct OutputQuantization {
  float scale = 0;
  int32_t zero_point = 0, lo = 0, hi = 255;
};

struct QuantizedConv2dParams {
  Conv2dParams conv;             // geometry (groups 1) and the fused activation
  float input_scale = 1.0f;      // QuantizeLinear's y_scale: positive, finite
  int32_t input_zero_point = 0;  // uint8: 0..255
  std::optional<OutputQuantization> output;
};

// "int8" where this CPU's int8 kernels sum exactly (VNNI), else "f32".
std::string_view quantized_conv2d_kernel();

// A conv layer with its weights prepared once for one device.
class QuantizedConv2d {
 public:
  // weights: host (out_channels, in_channels, kh, kw), integers in
  // [-128, 127] (any float dtype holding them); weight_scales: 1 (per
  // tensor) or out_channels positive finite values; bias: empty or
  // out_channels floats. INVALID_ARGUMENT names what is out of range.
  static StatusOr<std::unique_ptr<QuantizedConv2d>> create(Device& device, const QuantizedConv2dParams& params,
                                                           const Tensor& weights, std::span<const float> weight_scales,
                                                           std::span<const float> bias);
  ~QuantizedConv2d();

  StatusOr<Tensor> operator()(const Tensor& input, uint8_t cq_id = 0) const;
  const QuantizedConv2dParams& params() const;

  struct Impl;

 private:
  explicit QuantizedConv2d(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera
