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
struct PoolRowsArgs {
  const std::byte* in;
  std::byte* out;
  uint64_t in_stride, out_stride;
  bool bf16, average, count_include_pad;
  uint32_t h, w, c, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw;
};

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
void max_accumulate_f32(float* acc, const void* x, size_t n);
void max_accumulate_bf16(float* acc, const void* x, size_t n);
void sum_accumulate_f32(float* acc, const void* x, size_t n);
void sum_accumulate_bf16(float* acc, const void* x, size_t n);
}  // namespace avx512

}  // namespace tessera::cpu
