#include <algorithm>

#include "gemv_kernels.h"

namespace tessera::cpu::avx512 {

namespace {
#include "gemv_impl.h"
typedef float V __attribute__((vector_size(16 * sizeof(float))));
}  // namespace

Status gemv_kernel(const void* args, uint32_t begin, uint32_t end) { return gemv<V, 16>(args, begin, end); }

}  // namespace tessera::cpu::avx512
