// Direct convolution over float32 NHWC rows for CPUs with AVX2 but not
// AVX-512 (internal). oneDNN 2.6's jit:avx2 kernel runs ResNet-50's 3x3
// convs at 47-68% of the FP32 peak inside the model (bench/RESULTS.md,
// fourth run); this one keeps 6 output pixels x 16 output channels in 12
// accumulators and broadcasts each input value straight from the input
// rows, with the weights packed per 16-channel block.
//
// One task = one band of output rows of one image, for one group of
// 16-channel output blocks: the task lists, for each output pixel of its
// band and each tap, the input row it reads (a shared row of zeros where
// the tap falls in the padding), then for each of its blocks computes the
// band's pixels in blocks of six that may span output rows. Where
// cin_block < cin (small maps, see conv2d.cc) each block runs chunk by
// chunk of input channels (whose weights, at most kDirectChunkBytes, stay
// in L1), keeping partial sums in a per-worker buffer between chunks.
// Accumulation: bias, then per chunk taps in (ky, kx, cin) order, in
// float32 FMAs; then the activation, and with a residual its add and
// activation.
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
  // Rows with a uniform row stride: float32, or bfloat16, which each task
  // widens to float32 for the input rows its band reads (the Winograd kernel
  // as it pads them), and which outputs and residuals are rounded to
  // (nearest even) and read from as they are stored.
  TensorAccess src, dst;
  bool src_bf16, dst_bf16, res_bf16;
  // Per 16-channel output block, per chunk of cin_block input channels (the
  // last shorter): [kh][kw][chunk channels][16] float32, zeros past cout.
  // Bias: div_up(cout, 16) * 16 float32.
  const float* weights;
  const float* bias;
  FloatMath math;
  UnaryWithParam activation;
  // A fused skip connection (conv2d_with_residual): with res.base set,
  // y = res_activation(activation(conv + bias) + residual), the residual
  // rows shaped like the output (and possibly the output's own buffer: each
  // pixel is read before it is written).
  TensorAccess res;
  UnaryWithParam res_activation;
  uint32_t cin_block;  // direct_cin_block(kh, kw, cin), or cin: no chunks
  uint32_t n, h, w, cin, cout, oh, ow, kh, kw, sh, sw, dh, dw, pad_t, pad_l;
  uint32_t bands, band_rows;      // output rows of each image in `bands` bands of band_rows (the last shorter)
  uint32_t groups, group_blocks;  // 16-channel output blocks in `groups` groups of group_blocks
  uint32_t segment_tiles;         // Winograd only: tiles transformed and multiplied at a time
  bool rows_prefetch;             // 3x3 row kernel only: prefetch the next tap's input (see there)
};

// Tasks are (image, band, group), group fastest: n * bands * groups.
namespace avx2 {
Status direct_conv_kernel(const void* args, uint32_t begin, uint32_t end);

// Winograd F(2x2, 3x3) over the same args, for 3x3 stride-1 undilated convs
// (cin_block == cin): each output 2x2 tile is A^T [(G g G^T) . (B^T d B)] A
// over its 4x4 input patch d. Bands count tile rows (band_rows of them), and
// a task walks its band's tiles in segments of segment_tiles: it transforms a
// segment's patches into V[16][tiles][cin], multiplies each of the 16
// positions by the weights (block<> with a 1x1 "kernel"), then transforms
// the products back and adds bias and activation. Weights, per 16-channel
// output block: [16 positions][cin][16] float32, G g G^T.
// 16 multiplies per 4 outputs instead of 36; the transforms add and
// subtract, so results differ from direct float32 by a few ulps of the
// largest partial sums (relative ~1e-6..1e-5).
Status winograd_f2_kernel(const void* args, uint32_t begin, uint32_t end);

// A transposed conv whose kernel equals its stride (no padding, dilation or
// groups): input pixel (y, x) times the weights of tap (ky, kx) is output
// pixel (y * kh + ky, x * kw + kx), so the conv is one 1x1 conv read straight
// from the input rows into kh * kw * cout columns (column n: tap n / cout,
// channel n % cout), run on block<> and scattered. Bands count input rows;
// weights per block of 16 columns: [cin][16] (zeros past the last column);
// bias per column.
Status patch_transpose_kernel(const void* args, uint32_t begin, uint32_t end);
}  // namespace avx2

