#include <immintrin.h>

#include <cmath>

#include "pool_kernels.h"
#include "tessera/numerics/bfloat16.h"

namespace tessera::cpu::avx2 {

namespace {
// max(v, m) keeps m on ties and when m is NaN; then a NaN v replaces it
// (the scalar nan_max, as in pool_avx512.cc).
inline __m256 nan_max(__m256 m, __m256 v) { return _mm256_blendv_ps(_mm256_max_ps(v, m), v, _mm256_cmp_ps(v, v, _CMP_UNORD_Q)); }
inline float nan_max(float m, float v) { return std::isnan(v) || (!std::isnan(m) && v > m) ? v : m; }
inline __m256 add(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
inline float add(float a, float b) { return a + b; }

// acc[i] = op(acc[i], x[i]) over float32 or widened bfloat16 values, eight
// lanes at a time and the tail one by one.
template <bool kBf16, class Op>
void accumulate(float* acc, const void* x, size_t n, Op op) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v;
    if constexpr (kBf16) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(x) + i));
      v = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    } else {
      v = _mm256_loadu_ps(static_cast<const float*>(x) + i);
    }
    _mm256_storeu_ps(acc + i, op(_mm256_loadu_ps(acc + i), v));
  }
  for (; i < n; ++i) {
    const float v = kBf16 ? bfloat16_to_float(static_cast<const uint16_t*>(x)[i]) : static_cast<const float*>(x)[i];
    acc[i] = op(acc[i], v);
  }
}
}  // namespace

void max_accumulate_f32(float* acc, const void* x, size_t n) {
  accumulate<false>(acc, x, n, [](auto m, auto v) { return nan_max(m, v); });
}
void max_accumulate_bf16(float* acc, const void* x, size_t n) {
  accumulate<true>(acc, x, n, [](auto m, auto v) { return nan_max(m, v); });
}
void sum_accumulate_f32(float* acc, const void* x, size_t n) {
  accumulate<false>(acc, x, n, [](auto a, auto b) { return add(a, b); });
}
void sum_accumulate_bf16(float* acc, const void* x, size_t n) {
  accumulate<true>(acc, x, n, [](auto a, auto b) { return add(a, b); });
}

}  // namespace tessera::cpu::avx2
