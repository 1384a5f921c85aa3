// The AVX2 depthwise kernel (depthwise_kernels.h): float32 or bfloat16 NHWC
// rows in and out, bfloat16 widened as it is loaded, accumulation in
// float32 FMAs in (ky, kx) order from the bias, then the fused activation:
// in registers for the pixels whose taps lie inside the map, through a
// float32 tile and FloatMath for the border pixels (the same functions).
#include <immintrin.h>

#include <algorithm>

#include "avx2_activation.h"
#include "depthwise_kernels.h"
#include "scratch.h"
#include "tessera/numerics/bfloat16.h"
#include "tessera/numerics/bfloat16_avx2.h"
#include "tessera/numerics/convert.h"

namespace tessera::cpu::avx2 {

namespace {

constexpr uint32_t kPixels = 6;  // output pixels of one row per block: 12 accumulators
constexpr uint32_t kMaxInteriorRows = 16;  // taller kernels take the pointer tables throughout

using tessera::avx2::load8;

// 16 bfloat16 channels widen in unpacked order (bfloat16_avx2.h), the
// weights and bias put in the same order (split16).
using tessera::avx2::merge16;
using tessera::avx2::split16;
TS_VINLINE void widen16(const std::byte* p, __m256& lo, __m256& hi) {
  tessera::avx2::load_bf16x16_unpacked(reinterpret_cast<const uint16_t*>(p), lo, hi);
}

// P pixels x 8 * V channels from channel c into tile + j * ts: pixel j's
// input for tap t at in[j * taps + t] (a pixel row, or zeros in the
// padding), weights w[t * stride + c], accumulators in registers (fully
// unrolled over P and V; 16 bfloat16 channels through widen16).
template <bool B, int P, int V>
TS_VINLINE void block(const std::byte* const* in, uint32_t taps, uint32_t c, const float* w, size_t stride,
                      const float* bias, float* tile, size_t ts) {
  constexpr size_t es = B ? 2 : 4;
  constexpr bool kUnpack = B && V == 2;
  __m256 acc[P][V];
  __m256 b[V];
  if constexpr (kUnpack)
    split16(bias + c, b[0], b[1]);
  else
    for (int v = 0; v < V; ++v) b[v] = _mm256_loadu_ps(bias + c + 8 * v);
#pragma GCC unroll 8
  for (int j = 0; j < P; ++j)
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) acc[j][v] = b[v];
  for (uint32_t t = 0; t < taps; ++t) {
    const float* wt = w + t * stride + c;
    if constexpr (kUnpack) {
      __m256 w_lo, w_hi;
      split16(wt, w_lo, w_hi);
#pragma GCC unroll 8
      for (int j = 0; j < P; ++j) {
        __m256 lo, hi;
        widen16(in[j * taps + t] + c * es, lo, hi);
        acc[j][0] = _mm256_fmadd_ps(lo, w_lo, acc[j][0]);
        acc[j][1] = _mm256_fmadd_ps(hi, w_hi, acc[j][1]);
      }
      continue;
    }
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) {
      const __m256 wv = _mm256_loadu_ps(wt + 8 * v);
#pragma GCC unroll 8
      for (int j = 0; j < P; ++j)
        acc[j][v] = _mm256_fmadd_ps(load8<B>(in[j * taps + t] + (c + 8 * v) * es), wv, acc[j][v]);
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < P; ++j) {
    if constexpr (kUnpack) {
      merge16(acc[j][0], acc[j][1], tile + j * ts);
      continue;
    }
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) _mm256_storeu_ps(tile + j * ts + v * 8, acc[j][v]);
  }
}

// Channels [c, c + n) (n a multiple of 8) of P pixels into tile + j * ts:
// block<> per 16 or 8 channels, inlined, in one call (a call per 16-channel
// block cost about as much as its FMAs).
template <bool B, int P>
void blocks(const std::byte* const* in, uint32_t taps, uint32_t c, uint32_t n, const float* w, size_t stride,
            const float* bias, float* tile, size_t ts) {
  uint32_t i = 0;
  for (; i + 16 <= n; i += 16) block<B, P, 2>(in, taps, c + i, w, stride, bias, tile + i, ts);
  if (i < n) block<B, P, 1>(in, taps, c + i, w, stride, bias, tile + i, ts);
}

using BlocksFn = void (*)(const std::byte* const*, uint32_t, uint32_t, uint32_t, const float*, size_t, const float*,
                          float*, size_t);
