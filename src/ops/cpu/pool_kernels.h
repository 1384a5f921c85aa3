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

namespace avx2 {
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
