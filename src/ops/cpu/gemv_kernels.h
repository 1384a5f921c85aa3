// Matrix-vector products for float32 linear layers with few rows (a
// classifier's 1 x K input against its N x K weights), as AVX-512 and AVX2
// loops (internal). oneDNN 2.6's gemm ran ResNet-50's 1 x 2048 x 1000 head at
// 0.20 ms standalone, 0.38 ms inside the model (21 GB/s of weights), against
// ONNX Runtime's 0.09 / 0.20 ms; these stream each weight row once per task
// and are bound by that read.
//
// y[r][c] = act(bias[c] + sum_j a[r][j] * b[c][j]) for rows r < m and columns
// c of the task's block: tasks are blocks of `cols_per_task` columns.
#pragma once

#include <cstdint>

#include "float_math.h"
#include "tessera/base/status.h"

namespace tessera::cpu {

struct GemvArgs {
  const float* a;     // m rows of k, lda floats apart
  const float* b;     // n rows of k (transposed weights), ldb floats apart
  const float* bias;  // n floats, or null
  float* y;           // m rows of n, ldy floats apart
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
