#include "tessera/numerics/tilize.h"

#include <cstring>

#include "tessera/base/aligned.h"

namespace tessera {

namespace {

// ES = element size; compile-time so each face-row copy is a fixed-size move.
template <uint32_t ES>
void tilize_tile_t(const std::byte* const* rows, uint32_t valid_cols, std::byte* dst) {
  constexpr size_t kFaceRow = 16 * ES;
  for (uint32_t r = 0; r < 32; ++r) {
    std::byte* d0 = dst + ((r / 16) * 2 * 256 + (r % 16) * 16) * ES;  // face 0 or 2
    std::byte* d1 = d0 + 256 * ES;                                     // face 1 or 3
    const std::byte* s = rows[r];
    if (!s) {
      std::memset(d0, 0, kFaceRow);
      std::memset(d1, 0, kFaceRow);
    } else if (valid_cols == 32) {
      std::memcpy(d0, s, kFaceRow);
      std::memcpy(d1, s + kFaceRow, kFaceRow);
    } else {
      uint32_t c0 = valid_cols < 16 ? valid_cols : 16;
      std::memcpy(d0, s, c0 * ES);
      std::memset(d0 + c0 * ES, 0, (16 - c0) * ES);
      uint32_t c1 = valid_cols - c0;
      std::memcpy(d1, s + kFaceRow, c1 * ES);
      std::memset(d1 + c1 * ES, 0, (16 - c1) * ES);
    }
  }
}

template <uint32_t ES>
void untilize_tile_t(const std::byte* src, std::byte* const* rows, uint32_t valid_cols) {
  constexpr size_t kFaceRow = 16 * ES;
  for (uint32_t r = 0; r < 32; ++r) {
    std::byte* d = rows[r];
    if (!d) continue;
    const std::byte* s0 = src + ((r / 16) * 2 * 256 + (r % 16) * 16) * ES;
    const std::byte* s1 = s0 + 256 * ES;
    if (valid_cols == 32) {
      std::memcpy(d, s0, kFaceRow);
      std::memcpy(d + kFaceRow, s1, kFaceRow);
    } else {
      uint32_t c0 = valid_cols < 16 ? valid_cols : 16;
      std::memcpy(d, s0, c0 * ES);
      std::memcpy(d + kFaceRow, s1, (valid_cols - c0) * ES);
    }
  }
}

}  // namespace

void tilize_tile(const std::byte* const* rows, uint32_t valid_cols, std::byte* dst, uint32_t es) {
  switch (es) {
    case 1: return tilize_tile_t<1>(rows, valid_cols, dst);
    case 2: return tilize_tile_t<2>(rows, valid_cols, dst);
    default: return tilize_tile_t<4>(rows, valid_cols, dst);
  }
}

void untilize_tile(const std::byte* src, std::byte* const* rows, uint32_t valid_cols, uint32_t es) {
  switch (es) {
    case 1: return untilize_tile_t<1>(src, rows, valid_cols);
    case 2: return untilize_tile_t<2>(src, rows, valid_cols);
    default: return untilize_tile_t<4>(src, rows, valid_cols);
  }
}

namespace {

// Whole matrices go in bands of 32 rows and blocks of kBlock tiles: each of
// the band's rows is read as one contiguous run per block (prefetch-friendly)
// while the block's tiles (kBlock * 4 KiB for fp32) stay in cache.
constexpr uint32_t kBlock = 8;

template <uint32_t ES, bool kToTiles>
void convert_matrix(std::byte* rm, size_t stride, uint32_t rows, uint32_t cols, std::byte* tiles) {
  constexpr size_t kFaceRow = 16 * ES, kTile = 1024 * ES;
  const uint32_t tr_n = static_cast<uint32_t>(div_up(rows, 32)), tc_n = static_cast<uint32_t>(div_up(cols, 32));
  const uint32_t full_tc = cols / 32;  // tiles with no column padding
  for (uint32_t tr = 0; tr < tr_n; ++tr) {
    std::byte* band = tiles + size_t{tr} * tc_n * kTile;
    for (uint32_t tc0 = 0; tc0 < full_tc; tc0 += kBlock) {
      const uint32_t tc1 = tc0 + kBlock < full_tc ? tc0 + kBlock : full_tc;
      for (uint32_t r = 0; r < 32; ++r) {
        const uint32_t row = tr * 32 + r;
        const size_t face_off = ((r / 16) * 2 * 256 + (r % 16) * 16) * ES;
        std::byte* line = row < rows ? rm + row * stride : nullptr;
        for (uint32_t tc = tc0; tc < tc1; ++tc) {
          std::byte* t = band + tc * kTile + face_off;
          if constexpr (kToTiles) {
            if (!line) {
              std::memset(t, 0, kFaceRow);
              std::memset(t + 256 * ES, 0, kFaceRow);
            } else {
              std::memcpy(t, line + tc * 32 * ES, kFaceRow);
              std::memcpy(t + 256 * ES, line + tc * 32 * ES + kFaceRow, kFaceRow);
            }
          } else if (line) {
            std::memcpy(line + tc * 32 * ES, t, kFaceRow);
            std::memcpy(line + tc * 32 * ES + kFaceRow, t + 256 * ES, kFaceRow);
          }
        }
      }
    }
    if (full_tc == tc_n) continue;
    // The last, column-padded tile of the band.
    const uint32_t tc = full_tc, valid = cols - tc * 32;
    std::byte* ptrs[32];
    for (uint32_t r = 0; r < 32; ++r) {
      const uint32_t row = tr * 32 + r;
      ptrs[r] = row < rows ? rm + row * stride + size_t{tc} * 32 * ES : nullptr;
    }
    if constexpr (kToTiles)
      tilize_tile_t<ES>(ptrs, valid, band + tc * kTile);
    else
      untilize_tile_t<ES>(band + tc * kTile, ptrs, valid);
  }
}

template <bool kToTiles>
void convert_matrix_any(std::byte* rm, size_t stride, uint32_t rows, uint32_t cols, std::byte* tiles, uint32_t es) {
  switch (es) {
    case 1: return convert_matrix<1, kToTiles>(rm, stride, rows, cols, tiles);
    case 2: return convert_matrix<2, kToTiles>(rm, stride, rows, cols, tiles);
    default: return convert_matrix<4, kToTiles>(rm, stride, rows, cols, tiles);
  }
}

}  // namespace

void tilize(const std::byte* src, size_t stride, uint32_t rows, uint32_t cols, std::byte* dst, uint32_t es) {
  convert_matrix_any<true>(const_cast<std::byte*>(src), stride, rows, cols, dst, es);  // read only
}

void untilize(const std::byte* src, uint32_t rows, uint32_t cols, std::byte* dst, size_t stride, uint32_t es) {
  convert_matrix_any<false>(dst, stride, rows, cols, const_cast<std::byte*>(src), es);  // read only
}

}  // namespace tessera
