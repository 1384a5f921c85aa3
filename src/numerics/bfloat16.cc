#include "tessera/numerics/bfloat16.h"

#include "convert_internal.h"
#include "tessera/base/cpu_features.h"

namespace tessera {

void float_to_bfloat16(const float* src, uint16_t* dst, size_t n) {
  if (avx512_kernels_enabled()) return avx512::float_to_bfloat16(src, dst, n);
  for (size_t i = 0; i < n; ++i) dst[i] = float_to_bfloat16(src[i]);
}

void bfloat16_to_float(const uint16_t* src, float* dst, size_t n) {
  if (avx512_kernels_enabled()) return avx512::bfloat16_to_float(src, dst, n);
  for (size_t i = 0; i < n; ++i) dst[i] = bfloat16_to_float(src[i]);
}

}  // namespace tessera
