// Direct convolution over float32 NHWC rows for CPUs with AVX2 but not
// AVX-512 (internal). oneDNN 2.6's jit:avx2 kernel runs ResNet-50's 3x3
// convs at 47-68% of the FP32 peak inside the model (bench/RESULTS.md,
// fourth run); this one keeps 6 output pixels x 16 output channels in 12
// accumulators and broadcasts each input value from zero-padded rows, with
// the weights packed per 16-channel block.
//
// One task = one band of output rows of one image, for one group of
// 16-channel output blocks: the task pads the input rows its band reads
// into a per-worker buffer, then for each of its blocks (whose weights stay
// in the worker's cache) computes every row of the band. Accumulation: bias,
// then taps in (ky, kx, cin) order, in float32 FMAs; then the activation.
#pragma once

#include "float_math.h"
#include "tessera/device/program.h"
#include "tessera/tensor/access.h"

namespace tessera::cpu {

struct DirectConvArgs {
  TensorAccess src, dst;  // float32 rows with a uniform row stride
  // [div_up(cout, 16)][kh][kw][cin][16] float32, zeros past cout; bias
  // div_up(cout, 16) * 16 float32.
  const float* weights;
  const float* bias;
  FloatMath math;
  UnaryWithParam activation;
  uint32_t n, h, w, cin, cout, oh, ow, kh, kw, sh, sw, dh, dw, pad_t, pad_l;
  uint32_t bands, band_rows;      // output rows of each image in `bands` bands of band_rows (the last shorter)
  uint32_t groups, group_blocks;  // 16-channel output blocks in `groups` groups of group_blocks
};

// Tasks are (image, band, group), group fastest: n * bands * groups.
namespace avx2 {
Status direct_conv_kernel(const void* args, uint32_t begin, uint32_t end);
}

}  // namespace tessera::cpu