namespace avx512 {
// The AVX-512 direct kernel's micro tile: pixels by 16-channel blocks.
constexpr uint32_t kDirectTileRows = 6, kDirectTileBlocks = 4;
// A conv without groups over float32 rows (input, output and residual; any
// kernel size, stride, dilation and padding), for AVX-512 CPUs, meant for
// small maps with many weights. Its tasks read the args differently from the
// AVX2 kernel's: the output pixels of the whole batch, n * oh * ow in order,
// come in `bands` bands of band_rows pixels (the last shorter), and a task
// is (band, group), group fastest: bands * groups tasks. Weights as above
// with cin_block == cin ([kh][kw][cin][16] per 16-channel block). A task
// lists each of its pixels' input rows per tap (zeros in the padding), then
// computes up to six pixels by four blocks at a time (24 accumulators; each
// weight load feeds six FMAs, each broadcast input value four; a band's
// tiles as even as whole tiles allow) and writes its block columns of the
// output rows in place. Where four blocks' weights exceed 256 KB, it runs
// them in chunks of (tap, input channel) steps, all tiles per chunk, with
// the partial sums in a per-worker buffer, and prefetches the next chunk
// while the current one runs. Accumulation: bias, then taps in (ky, kx, cin)
// order, in float32 FMAs (the same order chunked or not); then activation,
// residual and its activation, as the AVX2 kernel.
Status direct_conv_kernel(const void* args, uint32_t begin, uint32_t end);

// 1x1 convs with at most kNarrowMaxCout output channels (a segmentation or
// score head), float32 or bfloat16 rows (widened as read, rounded to
// nearest even as written), stride 1, no padding: each output value is one
// dot product of the pixel's input row with the weight row of its channel,
// over all cin in float32 FMAs (16 lanes, then summed across
// them: an order other than the reference's, so results differ by a few
// ulps of the partial sums), plus the bias; then activation, residual and
// its activation as the direct kernel. Weights: [cout][cin] float32. A task
// is a band of band_rows output pixels of the whole batch. With more output
// channels oneDNN's blocked kernels, padded to 16 (see conv2d.cc), were as
// fast or faster: 32 -> 4 0.43 against 0.40 ms, 24 -> 3 0.48 against 0.34,
// 64 -> 8 0.20 against 0.18 (240x320 and 120x160 maps).
constexpr uint32_t kNarrowMaxCout = 2;

// A transposed conv whose kernel equals its stride, over float32 rows, with
// cout a multiple of 16 and no residual: the direct kernel's tiles over the
// batch's input pixels (bands of band_rows of them, n * h * w in order) and
// kh * kw * cout columns, weights and bias as avx2::patch_transpose_kernel's,
// each tile within one tap's columns and stored to that tap's output
// pixels. oneDNN's batched matmul (M = W, the weights re-read per input row)
// ran the UNet's 30x40x512 -> 60x80x256 upconv at 64% of the FP32 peak.
Status patch_transpose_kernel(const void* args, uint32_t begin, uint32_t end);
Status narrow_conv_kernel(const void* args, uint32_t begin, uint32_t end);

// A 3x3 conv of stride 1, dilation 1 and padding 1 on every side (oh = h,
// ow = w) over float32 rows, without groups or a residual, whose cout is a
// multiple of 32, for AVX-512 CPUs (the layers it runs: see conv2d.cc).
// Output channels come in groups of rows3x3_group_channels(cin, cout): 64
// (four 16-channel blocks, tiles of up to 6 pixels) where cout allows and
// cin is at most 256, else 32 (two blocks, tiles of up to 12: half the
// weight bytes per FMA, and a group's weights, 9 * cin * 32 float32, within
// an L2 of 1 MB up to 512 input channels); group_blocks says which. Tasks are
// (group, image, band of band_rows output rows), band fastest:
// groups * n * bands. A task computes each of its rows in tiles as even as
// whole tiles allow, reading each input value as a broadcast straight from
// the input rows. Weights per group: [ky][kx][cin][group channels] float32;
// bias: cout float32. Accumulation: bias, then taps in (ky, kx, cin) order
// in float32 FMAs, skipping the taps that fall in the padding; then the
// activation. With rows_prefetch the tiles prefetch the next tap's input
// into L1 as they go (for tasks whose rows and weights spill from L2; the
// values are the same either way).
inline uint32_t rows3x3_group_channels(uint32_t cin, uint32_t cout) { return cout % 64 == 0 && cin <= 256 ? 64 : 32; }
Status conv3x3_rows_kernel(const void* args, uint32_t begin, uint32_t end);
}  // namespace avx512

}  // namespace tessera::cpu
