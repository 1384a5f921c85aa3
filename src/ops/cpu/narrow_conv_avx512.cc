// Tessera's AVX-512 kernel for 1x1 convs with few output channels; contract
// in direct_conv_kernels.h. Hand-written because every blocked kernel
// computes whole blocks of 16 output channels: a segmentation head's 32 -> 1
// conv (the Vanilla UNet's last layer, 480x640) did 16 times its FMAs on
// oneDNN's brgconv_1x1 and took 4.0 ms inside the model, where reading its
// 39 MB of input takes under 1 ms. Here each output value is a dot product
// of the pixel's input row with one weight row, reduced across the lanes.
#include <immintrin.h>

#include <algorithm>

#include "avx512_util.h"
#include "direct_conv_kernels.h"
#include "tessera/numerics/bfloat16.h"

namespace tessera::cpu::avx512 {

namespace {

// Output values of this many pixels are buffered for the activations and
// the residual, which run over the buffer as FloatMath vectors.
constexpr uint32_t kChunkPixels = 64;

// Lane j of the result: the sum of v[j]'s 16 lanes. Halves, then quarters,
// then pairs and single lanes of pairs of vectors are added (45 shuffles and
// adds for 16 sums, where one _mm512_reduce_add_ps costs 8 for one), which
// leaves sum j at position 4 * (j % 4) + j / 4; one permute orders them.
inline __m512 sum_lanes16(const __m512 (&v)[16]) {
  __m512 h[8], q[4], p[2];
  for (int i = 0; i < 8; ++i)
    h[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                         _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE));
  for (int i = 0; i < 4; ++i)
    q[i] = _mm512_add_ps(_mm512_shuffle_f32x4(h[2 * i], h[2 * i + 1], 0x88),
                         _mm512_shuffle_f32x4(h[2 * i], h[2 * i + 1], 0xDD));
  for (int i = 0; i < 2; ++i)
    p[i] = _mm512_add_ps(_mm512_shuffle_ps(q[2 * i], q[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(q[2 * i], q[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 s = _mm512_add_ps(_mm512_shuffle_ps(p[0], p[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_ps(p[0], p[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(order, s);
}

// Input channels [16 * c, 16 * c + 16) of a float32 or bfloat16 row, masked.
template <bool kBf16>
inline __m512 load_row(const std::byte* row, uint32_t c, __mmask16 m) {
  if constexpr (kBf16)
    return load_bf16(reinterpret_cast<const uint16_t*>(row) + 16 * c, m);
  else
    return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + 16 * c);
}

// 16 values of P channels each (P = 1 or 2) of 16 / P pixels, the
// first `pixels` of them real: each pixel's input row is read once, each
// vector of it feeding its P dot products.
template <uint32_t P, bool kBf16>
inline __m512 dot16(const std::byte* src, uint64_t stride, uint32_t pixels, const float* w, uint32_t cin) {
  const uint32_t full = cin / 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (cin % 16)) - 1);
  __m512 acc[16];
  for (uint32_t i = 0; i < 16 / P; ++i) {
    __m512 s[P];
    for (uint32_t k = 0; k < P; ++k) s[k] = _mm512_setzero_ps();
    if (i < pixels) {
      const std::byte* x = src + i * stride;
      for (uint32_t c = 0; c < full; ++c) {
        const __m512 xv = load_row<kBf16>(x, c, 0xffff);
        for (uint32_t k = 0; k < P; ++k) s[k] = _mm512_fmadd_ps(xv, _mm512_loadu_ps(w + k * cin + 16 * c), s[k]);
      }
      if (tail) {
        const __m512 xv = load_row<kBf16>(x, full, tail);
        for (uint32_t k = 0; k < P; ++k)
          s[k] = _mm512_fmadd_ps(xv, _mm512_maskz_loadu_ps(tail, w + k * cin + 16 * full), s[k]);
      }
    }
    for (uint32_t k = 0; k < P; ++k) acc[i * P + k] = s[k];
  }
  return sum_lanes16(acc);
}

template <uint32_t P, bool kBf16>
void run_bands(const DirectConvArgs& a, uint32_t begin, uint32_t end) {
  const uint64_t pixels = uint64_t{a.n} * a.oh * a.ow;
  const uint64_t in_stride = a.src.uniform_row_stride(), out_stride = a.dst.uniform_row_stride();
  const uint64_t res_stride = a.res.base ? a.res.uniform_row_stride() : 0;
  // Value i * P + k of a chunk is pixel i's channel k; its bias likewise.
  alignas(64) float buf[kChunkPixels * P], bias[kChunkPixels * P];
  for (uint32_t i = 0; i < kChunkPixels * P; ++i) bias[i] = a.bias[i % P];
  for (uint32_t t = begin; t < end; ++t) {
    const uint64_t p0 = uint64_t{t} * a.band_rows, p1 = std::min(pixels, p0 + a.band_rows);
    for (uint64_t q = p0; q < p1; q += kChunkPixels) {
      const uint32_t m = static_cast<uint32_t>(std::min<uint64_t>(kChunkPixels, p1 - q));
      for (uint32_t i = 0; i < m; i += 16 / P) {
        const __m512 sums =
            dot16<P, kBf16>(a.src.base + (q + i) * in_stride, in_stride, std::min(16 / P, m - i), a.weights, a.cin);
        _mm512_store_ps(buf + i * P, _mm512_add_ps(_mm512_load_ps(bias + i * P), sums));
      }
      if (!a.activation.is_identity()) a.math.unary(a.activation, buf, m * P);
      if (a.res.base) {
        for (uint32_t i = 0; i < m; ++i) {
          const std::byte* r = a.res.base + (q + i) * res_stride;
          for (uint32_t k = 0; k < P; ++k)
            buf[i * P + k] += a.res_bf16 ? bfloat16_to_float(reinterpret_cast<const uint16_t*>(r)[k])
                                         : reinterpret_cast<const float*>(r)[k];
        }
        if (!a.res_activation.is_identity()) a.math.unary(a.res_activation, buf, m * P);
      }
      for (uint32_t i = 0; i < m; ++i) {
        std::byte* o = a.dst.base + (q + i) * out_stride;
        for (uint32_t k = 0; k < P; ++k) {
          if (a.dst_bf16)
            reinterpret_cast<uint16_t*>(o)[k] = float_to_bfloat16(buf[i * P + k]);
          else
            reinterpret_cast<float*>(o)[k] = buf[i * P + k];
        }
      }
    }
  }
}

}  // namespace

Status narrow_conv_kernel(const void* raw, uint32_t begin, uint32_t end) {
  const auto& a = *static_cast<const DirectConvArgs*>(raw);
  if (a.cout > kNarrowMaxCout || a.kh != 1 || a.kw != 1)
    return internal_error("narrow_conv_kernel: 1x1 convs with at most {} output channels, found {} -> {} {}x{}",
                          kNarrowMaxCout, a.cin, a.cout, a.kh, a.kw);
  if (a.cout == 1)
    a.src_bf16 ? run_bands<1, true>(a, begin, end) : run_bands<1, false>(a, begin, end);
  else
    a.src_bf16 ? run_bands<2, true>(a, begin, end) : run_bands<2, false>(a, begin, end);
  return Status();
}

}  // namespace tessera::cpu::avx512
