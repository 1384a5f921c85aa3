// Peak-throughput loops (AVX-512): 12 independent accumulator chains, enough
// to cover FMA latency on two pipes, so each loop runs at the issue rate.
#include <immintrin.h>

#include <cstdint>

#include "harness.h"
#include "peak.h"
#include "tessera/base/thread_pool.h"

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

// 12 chains x 16 lanes x 2 FLOPs per iteration.
float fma_f32_loop(uint64_t iterations) {
  const __m512 b = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(0.001f);
  return run_chains(iterations, [&](__m512 a) { return _mm512_fmadd_ps(a, b, c); });
}

// 12 chains x 32 bf16 pairs x 2 FLOPs per iteration (vdpbf16ps).
float dot_bf16_loop(uint64_t iterations) {
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.5f), _mm512_set1_ps(0.25f));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.001f), _mm512_set1_ps(0.002f));
  return run_chains(iterations, [&](__m512 acc) { return _mm512_dpbf16_ps(acc, a, b); });
}

namespace {

volatile float g_sink;

double peak_gflops(float (*loop)(uint64_t), double flops_per_iteration, int threads, uint64_t iterations, int reps) {
  ThreadPool pool(threads);
  auto t = time_it(reps, [&] {
    auto body = [&](uint32_t b, uint32_t e) {
      for (uint32_t i = b; i < e; ++i) g_sink = loop(iterations);
    };
    pool.parallel_for(static_cast<uint32_t>(threads), 1, body);
  });
  return flops_per_iteration * static_cast<double>(iterations) * threads / t.median_s / 1e9;
}

}  // namespace

double fma_f32_peak_gflops(int threads, uint64_t iterations, int reps) {
  return peak_gflops(fma_f32_loop, kChains * 16.0 * 2, threads, iterations, reps);
}

double dot_bf16_peak_gflops(int threads, uint64_t iterations, int reps) {
  return peak_gflops(dot_bf16_loop, kChains * 32.0 * 2, threads, iterations, reps);
}

}  // namespace tessera::bench
