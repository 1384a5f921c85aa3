// How conv2d spreads over a core grid and what it holds in each core's L1:
// the parallel config (which cores, how the output is sharded), the block
// sizes (act_block_h / act_block_w) and an estimate of the per-core L1 bytes,
// checked before a conv whose output lives in L1 runs.
//
// The original computes in L1: its conv2d statically allocates circular
// buffers (activation block, weight block, partial results, bias) next to the
// L1 buffers it holds (the input after halo, the output shard), and fails
// when they do not fit. Tessera's CPU kernel works from any memory, but a
// configuration written for a device must fail where the device would, with
// the original's messages, so that a model brought up on Tessera runs on the
// device, and `wormhole_b0` reproduces the original's budget. On the native
// CPU descriptor, L1 is a core's private cache, and the same check says
// whether a layer's working set fits it.
//
// The estimate follows the original's blocking (per core, in bytes; tiles
// are 32 rows; bfloat8_b / bfloat4_b cost 1088 / 576 B per 1024 values):
//   rows        = output rows per core (even shards, see below)
//   act_block_h = act_block_h_override if it divides rows into whole tiles,
//                 else the closest smaller divisor; 0 means all rows
//   act_block_w = HEIGHT: round_up(cin * kw, 32); BLOCK: round_up(cin / cores_c
//                 * kw, 32); WIDTH: cin * kh * kw / (cores_c * act_block_w_div)
//   activation CB   act_block_h * act_block_w * input bytes (x2 double buffered)
//   weights CB      act_block_w * out_block_w * weight bytes (x2 double buffered),
//                   one kernel row of weights per block (WIDTH: one block)
//   partials CB     act_block_h * out_block_w * (4 with fp32_dest_acc_en or
//                   packer_l1_acc, else 2)
//   bias CB         32 * out_block_w * 2 when the conv has a bias
//   halo buffer     the input rows a core reads, with their halo and padding,
//                   in bfloat16 (float32 for float32 input)
//   output buffer   rows * out_block_w * output bytes
// where out_block_w = round_up(cout, 32) / cores_c.
//
// Shards are even, as Tessera's sharded tensors require: HEIGHT uses the
// largest core count of the grid that divides the output's tile rows (TILE
// output) or rows (ROW_MAJOR), the original's closest-divisor rule; WIDTH
// splits round_up(cout, 32) in whole tiles; BLOCK uses grid rows for rows and
// grid columns for channels.
#pragma once

#include <optional>

#include "tessera/device/device.h"
#include "tessera/ops/conv2d.h"
#include "tessera/ops/conv_transpose2d.h"

namespace tessera {

// A convolution as its L1 plan sees it: the direct convolution (a transposed
// one is the direct convolution over its stride-dilated input).
struct Conv2dGeometry {
  uint32_t batch = 1, input_height = 0, input_width = 0, in_channels = 0, out_channels = 0;
  uint32_t kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1, groups = 1;
  uint32_t padded_height = 0, padded_width = 0;  // input plus padding (dilated input for transposed)
  uint32_t output_height = 0, output_width = 0;
  bool has_bias = false;
  uint64_t output_rows() const { return uint64_t{batch} * output_height * output_width; }
};
Conv2dGeometry conv2d_geometry(const Conv2dParams& p, bool has_bias);
Conv2dGeometry conv2d_geometry(const ConvTranspose2dParams& p, bool has_bias);

struct Conv2dParallelConfig {
  TensorMemoryLayout shard_layout = TensorMemoryLayout::HEIGHT_SHARDED;
  CoreRangeSet grid;
  uint32_t cores_nhw = 1, cores_c = 1;
  MemoryConfig output_memory_config;  // L1, sharded, even shards of the output
};

// The parallel config of `layout` (HEIGHT / WIDTH / BLOCK_SHARDED) on
// `device_grid`, or on `core_grid` when given (its cores in order).
// INVALID_ARGUMENT when the output cannot be split evenly that way.
StatusOr<Conv2dParallelConfig> determine_conv2d_parallel_config(const Conv2dGeometry& g, TensorMemoryLayout layout,
                                                                Layout output_layout, CoreCoord device_grid,
                                                                const std::optional<CoreRangeSet>& core_grid);

struct Conv2dL1Estimate {
  Conv2dParallelConfig parallel;
  uint32_t act_block_h = 0, act_block_w = 0;  // elements
  uint64_t activation_cb = 0, weights_cb = 0, partials_cb = 0, bias_cb = 0;
  uint64_t halo_buffer = 0, output_buffer = 0;
  uint64_t circular_buffers() const { return activation_cb + weights_cb + partials_cb + bias_cb; }
  uint64_t total() const { return circular_buffers() + halo_buffer + output_buffer; }
  std::string to_string() const;  // "HEIGHT_SHARDED on 64 cores: act_block 480x64, CBs ... B, ..."
};

// INVALID_ARGUMENT for act_block_h_override not a multiple of 32 ("Config
// Error: act_block_h_override must be a multiple of 32 (tile height).") or a
// width split that does not divide the channels.
StatusOr<Conv2dL1Estimate> estimate_conv2d_l1(const Conv2dGeometry& g, const Conv2dParallelConfig& parallel,
                                              const Conv2dConfig& config, DataType input_dtype, DataType output_dtype);

// Picks the layout (HEIGHT, BLOCK or WIDTH sharded, in that order on ties)
// with the smallest per-core L1 estimate, as the original's auto-sharding
// does (PR #17485).
StatusOr<Conv2dL1Estimate> auto_shard_conv2d(const Conv2dGeometry& g, const Conv2dConfig& config, DataType input_dtype,
                                             DataType output_dtype, CoreCoord device_grid);

// RESOURCE_EXHAUSTED with the original's messages when `e` does not fit
// `device`'s per-core L1 next to the L1 it already holds (`freed_bytes` of
// which the conv frees first, e.g. a deallocated input):
//   "Statically allocated circular buffers on core range [(x=0,y=0) -
//    (x=7,y=7)] grow to 1612864 B which is beyond max L1 size of 1499136 B"
//   "Statically allocated circular buffers on core range [...] clash with L1
//    buffers: ... "
Status check_conv2d_l1(const Conv2dL1Estimate& e, const Device& device, uint64_t freed_bytes = 0);

}  // namespace tessera
