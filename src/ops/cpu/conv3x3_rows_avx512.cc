// Tessera's AVX-512 3x3 row kernel over float32 rows; contract in
// direct_conv_kernels.h. Hand-written because oneDNN 2.6's brgconv and
// Tessera's direct kernel both lose a few percent on some 3x3 convs (the
// shapes: see conv/select.cc's rows3x3_avx512), against what their 6 x 4 micro tile sustains:
// a tile of one output row's pixels reads its broadcasts at a constant
// stride from three input rows (no per-pixel row pointers), the tiles of a
// row are as even as whole tiles allow (56 pixels: 6 x 6 + 4 x 5, not a
// 2-pixel tail that streams all the weights for two pixels), and each step's
// four weight vectors are one contiguous 256-byte run. One core, ResNet-50's
// 56x56 64 -> 64: 266-269 GFLOP/s against brgconv's 258 (bench/RESULTS.md,
// thirty-seventh run). Where the rows spill from L2, it prefetches the next
// tap's input (thirty-eighth run).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

#include "avx512_activation.h"
#include "direct_conv_kernels.h"

namespace tessera::cpu::avx512 {

namespace {

// Accumulators per tile: 24 of the 32 vector registers, the rest for the
// step's weights and a broadcast.
constexpr uint32_t kAccumulators = 24;

// One step (input channel) for pixels [LO, HI) of the tile: pixel i reads
// input p[(i - LO) * stride], the step's weights are w[0 .. NB * 16).
template <uint32_t NB, uint32_t MR, uint32_t LO, uint32_t HI>
inline void step(__m512 (&acc)[MR][NB], const float* p, uint64_t stride, const float* w) {
  __m512 wv[NB];
  _Pragma("GCC unroll 16") for (uint32_t j = 0; j < NB; ++j) wv[j] = _mm512_loadu_ps(w + 16 * j);
  _Pragma("GCC unroll 16") for (uint32_t i = LO; i < HI; ++i) {
    const __m512 x = _mm512_set1_ps(p[(i - LO) * stride]);
    _Pragma("GCC unroll 16") for (uint32_t j = 0; j < NB; ++j) acc[i][j] = _mm512_fmadd_ps(x, wv[j], acc[i][j]);
  }
}

// One tap's cin steps for pixels [LO, HI) of the tile: pixel i reads input
// p + (i - LO) * stride (floats; p is pixel LO's, so every pointer formed is
// inside the rows), step k's weights w[k * NB * 16 .. + NB * 16). With PF,
// before each 16 steps each of the MR pixels' next cache line of the next
// tap's input (`next`: tile pixel 0's, as an address) is prefetched into L1:
// where a task's rows and weights spill from L2 (DirectConvArgs::
// rows_prefetch), the rows come from L3 in short streams (cin floats per
// pixel and tap) that the hardware prefetchers do not cover in time. The
// prefetches sit in a loop over 16-step chunks of their own: tested as
// `k % 16 == 0` inside the step loop, they left the 12-pixel tile's step
// counter and a pixel pointer on the stack (GCC 12: five memory operations
// more per 24 FMAs), and dec4_512-256 ran 2% slower on two cores
// (bench/RESULTS.md, thirty-ninth run). Unrolling the chunk lost 2%.
template <uint32_t NB, uint32_t MR, uint32_t LO, uint32_t HI, bool PF>
inline void steps(__m512 (&acc)[MR][NB], const float* p, uint64_t stride, const float* w, uint32_t cin,
                  uintptr_t next) {
  uint32_t k = 0;
  if constexpr (PF) {
    for (; k + 16 <= cin; k += 16, p += 16, w += 16 * NB * 16, next += 16 * sizeof(float)) {
      _Pragma("GCC unroll 16") for (uint32_t i = 0; i < MR; ++i)
        _mm_prefetch(reinterpret_cast<const char*>(next + i * stride * sizeof(float)), _MM_HINT_T0);
      _Pragma("GCC unroll 1") for (uint32_t kk = 0; kk < 16; ++kk)
        step<NB, MR, LO, HI>(acc, p + kk, stride, w + kk * NB * 16);
    }
  }
  for (; k < cin; ++k, ++p, w += NB * 16) step<NB, MR, LO, HI>(acc, p, stride, w);
}

// MR pixels of one output row from x0 by NB 16-channel blocks (one group):
// bias, then the taps in (ky, kx, cin) order (a tap whose input row is
// padding adds nothing; the first pixel of the row skips kx = 0, the last
// kx = 2), then the activation, stored to the group's columns. `rows[ky]`:
// input row y - 1 + ky at its first pixel, or null. The loops over pixels
// and blocks are unrolled by pragma (16 at most: MR * NB <= 24) so the
// accumulators stay in registers.
template <uint32_t NB, uint32_t MR, bool PF>
void tile(const DirectConvArgs& a, const float* const (&rows)[3], uint64_t in_stride, uint32_t x0, const float* w,
          const float* bias, float* out, uint64_t out_stride) {
  constexpr uint32_t kGroup = NB * 16;
  __m512 acc[MR][NB];
  _Pragma("GCC unroll 16") for (uint32_t j = 0; j < NB; ++j) {
    const __m512 b = _mm512_loadu_ps(bias + 16 * j);
    _Pragma("GCC unroll 16") for (uint32_t i = 0; i < MR; ++i) acc[i][j] = b;
  }
  const bool left = x0 == 0, right = x0 + MR == a.ow;
  const uint64_t tap_floats = uint64_t{a.cin} * kGroup;
  // With PF: tile pixel 0's input at tap (ky, kx) as an address (pixel
  // x0 + kx - 1, which may be -1: a prefetch never faults, and integer
  // arithmetic forms it); after a row's last tap, the next row's first; after
  // the last tap, the next tile's first. The middle row is never padding.
  auto at = [&](uint32_t ky, uint32_t kx, uint32_t x) {
    return reinterpret_cast<uintptr_t>(rows[ky]) + (uint64_t{x} + kx - 1) * in_stride * sizeof(float);
  };
  const uint32_t first_ky = rows[0] == nullptr ? 1 : 0;
  for (uint32_t ky = 0; ky < 3; ++ky) {
    if (rows[ky] == nullptr) continue;
    for (uint32_t kx = 0; kx < 3; ++kx) {
      uintptr_t next = 0;
      if constexpr (PF) {
        const bool last_row = ky == 2 || (ky == 1 && rows[2] == nullptr);
        next = kx < 2 ? at(ky, kx + 1, x0) : !last_row ? at(ky + 1, 0, x0) : at(first_ky, 0, x0 + MR);
      }
      // Tile pixel i reads input pixel x0 + i - 1 + kx; where that is -1 (or
      // a.w) the edge pixel skips the tap.
      const float* wt = w + (ky * 3 + kx) * tap_floats;
      const bool skip_first = left && kx == 0, skip_last = right && kx == 2;  // never both
      if (skip_first) {
        steps<NB, MR, 1, MR, PF>(acc, rows[ky], in_stride, wt, a.cin, next);
      } else {
        const float* p = rows[ky] + (x0 + kx - 1) * in_stride;
        if (skip_last) steps<NB, MR, 0, MR - 1, PF>(acc, p, in_stride, wt, a.cin, next);
        else steps<NB, MR, 0, MR, PF>(acc, p, in_stride, wt, a.cin, next);
      }
    }
  }
  if (clamps_in_registers(a.activation)) {
    _Pragma("GCC unroll 16") for (uint32_t i = 0; i < MR; ++i)
      _Pragma("GCC unroll 16") for (uint32_t j = 0; j < NB; ++j)
        _mm512_storeu_ps(out + i * out_stride + 16 * j, clamp_in_registers(a.activation.op, acc[i][j]));
    return;
  }
  // Other activations: FloatMath's vector functions over the tile in a buffer.
  alignas(64) float buf[MR][kGroup];
  _Pragma("GCC unroll 16") for (uint32_t i = 0; i < MR; ++i)
    _Pragma("GCC unroll 16") for (uint32_t j = 0; j < NB; ++j) _mm512_store_ps(&buf[i][16 * j], acc[i][j]);
  a.math.unary(a.activation, &buf[0][0], MR * kGroup);
  _Pragma("GCC unroll 16") for (uint32_t i = 0; i < MR; ++i)
    _Pragma("GCC unroll 16") for (uint32_t j = 0; j < NB; ++j)
      _mm512_storeu_ps(out + i * out_stride + 16 * j, _mm512_load_ps(&buf[i][16 * j]));
}

using TileFn = void (*)(const DirectConvArgs&, const float* const (&)[3], uint64_t, uint32_t, const float*,
                        const float*, float*, uint64_t);
template <uint32_t NB, bool PF, uint32_t... R>
constexpr std::array<TileFn, sizeof...(R)> tile_table(std::integer_sequence<uint32_t, R...>) {
  return {&tile<NB, R + 1, PF>...};
}

// The kernel for groups of NB blocks: tiles of up to kAccumulators / NB pixels.
template <uint32_t NB, bool PF>
Status run(const DirectConvArgs& a, uint32_t begin, uint32_t end) {
  constexpr uint32_t kGroup = NB * 16, kMaxTile = kAccumulators / NB;
  static constexpr auto kTiles = tile_table<NB, PF>(std::make_integer_sequence<uint32_t, kMaxTile>{});  // [pixels - 1]
  const uint64_t in_stride = a.src.uniform_row_stride() / sizeof(float);
  const uint64_t out_stride = a.dst.uniform_row_stride() / sizeof(float);
  const uint32_t tiles = (a.ow + kMaxTile - 1) / kMaxTile;
  for (uint32_t t = begin; t < end; ++t) {
    const uint32_t per_group = a.n * a.bands, group = t / per_group, band = t % per_group % a.bands,
                   img = t % per_group / a.bands;
    const uint32_t y0 = band * a.band_rows, y1 = std::min(a.oh, y0 + a.band_rows);
    const float* w = a.weights + uint64_t{group} * 9 * a.cin * kGroup;
    const float* bias = a.bias + uint64_t{group} * kGroup;
    for (uint32_t y = y0; y < y1; ++y) {
      const float* rows[3];
      for (uint32_t ky = 0; ky < 3; ++ky) {
        const int64_t iy = int64_t{y} + ky - 1;
        rows[ky] = iy < 0 || iy >= a.h ? nullptr
                                       : reinterpret_cast<const float*>(a.src.base) +
                                             (uint64_t{img} * a.h + static_cast<uint64_t>(iy)) * a.w * in_stride;
      }
      float* out = reinterpret_cast<float*>(a.dst.base) + (uint64_t{img} * a.oh + y) * a.ow * out_stride +
                   uint64_t{group} * kGroup;
      // Tiles as even as whole tiles allow: ow / tiles pixels, the first ow % tiles one more.
      for (uint32_t i = 0, x = 0; i < tiles; ++i) {
        const uint32_t mr = a.ow / tiles + (i < a.ow % tiles);
        kTiles[mr - 1](a, rows, in_stride, x, w, bias, out + x * out_stride, out_stride);
        x += mr;
      }
    }
  }
  return Status();
}

}  // namespace

Status conv3x3_rows_kernel(const void* raw, uint32_t begin, uint32_t end) {
  const DirectConvArgs& a = *static_cast<const DirectConvArgs*>(raw);
  if (a.group_blocks == 4) return a.rows_prefetch ? run<4, true>(a, begin, end) : run<4, false>(a, begin, end);
  return a.rows_prefetch ? run<2, true>(a, begin, end) : run<2, false>(a, begin, end);
}

}  // namespace tessera::cpu::avx512
