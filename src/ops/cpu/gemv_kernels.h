// Matrix-vector products for linear layers with few rows (a
// classifier's 1 x K input against its N x K weights), as AVX-512 and AVX2
// loops (internal). oneDNN 2.6's gemm ran ResNet-50's 1 x 2048 x 1000 head at
// 0.20 ms standalone, 0.38 ms inside the model (21 GB/s of weights), against
// ONNX Runtime's 0.09 / 0.20 ms; these stream each weight row once per task
// and are bound by that read. Each operand is float32 or bfloat16 (widened
// exactly as read; the output rounded to nearest even once, after bias and
// activation), so a bfloat16 head reads half the bytes: ResNet-50's in
// bfloat16 ran on oneDNN's gemm at 0.13-0.17 ms standalone, against 0.07 for
// this kernel in float32.
//
// y[r][c] = act(bias[c] + sum_j a[r][j] * b[c][j]) for rows r < m and columns
// c of the task's block: tasks are blocks of `cols_per_task` columns.
#pragma once

#include <cstdint>

#include "float_math.h"
#include "tessera/base/status.h"

namespace tessera::cpu {

struct GemvArgs {
  const void* a;     // m rows of k, lda elements apart
  const void* b;     // n rows of k (transposed weights), ldb elements apart
  const void* bias;  // n values, or null
  void* y;           // m rows of n, ldy elements apart
  bool a_bf16, b_bf16, bias_bf16, y_bf16;  // bfloat16 rather than float32
  uint32_t m, k, n, cols_per_task;
  uint64_t lda, ldb, ldy;
  FloatMath math;
  UnaryWithParam activation;
};

// Rows per call (a batch of 8 images): each block of four weight rows is
// read from memory once and serves every row, 4 (AVX-512) or 2 (AVX2) rows
// at a time.
constexpr uint32_t kGemvMaxRows = 8;

namespace avx512 {
Status gemv_kernel(const void* args, uint32_t begin, uint32_t end);
}
namespace avx2 {
Status gemv_kernel(const void* args, uint32_t begin, uint32_t end);
}

}  // namespace tessera::cpu
