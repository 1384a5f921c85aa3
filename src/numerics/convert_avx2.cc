// AVX2 variants of the bfloat16 bulk conversions (convert_internal.h):
// bit-identical to the scalar ones (round to nearest even, NaN kept quiet).
// On AVX2-only CPUs every bfloat16 staging copy (oneDNN's 1x1 convs and
// matmuls, typecasts, tilize) runs through these.
#include <immintrin.h>

#include "convert_internal.h"
#include "tessera/numerics/bfloat16.h"

namespace tessera::avx2 {

namespace {

// 8 floats -> their bfloat16 bits in the low half of each 32-bit lane.
inline __m256i bf16_round(__m256i u) {
  const __m256i hi = _mm256_srli_epi32(u, 16);
  const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  return _mm256_blendv_epi8(rounded, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
}

}  // namespace

void float_to_bfloat16(const float* src, uint16_t* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i lo = bf16_round(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    const __m256i hi = bf16_round(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 8)));
    // packus works per 128-bit lane (lo0-3 hi0-3 lo4-7 hi4-7): put the quads back in order.
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xd8));
  }
  for (; i < n; ++i) dst[i] = tessera::float_to_bfloat16(src[i]);
}

void bfloat16_to_float(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_slli_epi32(w, 16));
  }
  for (; i < n; ++i) dst[i] = tessera::bfloat16_to_float(src[i]);
}

}  // namespace tessera::avx2
