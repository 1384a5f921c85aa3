// The AVX-512 depthwise kernel's direct path for 3- and 5-wide kernels
// (internal): its templates, shared by depthwise_avx512.cc (3-wide, blocks
// of eight pixels), depthwise_seven_avx512.cc (3-wide, blocks of seven) and
// depthwise_five_avx512.cc (5-wide), which compile apart.
#pragma once

#include <algorithm>
#include <type_traits>

#include "avx512_activation.h"
#include "depthwise_kernels.h"

namespace tessera::cpu::avx512 {

inline constexpr uint32_t kMaxK = 7;
// The rarer activations through one shared instantiation of each kernel
// (with_plain_activation's kCompact): the compile time of the depthwise files.
inline constexpr bool kCompactActivations = true;

// KW-wide kernels (3 or 5; up to kMaxK tall) of stride 1 or 2, dilation 1,
// on rows evenly spaced in memory (MobileNet's, MnasNet's and EfficientNet's
// depthwise layers): taps read straight from the NHWC rows, no staging
// (5-wide kernels staged their rows before: 14x14x480 on an Intel Xeon 90
// -> 203 GFLOP/s, 28x28x240 stride 2 60 -> 122; the staging stores and
// the staged rows, over L1's size, had bound them). A block is P output pixels of one output row (two at
// stride 1) and 16 channels, P = 7 at stride 1 with one dtype in and out on
// rows whose width 7 divides and 8 does not (MobileNet's 28, 14 and 7:
// 8-pixel blocks computed 16 pixels per 14), 8 elsewhere; each input column the block reads is
// loaded once per input row and feeds every accumulator that uses it (3x3:
// 10 loads for 24 FMAs per output row at stride 1, 17 at stride 2). Blocks
// loop over channels inside, so a block's input columns and its output
// pixels are contiguous runs of memory. Accumulation order is the portable
// kernel's: bias, then taps in (ky, kx) order. Blocks that reach past the
// map's columns (kEdge) read zeros there, as the padding. bfloat16 rows in
// and out go 32 channels at a time as even and odd halves (block_pairs).
namespace direct3 {

// The input rows R output rows read, in order, with each one's weights
// (KW, C) for each of the output rows (null where it reads none).
template <int R>
struct Rows {
  const std::byte* row[kMaxK + 1];  // pixel 0 of the input row
  const float* w[kMaxK + 1][R];
  const float* wp[kMaxK + 1][R];    // the same in pairs order (block_pairs)
  uint32_t n = 0;
};

// P output pixels of R output rows, one input row's columns at a time:
// loaded once (zeros past the map's edges), then the FMAs tap by tap over
// the P pixels of each output row it feeds. Two output rows of stride 1
// share two of their four input rows: with P = 8 the block then reads 40
// columns for 16 pixels where one row at a time read 60 (from L2: the three rows of a
// 56x56x144 map do not fit L1, and those reads, not the FMAs, bound it).
//
// bfloat16 results are rounded by vcvtneps2bf16 alone (to_bf16_noting); a
// block that met a float32 denormal notes it in `denormal`, and the caller
// redoes its output rows with the portable loop, which keeps denormals.
template <int S, int R, int P, int KW, bool kEdge, bool kBf16In, bool kBf16Out, class Act>
void block(const DepthwiseArgs& a, const Rows<R>& rows, int64_t ix0, int npx, uint64_t in_stride,
           std::byte* const* out, uint64_t out_stride, Act act, __mmask16& denormal, uint32_t c_begin = 0) {
  constexpr int kCols = (P - 1) * S + KW;
  constexpr uint64_t ei = kBf16In ? 2 : 4;
  const int64_t w = a.w;
  for (uint32_t cb = c_begin; cb < a.c; cb += 16) {
    const __mmask16 m = tail_mask(a.c - cb);
    const __m512 bias = _mm512_maskz_loadu_ps(m, a.bias + cb);
    __m512 acc[R][P];
    _Pragma("GCC unroll 2") for (int r = 0; r < R; ++r)
      _Pragma("GCC unroll 8") for (int j = 0; j < P; ++j) acc[r][j] = bias;
    for (uint32_t q = 0; q < rows.n; ++q) {
      const std::byte* p = rows.row[q] + cb * ei;
      __m512 xs[kCols];
      _Pragma("GCC unroll 32") for (int i = 0; i < kCols; ++i) {
        const int64_t col = ix0 + i;
        if (kEdge && (col < 0 || col >= w)) {
          xs[i] = _mm512_setzero_ps();
          continue;
        }
        const std::byte* at = p + static_cast<uint64_t>(col) * in_stride;
        xs[i] = kBf16In ? load_bf16(reinterpret_cast<const uint16_t*>(at), m)
                        : _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(at));
      }
      _Pragma("GCC unroll 2") for (int r = 0; r < R; ++r) {
        const float* wq = rows.w[q][r];
        if (!wq) continue;
        _Pragma("GCC unroll 5") for (int kx = 0; kx < KW; ++kx) {
          const __m512 wv = _mm512_maskz_loadu_ps(m, wq + kx * a.c + cb);
          _Pragma("GCC unroll 8") for (int j = 0; j < P; ++j)
            acc[r][j] = _mm512_fmadd_ps(xs[j * S + kx], wv, acc[r][j]);
        }
      }
    }
    _Pragma("GCC unroll 2") for (int r = 0; r < R; ++r)
      _Pragma("GCC unroll 8") for (int j = 0; j < P; ++j) {
        if (kEdge && j >= npx) break;
        std::byte* o = out[r] + j * out_stride;
        if constexpr (kBf16Out)
          storeu_epi16(reinterpret_cast<uint16_t*>(o) + cb, m, to_bf16_noting(act(acc[r][j]), denormal));
        else
          store(o, kBf16Out, cb, m, act(acc[r][j]));
      }
  }
}

// bfloat16 rows in and out, weights in pairs order (DepthwiseArgs::
// weights_pairs): blocks of 32 channels in two passes, one per half. A
// 64-byte input column widens its even or its odd channels in one
// instruction (bf16_even, bf16_odd) where load_bf16 takes two per 16
// channels, on the two vector ports the FMAs use: 40 widening
// instructions per two-row block of 144 FMAs instead of 80. The even pass
// leaves its results, activated, on the stack; the odd pass rounds both
// halves in one vcvtne2ps2bf16 and interleaves them
// (pack_bf16_halves_noting), a 64-byte store per pixel.
// It repeats block's column loads and FMA loop on purpose: one shared
// always-inline helper, loads and weights passed as lambdas, compiled to
// the same inner loop but ran 2-6% slower on the maps where every block is
// an edge block (7x7 to 28x28, float32 and bfloat16, one core, both builds
// alternated in one process; bench/RESULTS.md, thirty-fifth run).
template <int S, int R, int P, int KW, bool kEdge, class Act>
void block_pairs(const DepthwiseArgs& a, const Rows<R>& rows, int64_t ix0, int npx, uint64_t in_stride,
                 std::byte* const* out, uint64_t out_stride, Act act, __mmask16& denormal, uint32_t c_end) {
  constexpr int kCols = (P - 1) * S + KW;
  const int64_t w = a.w;
  const uint64_t cp = pairs_width(a.c);
  alignas(64) float even[R][P][16];
  for (uint32_t cb = 0; cb < c_end; cb += kPairsGroup) {
    const uint32_t left = c_end - cb;
    const bool full = left >= kPairsGroup;
    const __mmask32 m = full ? ~__mmask32{0} : static_cast<__mmask32>((uint32_t{1} << left) - 1);
    auto pass = [&](auto odd) {
      const uint32_t at = odd ? cb + kPairsGroup / 2 : cb;  // in the pairs order
      const __m512 bias = _mm512_loadu_ps(a.bias_pairs + at);
      __m512 acc[R][P];
      _Pragma("GCC unroll 2") for (int r = 0; r < R; ++r)
        _Pragma("GCC unroll 8") for (int j = 0; j < P; ++j) acc[r][j] = bias;
      for (uint32_t q = 0; q < rows.n; ++q) {
        const std::byte* p = rows.row[q] + uint64_t{cb} * 2;
        __m512 xs[kCols];
        _Pragma("GCC unroll 32") for (int i = 0; i < kCols; ++i) {
          const int64_t col = ix0 + i;
          if (kEdge && (col < 0 || col >= w)) {
            xs[i] = _mm512_setzero_ps();
            continue;
          }
          const std::byte* in = p + static_cast<uint64_t>(col) * in_stride;
          const __m512i raw = full ? _mm512_loadu_si512(in) : _mm512_maskz_loadu_epi16(m, in);
          xs[i] = odd ? bf16_odd(raw) : bf16_even(raw);
        }
        _Pragma("GCC unroll 2") for (int r = 0; r < R; ++r) {
          const float* wq = rows.wp[q][r];
          if (!wq) continue;
          _Pragma("GCC unroll 5") for (int kx = 0; kx < KW; ++kx) {
            const __m512 wv = _mm512_loadu_ps(wq + kx * cp + at);
            _Pragma("GCC unroll 8") for (int j = 0; j < P; ++j)
              acc[r][j] = _mm512_fmadd_ps(xs[j * S + kx], wv, acc[r][j]);
          }
        }
      }
      _Pragma("GCC unroll 2") for (int r = 0; r < R; ++r)
        _Pragma("GCC unroll 8") for (int j = 0; j < P; ++j) {
          if (kEdge && j >= npx) break;
          if constexpr (!odd) {
            _mm512_store_ps(even[r][j], act(acc[r][j]));
          } else {
            const __m512i v = pack_bf16_halves_noting(_mm512_load_ps(even[r][j]), act(acc[r][j]), denormal);
            std::byte* o = out[r] + j * out_stride + uint64_t{cb} * 2;
            if (full) _mm512_storeu_si512(o, v);
            else _mm512_mask_storeu_epi16(o, m, v);
          }
        }
    };
    pass(std::false_type{});
    pass(std::true_type{});
  }
}

// The channels block_pairs takes: all but a last 16 or fewer past a multiple
// of 32, which `block` takes in order (16 channels in two halves would leave
// half of each vector idle; MobileNetV2's 144), and none of 16 or fewer.
// One core, data in cache, alternated (bench/RESULTS.md, thirty-fourth run):
// 112x112x32 116-118 -> 100-102 us, 14x14x576 32-33 -> 27, 7x7x960 13.1 ->
// 10.6-10.9, 56x56x144 (128 paired) 131-132 -> 120-125.
inline uint32_t paired_channels(uint32_t c) {
  if (c <= 16) return 0;
  const uint32_t rest = c % kPairsGroup;
  return rest != 0 && rest <= 16 ? c - rest : c;
}

// Output rows t .. t + rows - 1 again, by the portable loop, which rounds
// to bfloat16 keeping denormals (depthwise_avx512.cc). Out of line and not a
// template: rare, and the instantiations here already make these files the
// slowest to compile under the sanitizers.
void redo_rows_exactly(const DepthwiseArgs& a, uint32_t t, uint32_t rows);

// Output rows t .. t + R - 1 of one image (R = 2 only at stride 1 both
// ways).
template <int S, int R, int P, int KW, bool kBf16In, bool kBf16Out, class Act>
void output_rows_at(const DepthwiseArgs& a, uint32_t t, Act act) {
  const uint64_t in_stride = a.src.uniform_row_stride(), out_stride = a.dst.uniform_row_stride();
  constexpr int kCols = (P - 1) * S + KW;
  constexpr bool kPairs = kBf16In && kBf16Out;  // block_pairs where the weights are there too
  const uint32_t paired = kPairs && a.weights_pairs ? paired_channels(a.c) : 0;
  const uint32_t img = t / a.oh, oy = t % a.oh;
  Rows<R> rows;
  for (uint32_t q = 0; q < a.kh + R - 1; ++q) {
    const int64_t iy = int64_t{oy} * a.sh + q - a.pad_t;
    if (iy < 0 || iy >= a.h) continue;
    rows.row[rows.n] = a.src.base + (uint64_t{img} * a.h + static_cast<uint64_t>(iy)) * a.w * in_stride;
    for (int r = 0; r < R; ++r) {
      const int64_t ky = int64_t{q} - r;
      rows.w[rows.n][r] = ky >= 0 && ky < a.kh ? a.weights + static_cast<uint64_t>(ky) * KW * a.c : nullptr;
      if (kPairs && a.weights_pairs)
        rows.wp[rows.n][r] =
            rows.w[rows.n][r] ? a.weights_pairs + static_cast<uint64_t>(ky) * KW * pairs_width(a.c) : nullptr;
    }
    ++rows.n;
  }
  std::byte* out_row[R];
  for (int r = 0; r < R; ++r) out_row[r] = a.dst.base + (uint64_t{img} * a.oh + oy + r) * a.ow * out_stride;
  // Input rows no earlier output row read: the last S per output row.
  const uint32_t fresh = std::min<uint32_t>(rows.n, S * R);
  __mmask16 denormal = 0;
  for (uint32_t ox0 = 0; ox0 < a.ow; ox0 += P) {
    const int64_t ix0 = int64_t{ox0} * S - a.pad_l;
    const int npx = static_cast<int>(std::min<uint32_t>(P, a.ow - ox0));
    std::byte* out[R];
    for (int r = 0; r < R; ++r) out[r] = out_row[r] + uint64_t{ox0} * out_stride;
    // The next block's columns of the fresh rows, ahead of the hardware: its
    // prefetchers miss this column-by-channel-block order, and from DRAM (a
    // batch of 8 56x56x144 maps) the block ran 2-3x slower without.
    const int64_t lo = std::clamp<int64_t>(ix0 + kCols, 0, a.w);
    const int64_t hi = std::clamp<int64_t>(ix0 + kCols + P * S, 0, a.w);
    for (uint32_t q = rows.n - fresh; q < rows.n; ++q)
      for (const std::byte* p = rows.row[q] + lo * in_stride; p < rows.row[q] + hi * in_stride; p += 64)
        _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
    const bool inside = npx == P && ix0 >= 0 && ix0 + kCols <= a.w;
    if (paired && inside) block_pairs<S, R, P, KW, false>(a, rows, ix0, npx, in_stride, out, out_stride, act, denormal, paired);
    else if (paired) block_pairs<S, R, P, KW, true>(a, rows, ix0, npx, in_stride, out, out_stride, act, denormal, paired);
    if (paired == a.c) continue;
    if (inside)
      block<S, R, P, KW, false, kBf16In, kBf16Out>(a, rows, ix0, npx, in_stride, out, out_stride, act, denormal, paired);
    else
      block<S, R, P, KW, true, kBf16In, kBf16Out>(a, rows, ix0, npx, in_stride, out, out_stride, act, denormal, paired);
  }
  if constexpr (kBf16Out)
    if (denormal) [[unlikely]]
      redo_rows_exactly(a, t, R);
}

template <int S, int P, int KW, bool kBf16In, bool kBf16Out, class Act>
void output_rows(const DepthwiseArgs& a, uint32_t begin, uint32_t end, Act act) {
  for (uint32_t t = begin; t < end;) {
    if (S == 1 && a.sh == 1 && t + 1 < end && (t + 1) % a.oh != 0) {
      output_rows_at<S, 2, P, KW, kBf16In, kBf16Out>(a, t, act);
      t += 2;
    } else {
      output_rows_at<S, 1, P, KW, kBf16In, kBf16Out>(a, t, act);
      t += 1;
    }
  }
}

// Whether `a` fits this path: 3-wide kernels with any pair of row dtypes,
// 5-wide ones (MnasNet's, EfficientNet's, MobileNetV3's) with one dtype in
// and out (run_five: mixed pairs would double its instantiations, and
// stage through depthwise_rows instead).
inline bool applies(const DepthwiseArgs& a) {
  auto rows = [](DataType t) { return t == DataType::FLOAT32 || t == DataType::BFLOAT16; };
  const bool width = a.kw == 3 || (a.kw == 5 && a.src_type == a.dst_type);
  return a.kh <= kMaxK && width && a.dw == 1 && a.dh == 1 && (a.sw == 1 || a.sw == 2) && rows(a.src_type) &&
         rows(a.dst_type) && a.src.uniform_row_stride() && a.dst.uniform_row_stride();
}

// 3-wide kernels, every dtype pair in and out, blocks of eight pixels.
template <int S>
void run(const DepthwiseArgs& a, uint32_t begin, uint32_t end) {
  const bool bi = a.src_type == DataType::BFLOAT16, bo = a.dst_type == DataType::BFLOAT16;
  if (bo)
    with_activation<true, kCompactActivations>(a.activation, [&](auto act) {
      if (bi) output_rows<S, 8, 3, true, true>(a, begin, end, act);
      else output_rows<S, 8, 3, false, true>(a, begin, end, act);
    });
  else
    with_activation<false, kCompactActivations>(a.activation, [&](auto act) {
      if (bi) output_rows<S, 8, 3, true, false>(a, begin, end, act);
      else output_rows<S, 8, 3, false, false>(a, begin, end, act);
    });
}

// Stride 1, blocks of seven pixels, for `a` with the same dtype in and out
// (depthwise_kernel checks it): compiled in depthwise_seven_avx512.cc, in
// parallel with depthwise_avx512.cc's instantiations.
void run_stride1_seven(const DepthwiseArgs& a, uint32_t begin, uint32_t end);

// 5-wide kernels of stride 1 or 2 with the same dtype in and out, blocks of
// eight pixels: compiled in depthwise_five_avx512.cc.
void run_five(const DepthwiseArgs& a, uint32_t begin, uint32_t end);

}  // namespace direct3

}  // namespace tessera::cpu::avx512
