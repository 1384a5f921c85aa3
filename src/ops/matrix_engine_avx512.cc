// The emulated matrix engine's inner loop on AVX-512 (matrix_engine_internal.h).
#include <immintrin.h>

#include <cstddef>

#include "matrix_engine_internal.h"

namespace tessera::avx512 {

void engine_accumulate(const float* b, const float* w, uint32_t k0, uint32_t k1, uint32_t n, float* partial) {
  for (uint32_t j = 0; j < n; j += 16) {
    const __mmask16 m = n - j >= 16 ? __mmask16{0xffff} : static_cast<__mmask16>((1u << (n - j)) - 1);
    __m512 acc = _mm512_maskz_loadu_ps(m, partial + j);
    for (uint32_t k = k0; k < k1; ++k) {
      const __m512 wk = _mm512_maskz_loadu_ps(m, w + size_t{k} * n + j);
      acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_set1_ps(b[k]), wk));
    }
    _mm512_mask_storeu_ps(partial + j, m, acc);
  }
}

}  // namespace tessera::avx512
