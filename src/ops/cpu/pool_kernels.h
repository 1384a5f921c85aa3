// max and sum over pooling windows, vectorised over channels (internal).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace tessera::cpu {

// acc[i] = max(acc[i], x[i]) for n channels, NaN winning; bf16 inputs are
// widened exactly. The first of equal values is kept (+0 vs -0).
using MaxAccumulateFn = void (*)(float* acc, const void* x, size_t n);
// acc[i] += x[i] in float32.
using SumAccumulateFn = MaxAccumulateFn;

MaxAccumulateFn select_max_accumulate(bool bf16, const char** name);
SumAccumulateFn select_sum_accumulate(bool bf16, const char** name);

// Max or average pooling over NHWC pixel rows `in_stride` / `out_stride`
// bytes apart (TensorAccess::uniform_row_stride), float32 or bfloat16 (in
// and out alike), each window's max or sum held in registers 32 channels at
// a time. Same results as the accumulate functions: NaN wins a max, the
// first of equal values is kept, averages divide the float32 sum by the
// window's count (count_include_pad as PyTorch's divisor). One task = one
// output row (image n, row oy) as task n * oh + oy. Windows of at most
// kPoolRowsMaxTaps pixels.
inline constexpr uint32_t kPoolRowsMaxTaps = 1024;

// A pooling window over an h x w image.
struct PoolWindow {
  uint32_t h, w, kh, kw, sh, sw, ph, pw, dh, dw;
  bool count_include_pad;
  // Calls valid(iy, ix) for each input pixel of output pixel (oy, ox)'s
  // window, in (ky, kx) order; returns the average's divisor (padding counts
  // up to the padded border with count_include_pad: PyTorch's divisor).
  template <class F>
  uint32_t visit(uint32_t oy, uint32_t ox, F valid) const {
    uint32_t count = 0;
    for (uint32_t ky = 0; ky < kh; ++ky) {
      const int64_t iy = int64_t{oy} * sh + int64_t{ky} * dh - ph;
      for (uint32_t kx = 0; kx < kw; ++kx) {
        const int64_t ix = int64_t{ox} * sw + int64_t{kx} * dw - pw;
        if (iy < 0 || iy >= h || ix < 0 || ix >= w) {
          count += count_include_pad && iy < int64_t{h} + ph && ix < int64_t{w} + pw;
          continue;
        }
        ++count;
        valid(static_cast<uint32_t>(iy), static_cast<uint32_t>(ix));
      }
    }
    return count;
  }
};

struct PoolRowsArgs {
  const std::byte* in;
  std::byte* out;
  uint64_t in_stride, out_stride;
  bool bf16, average;
  uint32_t c, oh, ow;
  PoolWindow win;
  bool prefetch;  // prefetch the input rows ahead (for_each_output_pixel): inputs past the workers' caches
};

// f(px, taps, count, out) for every output pixel of tasks [begin, end) (task
// t: image t / oh, output row t % oh): px[0..taps) the window's valid input
// pixels in (ky, kx) order, count its average's divisor (PoolWindow::visit),
// out the output pixel. The pool_rows kernels' shared walk. Windows wholly
// inside the image take their taps from offsets computed once per call (an
// add per tap; PoolWindow::visit's bounds checks per tap were most of the
// stem pool's instructions), the others from visit.
// With a.prefetch, each output pixel inside the image prefetches the input
// rows its window is first to read, this far ahead of its taps: the
// hardware's prefetchers kept the UNet's 2x2 pools (39 MB of float32 in,
// from DRAM) to 50 GB/s. Per-launch sums in the models, old and new builds
// alternated (bench/RESULTS.md, twenty-first run): ResNet-50's stem pool
// 0.050-0.064 -> 0.037-0.042 ms; the UNet's four pools 1.68-2.44 -> 1.82-2.12
// ms (bfloat16 0.80-0.85 -> 0.69-0.80). YOLO's 5x5 stride-1 pools on 20x20
// maps, whose input stays in the L2, went 4-10% slower prefetched: pool2d
// sets a.prefetch only past the workers' caches.
inline constexpr uint64_t kPoolPrefetchBytes = 4096;

