// bfloat16 <-> float32 for 8 lanes, for translation units compiled with AVX2
// (files named *_avx2.cc): the bits of float_to_bfloat16 / bfloat16_to_float
// in numerics/bfloat16.h (round to nearest even, NaN kept quiet).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace tessera::avx2 {

// Every helper is forced inline: an out-of-line copy would be a weak symbol
// with AVX2 instructions that a baseline object could link to
// (scripts/check_isa_symbols.py), and a call per vector.
#define TS_AVX2_INLINE inline __attribute__((always_inline))

// 8 bfloat16 values -> 8 floats (exact).
TS_AVX2_INLINE __m256 load_bf16(const uint16_t* p) {
  return _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}

// 8 floats (as bits) -> their bfloat16 bits in the low half of each 32-bit lane.
TS_AVX2_INLINE __m256i bf16_bits(__m256i u) {
  const __m256i hi = _mm256_srli_epi32(u, 16);
  const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  return _mm256_blendv_epi8(rounded, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
}

// 16 floats (lo: 0-7, hi: 8-15) -> 16 bfloat16 at p.
TS_AVX2_INLINE void store_bf16x16(uint16_t* p, __m256 lo, __m256 hi) {
  // packus works per 128-bit lane (lo0-3 hi0-3 lo4-7 hi4-7): put the quads back in order.
  const __m256i packed = _mm256_packus_epi32(bf16_bits(_mm256_castps_si256(lo)), bf16_bits(_mm256_castps_si256(hi)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm256_permute4x64_epi64(packed, 0xd8));
}

// 8 floats -> 8 bfloat16 at p.
TS_AVX2_INLINE void store_bf16x8(uint16_t* p, __m256 v) {
  const __m256i b = bf16_bits(_mm256_castps_si256(v));
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(b, b), 0x08);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
}

// 16 bfloat16 values [v0..v15] widened in "unpacked order": lo = [v0-3 |
// v8-11], hi = [v4-7 | v12-15] (one in-lane interleave with zeros each,
// where load_bf16 takes a lane-crossing extension and a shift per 8).
// Element-wise kernels that read and write bfloat16 keep this order in
// registers and store with store_bf16x16_unpacked, which packs straight back
// to [v0..v15]; split16 / merge16 move 16 floats into and out of the order.
TS_AVX2_INLINE void load_bf16x16_unpacked(const uint16_t* p, __m256& lo, __m256& hi) {
  const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), zero = _mm256_setzero_si256();
  lo = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, x));
  hi = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, x));
}
TS_AVX2_INLINE void store_bf16x16_unpacked(uint16_t* p, __m256 lo, __m256 hi) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                      _mm256_packus_epi32(bf16_bits(_mm256_castps_si256(lo)), bf16_bits(_mm256_castps_si256(hi))));
}
TS_AVX2_INLINE void split16(const float* p, __m256& lo, __m256& hi) {
  const __m256 a = _mm256_loadu_ps(p), b = _mm256_loadu_ps(p + 8);
  lo = _mm256_permute2f128_ps(a, b, 0x20), hi = _mm256_permute2f128_ps(a, b, 0x31);
}
TS_AVX2_INLINE void merge16(__m256 lo, __m256 hi, float* p) {
  _mm256_storeu_ps(p, _mm256_permute2f128_ps(lo, hi, 0x20));
  _mm256_storeu_ps(p + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
}

// 8 lanes at p (element i), float32 values or (B) bfloat16 ones widened, and
// back (bfloat16: rounded as above): for kernels templated on their rows' dtype.
template <bool B>
TS_AVX2_INLINE __m256 load8(const void* p, size_t i = 0) {
  if constexpr (B)
    return load_bf16(static_cast<const uint16_t*>(p) + i);
  else
    return _mm256_loadu_ps(static_cast<const float*>(p) + i);
}
template <bool B>
TS_AVX2_INLINE void store8(void* p, size_t i, __m256 v) {
  if constexpr (B)
    store_bf16x8(static_cast<uint16_t*>(p) + i, v);
  else
    _mm256_storeu_ps(static_cast<float*>(p) + i, v);
}

#undef TS_AVX2_INLINE

}  // namespace tessera::avx2
