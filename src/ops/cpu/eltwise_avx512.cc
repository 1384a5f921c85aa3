#include <immintrin.h>

#include "eltwise_kernels.h"

namespace tessera::cpu::avx512 {

namespace {
inline __mmask16 tail_mask(size_t left) { return static_cast<__mmask16>(left >= 16 ? 0xffff : (1u << left) - 1); }

// x < 0 ? 0 : x, keeping NaN and -0 (an ordered compare is false for both).
inline __m512 relu(__m512 x) {
  return _mm512_maskz_mov_ps(~_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ), x);
}

inline __m512 load_bf16(const uint16_t* p, __mmask16 m) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}

// Round to nearest even with NaN kept quiet; same bits as float_to_bfloat16.
inline __m256i to_bf16(__m512 f) {
  __m512i x = _mm512_castps_si512(f);
  __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(x, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  r = _mm512_mask_or_epi32(r, nan, x, _mm512_set1_epi32(0x00400000));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}
}  // namespace

void relu_f32(const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; i += 16) {
    __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, m, relu(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

void add_f32(const float* a, const float* b, float* y, size_t n) {
  for (size_t i = 0; i < n; i += 16) {
    __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i)));
  }
}

void relu_bf16(const uint16_t* x, uint16_t* y, size_t n) {
  // Negative and not NaN -> 0, directly on the bits (exact: bf16 -> f32 is exact).
  for (size_t i = 0; i < n; i += 32) {
    __mmask32 m = static_cast<__mmask32>(n - i >= 32 ? 0xffffffffu : (1u << (n - i)) - 1);
    __m512i v = _mm512_maskz_loadu_epi16(m, x + i);
    __mmask32 neg = _mm512_cmpgt_epu16_mask(v, _mm512_set1_epi16(static_cast<short>(0x8000)));
    __mmask32 nan = _mm512_cmpgt_epu16_mask(_mm512_and_si512(v, _mm512_set1_epi16(0x7fff)), _mm512_set1_epi16(0x7f80));
    _mm512_mask_storeu_epi16(y + i, m, _mm512_maskz_mov_epi16(~(neg & ~nan), v));
  }
}

void add_bf16(const uint16_t* a, const uint16_t* b, uint16_t* y, size_t n) {
  for (size_t i = 0; i < n; i += 16) {
    __mmask16 m = tail_mask(n - i);
    __m512 s = _mm512_add_ps(load_bf16(a + i, m), load_bf16(b + i, m));
    _mm256_mask_storeu_epi16(y + i, m, to_bf16(s));
  }
}

}  // namespace tessera::cpu::avx512
