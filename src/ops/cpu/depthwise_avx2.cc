// The portable depthwise loop compiled for AVX2 + FMA: its per-tap channel
// loop vectorises to 8-lane FMAs. What AVX2-only CPUs run; the register-
// blocked kernel (depthwise_avx512.cc) needs AVX-512.
#include <algorithm>

#include "depthwise_kernels.h"
#include "tessera/numerics/convert.h"

namespace tessera::cpu::avx2 {
#include "depthwise_impl.h"
}  // namespace tessera::cpu::avx2
