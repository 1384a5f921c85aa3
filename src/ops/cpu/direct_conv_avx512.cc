// Tessera's AVX-512 direct conv kernel over float32 rows; contract in
// direct_conv_kernels.h. Hand-written because oneDNN's brgconv runs the
// small maps of late CNN layers (14x14 and 7x7, a few hundred output pixels
// against up to 2048 channels) at 250-300 GFLOP/s inside ResNet-50, most of
// the loss in reading cold weights and, for channel shards, staging the
// output columns; this kernel writes any column range of the output rows in
// place and prefetches its weights (bench/RESULTS.md, fifteenth run).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

#include "avx512_activation.h"
#include "direct_conv_kernels.h"
#include "scratch.h"
#include "tessera/base/aligned.h"

namespace tessera::cpu::avx512 {

namespace {

constexpr uint32_t kTileRows = kDirectTileRows;
constexpr uint32_t kTileBlocks = kDirectTileBlocks;
// The first tile of each block group prefetches its weights this many input
// channels ahead: they come from DRAM in four streams. ResNet-50 batch 1, per-launch
// medians, three alternated pairs: the 1x1 launches 0.5 ms less in all
// at 16 steps (1 KB ahead per stream); 32 steps and prefetching on every tile did no better.
constexpr uint32_t kPrefetchSteps = 16;
// Chunks of steps whose weights, for kTileBlocks blocks, take at most
// kChunkBytes: the chunk's tiles read them from the L2 (ResNet-50's 3x3
// 512 -> 512 holds 1.2 MB per four blocks, more than the L2), while the
// chunk's second to fifth tiles prefetch the next chunk, a block each.
constexpr uint64_t kChunkBytes = 256 * 1024;
constexpr _mm_hint kNextHint = _MM_HINT_T1;

struct Tile {
  const float* const* in[kTileRows];  // each pixel's input rows, one per tap (zeros in the padding)
  float* out[kTileRows];              // output row of each pixel, at the tile's first channel
  const float* res[kTileRows];        // residual rows likewise, or null
  const float* weights;               // the tile's first block: [taps][cin][16] per block, blocks block_step apart
  uint64_t block_step;                // taps * cin * 16 (patches: cin * 16)
  const float* bias;
  __mmask16 last_mask;  // channels of the tile's last block
  // Steps [s0, s1) of the taps * cin (tap, input channel) steps: one chunk.
  // The first chunk starts from the bias, the others from `partial`; all but
  // the last store their sums there (MR rows of kTileBlocks * 16 floats).
  uint32_t s0, s1;
  bool first, last;
  float* partial;
  bool prefetch;             // the weights are cold: prefetch them kPrefetchSteps ahead
  const float* prefetch_next;  // or null: a stream of the next chunk's weights, one line per step
};

// MR pixels x NB blocks over one chunk of steps: bias or partial sums, then
// one FMA per step and accumulator in (tap, input channel) order; then, on
// the last chunk, activation, residual and its activation, stored masked to
// the output's channels, or else the sums to `partial`. The loops over rows
// and blocks are unrolled by pragma: without it GCC keeps `acc` on the stack
// outside the step loop, 24 stores and 24 loads at each end of every tile
// (about 100 cycles: 3-7% of a 1x1 tile over 64-256 input channels).
template <uint32_t MR, uint32_t NB>
void tile(const DirectConvArgs& a, const Tile& t) {
  constexpr uint32_t kPartialStride = kTileBlocks * 16;
  __m512 acc[MR][NB];
  _Pragma("GCC unroll 8") for (uint32_t j = 0; j < NB; ++j) {
    const __m512 b = _mm512_loadu_ps(t.bias + 16 * j);
    _Pragma("GCC unroll 8") for (uint32_t i = 0; i < MR; ++i)
      acc[i][j] = t.first ? b : _mm512_load_ps(t.partial + i * kPartialStride + 16 * j);
  }
  // Claim the tile's output lines now (a prefetch for writing) so that their
  // reads for ownership run under the FMAs: the output of a model's layer is
  // cold, and stores that miss at the end of every tile filled the store
  // queue (ResNet-50 batch 1, per-launch medians, four alternated rounds: the
  // six 14x14 256->1024 launches 0.08-0.32 ms less in all).
  if (t.last)
    _Pragma("GCC unroll 8") for (uint32_t i = 0; i < MR; ++i)
      _Pragma("GCC unroll 8") for (uint32_t j = 0; j < NB; ++j) _m_prefetchw(t.out[i] + 16 * j);
  const uint64_t block_step = t.block_step;
  const float* w = t.weights + uint64_t{t.s0} * 16;
  const float* next = t.prefetch_next;
  for (uint32_t s = t.s0; s < t.s1;) {
    const uint32_t tap = s / a.cin, k0 = s % a.cin, k1 = std::min(a.cin, k0 + (t.s1 - s));
    const float* in[MR];
    _Pragma("GCC unroll 8") for (uint32_t i = 0; i < MR; ++i) in[i] = t.in[i][tap];
    for (uint32_t k = k0; k < k1; ++k, w += 16) {
      __m512 wv[NB];
      _Pragma("GCC unroll 8") for (uint32_t j = 0; j < NB; ++j) wv[j] = _mm512_loadu_ps(w + j * block_step);
      if (t.prefetch)
        _Pragma("GCC unroll 8") for (uint32_t j = 0; j < NB; ++j)
          _mm_prefetch(reinterpret_cast<const char*>(w + j * block_step + 16 * kPrefetchSteps), _MM_HINT_T0);
      if (next) _mm_prefetch(reinterpret_cast<const char*>(next), kNextHint), next += 16;
      _Pragma("GCC unroll 8") for (uint32_t i = 0; i < MR; ++i) {
        const __m512 x = _mm512_set1_ps(in[i][k]);
        _Pragma("GCC unroll 8") for (uint32_t j = 0; j < NB; ++j) acc[i][j] = _mm512_fmadd_ps(x, wv[j], acc[i][j]);
      }
    }
    s += k1 - k0;
  }
  if (!t.last) {
    _Pragma("GCC unroll 8") for (uint32_t i = 0; i < MR; ++i)
      _Pragma("GCC unroll 8") for (uint32_t j = 0; j < NB; ++j)
        _mm512_store_ps(t.partial + i * kPartialStride + 16 * j, acc[i][j]);
    return;
  }
  auto mask = [&](uint32_t j) { return j + 1 == NB ? t.last_mask : __mmask16(0xFFFF); };
  if (clamps_in_registers(a.activation) && clamps_in_registers(a.res_activation)) {
    _Pragma("GCC unroll 8") for (uint32_t i = 0; i < MR; ++i)
      _Pragma("GCC unroll 8") for (uint32_t j = 0; j < NB; ++j) {
        __m512 v = clamp_in_registers(a.activation.op, acc[i][j]);
        if (t.res[0])
          v = clamp_in_registers(a.res_activation.op, _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask(j), t.res[i] + 16 * j)));
        _mm512_mask_storeu_ps(t.out[i] + 16 * j, mask(j), v);
      }
    return;
  }
  // Other activations: FloatMath's vector functions over the tile in a buffer.
  alignas(64) float buf[MR][NB * 16];
  _Pragma("GCC unroll 8") for (uint32_t i = 0; i < MR; ++i)
    _Pragma("GCC unroll 8") for (uint32_t j = 0; j < NB; ++j) _mm512_store_ps(&buf[i][16 * j], acc[i][j]);
  if (!a.activation.is_identity()) a.math.unary(a.activation, &buf[0][0], MR * NB * 16);
  if (t.res[0]) {
    _Pragma("GCC unroll 8") for (uint32_t i = 0; i < MR; ++i)
      _Pragma("GCC unroll 8") for (uint32_t j = 0; j < NB; ++j)
        _mm512_store_ps(&buf[i][16 * j], _mm512_add_ps(_mm512_load_ps(&buf[i][16 * j]),
                                                       _mm512_maskz_loadu_ps(mask(j), t.res[i] + 16 * j)));
    if (!a.res_activation.is_identity()) a.math.unary(a.res_activation, &buf[0][0], MR * NB * 16);
  }
  _Pragma("GCC unroll 8") for (uint32_t i = 0; i < MR; ++i)
    _Pragma("GCC unroll 8") for (uint32_t j = 0; j < NB; ++j)
      _mm512_mask_storeu_ps(t.out[i] + 16 * j, mask(j), _mm512_load_ps(&buf[i][16 * j]));
}

