// AVX-512 helpers shared by the _avx512.cc kernel files (internal; include
// only from files compiled with the AVX-512 flags).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace tessera::cpu::avx512 {

inline __mmask16 tail_mask(size_t left) { return static_cast<__mmask16>(left >= 16 ? 0xffff : (1u << left) - 1); }

// Loads and stores of up to 16 lanes (mask `m` from tail_mask): a full
// vector goes unmasked. On the AMD Zen 5 CPU here, masked loads and stores
// walking arrays from DRAM ran at half the bandwidth of plain ones (an
// in-place add over 64 MB, one thread: 18-20 against 36-44 GB/s; the
// residual pass of ResNet-50's 1x1 convs: 4.8 against 14.9 GB/s).
inline __m512 loadu_ps(const float* p, __mmask16 m) {
  return m == 0xffff ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(m, p);
}
inline void storeu_ps(float* p, __mmask16 m, __m512 v) {
  if (m == 0xffff) _mm512_storeu_ps(p, v);
  else _mm512_mask_storeu_ps(p, m, v);
}
inline __m256i loadu_epi16(const uint16_t* p, __mmask16 m) {
  return m == 0xffff ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)) : _mm256_maskz_loadu_epi16(m, p);
}
inline void storeu_epi16(uint16_t* p, __mmask16 m, __m256i v) {
  if (m == 0xffff) _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
  else _mm256_mask_storeu_epi16(p, m, v);
}

// f(i, m) over n lanes in vectors of 16: the full ones with m = 0xffff, a
// constant once f is inlined (plain loads and stores through the helpers
// above, no mask arithmetic per vector), then the masked tail.
template <class F>
inline void for_each_vector(size_t n, F&& f) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) f(i, static_cast<__mmask16>(0xffff));
  if (i < n) f(i, tail_mask(n - i));
}

// bfloat16 -> float32 is exact: the bits move up 16.
inline __m512 load_bf16(const uint16_t* p, __mmask16 m) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(loadu_epi16(p, m)), 16));
}

// 32 bfloat16 values as two float32 vectors, even and odd elements (exact:
// one instruction each, a shift and a mask, where widening 16 in order
// takes two). Kernels that keep channels independent compute on the halves
// and interleave them back when they round (pack_bf16_halves).
inline __m512 bf16_even(__m512i raw) { return _mm512_castsi512_ps(_mm512_slli_epi32(raw, 16)); }
inline __m512 bf16_odd(__m512i raw) {
  return _mm512_castsi512_ps(_mm512_and_si512(raw, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
}
// 32 bfloat16 in order from 16 even elements (low half) and 16 odd ones
// (high half) of `halves`: one vpermw.
inline __m512i interleave_bf16_halves(__m512i halves) {
  alignas(64) static constexpr uint16_t kInterleave[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                           8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  return _mm512_permutexvar_epi16(_mm512_load_si512(kInterleave), halves);
}

// Round to nearest even with NaN kept quiet and denormals kept; the same
// bits as float_to_bfloat16. vcvtneps2bf16 (AVX512_BF16, which the AVX-512
// kernels require) rounds the same way but flushes denormals to zero, so
// vectors holding a denormal take the integer path. On the Zen 5 CPU here the
// integer path alone cost about 5 of a bfloat16 silu's 11 cycles per vector
// (one core, data in L1): conversions, not arithmetic, bound the bfloat16
// element-wise kernels.
// The exact path is kept out of line: inlined into every loop it made GCC
// stop inlining the loops' lambdas (a float32 add + relu ran at half speed).
[[gnu::noinline, gnu::cold]] inline __m256i to_bf16_exact(__m512 f) {
  __m512i x = _mm512_castps_si512(f);
  __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(x, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  r = _mm512_mask_or_epi32(r, nan, x, _mm512_set1_epi32(0x00400000));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}
constexpr int kDenormalClass = 0x20;  // vfpclassps category
[[gnu::always_inline]] inline __m256i to_bf16(__m512 f) {
  if (_mm512_fpclass_ps_mask(f, kDenormalClass)) [[unlikely]]
    return to_bf16_exact(f);
  return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(f));
}

// vcvtneps2bf16 alone, noting in `denormal` the lanes it flushed to zero that
// to_bf16 keeps (float32 denormals). For kernels that hold many registers:
// they redo what they stored, rounded exactly, when any lane was noted (the
// depthwise kernel: its output rows, by the portable loop). to_bf16's
// out-of-line call made GCC spill the bfloat16 depthwise block's
// accumulators around it (85-130 stack moves per block function, against
// 4-30 without), and took 15-25% of the block's time on one core.
[[gnu::always_inline]] inline __m256i to_bf16_noting(__m512 f, __mmask16& denormal) {
  denormal |= _mm512_fpclass_ps_mask(f, kDenormalClass);
  return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(f));
}
// The even and odd halves of 32 values (bf16_even, bf16_odd) rounded by one
// vcvtne2ps2bf16 and interleaved back, noting denormals as to_bf16_noting.
[[gnu::always_inline]] inline __m512i pack_bf16_halves_noting(__m512 even, __m512 odd, __mmask16& denormal) {
  denormal |= _mm512_fpclass_ps_mask(even, kDenormalClass) | _mm512_fpclass_ps_mask(odd, kDenormalClass);
  return interleave_bf16_halves(reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(odd, even)));
}

}  // namespace tessera::cpu::avx512