template <bool B>
constexpr BlocksFn kBlocks[kPixels + 1] = {nullptr,        blocks<B, 1>, blocks<B, 2>, blocks<B, 3>,
                                           blocks<B, 4>, blocks<B, 5>, blocks<B, 6>};

// block<B, kPixels, V> for pixels whose taps all lie inside the input's
// columns, on rows evenly spaced in memory: tap (ky, kx) of pixel j at
// rows[ky] + kx * tap_step + j * pixel_step (a row of zeros where ky falls
// in the padding). No per-pixel pointer table: building one cost more than
// the FMAs on MobileNetV2's 32-channel maps.
struct Window {
  const std::byte* const* rows;
  uint32_t kh, kw;
  size_t tap_step, pixel_step;
};
template <bool B, bool OB, int V, class Act>
void interior_block(const Window& win, uint32_t c, const float* w, size_t stride, const float* bias,
                    std::byte* const* out, Act act) {
  constexpr size_t es = B ? 2 : 4;
  constexpr int P = kPixels;
  __m256 acc[P][V];
#pragma GCC unroll 8
  for (int j = 0; j < P; ++j)
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) acc[j][v] = _mm256_loadu_ps(bias + c + 8 * v);
  for (uint32_t ky = 0; ky < win.kh; ++ky) {
    const std::byte* row = win.rows[ky] + c * es;
    for (uint32_t kx = 0; kx < win.kw; ++kx, row += win.tap_step) {
      const float* wt = w + (ky * win.kw + kx) * stride + c;
#pragma GCC unroll 2
      for (int v = 0; v < V; ++v) {
        const __m256 wv = _mm256_loadu_ps(wt + 8 * v);
#pragma GCC unroll 8
        for (int j = 0; j < P; ++j)
          acc[j][v] = _mm256_fmadd_ps(load8<B>(row + j * win.pixel_step + 8 * v * es), wv, acc[j][v]);
      }
    }
  }
  // The activation in registers, then straight to the output rows.
#pragma GCC unroll 8
  for (int j = 0; j < P; ++j)
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) {
      tessera::avx2::store8<OB>(out[j], c + 8 * v, act(acc[j][v]));
    }
}

