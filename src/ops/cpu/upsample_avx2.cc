#include <immintrin.h>

#include <cmath>

#include "tessera/numerics/bfloat16.h"
#include "tessera/numerics/bfloat16_avx2.h"
#include "upsample_kernels.h"

namespace tessera::cpu::avx2 {

namespace {

using tessera::avx2::load8;
using tessera::avx2::store8;

// The blend of upsample_kernels.h over eight lanes.
inline __m256 lerp(__m256 wx, __m256 wy, __m256 p00, __m256 p01, __m256 p10, __m256 p11) {
  const __m256 one = _mm256_set1_ps(1.0f), vx = _mm256_sub_ps(one, wx), vy = _mm256_sub_ps(one, wy);
  const __m256 top = _mm256_fmadd_ps(wx, p01, _mm256_mul_ps(vx, p00));
  const __m256 bottom = _mm256_fmadd_ps(wx, p11, _mm256_mul_ps(vx, p10));
  return _mm256_fmadd_ps(wy, bottom, _mm256_mul_ps(vy, top));
}
// Channels [c0, c0 + 8 V) of one output pixel from its four input pixels
// (bfloat16 16 at a time in unpacked order, bfloat16_avx2.h).
template <bool kBf16, int V>
inline void blend(const std::byte* const* px, uint32_t c0, __m256 wx, __m256 wy, std::byte* out) {
  if constexpr (kBf16 && V % 2 == 0) {
    for (int j = 0; j < V; j += 2) {
      const size_t c = c0 + j * 8;
      __m256 lo[4], hi[4];
      for (int k = 0; k < 4; ++k)
        tessera::avx2::load_bf16x16_unpacked(reinterpret_cast<const uint16_t*>(px[k]) + c, lo[k], hi[k]);
      tessera::avx2::store_bf16x16_unpacked(reinterpret_cast<uint16_t*>(out) + c,
                                            lerp(wx, wy, lo[0], lo[1], lo[2], lo[3]),
                                            lerp(wx, wy, hi[0], hi[1], hi[2], hi[3]));
    }
    return;
  }
  constexpr size_t es = kBf16 ? 2 : 4;
  for (int j = 0; j < V; ++j) {
    const size_t off = (c0 + j * 8) * es;
    store8<kBf16>(out + off, 0,
                  lerp(wx, wy, load8<kBf16>(px[0] + off), load8<kBf16>(px[1] + off), load8<kBf16>(px[2] + off),
                       load8<kBf16>(px[3] + off)));
  }
}

template <bool kBf16>
inline float load1(const std::byte* p, uint32_t c) {
  if constexpr (kBf16)
    return bfloat16_to_float(reinterpret_cast<const uint16_t*>(p)[c]);
  else
    return reinterpret_cast<const float*>(p)[c];
}

template <bool kBf16>
void bilinear_rows_t(const BilinearRowsArgs& a, uint32_t begin, uint32_t end) {
  for_each_bilinear_pixel(a, begin, end, [&](const std::byte* const* px, float wx1, float wy1, std::byte* out) {
    const __m256 wx = _mm256_set1_ps(wx1), wy = _mm256_set1_ps(wy1);
    uint32_t c = 0;
    for (; c + 32 <= a.c; c += 32) blend<kBf16, 4>(px, c, wx, wy, out);
    for (; c + 8 <= a.c; c += 8) blend<kBf16, 1>(px, c, wx, wy, out);
    for (; c < a.c; ++c) {  // the last c % 8 channels
      const float p00 = load1<kBf16>(px[0], c), p01 = load1<kBf16>(px[1], c);
      const float p10 = load1<kBf16>(px[2], c), p11 = load1<kBf16>(px[3], c);
      const float t0 = std::fma(wx1, p01, (1 - wx1) * p00), b0 = std::fma(wx1, p11, (1 - wx1) * p10);
      const float v = std::fma(wy1, b0, (1 - wy1) * t0);
      if constexpr (kBf16)
        reinterpret_cast<uint16_t*>(out)[c] = float_to_bfloat16(v);
      else
        reinterpret_cast<float*>(out)[c] = v;
    }
  });
}

}  // namespace

void bilinear_rows(const BilinearRowsArgs& a, uint32_t begin, uint32_t end) {
  return a.bf16 ? bilinear_rows_t<true>(a, begin, end) : bilinear_rows_t<false>(a, begin, end);
}

}  // namespace tessera::cpu::avx2
