#include <immintrin.h>

#include "avx512_util.h"
#include "pool_kernels.h"

namespace tessera::cpu::avx512 {

namespace {

// max(v, m) keeps m on ties and when m is NaN (the first NaN wins, as in the
// reference); then a NaN v replaces a number.
inline __m512 nan_max(__m512 m, __m512 v) {
  const __mmask16 take_nan = _mm512_mask_cmp_ps_mask(_mm512_cmp_ps_mask(m, m, _CMP_ORD_Q), v, v, _CMP_UNORD_Q);
  return _mm512_mask_mov_ps(_mm512_max_ps(v, m), take_nan, v);
}

// acc[i] = op(acc[i], x[i]) over float32 or widened bfloat16 values.
template <class Op>
void accumulate_f32(float* acc, const void* x, size_t n, Op op) {
  const float* p = static_cast<const float*>(x);
  for_each_vector(n, [&](size_t i, __mmask16 k) { storeu_ps(acc + i, k, op(loadu_ps(acc + i, k), loadu_ps(p + i, k))); });
}
template <class Op>
void accumulate_bf16(float* acc, const void* x, size_t n, Op op) {
  const uint16_t* p = static_cast<const uint16_t*>(x);
  for_each_vector(n, [&](size_t i, __mmask16 k) { storeu_ps(acc + i, k, op(loadu_ps(acc + i, k), load_bf16(p + i, k))); });
}
inline __m512 add(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }

template <bool kBf16>
inline __m512 load(const std::byte* p, __mmask16 m) {
  if constexpr (kBf16) return load_bf16(reinterpret_cast<const uint16_t*>(p), m);
  else return loadu_ps(reinterpret_cast<const float*>(p), m);
}
template <bool kBf16>
inline void store(std::byte* p, __mmask16 m, __m512 v) {
  if constexpr (kBf16) storeu_epi16(reinterpret_cast<uint16_t*>(p), m, to_bf16(v));
  else storeu_ps(reinterpret_cast<float*>(p), m, v);
}

// Channels [c0, c0 + 16 * V) of one output pixel (the last vector masked by
// `m`) whose window's valid input pixels start at px[0..taps); V vectors in
// registers. A max runs on vmaxps alone, which keeps the first of equal
// values but drops a NaN input; z = v * 0 + z turns NaN at a NaN or
// infinite input, and a window where it did runs again through nan_max
// (two operations per tap instead of nan_max's three in a chain).
template <bool kBf16, bool kAvg, int V>
inline void window(const std::byte* const* px, uint32_t taps, uint32_t c0, __mmask16 m, __m512 divisor,
                   std::byte* out) {
  constexpr size_t es = kBf16 ? 2 : 4;
  auto at = [&](uint32_t t, int j) { return load<kBf16>(px[t] + (c0 + j * 16) * es, j == V - 1 ? m : 0xffff); };
  __m512 acc[V], z[V];
  const __m512 zero = _mm512_setzero_ps();
  for (int j = 0; j < V; ++j) acc[j] = _mm512_set1_ps(kAvg ? 0.0f : -__builtin_inff()), z[j] = zero;
  for (uint32_t t = 0; t < taps; ++t)
    for (int j = 0; j < V; ++j) {
      const __m512 v = at(t, j);
      if constexpr (kAvg) {
        acc[j] = add(acc[j], v);
      } else {
        acc[j] = _mm512_max_ps(v, acc[j]);
        z[j] = _mm512_fmadd_ps(v, zero, z[j]);
      }
    }
  if constexpr (!kAvg) {
    __m512 any = z[0];
    for (int j = 1; j < V; ++j) any = _mm512_add_ps(any, z[j]);
    if (_mm512_cmp_ps_mask(any, any, _CMP_UNORD_Q)) {
      for (int j = 0; j < V; ++j) acc[j] = _mm512_set1_ps(-__builtin_inff());
      for (uint32_t t = 0; t < taps; ++t)
        for (int j = 0; j < V; ++j) acc[j] = nan_max(acc[j], at(t, j));
    }
  }
  for (int j = 0; j < V; ++j)
    store<kBf16>(out + (c0 + j * 16) * es, j == V - 1 ? m : 0xffff, kAvg ? _mm512_div_ps(acc[j], divisor) : acc[j]);
}

// bfloat16 maxima on the raw 16-bit values, 32 channels per vector: no
// widening to float32 and back. key(x) = x ^ ((x >> 15) & 0x7fff), the
// shift arithmetic, turns bfloat16 bits into int16 keys that order as the
// numbers do (negative values' magnitudes flipped) and is its own inverse.
// Per tap and 32 channels: the key (2 ops), a max, a min and an unsigned
// max; window<true, false> spends 8 (two widenings, two maxima, two NaN
// checks). The min finds a negative NaN (keyed below -inf), the max a
// positive one (above +inf), and the unsigned max a -0 (keyed -1, 0xffff).
// Windows where a lane met a NaN, or a +0 with a -0 (equal numbers, of which
// the reference keeps the first: the keys put +0 above), run again through
// window<true, false>, so the results stay the reference's bit for bit.
inline __m512i bf16_key(__m512i x) {
  return _mm512_ternarylogic_epi32(x, _mm512_srai_epi16(x, 15), _mm512_set1_epi16(0x7fff), 0x78);  // x ^ (s & c)
}

template <int W>
inline void bf16_max_window(const std::byte* const* px, uint32_t taps, uint32_t c0, std::byte* out) {
  const __m512i key_ninf = _mm512_set1_epi16(static_cast<int16_t>(0x807f)), key_pinf = _mm512_set1_epi16(0x7f80);
  __m512i hi[W], lo[W], top[W];
  for (int j = 0; j < W; ++j) hi[j] = key_ninf, lo[j] = key_pinf, top[j] = _mm512_setzero_si512();
  for (uint32_t t = 0; t < taps; ++t)
    for (int j = 0; j < W; ++j) {
      const __m512i k = bf16_key(_mm512_loadu_si512(px[t] + (c0 + j * 32) * 2));
      hi[j] = _mm512_max_epi16(hi[j], k);
      lo[j] = _mm512_min_epi16(lo[j], k);
      top[j] = _mm512_max_epu16(top[j], k);
    }
  __mmask32 redo = 0;
  for (int j = 0; j < W; ++j)
    redo |= _mm512_cmpgt_epi16_mask(hi[j], key_pinf) | _mm512_cmplt_epi16_mask(lo[j], key_ninf) |
            (_mm512_cmpeq_epi16_mask(hi[j], _mm512_setzero_si512()) &
             _mm512_cmpeq_epi16_mask(top[j], _mm512_set1_epi16(-1)));
  if (redo) [[unlikely]] {
    window<true, false, 2 * W>(px, taps, c0, 0xffff, _mm512_setzero_ps(), out);
    return;
  }
  for (int j = 0; j < W; ++j) _mm512_storeu_si512(out + (c0 + j * 32) * 2, bf16_key(hi[j]));
}

template <bool kBf16, bool kAvg>
void pool_rows_t(const PoolRowsArgs& a, uint32_t begin, uint32_t end) {
  for_each_output_pixel(a, begin, end, [&](const std::byte* const* px, uint32_t taps, uint32_t count, std::byte* out) {
    const __m512 divisor = _mm512_set1_ps(static_cast<float>(count));
    uint32_t c = 0;
    if constexpr (kBf16 && !kAvg) {
      for (; c + 64 <= a.c; c += 64) bf16_max_window<2>(px, taps, c, out);
      if (c + 32 <= a.c) bf16_max_window<1>(px, taps, c, out), c += 32;
    }
    for (; c + 64 <= a.c; c += 64) window<kBf16, kAvg, 4>(px, taps, c, 0xffff, divisor, out);
    if (c + 32 <= a.c) window<kBf16, kAvg, 2>(px, taps, c, 0xffff, divisor, out), c += 32;
    if (c + 16 <= a.c) window<kBf16, kAvg, 1>(px, taps, c, 0xffff, divisor, out), c += 16;
    if (c < a.c) window<kBf16, kAvg, 1>(px, taps, c, tail_mask(a.c - c), divisor, out);
  });
}
}  // namespace

void pool_rows(const PoolRowsArgs& a, uint32_t begin, uint32_t end) {
  if (a.bf16) return a.average ? pool_rows_t<true, true>(a, begin, end) : pool_rows_t<true, false>(a, begin, end);
  return a.average ? pool_rows_t<false, true>(a, begin, end) : pool_rows_t<false, false>(a, begin, end);
}

namespace {
template <bool kBf16, int V>
void sum_columns(float* acc, const std::byte* first, uint64_t stride, uint32_t rows, uint32_t c0, __mmask16 m) {
  constexpr size_t es = kBf16 ? 2 : 4;
  __m512 s[V];
  for (int j = 0; j < V; ++j) s[j] = _mm512_setzero_ps();
  const std::byte* p = first + c0 * es;
  for (uint32_t r = 0; r < rows; ++r, p += stride)
    for (int j = 0; j < V; ++j) s[j] = _mm512_add_ps(s[j], load<kBf16>(p + j * 16 * es, j == V - 1 ? m : 0xffff));
  for (int j = 0; j < V; ++j) storeu_ps(acc + c0 + j * 16, j == V - 1 ? m : 0xffff, s[j]);
}
template <bool kBf16>
void sum_rows_t(float* acc, const std::byte* first, uint64_t stride, uint32_t rows, uint32_t n) {
  uint32_t c = 0;
  for (; c + 64 <= n; c += 64) sum_columns<kBf16, 4>(acc, first, stride, rows, c, 0xffff);
  for (; c + 16 <= n; c += 16) sum_columns<kBf16, 1>(acc, first, stride, rows, c, 0xffff);
  if (c < n) sum_columns<kBf16, 1>(acc, first, stride, rows, c, tail_mask(n - c));
}
}  // namespace

void sum_rows(float* acc, const std::byte* first, uint64_t stride, uint32_t rows, uint32_t n, bool bf16) {
  if (bf16) sum_rows_t<true>(acc, first, stride, rows, n);
  else sum_rows_t<false>(acc, first, stride, rows, n);
}

void max_accumulate_f32(float* acc, const void* x, size_t n) { accumulate_f32(acc, x, n, nan_max); }
void max_accumulate_bf16(float* acc, const void* x, size_t n) { accumulate_bf16(acc, x, n, nan_max); }
void sum_accumulate_f32(float* acc, const void* x, size_t n) { accumulate_f32(acc, x, n, add); }
void sum_accumulate_bf16(float* acc, const void* x, size_t n) { accumulate_bf16(acc, x, n, add); }

}  // namespace tessera::cpu::avx512
