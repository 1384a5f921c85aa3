#include "tessera/ops/conv2d_params.h"
#include "tessera/ops/nhwc.h"

namespace tessera {

namespace {
uint32_t out_size(uint32_t in, uint32_t pad0, uint32_t pad1, uint32_t k, uint32_t s, uint32_t d) {
  const int64_t span = int64_t{d} * (k - 1) + 1;
  const int64_t padded = int64_t{in} + pad0 + pad1;
  if (s == 0 || padded < span) return 0;
  return static_cast<uint32_t>((padded - span) / s + 1);
}
}  // namespace

uint32_t Conv2dParams::output_height() const {
  return out_size(input_height, padding[0], padding[1], kernel_size[0], stride[0], dilation[0]);
}
uint32_t Conv2dParams::output_width() const {
  return out_size(input_width, padding[2], padding[3], kernel_size[1], stride[1], dilation[1]);
}

uint64_t Conv2dParams::flops() const {
  return 2ull * batch_size * output_height() * output_width() * out_channels * (in_channels / (groups ? groups : 1)) *
         kernel_size[0] * kernel_size[1];
}

Status Conv2dParams::validate() const {
  if (!batch_size || !input_height || !input_width || !in_channels || !out_channels)
    return invalid_argument_error("conv2d: batch, height, width and channels must be > 0, found {}", descriptor());
  if (!kernel_size[0] || !kernel_size[1] || !stride[0] || !stride[1] || !dilation[0] || !dilation[1])
    return invalid_argument_error("conv2d: kernel size, stride and dilation must be > 0, found {}", descriptor());
  if (!groups || in_channels % groups || out_channels % groups)
    return invalid_argument_error("conv2d: in_channels {} and out_channels {} must be divisible by groups {}",
                                  in_channels, out_channels, groups);
  if (!output_height() || !output_width())
    return invalid_argument_error("conv2d: kernel {}x{} (dilation {}x{}) does not fit the padded input {}x{}",
                                  kernel_size[0], kernel_size[1], dilation[0], dilation[1],
                                  input_height + padding[0] + padding[1], input_width + padding[2] + padding[3]);
  return ok_status();
}

Status check_nhwc_input(std::string_view op, std::span<const uint32_t> s, uint32_t n, uint32_t h, uint32_t w,
                        uint32_t c) {
  const uint64_t pixels = uint64_t{n} * h * w;
  const bool nhwc = s.size() == 4 && s[0] == n && s[1] == h && s[2] == w;
  const bool flat = s.size() == 4 && s[0] == 1 && s[1] == 1 && s[2] == pixels;
  if ((nhwc || flat) && s[3] == c) return ok_status();
  std::string found = "[";
  for (size_t i = 0; i < s.size(); ++i) found += (i ? "," : "") + std::to_string(s[i]);
  return invalid_argument_error("{}: expected input ({},{},{},{}) or (1,1,{},{}), found {}]", op, n, h, w, c, pixels, c,
                                found);
}

Status Conv2dParams::check_input_shape(std::span<const uint32_t> s) const {
  return check_nhwc_input("conv2d", s, batch_size, input_height, input_width, in_channels);
}

std::string Conv2dParams::descriptor() const {
  return fmt::format("conv2d:n{}h{}w{}c{}k{}:r{}x{}s{}x{}p{}x{}x{}x{}d{}x{}g{}:{}", batch_size, input_height,
                     input_width, in_channels, out_channels, kernel_size[0], kernel_size[1], stride[0], stride[1],
                     padding[0], padding[1], padding[2], padding[3], dilation[0], dilation[1], groups,
                     activation_name(activation));
}

}  // namespace tessera
