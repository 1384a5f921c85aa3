// The reference kernel for upsample (the oracle its fast kernels are tested against).
#include "tessera/ops/upsample.h"

#include <cmath>

#include "tessera/ops/reference.h"

namespace tessera {

namespace reference {

StatusOr<Tensor> upsample(const Tensor& input, const UpsampleParams& p, DataType out_dtype) {
  if (input.is_on_device()) return invalid_argument_error("reference::upsample: expected a host tensor");
  const Shape& s = input.shape();
  TS_RETURN_IF_ERROR(p.validate(s));
  TS_ASSIGN_OR_RETURN(std::vector<float> x, input.to_vector());
  const auto oh = static_cast<uint32_t>(std::floor(s[1] * double{p.scale_h}));
  const auto ow = static_cast<uint32_t>(std::floor(s[2] * double{p.scale_w}));
  const uint32_t h = s[1], w = s[2], c = s[3];
  std::vector<float> y(uint64_t{s[0]} * oh * ow * c);
  // Coordinates computed independently of the device code, in double.
  auto coord = [&](uint32_t dst, uint32_t in, uint32_t out, float scale) {
    if (p.mode == UpsampleMode::NEAREST) return std::min(std::floor(dst / double{scale}), double(in - 1));
    if (p.align_corners) return out > 1 ? static_cast<double>(dst) * (in - 1) / (out - 1) : 0.0;
    return std::max((dst + 0.5) / double{scale} - 0.5, 0.0);
  };
  auto at = [&](uint32_t n, uint32_t iy, uint32_t ix, uint32_t ch) {
    return double{x[((uint64_t{n} * h + iy) * w + ix) * c + ch]};
  };
  for (uint32_t n = 0; n < s[0]; ++n)
    for (uint32_t oy = 0; oy < oh; ++oy)
      for (uint32_t ox = 0; ox < ow; ++ox) {
        const double sy = coord(oy, h, oh, p.scale_h), sx = coord(ox, w, ow, p.scale_w);
        const auto y0 = static_cast<uint32_t>(std::min(std::floor(sy), double(h - 1)));
        const auto x0 = static_cast<uint32_t>(std::min(std::floor(sx), double(w - 1)));
        const uint32_t y1 = std::min(y0 + 1, h - 1), x1 = std::min(x0 + 1, w - 1);
        const double ly = sy - y0, lx = sx - x0;
        for (uint32_t ch = 0; ch < c; ++ch) {
          // Nearest is the one source value (a NaN or infinity beside it does not leak in).
          const double v = p.mode == UpsampleMode::NEAREST
                               ? at(n, y0, x0, ch)
                               : (1 - ly) * ((1 - lx) * at(n, y0, x0, ch) + lx * at(n, y0, x1, ch)) +
                                     ly * ((1 - lx) * at(n, y1, x0, ch) + lx * at(n, y1, x1, ch));
          y[((uint64_t{n} * oh + oy) * ow + ox) * c + ch] = static_cast<float>(v);
        }
      }
  return Tensor::from_vector(y, Shape{s[0], oh, ow, c}, out_dtype);
}

}  // namespace reference

}  // namespace tessera
