#include <algorithm>

#include "depthwise_kernels.h"
#include "tessera/numerics/convert.h"

namespace tessera::cpu::generic {
#include "depthwise_impl.h"
}  // namespace tessera::cpu::generic
