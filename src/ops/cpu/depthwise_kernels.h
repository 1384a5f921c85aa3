// Depthwise convolution (groups = in = out channels) over NHWC rows
// (internal), for small output maps: oneDNN's depthwise kernel costs 60-120
// us per call on MobileNet's 7x7 and 14x14 maps whatever their size
// (bench/RESULTS.md). The AVX-512 kernel (depthwise_avx512.cc) computes per
// output pixel bias plus kh*kw taps of channel vectors, accumulated in
// float32 in (ky, kx) order, then the fused activation: it stages
// zero-padded channel-blocked input rows and keeps eight pixels'
// accumulators in registers; kernels past 7x7 take its portable loop
// (depthwise_impl.h), a direct loop per pixel. On 28x28 and larger maps
// oneDNN's is faster, so conv2d uses it up to 14x14 outputs, float32, with
// the AVX-512 set. The AVX2 kernel (depthwise_avx2.cc) takes float32 or
// bfloat16 rows on every map (conv2d gives it those with bfloat16 in or
// out): per block of six output pixels of a row and 16 channels, it reads
// each tap's input straight from the rows (zeros in the padding) with the
// accumulators in registers, and inside the map applies the activation
// there too (avx2_activation.h) before it stores.
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
namespace avx512 {
Status depthwise_kernel(const void* args, uint32_t begin, uint32_t end);
}
namespace avx2 {
Status depthwise_kernel(const void* args, uint32_t begin, uint32_t end);
}

}  // namespace tessera::cpu
