#include "tessera/numerics/bfloat16.h"

#include <cmath>

#include "convert_internal.h"
#include "tessera/base/cpu_features.h"

namespace tessera {

void float_to_bfloat16(const float* src, uint16_t* dst, size_t n) {
  if (avx512_kernels_enabled()) return avx512::float_to_bfloat16(src, dst, n);
  if (kernel_isa() == KernelIsa::kAvx2) return avx2::float_to_bfloat16(src, dst, n);
  for (size_t i = 0; i < n; ++i) dst[i] = float_to_bfloat16(src[i]);
}

void float_to_bfloat16_rows(const float* src, size_t src_stride, uint16_t* dst, size_t dst_stride, size_t rows,
                            size_t n) {
  if (avx512_kernels_enabled()) return avx512::float_to_bfloat16_rows(src, src_stride, dst, dst_stride, rows, n);
  for (size_t r = 0; r < rows; ++r) float_to_bfloat16(src + r * src_stride, dst + r * dst_stride, n);
}

void bfloat16_to_float(const uint16_t* src, float* dst, size_t n) {
  if (avx512_kernels_enabled()) return avx512::bfloat16_to_float(src, dst, n);
  if (kernel_isa() == KernelIsa::kAvx2) return avx2::bfloat16_to_float(src, dst, n);
  for (size_t i = 0; i < n; ++i) dst[i] = bfloat16_to_float(src[i]);
}

}  // namespace tessera
