#include <immintrin.h>

#include <cmath>

#include "pool_kernels.h"
#include "tessera/numerics/bfloat16.h"
#include "tessera/numerics/bfloat16_avx2.h"

namespace tessera::cpu::avx2 {

namespace {
// max(v, m) keeps m on ties and when m is NaN (the first NaN wins, as in the
// reference); then a NaN v replaces a number
// (the scalar nan_max, as in pool_avx512.cc).
inline __m256 nan_max(__m256 m, __m256 v) {
  const __m256 take_nan = _mm256_and_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q), _mm256_cmp_ps(m, m, _CMP_ORD_Q));
  return _mm256_blendv_ps(_mm256_max_ps(v, m), v, take_nan);
}
inline float nan_max(float m, float v) { return !std::isnan(m) && (std::isnan(v) || v > m) ? v : m; }
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
// Channels [c0, c0 + 8 * V) of one output pixel whose window's valid input
// pixels start at `px[0..taps)`; V vectors in registers.
template <bool kBf16, bool kAvg, int V>
inline void window(const std::byte* const* px, uint32_t taps, uint32_t c0, float divisor, std::byte* out) {
  constexpr size_t es = kBf16 ? 2 : 4;
  __m256 acc[V];
  for (int j = 0; j < V; ++j) acc[j] = _mm256_set1_ps(kAvg ? 0.0f : -INFINITY);
  auto step = [](__m256 a, __m256 v) { return kAvg ? _mm256_add_ps(a, v) : nan_max(a, v); };
  // bfloat16 in pairs of vectors: 16 channels in unpacked order
  // (bfloat16_avx2.h), loaded and stored back in one op each.
  constexpr bool kPairs = kBf16 && V % 2 == 0;
  for (uint32_t t = 0; t < taps; ++t) {
    const std::byte* p = px[t] + c0 * es;
    if constexpr (kPairs) {
      for (int j = 0; j < V; j += 2) {
        __m256 lo, hi;
        tessera::avx2::load_bf16x16_unpacked(reinterpret_cast<const uint16_t*>(p) + j * 8, lo, hi);
        acc[j] = step(acc[j], lo), acc[j + 1] = step(acc[j + 1], hi);
      }
    } else {
      for (int j = 0; j < V; ++j) acc[j] = step(acc[j], tessera::avx2::load8<kBf16>(p + j * 8 * es));
    }
  }
  if constexpr (kAvg)
    for (int j = 0; j < V; ++j) acc[j] = _mm256_div_ps(acc[j], _mm256_set1_ps(divisor));
  if constexpr (kPairs) {
    for (int j = 0; j < V; j += 2)
      tessera::avx2::store_bf16x16_unpacked(reinterpret_cast<uint16_t*>(out) + c0 + j * 8, acc[j], acc[j + 1]);
  } else {
    for (int j = 0; j < V; ++j) tessera::avx2::store8<kBf16>(out + (c0 + j * 8) * es, 0, acc[j]);
  }
}

// bfloat16 maxima on the raw 16-bit values, 16 channels per vector: the
// int16 keys of pool_avx512.cc (its bf16_max_window), with the same checks
// sending a window with a NaN, or with a +0 max and a -0, to window<>.
// Per tap and 16 channels: 6 ops, where window<> spent about 12 (widening,
// and a NaN-keeping max of two compares, an and, a max and a blend per 8).
inline __m256i bf16_key(__m256i x) {
  return _mm256_xor_si256(x, _mm256_and_si256(_mm256_srai_epi16(x, 15), _mm256_set1_epi16(0x7fff)));
}

template <int W>
inline void bf16_max_window(const std::byte* const* px, uint32_t taps, uint32_t c0, std::byte* out) {
  const __m256i key_ninf = _mm256_set1_epi16(static_cast<int16_t>(0x807f)), key_pinf = _mm256_set1_epi16(0x7f80);
  const __m256i zero = _mm256_setzero_si256(), ones = _mm256_set1_epi16(-1);
  __m256i hi[W], lo[W], top[W];
  for (int j = 0; j < W; ++j) hi[j] = key_ninf, lo[j] = key_pinf, top[j] = zero;
  for (uint32_t t = 0; t < taps; ++t)
    for (int j = 0; j < W; ++j) {
      const __m256i k = bf16_key(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(px[t] + (c0 + j * 16) * 2)));
      hi[j] = _mm256_max_epi16(hi[j], k);
      lo[j] = _mm256_min_epi16(lo[j], k);
      top[j] = _mm256_max_epu16(top[j], k);
    }
  __m256i redo = zero;
  for (int j = 0; j < W; ++j) {
    const __m256i tie = _mm256_and_si256(_mm256_cmpeq_epi16(hi[j], zero), _mm256_cmpeq_epi16(top[j], ones));
    redo = _mm256_or_si256(redo, _mm256_or_si256(_mm256_or_si256(_mm256_cmpgt_epi16(hi[j], key_pinf),
                                                                   _mm256_cmpgt_epi16(key_ninf, lo[j])),
                                                  tie));
  }
  if (!_mm256_testz_si256(redo, redo)) [[unlikely]] {
    window<true, false, 2 * W>(px, taps, c0, 1.0f, out);
    return;
  }
  for (int j = 0; j < W; ++j)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (c0 + j * 16) * 2), bf16_key(hi[j]));
}

template <bool kBf16, bool kAvg>
void pool_rows_t(const PoolRowsArgs& a, uint32_t begin, uint32_t end) {
  constexpr size_t es = kBf16 ? 2 : 4;
  for_each_output_pixel(a, begin, end, [&](const std::byte* const* px, uint32_t taps, uint32_t count, std::byte* out) {
    const float divisor = static_cast<float>(count);
    uint32_t c = 0;
    if constexpr (kBf16 && !kAvg) {
      for (; c + 32 <= a.c; c += 32) bf16_max_window<2>(px, taps, c, out);
      if (c + 16 <= a.c) bf16_max_window<1>(px, taps, c, out), c += 16;
    }
    for (; c + 32 <= a.c; c += 32) window<kBf16, kAvg, 4>(px, taps, c, divisor, out);
    for (; c + 8 <= a.c; c += 8) window<kBf16, kAvg, 1>(px, taps, c, divisor, out);
    for (; c < a.c; ++c) {  // the last c % 8 channels
      float acc = kAvg ? 0.0f : -INFINITY;
      for (uint32_t k = 0; k < taps; ++k) {
        const std::byte* p = px[k] + c * es;
        const float v = kBf16 ? bfloat16_to_float(*reinterpret_cast<const uint16_t*>(p))
                              : *reinterpret_cast<const float*>(p);
        acc = kAvg ? add(acc, v) : nan_max(acc, v);
      }
      if (kAvg) acc /= divisor;
      if constexpr (kBf16)
        reinterpret_cast<uint16_t*>(out)[c] = float_to_bfloat16(acc);
      else
        reinterpret_cast<float*>(out)[c] = acc;
    }
  });
}

}  // namespace

void pool_rows(const PoolRowsArgs& a, uint32_t begin, uint32_t end) {
  if (a.bf16) return a.average ? pool_rows_t<true, true>(a, begin, end) : pool_rows_t<true, false>(a, begin, end);
  return a.average ? pool_rows_t<false, true>(a, begin, end) : pool_rows_t<false, false>(a, begin, end);
}

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
