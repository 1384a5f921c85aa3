// Measured compute peaks of this machine (bench/peak_avx512.cc): FP32 FMA and
// BF16 dot-product GFLOP/s with `threads` threads, each thread running 12
// independent AVX-512 accumulator chains. Needs the AVX-512 kernel set
// (cpu_features().has_avx512_kernels()).
#pragma once

#include <cstdint>

namespace tessera::bench {

double fma_f32_peak_gflops(int threads, uint64_t iterations = 20'000'000, int reps = 7);
double dot_bf16_peak_gflops(int threads, uint64_t iterations = 20'000'000, int reps = 7);

}  // namespace tessera::bench
