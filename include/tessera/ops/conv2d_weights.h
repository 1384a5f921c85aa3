// Block-float conv weights as data: conv2d rounds a (out, in/groups, kh, kw)
// weight to bfloat8_b / bfloat4_b through the (kh * kw * in/groups) x out
// matrix of its prepared weights (the original's layout: blocks of 16 run
// over output channels), in tiles. These functions give those tiles and take
// them back, so a compiled image can store block-float weights at their own
// size and load them to exactly the values conv2d computes with.
#pragma once

#include <span>
#include <vector>

#include "tessera/base/status.h"
#include "tessera/tensor/tensor.h"

namespace tessera {

// The host TILE tensor (1, 1, kh * kw * in/groups, out) of `weight` in
// `block_float`. INVALID_ARGUMENT for dims of another rank or size, or a
// dtype that is not block-float.
StatusOr<Tensor> conv2d_weight_tiles(std::span<const float> weight, const Shape& dims, DataType block_float);
// The float32 (out, in/groups, kh, kw) values of such tiles: conv2d's
// rounded weights. INVALID_ARGUMENT when `tiles` is not that tensor.
StatusOr<std::vector<float>> conv2d_weights_from_tiles(const Tensor& tiles, const Shape& dims);

}  // namespace tessera
