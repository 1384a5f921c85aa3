// Peak-throughput loops (AVX-512): 12 independent accumulator chains, enough
// to cover FMA latency on two pipes, so each loop runs at the issue rate.
#include <immintrin.h>

#include "peak.h"

namespace tessera::bench {

namespace {

constexpr int kChains = 12;

// Keeps the result observable so the loops are not optimised away.
float combine(const __m512* acc) {
  __m512 s = acc[0];
  for (int k = 1; k < kChains; ++k) s = _mm512_add_ps(s, acc[k]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s);
  return lanes[0] + lanes[15];
}

template <class Step>
float run_chains(uint64_t iterations, Step step) {
  __m512 acc[kChains];
  for (int k = 0; k < kChains; ++k) acc[k] = _mm512_set1_ps(static_cast<float>(k));
  for (uint64_t i = 0; i < iterations; ++i)
    for (int k = 0; k < kChains; ++k) acc[k] = step(acc[k]);
  return combine(acc);
}

}  // namespace

float fma_f32_loop_avx512(uint64_t iterations) {
  const __m512 b = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(0.001f);
  return run_chains(iterations, [&](__m512 a) { return _mm512_fmadd_ps(a, b, c); });
}

float dot_bf16_loop_avx512(uint64_t iterations) {
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.5f), _mm512_set1_ps(0.25f));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.001f), _mm512_set1_ps(0.002f));
  return run_chains(iterations, [&](__m512 acc) { return _mm512_dpbf16_ps(acc, a, b); });
}

// u8 x s8 dot products into int32 (VNNI's vpdpbusd: 64 products per
// instruction), the integer convs' (quantized_conv2d.h) instruction.
__attribute__((target("avx512vnni"))) float dot_u8s8_loop_avx512(uint64_t iterations) {
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
  __m512i acc[kChains];
  for (int k = 0; k < kChains; ++k) acc[k] = _mm512_set1_epi32(k);
  for (uint64_t i = 0; i < iterations; ++i)
    for (int k = 0; k < kChains; ++k) acc[k] = _mm512_dpbusd_epi32(acc[k], a, b);
  __m512 f[kChains];
  for (int k = 0; k < kChains; ++k) f[k] = _mm512_cvtepi32_ps(acc[k]);
  return combine(f);
}

}  // namespace tessera::bench
