// The AVX-512 depthwise direct path's 5-wide kernels (depthwise_direct3.h),
// compiled apart from depthwise_avx512.cc so that the two build in parallel.
#include "depthwise_direct3.h"

namespace tessera::cpu::avx512::direct3 {

namespace {
template <int S>
void run_five_stride(const DepthwiseArgs& a, uint32_t begin, uint32_t end) {
  if (a.dst_type == DataType::BFLOAT16)
    with_activation<true, kCompactActivations>(a.activation,
                                               [&](auto act) { output_rows<S, 8, 5, true, true>(a, begin, end, act); });
  else
    with_activation<false, kCompactActivations>(
        a.activation, [&](auto act) { output_rows<S, 8, 5, false, false>(a, begin, end, act); });
}
}  // namespace

void run_five(const DepthwiseArgs& a, uint32_t begin, uint32_t end) {
  if (a.sw == 1)
    run_five_stride<1>(a, begin, end);
  else
    run_five_stride<2>(a, begin, end);
}

}  // namespace tessera::cpu::avx512::direct3
