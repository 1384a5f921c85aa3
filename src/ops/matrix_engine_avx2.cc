// The emulated matrix engine's inner loop on AVX2 (matrix_engine_internal.h).
#include <immintrin.h>

#include <cstddef>

#include "matrix_engine_internal.h"

namespace tessera::avx2 {

void engine_accumulate(const float* b, const float* w, uint32_t k0, uint32_t k1, uint32_t n, float* partial) {
  uint32_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 acc = _mm256_loadu_ps(partial + j);
    for (uint32_t k = k0; k < k1; ++k)
      acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(b[k]), _mm256_loadu_ps(w + size_t{k} * n + j)));
    _mm256_storeu_ps(partial + j, acc);
  }
  for (; j < n; ++j) {
    float acc = partial[j];
    for (uint32_t k = k0; k < k1; ++k) acc += b[k] * w[size_t{k} * n + j];
    partial[j] = acc;
  }
}

}  // namespace tessera::avx2
