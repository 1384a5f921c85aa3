#include <cmath>
#include <vector>

#include "tessera/ops/reference.h"

namespace tessera::reference {

StatusOr<Tensor> conv2d(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
                        const Conv2dParams& p, DataType out_dtype) {
  TS_RETURN_IF_ERROR(p.validate());
  for (const Tensor* t : {&input, &weight, bias ? &*bias : nullptr})
    if (t && t->is_on_device()) return invalid_argument_error("reference::conv2d: expected host tensors");
  TS_RETURN_IF_ERROR(p.check_input_shape(input.shape().dims()));
  const uint32_t cin_g = p.in_channels / p.groups, cout_g = p.out_channels / p.groups;
  const Shape expected_w{p.out_channels, cin_g, p.kernel_size[0], p.kernel_size[1]};
  if (weight.shape() != expected_w)
    return invalid_argument_error("conv2d: expected weight shape {} (out_channels, in_channels/groups, kh, kw), "
                                  "found {}",
                                  expected_w.to_string(), weight.shape().to_string());
  if (bias && bias->shape().volume() != p.out_channels)
    return invalid_argument_error("conv2d: expected bias with {} values, found shape {}", p.out_channels,
                                  bias->shape().to_string());
  TS_ASSIGN_OR_RETURN(std::vector<float> x, input.to_vector());
  TS_ASSIGN_OR_RETURN(std::vector<float> w, weight.to_vector());
  std::vector<float> b(p.out_channels, 0.0f);
  if (bias) {
    TS_ASSIGN_OR_RETURN(b, bias->to_vector());
  }
  const uint32_t oh = p.output_height(), ow = p.output_width();
  const uint32_t kh = p.kernel_size[0], kw = p.kernel_size[1];
  std::vector<float> y(uint64_t{p.batch_size} * oh * ow * p.out_channels);
  for (uint32_t n = 0; n < p.batch_size; ++n)
    for (uint32_t oy = 0; oy < oh; ++oy)
      for (uint32_t ox = 0; ox < ow; ++ox)
        for (uint32_t oc = 0; oc < p.out_channels; ++oc) {
          const uint32_t g = oc / cout_g;
          double acc = b[oc];
          for (uint32_t ky = 0; ky < kh; ++ky) {
            const int64_t iy = int64_t{oy} * p.stride[0] + int64_t{ky} * p.dilation[0] - p.padding[0];
            if (iy < 0 || iy >= p.input_height) continue;
            for (uint32_t kx = 0; kx < kw; ++kx) {
              const int64_t ix = int64_t{ox} * p.stride[1] + int64_t{kx} * p.dilation[1] - p.padding[2];
              if (ix < 0 || ix >= p.input_width) continue;
              const float* xp = &x[((uint64_t{n} * p.input_height + iy) * p.input_width + ix) * p.in_channels + g * cin_g];
              for (uint32_t ic = 0; ic < cin_g; ++ic)
                acc += double{xp[ic]} * w[((uint64_t{oc} * cin_g + ic) * kh + ky) * kw + kx];
            }
          }
          y[((uint64_t{n} * oh + oy) * ow + ox) * p.out_channels + oc] =
              static_cast<float>(apply_activation(p.activation, acc));
        }
  return Tensor::from_vector(y, Shape{1, 1, p.batch_size * oh * ow, p.out_channels}, out_dtype, Layout::ROW_MAJOR);
}

StatusOr<Tensor> quantized_conv2d(const Tensor& input, const QuantizedConv2dParams& qp, const Tensor& weights,
                                  std::span<const float> weight_scales, std::span<const float> bias) {
  const Conv2dParams& p = qp.conv;
  TS_RETURN_IF_ERROR(p.validate());
  if (p.groups != 1) return unimplemented_error("reference::quantized_conv2d: groups must be 1");
  if (input.is_on_device() || weights.is_on_device())
    return invalid_argument_error("reference::quantized_conv2d: expected host tensors");
  TS_RETURN_IF_ERROR(p.check_input_shape(input.shape().dims()));
  if (weights.shape().volume() != uint64_t{p.out_channels} * p.in_channels * p.kernel_size[0] * p.kernel_size[1] ||
      (weight_scales.size() != 1 && weight_scales.size() != p.out_channels) ||
      (!bias.empty() && bias.size() != p.out_channels))
    return invalid_argument_error("reference::quantized_conv2d: weights, scales or bias do not fit {}",
                                  p.descriptor());
  TS_ASSIGN_OR_RETURN(std::vector<float> x, input.to_vector());
  TS_ASSIGN_OR_RETURN(std::vector<float> w, weights.to_vector());
  // QuantizeLinear to uint8, minus the zero point; a NaN taints the outputs it reaches.
  std::vector<int32_t> q(x.size());
  std::vector<bool> nan(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    nan[i] = std::isnan(x[i]);
    const double v = nan[i] ? 0 : std::nearbyint(static_cast<double>(x[i] / qp.input_scale));
    q[i] = static_cast<int32_t>(std::clamp(v + qp.input_zero_point, 0.0, 255.0)) - qp.input_zero_point;
  }
  const uint32_t oh = p.output_height(), ow = p.output_width(), kh = p.kernel_size[0], kw = p.kernel_size[1];
  std::vector<float> y(uint64_t{p.batch_size} * oh * ow * p.out_channels);
  for (uint32_t n = 0; n < p.batch_size; ++n)
    for (uint32_t oy = 0; oy < oh; ++oy)
      for (uint32_t ox = 0; ox < ow; ++ox)
        for (uint32_t oc = 0; oc < p.out_channels; ++oc) {
          int64_t acc = 0;
          bool tainted = false;
          for (uint32_t ky = 0; ky < kh; ++ky) {
            const int64_t iy = int64_t{oy} * p.stride[0] + int64_t{ky} * p.dilation[0] - p.padding[0];
            if (iy < 0 || iy >= p.input_height) continue;
            for (uint32_t kx = 0; kx < kw; ++kx) {
              const int64_t ix = int64_t{ox} * p.stride[1] + int64_t{kx} * p.dilation[1] - p.padding[2];
              if (ix < 0 || ix >= p.input_width) continue;
              const uint64_t at = ((uint64_t{n} * p.input_height + iy) * p.input_width + ix) * p.in_channels;
              const int32_t* xp = &q[at];
              for (uint32_t ic = 0; ic < p.in_channels; ++ic) tainted = tainted || nan[at + ic];
              for (uint32_t ic = 0; ic < p.in_channels; ++ic)
                acc += int64_t{xp[ic]} * static_cast<int64_t>(w[((uint64_t{oc} * p.in_channels + ic) * kh + ky) * kw + kx]);
            }
          }
          const float s = qp.input_scale * weight_scales[weight_scales.size() == 1 ? 0 : oc];
          const float scaled = s * static_cast<float>(acc);
          const float biased = tainted ? NAN : scaled + (bias.empty() ? 0.0f : bias[oc]);
          float v = static_cast<float>(apply_activation(p.activation, biased));
          if (const auto& o = qp.output; o && !std::isnan(v)) {
            const double q = std::clamp(std::nearbyint(static_cast<double>(v / o->scale)) + o->zero_point,
                                        static_cast<double>(o->lo), static_cast<double>(o->hi));
            v = static_cast<float>(q - o->zero_point) * o->scale;
          }
          y[((uint64_t{n} * oh + oy) * ow + ox) * p.out_channels + oc] = v;
        }
  return Tensor::from_vector(y, Shape{1, 1, p.batch_size * oh * ow, p.out_channels}, DataType::FLOAT32,
                             Layout::ROW_MAJOR);
}

}  // namespace tessera::reference
