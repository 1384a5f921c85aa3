// The AVX-512 depthwise direct path's blocks of seven pixels
// (depthwise_direct3.h), compiled apart from depthwise_avx512.cc so that
// the two build in parallel.
#include "depthwise_direct3.h"

namespace tessera::cpu::avx512::direct3 {

void run_stride1_seven(const DepthwiseArgs& a, uint32_t begin, uint32_t end) {
  if (a.dst_type == DataType::BFLOAT16)
    with_activation<true, kCompactActivations>(a.activation,
                                               [&](auto act) { output_rows<1, 7, 3, true, true>(a, begin, end, act); });
  else
    with_activation<false, kCompactActivations>(
        a.activation, [&](auto act) { output_rows<1, 7, 3, false, false>(a, begin, end, act); });
}

}  // namespace tessera::cpu::avx512::direct3
