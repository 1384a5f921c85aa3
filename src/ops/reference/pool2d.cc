// The reference kernel for pool2d (the oracle its fast kernels are tested against).
#include "tessera/ops/pool2d.h"

#include <cmath>
#include <limits>
#include <vector>

#include "tessera/ops/nhwc.h"
#include "tessera/ops/reference.h"

namespace tessera {

namespace reference {

StatusOr<Tensor> max_pool2d(const Tensor& input, const Pool2dParams& p, DataType out_dtype) {
  TS_RETURN_IF_ERROR(p.validate());
  TS_RETURN_IF_ERROR(p.check_input_shape(input.shape().dims()));
  if (input.is_on_device()) return invalid_argument_error("reference::max_pool2d: expected a host tensor");
  TS_ASSIGN_OR_RETURN(std::vector<float> x, input.to_vector());
  const uint32_t oh = p.output_height(), ow = p.output_width(), c = p.channels;
  std::vector<float> y(uint64_t{p.batch_size} * oh * ow * c);
  for (uint32_t n = 0; n < p.batch_size; ++n)
    for (uint32_t oy = 0; oy < oh; ++oy)
      for (uint32_t ox = 0; ox < ow; ++ox)
        for (uint32_t ch = 0; ch < c; ++ch) {
          float m = -std::numeric_limits<float>::infinity();
          for (uint32_t ky = 0; ky < p.kernel_size[0]; ++ky)
            for (uint32_t kx = 0; kx < p.kernel_size[1]; ++kx) {
              const int64_t iy = int64_t{oy} * p.stride[0] + int64_t{ky} * p.dilation[0] - p.padding[0];
              const int64_t ix = int64_t{ox} * p.stride[1] + int64_t{kx} * p.dilation[1] - p.padding[1];
              if (iy < 0 || iy >= p.input_height || ix < 0 || ix >= p.input_width) continue;
              const float v = x[((uint64_t{n} * p.input_height + iy) * p.input_width + ix) * c + ch];
              if (std::isnan(v) || v > m) m = std::isnan(m) ? m : v;
            }
          y[((uint64_t{n} * oh + oy) * ow + ox) * c + ch] = m;
        }
  return Tensor::from_vector(y, Shape{1, 1, p.batch_size * oh * ow, c}, out_dtype, Layout::ROW_MAJOR);
}

StatusOr<Tensor> avg_pool2d(const Tensor& input, const Pool2dParams& p, DataType out_dtype) {
  TS_RETURN_IF_ERROR(p.validate("avg_pool2d"));
  TS_RETURN_IF_ERROR(p.check_input_shape(input.shape().dims(), "avg_pool2d"));
  if (input.is_on_device()) return invalid_argument_error("reference::avg_pool2d: expected a host tensor");
  TS_ASSIGN_OR_RETURN(std::vector<float> x, input.to_vector());
  const uint32_t oh = p.output_height(), ow = p.output_width(), c = p.channels;
  std::vector<float> y(uint64_t{p.batch_size} * oh * ow * c);
  for (uint32_t n = 0; n < p.batch_size; ++n)
    for (uint32_t oy = 0; oy < oh; ++oy)
      for (uint32_t ox = 0; ox < ow; ++ox)
        for (uint32_t ch = 0; ch < c; ++ch) {
          double sum = 0;
          uint32_t count = 0;
          for (uint32_t ky = 0; ky < p.kernel_size[0]; ++ky)
            for (uint32_t kx = 0; kx < p.kernel_size[1]; ++kx) {
              const int64_t iy = int64_t{oy} * p.stride[0] + int64_t{ky} * p.dilation[0] - p.padding[0];
              const int64_t ix = int64_t{ox} * p.stride[1] + int64_t{kx} * p.dilation[1] - p.padding[1];
              // PyTorch counts padded positions up to the padded border only.
              const bool in_padded =
                  iy < int64_t{p.input_height} + p.padding[0] && ix < int64_t{p.input_width} + p.padding[1];
              if (iy < 0 || iy >= p.input_height || ix < 0 || ix >= p.input_width) {
                if (p.count_include_pad && in_padded) ++count;
                continue;
              }
              ++count;
              sum += x[((uint64_t{n} * p.input_height + iy) * p.input_width + ix) * c + ch];
            }
          y[((uint64_t{n} * oh + oy) * ow + ox) * c + ch] = static_cast<float>(sum / count);
        }
  return Tensor::from_vector(y, Shape{1, 1, p.batch_size * oh * ow, c}, out_dtype, Layout::ROW_MAJOR);
}

StatusOr<Tensor> global_avg_pool2d(const Tensor& input, DataType out_dtype) {
  if (input.is_on_device()) return invalid_argument_error("reference::global_avg_pool2d: expected a host tensor");
  const Shape& s = input.shape();
  if (s.rank() != 4) return invalid_argument_error("global_avg_pool2d: expected (N, H, W, C), found {}", s.to_string());
  TS_ASSIGN_OR_RETURN(std::vector<float> x, input.to_vector());
  const uint64_t hw = uint64_t{s[1]} * s[2], c = s[3];
  std::vector<float> y(s[0] * c);
  for (uint32_t n = 0; n < s[0]; ++n)
    for (uint64_t ch = 0; ch < c; ++ch) {
      double sum = 0;
      for (uint64_t i = 0; i < hw; ++i) sum += x[(n * hw + i) * c + ch];
      y[n * c + ch] = static_cast<float>(sum / static_cast<double>(hw));
    }
  return Tensor::from_vector(y, Shape{s[0], 1, 1, s[3]}, out_dtype, Layout::ROW_MAJOR);
}

}  // namespace reference

}  // namespace tessera
