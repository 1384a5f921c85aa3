#include <algorithm>

#include "depthwise_kernels.h"
#include "tessera/numerics/convert.h"

namespace tessera::cpu::avx512 {
#include "depthwise_impl.h"
}  // namespace tessera::cpu::avx512
