#include <vector>

#include "tessera/ops/conv_transpose2d.h"
#include "tessera/ops/nhwc.h"

namespace tessera {

namespace {
int64_t out_size(uint32_t in, uint32_t pad, uint32_t out_pad, uint32_t k, uint32_t s, uint32_t d) {
  return (int64_t{in} - 1) * s - 2 * int64_t{pad} + int64_t{d} * (k - 1) + out_pad + 1;
}
}  // namespace

uint32_t ConvTranspose2dParams::output_height() const {
  const int64_t v = out_size(input_height, padding[0], output_padding[0], kernel_size[0], stride[0], dilation[0]);
  return v > 0 && v <= UINT32_MAX ? static_cast<uint32_t>(v) : 0;
}
uint32_t ConvTranspose2dParams::output_width() const {
  const int64_t v = out_size(input_width, padding[1], output_padding[1], kernel_size[1], stride[1], dilation[1]);
  return v > 0 && v <= UINT32_MAX ? static_cast<uint32_t>(v) : 0;
}

uint64_t ConvTranspose2dParams::flops() const {
  return 2ull * batch_size * input_height * input_width * in_channels * (out_channels / (groups ? groups : 1)) *
         kernel_size[0] * kernel_size[1];
}

Status ConvTranspose2dParams::validate() const {
  if (!batch_size || !input_height || !input_width || !in_channels || !out_channels)
    return invalid_argument_error("conv_transpose2d: batch, height, width and channels must be > 0, found {}",
                                  descriptor());
  if (!kernel_size[0] || !kernel_size[1] || !stride[0] || !stride[1] || !dilation[0] || !dilation[1])
    return invalid_argument_error("conv_transpose2d: kernel size, stride and dilation must be > 0, found {}",
                                  descriptor());
  if (!groups || in_channels % groups || out_channels % groups)
    return invalid_argument_error("conv_transpose2d: in_channels {} and out_channels {} must be divisible by groups {}",
                                  in_channels, out_channels, groups);
  for (int i = 0; i < 2; ++i)
    if (output_padding[i] >= std::max(stride[i], dilation[i]))
      return invalid_argument_error("conv_transpose2d: output_padding {} must be smaller than stride {} or dilation {}",
                                    output_padding[i], stride[i], dilation[i]);
  if (!output_height() || !output_width())
    return invalid_argument_error("conv_transpose2d: the output of {} would be empty", descriptor());
  return ok_status();
}

Status ConvTranspose2dParams::check_input_shape(std::span<const uint32_t> s) const {
  return check_nhwc_input("conv_transpose2d", s, batch_size, input_height, input_width, in_channels);
}

std::string ConvTranspose2dParams::descriptor() const {
  return fmt::format("conv_transpose2d:n{}h{}w{}c{}k{}:r{}x{}s{}x{}p{}x{}op{}x{}d{}x{}g{}:{}", batch_size,
                     input_height, input_width, in_channels, out_channels, kernel_size[0], kernel_size[1], stride[0],
                     stride[1], padding[0], padding[1], output_padding[0], output_padding[1], dilation[0], dilation[1],
                     groups, activation_name(activation));
}

}  // namespace tessera
