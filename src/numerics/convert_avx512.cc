#include <immintrin.h>

#include "convert_internal.h"

namespace tessera::avx512 {

namespace {

inline __m512i bf16_round(__m512i x) {
  const __m512i abs = _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(0x7f800000));
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(x, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  r = _mm512_mask_or_epi32(r, nan, x, _mm512_set1_epi32(0x00400000));
  return _mm512_srli_epi32(r, 16);
}

}  // namespace

void float_to_bfloat16(const float* src, uint16_t* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512i x = _mm512_loadu_si512(src + i);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtepi32_epi16(bf16_round(x)));
  }
  if (i < n) {
    __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    __m512i x = _mm512_maskz_loadu_epi32(m, src + i);
    _mm512_mask_cvtepi32_storeu_epi16(dst + i, m, bf16_round(x));
  }
}

void float_to_bfloat16_rows(const float* src, size_t src_stride, uint16_t* dst, size_t dst_stride, size_t rows,
                            size_t n) {
  for (size_t r = 0; r < rows; ++r, src += src_stride, dst += dst_stride) float_to_bfloat16(src, dst, n);
}

void bfloat16_to_float(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm512_storeu_si512(dst + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
  }
  if (i < n) {
    __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    __m256i b = _mm256_maskz_loadu_epi16(m, src + i);
    _mm512_mask_storeu_epi32(dst + i, m, _mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
  }
}

namespace {

// Encodes one 16-element block; returns the per-lane sign<<W|m and the shared exponent.
inline __m512i encode_block(__m512i x, int w, uint32_t* shared) {
  const __m512i e = _mm512_and_si512(_mm512_srli_epi32(x, 23), _mm512_set1_epi32(0xff));
  const uint32_t emax = _mm512_reduce_max_epu32(e);
  *shared = emax;
  const __m512i E = _mm512_set1_epi32(static_cast<int>(emax));
  __m512i mant = _mm512_or_si512(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffff)), _mm512_set1_epi32(0x800000));
  mant = _mm512_srlv_epi32(mant, _mm512_sub_epi32(E, e));  // shifts >= 32 give 0
  const int drop = 24 - w;
  __m512i m = _mm512_srli_epi32(mant, static_cast<unsigned>(drop));
  const __m512i rem = _mm512_and_si512(mant, _mm512_set1_epi32((1 << drop) - 1));
  const __m512i half = _mm512_set1_epi32(1 << (drop - 1));
  __mmask16 up = _mm512_cmpgt_epu32_mask(rem, half) |
                 (_mm512_cmpeq_epu32_mask(rem, half) & _mm512_test_epi32_mask(m, _mm512_set1_epi32(1)));
  m = _mm512_mask_add_epi32(m, up, m, _mm512_set1_epi32(1));
  m = _mm512_min_epu32(m, _mm512_set1_epi32((1 << w) - 1));
  m = _mm512_maskz_mov_epi32(_mm512_test_epi32_mask(e, e), m);  // exponent 0 -> 0
  const __mmask16 neg = _mm512_test_epi32_mask(x, _mm512_set1_epi32(static_cast<int>(0x80000000u))) &
                        _mm512_test_epi32_mask(m, m);
  return _mm512_mask_or_epi32(m, neg, m, _mm512_set1_epi32(1 << w));
}

inline __m512 decode_block(__m512i v, uint32_t shared, int w) {
  const __m512i m = _mm512_and_si512(v, _mm512_set1_epi32((1 << w) - 1));
  const __m512i sign = _mm512_slli_epi32(_mm512_srli_epi32(v, static_cast<unsigned>(w)), 31);
  // cvt(m) is exact and normalised: its exponent is 127 + floor(log2 m) and its
  // fraction is m's bits below the leading one, as the original renormalises.
  const __m512i f = _mm512_castps_si512(_mm512_cvtepi32_ps(m));
  const __m512i fexp = _mm512_srli_epi32(f, 23);
  __m512i exp = _mm512_add_epi32(fexp, _mm512_set1_epi32(static_cast<int>(shared) - 127 - (w - 1)));
  exp = _mm512_max_epi32(exp, _mm512_setzero_si512());
  __m512i bits = _mm512_or_si512(_mm512_slli_epi32(exp, 23), _mm512_and_si512(f, _mm512_set1_epi32(0x7fffff)));
  bits = _mm512_maskz_mov_epi32(_mm512_test_epi32_mask(m, m), bits);
  return _mm512_castsi512_ps(_mm512_or_si512(bits, sign));
}

}  // namespace

void pack_bfp_tiles(const float* src, std::byte* dst, size_t num_tiles, int w) {
  const size_t tile_bytes = w == 7 ? 1088 : 576;
  for (size_t t = 0; t < num_tiles; ++t) {
    const float* s = src + t * 1024;
    auto* exps = reinterpret_cast<uint8_t*>(dst + t * tile_bytes);
    uint8_t* data = exps + 64;
    for (int b = 0; b < 64; ++b) {
      uint32_t shared;
      __m512i v = encode_block(_mm512_loadu_si512(s + b * 16), w, &shared);
      exps[b] = static_cast<uint8_t>(shared);
      if (w == 7) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(data + b * 16), _mm512_cvtepi32_epi8(v));
      } else {
        // Pair lane 2k (low nibble) with lane 2k+1 (high nibble) inside each 64-bit lane.
        __m512i pair = _mm512_or_si512(v, _mm512_srli_epi64(v, 28));
        _mm_storel_epi64(reinterpret_cast<__m128i*>(data + b * 8), _mm512_cvtepi64_epi8(pair));
      }
    }
  }
}

void unpack_bfp_tiles(const std::byte* src, float* dst, size_t num_tiles, int w) {
  const size_t tile_bytes = w == 7 ? 1088 : 576;
  for (size_t t = 0; t < num_tiles; ++t) {
    const auto* exps = reinterpret_cast<const uint8_t*>(src + t * tile_bytes);
    const uint8_t* data = exps + 64;
    float* d = dst + t * 1024;
    for (int b = 0; b < 64; ++b) {
      __m512i v;
      if (w == 7) {
        v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(data + b * 16)));
      } else {
        __m512i bytes = _mm512_cvtepu8_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(data + b * 8)));
        __m512i lo = _mm512_and_si512(bytes, _mm512_set1_epi64(0xf));
        __m512i hi = _mm512_slli_epi64(_mm512_srli_epi64(bytes, 4), 32);
        v = _mm512_or_si512(lo, hi);
      }
      _mm512_storeu_ps(d + b * 16, decode_block(v, exps[b], w));
    }
  }
}

}  // namespace tessera::avx512