template <class F>
inline void for_each_output_pixel(const PoolRowsArgs& a, uint32_t begin, uint32_t end, F&& f) {
  const std::byte* px[kPoolRowsMaxTaps];
  int64_t offset[kPoolRowsMaxTaps];
  const PoolWindow& w = a.win;
  const uint32_t taps = w.kh * w.kw;
  for (uint32_t ky = 0, i = 0; ky < w.kh; ++ky)
    for (uint32_t kx = 0; kx < w.kw; ++kx, ++i)
      offset[i] = (int64_t{ky} * w.dh * w.w + int64_t{kx} * w.dw) * static_cast<int64_t>(a.in_stride);
  // Output columns [ox0, ox1) have windows inside the image's width.
  const int64_t span_x = int64_t{w.kw - 1} * w.dw, span_y = int64_t{w.kh - 1} * w.dh;
  const int64_t ox0 = std::min<int64_t>(a.ow, (w.pw + w.sw - 1) / w.sw);
  const int64_t last = int64_t{w.w} - 1 - span_x + w.pw;  // the last window start inside, padded coordinates
  const int64_t ox1 = last < 0 ? ox0 : std::max<int64_t>(ox0, std::min<int64_t>(a.ow, last / w.sw + 1));
  // Prefetched: the window rows the previous output row did not read (ky
  // from kh - sh / dh on, where dh divides sh; else all), kPoolPrefetchBytes
  // ahead, the bytes a step of sw columns moves on.
  const uint32_t shared = w.sh % w.dh == 0 ? w.sh / w.dh : w.kh;
  const uint32_t fresh_ky = w.kh > shared ? w.kh - shared : 0;
  const uint64_t step_bytes = uint64_t{w.sw} * a.in_stride;
  for (uint32_t t = begin; t < end; ++t) {
    const uint32_t n = t / a.oh, oy = t % a.oh;
    const int64_t iy = int64_t{oy} * w.sh - w.ph;
    const bool inside_y = iy >= 0 && iy + span_y < w.h;
    std::byte* out = a.out + (uint64_t{n} * a.oh + oy) * a.ow * a.out_stride;
    for (uint32_t ox = 0; ox < a.ow; ++ox, out += a.out_stride) {
      if (inside_y && ox >= ox0 && ox < ox1) {
        const std::byte* p0 =
            a.in + ((uint64_t{n} * w.h + static_cast<uint64_t>(iy)) * w.w + uint64_t{ox} * w.sw - w.pw) * a.in_stride;
        for (uint32_t i = 0; i < taps; ++i) px[i] = p0 + offset[i];
        for (uint32_t ky = a.prefetch ? fresh_ky : w.kh; ky < w.kh; ++ky)
          for (uint64_t b = 0; b < step_bytes; b += 64)
            __builtin_prefetch(p0 + offset[ky * w.kw] + kPoolPrefetchBytes + b, 0, 3);
        f(px, taps, taps, out);
        continue;
      }
      uint32_t valid = 0;
      const uint32_t count = w.visit(oy, ox, [&](uint32_t y, uint32_t x) {
        px[valid++] = a.in + ((uint64_t{n} * w.h + y) * w.w + x) * a.in_stride;
      });
      f(px, valid, count, out);
    }
  }
}

namespace avx2 {
// The per-tap path (a float buffer per 1024 channels, an address lookup and
// an indirect call per tap) took ~1300 cycles per output pixel of
// ResNet-50's 3x3/2 stem pool on the AVX2 VM.
void pool_rows(const PoolRowsArgs& a, uint32_t begin, uint32_t end);
void max_accumulate_f32(float* acc, const void* x, size_t n);
void max_accumulate_bf16(float* acc, const void* x, size_t n);
void sum_accumulate_f32(float* acc, const void* x, size_t n);
void sum_accumulate_bf16(float* acc, const void* x, size_t n);
}  // namespace avx2

namespace avx512 {
// pool_rows in 16-lane vectors, the last one masked. bench_ops, three
// alternated runs: bfloat16 pools 10-30% faster than on the AVX2 kernel
// (the UNet's pool3 0.095-0.109 against 0.135-0.161 ms), float32 ones the
// same within the noise (bound by memory).
void pool_rows(const PoolRowsArgs& a, uint32_t begin, uint32_t end);
void max_accumulate_f32(float* acc, const void* x, size_t n);
void max_accumulate_bf16(float* acc, const void* x, size_t n);
void sum_accumulate_f32(float* acc, const void* x, size_t n);
void sum_accumulate_bf16(float* acc, const void* x, size_t n);
// acc[0..n) = the sums over `rows` rows `stride` bytes apart, starting at
// `first`, of n float32 or bfloat16 values each: 64 channels at a time in
// registers, each row's values added in row order (the same sums as
// sum_accumulate row by row, one load per vector instead of three memory
// operations).
void sum_rows(float* acc, const std::byte* first, uint64_t stride, uint32_t rows, uint32_t n, bool bf16);
}  // namespace avx512

}  // namespace tessera::cpu
