#include "tessera/numerics/tilize.h"

#include <cstring>

#include "tessera/base/aligned.h"

namespace tessera {

void tilize_tile(const std::byte* const* rows, uint32_t valid_cols, std::byte* dst, uint32_t es) {
  const size_t face_row = 16 * es;
  for (uint32_t r = 0; r < 32; ++r) {
    std::byte* d0 = dst + ((r / 16) * 2 * 256 + (r % 16) * 16) * es;  // face 0 or 2
    std::byte* d1 = d0 + 256 * es;                                     // face 1 or 3
    const std::byte* s = rows[r];
    if (!s) {
      std::memset(d0, 0, face_row);
      std::memset(d1, 0, face_row);
    } else if (valid_cols == 32) {
      std::memcpy(d0, s, face_row);
      std::memcpy(d1, s + face_row, face_row);
    } else {
      uint32_t c0 = valid_cols < 16 ? valid_cols : 16;
      std::memcpy(d0, s, c0 * es);
      std::memset(d0 + c0 * es, 0, (16 - c0) * es);
      uint32_t c1 = valid_cols - c0;
      std::memcpy(d1, s + face_row, c1 * es);
      std::memset(d1 + c1 * es, 0, (16 - c1) * es);
    }
  }
}

void untilize_tile(const std::byte* src, std::byte* const* rows, uint32_t valid_cols, uint32_t es) {
  const size_t face_row = 16 * es;
  for (uint32_t r = 0; r < 32; ++r) {
    std::byte* d = rows[r];
    if (!d) continue;
    const std::byte* s0 = src + ((r / 16) * 2 * 256 + (r % 16) * 16) * es;
    const std::byte* s1 = s0 + 256 * es;
    if (valid_cols == 32) {
      std::memcpy(d, s0, face_row);
      std::memcpy(d + face_row, s1, face_row);
    } else {
      uint32_t c0 = valid_cols < 16 ? valid_cols : 16;
      std::memcpy(d, s0, c0 * es);
      std::memcpy(d + face_row, s1, (valid_cols - c0) * es);
    }
  }
}

void tilize(const std::byte* src, size_t stride, uint32_t rows, uint32_t cols, std::byte* dst, uint32_t es) {
  const uint32_t tr_n = static_cast<uint32_t>(div_up(rows, 32)), tc_n = static_cast<uint32_t>(div_up(cols, 32));
  const std::byte* ptrs[32];
  for (uint32_t tr = 0; tr < tr_n; ++tr) {
    for (uint32_t tc = 0; tc < tc_n; ++tc) {
      for (uint32_t r = 0; r < 32; ++r) {
        uint32_t row = tr * 32 + r;
        ptrs[r] = row < rows ? src + row * stride + size_t{tc} * 32 * es : nullptr;
      }
      uint32_t valid = cols - tc * 32 < 32 ? cols - tc * 32 : 32;
      tilize_tile(ptrs, valid, dst + (size_t{tr} * tc_n + tc) * 1024 * es, es);
    }
  }
}

void untilize(const std::byte* src, uint32_t rows, uint32_t cols, std::byte* dst, size_t stride, uint32_t es) {
  const uint32_t tr_n = static_cast<uint32_t>(div_up(rows, 32)), tc_n = static_cast<uint32_t>(div_up(cols, 32));
  std::byte* ptrs[32];
  for (uint32_t tr = 0; tr < tr_n; ++tr) {
    for (uint32_t tc = 0; tc < tc_n; ++tc) {
      for (uint32_t r = 0; r < 32; ++r) {
        uint32_t row = tr * 32 + r;
        ptrs[r] = row < rows ? dst + row * stride + size_t{tc} * 32 * es : nullptr;
      }
      uint32_t valid = cols - tc * 32 < 32 ? cols - tc * 32 : 32;
      untilize_tile(src + (size_t{tr} * tc_n + tc) * 1024 * es, ptrs, valid, es);
    }
  }
}

}  // namespace tessera
