// Measured compute peaks of this machine: FP32 FMA and BF16 dot-product
// GFLOP/s with `threads` threads, each thread running 12 independent
// accumulator chains of the widest vectors the CPU has (bench/peak_avx512.cc,
// bench/peak_avx2.cc). Where the CPU has no BF16 dot-product instruction,
// bfloat16 computes in float32 and its peak is the FP32 FMA peak
// (has_bf16_dot() says which).
#pragma once

#include <cstdint>
#include <string_view>

namespace tessera::bench {

double fma_f32_peak_gflops(int threads, uint64_t iterations = 20'000'000, int reps = 7);
double dot_bf16_peak_gflops(int threads, uint64_t iterations = 20'000'000, int reps = 7);
bool has_bf16_dot();
// u8 x s8 products (2 ops each) per second, in billions, with AVX512-VNNI (0 without).
double dot_u8s8_peak_gops(int threads, uint64_t iterations = 20'000'000, int reps = 7);
// AMX's BF16 tile multiply, where the CPU and OS have it (0 elsewhere, or when
// Linux refuses the tile state). oneDNN runs its bfloat16 convolutions and
// matmuls on it there, so their percentages are of this peak.
double amx_bf16_peak_gflops(int threads, uint64_t iterations = 1'000'000, int reps = 7);
// The peak bfloat16 convolutions are measured against: AMX's where it runs,
// else the BF16 dot product's (else FP32's), and its name.
double bf16_peak_gflops(int threads, std::string_view* name = nullptr);
std::string_view peak_isa();  // "avx512", "avx2" or "scalar" (no vector loops: peaks read 0)

// The loops, one file per ISA: 12 chains x lanes x 2 FLOPs per iteration.
float fma_f32_loop_avx512(uint64_t iterations);  // 16 lanes
float dot_bf16_loop_avx512(uint64_t iterations);  // 32 bf16 pairs
float dot_u8s8_loop_avx512(uint64_t iterations);  // 64 u8 x s8 products
float fma_f32_loop_avx2(uint64_t iterations);    // 8 lanes
float amx_bf16_loop(uint64_t iterations);        // 4 tiles x 16 x 16 x 32 pairs
bool request_amx_tiles();                        // Linux's per-process permission

}  // namespace tessera::bench
