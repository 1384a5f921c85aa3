#include "pool_kernels.h"

#include <cmath>

#include "tessera/base/cpu_features.h"
#include "tessera/numerics/bfloat16.h"

namespace tessera::cpu {

namespace {
// The first NaN wins, as in the reference; ties keep m.
inline float nan_max(float m, float v) { return !std::isnan(m) && (std::isnan(v) || v > m) ? v : m; }

void max_accumulate_f32(float* acc, const void* x, size_t n) {
  const float* p = static_cast<const float*>(x);
  for (size_t i = 0; i < n; ++i) acc[i] = nan_max(acc[i], p[i]);
}

void max_accumulate_bf16(float* acc, const void* x, size_t n) {
  const uint16_t* p = static_cast<const uint16_t*>(x);
  for (size_t i = 0; i < n; ++i) acc[i] = nan_max(acc[i], bfloat16_to_float(p[i]));
}
void sum_accumulate_f32(float* acc, const void* x, size_t n) {
  const float* p = static_cast<const float*>(x);
  for (size_t i = 0; i < n; ++i) acc[i] += p[i];
}

void sum_accumulate_bf16(float* acc, const void* x, size_t n) {
  const uint16_t* p = static_cast<const uint16_t*>(x);
  for (size_t i = 0; i < n; ++i) acc[i] += bfloat16_to_float(p[i]);
}
}  // namespace

SumAccumulateFn select_sum_accumulate(bool bf16, const char** name) {
  if (kernel_isa() == KernelIsa::kAvx512) {
    *name = bf16 ? "bf16_avg_pool2d__avx512" : "f32_avg_pool2d__avx512";
    return bf16 ? avx512::sum_accumulate_bf16 : avx512::sum_accumulate_f32;
  }
  if (kernel_isa() == KernelIsa::kAvx2) {
    *name = bf16 ? "bf16_avg_pool2d__avx2" : "f32_avg_pool2d__avx2";
    return bf16 ? avx2::sum_accumulate_bf16 : avx2::sum_accumulate_f32;
  }
  *name = bf16 ? "bf16_avg_pool2d__scalar" : "f32_avg_pool2d__scalar";
  return bf16 ? sum_accumulate_bf16 : sum_accumulate_f32;
}

MaxAccumulateFn select_max_accumulate(bool bf16, const char** name) {
  if (kernel_isa() == KernelIsa::kAvx512) {
    *name = bf16 ? "bf16_max_pool2d__avx512" : "f32_max_pool2d__avx512";
    return bf16 ? avx512::max_accumulate_bf16 : avx512::max_accumulate_f32;
  }
  if (kernel_isa() == KernelIsa::kAvx2) {
    *name = bf16 ? "bf16_max_pool2d__avx2" : "f32_max_pool2d__avx2";
    return bf16 ? avx2::max_accumulate_bf16 : avx2::max_accumulate_f32;
  }
  *name = bf16 ? "bf16_max_pool2d__scalar" : "f32_max_pool2d__scalar";
  return bf16 ? max_accumulate_bf16 : max_accumulate_f32;
}

}  // namespace tessera::cpu
