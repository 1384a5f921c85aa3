#include "peak.h"

#include "harness.h"
#include "tessera/base/cpu_features.h"
#include "tessera/base/thread_pool.h"

namespace tessera::bench {

namespace {

volatile float g_sink;

double peak_gflops(float (*loop)(uint64_t), double flops_per_iteration, int threads, uint64_t iterations, int reps) {
  if (loop == nullptr) return 0;
  ThreadPool pool(threads);
  auto t = time_it(reps, [&] {
    auto body = [&](uint32_t b, uint32_t e) {
      for (uint32_t i = b; i < e; ++i) g_sink = loop(iterations);
    };
    pool.parallel_for(static_cast<uint32_t>(threads), 1, body);
  });
  return flops_per_iteration * static_cast<double>(iterations) * threads / t.median_s / 1e9;
}

bool avx2() { return cpu_features().avx2 && cpu_features().fma; }

}  // namespace

bool has_bf16_dot() { return cpu_features().has_avx512_kernels(); }

std::string_view peak_isa() { return has_bf16_dot() ? "avx512" : avx2() ? "avx2" : "scalar"; }

double fma_f32_peak_gflops(int threads, uint64_t iterations, int reps) {
  if (has_bf16_dot()) return peak_gflops(fma_f32_loop_avx512, 12 * 16.0 * 2, threads, iterations, reps);
  return peak_gflops(avx2() ? fma_f32_loop_avx2 : nullptr, 12 * 8.0 * 2, threads, iterations, reps);
}

double dot_bf16_peak_gflops(int threads, uint64_t iterations, int reps) {
  if (!has_bf16_dot()) return fma_f32_peak_gflops(threads, iterations, reps);
  return peak_gflops(dot_bf16_loop_avx512, 12 * 32.0 * 2, threads, iterations, reps);
}

double dot_u8s8_peak_gops(int threads, uint64_t iterations, int reps) {
  if (!has_bf16_dot() || !cpu_features().avx512_vnni) return 0;
  return peak_gflops(dot_u8s8_loop_avx512, 12 * 64.0 * 2, threads, iterations, reps);
}

double amx_bf16_peak_gflops(int threads, uint64_t iterations, int reps) {
  if (!cpu_features().amx_bf16 || !request_amx_tiles()) return 0;
  return peak_gflops(amx_bf16_loop, 4 * 16 * 16 * 32 * 2.0, threads, iterations, reps);
}

double bf16_peak_gflops(int threads, std::string_view* name) {
  const double amx = amx_bf16_peak_gflops(threads, 500'000, 5);
  if (name) *name = amx > 0 ? "AMX BF16 tile" : has_bf16_dot() ? "BF16 dot" : "FP32 FMA (no BF16 instruction)";
  return amx > 0 ? amx : dot_bf16_peak_gflops(threads, 10'000'000, 5);
}

}  // namespace tessera::bench
