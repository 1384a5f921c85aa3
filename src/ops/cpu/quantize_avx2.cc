// quantize_kernels.h on 8 lanes; tails through the portable loop's formulas
// on a stack vector.
#include <immintrin.h>

#include <algorithm>

#include "quantize_kernels.h"

namespace tessera::cpu::avx2 {

namespace {

// As quantize_avx512.cc: x / scale, clamped (a NaN to -1024), rounded to
// nearest even, as int32; `nan` collects the NaN lanes.
inline __m256i quantized(__m256 x, __m256 scale, __m256& nan) {
  const __m256 v = _mm256_div_ps(x, scale);
  nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  // (VMAXPS returns its second operand, the bound, for a NaN.)
  const __m256 c = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-1024.0f)), _mm256_set1_ps(1024.0f));
  return _mm256_cvtps_epi32(_mm256_round_ps(c, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
inline __m256i saturated(__m256i q, __m256i zp, __m256i lo = _mm256_setzero_si256(),
                         __m256i hi = _mm256_set1_epi32(255)) {
  return _mm256_min_epi32(_mm256_max_epi32(_mm256_add_epi32(q, zp), lo), hi);
}

}  // namespace

bool quantize_to_u8(const float* x, size_t n, float scale, int32_t zp, uint8_t* q) {
  const __m256 s = _mm256_set1_ps(scale);
  const __m256i z = _mm256_set1_epi32(zp);
  __m256 nan = _mm256_setzero_ps();
  alignas(32) float in[8];
  alignas(32) int32_t out[8];
  for (size_t i = 0; i < n; i += 8) {
    const size_t m = std::min<size_t>(8, n - i);
    const float* src = x + i;
    if (m < 8) std::fill(in, in + 8, 0.0f), std::copy(x + i, x + i + m, in), src = in;
    const __m256i v = saturated(quantized(_mm256_loadu_ps(src), s, nan), z);
    if (m == 8) {  // 8 int32 -> 8 bytes: two packs, then the low 4 of each 128-bit half
      const __m256i p = _mm256_packus_epi16(_mm256_packs_epi32(v, v), _mm256_setzero_si256());
      const uint32_t lo = static_cast<uint32_t>(_mm256_extract_epi32(p, 0)),
                     hi = static_cast<uint32_t>(_mm256_extract_epi32(p, 4));
      const uint64_t bytes = lo | uint64_t{hi} << 32;
      std::copy_n(reinterpret_cast<const uint8_t*>(&bytes), 8, q + i);
    } else {
      _mm256_store_si256(reinterpret_cast<__m256i*>(out), v);
      for (size_t j = 0; j < m; ++j) q[i + j] = static_cast<uint8_t>(out[j]);
    }
  }
  return _mm256_movemask_ps(nan) != 0;
}

void quantize_centered(const float* x, size_t n, float scale, int32_t zp, int32_t lo, int32_t hi, float out_scale,
                       float* y) {
  const __m256 s = _mm256_set1_ps(scale), os = _mm256_set1_ps(out_scale);
  const __m256i z = _mm256_set1_epi32(zp), l = _mm256_set1_epi32(lo), h = _mm256_set1_epi32(hi);
  alignas(32) float in[8], res[8];
  for (size_t i = 0; i < n; i += 8) {
    const size_t m = std::min<size_t>(8, n - i);
    const float* src = x + i;
    if (m < 8) std::fill(in, in + 8, 0.0f), std::copy(x + i, x + i + m, in), src = in;
    const __m256 v = _mm256_loadu_ps(src);
    __m256 nan = _mm256_setzero_ps();
    const __m256 c = _mm256_cvtepi32_ps(_mm256_sub_epi32(saturated(quantized(v, s, nan), z, l, h), z));
    const __m256 r = _mm256_blendv_ps(_mm256_mul_ps(c, os), v, nan);
    if (m == 8) {
      _mm256_storeu_ps(y + i, r);
    } else {
      _mm256_store_ps(res, r);
      std::copy(res, res + m, y + i);
    }
  }
}

void dequantize_sums(const void* acc, bool float_acc, size_t pixels, uint32_t k, const float* s, const float* b,
                     float* y, size_t ldy) {
  const uint32_t vec = k / 8 * 8;
  for (size_t p = 0; p < pixels; ++p) {
    const size_t row = p * k;
    for (uint32_t c = 0; c < vec; c += 8) {
      const __m256 a = float_acc ? _mm256_loadu_ps(static_cast<const float*>(acc) + row + c)
                                 : _mm256_cvtepi32_ps(_mm256_loadu_si256(
                                       reinterpret_cast<const __m256i*>(static_cast<const int32_t*>(acc) + row + c)));
      const __m256 scaled = _mm256_mul_ps(_mm256_loadu_ps(s + c), a);
      _mm256_storeu_ps(y + p * ldy + c, _mm256_add_ps(scaled, _mm256_loadu_ps(b + c)));
    }
    for (uint32_t c = vec; c < k; ++c) {
      const float a = float_acc ? static_cast<const float*>(acc)[row + c]
                                : static_cast<float>(static_cast<const int32_t*>(acc)[row + c]);
      const float scaled = s[c] * a;
      y[p * ldy + c] = scaled + b[c];
    }
  }
}

}  // namespace tessera::cpu::avx2
