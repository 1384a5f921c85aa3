// The host evaluator's float32 matrix product (internal to host_eval): y =
// a b of row-major float32 matrices, each output the sum over k of exact
// double products, in double, in k's order, rounded once to float32. Every
// tier (portable C++ in host_data.cc, AVX2 and AVX-512 in host_gemm_avx2.cc
// / host_gemm_avx512.cc, one implementation in host_gemm_impl.h) gives the
// same bits: a product of two floats is exact in double, so a fused
// multiply-add rounds as the separate add does. A detector's box head (a
// 1000 x 12544 x 1024 Gemm after its RoiAlign) runs here, in its host tail.
#pragma once

#include <cstdint>

namespace tessera::graph::host {

// a: m x k (row stride k), b: k x n (row stride n), or n x k (row stride k)
// when b_transposed (Gemm's transB), y: m x n (row stride n). Products of
// 2^27 or more multiply-adds split their columns over the machine's cores
// (each output computed by one thread, in the same order).
void gemm_f32(const float* a, const float* b, bool b_transposed, float* y, int64_t m, int64_t n, int64_t k);

}  // namespace tessera::graph::host

namespace tessera::cpu::avx512 {
// Columns [j_begin, j_end) of y.
void host_gemm_f32(const float* a, const float* b, bool b_transposed, float* y, int64_t m, int64_t n, int64_t k,
                   int64_t j_begin, int64_t j_end);
}  // namespace tessera::cpu::avx512
namespace tessera::cpu::avx2 {
// Columns [j_begin, j_end) of y.
void host_gemm_f32(const float* a, const float* b, bool b_transposed, float* y, int64_t m, int64_t n, int64_t k,
                   int64_t j_begin, int64_t j_end);
}  // namespace tessera::cpu::avx2
