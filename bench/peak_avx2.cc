// Peak-throughput loop (AVX2 + FMA): 12 independent accumulator chains, as in
// peak_avx512.cc, on 8-lane vectors.
#include <immintrin.h>

#include "peak.h"

namespace tessera::bench {

float fma_f32_loop_avx2(uint64_t iterations) {
  constexpr int kChains = 12;
  const __m256 b = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(0.001f);
  __m256 acc[kChains];
  for (int k = 0; k < kChains; ++k) acc[k] = _mm256_set1_ps(static_cast<float>(k));
  for (uint64_t i = 0; i < iterations; ++i)
    for (int k = 0; k < kChains; ++k) acc[k] = _mm256_fmadd_ps(acc[k], b, c);
  __m256 s = acc[0];
  for (int k = 1; k < kChains; ++k) s = _mm256_add_ps(s, acc[k]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  return lanes[0] + lanes[7];
}

}  // namespace tessera::bench
