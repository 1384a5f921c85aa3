// host_gemm_f32 (host_gemm.h) in AVX-512: 8 doubles a vector, 8 rows a block.
#include <cstdint>

#include "host_gemm.h"

namespace tessera::cpu::avx512 {
namespace {
constexpr int64_t L = 8, kRows = 8;
typedef double D __attribute__((vector_size(L * sizeof(double))));
#include "host_gemm_impl.h"
}  // namespace

void host_gemm_f32(const float* a, const float* b, bool b_transposed, float* y, int64_t m, int64_t n, int64_t k,
                   int64_t j_begin, int64_t j_end) {
  gemm(a, b, b_transposed, y, m, n, k, j_begin, j_end);
}

}  // namespace tessera::cpu::avx512
