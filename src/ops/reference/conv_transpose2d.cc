// The reference kernel for conv_transpose2d (the oracle its fast kernels are tested against).
#include "tessera/ops/conv_transpose2d.h"

#include <vector>

#include "tessera/ops/nhwc.h"
#include "tessera/ops/reference.h"

namespace tessera {

namespace reference {

StatusOr<Tensor> conv_transpose2d(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
                                  const ConvTranspose2dParams& p, DataType out_dtype) {
  TS_RETURN_IF_ERROR(p.validate());
  TS_RETURN_IF_ERROR(p.check_input_shape(input.shape().dims()));
  const uint32_t cin_g = p.in_channels / p.groups, cout_g = p.out_channels / p.groups;
  const Shape expected_w{p.in_channels, cout_g, p.kernel_size[0], p.kernel_size[1]};
  if (weight.shape() != expected_w)
    return invalid_argument_error(
        "conv_transpose2d: expected weight shape {} (in_channels, out_channels/groups, kh, "
        "kw), found {}",
        expected_w.to_string(), weight.shape().to_string());
  TS_ASSIGN_OR_RETURN(std::vector<float> x, input.to_vector());
  TS_ASSIGN_OR_RETURN(std::vector<float> w, weight.to_vector());
  std::vector<float> b(p.out_channels, 0.0f);
  if (bias) {
    TS_ASSIGN_OR_RETURN(b, bias->to_vector());
  }
  const uint32_t oh = p.output_height(), ow = p.output_width(), kh = p.kernel_size[0], kw = p.kernel_size[1];
  std::vector<double> acc(uint64_t{p.batch_size} * oh * ow * p.out_channels);
  for (uint64_t i = 0; i < acc.size(); ++i) acc[i] = b[i % p.out_channels];
  // Scatter: input pixel (iy, ix) reaches output (iy*s - p + ky*d, ix*s - p + kx*d).
  for (uint32_t n = 0; n < p.batch_size; ++n)
    for (uint32_t iy = 0; iy < p.input_height; ++iy)
      for (uint32_t ix = 0; ix < p.input_width; ++ix)
        for (uint32_t ky = 0; ky < kh; ++ky) {
          const int64_t oy = int64_t{iy} * p.stride[0] - p.padding[0] + int64_t{ky} * p.dilation[0];
          if (oy < 0 || oy >= oh) continue;
          for (uint32_t kx = 0; kx < kw; ++kx) {
            const int64_t ox = int64_t{ix} * p.stride[1] - p.padding[1] + int64_t{kx} * p.dilation[1];
            if (ox < 0 || ox >= ow) continue;
            const float* xp = &x[((uint64_t{n} * p.input_height + iy) * p.input_width + ix) * p.in_channels];
            double* yp = &acc[((uint64_t{n} * oh + oy) * ow + ox) * p.out_channels];
            for (uint32_t ic = 0; ic < p.in_channels; ++ic) {
              const uint32_t g = ic / cin_g;
              for (uint32_t o = 0; o < cout_g; ++o)
                yp[g * cout_g + o] += double{xp[ic]} * w[((uint64_t{ic} * cout_g + o) * kh + ky) * kw + kx];
            }
          }
        }
  std::vector<float> y(acc.size());
  for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<float>(apply_activation(p.activation, acc[i]));
  return Tensor::from_vector(y, Shape{1, 1, p.batch_size * oh * ow, p.out_channels}, out_dtype, Layout::ROW_MAJOR);
}

}  // namespace reference

}  // namespace tessera
