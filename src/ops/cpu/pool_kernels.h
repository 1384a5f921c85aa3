// max and sum over pooling windows, vectorised over channels (internal).
#pragma once

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
};

// f(px, taps, count, out) for every output pixel of tasks [begin, end) (task
// t: image t / oh, output row t % oh): px[0..taps) the window's valid input
// pixels, count its average's divisor (PoolWindow::visit), out the output
// pixel. The pool_rows kernels' shared walk.
template <class F>
inline void for_each_output_pixel(const PoolRowsArgs& a, uint32_t begin, uint32_t end, F&& f) {
  const std::byte* px[kPoolRowsMaxTaps];
  for (uint32_t t = begin; t < end; ++t) {
    const uint32_t n = t / a.oh, oy = t % a.oh;
    for (uint32_t ox = 0; ox < a.ow; ++ox) {
      uint32_t taps = 0;
      const uint32_t count = a.win.visit(oy, ox, [&](uint32_t iy, uint32_t ix) {
        px[taps++] = a.in + ((uint64_t{n} * a.win.h + iy) * a.win.w + ix) * a.in_stride;
      });
      f(px, taps, count, a.out + ((uint64_t{n} * a.oh + oy) * a.ow + ox) * a.out_stride);
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
}  // namespace avx512

}  // namespace tessera::cpu
