// Direct convolution over float32 NHWC rows for CPUs with AVX2 but not
// AVX-512 (internal). oneDNN 2.6's jit:avx2 kernel runs ResNet-50's 3x3
// convs at 47-68% of the FP32 peak inside the model (bench/RESULTS.md,
// fourth run); this one keeps 6 output pixels of a row x 16 output channels
// in 12 accumulators and broadcasts each input value from zero-padded rows,
// with the weights packed per 16-channel block.
//
// One task = one band of output rows of one image, for one group of
// 16-channel output blocks: the task pads the input rows its band reads
// into a per-worker buffer, then for each of its blocks computes every row
// of the band. Where cin_block < cin (small maps, see conv2d.cc) the buffer
// holds chunks of input channels, and each block runs chunk by chunk (whose
// weights, at most kDirectChunkBytes, stay in L1), keeping partial sums in a
// per-worker buffer between chunks. Accumulation: bias, then per chunk taps
// in (ky, kx, cin) order, in float32 FMAs; then the activation.
#pragma once

#include <algorithm>
#include <cstdint>

#include "float_math.h"
#include "tessera/device/program.h"
#include "tessera/tensor/access.h"

namespace tessera::cpu {

// Input channels per chunk: the fewest chunks whose weights for one
// 16-channel block fit in kDirectChunkBytes (the L1 of the CPUs this runs on),
// as equal as multiples of 8 allow.
constexpr uint32_t kDirectChunkBytes = 32 * 1024;
inline uint32_t direct_cin_block(uint32_t kh, uint32_t kw, uint32_t cin) {
  const uint32_t fit = std::max(kDirectChunkBytes / (kh * kw * 16 * uint32_t{sizeof(float)}) / 8 * 8, 8u);
  const uint32_t chunks = (cin + fit - 1) / fit;
  return std::min(cin, ((cin + chunks - 1) / chunks + 7) / 8 * 8);
}

struct DirectConvArgs {
  TensorAccess src, dst;  // float32 rows with a uniform row stride
  // Per 16-channel output block, per chunk of cin_block input channels (the
  // last shorter): [kh][kw][chunk channels][16] float32, zeros past cout.
  // Bias: div_up(cout, 16) * 16 float32.
  const float* weights;
  const float* bias;
  FloatMath math;
  UnaryWithParam activation;
  uint32_t cin_block;  // direct_cin_block(kh, kw, cin), or cin: no chunks
  uint32_t n, h, w, cin, cout, oh, ow, kh, kw, sh, sw, dh, dw, pad_t, pad_l;
  uint32_t bands, band_rows;      // output rows of each image in `bands` bands of band_rows (the last shorter)
  uint32_t groups, group_blocks;  // 16-channel output blocks in `groups` groups of group_blocks
};

// Tasks are (image, band, group), group fastest: n * bands * groups.
namespace avx2 {
Status direct_conv_kernel(const void* args, uint32_t begin, uint32_t end);
}

}  // namespace tessera::cpu
