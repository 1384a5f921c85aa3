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

}  // namespace tessera
