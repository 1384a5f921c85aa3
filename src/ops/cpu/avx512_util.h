// AVX-512 helpers shared by the _avx512.cc kernel files (internal; include
// only from files compiled with the AVX-512 flags).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace tessera::cpu::avx512 {

inline __mmask16 tail_mask(size_t left) { return static_cast<__mmask16>(left >= 16 ? 0xffff : (1u << left) - 1); }

// bfloat16 -> float32 is exact: the bits move up 16.
inline __m512 load_bf16(const uint16_t* p, __mmask16 m) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}

// Round to nearest even with NaN kept quiet and denormals kept (unlike
// vcvtneps2bf16); the same bits as float_to_bfloat16.
inline __m256i to_bf16(__m512 f) {
  __m512i x = _mm512_castps_si512(f);
  __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(x, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  r = _mm512_mask_or_epi32(r, nan, x, _mm512_set1_epi32(0x00400000));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}

}  // namespace tessera::cpu::avx512
