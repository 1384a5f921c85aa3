// NHWC activations as the CNN ops take them: (N, H, W, C), or flattened
// (1, 1, N*H*W, C) as the original passes them between layers.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "tessera/base/status.h"

namespace tessera {

// INVALID_ARGUMENT naming `op` unless `shape` is one of the two forms.
Status check_nhwc_input(std::string_view op, std::span<const uint32_t> shape, uint32_t n, uint32_t h, uint32_t w,
                        uint32_t c);

}  // namespace tessera
