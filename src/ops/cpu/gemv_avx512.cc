#include <algorithm>
#include <cstdint>


#include "gemv_kernels.h"
#include "scratch.h"
#include "tessera/numerics/bfloat16.h"

namespace tessera::cpu::avx512 {

namespace {
typedef uint16_t H __attribute__((vector_size(16 * sizeof(uint16_t))));
typedef uint32_t W __attribute__((vector_size(16 * sizeof(uint32_t))));
#include "gemv_impl.h"
typedef float V __attribute__((vector_size(16 * sizeof(float))));
}  // namespace

Status gemv_kernel(const void* args, uint32_t begin, uint32_t end) { return gemv<V, 16>(args, begin, end); }

}  // namespace tessera::cpu::avx512
