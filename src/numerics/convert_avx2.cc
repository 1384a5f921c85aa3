// AVX2 variants of the bfloat16 bulk conversions (convert_internal.h):
// bit-identical to the scalar ones (round to nearest even, NaN kept quiet).
// On AVX2-only CPUs every bfloat16 staging copy (oneDNN's 1x1 convs and
// matmuls, typecasts, tilize) runs through these.
#include <immintrin.h>

#include "convert_internal.h"
#include "tessera/numerics/bfloat16.h"
#include "tessera/numerics/bfloat16_avx2.h"

namespace tessera::avx2 {

void float_to_bfloat16(const float* src, uint16_t* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    store_bf16x16(dst + i, _mm256_loadu_ps(src + i), _mm256_loadu_ps(src + i + 8));
  }
  for (; i < n; ++i) dst[i] = tessera::float_to_bfloat16(src[i]);
}

void bfloat16_to_float(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i, load_bf16(src + i));
  }
  for (; i < n; ++i) dst[i] = tessera::bfloat16_to_float(src[i]);
}

}  // namespace tessera::avx2
