// Tilize and untilize: row-major <-> 32x32 tiles of four 16x16 faces.
//
// A tile stores face 0 (top-left), face 1 (top-right), face 2 (bottom-left),
// face 3 (bottom-right), each face row-major. A matrix of rows x cols becomes
// ceil(rows/32) x ceil(cols/32) tiles in row-major tile order; padding
// elements are zero. Untilize drops the padding. `elem_size` is 1, 2 or 4
// (any other value is treated as 4).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera {

// One tile. `rows[i]` points at the first element of the tile's row i in the
// source (nullptr for a padding row); `valid_cols` (1..32) elements are read
// from each row and the rest of the tile row is zero.
void tilize_tile(const std::byte* const* rows, uint32_t valid_cols, std::byte* dst_tile, uint32_t elem_size);
// The inverse: writes `valid_cols` elements to each non-null `rows[i]`.
void untilize_tile(const std::byte* src_tile, std::byte* const* rows, uint32_t valid_cols, uint32_t elem_size);

// Whole matrices with a uniform row stride (in bytes).
void tilize(const std::byte* src, size_t src_row_stride, uint32_t rows, uint32_t cols, std::byte* dst,
            uint32_t elem_size);
void untilize(const std::byte* src, uint32_t rows, uint32_t cols, std::byte* dst, size_t dst_row_stride,
              uint32_t elem_size);

// Index of element (r, c) of a tile in TILE order.
constexpr uint32_t tile_offset(uint32_t r, uint32_t c) {
  return ((r / 16) * 2 + (c / 16)) * 256 + (r % 16) * 16 + (c % 16);
}

}  // namespace tessera
