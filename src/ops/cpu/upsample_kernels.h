// Bilinear upsampling over evenly spaced NHWC pixel rows (internal).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera::cpu {

// Where an output coordinate samples the input: i0 weighted 1 - w1, i1
// weighted w1 (upsample.cc computes these once per program).
struct UpsampleSample {
  uint32_t i0, i1;
  float w1;
};

// Pixel rows `in_stride` / `out_stride` bytes apart
// (TensorAccess::uniform_row_stride), float32 or bfloat16 alike in and out.
// `ys` holds oh samples, `xs` ow samples. One task = one output row (image n,
// row oy) as task n * oh + oy. Each output is
//   top = p00 (1 - wx) + p01 wx, bottom = p10 (1 - wx) + p11 wx,
//   out = top (1 - wy) + bottom wy
// in float32 (fused multiply-adds: within an ulp of the generic kernel's
// separate multiply and add; the AVX2 and AVX-512 kernels give the same
// results). Weighted sums, as the reference, PyTorch and ONNX Runtime: an
// infinity stays one where p + w (q - p) made it NaN.
struct BilinearRowsArgs {
  const std::byte* in;
  std::byte* out;
  uint64_t in_stride, out_stride;
  bool bf16;
  uint32_t h, w, c, oh, ow;
  const UpsampleSample *ys, *xs;
};

// f(px, wx, wy, out) for every output pixel of tasks [begin, end) (task t:
// image t / oh, output row t % oh): px the four input pixels p00, p01, p10,
// p11, wx and wy their weights (UpsampleSample::w1), out the output pixel.
// The row kernels' shared walk.
template <class F>
inline void for_each_bilinear_pixel(const BilinearRowsArgs& a, uint32_t begin, uint32_t end, F&& f) {
  for (uint32_t t = begin; t < end; ++t) {
    const uint32_t n = t / a.oh, oy = t % a.oh;
    const UpsampleSample& sy = a.ys[oy];
    const std::byte* top = a.in + (uint64_t{n} * a.h + sy.i0) * a.w * a.in_stride;
    const std::byte* bottom = a.in + (uint64_t{n} * a.h + sy.i1) * a.w * a.in_stride;
    std::byte* out = a.out + (uint64_t{n} * a.oh + oy) * a.ow * a.out_stride;
    for (uint32_t ox = 0; ox < a.ow; ++ox, out += a.out_stride) {
      const UpsampleSample& sx = a.xs[ox];
      const std::byte* px[4] = {top + sx.i0 * a.in_stride, top + sx.i1 * a.in_stride, bottom + sx.i0 * a.in_stride,
                                bottom + sx.i1 * a.in_stride};
      f(px, sx.w1, sy.w1, out);
    }
  }
}

namespace avx2 {
// The generic kernel (four row reads into float buffers and a row write per
// output pixel) ran at 19% of the copy bandwidth on the AVX2 VM: 60x80x64
// upsampled 2x took 1.26 ms against a 0.24 ms floor.
void bilinear_rows(const BilinearRowsArgs& a, uint32_t begin, uint32_t end);
}  // namespace avx2

namespace avx512 {
// The same in 16 lanes: on the AVX-512 CPU here the AVX2 kernel ran a
// bfloat16 60x80x64 2x upsample no faster than float32 (0.16-0.20 against
// 0.15-0.18 ms: bound by its conversions, not its bytes). Each input row's
// horizontal blends are made once per strip of output columns and kept for
// the output rows that read them (upsample_avx512.cc): the same bits.
void bilinear_rows(const BilinearRowsArgs& a, uint32_t begin, uint32_t end);
}  // namespace avx512

}  // namespace tessera::cpu
