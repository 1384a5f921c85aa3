// Depthwise convolution (groups = in = out channels) over NHWC rows
// (internal), for small output maps: oneDNN's depthwise kernel costs 60-120
// us per call on MobileNet's 7x7 and 14x14 maps whatever their size
// (bench/RESULTS.md). Both kernels compute per output pixel bias plus kh*kw
// taps of channel vectors, accumulated in float32 in (ky, kx) order, then
// the fused activation. The portable one (depthwise_impl.h) is a direct
// loop per pixel; the AVX-512 one (depthwise_avx512.cc) stages zero-padded
// channel-blocked input rows and keeps eight pixels' accumulators in
// registers. On 28x28 and larger maps oneDNN's is still faster, so conv2d
// uses these up to 14x14 outputs, float32; the program picks one at compile
// time.
#pragma once

#include "float_math.h"
#include "tessera/device/program.h"
#include "tessera/numerics/data_type.h"
#include "tessera/tensor/access.h"

namespace tessera::cpu {

struct DepthwiseArgs {
  TensorAccess src, dst;
  const float* weights;  // (kh * kw, C) float32, rounded as the weights dtype asks
  const float* bias;     // (C) float32
  DataType src_type, dst_type;
  FloatMath math;
  UnaryWithParam activation;
  uint32_t n, h, w, c, oh, ow, kh, kw, sh, sw, dh, dw, pad_t, pad_l;
};

// One task = one output row (image, oy).
namespace generic {
Status depthwise_kernel(const void* args, uint32_t begin, uint32_t end);
}
namespace avx512 {
Status depthwise_kernel(const void* args, uint32_t begin, uint32_t end);
}

}  // namespace tessera::cpu
