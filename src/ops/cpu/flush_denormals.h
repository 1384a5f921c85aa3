// Flush-to-zero and denormals-are-zero on the calling thread while in scope.
//
// MXCSR's FTZ bit makes an SSE / AVX / AVX-512 result that would be a
// float32 denormal 0, its DAZ bit reads denormal operands as 0; the previous
// MXCSR comes back when the scope ends. Intel cores take a microcode assist
// of about a hundred cycles for each denormal an instruction makes or reads
// (AMD Zen cores take none): a Swin-T attention softmax, whose masked
// scores (-100) exponentiate to denormals, ran 5x slower, and so did the
// matmul that read its probabilities. Only kernels whose results cannot
// change by more than the smallest normal float use it (softmax: a row sums
// to 1); the others keep denormals as their reference kernels do.
#pragma once

#include <xmmintrin.h>

#include <cstdint>

namespace tessera::cpu {

class ScopedFlushDenormals {
 public:
  ScopedFlushDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | kFlushToZero | kDenormalsAreZero); }
  ~ScopedFlushDenormals() { _mm_setcsr(saved_); }
  ScopedFlushDenormals(const ScopedFlushDenormals&) = delete;
  ScopedFlushDenormals& operator=(const ScopedFlushDenormals&) = delete;

 private:
  static constexpr uint32_t kFlushToZero = 1u << 15, kDenormalsAreZero = 1u << 6;
  uint32_t saved_;
};

}  // namespace tessera::cpu
