// The emulated matrix engine's inner loop per ISA (matrix_engine.cc picks
// one): partial[j] += b[k] * w[k * n + j] for k in [k0, k1), j in [0, n),
// each element's sum in k order, products and sums rounded separately (no
// fused multiply-add) — bit-identical to the scalar loop by contract.
#pragma once

#include <cstdint>

namespace tessera::avx512 {
void engine_accumulate(const float* b, const float* w, uint32_t k0, uint32_t k1, uint32_t n, float* partial);
}  // namespace tessera::avx512

namespace tessera::avx2 {
void engine_accumulate(const float* b, const float* w, uint32_t k0, uint32_t k1, uint32_t n, float* partial);
}  // namespace tessera::avx2
