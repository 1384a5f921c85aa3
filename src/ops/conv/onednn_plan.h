// oneDNN's convolutions as Tessera runs them (internal to src/ops/conv): a
// ConvPlan of shards, each with its own single-threaded primitive, compiled
// once per problem and memory configs (onednn_plan.cc), run by the device's
// workers (onednn_run.cc).
#pragma once

#include <dnnl.hpp>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "../onednn_util.h"
#include "launch.h"
#include "tessera/device/program.h"

namespace tessera::conv {

using dnnl::memory;

template <class F>
Status guard(std::string_view what, F f) {
  return onednn::guard("conv2d", what, f);
}

// One shard of the output rows of every image: its own single-threaded
// oneDNN primitive (with the halo rows it reads and the padding it owns),
// run by one worker thread. Shards own their memory objects, scratchpad and
// staging buffers, so they run in parallel without sharing anything; two
// queues launching the same program serialise per shard on `mu`.
struct ConvShard {
  uint32_t out_row0 = 0, out_rows = 0;  // output rows of each image
  // Output channels [oc0, oc0 + ocs) (all of them unless the plan splits
  // channels); their packed weights start `weights_offset` bytes in.
  uint32_t oc0 = 0, ocs = 0;
  uint64_t weights_offset = 0;
  // Images: [n0, n0 + count), `mb` per primitive call (mb > 1 only for
  // whole-image shards, which cover every row).
  uint32_t n0 = 0, count = 1, mb = 1;
  uint32_t in_row0 = 0, in_rows = 0;    // input rows it reads, halo included
  int64_t pad_top = 0, pad_bottom = 0;  // its own padding (a transposed conv's may be negative)
  size_t primitive = 0;                 // index into ConvPlan::prims
  // ConvPlan::chunked: each image's output pixels run in calls of `chunk`
  // pixels (primitive), the last one `tail` pixels (tail_primitive, its own
  // memory objects).
  uint32_t chunk = 0, tail = 0;
  size_t tail_primitive = 0;
  memory tail_src_mem, tail_dst_mem, tail_scratch_mem;
  dnnl::stream stream;
  memory src_mem, dst_mem, weights_mem, bias_mem, scratch_mem;
  std::shared_ptr<std::byte[]> scratch, src_stage, dst_stage, res_stage;
  // Winograd: the rows reordered into and out of the kernel's blocked layout.
  memory wino_src_mem, wino_dst_mem;
  dnnl::reorder to_wino, from_wino;
  std::shared_ptr<std::byte[]> wino_src, wino_dst;
  std::mutex mu;
};

// Everything compiled for one conv problem.
struct ConvPlan {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  // An attempt needed an activation before the fused residual that oneDNN's
  // chain lacks and Tessera's pass did not take (compile_onednn then says
  // UNIMPLEMENTED, and conv2d adds the residual separately).
  bool residual_chain_missing = false;
  std::vector<dnnl::primitive_desc> pds;  // convolution or deconvolution
  std::vector<dnnl::primitive> prims;
  std::vector<std::unique_ptr<ConvShard>> shards;
  // How the prepared weights are packed: one slice of output channels per
  // layout, `offset` bytes in. One slice in the whole problem's layout unless
  // shards own output channels; then each shard's slice is in the layout its
  // kernel picked. The choice depends only on the weights' key and the
  // device's thread count (see splits_channels), so one prepared tensor
  // serves every program of the problem.
  struct PackedSlice {
    uint32_t oc0, ocs;
    memory::desc desc;
    uint64_t offset;
  };
  std::vector<PackedSlice> packing;
  uint64_t packed_bytes = 0;
  bool split_channels = false;  // shards own output channels: dst (and residual) staged per shard
  bool winograd = false;        // convolution_winograd between blocked staging (ConvShard::wino_*)
  // Rows not dense in the tensor, or of another dtype than the kernel's
  // (bfloat16 rows on a CPU without oneDNN bfloat16 kernels): copied or
  // converted through per-shard buffers.
  bool stage_src = false, stage_dst = false;
  bool tile_src = false;  // the input is tiles: the shard untilizes the rows it reads
  bool concat = false;    // launched with ConcatConvArgs: the shards gather their parts
  DataType src_type = DataType::FLOAT32, in_type = DataType::FLOAT32;  // the input's dtype, the kernel's
  uint32_t cin = 0;
  bool tile_dst = false;                   // the output is tiles: the shard tilizes its rows
  DataType tile_type = DataType::FLOAT32;  // the output tiles' dtype
  // The tiles are packed from bfloat16 rows, but the kernel wrote float32
  // (no oneDNN bfloat16 kernels): round the rows first, as the bfloat16 kernel would.
  bool round_to_bf16 = false;
  uint32_t cout = 0;
  std::optional<UnaryWithParam> post_activation;  // when oneDNN lacks it (onednn::append_activation)
  // The residual's activation oneDNN lacks, after its sum post-op: applied
  // after the primitive (post_activation is then empty: the front end fuses
  // a residual only after activations oneDNN runs).
  std::optional<UnaryWithParam> post_res_activation;
  // A residual added by the kernel, then `res_activation`: the shard copies
  // its residual rows into its output rows and oneDNN adds them as a sum
  // post-op. (oneDNN 2.6 has its fastest kernels, brgconv, for sum but not
  // for binary post-ops: with a binary add ResNet's strided 1x1 downsample
  // took 4.3 ms in jit:avx512_core, against 0.5 ms in brgconv_1x1.)
  bool residual = false, stage_res = false;
  // Pixel chunks (run_chunks, see runs_in_chunks): a 1x1 conv without
  // padding runs each shard's output pixels in calls of a few hundred,
  // reading input pixels in place (stride 1) or gathered into `src_stage`
  // (strided: oneDNN's own strided 1x1 was slower). With `own_residual`
  // each chunk's output goes to `dst_stage`, which stays in the cache, and
  // one fused pass writes res_activation(stage + residual) to the output
  // (oneDNN's sum post-op reads the residual from DRAM at half the pace).
  // Whole shards take own_residual too, after a SiLU (silu_before_own_residual).
  bool chunked = false, own_residual = false;
  uint32_t stride_h = 1, stride_w = 1;
  // Problem::cout_padded: chunks compute this many output channels into
  // `dst_stage`, and keep the first `cout` of each pixel.
  uint32_t cout_padded = 0;
  UnaryWithParam res_activation;
  DataType res_type = DataType::FLOAT32;
  DataType out_type = DataType::FLOAT32;  // the kernel's output rows (tile_type or dst_type: the tensor's)
  DataType dst_type = DataType::FLOAT32;
  uint32_t batch = 1, in_h = 0, in_w = 0, out_h = 0, out_w = 0;
};

struct ConvArgs {
  TensorAccess src, dst, res;
  const std::byte* weights;
  const std::byte* bias;
  ConvPlan* plan;
};

// conv2d_concat's launches (source_rows gathers the parts instead of `src`):
// launched as ConcatConvArgs by programs compiled for them (ConvPlan::concat),
// so that other launches (and traces) do not carry the parts.
struct ConcatConvArgs : ConvArgs {
  ConcatParts cat;
};

// The program's kernel: runs shards [begin, end) of the ConvArgs' plan.
Status onednn_conv_kernel(const void* args, uint32_t begin, uint32_t end);

// The plan and program for `pr` reading `src`, writing `dst` (and adding
// `res`): the first of the splits (images, channels, rows, whole) whose
// shards all get a oneDNN kernel better than its reference one.
StatusOr<Program> compile_onednn(const Device& device, const Problem& pr, const TensorAccess& src,
                                 const TensorAccess& dst, const TensorAccess* res);

// The problem oneDNN computes: the output channels padded where they are
// (Problem::cout_padded).
Geometry kernel_geometry(const Problem& pr);
// The user's weights: (out, in/g, kh, kw) for a convolution, (in, out/g, kh,
// kw) for a transposed one, as PyTorch stores them.
memory::desc weights_user_desc(const Geometry& g, DataType t);

}  // namespace tessera::conv
