// The AVX-512 depthwise direct path's blocks of seven pixels
// (depthwise_direct3.h), compiled apart from depthwise_avx512.cc so that
// the two build in parallel.
#include "depthwise_direct3.h"

namespace tessera::cpu::avx512::direct3 {

void run_stride1_seven(const DepthwiseArgs& a, uint32_t begin, uint32_t end) { run<1, 7>(a, begin, end); }

}  // namespace tessera::cpu::avx512::direct3