using TileFn = void (*)(const DirectConvArgs&, const Tile&);

template <uint32_t... R, uint32_t... B>
constexpr auto tile_table(std::integer_sequence<uint32_t, R...>, std::integer_sequence<uint32_t, B...>) {
  std::array<std::array<TileFn, kTileBlocks>, kTileRows> t{};
  auto row = [&]<uint32_t MR>(std::integral_constant<uint32_t, MR>) { ((t[MR][B] = &tile<MR + 1, B + 1>), ...); };
  (row(std::integral_constant<uint32_t, R>{}), ...);
  return t;
}
// kTiles[rows - 1][blocks - 1]
constexpr auto kTiles =
    tile_table(std::make_integer_sequence<uint32_t, kTileRows>{}, std::make_integer_sequence<uint32_t, kTileBlocks>{});

// The direct kernel (kPatches false) and the patch transpose kernel (true:
// each input pixel one "tap" of cin steps, columns kh * kw * cout scattered
// to their output pixels). Tiles never straddle a tap's columns.
template <bool kPatches>
Status run(const DirectConvArgs& a, uint32_t begin, uint32_t end) {
  const uint32_t cols = kPatches ? a.kh * a.kw * a.cout : a.cout, blocks = (cols + 15) / 16;
  const uint32_t taps = kPatches ? 1 : a.kh * a.kw;
  const uint64_t pixels = kPatches ? uint64_t{a.n} * a.h * a.w : uint64_t{a.n} * a.oh * a.ow;
  const uint64_t map = uint64_t{a.oh} * a.ow, in_map = uint64_t{a.h} * a.w;
  const uint64_t in_stride = a.src.uniform_row_stride(), out_stride = a.dst.uniform_row_stride();
  const uint64_t res_stride = a.res.base ? a.res.uniform_row_stride() : 0;
  thread_local Scratch rows_scratch, zeros_scratch;
  thread_local Scratch partial_scratch;  // the band's partial sums between chunks (64-byte aligned)
  const auto* zeros = static_cast<const float*>(zeros_scratch.zeros(a.cin * sizeof(float)));
  // Output pixel p's row at column block b (patches: input pixel p, whose
  // column n = (ky * kw + kx) * cout + c goes to output pixel (y * kh + ky,
  // x * kw + kx), channel c).
  auto out_at = [&](uint64_t p, uint32_t b) {
    if constexpr (kPatches) {
      const uint32_t tap = b * 16 / a.cout, c = b * 16 % a.cout;
      const uint64_t img = p / in_map, y = p % in_map / a.w, x = p % a.w;
      const uint64_t o = (img * a.oh + y * a.kh + tap / a.kw) * a.ow + x * a.kw + tap % a.kw;
      return reinterpret_cast<float*>(a.dst.base + o * out_stride) + c;
    } else {
      return reinterpret_cast<float*>(a.dst.base + p * out_stride) + uint64_t{b} * 16;
    }
  };
  for (uint32_t t = begin; t < end; ++t) {
    const uint32_t group = t % a.groups, band = t / a.groups;
    const uint64_t p0 = uint64_t{band} * a.band_rows, p1 = std::min(pixels, p0 + a.band_rows);
    const uint32_t b0 = group * a.group_blocks, b1 = std::min(blocks, b0 + a.group_blocks);
    if (p0 >= p1 || b0 >= b1) continue;
    // The band's input rows, per pixel and tap: output pixel (y, x) reads
    // input pixel (y * sh - pad_t + ky * dh, x * sw - pad_l + kx * dw) of its
    // image, or zeros in the padding (patches: input pixel p).
    const auto** rows = reinterpret_cast<const float**>(rows_scratch.pointers((p1 - p0) * taps));
    const float** at = rows;
    for (uint64_t p = p0; p < p1; ++p) {
      if constexpr (kPatches) {
        *at++ = reinterpret_cast<const float*>(a.src.base + p * in_stride);
        continue;
      }
      const uint64_t img = p / map, y = p % map / a.ow, x = p % a.ow;
      for (uint32_t ky = 0; ky < a.kh; ++ky) {
        const int64_t iy = int64_t(y * a.sh) - a.pad_t + int64_t{ky} * a.dh;
        for (uint32_t kx = 0; kx < a.kw; ++kx) {
          const int64_t ix = int64_t(x * a.sw) - a.pad_l + int64_t{kx} * a.dw;
          *at++ = iy >= 0 && iy < a.h && ix >= 0 && ix < a.w
                      ? reinterpret_cast<const float*>(a.src.base + ((img * a.h + iy) * a.w + ix) * in_stride)
                      : zeros;
        }
      }
    }
    // Blocks of four 16-channel blocks, chunk by chunk of their weights
    // (each chunk's weights stay in the L2 while the band's pixels run past
    // them), up to six pixels at a time in tiles as even as whole tiles
    // allow (49 pixels: four of 6 and five of 5, not eight of 6 and one
    // whose tile re-read all the weights for one pixel).
    const uint64_t count = p1 - p0, tiles = (count + kTileRows - 1) / kTileRows;
    const uint64_t steps = uint64_t{taps} * a.cin;
    const uint64_t chunk_steps = kChunkBytes / (kTileBlocks * 64);
    const uint64_t chunks = tiles > 1 ? (steps + chunk_steps - 1) / chunk_steps : 1;
    const uint64_t per_chunk = (steps + chunks - 1) / chunks;
    float* const partial0 = chunks > 1 ? partial_scratch.floats(count * kTileBlocks * 16) : nullptr;
    const uint64_t block_step = steps * 16;
    // Blocks from b in one tile: up to four, within one tap's columns.
    auto tile_blocks = [&](uint32_t b) {
      const uint32_t n = std::min(kTileBlocks, b1 - b);
      return kPatches ? std::min(n, (b * 16 / a.cout + 1) * a.cout / 16 - b) : n;
    };
    for (uint32_t b = b0, nb; b < b1; b += nb) {
      nb = tile_blocks(b);
      const uint32_t last = std::min(16u, cols - (b + nb - 1) * 16);
      Tile tl{};
      tl.weights = a.weights + uint64_t{b} * block_step;
      tl.block_step = block_step;
      tl.bias = a.bias + uint64_t{b} * 16;
      tl.last_mask = static_cast<__mmask16>((1u << last) - 1);
      for (uint64_t c = 0; c < chunks; ++c) {
        tl.s0 = static_cast<uint32_t>(c * per_chunk);
        tl.s1 = static_cast<uint32_t>(std::min(steps, (c + 1) * per_chunk));
        tl.first = c == 0, tl.last = c + 1 == chunks;
        // The next chunk: this block group's, or the next group's first.
        const float* next = nullptr;
        uint32_t next_blocks = 0;
        if (!tl.last) {
          next = tl.weights + uint64_t{tl.s1} * 16, next_blocks = nb;
        } else if (b + nb < b1) {
          next = tl.weights + nb * block_step, next_blocks = tile_blocks(b + nb);
        }
        uint64_t p = p0;
        for (uint64_t i = 0; i < tiles; ++i) {
          const uint32_t mr = static_cast<uint32_t>(count / tiles + (i < count % tiles));
          tl.prefetch = i == 0;
          // Tiles 1..next_blocks stream one block of the next chunk each
          // (one line per step of their own chunk).
          tl.prefetch_next = next && i >= 1 && i <= next_blocks ? next + (i - 1) * block_step : nullptr;
          tl.partial = partial0 ? partial0 + (p - p0) * kTileBlocks * 16 : nullptr;
          for (uint32_t r = 0; r < mr; ++r) {
            tl.in[r] = rows + (p + r - p0) * taps;
            tl.out[r] = out_at(p + r, b);
            tl.res[r] = a.res.base ? reinterpret_cast<const float*>(a.res.base + (p + r) * res_stride) + uint64_t{b} * 16
                                   : nullptr;
          }
          kTiles[mr - 1][nb - 1](a, tl);
          p += mr;
        }
      }
    }
  }
  return Status();
}

}  // namespace

Status direct_conv_kernel(const void* raw, uint32_t begin, uint32_t end) {
  return run<false>(*static_cast<const DirectConvArgs*>(raw), begin, end);
}

Status patch_transpose_kernel(const void* raw, uint32_t begin, uint32_t end) {
  return run<true>(*static_cast<const DirectConvArgs*>(raw), begin, end);
}

}  // namespace tessera::cpu::avx512