// interior_block<true, OB, 2> through widen16, with the weights and bias
// in the same order per tap (split16); a bfloat16 output packs back to
// channel order in one op, float32 through merge16. Same process,
// alternating: MobileNetV2's bfloat16 layers with interior blocks 6-16%
// faster than widening eight at a time (773 against 882 us over seven).
template <bool OB, class Act>
void interior_block_bf16x16(const Window& win, uint32_t c, const float* w, size_t stride, const float* bias,
                            std::byte* const* out, Act act) {
  constexpr int P = kPixels;
  __m256 b_lo, b_hi;
  split16(bias + c, b_lo, b_hi);
  __m256 lo[P], hi[P];
#pragma GCC unroll 8
  for (int j = 0; j < P; ++j) lo[j] = b_lo, hi[j] = b_hi;
  for (uint32_t ky = 0; ky < win.kh; ++ky) {
    const std::byte* row = win.rows[ky] + c * 2;
    for (uint32_t kx = 0; kx < win.kw; ++kx, row += win.tap_step) {
      __m256 w_lo, w_hi;
      split16(w + (ky * win.kw + kx) * stride + c, w_lo, w_hi);
#pragma GCC unroll 8
      for (int j = 0; j < P; ++j) {
        __m256 x_lo, x_hi;
        widen16(row + j * win.pixel_step, x_lo, x_hi);
        lo[j] = _mm256_fmadd_ps(x_lo, w_lo, lo[j]);
        hi[j] = _mm256_fmadd_ps(x_hi, w_hi, hi[j]);
      }
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < P; ++j) {
    const __m256 a = act(lo[j]), b = act(hi[j]);
    if constexpr (OB) {
      tessera::avx2::store_bf16x16_unpacked(reinterpret_cast<uint16_t*>(out[j]) + c, a, b);
    } else {
      merge16(a, b, reinterpret_cast<float*>(out[j]) + c);
    }
  }
}

// All channels of p output pixels, kChunk at a time: `compute(c, width,
// tile, ts)` fills tile + j * ts (pixel j) for channels [c, c + width)
// (the chunk's whole vectors at once, then its last c % 8); then the
// activation over the chunk in one call and the stores to out[j]. (Calling the activation and
// storing per 16-channel block cost more than the FMAs on MobileNetV2's
// maps.)
constexpr uint32_t kChunk = 512;
template <class Compute>
void channels(const DepthwiseArgs& a, uint32_t p, std::byte* const* out, Compute compute) {
  alignas(32) float tile[kPixels * kChunk];
  const uint32_t eo = element_size(a.dst_type);
  for (uint32_t c0 = 0; c0 < a.c; c0 += kChunk) {
    const uint32_t cw = std::min(kChunk, a.c - c0);
    const uint32_t vec = cw / 8 * 8;
    if (vec) compute(c0, vec, tile, cw);
    if (vec < cw) compute(c0 + vec, cw - vec, tile + vec, cw);
    if (!a.activation.is_identity()) a.math.unary(a.activation, tile, uint64_t{p} * cw);
    for (uint32_t j = 0; j < p; ++j) convert_from_float(tile + j * cw, out[j] + c0 * eo, a.dst_type, cw);
  }
}

// The last c % 8 channels of p pixels through their pointer table, in
// scalar FMAs in the same order.
template <bool B>
void tail(const DepthwiseArgs& a, const std::byte* const* in, uint32_t p, uint32_t c, uint32_t width, float* tile,
          size_t ts) {
  constexpr size_t es = B ? 2 : 4;
  const uint32_t taps = a.kh * a.kw;
  for (uint32_t j = 0; j < p; ++j) {
    float* acc = tile + j * ts;
    std::copy_n(a.bias + c, width, acc);
    for (uint32_t k = 0; k < taps; ++k)
      for (uint32_t i = 0; i < width; ++i) {
        const std::byte* v = in[j * taps + k] + (c + i) * es;
        const float x =
            B ? bfloat16_to_float(*reinterpret_cast<const uint16_t*>(v)) : *reinterpret_cast<const float*>(v);
        acc[i] = std::fma(x, a.weights[k * uint64_t{a.c} + c + i], acc[i]);
      }
  }
}

template <bool B, bool OB, class Act>
Status run(const DepthwiseArgs& a, uint32_t begin, uint32_t end, Act act) {
  constexpr size_t es = B ? 2 : 4;
  const uint32_t taps = a.kh * a.kw;
  const uint64_t in_stride = a.src.uniform_row_stride(), out_stride = a.dst.uniform_row_stride();
  // A row of w zero pixels, in_stride apart (the taps that fall in the padding).
  thread_local Scratch zeros_scratch, ind_scratch;
  const uint64_t zero_bytes = uint64_t{a.w} * std::max<uint64_t>(in_stride, uint64_t{a.c} * es);
  const auto* zeros = static_cast<const std::byte*>(zeros_scratch.zeros(zero_bytes));
  const auto** ind = reinterpret_cast<const std::byte**>(ind_scratch.pointers(uint64_t{kPixels} * taps));
  uint32_t run = 0;
  auto pixel_in = [&](uint64_t p) -> const std::byte* {  // input pixel p's channel 0
    return in_stride ? a.src.base + p * in_stride : a.src.unit(static_cast<uint32_t>(p), 0, &run);
  };
  auto pixel_out = [&](uint64_t p) -> std::byte* {
    return out_stride ? a.dst.base + p * out_stride : a.dst.unit(static_cast<uint32_t>(p), 0, &run);
  };
  // Output columns [x_lo, x_hi) read only columns inside the input (with
  // uniform rows and at most kMaxInteriorRows kernel rows: the interior
  // blocks); the others go through pointer tables.
  const bool interior = in_stride && a.kh <= kMaxInteriorRows;
  const int64_t span = int64_t{a.kw - 1} * a.dw;
  const int64_t lo = (int64_t{a.pad_l} + a.sw - 1) / a.sw;
  const int64_t hi = int64_t{a.w} - 1 - span + a.pad_l < 0 ? 0 : (int64_t{a.w} - 1 - span + a.pad_l) / a.sw + 1;
  const uint32_t x_lo = interior ? static_cast<uint32_t>(std::min<int64_t>(lo, a.ow)) : a.ow;
  const uint32_t x_hi = interior ? static_cast<uint32_t>(std::clamp<int64_t>(hi, x_lo, a.ow)) : a.ow;
  for (uint32_t t = begin; t < end; ++t) {
    const uint32_t img = t / a.oh, oy = t % a.oh;
    const uint64_t row0 = (uint64_t{img} * a.oh + oy) * a.ow;
    std::byte* out[kPixels];
    // Pixels [x, x + p) through pointer tables, p <= kPixels.
    auto tabled = [&](uint32_t x, uint32_t p) {
      const std::byte** at = ind;
      for (uint32_t j = 0; j < p; ++j) {
        out[j] = pixel_out(row0 + x + j);
        for (uint32_t ky = 0; ky < a.kh; ++ky) {
          const int64_t iy = int64_t{oy} * a.sh + int64_t{ky} * a.dh - a.pad_t;
          for (uint32_t kx = 0; kx < a.kw; ++kx) {
            const int64_t ix = int64_t{x + j} * a.sw + int64_t{kx} * a.dw - a.pad_l;
            *at++ = iy < 0 || iy >= a.h || ix < 0 || ix >= a.w
                        ? zeros
                        : pixel_in((uint64_t{img} * a.h + uint64_t(iy)) * a.w + uint64_t(ix));
          }
        }
      }
      channels(a, p, out, [&](uint32_t c, uint32_t width, float* tile, size_t ts) {
        if (width % 8 == 0)
          kBlocks<B>[p](ind, taps, c, width, a.weights, a.c, a.bias, tile, ts);
        else
          tail<B>(a, ind, p, c, width, tile, ts);
      });
    };
    for (uint32_t x = 0; x < x_lo; x += kPixels) tabled(x, std::min(kPixels, x_lo - x));
    uint32_t x = x_lo;
    if (x_hi - x_lo >= kPixels) {
      const std::byte* rows[kMaxInteriorRows];
      for (uint32_t ky = 0; ky < a.kh; ++ky) {  // pixel column 0 of each tap row
        const int64_t iy = int64_t{oy} * a.sh + int64_t{ky} * a.dh - a.pad_t;
        rows[ky] = iy < 0 || iy >= a.h ? zeros
                                       : a.src.base + (uint64_t{img} * a.h + uint64_t(iy)) * a.w * in_stride;
      }
      const size_t pixel_step = a.sw * in_stride;
      for (; x + kPixels <= x_hi; x += kPixels) {
        const std::byte* rp[kMaxInteriorRows];
        const int64_t ix0 = int64_t{x} * a.sw - a.pad_l;  // >= 0 inside [x_lo, x_hi)
        for (uint32_t ky = 0; ky < a.kh; ++ky) rp[ky] = rows[ky] + ix0 * in_stride;
        for (uint32_t j = 0; j < kPixels; ++j) out[j] = pixel_out(row0 + x + j);
        const Window win{rp, a.kh, a.kw, a.dw * in_stride, pixel_step};
        uint32_t c = 0;
        for (; c + 16 <= a.c; c += 16) {
          if constexpr (B)
            interior_block_bf16x16<OB>(win, c, a.weights, a.c, a.bias, out, act);
          else
            interior_block<B, OB, 2>(win, c, a.weights, a.c, a.bias, out, act);
        }
        for (; c + 8 <= a.c; c += 8) interior_block<B, OB, 1>(win, c, a.weights, a.c, a.bias, out, act);
        if (c < a.c) {  // the last c % 8: a table for these pixels, then as the tabled ones
          const std::byte** at = ind;
          for (uint32_t j = 0; j < kPixels; ++j)
            for (uint32_t ky = 0; ky < a.kh; ++ky)
              for (uint32_t kx = 0; kx < a.kw; ++kx) *at++ = rp[ky] + (kx * a.dw + j * a.sw) * in_stride;
          alignas(32) float tile[kPixels * 8];
          const uint32_t width = a.c - c;
          tail<B>(a, ind, kPixels, c, width, tile, width);
          a.math.unary(a.activation, tile, uint64_t{kPixels} * width);
          for (uint32_t j = 0; j < kPixels; ++j)
            convert_from_float(tile + j * width, out[j] + c * (OB ? 2 : 4), a.dst_type, width);
        }
      }
    }
    for (; x < a.ow; x += kPixels) tabled(x, std::min(kPixels, a.ow - x));
  }
  return Status();
}

}  // namespace

Status depthwise_kernel(const void* raw, uint32_t begin, uint32_t end) {
  const auto& a = *static_cast<const DepthwiseArgs*>(raw);
  const bool in16 = a.src_type == DataType::BFLOAT16, out16 = a.dst_type == DataType::BFLOAT16;
  Status st;
  with_activation<true>(a.activation, [&](auto act) {  // (compact: the rarer activations share one instantiation)
    st = in16 ? (out16 ? run<true, true>(a, begin, end, act) : run<true, false>(a, begin, end, act))
              : (out16 ? run<false, true>(a, begin, end, act) : run<false, false>(a, begin, end, act));
  });
  return st;
}

}  // namespace tessera::cpu::avx2
