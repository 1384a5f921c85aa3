#include <cmath>
#include <limits>
#include <vector>

#include "tessera/ops/nhwc.h"
#include "tessera/ops/pool2d.h"

namespace tessera {

namespace {
uint32_t pooled(uint32_t in, uint32_t pad, uint32_t k, uint32_t s, uint32_t d, bool ceil_mode) {
  const int64_t span = int64_t{d} * (k - 1) + 1, room = int64_t{in} + 2 * pad - span;
  if (s == 0 || room < 0) return 0;
  int64_t out = (ceil_mode ? (room + s - 1) / s : room / s) + 1;
  // The last window must start inside the input or the leading padding.
  if (ceil_mode && (out - 1) * s >= int64_t{in} + pad) --out;
  return static_cast<uint32_t>(out);
}
}  // namespace

uint32_t Pool2dParams::output_height() const {
  return pooled(input_height, padding[0], kernel_size[0], stride[0], dilation[0], ceil_mode);
}
uint32_t Pool2dParams::output_width() const {
  return pooled(input_width, padding[1], kernel_size[1], stride[1], dilation[1], ceil_mode);
}

Status Pool2dParams::validate(std::string_view op) const {
  if (!batch_size || !input_height || !input_width || !channels)
    return invalid_argument_error("{}: batch, height, width and channels must be > 0, found {}", op, descriptor(op));
  if (!kernel_size[0] || !kernel_size[1] || !stride[0] || !stride[1] || !dilation[0] || !dilation[1])
    return invalid_argument_error("{}: kernel size, stride and dilation must be > 0, found {}", op, descriptor(op));
  if (2 * padding[0] > kernel_size[0] || 2 * padding[1] > kernel_size[1])
    return invalid_argument_error("{}: padding must be at most half the kernel size, found padding {}x{} "
                                  "for kernel {}x{}",
                                  op, padding[0], padding[1], kernel_size[0], kernel_size[1]);
  if (!output_height() || !output_width())
    return invalid_argument_error("{}: the window does not fit the padded input in {}", op, descriptor(op));
  return ok_status();
}

Status Pool2dParams::check_input_shape(std::span<const uint32_t> s, std::string_view op) const {
  return check_nhwc_input(op, s, batch_size, input_height, input_width, channels);
}

std::string Pool2dParams::descriptor(std::string_view op) const {
  const bool avg = op == "avg_pool2d";
  return fmt::format("{}:n{}h{}w{}c{}:k{}x{}s{}x{}p{}x{}d{}x{}{}{}", op, batch_size, input_height, input_width,
                     channels, kernel_size[0], kernel_size[1], stride[0], stride[1], padding[0], padding[1],
                     dilation[0], dilation[1], ceil_mode ? ":ceil" : "",
                     avg && !count_include_pad ? ":exclude_pad" : "");
}

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
              const bool in_padded = iy < int64_t{p.input_height} + p.padding[0] &&
                                     ix < int64_t{p.input_width} + p.padding[1];
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
