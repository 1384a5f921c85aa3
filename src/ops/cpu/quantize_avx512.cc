// quantize_kernels.h on 16 lanes (masked tails).
#include <immintrin.h>

#include "quantize_kernels.h"

namespace tessera::cpu::avx512 {

namespace {

// x / scale, clamped to +-1024 (VMAXPS / VMINPS give the bound for a NaN),
// rounded to nearest even, as int32; `nan` collects the NaN lanes.
inline __m512i quantized(__m512 x, __m512 scale, __mmask16& nan) {
  const __m512 v = _mm512_div_ps(x, scale);
  nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  const __m512 c = _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(-1024.0f)), _mm512_set1_ps(1024.0f));
  return _mm512_cvtps_epi32(_mm512_roundscale_ps(c, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
inline __m512i saturated(__m512i q, __m512i zp, __m512i lo = _mm512_setzero_si512(),
                         __m512i hi = _mm512_set1_epi32(255)) {
  return _mm512_min_epi32(_mm512_max_epi32(_mm512_add_epi32(q, zp), lo), hi);
}
inline __mmask16 tail(size_t m) { return static_cast<__mmask16>((1u << m) - 1); }

}  // namespace

bool quantize_to_u8(const float* x, size_t n, float scale, int32_t zp, uint8_t* q) {
  const __m512 s = _mm512_set1_ps(scale);
  const __m512i z = _mm512_set1_epi32(zp);
  __mmask16 nan = 0;
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i),
                     _mm512_cvtepi32_epi8(saturated(quantized(_mm512_loadu_ps(x + i), s, nan), z)));
  if (i < n) {
    const __mmask16 m = tail(n - i);
    __mmask16 lanes = 0;
    const __m512i v = saturated(quantized(_mm512_maskz_loadu_ps(m, x + i), s, lanes), z);
    _mm512_mask_cvtepi32_storeu_epi8(q + i, m, v);
    nan |= lanes & m;
  }
  return nan != 0;
}

void quantize_centered(const float* x, size_t n, float scale, int32_t zp, int32_t lo, int32_t hi, float out_scale,
                       float* y) {
  const __m512 s = _mm512_set1_ps(scale), os = _mm512_set1_ps(out_scale);
  const __m512i z = _mm512_set1_epi32(zp), l = _mm512_set1_epi32(lo), h = _mm512_set1_epi32(hi);
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? static_cast<__mmask16>(0xffff) : tail(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    __mmask16 nan = 0;
    const __m512 c = _mm512_cvtepi32_ps(_mm512_sub_epi32(saturated(quantized(v, s, nan), z, l, h), z));
    _mm512_mask_storeu_ps(y + i, m, _mm512_mask_mov_ps(_mm512_mul_ps(c, os), nan, v));
  }
}

void dequantize_sums(const void* acc, bool float_acc, size_t pixels, uint32_t k, const float* s, const float* b,
                     float* y, size_t ldy) {
  for (size_t p = 0; p < pixels; ++p)
    for (uint32_t c = 0; c < k; c += 16) {
      const __mmask16 m = k - c >= 16 ? static_cast<__mmask16>(0xffff) : tail(k - c);
      const size_t i = p * k + c;
      const __m512 a = float_acc
                           ? _mm512_maskz_loadu_ps(m, static_cast<const float*>(acc) + i)
                           : _mm512_cvtepi32_ps(_mm512_maskz_loadu_epi32(m, static_cast<const int32_t*>(acc) + i));
      const __m512 scaled = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, s + c), a);
      _mm512_mask_storeu_ps(y + p * ldy + c, m, _mm512_add_ps(scaled, _mm512_maskz_loadu_ps(m, b + c)));
    }
}

}  // namespace tessera::cpu::avx512
