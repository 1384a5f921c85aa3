#include "tessera/ops/conv2d.h"

#include <omp.h>

#include <cstring>
#include <dnnl.hpp>
#include <map>
#include <mutex>
#include <optional>

#include "conv/problem.h"
#include "conv/select.h"
#include "cpu/depthwise_kernels.h"
#include "cpu/direct_conv_kernels.h"
#include "cpu/float_math.h"
#include "onednn_util.h"
#include "op_common.h"
#include "tessera/base/aligned.h"
#include "tessera/base/cpu_features.h"
#include "tessera/numerics/bfloat16.h"
#include "tessera/numerics/convert.h"
#include "tessera/ops/conv2d_l1.h"
#include "tessera/ops/conv_transpose2d.h"
#include "tessera/ops/data_movement.h"
#include "tessera/ops/eltwise.h"
#include "tessera/ops/manipulation.h"
#include "tessera/ops/matmul.h"

namespace tessera {

namespace {

using conv::ConvAlgorithm;
using conv::Geometry;
using conv::is_plain_silu;
using conv::is_row_dtype;
using conv::on_amx;
using conv::patch_shape;
using conv::Problem;
using dnnl::memory;
using onednn::dense_row_stride;
using onednn::dnnl_type;
using onednn::gather_rows;
using onednn::scatter_rows;

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
  std::optional<UnaryWithParam> post_activation;  // when oneDNN lacks it
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

// conv2d_concat's inputs: the conv reads their channel concatenation, which
// each shard gathers as it stages its rows (source_rows) instead of `src`.
// Launched as ConcatConvArgs by programs compiled for them (ConvPlan::concat),
// so that other launches (and traces) do not carry them.
constexpr uint32_t kMaxConcatParts = 4;
struct ConcatParts {
  TensorAccess part[kMaxConcatParts];
  uint32_t cols[kMaxConcatParts] = {};
  uint32_t count = 0;
};
struct ConcatConvArgs : ConvArgs {
  ConcatParts cat;
};

// Runs primitive `prim` of the shard on its memory objects (pointed at the
// rows by the caller).
Status execute(const ConvArgs& a, ConvShard& sh, size_t prim, memory& src_mem, memory& dst_mem,
               const memory& scratch_mem) {
  const ConvPlan& plan = *a.plan;
  return guard("running the convolution", [&] {
    if (plan.winograd) sh.to_wino.execute(sh.stream, src_mem, sh.wino_src_mem);
    const memory& conv_src = plan.winograd ? sh.wino_src_mem : src_mem;
    const memory& conv_dst = plan.winograd ? sh.wino_dst_mem : dst_mem;
    sh.weights_mem.set_data_handle(const_cast<std::byte*>(a.weights) + sh.weights_offset);
    sh.bias_mem.set_data_handle(const_cast<std::byte*>(a.bias) + uint64_t{sh.oc0} * sizeof(float));
    dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, conv_src.get()},
                              {DNNL_ARG_WEIGHTS, sh.weights_mem.get()},
                              {DNNL_ARG_BIAS, sh.bias_mem.get()},
                              {DNNL_ARG_DST, conv_dst.get()},
                              {DNNL_ARG_SCRATCHPAD, scratch_mem.get()}};
    dnnl::error::wrap_c_api(dnnl_primitive_execute(plan.prims[prim].get(), sh.stream.get(), 5, args), "execute");
    if (plan.winograd) sh.from_wino.execute(sh.stream, sh.wino_dst_mem, dst_mem);
    sh.stream.wait();
  });
}

// Input pixels [s0, s1) as the kernel reads them: in place, or untilized or
// converted into the shard's buffer.
std::byte* source_rows(const ConvArgs& a, ConvShard& sh, uint64_t s0, uint64_t s1) {
  const ConvPlan& plan = *a.plan;
  if (plan.tile_src) {
    onednn::tiles_to_rows(a.src, plan.src_type, s0, s1, plan.cin, sh.src_stage.get(), plan.in_type);
  } else if (plan.concat) {
    const ConcatParts& cat = static_cast<const ConcatConvArgs&>(a).cat;
    const uint64_t es = element_size(plan.in_type);
    for (uint32_t i = 0, c0 = 0; i < cat.count; c0 += cat.cols[i++])
      gather_rows(cat.part[i], plan.src_type, s0, s1, 0, cat.cols[i], sh.src_stage.get() + c0 * es, plan.in_type,
                  plan.cin);
  } else if (plan.stage_src) {
    gather_rows(a.src, plan.src_type, s0, s1, 0, plan.cin, sh.src_stage.get(), plan.in_type);
  } else {
    return a.src.base + s0 * a.src.cols * a.src.unit_bytes;
  }
  return sh.src_stage.get();
}

// ConvPlan::cout_padded: output pixels [p, p + pixels), computed with
// cout_padded channels into `dst_stage`, keep their first `cout` channels
// (compacted in place), then get the activation oneDNN lacked, the residual
// and its activation, and go to the output's rows or tiles.
void keep_channels(const ConvArgs& a, ConvShard& sh, uint64_t p, uint64_t pixels) {
  const ConvPlan& plan = *a.plan;
  const cpu::FloatMath& math = cpu::select_float_math();
  auto* rows = reinterpret_cast<float*>(sh.dst_stage.get());
  const uint64_t c = plan.cout, n = pixels * c;
  for (uint64_t i = 1; i < pixels; ++i) std::memmove(rows + i * c, rows + i * plan.cout_padded, c * sizeof(float));
  if (plan.post_activation)
    onednn::apply_activation_in_place(*plan.post_activation, DataType::FLOAT32, sh.dst_stage.get(), n);
  const bool dense_out = !plan.tile_dst && !plan.stage_dst;
  std::byte* out = dense_out ? a.dst.base + p * c * sizeof(float) : sh.dst_stage.get();
  const cpu::FusedOperand kept{rows, false};
  if (plan.residual) {
    std::byte* res = a.res.base + p * c * sizeof(float);
    if (plan.stage_res) {
      res = sh.res_stage.get();
      gather_rows(a.res, plan.res_type, p, p + pixels, 0, plan.cout, res, DataType::FLOAT32);
    }
    const cpu::FusedOperand r{res, false};
    math.fused(kept, &r, {out, false}, BinaryOpType::ADD, plan.res_activation, n);
  } else if (dense_out) {
    std::memcpy(out, rows, n * sizeof(float));
  }
  if (plan.tile_dst) {
    onednn::rows_to_tiles(a.dst, plan.tile_type, sh.dst_stage.get(), DataType::FLOAT32, p, p + pixels, plan.cout,
                          uint64_t{plan.batch} * plan.out_h * plan.out_w);
  } else if (plan.stage_dst) {
    scatter_rows(a.dst, plan.dst_type, p, p + pixels, 0, plan.cout, sh.dst_stage.get(), DataType::FLOAT32);
  }
}

// ConvPlan::chunked: a 1x1 conv without padding over dense float32 rows,
// in runs of output pixels of one image.
Status run_chunks(const ConvArgs& a, ConvShard& sh) {
  const ConvPlan& plan = *a.plan;
  const cpu::FloatMath& math = cpu::select_float_math();
  const uint64_t out_row = uint64_t{plan.cout} * sizeof(float), in_row = uint64_t{plan.cin} * sizeof(float);
  const bool strided = plan.stride_h > 1 || plan.stride_w > 1;
  std::byte* stage = sh.dst_stage.get();
  for (uint32_t n = sh.n0; n < sh.n0 + sh.count; ++n) {
    const uint64_t image = uint64_t{n} * plan.out_h * plan.out_w;
    const uint64_t first = image + uint64_t{sh.out_row0} * plan.out_w, end = first + uint64_t{sh.out_rows} * plan.out_w;
    for (uint64_t p = first; p < end; p += sh.chunk) {
      const bool tail = end - p < sh.chunk;
      const uint64_t pixels = tail ? sh.tail : sh.chunk;
      std::byte* src = nullptr;
      if (strided) {  // input pixel (oy * stride_h, ox * stride_w) of output pixel (oy, ox)
        src = sh.src_stage.get();
        for (uint64_t q = p - image, i = 0; i < pixels; ++q, ++i) {
          const uint64_t oy = q / plan.out_w, ox = q % plan.out_w;
          const uint64_t ip = (uint64_t{n} * plan.in_h + oy * plan.stride_h) * plan.in_w + ox * plan.stride_w;
          std::memcpy(src + i * in_row, a.src.base + ip * in_row, in_row);
        }
      } else {
        src = source_rows(a, sh, p, p + pixels);
      }
      std::byte* dst = plan.own_residual || plan.cout_padded ? stage : a.dst.base + p * out_row;
      memory& src_mem = tail ? sh.tail_src_mem : sh.src_mem;
      memory& dst_mem = tail ? sh.tail_dst_mem : sh.dst_mem;
      src_mem.set_data_handle(src);
      dst_mem.set_data_handle(dst);
      TS_RETURN_IF_ERROR(execute(a, sh, tail ? sh.tail_primitive : sh.primitive, src_mem, dst_mem,
                                 tail ? sh.tail_scratch_mem : sh.scratch_mem));
      if (plan.cout_padded) {
        keep_channels(a, sh, p, pixels);
        continue;
      }
      if (plan.post_activation)
        onednn::apply_activation_in_place(*plan.post_activation, plan.out_type, dst, pixels * plan.cout);
      if (plan.own_residual) {
        const cpu::FusedOperand conv{stage, false}, res{a.res.base + p * out_row, false},
            out{a.dst.base + p * out_row, false};
        math.fused(conv, &res, out, BinaryOpType::ADD, plan.res_activation, pixels * plan.cout);
      }
    }
  }
  return ok_status();
}

Status run_shard(const ConvArgs& a, ConvShard& sh) {
  const ConvPlan& plan = *a.plan;
  std::lock_guard<std::mutex> lock(sh.mu);
  omp_set_num_threads(1);  // this worker is the shard's only thread
  if (plan.chunked) return run_chunks(a, sh);
  const uint64_t dst_row = uint64_t{a.dst.cols} * a.dst.unit_bytes;
  for (uint32_t n = sh.n0; n < sh.n0 + sh.count; n += sh.mb) {
    const uint64_t s0 = (uint64_t{n} * plan.in_h + sh.in_row0) * plan.in_w,
                   s1 = s0 + uint64_t{sh.mb} * sh.in_rows * plan.in_w;
    const uint64_t d0 = (uint64_t{n} * plan.out_h + sh.out_row0) * plan.out_w,
                   d1 = d0 + uint64_t{sh.mb} * sh.out_rows * plan.out_w;
    std::byte* src = source_rows(a, sh, s0, s1);
    std::byte* dst =
        plan.stage_dst || plan.split_channels || plan.own_residual ? sh.dst_stage.get() : a.dst.base + d0 * dst_row;
    if (plan.residual && !plan.own_residual) {
      if (plan.split_channels || plan.stage_res) {
        gather_rows(a.res, plan.res_type, d0, d1, sh.oc0, sh.ocs, dst, plan.out_type);
      } else if (const std::byte* res = a.res.base + d0 * dst_row; res != dst) {
        std::memcpy(dst, res, (d1 - d0) * dst_row);
      }
    }
    sh.src_mem.set_data_handle(src);
    sh.dst_mem.set_data_handle(dst);
    TS_RETURN_IF_ERROR(execute(a, sh, sh.primitive, sh.src_mem, sh.dst_mem, sh.scratch_mem));
    if (plan.post_activation)
      onednn::apply_activation_in_place(*plan.post_activation, plan.out_type, dst, (d1 - d0) * sh.ocs);
    if (plan.own_residual) {  // see silu_before_own_residual
      const bool res_bf16 = plan.res_type == DataType::BFLOAT16, out_bf16 = plan.dst_type == DataType::BFLOAT16;
      const cpu::FusedOperand conv{dst, false}, res{a.res.base + d0 * plan.cout * (res_bf16 ? 2 : 4), res_bf16},
          out{a.dst.base + d0 * dst_row, out_bf16};
      cpu::select_float_math().fused(conv, &res, out, BinaryOpType::ADD, plan.res_activation, (d1 - d0) * plan.cout);
    } else if (plan.tile_dst) {
      if (plan.round_to_bf16) {
        auto* f = reinterpret_cast<float*>(dst);
        for (uint64_t i = 0, n = (d1 - d0) * plan.cout; i < n; ++i) f[i] = round_to_bfloat16(f[i]);
      }
      onednn::rows_to_tiles(a.dst, plan.tile_type, dst, plan.out_type, d0, d1, plan.cout,
                            uint64_t{plan.batch} * plan.out_h * plan.out_w);
    } else if (plan.split_channels || plan.stage_dst) {
      scatter_rows(a.dst, plan.dst_type, d0, d1, sh.oc0, sh.ocs, dst, plan.out_type);
    }
  }
  return ok_status();
}

Status conv_kernel(const void* raw, uint32_t begin, uint32_t end) {
  const auto& a = *static_cast<const ConvArgs*>(raw);
  for (uint32_t t = begin; t < end; ++t) TS_RETURN_IF_ERROR(run_shard(a, *a.plan->shards[t]));
  return ok_status();
}

Geometry geometry(const Conv2dParams& p) {
  return {false,          p.batch_size,     p.input_height,   p.input_width,     p.in_channels,
          p.out_channels, p.kernel_size[0], p.kernel_size[1], p.stride[0],       p.stride[1],
          p.dilation[0],  p.dilation[1],    p.groups,         p.output_height(), p.output_width(),
          p.padding[0],   p.padding[1],     p.padding[2],     p.padding[3],      p.activation,
          p.descriptor()};
}

// oneDNN sizes a deconvolution's output as (in - 1) * s - pad_l - pad_r +
// d * (k - 1) + 1, so output padding shrinks the right padding.
Geometry geometry(const ConvTranspose2dParams& p) {
  return {true,
          p.batch_size,
          p.input_height,
          p.input_width,
          p.in_channels,
          p.out_channels,
          p.kernel_size[0],
          p.kernel_size[1],
          p.stride[0],
          p.stride[1],
          p.dilation[0],
          p.dilation[1],
          p.groups,
          p.output_height(),
          p.output_width(),
          p.padding[0],
          int64_t{p.padding[0]} - p.output_padding[0],
          p.padding[1],
          int64_t{p.padding[1]} - p.output_padding[1],
          p.activation,
          p.descriptor()};
}

// Float32 convs at math fidelity LoFi on CPUs with AMX compute on bfloat16
// operands (rounded to nearest even) with float32 accumulation and float32
// output rows: oneDNN's AMX kernels, the input rows converted as each shard
// reads them. The original's LoFi multiplies 5-bit by 7-bit significands
// (one phase of its matrix engine: ../shared/reference/pybuda-predictor-smi.md);
// bfloat16's 8 by 8 bits are at least as exact, as compute_config.h promises
// for every fidelity. HiFi2 and HiFi3 keep float32 operands (and Winograd,
// see allows_winograd), HiFi4 is exact. Transposed convs only where their
// kernel is their stride (patch_shape): they run as an AMX 1x1 conv and a
// permute (amx_patch_fits; the 1x1 conv lowers in turn) or as
// the batched matmul (launch_patches), which lowers at LoFi as well
// (matmul.h). Not grouped convs (their bfloat16 paths read
// bfloat16 rows), nor fewer than 16 output channels (the narrow kernel's
// heads, bound by reading their input), nor fewer than 16 input channels
// with fewer than 64 products per output: the UNet's RGB stem (3x3, 3 -> 32,
// 480x640) took 7.7 ms on oneDNN's AMX jit kernel against 3.7 in float32.
// Larger RGB stems gain: ResNet-50's 7x7 0.86-1.43 -> 0.21-0.43 ms, YOLO's
// 6x6 2.87-4.18 -> 2.27-2.42 ms (launches in the model, alternated builds).
bool lowers_to_bf16(const Geometry& g, DataType input, const Conv2dConfig& config) {
  return input == DataType::FLOAT32 && onednn::lofi_computes_in_bf16(config.compute_config.math_fidelity) &&
         (!g.transposed || patch_shape(g)) && g.groups == 1 && g.cout >= 16 &&
         (g.cin >= 16 || uint64_t{g.kh} * g.kw * g.cin >= 64);
}

// The part of a prepared-weights key naming the rows the kernel writes
// ("->f32:"): packed weights serve only kernels writing those rows.
std::string weights_key_rows(DataType dst) { return fmt::format("->{}:", short_dtype_name(dst)); }

// `whole`: the input's spec when `input` is only the first of the tensors
// whose channel concatenation the conv reads (conv2d_concat); its device.
template <class Params>
StatusOr<Problem> make_problem(const Tensor& input_tensor, const Params& p, const Conv2dConfig& config,
                               const Conv2dResidual* residual = nullptr, const TensorSpec* whole = nullptr,
                               conv::ConvSelection* selection = nullptr) {
  const Geometry g = geometry(p);
  const std::string_view op = g.transposed ? "conv_transpose2d" : "conv2d";
  TS_RETURN_IF_ERROR(p.validate());
  TS_RETURN_IF_ERROR(ops::require_device_tensor(input_tensor, op));
  const TensorSpec& input = whole ? *whole : input_tensor.spec();
  Device& device = *input_tensor.device();
  TS_RETURN_IF_ERROR(p.check_input_shape(input.shape.dims()));
  // Rows of float32 / bfloat16, or tiles of any float dtype (the kernel
  // untilizes the rows each shard reads).
  if (!is_floating(input.dtype) || (input.layout != Layout::TILE && is_block_float(input.dtype)))
    return unimplemented_error("{}: expected float32 or bfloat16 rows or float tiles, found {} {}", op,
                               data_type_name(input.dtype), layout_name(input.layout));
  // Tiles are read as (1, 1, N*H*W, C): an (N, H, W, C) tensor's tiles pad
  // each (n, y) slice of W rows to whole tiles, which are other rows.
  auto flat_tiles = [](const TensorSpec& t) {
    const auto& d = t.shape.dims();
    uint64_t outer = 1;
    for (size_t i = 0; i + 2 < d.size(); ++i) outer *= d[i];
    return t.layout != Layout::TILE || outer == 1 || d[d.size() - 2] % kTileHeight == 0;  // outer > 1: rank > 2
  };
  const TensorSpec res_spec = residual ? residual->tensor.spec() : TensorSpec{};
  for (const TensorSpec* t : {&input, residual ? &res_spec : nullptr})
    if (t && !flat_tiles(*t))
      return invalid_argument_error(
          "{}: expected tiles of (1, 1, N*H*W, C) rows or a width that is a multiple of {}, found tiles of {} (each "
          "row of {} pixels is padded to whole tiles); reshape the rows to (1, 1, N*H*W, C) before tilizing",
          op, kTileHeight, t->shape.to_string(), t->shape[-2]);
  const DataType out = config.dtype.value_or(input.dtype);
  const bool tiled = config.output_layout == Layout::TILE;  // the kernel tilizes its own rows
  if (!is_floating(out) || (!tiled && is_block_float(out)))
    return unimplemented_error("{}: output dtype must be float32 or bfloat16 (or block-float tiles), found {}", op,
                               data_type_name(out));
  Problem pr;
  pr.g = g;
  pr.input = input;
  // (N, H, W, C) and (1, 1, N*H*W, C) are the same rows: one program, one key.
  pr.input.shape = Shape{1, 1, g.n * g.h * g.w, g.cin};
  pr.output = TensorSpec{Shape{1, 1, g.n * g.oh * g.ow, g.cout}, out, config.output_layout,
                         config.output_memory_config.value_or(input.memory_config)};
  pr.compute = input.dtype == DataType::FLOAT32 ? DataType::FLOAT32 : DataType::BFLOAT16;
  const bool lowered = lowers_to_bf16(g, input.dtype, config);
  if (lowered) pr.compute = DataType::BFLOAT16;
  // Block-float tiles are packed from rows of the input's precision.
  pr.kernel = onednn::kernel_type(pr.compute);
  pr.dst_precision = out == DataType::FLOAT32 || (is_block_float(out) && input.dtype == DataType::FLOAT32)
                         ? DataType::FLOAT32
                         : DataType::BFLOAT16;
  // oneDNN 2.6 has no grouped convolution from float32 rows to bfloat16
  // ones, nor one from 3-channel float32 rows ("could not create a primitive
  // descriptor"): float32 convs write float32 rows that the staging rounds.
  pr.dst_dtype = pr.compute == DataType::FLOAT32 ? DataType::FLOAT32 : onednn::kernel_type(pr.dst_precision);
  pr.key = fmt::format("{}:{}->{}:w{}", g.descriptor, pr.input.to_string(), pr.output.to_string(),
                       short_dtype_name(config.weights_dtype));
  pr.weights_key = fmt::format("{}:{}{}w{}", g.descriptor, short_dtype_name(pr.compute), weights_key_rows(pr.dst_dtype),
                               short_dtype_name(config.weights_dtype));
  if (pr.kernel != pr.compute) pr.weights_key += fmt::format(":{}kernel", short_dtype_name(pr.kernel));
  if (lowered) pr.key += ":lofi";  // the same tensors at HiFi4 are another program
  if (whole) {                     // conv2d_concat's launch: its own program (ConcatConvArgs)
    pr.concat = true;
    pr.key += ":cat";
  }
  pr.fidelity = config.compute_config.math_fidelity;
  pr.residual = residual;
  const conv::ConvSelection chosen = conv::select_conv_algorithm(pr, device, /*explain=*/selection != nullptr);
  pr.algorithm = chosen.algorithm;
  if (selection) *selection = chosen;
  // The keys name the algorithm: programs and packed weights serve only it.
  if (pr.winograd()) {
    pr.key += ":wino";
    pr.weights_key += ":wino";
  }
  if (residual) {
    pr.key += fmt::format(":+{}:{}", residual->tensor.spec().to_string(), activation_name(residual->activation));
    pr.weights_key += ":+residual";  // oneDNN may pick another kernel, and packing, with the sum post-op
  }
  std::string suffix;
  switch (pr.algorithm) {
    case ConvAlgorithm::kWinogradAvx2:
    case ConvAlgorithm::kDirectAvx2:
    case ConvAlgorithm::kPatchAvx2:
      suffix = ":direct";
      break;
    case ConvAlgorithm::kNarrowAvx512:
      suffix = ":narrow";
      break;
    case ConvAlgorithm::kDirectAvx512:
    case ConvAlgorithm::kPatchAvx512:
      suffix = ":direct512";
      break;
    case ConvAlgorithm::kRows3x3Avx512:
      suffix = ":rows3x3";
      break;
    case ConvAlgorithm::kAmxPatch1x1:
      suffix = ":amx1x1";
      break;
    case ConvAlgorithm::kOnednnPaddedCout:
      pr.cout_padded = (g.cout + 15) / 16 * 16;
      suffix = fmt::format(":pad{}", pr.cout_padded);
      break;
    case ConvAlgorithm::kOnednnF32Rows:
      // The kernel writes float32 rows, which Tessera's SiLU and fused add
      // round once as they store (silu_before_own_residual).
      pr.dst_dtype = DataType::FLOAT32;
      suffix = ":f32rows";
      break;
    default:
      break;
  }
  pr.key += suffix;
  pr.weights_key += suffix;
  return pr;
}

// The user's weights: (out, in/g, kh, kw) for a convolution, (in, out/g, kh,
// kw) for a transposed one, as PyTorch stores them.
memory::desc weights_user_desc(const Geometry& g, DataType t) {
  auto d = [](uint32_t v) { return static_cast<memory::dim>(v); };
  const auto o = d(g.cout), i = d(g.cin), kh = d(g.kh), kw = d(g.kw), gr = d(g.groups);
  using tag = memory::format_tag;
  if (g.groups == 1) return memory::desc({o, i, kh, kw}, dnnl_type(t), g.transposed ? tag::iohw : tag::oihw);
  return memory::desc({gr, o / gr, i / gr, kh, kw}, dnnl_type(t), g.transposed ? tag::giohw : tag::goihw);
}

// Dense NHWC rows of `mb` image slices: dims (mb, C, h, w).
memory::desc rows_desc(uint32_t mb, uint32_t h, uint32_t w, uint32_t c, DataType t) {
  return memory::desc({static_cast<memory::dim>(mb), static_cast<memory::dim>(c), static_cast<memory::dim>(h),
                       static_cast<memory::dim>(w)},
                      dnnl_type(t), memory::format_tag::nhwc);
}

// Whole images split into `parts` groups: a batch spreads over the threads by
// image, so each primitive call sees whole maps (late layers' 7x7 maps split
// by rows leave GEMMs of 21-28 pixels). A shard calls its primitive on
// `mb` images at a time, as many as keep one call's activations within
// kCallBytes (`image_bytes`: one image's input and output rows): a
// residual's sum post-op rereads the output, and ResNet-50's stage-1 1x1
// conv with its residual ran at 111 GFLOP/s on 4 images per call (12.8 MB of
// output) against 204 on one.
constexpr uint64_t kCallBytes = 8ull << 20;

void split_images(ConvPlan& plan, const Geometry& g, uint32_t parts, uint64_t image_bytes) {
  parts = std::max<uint32_t>(1, std::min(parts, g.n));
  const uint32_t base = g.n / parts, extra = g.n % parts;
  for (uint32_t c = 0, n0 = 0; c < parts; ++c) {
    auto sh = std::make_unique<ConvShard>();
    sh->in_row0 = 0;
    sh->in_rows = g.h;
    sh->pad_top = g.pad_t;
    sh->pad_bottom = g.pad_b;
    sh->out_row0 = 0;
    sh->out_rows = g.oh;
    sh->n0 = n0;
    sh->count = base + (c < extra ? 1 : 0);
    sh->mb = sh->count;  // the largest divisor of the count within the budget (one image at least)
    while (sh->mb > 1 && (sh->count % sh->mb != 0 || sh->mb * image_bytes > kCallBytes)) --sh->mb;
    n0 += sh->count;
    plan.shards.push_back(std::move(sh));
  }
}

// Output rows split into `parts` shards, each with the input rows it reads
// and its own top/bottom padding. Empty when a shard would read no input row
// or (transposed) would need negative top padding: then the caller uses one
// shard.
std::vector<ConvShard*> split_rows(ConvPlan& plan, const Geometry& g, uint32_t parts) {
  parts = std::max<uint32_t>(1, std::min(parts, g.oh));
  const uint32_t base = g.oh / parts, extra = g.oh % parts;
  const int64_t span = int64_t{g.dh} * (g.kh - 1);
  std::vector<ConvShard*> out;
  for (uint32_t c = 0, o0 = 0; c < parts; ++c) {
    const uint32_t rows = base + (c < extra ? 1 : 0);
    auto sh = std::make_unique<ConvShard>();
    if (parts == 1) {  // the whole problem as given
      sh->in_row0 = 0;
      sh->in_rows = g.h;
      sh->pad_top = g.pad_t;
      sh->pad_bottom = g.pad_b;
    } else if (!g.transposed) {
      const int64_t lo = int64_t{o0} * g.sh - g.pad_t, hi = int64_t{o0 + rows - 1} * g.sh - g.pad_t + span + 1;
      const int64_t in0 = std::max<int64_t>(lo, 0);
      int64_t in1 = std::min<int64_t>(hi, g.h);
      // A kernel shorter than its stride (a strided 1x1) leaves the last
      // rows of each stride unread; the shard reads them anyway (negative
      // bottom padding), rows * stride input rows for its output rows, the
      // shape oneDNN's 1x1 kernels take: with 27 rows for 14 outputs at
      // stride 2, oneDNN 2.6 on AVX2 ran ResNet-50's downsample in jit:avx2
      // at 69 GFLOP/s, with 28 in jit_1x1.
      if (span + 1 < g.sh) in1 = std::min<int64_t>(g.h, std::max(in1, lo + int64_t{rows} * g.sh));
      if (in1 <= in0) return {};
      sh->in_row0 = static_cast<uint32_t>(in0);
      sh->in_rows = static_cast<uint32_t>(in1 - in0);
      sh->pad_top = in0 - lo;
      sh->pad_bottom = hi - in1;
    } else {
      // Output row oy gets input rows iy with oy = iy * s - pad + ky * d.
      const int64_t first = int64_t{o0} + g.pad_t - span, last = int64_t{o0} + rows - 1 + g.pad_t;
      const int64_t in0 = std::max<int64_t>(0, first <= 0 ? 0 : (first + g.sh - 1) / g.sh);
      const int64_t in1 = std::min<int64_t>(g.h, last / g.sh + 1);
      if (in1 <= in0) return {};
      sh->in_row0 = static_cast<uint32_t>(in0);
      sh->in_rows = static_cast<uint32_t>(in1 - in0);
      sh->pad_top = int64_t{o0} + g.pad_t - in0 * g.sh;
      sh->pad_bottom = (in1 - in0 - 1) * g.sh - sh->pad_top + span + 1 - rows;
      if (sh->pad_top < 0) return {};
    }
    sh->out_row0 = o0;
    sh->out_rows = rows;
    sh->count = g.n;
    out.push_back(sh.get());
    plan.shards.push_back(std::move(sh));
    o0 += rows;
  }
  return out;
}

// Output channels split into `parts` shards of multiples of 16 channels,
// every shard covering all rows of every image. Empty when there are fewer
// such groups than parts.
std::vector<ConvShard*> split_channels(ConvPlan& plan, const Geometry& g, uint32_t parts) {
  constexpr uint32_t kGroup = 16;
  const uint32_t groups = (g.cout + kGroup - 1) / kGroup;
  if (parts < 2 || groups < parts) return {};
  std::vector<ConvShard*> out;
  for (uint32_t c = 0, g0 = 0; c < parts; ++c) {
    const uint32_t ng = groups / parts + (c < groups % parts ? 1 : 0);
    auto sh = std::make_unique<ConvShard>();
    sh->in_rows = g.h;
    sh->pad_top = g.pad_t;
    sh->pad_bottom = g.pad_b;
    sh->out_rows = g.oh;
    sh->count = g.n;
    sh->oc0 = g0 * kGroup;
    sh->ocs = std::min(g.cout, (g0 + ng) * kGroup) - sh->oc0;
    out.push_back(sh.get());
    plan.shards.push_back(std::move(sh));
    g0 += ng;
  }
  plan.split_channels = true;
  return out;
}

// The primitive descriptor of one shard shape: conv + bias -> activation ->
// (+ residual -> its activation).
dnnl::primitive_desc make_pd(ConvPlan& plan, const Geometry& g, const memory::desc& src_md, const memory::desc& w_md,
                             const memory::desc& b_md, const memory::desc& dst_md, int64_t pad_top,
                             int64_t pad_bottom) {
  auto d = [](int64_t v) { return static_cast<memory::dim>(v); };
  dnnl::post_ops po;
  // SiLU without a residual after it (or with one that Tessera adds on whole
  // shards, silu_before_own_residual) runs as Tessera's vector activation
  // over each shard's output, still in the cache: oneDNN 2.6's swish post-op
  // cost twice Tessera's SiLU (jit:avx2: about 1 ns per element in YOLO's
  // 1x1 convs; AVX-512, 80x80 128 -> 128: 0.321 against 0.273 ms in bfloat16,
  // 0.22 without an activation; YOLO 6% faster in all in bfloat16, 4% in
  // float32). Its sigmoid and tanh post-ops cost about what Tessera's do
  // (0.292 against 0.278 ms and 0.296 against 0.306), so they stay fused.
  const bool own_silu = is_plain_silu(g.activation) && (!plan.residual || (plan.own_residual && !plan.chunked)) &&
                        kernel_isa() != KernelIsa::kScalar;
  if (own_silu || !onednn::append_activation(po, g.activation)) plan.post_activation = g.activation;
  if (plan.residual && !plan.own_residual) {
    po.append_sum(1.f);
    onednn::append_activation(po, plan.res_activation);
  }
  dnnl::primitive_attr attr;
  attr.set_post_ops(po);
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const memory::dims strides{d(g.sh), d(g.sw)}, dil{d(g.dh - 1), d(g.dw - 1)};
  const memory::dims pad_l{d(pad_top), d(g.pad_l)}, pad_r{d(pad_bottom), d(g.pad_r)};
  if (g.transposed) {
    dnnl::deconvolution_forward::desc dd(dnnl::prop_kind::forward_inference, dnnl::algorithm::deconvolution_direct,
                                         src_md, w_md, b_md, dst_md, strides, dil, pad_l, pad_r);
    return dnnl::deconvolution_forward::primitive_desc(dd, attr, plan.engine);
  }
  if (plan.winograd) {  // the kernel's own blocked activations, reordered per shard
    const memory::desc any_src(src_md.dims(), src_md.data_type(), memory::format_tag::any),
        any_dst(dst_md.dims(), dst_md.data_type(), memory::format_tag::any);
    dnnl::convolution_forward::desc wd(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_winograd,
                                       any_src, w_md, b_md, any_dst, strides, dil, pad_l, pad_r);
    return dnnl::convolution_forward::primitive_desc(wd, attr, plan.engine);
  }
  dnnl::convolution_forward::desc cd(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src_md,
                                     w_md, b_md, dst_md, strides, dil, pad_l, pad_r);
  return dnnl::convolution_forward::primitive_desc(cd, attr, plan.engine);
}

// The problem oneDNN computes: the output channels padded where they are
// (Problem::cout_padded).
Geometry kernel_geometry(const Problem& pr) {
  Geometry g = pr.g;
  if (pr.cout_padded) g.cout = pr.cout_padded;
  return g;
}

// The whole problem's primitive with oneDNN's choice of weight layout.
dnnl::primitive_desc whole_problem(ConvPlan& plan, const Problem& pr) {
  const Geometry g = kernel_geometry(pr);
  memory::desc w_md = weights_user_desc(g, pr.kernel);
  w_md = memory::desc(w_md.dims(), dnnl_type(pr.kernel), memory::format_tag::any);
  return make_pd(plan, g, rows_desc(g.n, g.h, g.w, g.cin, pr.kernel), w_md,
                 memory::desc({static_cast<memory::dim>(g.cout)}, memory::data_type::f32, memory::format_tag::x),
                 rows_desc(g.n, g.oh, g.ow, g.cout, pr.dst_dtype), g.pad_t, g.pad_b);
}

// The packed weight layout: the one oneDNN picks for the whole problem, so
// the prepared weights depend only on what their key names (geometry, dtypes,
// a residual or not, Winograd or not), not on how a plan splits the work.
// Except for row shards that run only oneDNN's reference kernel on it (see
// compile's attempts): their own layout, the same on every plan of the key
// on a device (the shards follow from the geometry and the worker count).
memory::desc whole_problem_weights(ConvPlan& plan, const Problem& pr) { return whole_problem(plan, pr).weights_desc(); }

// The weight layout oneDNN picks for the first of the plan's shards.
memory::desc first_shard_weights(ConvPlan& plan, const Problem& pr) {
  const Geometry g = kernel_geometry(pr);
  const ConvShard& sh = *plan.shards.at(0);
  const memory::desc any(weights_user_desc(g, pr.kernel).dims(), dnnl_type(pr.kernel), memory::format_tag::any);
  const memory::desc bias({static_cast<memory::dim>(g.cout)}, memory::data_type::f32, memory::format_tag::x);
  return make_pd(plan, g, rows_desc(sh.mb, sh.in_rows, g.w, g.cin, pr.kernel), any, bias,
                 rows_desc(sh.mb, sh.out_rows, g.ow, g.cout, pr.dst_dtype), sh.pad_top, sh.pad_bottom)
      .weights_desc();
}

// ConvPlan::chunked: a chunk's output (and its input) stays in the L2
// beside the weights: 256 KB of output rows per chunk. ResNet-50's stage-1
// 64->256 1x1 with its residual, batch 8, two threads, buffers from DRAM,
// alternated: oneDNN's sum post-op 3.7-3.9 ms, chunks of 1 to 8 rows
// 2.9-3.1 ms, 14 rows (800 KB) 3.6.
constexpr uint64_t kChunkOutputBytes = 256 * 1024;

// The chunk and tail primitives of every shard (1x1 without padding: a
// chunk is any run of output pixels of one image, read from dense input
// rows, the strided ones once gathered).
void build_chunk_primitives(ConvPlan& plan, const Problem& pr) {
  const Geometry g = kernel_geometry(pr);
  Geometry unit = g;  // the chunk's problem: gathered pixels at stride 1
  unit.sh = unit.sw = 1;
  std::map<uint64_t, std::optional<size_t>> by_pixels;
  const memory::desc b_md({static_cast<memory::dim>(g.cout)}, memory::data_type::f32, memory::format_tag::x);
  // The primitive for chunks of `pixels`, unless only oneDNN's reference
  // kernel takes the packed weights at that size.
  auto prim = [&](uint64_t pixels) -> std::optional<size_t> {
    auto [it, fresh] = by_pixels.try_emplace(pixels);
    if (fresh) {
      const auto rows = [&](uint32_t c, DataType t) { return rows_desc(1, 1, static_cast<uint32_t>(pixels), c, t); };
      dnnl::primitive_desc pd =
          make_pd(plan, unit, rows(g.cin, pr.kernel), plan.packing.at(0).desc, b_md, rows(g.cout, pr.dst_dtype), 0, 0);
      if (!std::string_view(pd.impl_info_str()).starts_with("ref")) {
        it->second = plan.prims.size();
        plan.pds.push_back(pd);
        plan.prims.emplace_back(pd);
      }
    }
    return it->second;
  };
  for (auto& sh : plan.shards) {
    sh->ocs = g.cout;
    const uint64_t pixels = uint64_t{sh->out_rows} * g.ow, row_bytes = uint64_t{g.cout} * sizeof(float);
    // The packed weights are the whole problem's (they depend only on the
    // weights' key), and oneDNN picks its weight blocking by problem size:
    // fewer, larger chunks until its kernel takes them (ResNet-50's
    // 512->1024 downsample wants 64 output channels per block on 64 pixels,
    // 32 as a whole and on 196).
    bool found = false;
    for (uint64_t chunks = std::max<uint64_t>(1, (pixels * row_bytes + kChunkOutputBytes - 1) / kChunkOutputBytes);
         chunks >= 1 && !found; --chunks) {
      const uint64_t chunk = (pixels + chunks - 1) / chunks, tail = pixels - (chunks - 1) * chunk;
      const std::optional<size_t> a = prim(chunk), b = prim(tail);
      if (a && b) {
        found = true;
        sh->chunk = static_cast<uint32_t>(chunk);
        sh->tail = static_cast<uint32_t>(tail);
        sh->primitive = *a;
        sh->tail_primitive = *b;
      }
    }
    if (!found) throw dnnl::error(dnnl_unimplemented, "no pixel chunk runs on the packed weights");
    const auto &pd = plan.pds[sh->primitive], &tail_pd = plan.pds[sh->tail_primitive];
    sh->stream = dnnl::stream(plan.engine);
    sh->scratch = make_aligned_bytes(std::max(pd.scratchpad_desc().get_size(), tail_pd.scratchpad_desc().get_size()));
    sh->src_mem = memory(pd.src_desc(), plan.engine, DNNL_MEMORY_NONE);
    sh->dst_mem = memory(pd.dst_desc(), plan.engine, DNNL_MEMORY_NONE);
    sh->scratch_mem = memory(pd.scratchpad_desc(), plan.engine, sh->scratch.get());
    sh->tail_src_mem = memory(tail_pd.src_desc(), plan.engine, DNNL_MEMORY_NONE);
    sh->tail_dst_mem = memory(tail_pd.dst_desc(), plan.engine, DNNL_MEMORY_NONE);
    sh->tail_scratch_mem = memory(tail_pd.scratchpad_desc(), plan.engine, sh->scratch.get());
    sh->weights_mem = memory(pd.weights_desc(), plan.engine, DNNL_MEMORY_NONE);
    sh->bias_mem = memory(b_md, plan.engine, DNNL_MEMORY_NONE);
    if (plan.stage_src || g.sh > 1 || g.sw > 1)
      sh->src_stage = make_aligned_bytes(uint64_t{sh->chunk} * g.cin * element_size(pr.kernel));
    if (plan.own_residual || plan.cout_padded) sh->dst_stage = make_aligned_bytes(uint64_t{sh->chunk} * row_bytes);
    if (plan.cout_padded && plan.residual && plan.stage_res)
      sh->res_stage = make_aligned_bytes(uint64_t{sh->chunk} * plan.cout * sizeof(float));
  }
}

// Builds one primitive per distinct shard shape. Channel shards and
// Winograd shards (whose weight layout depends on the shard's shape) pick
// their own weight layouts, and `plan.packing` gets one slice per primitive;
// other shards read the one slice already in `plan.packing`.
void build_primitives(ConvPlan& plan, const Problem& pr) {
  const Geometry& g = pr.g;
  const bool own_weights = plan.split_channels || plan.winograd;
  std::map<std::array<int64_t, 7>, size_t> by_shape;
  std::vector<uint64_t> offsets;  // per primitive
  if (plan.chunked) return build_chunk_primitives(plan, pr);
  for (auto& sh : plan.shards) {
    if (sh->ocs == 0) sh->ocs = g.cout;
    const std::array<int64_t, 7> shape{sh->mb,         sh->out_rows, sh->in_rows, sh->pad_top,
                                       sh->pad_bottom, sh->oc0,      sh->ocs};
    auto src_md = rows_desc(sh->mb, sh->in_rows, g.w, g.cin, pr.kernel);
    auto dst_md = rows_desc(sh->mb, sh->out_rows, g.ow, sh->ocs, pr.dst_dtype);
    memory::desc b_md({static_cast<memory::dim>(sh->ocs)}, memory::data_type::f32, memory::format_tag::x);
    memory::desc w_md = own_weights ? memory::desc({static_cast<memory::dim>(sh->ocs), static_cast<memory::dim>(g.cin),
                                                    static_cast<memory::dim>(g.kh), static_cast<memory::dim>(g.kw)},
                                                   dnnl_type(pr.kernel), memory::format_tag::any)
                                    : plan.packing.at(0).desc;
    auto [it, fresh] = by_shape.try_emplace(shape, plan.prims.size());
    if (fresh) {
      plan.pds.push_back(make_pd(plan, g, src_md, w_md, b_md, dst_md, sh->pad_top, sh->pad_bottom));
      plan.prims.emplace_back(plan.pds.back());
      offsets.push_back(plan.packed_bytes);
      if (own_weights) {
        plan.packing.push_back({sh->oc0, sh->ocs, plan.pds.back().weights_desc(), plan.packed_bytes});
        plan.packed_bytes += (plan.pds.back().weights_desc().get_size() + 63) / 64 * 64;
      }
    }
    sh->primitive = it->second;
    const auto& pd = plan.pds[sh->primitive];
    if (own_weights) sh->weights_offset = offsets[sh->primitive];
    sh->stream = dnnl::stream(plan.engine);
    sh->scratch = make_aligned_bytes(pd.scratchpad_desc().get_size());
    sh->src_mem = memory(src_md, plan.engine, DNNL_MEMORY_NONE);
    sh->dst_mem = memory(dst_md, plan.engine, DNNL_MEMORY_NONE);
    sh->weights_mem = memory(pd.weights_desc(), plan.engine, DNNL_MEMORY_NONE);
    sh->bias_mem = memory(b_md, plan.engine, DNNL_MEMORY_NONE);
    sh->scratch_mem = memory(pd.scratchpad_desc(), plan.engine, sh->scratch.get());
    if (plan.winograd) {
      sh->wino_src = make_aligned_bytes(pd.src_desc().get_size());
      sh->wino_dst = make_aligned_bytes(pd.dst_desc().get_size());
      sh->wino_src_mem = memory(pd.src_desc(), plan.engine, sh->wino_src.get());
      sh->wino_dst_mem = memory(pd.dst_desc(), plan.engine, sh->wino_dst.get());
      sh->to_wino = dnnl::reorder(sh->src_mem, sh->wino_src_mem);
      sh->from_wino = dnnl::reorder(sh->wino_dst_mem, sh->dst_mem);
    }
    const uint64_t out_bytes = uint64_t{sh->mb} * sh->out_rows * g.ow * sh->ocs * element_size(pr.dst_dtype);
    if (plan.stage_src)
      sh->src_stage = make_aligned_bytes(uint64_t{sh->mb} * sh->in_rows * g.w * g.cin * element_size(pr.kernel));
    if (plan.stage_dst || plan.split_channels || plan.own_residual) sh->dst_stage = make_aligned_bytes(out_bytes);
  }
}

// Output maps under this many pixels per image run as one shard: splitting
// 7x7 maps into 3- and 4-row shards made oneDNN's brgconv_1x1 take ~180 ms
// per call on MobileNetV2's 320->1280 conv (measured here), against well
// under 1 ms whole.
constexpr uint64_t kMinPixelsToSplit = 64;

// Row shards of oneDNN's kernels: one per worker, and on large maps up to
// kRowShardsPerWorker per worker of at least kMinPixelsPerRowShard output
// pixels each, so that a worker whose vCPU stalls hands shards to the other.
// YOLO batch 1, device-only, three alternated pairs: 151 / 164 / 155 ms ->
// 119 / 150 / 151 ms (its 1x1 convs run on oneDNN's jit_1x1 on AVX2 CPUs).
// A strided stem (fewer than 16 input channels) keeps one shard per worker:
// per-launch medians at batch 1, seven alternated pairs, ResNet-50's 7x7/2
// stem took 0.80-0.90 ms in 8 shards against 0.73-0.77 in 2, YOLO's 6x6/2
// 2.81-3.14 against 2.71-2.93. The UNet's stride-1 3x3 on its 3-channel
// 480x640 input did no better in 2 (2.78-3.24 against 2.84-3.99 ms), and
// keeps its 8.
constexpr uint32_t kRowShardsPerWorker = 4;
constexpr uint64_t kMinPixelsPerRowShard = 1024;
constexpr uint32_t kMinChannelsForRowShards = 16;
uint32_t row_shards(const Geometry& g, uint32_t threads) {
  if (g.cin < kMinChannelsForRowShards && (g.sh > 1 || g.sw > 1)) return threads;
  const uint64_t fit = uint64_t{g.oh} * g.ow / kMinPixelsPerRowShard / threads * threads;
  return static_cast<uint32_t>(std::clamp<uint64_t>(fit, threads, uint64_t{threads} * kRowShardsPerWorker));
}

// Below this many weights (256 KB in float32) every worker keeps all of them
// in its own L2 (1 MB here), so a row split costs no extra weight traffic.
constexpr uint64_t kMinWeightsToSplitChannels = 64 * 1024;

// Whether a conv on a device with `threads` workers splits its output
// channels over them. Each shard then reads the whole input and its slice of
// the weights; a row split reads all the weights and its rows. So channels
// when the weights outweigh an image's input (cout * kh * kw > h * w, the
// late layers with small maps and many channels), the batch is too small to
// split by image, and either the weights are too many to sit in every
// worker's cache or the map too small to split by rows: a channel shard
// writes a column slice of each output row, which oneDNN cannot write in
// place, so it stages its output and copies it out (9.5% of MobileNetV2's
// conv time at batch 1 when its 14x14 pointwise convs split channels; p50
// 4.0-5.5 -> 3.6-4.7 ms with them split by rows, six alternating runs).
// A stride-1 1x1 conv with a residual splits rows wherever the map allows:
// its channel shards also gather their residual columns into the stage
// before oneDNN adds them. ResNet-50 batch 1, per-launch medians, three
// alternated pairs: the 14x14 256->1024 convs with their residual
// 0.30-0.38 -> 0.27-0.34 ms each, the rest unchanged.
// Plain convolutions only.
bool splits_channels(const Conv2dGeometry& g, bool transposed, uint32_t threads, bool residual) {
  const bool many_weights =
      uint64_t{g.in_channels} * g.out_channels * g.kernel_h * g.kernel_w > kMinWeightsToSplitChannels;
  const bool few_rows = uint64_t{g.output_height} * g.output_width < kMinPixelsToSplit;
  const bool pointwise_residual = residual && g.kernel_h == 1 && g.kernel_w == 1 && g.stride_h == 1 && g.stride_w == 1;
  return threads > 1 && g.batch < threads && !transposed && g.groups == 1 && g.out_channels >= 32 * threads &&
         uint64_t{g.out_channels} * g.kernel_h * g.kernel_w > uint64_t{g.input_height} * g.input_width &&
         (few_rows || (many_weights && !pointwise_residual));
}
// On AMX, a bfloat16 3x3 conv of stride 2 with at least
// kAmxStridedRowSplitPixels output pixels splits rows. oneDNN's AMX brgconv
// ran YOLO's two 40x40 -> 20x20 convs 9-16% faster on half the rows, all
// output channels, than on all rows, half the channels. Measured with
// standalone SiLU convs, two threads, four alternated rounds: 256 -> 512
// 1.67-1.80 against 1.83-2.09 ms, 256 -> 256 0.83-0.96 against 0.99-1.09.
// At 14x14 outputs and below the channel split kept its lead: ResNet-50's
// 28 -> 14 256 -> 256 conv 0.35-0.37 against 0.36-0.38 ms, its 14 -> 7
// 512 -> 512 conv 0.74-0.80 against 1.43-1.56 in three of four rounds.
// float32 kernels keep the channel split: the 256 -> 512 conv took
// 4.37-5.16 ms on channels against 5.11-5.32 on rows.
constexpr uint64_t kAmxStridedRowSplitPixels = 400;
bool amx_strided_rows(const Geometry& g, DataType kernel) {
  return on_amx(kernel) && g.kh == 3 && g.kw == 3 && g.sh == 2 && g.sw == 2 &&
         uint64_t{g.oh} * g.ow >= kAmxStridedRowSplitPixels;
}
bool splits_channels(const Geometry& g, uint32_t threads, bool residual, DataType kernel) {
  if (amx_strided_rows(g, kernel)) return false;
  Conv2dGeometry c;
  c.batch = g.n, c.input_height = g.h, c.input_width = g.w, c.in_channels = g.cin, c.out_channels = g.cout;
  c.kernel_h = g.kh, c.kernel_w = g.kw, c.groups = g.groups, c.output_height = g.oh, c.output_width = g.ow;
  c.stride_h = g.sh, c.stride_w = g.sw;
  return splits_channels(c, g.transposed, threads, residual);
}

// Output rows per image from this size on (ResNet-50's 56x56x256 maps),
// or over the whole batch from kOwnResidualBatchBytes on, have their
// residual added by Tessera (ConvPlan::own_residual). oneDNN's sum post-op
// reads the residual as it stores each block of output channels, a strided
// walk over rows, slow once the residual is in DRAM; Tessera's pass streams
// it. ResNet-50 batch 8, per-launch medians inside the model, three
// alternated pairs: the stage-1 64->256 1x1 with its residual 3.9-4.0 ->
// 3.0-3.3 ms; the 28x28x512 maps (12.8 MB at batch 8) 2.77-3.39 -> 2.42-2.90
// ms each, six pairs. At batch 1 the same maps (1.6 MB, still in the cache
// from the conv that wrote the residual) lost (0.26 -> 0.28 ms), as did the
// 14x14x1024 maps at either batch size (0.32 -> 0.37 ms at batch 1, mixed
// at batch 8): they stay on the post-op. Since micro-batching runs stage 1
// two images at a time (6.4 MB of 56x56x256 rows, in the L3), its 64->256
// convs are faster on the post-op too (kOwnResidualImageBytes 2 -> 4 MB; sums
// of the three launches per batch, alternated builds: batch 8 7.3-7.9 ->
// 7.0-7.8 ms in 4 of 5 rounds, batch 1 0.95-0.97 -> 0.87-0.89 ms in 3 of 4).
constexpr uint64_t kOwnResidualImageBytes = 4 << 20;
constexpr uint64_t kOwnResidualBatchBytes = 8 << 20;

// Which 1x1 convs run in pixel chunks (ConvPlan::chunked): strided ones
// over dense rows (ResNet-50's downsamples at batch 8, per-launch medians in
// the model, three alternated pairs: 4.5-4.9 against 4.8-5.1 ms on oneDNN's
// strided kernel; batch 1 unchanged), and those with a residual and large
// maps (above), float32
// rows only (a bfloat16 stage would round the conv's output before the add,
// which oneDNN's post-op does not). Measured on AVX-512 CPUs only. A
// residual in chunks is always added by Tessera's pass.
struct Chunking {
  bool chunked = false, own_residual = false;
};
Chunking chunking(const Problem& pr, const ConvPlan& plan) {
  const Geometry& g = pr.g;
  const bool pointwise = kernel_isa() == KernelIsa::kAvx512 && cpu::select_float_math().fused != nullptr &&
                         !g.transposed && g.groups == 1 && g.kh == 1 && g.kw == 1 && g.pad_t == 0 && g.pad_b == 0 &&
                         g.pad_l == 0 && g.pad_r == 0 && !plan.winograd && !plan.tile_dst && !plan.stage_dst &&
                         pr.kernel == DataType::FLOAT32 && plan.out_type == DataType::FLOAT32 &&
                         (!plan.residual || (!plan.stage_res && plan.res_type == DataType::FLOAT32));
  const bool strided = (g.sh > 1 || g.sw > 1) && !plan.stage_src;
  const uint64_t image_bytes = uint64_t{g.oh} * g.ow * g.cout * sizeof(float);
  const bool large = image_bytes >= kOwnResidualImageBytes || image_bytes * g.n >= kOwnResidualBatchBytes;
  if (!pointwise || !(strided || (plan.residual && large))) return {};
  return {true, plan.residual};
}

// Whole shards (not chunked, not split by channels) of a conv with SiLU and a
// residual on oneDNN's bfloat16 kernels: the conv writes float32 rows to the
// shard's stage, which stays in the cache, Tessera's SiLU runs on it (see make_pd) and one fused
// pass writes res_activation(stage + residual) to the output. oneDNN 2.6's
// swish post-op before its sum post-op is slow on its AMX kernels: in YOLO at
// LoFi the 160x160 32 -> 32 3x3 conv with its residual took 1.5-1.6 ms
// against 0.74 ms without the residual (a three-conv model, kernel-only);
// with this pass, 0.60-0.92 against 0.99-1.18 ms, three alternated builds.
// The float32 kernels keep their post-ops: YOLO at HiFi4 came out the same
// or a little slower with the pass (the 160x160 conv's launches 1.69-2.41
// against 1.65-2.12 ms, four alternated rounds).
// The output's and the residual's rows may be float32 or bfloat16 (the
// kernel's float32 rows then round as the pass stores them), dense either way.
bool silu_before_own_residual(const Problem& pr, const ConvPlan& plan, const TensorAccess& dst,
                              const TensorAccess* res) {
  return plan.residual && is_plain_silu(pr.g.activation) && kernel_isa() != KernelIsa::kScalar &&
         pr.kernel == DataType::BFLOAT16 && cpu::select_float_math().fused != nullptr && !plan.winograd &&
         !plan.tile_dst && !plan.split_channels && !plan.concat && !pr.cout_padded &&
         plan.out_type == DataType::FLOAT32 && is_row_dtype(plan.dst_type) && dense_row_stride(dst) != 0 && res &&
         dense_row_stride(*res) != 0 && is_row_dtype(plan.res_type);
}

StatusOr<Program> compile(const Device& device, const Problem& pr, const TensorAccess& src, const TensorAccess& dst,
                          const TensorAccess* res = nullptr) {
  // Primitives are built for the single thread that runs each shard.
  struct SingleThread {
    int saved = omp_get_max_threads();
    SingleThread() { omp_set_num_threads(1); }
    ~SingleThread() { omp_set_num_threads(saved); }
  } single_thread;
  auto plan = std::make_shared<ConvPlan>();
  if (pr.residual) {
    plan->residual = true;
    plan->res_activation = pr.residual->activation;
    plan->res_type = pr.residual->tensor.dtype();
    plan->stage_res = res == nullptr || dense_row_stride(*res) == 0 || plan->res_type != pr.dst_dtype;
  }
  const Geometry& g = pr.g;
  plan->out_type = pr.dst_dtype;
  plan->tile_type = pr.output.dtype;
  plan->tile_dst = pr.output.layout == Layout::TILE;
  plan->round_to_bf16 = plan->tile_dst && pr.dst_precision != pr.dst_dtype;
  plan->cout = g.cout;
  plan->batch = g.n;
  plan->in_h = g.h;
  plan->in_w = g.w;
  plan->out_h = g.oh;
  plan->out_w = g.ow;
  plan->tile_src = pr.input.layout == Layout::TILE;
  plan->concat = pr.concat;
  plan->src_type = pr.input.dtype;
  plan->in_type = pr.kernel;
  plan->cin = g.cin;
  plan->dst_type = pr.output.dtype;
  plan->stage_src = plan->tile_src || dense_row_stride(src) == 0 || pr.input.dtype != pr.kernel || pr.concat;
  plan->stage_dst = plan->tile_dst || dense_row_stride(dst) == 0 || pr.output.dtype != pr.dst_dtype;
  // A shard per worker thread, each keeping its part in its own cache: a
  // batch splits by image; otherwise see splits_channels; otherwise rows
  // (several shards per worker on large maps, see row_shards).
  const uint32_t threads = static_cast<uint32_t>(device.workers().num_threads());
  if (pr.winograd()) {  // only where oneDNN has a Winograd kernel for the whole problem
    plan->winograd = true;
    const Status whole = guard("compiling the convolution", [&] {
      if (!std::string_view(whole_problem(*plan, pr).impl_info_str()).starts_with("jit"))
        throw dnnl::error(dnnl_unimplemented, "no Winograd kernel");
    });
    plan->winograd = whole.ok();
  }
  enum class Split { kImages, kChannels, kRows, kWhole };
  std::vector<Split> order;
  if (threads > 1 && g.n >= threads) order.push_back(Split::kImages);
  if (!plan->tile_dst && splits_channels(g, threads, plan->residual, pr.kernel)) order.push_back(Split::kChannels);
  if (threads > 1 && uint64_t{g.oh} * g.ow >= kMinPixelsToSplit) order.push_back(Split::kRows);
  order.push_back(Split::kWhole);
  Status built;
  // Each split in pixel chunks where chunking applies, then without (padded
  // output channels only in chunks).
  const Chunking chunks = pr.cout_padded ? Chunking{true, plan->residual} : chunking(pr, *plan);
  plan->stride_h = g.sh;
  plan->stride_w = g.sw;
  plan->cout_padded = pr.cout_padded;
  // A row split whose shards run only oneDNN's reference kernel on the whole
  // problem's weight layout is tried again with the shards' own layout
  // (shard_layout). oneDNN's bfloat16 brgconv_1x1 blocks MobileNetV2's 14x14
  // 96 -> 576 convs by 64 output channels and their 7x14 row shards by 48,
  // and takes neither layout for the other shape: the convs fell back to one
  // shard, on one worker, no faster than float32 on two (three launches
  // 0.133-0.135 -> 0.069-0.071 ms, alternated builds).
  struct Attempt {
    Split split;
    bool chunked, shard_layout;
  };
  std::vector<Attempt> attempts;
  for (Split split : order) {
    if (chunks.chunked && split != Split::kChannels) attempts.push_back({split, true, false});
    if (!pr.cout_padded) attempts.push_back({split, false, false});
    if (!pr.cout_padded && split == Split::kRows && !plan->winograd) attempts.push_back({split, false, true});
  }
  for (auto [split, chunked, shard_layout] : attempts) {
    plan->chunked = false;  // the packing is the whole problem's, with the residual's sum post-op
    plan->own_residual = false;
    plan->shards.clear();
    plan->pds.clear();
    plan->prims.clear();
    plan->packing.clear();
    plan->packed_bytes = 0;
    plan->split_channels = false;
    built = guard("compiling the convolution", [&] {
      bool made = true;
      if (split == Split::kChannels) {
        made = !split_channels(*plan, g, threads).empty();
      } else {
        if (!plan->winograd) {
          const memory::desc w = whole_problem_weights(*plan, pr);
          plan->packing.push_back({0, kernel_geometry(pr).cout, w, 0});
          plan->packed_bytes = w.get_size();
        }
        plan->chunked = chunked;
        plan->own_residual = chunked ? chunks.own_residual : silu_before_own_residual(pr, *plan, dst, res);
        const uint64_t image_bytes = uint64_t{g.h} * g.w * g.cin * element_size(pr.kernel) +
                                     uint64_t{g.oh} * g.ow * g.cout * element_size(pr.dst_dtype);
        if (split == Split::kImages)
          split_images(*plan, g, threads, image_bytes);
        else if (split == Split::kRows)
          made = !split_rows(*plan, g, row_shards(g, threads)).empty();
        else
          split_rows(*plan, g, 1);
        if (made && shard_layout) {
          const memory::desc w = first_shard_weights(*plan, pr);
          plan->packing.at(0).desc = w;
          plan->packed_bytes = w.get_size();
        }
      }
      if (!made) throw dnnl::error(dnnl_unimplemented, "the split leaves a shard without work");
      build_primitives(*plan, pr);
      // A shard shape only oneDNN's reference kernel runs costs more than the split gains.
      if (split != Split::kWhole)
        for (const auto& pd : plan->pds)
          if (std::string_view(pd.impl_info_str()).starts_with("ref"))
            throw dnnl::error(dnnl_unimplemented, "a shard runs on the reference kernel");
    });
    if (built.ok()) break;
  }
  TS_RETURN_IF_ERROR(built);
  Program prog;
  prog.kernel = conv_kernel;
  // Suffixes: "oc" for channel shards, "_chunked" for pixel chunks
  // (ConvPlan::chunked).
  prog.kernel_name =
      fmt::format("{}_{}__onednn_{}_x{}{}{}", short_dtype_name(pr.kernel), g.transposed ? "conv_transpose2d" : "conv2d",
                  plan->pds[0].impl_info_str(), plan->shards.size(), plan->split_channels ? "oc" : "",
                  plan->chunked ? "_chunked" : "");
  prog.num_tasks = static_cast<uint32_t>(plan->shards.size());
  prog.grain = 1;
  prog.plan = plan;
  return prog;
}

// The output's buffer: the residual's when the caller gave it up (see
// Conv2dResidual::in_place), else a new one. Every shard reads the residual
// rows (or columns) it writes, and no others, before writing them.
StatusOr<Tensor> output_tensor(const Tensor& input, const Problem& pr) {
  if (pr.residual && pr.residual->in_place && pr.residual->tensor.buffer() != input.buffer()) {
    StatusOr<Tensor> r = reshape(pr.residual->tensor, pr.output.shape);
    if (r.ok() && r->spec() == pr.output) return r;
  }
  return allocate_tensor_on_device(pr.output, *input.device());
}

// Enqueues the launch into the already allocated `output`.
StatusOr<Conv2dResult> launch_conv(const Tensor& input, Tensor output, const PreparedConv2dWeights& w,
                                   const Problem& pr, const Program& prog, uint8_t cq_id,
                                   const ConcatParts* cat = nullptr) {
  Conv2dResult r;
  r.output = std::move(output);
  r.output_height = pr.g.oh;
  r.output_width = pr.g.ow;
  r.weights = w;
  ConcatConvArgs args{};
  if (cat) args.cat = *cat;
  TS_ASSIGN_OR_RETURN(args.src, make_access(input));
  TS_ASSIGN_OR_RETURN(args.dst, make_access(r.output));
  if (pr.residual) {
    TS_ASSIGN_OR_RETURN(args.res, make_access(pr.residual->tensor));
  }
  TS_ASSIGN_OR_RETURN(TensorAccess wa, make_access(w.weight));
  TS_ASSIGN_OR_RETURN(TensorAccess ba, make_access(w.bias));
  args.weights = wa.page(0);
  args.bias = ba.page(0);
  args.plan = static_cast<ConvPlan*>(prog.plan.get());
  if (args.plan->concat != (cat != nullptr))
    return internal_error("conv2d: a {} launch of a program compiled {}", cat ? "conv2d_concat" : "conv2d",
                          args.plan->concat ? "for conv2d_concat" : "for conv2d");
  // Without parts, only the ConvArgs (the base) travels.
  TS_RETURN_IF_ERROR(input.device()->enqueue_program(cq_id, prog, &args, cat ? sizeof(args) : sizeof(ConvArgs)));
  return r;
}

}  // namespace

StatusOr<Tensor> round_conv2d_weights(const Tensor& weight, const Conv2dParams& p, DataType wt, DataType input_dtype) {
  if (weight.is_on_device()) return invalid_argument_error("conv2d: expected host weights, found a device tensor");
  const uint32_t cin_g = p.in_channels / (p.groups ? p.groups : 1), kh = p.kernel_size[0], kw = p.kernel_size[1];
  const Shape expected{p.out_channels, cin_g, kh, kw};
  if (weight.shape() != expected)
    return invalid_argument_error(
        "conv2d: expected weight shape {} (out_channels, in_channels/groups, kh, kw), found {}", expected.to_string(),
        weight.shape().to_string());
  if (!is_floating(wt))
    return invalid_argument_error("conv2d: weights_dtype must be a float type, found {}", data_type_name(wt));
  TS_ASSIGN_OR_RETURN(std::vector<float> v, weight.to_vector());
  if (wt == DataType::BFLOAT16) {
    for (float& x : v) x = round_to_bfloat16(x);
  } else if (is_block_float(wt)) {
    // Rows (ky, kx, ci), columns oc: blocks run over 16 output channels, as
    // in the original's prepared weight matrix.
    const uint32_t rows = kh * kw * cin_g, cols = p.out_channels;
    std::vector<float> m(uint64_t{rows} * cols);
    auto at = [&](uint32_t oc, uint32_t ci, uint32_t ky, uint32_t kx) {
      return ((uint64_t{oc} * cin_g + ci) * kh + ky) * kw + kx;
    };
    for (uint32_t oc = 0; oc < cols; ++oc)
      for (uint32_t ci = 0; ci < cin_g; ++ci)
        for (uint32_t ky = 0; ky < kh; ++ky)
          for (uint32_t kx = 0; kx < kw; ++kx)
            m[((ky * kw + kx) * cin_g + ci) * uint64_t{cols} + oc] = v[at(oc, ci, ky, kx)];
    TS_ASSIGN_OR_RETURN(Tensor t, Tensor::from_vector(m, Shape{1, 1, rows, cols}, wt, Layout::TILE));
    TS_ASSIGN_OR_RETURN(m, t.to_vector());
    for (uint32_t oc = 0; oc < cols; ++oc)
      for (uint32_t ci = 0; ci < cin_g; ++ci)
        for (uint32_t ky = 0; ky < kh; ++ky)
          for (uint32_t kx = 0; kx < kw; ++kx)
            v[at(oc, ci, ky, kx)] = m[((ky * kw + kx) * cin_g + ci) * uint64_t{cols} + oc];
  }
  // A bfloat16 input computes in bfloat16: float32 weights are rounded once more
  // (a no-op for bfloat16 and block-float weights, which bfloat16 holds exactly).
  if (input_dtype == DataType::BFLOAT16)
    for (float& x : v) x = round_to_bfloat16(x);
  return Tensor::from_vector(v, expected, DataType::FLOAT32);
}

StatusOr<Tensor> round_conv_transpose2d_weights(const Tensor& weight, const ConvTranspose2dParams& p, DataType wt,
                                                DataType input_dtype) {
  if (weight.is_on_device())
    return invalid_argument_error("conv_transpose2d: expected host weights, found a device tensor");
  const uint32_t groups = p.groups ? p.groups : 1, cin_g = p.in_channels / groups, cout_g = p.out_channels / groups;
  const uint32_t kh = p.kernel_size[0], kw = p.kernel_size[1];
  const Shape expected{p.in_channels, cout_g, kh, kw};
  if (weight.shape() != expected)
    return invalid_argument_error(
        "conv_transpose2d: expected weight shape {} (in_channels, out_channels/groups, kh, "
        "kw), found {}",
        expected.to_string(), weight.shape().to_string());
  // Round as the equivalent convolution's (out, in/g, kh, kw) weights: the
  // block-float blocks run over output channels either way.
  TS_ASSIGN_OR_RETURN(std::vector<float> v, weight.to_vector());
  std::vector<float> conv(v.size());
  auto t_at = [&](uint32_t ic, uint32_t o, uint32_t y, uint32_t x) {
    return ((uint64_t{ic} * cout_g + o) * kh + y) * kw + x;
  };
  auto c_at = [&](uint32_t oc, uint32_t i, uint32_t y, uint32_t x) {
    return ((uint64_t{oc} * cin_g + i) * kh + y) * kw + x;
  };
  auto each = [&](auto f) {
    for (uint32_t ic = 0; ic < p.in_channels; ++ic)
      for (uint32_t o = 0; o < cout_g; ++o)
        for (uint32_t y = 0; y < kh; ++y)
          for (uint32_t x = 0; x < kw; ++x) f(t_at(ic, o, y, x), c_at((ic / cin_g) * cout_g + o, ic % cin_g, y, x));
  };
  each([&](uint64_t t, uint64_t c) { conv[c] = v[t]; });
  Conv2dParams cp;
  cp.in_channels = p.in_channels;
  cp.out_channels = p.out_channels;
  cp.groups = groups;
  cp.kernel_size = p.kernel_size;
  TS_ASSIGN_OR_RETURN(Tensor ct, Tensor::from_vector(conv, Shape{p.out_channels, cin_g, kh, kw}, DataType::FLOAT32));
  TS_ASSIGN_OR_RETURN(Tensor rounded, round_conv2d_weights(ct, cp, wt, input_dtype));
  TS_ASSIGN_OR_RETURN(conv, rounded.to_vector());
  each([&](uint64_t t, uint64_t c) { v[t] = conv[c]; });
  return Tensor::from_vector(v, expected, DataType::FLOAT32);
}

namespace {

StatusOr<Tensor> round_weights(const Tensor& weight, const Conv2dParams& p, DataType wt, DataType in) {
  return round_conv2d_weights(weight, p, wt, in);
}
StatusOr<Tensor> round_weights(const Tensor& weight, const ConvTranspose2dParams& p, DataType wt, DataType in) {
  return round_conv_transpose2d_weights(weight, p, wt, in);
}

// A transposed conv whose kernel equals its stride (no padding, dilation or
// groups), like the UNet's upconvs, is one batched matmul: output row
// y * s + ky of image n is input row y times the weight slice of ky,
// (W, Cin) x (Cin, kw * Cout), and the (N * H, kh, W, kw * Cout) result is
// byte for byte the (N, OH, OW, Cout) output. oneDNN's deconvolution runs
// these at 2-45% of peak (bench/RESULTS.md); the matmul does not
// (conv::ConvAlgorithm::kPatchMatmul and the patch kernels).

StatusOr<Conv2dResult> launch_direct(const Tensor& input, const PreparedConv2dWeights& w, const Problem& pr,
                                     uint8_t cq_id);

// A patch transpose's result, whose bytes are the (N, OH, OW, Cout) output,
// as the (1, 1, N * OH * OW, Cout) rows conv_transpose2d returns: a view, or
// a copy where its rows are spread over banks.
StatusOr<Tensor> as_output_rows(const Tensor& t, const Geometry& g, uint8_t cq_id) {
  const Shape out_shape{1, 1, g.n * g.oh * g.ow, g.cout};
  StatusOr<Tensor> v = t.view(out_shape);
  if (v.ok()) return v;
  return reshape(t, out_shape, {.cq_id = cq_id});
}

StatusOr<Conv2dResult> launch_patches(const Tensor& input, const PreparedConv2dWeights& w,
                                      const ConvTranspose2dParams& p, const Problem& pr, uint8_t cq_id) {
  if (pr.direct()) return launch_direct(input, w, pr, cq_id);
  const Geometry& g = pr.g;
  TS_ASSIGN_OR_RETURN(Tensor a, input.view(Shape{g.n * g.h, 1, g.w, g.cin}));
  // Float32 rows computed in bfloat16 (lowers_to_bf16): the matmul at LoFi,
  // against the bfloat16 weights prepared for it.
  std::optional<DeviceComputeKernelConfig> compute;
  if (pr.compute == DataType::BFLOAT16 && pr.input.dtype == DataType::FLOAT32)
    compute = DeviceComputeKernelConfig{.math_fidelity = MathFidelity::LoFi};
  TS_ASSIGN_OR_RETURN(Tensor y, linear(a, w.weight, w.bias,
                                       {.dtype = pr.output.dtype,
                                        .activation = p.activation,
                                        .memory_config = pr.output.memory_config,
                                        .compute_kernel_config = compute,
                                        .cq_id = cq_id}));
  Conv2dResult r;
  TS_ASSIGN_OR_RETURN(r.output, as_output_rows(y, g, cq_id));
  r.output_height = g.oh;
  r.output_width = g.ow;
  r.weights = w;
  return r;
}

// The bias as `g.cout` float32 values (zeros without one), checked.
StatusOr<std::vector<float>> bias_values(const std::optional<Tensor>& bias, const Geometry& g) {
  if (bias && (bias->is_on_device() || bias->shape().volume() != g.cout))
    return invalid_argument_error("{}: expected a host bias with {} values, found {}",
                                  g.transposed ? "conv_transpose2d" : "conv2d", g.cout, bias->spec().to_string());
  if (!bias) return std::vector<float>(g.cout, 0.0f);
  return bias->to_vector();
}

// Prepared weights: the two host tensors copied to DRAM under `key`.
StatusOr<PreparedConv2dWeights> upload_weights(const std::string& key, const Tensor& weight, const Tensor& bias,
                                               Device& device, uint8_t cq_id) {
  PreparedConv2dWeights w;
  w.key = key;
  TS_ASSIGN_OR_RETURN(w.weight, to_device(weight, device, DRAM_MEMORY_CONFIG, cq_id));
  TS_ASSIGN_OR_RETURN(w.bias, to_device(bias, device, DRAM_MEMORY_CONFIG, cq_id));
  return w;
}

StatusOr<Conv2dResult> patches_with_weights(const Tensor& input, const Tensor& weight,
                                            const std::optional<Tensor>& bias, const ConvTranspose2dParams& p,
                                            const Problem& pr, DataType weights_dtype, uint8_t cq_id) {
  const Geometry& g = pr.g;
  TS_ASSIGN_OR_RETURN(Tensor rounded, round_conv_transpose2d_weights(weight, p, weights_dtype, input.dtype()));
  TS_ASSIGN_OR_RETURN(const std::vector<float> bv, bias_values(bias, g));
  TS_ASSIGN_OR_RETURN(std::vector<float> v, rounded.to_vector());
  if (pr.direct()) {  // AVX2 kernel: (Cin, Cout, kh, kw) -> columns n = (ky * kw + kx) * Cout + co, [n / 16][Cin][16]
    const uint32_t cols = g.kh * g.kw * g.cout, blocks = (cols + 15) / 16;
    std::vector<float> m(uint64_t{blocks} * g.cin * 16, 0.0f), b(uint64_t{blocks} * 16, 0.0f);
    for (uint32_t n = 0; n < cols; ++n) {
      const uint32_t k = n / g.cout, co = n % g.cout;
      b[n] = bv[co];
      for (uint32_t ci = 0; ci < g.cin; ++ci)
        m[(uint64_t{n / 16} * g.cin + ci) * 16 + n % 16] = v[(uint64_t{ci} * g.cout + co) * g.kh * g.kw + k];
    }
    TS_ASSIGN_OR_RETURN(Tensor mh, Tensor::from_vector(m, Shape{static_cast<uint32_t>(m.size())}, DataType::FLOAT32));
    TS_ASSIGN_OR_RETURN(Tensor bh, Tensor::from_vector(b, Shape{static_cast<uint32_t>(b.size())}, DataType::FLOAT32));
    TS_ASSIGN_OR_RETURN(PreparedConv2dWeights w, upload_weights(pr.weights_key, mh, bh, *input.device(), cq_id));
    return launch_direct(input, w, pr, cq_id);
  }
  // (Cin, Cout, kh, kw) -> (1, kh, Cin, kw * Cout).
  const uint32_t row = g.kw * g.cout;
  std::vector<float> m(v.size());
  for (uint32_t ci = 0; ci < g.cin; ++ci)
    for (uint32_t co = 0; co < g.cout; ++co)
      for (uint32_t ky = 0; ky < g.kh; ++ky)
        for (uint32_t kx = 0; kx < g.kw; ++kx)
          m[(uint64_t{ky} * g.cin + ci) * row + kx * g.cout + co] =
              v[((uint64_t{ci} * g.cout + co) * g.kh + ky) * g.kw + kx];
  std::vector<float> b(row);
  for (uint32_t i = 0; i < row; ++i) b[i] = bv[i % g.cout];
  TS_ASSIGN_OR_RETURN(Tensor mh, Tensor::from_vector(m, Shape{1, g.kh, g.cin, row}, pr.compute));
  TS_ASSIGN_OR_RETURN(Tensor bh, Tensor::from_vector(b, Shape{row}, DataType::FLOAT32));
  TS_ASSIGN_OR_RETURN(PreparedConv2dWeights w, upload_weights(pr.weights_key, mh, bh, *input.device(), cq_id));
  return launch_patches(input, w, p, pr, cq_id);
}

// The depthwise kernel's chunks of output rows, sized by the float32 values
// they read and write (the kernel computes in float32: bfloat16 rows halve
// the bytes, not the FMAs): four per worker from kDepthwiseManyChunksBytes;
// under it one per worker at most, each of kDepthwiseChunkBytes or more.
// Before, the reordering ops' 256 KB chunks of bytes left MobileNetV2's
// 7x7x960 in bfloat16 (188 KB) to one worker. Smaller chunks split each
// worker's rows: 14x14x384 in seven chunks of two rows took 0.044 ms over
// its four launches in the model, against 0.029 in two of seven (the
// rows a worker's row pairs share stay in its own cache).
constexpr uint64_t kDepthwiseChunkBytes = 64 * 1024;
constexpr uint64_t kDepthwiseManyChunksBytes = 2 * 1024 * 1024;
uint32_t depthwise_grain(const Geometry& g, uint32_t threads) {
  const uint64_t rows = uint64_t{g.n} * g.oh;
  const uint64_t values = uint64_t{g.n} * (uint64_t{g.h} * g.w + uint64_t{g.oh} * g.ow) * g.cin;
  const uint64_t bytes = values * sizeof(float);
  const uint64_t chunks = bytes >= kDepthwiseManyChunksBytes
                              ? 4 * uint64_t{threads}
                              : std::clamp<uint64_t>(bytes / kDepthwiseChunkBytes, 1, threads);
  return static_cast<uint32_t>(div_up(rows, chunks));
}

StatusOr<Conv2dResult> launch_depthwise(const Tensor& input, const PreparedConv2dWeights& w, const Problem& pr,
                                        uint8_t cq_id) {
  if (pr.output.layout != Layout::ROW_MAJOR || pr.input.layout != Layout::ROW_MAJOR)
    return internal_error("conv2d: the depthwise kernel reads and writes rows only");
  const Geometry& g = pr.g;
  Device& device = *input.device();
  TS_ASSIGN_OR_RETURN(Tensor output, allocate_tensor_on_device(pr.output, device));
  cpu::DepthwiseArgs args{};
  TS_ASSIGN_OR_RETURN(args.src, make_access(input));
  TS_ASSIGN_OR_RETURN(args.dst, make_access(output));
  TS_ASSIGN_OR_RETURN(TensorAccess wa, make_access(w.weight));
  TS_ASSIGN_OR_RETURN(TensorAccess ba, make_access(w.bias));
  args.weights = reinterpret_cast<const float*>(wa.page(0));
  args.bias = reinterpret_cast<const float*>(ba.page(0));
  const cpu::DepthwiseWeightsLayout layout(g.kh, g.kw, g.cin);
  if (w.weight.shape().volume() == layout.size()) {
    args.weights_pairs = args.weights + layout.weights_pairs();
    args.bias_pairs = args.weights + layout.bias_pairs();
  }
  args.src_type = input.dtype();
  args.dst_type = pr.output.dtype;
  args.math = cpu::select_float_math();
  args.activation = g.activation;
  args.n = g.n, args.h = g.h, args.w = g.w, args.c = g.cin, args.oh = g.oh, args.ow = g.ow;
  args.kh = g.kh, args.kw = g.kw, args.sh = g.sh, args.sw = g.sw, args.dh = g.dh, args.dw = g.dw;
  args.pad_t = static_cast<uint32_t>(g.pad_t), args.pad_l = static_cast<uint32_t>(g.pad_l);
  auto compile = [&]() -> StatusOr<Program> {
    Program prog;
    const bool avx2 = kernel_isa() == KernelIsa::kAvx2;
    prog.kernel = avx2 ? cpu::avx2::depthwise_kernel : cpu::avx512::depthwise_kernel;
    prog.kernel_name = fmt::format("{}_depthwise2d__{}", short_dtype_name(input.dtype()), avx2 ? "avx2" : "avx512");
    prog.num_tasks = g.n * g.oh;
    prog.grain = depthwise_grain(g, device.workers().num_threads());
    return prog;
  };
  const std::string key = pr.key + ":" + std::string(kernel_isa_name(kernel_isa()));
  TS_RETURN_IF_ERROR(ops::launch(device, cq_id, key, compile, args));
  return Conv2dResult{std::move(output), g.oh, g.ow, w};
}

StatusOr<Conv2dResult> depthwise_with_weights(const Tensor& input, const Tensor& weight,
                                              const std::optional<Tensor>& bias, const Conv2dParams& p,
                                              const Problem& pr, DataType weights_dtype, uint8_t cq_id) {
  const Geometry& g = pr.g;
  TS_ASSIGN_OR_RETURN(Tensor rounded, round_conv2d_weights(weight, p, weights_dtype, input.dtype()));
  TS_ASSIGN_OR_RETURN(const std::vector<float> b, bias_values(bias, g));
  TS_ASSIGN_OR_RETURN(std::vector<float> v, rounded.to_vector());  // (C, 1, kh, kw)
  // One row: the kernel reads (kh * kw, C) densely, with no page padding
  // between taps; then the same and the bias in pairs order
  // (cpu::DepthwiseArgs::weights_pairs).
  const cpu::DepthwiseWeightsLayout layout(g.kh, g.kw, g.cin);
  std::vector<float> m(layout.size());
  cpu::pack_depthwise_weights(layout, v.data(), b.data(), m.data());
  TS_ASSIGN_OR_RETURN(Tensor mh, Tensor::from_vector(m, Shape{static_cast<uint32_t>(m.size())}, DataType::FLOAT32));
  TS_ASSIGN_OR_RETURN(Tensor bh, Tensor::from_vector(b, Shape{g.cout}, DataType::FLOAT32));
  TS_ASSIGN_OR_RETURN(PreparedConv2dWeights w, upload_weights(pr.weights_key, mh, bh, *input.device(), cq_id));
  return launch_depthwise(input, w, pr, cq_id);
}

// Output rows per band of the direct kernel: as many as keep the padded
// input rows a band reads within kDirectBandBytes (the worker's L2 holds
// them beside one 16-channel block of weights).
constexpr uint64_t kDirectBandBytes = 512 * 1024;
// Tasks per worker the direct, Winograd and patch kernels aim for on small
// maps (see launch_direct).
constexpr uint32_t kDirectTasksPerWorker = 4;
// Winograd: the transformed patches and products of one segment of tiles.
// Each segment reads every weight once, so weights beyond what the L3 keeps
// (the UNet's 512 -> 512 bottleneck: 16.8 MB) come from DRAM per segment,
// and there larger segments pay. Measured with bench_conv_f32 --hifi2
// (HiFi4 / HiFi2 time, 2 threads) at 384 KiB, 768 KiB and 1.5 MiB:
// bottleneck 512->512 1.12x, 1.40x, 1.71x; dec4 512->256 (8.4 MB of
// weights) 1.92x, 1.80x, 1.71x; enc2 64->64 1.67x, 1.72x, 1.74x.
constexpr uint64_t kWinogradSegmentBytes = 384 * 1024;
constexpr uint64_t kWinogradStreamedSegmentBytes = 1536 * 1024;
constexpr uint64_t kWinogradCachedWeightBytes = 8 * 1024 * 1024;

// Padded input bytes one output row band of the direct kernel reads per row.
uint64_t direct_row_bytes(const Geometry& g) {
  return (uint64_t{g.ow - 1} * g.sw + uint64_t{g.kw - 1} * g.dw + 1) * g.cin * sizeof(float);
}

// Input channels per chunk of the direct kernel. Only maps whose whole
// padded input fits one band (one band per image) take chunks: there each
// block's weights serve few pixels, and without chunks they came from L2
// (ResNet-50's 7x7x512 ran at half oneDNN's speed). On larger maps the
// weights are reused over a band's many pixels from L2, and the partial
// sums cost more than they save (the UNet's 120x160x256 -> 128: 134-140
// GFLOP/s chunked against 149-152 without, alternating runs).
uint32_t direct_cin_block(const Geometry& g) {
  const uint64_t rows = uint64_t{g.oh - 1} * g.sh + uint64_t{g.kh - 1} * g.dh + 1;
  return rows * direct_row_bytes(g) <= kDirectBandBytes ? cpu::direct_cin_block(g.kh, g.kw, g.cin) : g.cin;
}
// The problem's: Winograd, patch, AVX-512 direct, narrow and 3x3 row kernels take no chunks.
uint32_t direct_cin_block(const Problem& pr) {
  return pr.winograd() || pr.direct_avx512() || pr.narrow() || pr.rows3x3() || pr.g.transposed ? pr.g.cin
                                                                                               : direct_cin_block(pr.g);
}

// The AVX-512 direct kernel's bands: pixels of the whole batch per band, as many
// as keep a band's input rows within kDirectAvx512BandBytes (the L2 keeps them
// while four blocks of weights stream past), in equal bands.
constexpr uint64_t kDirectAvx512BandBytes = 256 * 1024;
// ... and at least this many pixels: every band re-reads its group's weights
// (ResNet-50's 7x7 2048 -> 512 at batch 8, 32-pixel bands: 13 bands over 392
// pixels). Per-launch sums, three alternated rounds: its two launches
// 3.68-3.78 -> 3.38-3.46 ms at batch 8 (64-pixel bands), 0.51 -> 0.49 ms at
// batch 1; 128-pixel bands for 1024 input channels lost at batch 1.
constexpr uint64_t kDirectAvx512MinBandPixels = 64;

MemoryConfig staging(uint32_t rows, uint32_t cols, DataType dtype, bool dense);

// The AVX-512 direct kernel's tasks (launch_direct): bands of
// the batch's pixels (kDirectAvx512BandBytes of input rows at most), groups of
// 16-channel blocks (whole tiles' worth but the last) until the workers have
// kDirectTasksPerWorker tasks each; where the groups do not divide evenly
// over the workers, more bands of at least one tile of pixels (channel groups
// alone left a 64-channel output to one task and a 320-channel one to five,
// three on one worker). A task runs its group's weights past its band; every
// band reads all of them, so bands are few where groups divide evenly.
void direct_avx512_tasks(const Problem& pr, uint32_t threads, cpu::DirectConvArgs& args) {
  const Geometry& g = pr.g;
  // Patches: input pixels, and blocks of kh * kw * cout columns.
  const uint64_t pixels = g.transposed ? uint64_t{g.n} * g.h * g.w : uint64_t{g.n} * g.oh * g.ow;
  const uint32_t cols = g.transposed ? g.kh * g.kw * g.cout : g.cout;
  const uint32_t tile_rows = cpu::avx512::kDirectTileRows, tile_blocks = cpu::avx512::kDirectTileBlocks;
  const uint64_t fit = std::min(pixels, std::max<uint64_t>(kDirectAvx512BandBytes / (uint64_t{g.cin} * sizeof(float)),
                                                           kDirectAvx512MinBandPixels));
  const uint32_t want = threads * kDirectTasksPerWorker, blocks = (cols + 15) / 16;
  const uint32_t tiles = (blocks + tile_blocks - 1) / tile_blocks;
  uint64_t bands = (pixels + fit - 1) / fit;
  const uint32_t groups = std::min<uint32_t>(tiles, std::max<uint64_t>(1, (want + bands - 1) / bands));
  args.group_blocks = (tiles + groups - 1) / groups * tile_blocks;
  args.groups = (blocks + args.group_blocks - 1) / args.group_blocks;
  if (args.groups % threads != 0)
    bands = std::clamp<uint64_t>((want + args.groups - 1) / args.groups, bands, (pixels + tile_rows - 1) / tile_rows);
  args.band_rows = static_cast<uint32_t>((pixels + bands - 1) / bands);
  args.bands = static_cast<uint32_t>((pixels + args.band_rows - 1) / args.band_rows);
}

// The 3x3 row kernel's tasks: one output row of one image per task, for
// each group of output channels, group slowest: the pool's runs then give
// each worker whole groups where there are several, whose weights (up to
// 590 KB each) stay in its own L2, where alternating groups row by row
// streamed them from the L3 again on every row (the UNet's dec3, 256 ->
// 128, each layer alone, four alternated rounds: 512-516 -> 514-518
// GFLOP/s). A task costs one claim in the pool, under a microsecond against
// 15 us or more of FMAs, and the runs keep each worker on contiguous rows;
// so no coarser bands are needed for locality, and one-row tasks let the
// workers finish together.
//
// A task's working set is its three input rows and its group's weights,
// which every tile streams again. Where that spills from the core's private
// cache (`l2_bytes`: the descriptor's L1, the CPU's L2), the kernel
// prefetches each tap's input a tap ahead. Alternated runs, two workers,
// six rounds, medians, GFLOP/s without -> with: the UNet's dec3 (120x160
// 256 -> 128, 1.08 MB against a 1 MB L2) 501 -> 527; its dec4 (60x80
// 512 -> 256, 1.08 MB) 520 -> 522. Where the set fits, prefetching (forced)
// only costs instructions: the UNet's dec1 (480x640 64 -> 32) 517 -> 507,
// its bottleneck (30x40 512 -> 512) 548 -> 541.
void rows3x3_tasks(const Problem& pr, uint64_t l2_bytes, cpu::DirectConvArgs& args) {
  const Geometry& g = pr.g;
  args.band_rows = 1;
  args.bands = g.oh;
  const uint32_t group = cpu::avx512::rows3x3_group_channels(g.cin, g.cout);
  args.groups = g.cout / group;
  args.group_blocks = group / 16;
  const uint64_t working_set = (3 * uint64_t{g.w} * g.cin + 9 * uint64_t{g.cin} * group) * sizeof(float);
  args.rows_prefetch = working_set > l2_bytes;
}

// The narrow kernel's tasks: bands of the batch's pixels, kDirectTasksPerWorker
// per worker, of at least kNarrowMinBandPixels.
constexpr uint64_t kNarrowMinBandPixels = 256;
void narrow_tasks(const Problem& pr, uint32_t threads, cpu::DirectConvArgs& args) {
  const Geometry& g = pr.g;
  const uint64_t pixels = uint64_t{g.n} * g.oh * g.ow;
  const uint64_t band = std::max(kNarrowMinBandPixels,
                                 (pixels + threads * kDirectTasksPerWorker - 1) / (threads * kDirectTasksPerWorker));
  args.band_rows = static_cast<uint32_t>(std::min(pixels, band));
  args.bands = static_cast<uint32_t>((pixels + args.band_rows - 1) / args.band_rows);
  args.groups = 1;
  args.group_blocks = (g.cout + 15) / 16;
}

// The AVX2 kernels' tasks (launch_direct): bands of output rows per image
// (Winograd: of tile rows; patches: of input rows), then groups of
// 16-channel blocks.
void direct_avx2_tasks(const Problem& pr, uint32_t threads, cpu::DirectConvArgs& args) {
  // Bands of rows sized for the cache, as equal as rows allow, and a multiple
  // of the workers when there are few (two bands of 33 and 23 rows left one
  // worker idle for 30% of a 56x56 conv); then more bands of at least 4 rows
  // (below), and only then groups of output-channel blocks, until every
  // worker has its tasks. Maps of fewer than 8 rows keep one band, where each
  // worker streams only its own blocks' weights. Winograd bands count rows of
  // 2x2 output tiles, each reading two more input rows.
  const Geometry& g = pr.g;
  const bool wino = pr.winograd(), patches = g.transposed;
  const uint32_t units = wino ? (g.oh + 1) / 2 : patches ? g.h : g.oh;
  uint32_t fit_rows;
  if (patches) {  // input rows read in place, half the budget
    const uint64_t fit = kDirectBandBytes / 2 / (uint64_t{g.w} * g.cin * sizeof(float));
    fit_rows = static_cast<uint32_t>(std::clamp<uint64_t>(fit, 1, units));
  } else if (wino) {
    const uint64_t tile_row_bytes = 2 * (uint64_t{(g.ow + 1) / 2} * 2 + 2) * g.cin * sizeof(float);
    const uint64_t fit = kDirectBandBytes / tile_row_bytes;
    fit_rows = static_cast<uint32_t>(std::clamp<uint64_t>(fit > 1 ? fit - 1 : 1, 1, units));
  } else {
    const uint64_t span = uint64_t{g.kh - 1} * g.dh + 1, fit = kDirectBandBytes / direct_row_bytes(g);
    fit_rows = static_cast<uint32_t>(std::clamp<uint64_t>(fit > span ? (fit - span) / g.sh + 1 : 1, 1, g.oh));
  }
  uint32_t bands = (units + fit_rows - 1) / fit_rows;
  if (bands > 1 && g.n * bands < 8 * threads) {
    const uint32_t tasks = (g.n * bands + threads - 1) / threads * threads;
    bands = std::min(units, (tasks + g.n - 1) / g.n);
  }
  // The tasks the workers want come first as more bands of at least 4 rows
  // (Winograd: tile rows), then as groups of output channels: a group reads
  // its band's whole input (and builds its tap table, or pads and transforms
  // it) for its share of the blocks, where another band rereads only a halo
  // and the weights. bench_conv_f32, in-process alternation: ResNet-50's 56x56
  // 128 -> 128 stride-2 conv 2.83 / 2.69 -> 1.64 / 1.60 ms, its 56x56x64 3x3
  // 1.08x (Winograd 2.18x), 28x28x128 1.81-1.84x, 14x14x256 1.05-1.24x;
  // YOLO's 40x40x128 Winograd 1.38x; the UNet's layers (many bands already)
  // and 7x7 maps (one band of 7 rows) unchanged.
  if (!patches && g.n * bands < threads * kDirectTasksPerWorker)
    bands = std::max(bands, std::min(units / 4, (threads * kDirectTasksPerWorker + g.n - 1) / g.n));
  args.band_rows = (units + bands - 1) / bands;
  args.bands = (units + args.band_rows - 1) / args.band_rows;
  const uint32_t blocks = ((patches ? g.kh * g.kw : 1) * g.cout + 15) / 16;  // patches: blocks of columns
  // Up to kDirectTasksPerWorker tasks per worker, so that a worker whose
  // vCPU stalls hands its remaining blocks to the other: with one task per
  // worker, ResNet-50 at HiFi2 batch 1 ran 64-93 ms device-only against
  // 57-75 with four (three alternated pairs); each task pads or transforms
  // its own input copy.
  const uint32_t want = threads * kDirectTasksPerWorker;
  const uint32_t per_image = g.n * args.bands >= want ? 1 : (want + g.n * args.bands - 1) / (g.n * args.bands);
  args.group_blocks = (blocks + std::min(blocks, per_image) - 1) / std::min(blocks, per_image);
  args.groups = (blocks + args.group_blocks - 1) / args.group_blocks;
  if (wino) {
    // Tiles per segment: its transformed patches (16 x cin floats each) and
    // one block's products (16 x 16) stay in the L2, unless the weights
    // (read once per segment) are too large to stay in the L3 (see
    // kWinogradSegmentBytes).
    const uint64_t tiles = uint64_t{args.band_rows} * ((g.ow + 1) / 2);
    const uint64_t weight_bytes = uint64_t{16} * g.cin * g.cout * sizeof(float);
    const uint64_t budget =
        weight_bytes > kWinogradCachedWeightBytes ? kWinogradStreamedSegmentBytes : kWinogradSegmentBytes;
    uint64_t seg = budget / (16 * sizeof(float) * (g.cin + 16));
    if (seg >= 6) seg = seg / 6 * 6;
    args.segment_tiles = static_cast<uint32_t>(std::clamp<uint64_t>(seg, 1, tiles));
  }
}

StatusOr<Conv2dResult> launch_direct(const Tensor& input, const PreparedConv2dWeights& w, const Problem& pr,
                                     uint8_t cq_id) {
  const Geometry& g = pr.g;
  Device& device = *input.device();
  // Rows spread over banks (L1, or DRAM on wormhole_b0) go through one dense
  // DRAM shard each way.
  // (Tiles untilize to float32; bfloat16 rows stay bfloat16.)
  auto dense_rows = [&](uint32_t rows, uint32_t cols, DataType t) { return staging(rows, cols, t, true); };
  const MemoryConfig dense_in = dense_rows(g.n * g.h * g.w, g.cin,
                                           input.layout() == Layout::TILE ? DataType::FLOAT32 : input.dtype()),
                     dense_out = dense_rows(g.n * g.oh * g.ow, g.cout, pr.output.dtype);
  Tensor x = input;
  cpu::DirectConvArgs args{};
  TS_ASSIGN_OR_RETURN(args.src, make_access(x));
  if (x.layout() != Layout::ROW_MAJOR || args.src.uniform_row_stride() == 0) {
    if (x.layout() == Layout::TILE) {
      TS_ASSIGN_OR_RETURN(x, untilize(x, {.memory_config = dense_in, .dtype = DataType::FLOAT32, .cq_id = cq_id}));
    } else {
      TS_ASSIGN_OR_RETURN(x, to_memory_config(x, dense_in, cq_id));
    }
    TS_ASSIGN_OR_RETURN(args.src, make_access(x));
  }
  TensorSpec out_spec = pr.output;
  // With a residual: its buffer when the caller gives it up (output_tensor),
  // and its rows read densely (staged like the input where spread over banks).
  TS_ASSIGN_OR_RETURN(Tensor output, output_tensor(input, pr));
  TS_ASSIGN_OR_RETURN(args.dst, make_access(output));
  std::optional<Tensor> res;
  if (pr.residual) {
    res = pr.residual->tensor;
    TS_ASSIGN_OR_RETURN(args.res, make_access(*res));
    if (res->layout() == Layout::TILE) {
      TS_ASSIGN_OR_RETURN(res,
                          untilize(*res, {.memory_config = dense_rows(g.n * g.oh * g.ow, g.cout, DataType::FLOAT32),
                                          .dtype = DataType::FLOAT32,
                                          .cq_id = cq_id}));
      TS_ASSIGN_OR_RETURN(args.res, make_access(*res));
    } else if (args.res.uniform_row_stride() == 0) {
      TS_ASSIGN_OR_RETURN(res, to_memory_config(*res, dense_out, cq_id));
      TS_ASSIGN_OR_RETURN(args.res, make_access(*res));
    }
    args.res_activation = pr.residual->activation;
  }
  const bool copy_out = args.dst.uniform_row_stride() == 0;
  if (copy_out) {
    out_spec.memory_config = dense_out;
    TS_ASSIGN_OR_RETURN(output, allocate_tensor_on_device(out_spec, device));
    TS_ASSIGN_OR_RETURN(args.dst, make_access(output));
  }
  if (args.src.uniform_row_stride() == 0 || args.dst.uniform_row_stride() == 0 ||
      (res && args.res.uniform_row_stride() == 0))
    return internal_error("conv2d: the direct kernel's staging rows have no uniform stride ({} -> {})",
                          x.spec().to_string(), output.spec().to_string());
  args.src_bf16 = x.dtype() == DataType::BFLOAT16;
  args.dst_bf16 = output.dtype() == DataType::BFLOAT16;
  args.res_bf16 = res && res->dtype() == DataType::BFLOAT16;
  TS_ASSIGN_OR_RETURN(TensorAccess wa, make_access(w.weight));
  TS_ASSIGN_OR_RETURN(TensorAccess ba, make_access(w.bias));
  args.weights = reinterpret_cast<const float*>(wa.page(0));
  args.bias = reinterpret_cast<const float*>(ba.page(0));
  args.math = cpu::select_float_math();
  args.activation = g.activation;
  args.cin_block = direct_cin_block(pr);
  args.n = g.n, args.h = g.h, args.w = g.w, args.cin = g.cin, args.cout = g.cout, args.oh = g.oh, args.ow = g.ow;
  args.kh = g.kh, args.kw = g.kw, args.sh = g.sh, args.sw = g.sw, args.dh = g.dh, args.dw = g.dw;
  args.pad_t = static_cast<uint32_t>(g.pad_t), args.pad_l = static_cast<uint32_t>(g.pad_l);
  const uint32_t threads = static_cast<uint32_t>(device.workers().num_threads());
  if (pr.narrow())
    narrow_tasks(pr, threads, args);
  else if (pr.rows3x3())
    rows3x3_tasks(pr, device.descriptor().l1_size_per_core, args);
  else if (pr.direct_avx512())
    direct_avx512_tasks(pr, threads, args);
  else
    direct_avx2_tasks(pr, threads, args);
  const bool wino = pr.winograd(), patches = g.transposed;
  auto compile = [&]() -> StatusOr<Program> {
    Program prog;
    prog.kernel = pr.narrow()    ? cpu::avx512::narrow_conv_kernel
                  : pr.rows3x3() ? cpu::avx512::conv3x3_rows_kernel
                  : pr.direct_avx512()
                      ? (patches ? cpu::avx512::patch_transpose_kernel : cpu::avx512::direct_conv_kernel)
                  : patches ? cpu::avx2::patch_transpose_kernel
                  : wino    ? cpu::avx2::winograd_f2_kernel
                            : cpu::avx2::direct_conv_kernel;
    prog.kernel_name = pr.narrow()    ? (args.src_bf16 ? "bf16_conv2d__narrow_avx512" : "f32_conv2d__narrow_avx512")
                       : pr.rows3x3() ? "f32_conv2d__rows3x3_avx512"
                       : pr.direct_avx512()
                           ? (patches ? "f32_conv_transpose2d__patches_avx512" : "f32_conv2d__direct_avx512")
                       : patches ? "f32_conv_transpose2d__patches_avx2"
                       : wino    ? "f32_conv2d__winograd_f2_avx2"
                                 : "f32_conv2d__direct_avx2";
    // The AVX-512 direct and narrow kernels' bands span the batch; the AVX2
    // and 3x3 row kernels' are per image.
    prog.num_tasks = (pr.direct_avx512() || pr.narrow() ? 1 : g.n) * args.bands * args.groups;
    prog.grain = 1;
    return prog;
  };
  TS_RETURN_IF_ERROR(ops::launch(device, cq_id, pr.key, compile, args));
  if (copy_out) {
    TS_ASSIGN_OR_RETURN(output, to_memory_config(output, pr.output.memory_config, cq_id));
  }
  return Conv2dResult{std::move(output), g.oh, g.ow, w};
}

// The direct kernel's weights: per 16-channel block and chunk of input
// channels, [kh][kw][chunk channels][16] (cpu::DirectConvArgs; the 3x3 row
// kernel's per group of output channels, [kh][kw][cin][group channels]),
// and the bias padded to whole blocks, float32 (zeros past cout).
StatusOr<Conv2dResult> direct_with_weights(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
                                           const Conv2dParams& p, const Problem& pr, DataType weights_dtype,
                                           uint8_t cq_id) {
  const Geometry& g = pr.g;
  TS_ASSIGN_OR_RETURN(Tensor rounded, round_conv2d_weights(weight, p, weights_dtype, input.dtype()));
  TS_ASSIGN_OR_RETURN(std::vector<float> b, bias_values(bias, g));
  TS_ASSIGN_OR_RETURN(const std::vector<float> v, rounded.to_vector());  // (cout, cin, kh, kw)
  const uint32_t blocks = (g.cout + 15) / 16, taps = g.kh * g.kw, cb = direct_cin_block(pr);
  std::vector<float> m(uint64_t{blocks} * taps * g.cin * 16, 0.0f);
  if (pr.narrow()) m.assign(v.begin(), v.end());  // (cout, cin): the narrow kernel's rows
  const uint32_t group = cpu::avx512::rows3x3_group_channels(g.cin, g.cout);
  for (uint32_t o = 0; o < g.cout && pr.rows3x3(); ++o)  // [cout / group][taps][cin][group]
    for (uint32_t c = 0; c < g.cin; ++c)
      for (uint32_t t = 0; t < taps; ++t)
        m[((uint64_t{o / group} * taps + t) * g.cin + c) * group + o % group] = v[(uint64_t{o} * g.cin + c) * taps + t];
  for (uint32_t o = 0; o < g.cout && !pr.narrow() && !pr.rows3x3(); ++o)
    for (uint32_t c = 0; c < g.cin; ++c) {
      const uint32_t c0 = c / cb * cb, cbk = std::min(cb, g.cin - c0);
      float* chunk = m.data() + (uint64_t{o / 16} * g.cin + c0) * taps * 16;
      for (uint32_t t = 0; t < taps; ++t)
        chunk[(uint64_t{t} * cbk + c - c0) * 16 + o % 16] = v[(uint64_t{o} * g.cin + c) * taps + t];
    }
  b.resize(uint64_t{blocks} * 16, 0.0f);
  TS_ASSIGN_OR_RETURN(Tensor mh, Tensor::from_vector(m, Shape{static_cast<uint32_t>(m.size())}, DataType::FLOAT32));
  TS_ASSIGN_OR_RETURN(Tensor bh, Tensor::from_vector(b, Shape{static_cast<uint32_t>(b.size())}, DataType::FLOAT32));
  TS_ASSIGN_OR_RETURN(PreparedConv2dWeights w, upload_weights(pr.weights_key, mh, bh, *input.device(), cq_id));
  return launch_direct(input, w, pr, cq_id);
}

// The AVX2 Winograd kernel's weights: U = G g G^T per output and input
// channel (F(2x2, 3x3)), packed per 16-channel block as [16 positions][cin][16],
// and the bias padded to whole blocks, float32 (zeros past cout). The
// transform runs in double on the rounded weights.
StatusOr<Conv2dResult> winograd_with_weights(const Tensor& input, const Tensor& weight,
                                             const std::optional<Tensor>& bias, const Conv2dParams& p,
                                             const Problem& pr, DataType weights_dtype, uint8_t cq_id) {
  const Geometry& g = pr.g;
  TS_ASSIGN_OR_RETURN(Tensor rounded, round_conv2d_weights(weight, p, weights_dtype, input.dtype()));
  TS_ASSIGN_OR_RETURN(std::vector<float> b, bias_values(bias, g));
  TS_ASSIGN_OR_RETURN(const std::vector<float> v, rounded.to_vector());  // (cout, cin, 3, 3)
  const uint32_t blocks = (g.cout + 15) / 16;
  std::vector<float> m(uint64_t{blocks} * 16 * g.cin * 16, 0.0f);
  for (uint32_t o = 0; o < g.cout; ++o)
    for (uint32_t c = 0; c < g.cin; ++c) {
      const float* k = v.data() + (uint64_t{o} * g.cin + c) * 9;
      double gg[4][3];  // G g
      for (int j = 0; j < 3; ++j) {
        gg[0][j] = k[j], gg[3][j] = k[6 + j];
        gg[1][j] = 0.5 * (double{k[j]} + k[3 + j] + k[6 + j]);
        gg[2][j] = 0.5 * (double{k[j]} - k[3 + j] + k[6 + j]);
      }
      for (int i = 0; i < 4; ++i) {
        const double u[4] = {gg[i][0], 0.5 * (gg[i][0] + gg[i][1] + gg[i][2]), 0.5 * (gg[i][0] - gg[i][1] + gg[i][2]),
                             gg[i][2]};
        for (int j = 0; j < 4; ++j)
          m[((uint64_t{o / 16} * 16 + i * 4 + j) * g.cin + c) * 16 + o % 16] = static_cast<float>(u[j]);
      }
    }
  b.resize(uint64_t{blocks} * 16, 0.0f);
  TS_ASSIGN_OR_RETURN(Tensor mh, Tensor::from_vector(m, Shape{static_cast<uint32_t>(m.size())}, DataType::FLOAT32));
  TS_ASSIGN_OR_RETURN(Tensor bh, Tensor::from_vector(b, Shape{static_cast<uint32_t>(b.size())}, DataType::FLOAT32));
  TS_ASSIGN_OR_RETURN(PreparedConv2dWeights w, upload_weights(pr.weights_key, mh, bh, *input.device(), cq_id));
  return launch_direct(input, w, pr, cq_id);
}

StatusOr<Conv2dResult> amx_patches_with_weights(const Tensor& input, const Tensor& weight,
                                                const std::optional<Tensor>& bias, const ConvTranspose2dParams& p,
                                                const Conv2dConfig& config, const Problem& pr, uint8_t cq_id);
StatusOr<Conv2dResult> launch_amx_patches(const Tensor& input, const PreparedConv2dWeights& w,
                                          const ConvTranspose2dParams& p, const Conv2dConfig& config, const Problem& pr,
                                          uint8_t cq_id);

// Whether conv2d_concat's parts can be read by the shards as they stage
// their rows: float32 rows converted for bfloat16 kernels (LoFi on AMX CPUs,
// lowers_to_bf16) on oneDNN's convolution, which gathers every shard's rows
// through source_rows. Elsewhere the rows are read in place (or by kernels
// of Tessera's own), and the inputs are concatenated first.
bool concat_fuses(const Problem& pr) {
  return !pr.g.transposed && pr.input.layout == Layout::ROW_MAJOR &&
         (pr.input.dtype == DataType::FLOAT32 || pr.input.dtype == DataType::BFLOAT16) &&
         pr.kernel == DataType::BFLOAT16 && !pr.direct() && !pr.winograd() && !pr.amx_patches() &&
         pr.cout_padded == 0 && !pr.residual && !pr.depthwise();
}

// `cat`, `whole`: conv2d_concat's parts (`input` their first) and the spec
// of their concatenation; the caller has checked that the problem stages its
// rows on oneDNN's kernel (concat_fuses).
template <class Params>
StatusOr<Conv2dResult> conv_with_weights(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
                                         const Params& p, const Conv2dConfig& config, uint8_t cq_id,
                                         const Conv2dResidual* residual = nullptr, const ConcatParts* cat = nullptr,
                                         const TensorSpec* whole = nullptr) {
  TS_ASSIGN_OR_RETURN(Problem pr, make_problem(input, p, config, residual, whole));
  if (cat && !concat_fuses(pr)) return internal_error("conv2d_concat: the problem does not stage its rows");
  if constexpr (std::is_same_v<Params, ConvTranspose2dParams>) {
    if (pr.amx_patches()) return amx_patches_with_weights(input, weight, bias, p, config, pr, cq_id);
    if (pr.patches()) return patches_with_weights(input, weight, bias, p, pr, config.weights_dtype, cq_id);
  } else {
    if (pr.depthwise()) return depthwise_with_weights(input, weight, bias, p, pr, config.weights_dtype, cq_id);
    if (pr.direct() && pr.winograd())
      return winograd_with_weights(input, weight, bias, p, pr, config.weights_dtype, cq_id);
    if (pr.direct()) return direct_with_weights(input, weight, bias, p, pr, config.weights_dtype, cq_id);
  }
  const Geometry& g = pr.g;
  Device& device = *input.device();
  TS_ASSIGN_OR_RETURN(Tensor rounded, round_weights(weight, p, config.weights_dtype, pr.compute));
  TS_ASSIGN_OR_RETURN(const std::vector<float> bv, bias_values(bias, g));
  // Compile first: the packed weight layout is the chosen kernel's.
  TS_ASSIGN_OR_RETURN(Tensor output, output_tensor(input, pr));
  TS_ASSIGN_OR_RETURN(TensorAccess src, make_access(input));
  TS_ASSIGN_OR_RETURN(TensorAccess dst, make_access(output));
  std::optional<TensorAccess> res;
  if (residual) {
    TS_ASSIGN_OR_RETURN(res, make_access(residual->tensor));
  }
  TS_ASSIGN_OR_RETURN(const Program* prog,
                      device.program_cache().get_or_compile(pr.key, device.may_compile_programs(cq_id), [&] {
                        return compile(device, pr, src, dst, res ? &*res : nullptr);
                      }));
  auto* plan = static_cast<ConvPlan*>(prog->plan.get());
  // Pack on the host, then copy to the device. Padded output channels
  // (Problem::cout_padded) get zero weights and bias: (out, in, kh, kw)
  // rows appended.
  TS_ASSIGN_OR_RETURN(std::vector<float> wv, rounded.to_vector());
  const Geometry kg = kernel_geometry(pr);
  wv.resize(wv.size() / g.cout * kg.cout, 0.f);
  std::vector<float> kernel_bias = bv;
  kernel_bias.resize(kg.cout, 0.f);
  const size_t packed_bytes = plan->packed_bytes;
  Tensor packed_host =
      allocate_tensor_on_host({Shape{static_cast<uint32_t>(packed_bytes)}, DataType::UINT8, Layout::ROW_MAJOR});
  std::vector<uint16_t> wb;
  void* user = wv.data();
  if (pr.kernel == DataType::BFLOAT16) {
    wb.resize(wv.size());
    float_to_bfloat16(wv.data(), wb.data(), wv.size());
    user = wb.data();
  }
  TS_RETURN_IF_ERROR(guard("packing the weights", [&] {
    const memory::desc user_md = weights_user_desc(kg, pr.kernel);
    dnnl::stream stream(plan->engine);
    for (const ConvPlan::PackedSlice& ps : plan->packing) {
      // A slice of output channels is a contiguous run of (out, in, kh, kw)
      // rows: a dense desc of its own from its first byte (oneDNN's
      // Winograd weight reorder ignores a sub-memory's offset).
      const memory::desc slice = ps.ocs == kg.cout ? user_md
                                                   : memory::desc({static_cast<memory::dim>(ps.ocs), user_md.dims()[1],
                                                                   user_md.dims()[2], user_md.dims()[3]},
                                                                  user_md.data_type(), memory::format_tag::oihw);
      const uint64_t per_oc = user_md.get_size() / kg.cout;
      memory from(slice, plan->engine, static_cast<std::byte*>(user) + uint64_t{ps.oc0} * per_oc);
      memory to(ps.desc, plan->engine, static_cast<std::byte*>(packed_host.host_data()) + ps.offset);
      dnnl::reorder(from, to).execute(stream, from, to);
    }
    stream.wait();
  }));
  TS_ASSIGN_OR_RETURN(Tensor bias_host, Tensor::from_vector(kernel_bias, Shape{1, 1, 1, kg.cout}, DataType::FLOAT32));
  TS_ASSIGN_OR_RETURN(PreparedConv2dWeights w, upload_weights(pr.weights_key, packed_host, bias_host, device, cq_id));
  return launch_conv(input, std::move(output), w, pr, *prog, cq_id, cat);
}

template <class Params>
StatusOr<Conv2dResult> conv_with_prepared(const Tensor& input, const PreparedConv2dWeights& w, const Params& p,
                                          const Conv2dConfig& config, uint8_t cq_id,
                                          const Conv2dResidual* residual = nullptr, const ConcatParts* cat = nullptr,
                                          const TensorSpec* whole = nullptr) {
  TS_ASSIGN_OR_RETURN(Problem pr, make_problem(input, p, config, residual, whole));
  if (cat && !concat_fuses(pr)) return internal_error("conv2d_concat: the problem does not stage its rows");
  const std::string_view op = pr.g.transposed ? "conv_transpose2d" : "conv2d";
  if (w.key != pr.weights_key)
    return invalid_argument_error("{}: the prepared weights are for '{}', not for '{}'", op, w.key, pr.weights_key);
  if (w.weight.device() != input.device() || !w.weight.is_allocated() || !w.bias.is_allocated())
    return failed_precondition_error("{}: the prepared weights are not allocated on the input's device", op);
  if constexpr (std::is_same_v<Params, ConvTranspose2dParams>) {
    if (pr.amx_patches()) return launch_amx_patches(input, w, p, config, pr, cq_id);
    if (pr.patches()) return launch_patches(input, w, p, pr, cq_id);
  } else {
    if (pr.depthwise()) return launch_depthwise(input, w, pr, cq_id);
    if (pr.direct()) return launch_direct(input, w, pr, cq_id);
  }
  Device& device = *input.device();
  // Same problem in other memory configs: its own program (compiled now
  // unless a trace is being captured), the same packed weights.
  TS_ASSIGN_OR_RETURN(Tensor output, output_tensor(input, pr));
  TS_ASSIGN_OR_RETURN(TensorAccess src, make_access(input));
  TS_ASSIGN_OR_RETURN(TensorAccess dst, make_access(output));
  std::optional<TensorAccess> res;
  if (residual) {
    TS_ASSIGN_OR_RETURN(res, make_access(residual->tensor));
  }
  TS_ASSIGN_OR_RETURN(const Program* prog,
                      device.program_cache().get_or_compile(pr.key, device.may_compile_programs(cq_id), [&] {
                        return compile(device, pr, src, dst, res ? &*res : nullptr);
                      }));
  const uint64_t packed = static_cast<ConvPlan*>(prog->plan.get())->packed_bytes;
  if (packed != w.weight.shape().volume())
    return failed_precondition_error(
        "{}: the prepared weights hold {} B, the kernel for '{}' packs {} B; prepare "
        "them again",
        op, w.weight.shape().volume(), pr.key, packed);
  return launch_conv(input, std::move(output), w, pr, *prog, cq_id, cat);
}

}  // namespace

namespace {

// Where conv2d stages activations it must convert anyway (tiles, multi-shard
// tensors): rows as one DRAM shard, dense, so the kernel reads or writes them
// in place; interleaving them over the banks would cost the kernel another
// gather or scatter copy. Rows narrower than 4 bytes (and transposed convs,
// whose patch kernel is a matmul over interleaved rows) stay interleaved.
MemoryConfig staging(uint32_t rows, uint32_t cols, DataType dtype, bool dense) {
  if (!dense || (uint64_t{cols} * element_size(dtype)) % 4 != 0) return DRAM_MEMORY_CONFIG;
  return MemoryConfig{TensorMemoryLayout::HEIGHT_SHARDED, BufferType::DRAM,
                      ShardSpec{CoreRangeSet(CoreRange({0, 0}, {0, 0})), {rows, cols}, ShardOrientation::ROW_MAJOR}};
}

// The input as the kernel reads it: float32 / bfloat16 rows, interleaved or dense.
StatusOr<Tensor> kernel_input(const Tensor& input, std::string_view op, bool dense, bool direct, uint8_t cq_id) {
  TS_RETURN_IF_ERROR(ops::require_device_tensor(input, op));
  // The oneDNN conv2d kernel reads any tiles or shards itself (each shard
  // untilizes or gathers the rows it reads); the depthwise kernel and the
  // transposed conv's patch matmul need interleaved rows.
  if (direct) return input;
  const Shape& s = input.shape();
  const uint32_t rows = static_cast<uint32_t>(s.volume() / s[-1]);
  const DataType dt = input.dtype() == DataType::FLOAT32 ? DataType::FLOAT32 : DataType::BFLOAT16;
  if (input.layout() == Layout::TILE)
    return untilize(input, {.memory_config = staging(rows, s[-1], dt, dense), .dtype = dt, .cq_id = cq_id});
  if (input.memory_config().is_sharded()) return to_memory_config(input, staging(rows, s[-1], dt, dense), cq_id);
  return input;
}

// The L1 plan of one slice of a DRAM-sliced conv: the output rows (height)
// or columns (width) of slice `n` of `slices`, and the input they read.
Conv2dGeometry slice_geometry(Conv2dGeometry g, Conv2dSliceType type, uint32_t slices) {
  if (type == Conv2dSliceType::DRAM_HEIGHT) {
    g.output_height = (g.output_height + slices - 1) / slices;
    g.padded_height = (g.output_height - 1) * g.stride_h + g.dilation_h * (g.kernel_h - 1) + 1;
  } else {
    g.output_width = (g.output_width + slices - 1) / slices;
    g.padded_width = (g.output_width - 1) * g.stride_w + g.dilation_w * (g.kernel_w - 1) + 1;
  }
  return g;
}

StatusOr<Conv2dL1Estimate> plan_l1(const Conv2dGeometry& g, const Conv2dConfig& c, const Tensor& input,
                                   DataType out_dt) {
  const CoreCoord grid = input.device()->descriptor().grid;
  const MemoryConfig& in = input.memory_config();
  std::optional<TensorMemoryLayout> layout = c.shard_layout;
  std::optional<CoreRangeSet> cores;
  if (c.override_sharding_config) cores = c.core_grid;
  if (!layout && in.is_sharded() && in.buffer_type == BufferType::L1 && !c.reshard_if_not_optimal) {
    // A sharded L1 input keeps its layout and grid when the output splits
    // evenly over them (else the conv re-plans, as with reshard_if_not_optimal).
    StatusOr<Conv2dParallelConfig> same =
        determine_conv2d_parallel_config(g, in.memory_layout, c.output_layout, grid, in.shard_spec->grid);
    if (same.ok()) return estimate_conv2d_l1(g, *same, c, input.dtype(), out_dt);
  }
  if (!layout) return auto_shard_conv2d(g, c, input.dtype(), out_dt, grid);
  TS_ASSIGN_OR_RETURN(Conv2dParallelConfig pc,
                      determine_conv2d_parallel_config(g, *layout, c.output_layout, grid, cores));
  return estimate_conv2d_l1(g, pc, c, input.dtype(), out_dt);
}

// The output memory config the knobs ask for (Conv2dConfig), after checking
// that the conv's L1 plan fits; nullopt: the default.
StatusOr<std::optional<MemoryConfig>> plan_output(const Tensor& input, const Conv2dGeometry& g, const Conv2dConfig& c,
                                                  DataType out_dt, std::string_view op) {
  TS_RETURN_IF_ERROR(c.validate());
  Device& device = *input.device();
  const MemoryConfig& in = input.memory_config();
  uint64_t freed = 0;
  if (c.deallocate_activation && in.buffer_type == BufferType::L1)
    freed = input.spec().device_bytes_per_bank(device.descriptor(), device.alignment(BufferType::L1));
  const std::optional<Conv2dSliceConfig>& slice = c.slice_config;
  const bool l1_input = in.is_sharded() && in.buffer_type == BufferType::L1;
  if (slice ? slice->slice_type == Conv2dSliceType::L1_FULL : (c.shard_layout.has_value() || l1_input)) {
    TS_ASSIGN_OR_RETURN(Conv2dL1Estimate e, plan_l1(g, c, input, out_dt));
    TS_RETURN_IF_ERROR(check_conv2d_l1(e, device, freed));
    return std::optional<MemoryConfig>(c.output_memory_config.value_or(e.parallel.output_memory_config));
  }
  if (!slice) return std::optional<MemoryConfig>();
  if (slice->slice_type == Conv2dSliceType::DRAM_CHANNEL)
    return invalid_argument_error(
        "{}: DRAM_CHANNEL slicing is for ops with no reduction over channels; a convolution sums over them "
        "(use channel slicing in cnn::Conv2d)",
        op);
  const uint32_t extent = slice->slice_type == Conv2dSliceType::DRAM_HEIGHT ? g.output_height : g.output_width;
  if (slice->num_slices > extent)
    return invalid_argument_error("{}: {} {} slices for an output {} {} long", op, slice->num_slices,
                                  conv2d_slice_type_name(slice->slice_type), extent,
                                  slice->slice_type == Conv2dSliceType::DRAM_HEIGHT ? "rows" : "columns");
  // Each slice runs in L1 on its own (the input in DRAM is not held there).
  Status last = ok_status();
  for (uint32_t n = slice->num_slices ? slice->num_slices : 1; n <= extent; ++n) {
    TS_ASSIGN_OR_RETURN(Conv2dL1Estimate e, plan_l1(slice_geometry(g, slice->slice_type, n), c, input, out_dt));
    last = check_conv2d_l1(e, device, freed);
    if (last.ok() || slice->num_slices) break;
  }
  TS_RETURN_IF_ERROR(last);
  return std::optional<MemoryConfig>(c.output_memory_config.value_or(DRAM_MEMORY_CONFIG));
}

// Runs `core` on the kernel's input and config, then gives the output the
// layout, dtype and memory config asked for.
template <class Core>
StatusOr<Conv2dResult> with_io(const Tensor& input, const Conv2dGeometry& g, const Conv2dConfig& config,
                               std::string_view op, uint8_t cq_id, Core core) {
  TS_RETURN_IF_ERROR(ops::require_device_tensor(input, op));
  const DataType in_dt = input.dtype();
  const DataType out_dt = config.dtype.value_or(is_block_float(in_dt) ? DataType::BFLOAT16 : in_dt);
  if (is_block_float(out_dt) && config.output_layout != Layout::TILE)
    return invalid_argument_error("{}: a {} output needs output_layout TILE (block-float tensors are tiles)", op,
                                  data_type_name(out_dt));
  TS_ASSIGN_OR_RETURN(const std::optional<MemoryConfig> planned, plan_output(input, g, config, out_dt, op));
  const bool dense = op == "conv2d";
  const bool depthwise_shape = g.groups > 1 && g.groups == g.in_channels && g.out_channels == g.in_channels;
  const DataType kernel_out = !is_block_float(out_dt)      ? out_dt
                              : in_dt == DataType::FLOAT32 ? DataType::FLOAT32
                                                           : DataType::BFLOAT16;
  // Kernels of Tessera's own read and write rows (the oneDNN one reads
  // tiles and shards itself and tilizes its own output).
  const bool own_kernel = depthwise_shape || conv::direct_avx2_shape(op != "conv2d", g.groups, g.kernel_h, g.kernel_w,
                                                                     g.in_channels, in_dt, kernel_out);
  TS_ASSIGN_OR_RETURN(Tensor x, kernel_input(input, op, dense, dense && !own_kernel, cq_id));
  const MemoryConfig mc = config.output_memory_config.value_or(
      planned.value_or(input.memory_config().is_sharded() ? DRAM_MEMORY_CONFIG : input.memory_config()));
  Conv2dConfig kernel = config;
  kernel.dtype = kernel_out;
  kernel.output_layout = Layout::ROW_MAJOR;
  // The oneDNN kernel tilizes its own rows into the final tiles (depthwise
  // shapes may take another kernel, and channel shards cannot: they tilize
  // after). Otherwise the kernel
  // writes the final memory config when no conversion follows, else dense
  // rows for the conversion to read.
  // Channel shards each own a slice of every row, so none can tilize rows.
  // (Asked without a residual: a residual only ever turns channel shards
  // into row shards, which then tilize after all.)
  const bool channel_shards =
      dense && splits_channels(g, false, static_cast<uint32_t>(input.device()->workers().num_threads()), false);
  const bool fused_tiles = dense && config.output_layout == Layout::TILE && !own_kernel && !channel_shards;
  const bool convert = !fused_tiles && (config.output_layout == Layout::TILE || mc.is_sharded());
  if (fused_tiles) {
    kernel.output_layout = Layout::TILE;
    kernel.dtype = out_dt;
    kernel.output_memory_config = mc;
  } else {
    kernel.output_memory_config =
        convert ? staging(static_cast<uint32_t>(g.output_rows()), g.out_channels, *kernel.dtype, dense) : mc;
  }
  kernel.shard_layout.reset();
  kernel.slice_config.reset();
  TS_ASSIGN_OR_RETURN(Conv2dResult r, core(x, kernel));
  if (fused_tiles) {
    // already final
  } else if (config.output_layout == Layout::TILE) {
    TS_ASSIGN_OR_RETURN(r.output, tilize(r.output, {.memory_config = mc, .dtype = out_dt, .cq_id = cq_id}));
  } else if (r.output.memory_config() != mc) {
    TS_ASSIGN_OR_RETURN(r.output, to_memory_config(r.output, mc, cq_id));
  }
  if (config.deallocate_activation) {
    Tensor in = input;
    deallocate(in, true);
  }
  return r;
}

// The 1x1 convolution an AMX patch transpose runs (is_amx_patch): output
// channel (ky * kw + kx) * Cout + co of pixel (y, x) is output pixel
// (y * kh + ky, x * kw + kx), channel co. Its weights arrive rounded to the
// transposed conv's weights dtype, so it keeps them at the compute dtype
// (exact); its output is dense DRAM rows for the permute to read.
struct AmxPatchConv {
  Conv2dParams params;
  Conv2dConfig config;
};
AmxPatchConv amx_patch_conv(const ConvTranspose2dParams& p, const Conv2dConfig& config, DataType compute) {
  AmxPatchConv c;
  c.params.batch_size = p.batch_size;
  c.params.input_height = p.input_height;
  c.params.input_width = p.input_width;
  c.params.in_channels = p.in_channels;
  c.params.out_channels = p.kernel_size[0] * p.kernel_size[1] * p.out_channels;
  c.params.kernel_size = {1, 1};
  c.params.activation = p.activation;
  c.config = config;
  c.config.weights_dtype = compute;
  c.config.output_layout = Layout::ROW_MAJOR;
  c.config.output_memory_config = DRAM_MEMORY_CONFIG;
  c.config.shard_layout.reset();
  c.config.slice_config.reset();
  c.config.deallocate_activation = false;
  return c;
}

// The 1x1 conv's (N * H, W, kh, kw * Cout) result permuted to (N * H, kh, W,
// kw * Cout): byte for byte the (N, OH, OW, Cout) output, in the problem's
// output memory config.
StatusOr<Conv2dResult> place_patches(Conv2dResult r, const Problem& pr, uint8_t cq_id) {
  const Geometry& g = pr.g;
  TS_ASSIGN_OR_RETURN(Tensor grid, r.output.view(Shape{g.n * g.h, g.w, g.kh, g.kw * g.cout}));
  const int perm[] = {0, 2, 1, 3};
  TS_ASSIGN_OR_RETURN(Tensor placed, permute(grid, perm, {.memory_config = pr.output.memory_config, .cq_id = cq_id}));
  TS_ASSIGN_OR_RETURN(r.output, as_output_rows(placed, g, cq_id));
  r.output_height = g.oh;
  r.output_width = g.ow;
  return r;
}

StatusOr<Conv2dResult> amx_patches_with_weights(const Tensor& input, const Tensor& weight,
                                                const std::optional<Tensor>& bias, const ConvTranspose2dParams& p,
                                                const Conv2dConfig& config, const Problem& pr, uint8_t cq_id) {
  const Geometry& g = pr.g;
  TS_ASSIGN_OR_RETURN(Tensor rounded, round_conv_transpose2d_weights(weight, p, config.weights_dtype, pr.compute));
  TS_ASSIGN_OR_RETURN(const std::vector<float> bv, bias_values(bias, g));
  TS_ASSIGN_OR_RETURN(const std::vector<float> v, rounded.to_vector());
  // (Cin, Cout, kh, kw) -> (kh * kw * Cout, Cin, 1, 1).
  const uint32_t taps = g.kh * g.kw, cols = taps * g.cout;
  std::vector<float> m(uint64_t{cols} * g.cin), b(cols);
  for (uint32_t ci = 0; ci < g.cin; ++ci)
    for (uint32_t co = 0; co < g.cout; ++co)
      for (uint32_t k = 0; k < taps; ++k)
        m[(uint64_t{k} * g.cout + co) * g.cin + ci] = v[(uint64_t{ci} * g.cout + co) * taps + k];
  for (uint32_t n = 0; n < cols; ++n) b[n] = bv[n % g.cout];
  TS_ASSIGN_OR_RETURN(Tensor mh, Tensor::from_vector(m, Shape{cols, g.cin, 1, 1}, DataType::FLOAT32));
  TS_ASSIGN_OR_RETURN(Tensor bh, Tensor::from_vector(b, Shape{cols}, DataType::FLOAT32));
  const AmxPatchConv c = amx_patch_conv(p, config, pr.compute);
  TS_ASSIGN_OR_RETURN(Conv2dResult r, conv_with_weights(input, mh, bh, c.params, c.config, cq_id));
  r.weights.key = pr.weights_key;  // the transposed conv's: conv_transpose2d takes them back
  return place_patches(std::move(r), pr, cq_id);
}

StatusOr<Conv2dResult> launch_amx_patches(const Tensor& input, const PreparedConv2dWeights& w,
                                          const ConvTranspose2dParams& p, const Conv2dConfig& config, const Problem& pr,
                                          uint8_t cq_id) {
  const AmxPatchConv c = amx_patch_conv(p, config, pr.compute);
  TS_ASSIGN_OR_RETURN(const Problem inner, make_problem(input, c.params, c.config));
  PreparedConv2dWeights wi = w;
  wi.key = inner.weights_key;
  TS_ASSIGN_OR_RETURN(Conv2dResult r, conv_with_prepared(input, wi, c.params, c.config, cq_id));
  r.weights = w;
  return place_patches(std::move(r), pr, cq_id);
}

}  // namespace

StatusOr<Conv2dResult> conv2d(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
                              const Conv2dParams& p, const Conv2dConfig& config, uint8_t cq_id) {
  return with_io(
      input, conv2d_geometry(p, bias.has_value()), config, "conv2d", cq_id,
      [&](const Tensor& x, const Conv2dConfig& c) { return conv_with_weights(x, weight, bias, p, c, cq_id); });
}

bool conv2d_rounds_input_to_bfloat16(const Conv2dParams& p, const Conv2dConfig& config) {
  return lowers_to_bf16(geometry(p), DataType::FLOAT32, config);
}
bool conv_transpose2d_rounds_input_to_bfloat16(const ConvTranspose2dParams& p, const Conv2dConfig& config) {
  return lowers_to_bf16(geometry(p), DataType::FLOAT32, config);
}

// Prepared weights always carry a bias (zeros without one): the plan counts it.
StatusOr<Conv2dResult> conv2d(const Tensor& input, const PreparedConv2dWeights& w, const Conv2dParams& p,
                              const Conv2dConfig& config, uint8_t cq_id) {
  return with_io(input, conv2d_geometry(p, true), config, "conv2d", cq_id,
                 [&](const Tensor& x, const Conv2dConfig& c) { return conv_with_prepared(x, w, p, c, cq_id); });
}

namespace {

// conv2d_concat's fused launch: the parts, their concatenation's spec and
// the kernel's config; nullopt where the inputs are concatenated first
// (concat_fuses, and a plain output config: rows, interleaved).
struct FusedConcat {
  ConcatParts cat;
  TensorSpec whole;
  Conv2dConfig kernel;
};
StatusOr<std::optional<FusedConcat>> plan_concat(std::span<const Tensor> inputs, const Conv2dParams& p,
                                                 const Conv2dConfig& config) {
  if (inputs.empty()) return invalid_argument_error("conv2d_concat: expected at least one input, found none");
  for (size_t i = 0; i < inputs.size(); ++i)
    TS_RETURN_IF_ERROR(ops::require_device_tensor(inputs[i], "conv2d_concat", fmt::format("input {}", i)));
  const Tensor& first = inputs[0];
  const auto lead = [](const Shape& s) { return s.dims().first(static_cast<size_t>(s.rank() - 1)); };
  uint64_t channels = 0;
  bool plain = inputs.size() > 1 && inputs.size() <= kMaxConcatParts;
  for (const Tensor& t : inputs) {
    if (t.device() != first.device())
      return invalid_argument_error("conv2d_concat: the inputs are on different devices");
    if (t.shape().rank() != first.shape().rank() || !std::ranges::equal(lead(t.shape()), lead(first.shape())))
      return invalid_argument_error(
          "conv2d_concat: expected inputs that differ only in channels (the last dim), "
          "found {} and {}",
          first.shape().to_string(), t.shape().to_string());
    channels += t.shape()[-1];
    // gather_rows reads any rows; the parts share one dtype, the whole's.
    plain = plain && (t.dtype() == DataType::FLOAT32 || t.dtype() == DataType::BFLOAT16) &&
            t.dtype() == first.dtype() && t.layout() == Layout::ROW_MAJOR;
  }
  if (channels != p.in_channels)
    return invalid_argument_error("conv2d_concat: the inputs' channels sum to {}, expected in_channels = {}", channels,
                                  p.in_channels);
  plain = plain && config.output_layout == Layout::ROW_MAJOR && !config.shard_layout && !config.slice_config &&
          !(config.output_memory_config && config.output_memory_config->is_sharded()) && !config.deallocate_activation;
  if (!plain) return std::optional<FusedConcat>();
  FusedConcat f;
  std::vector<uint32_t> dims(first.shape().dims().begin(), first.shape().dims().end());
  dims.back() = static_cast<uint32_t>(channels);
  f.whole = TensorSpec{Shape(std::span<const uint32_t>(dims)), first.dtype(), Layout::ROW_MAJOR, first.memory_config()};
  f.kernel = config;
  f.kernel.dtype = config.dtype.value_or(first.dtype());
  f.kernel.output_memory_config = config.output_memory_config.value_or(first.memory_config());
  // A problem conv2d refuses is refused again, with its error, on the way
  // through concat.
  StatusOr<Problem> pr = make_problem(first, p, f.kernel, nullptr, &f.whole);
  if (!pr.ok() || !concat_fuses(*pr)) return std::optional<FusedConcat>();
  f.cat.count = static_cast<uint32_t>(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    TS_ASSIGN_OR_RETURN(f.cat.part[i], make_access(inputs[i]));
    f.cat.cols[i] = inputs[i].shape()[-1];
  }
  return std::optional<FusedConcat>(std::move(f));
}

StatusOr<Tensor> concat_channels(std::span<const Tensor> inputs, uint8_t cq_id) {
  return concat(inputs, inputs[0].shape().rank() - 1, {.cq_id = cq_id});
}

}  // namespace

StatusOr<Conv2dResult> conv2d_concat(std::span<const Tensor> inputs, const Tensor& weight,
                                     const std::optional<Tensor>& bias, const Conv2dParams& p,
                                     const Conv2dConfig& config, uint8_t cq_id) {
  TS_ASSIGN_OR_RETURN(std::optional<FusedConcat> f, plan_concat(inputs, p, config));
  if (f) return conv_with_weights(inputs[0], weight, bias, p, f->kernel, cq_id, nullptr, &f->cat, &f->whole);
  if (inputs.size() == 1) return conv2d(inputs[0], weight, bias, p, config, cq_id);
  TS_ASSIGN_OR_RETURN(Tensor x, concat_channels(inputs, cq_id));
  return conv2d(x, weight, bias, p, config, cq_id);
}

StatusOr<Conv2dResult> conv2d_concat(std::span<const Tensor> inputs, const PreparedConv2dWeights& w,
                                     const Conv2dParams& p, const Conv2dConfig& config, uint8_t cq_id) {
  TS_ASSIGN_OR_RETURN(std::optional<FusedConcat> f, plan_concat(inputs, p, config));
  if (f) return conv_with_prepared(inputs[0], w, p, f->kernel, cq_id, nullptr, &f->cat, &f->whole);
  if (inputs.size() == 1) return conv2d(inputs[0], w, p, config, cq_id);
  TS_ASSIGN_OR_RETURN(Tensor x, concat_channels(inputs, cq_id));
  return conv2d(x, w, p, config, cq_id);
}

namespace {

// Whether the conv kernel adds the residual itself (Conv2dResidual): rows in
// and out, not depthwise, neither activation a hardsigmoid.
bool residual_fuses(const Tensor& input, const Conv2dParams& p, const Conv2dResidual& residual,
                    const Conv2dConfig& config) {
  const DataType in = input.dtype();
  const DataType out = config.dtype.value_or(is_block_float(in) ? DataType::BFLOAT16 : in);
  const bool depthwise = p.groups > 1 && p.groups == p.in_channels && p.out_channels == p.in_channels;
  // oneDNN 2.6's AVX2 convs have no activation-then-sum chain of post-ops
  // (they fall back to its reference kernel: minutes per frame for YOLO's
  // bottlenecks), so on AVX2-only CPUs an activation before the add fuses
  // only into Tessera's direct kernel.
  const bool avx2_fusable =
      kernel_isa() != KernelIsa::kAvx2 || p.activation.is_identity() ||
      conv::direct_avx2_shape(false, p.groups, p.kernel_size[0], p.kernel_size[1], p.in_channels, in, out);
  const bool fusable = !depthwise && config.output_layout == Layout::ROW_MAJOR && !is_block_float(out) &&
                       !config.output_memory_config.value_or(input.memory_config()).is_sharded() &&
                       !input.memory_config().is_sharded() && !config.shard_layout && !config.slice_config &&
                       p.activation.op != UnaryOpType::HARDSIGMOID &&
                       residual.activation.op != UnaryOpType::HARDSIGMOID &&
                       residual.tensor.layout() == Layout::ROW_MAJOR && residual.tensor.dtype() == out &&
                       !residual.tensor.memory_config().is_sharded() && avx2_fusable;
  return fusable;
}

// Runs `run(&residual, config)` when the kernel can add the residual itself,
// else `run(nullptr, config)` (float32 rows, see below) and one add with the
// residual's activation.
template <class Run>
StatusOr<Conv2dResult> with_residual(const Tensor& input, const Conv2dParams& p, const Conv2dResidual& residual,
                                     const Conv2dConfig& config, uint8_t cq_id, Run run, bool may_widen = true) {
  TS_RETURN_IF_ERROR(ops::require_device_tensor(input, "conv2d"));
  TS_RETURN_IF_ERROR(ops::require_device_tensor(residual.tensor, "conv2d", "residual"));
  TS_RETURN_IF_ERROR(p.validate());
  const uint64_t rows = uint64_t{p.batch_size} * p.output_height() * p.output_width();
  if (residual.tensor.shape().volume() != rows * p.out_channels ||
      residual.tensor.shape().dims().back() != p.out_channels)
    return invalid_argument_error("conv2d: the residual has shape {}; expected the output's ({}, {}, {}, {})",
                                  residual.tensor.shape().to_string(), p.batch_size, p.output_height(),
                                  p.output_width(), p.out_channels);
  if (residual_fuses(input, p, residual, config)) return run(&residual, config);
  const DataType in = input.dtype();
  const DataType out = config.dtype.value_or(is_block_float(in) ? DataType::BFLOAT16 : in);
  // A float32 residual on bfloat16 rows: the conv's rows stay float32 until
  // the add rounds its sum once, as the fused kernels do. Rounding the conv
  // first lost up to half a bfloat16 ulp of its value, which a residual
  // that cancels it leaves standing beside a small sum.
  const bool wide = may_widen && out == DataType::BFLOAT16 && residual.tensor.dtype() == DataType::FLOAT32 &&
                    config.output_layout == Layout::ROW_MAJOR;
  Conv2dConfig conv_config = config;
  if (wide) conv_config.dtype = DataType::FLOAT32;
  TS_ASSIGN_OR_RETURN(Conv2dResult r, run(nullptr, conv_config));
  TS_ASSIGN_OR_RETURN(Tensor res, reshape(residual.tensor, r.output.shape()));
  TS_ASSIGN_OR_RETURN(r.output, add(r.output, res, {.dtype = out, .activation = residual.activation, .cq_id = cq_id}));
  return r;
}

}  // namespace

StatusOr<Conv2dResult> conv2d_with_residual(const Tensor& input, const Tensor& weight,
                                            const std::optional<Tensor>& bias, const Conv2dParams& p,
                                            const Conv2dResidual& residual, const Conv2dConfig& config, uint8_t cq_id) {
  return with_residual(input, p, residual, config, cq_id, [&](const Conv2dResidual* fused, const Conv2dConfig& cfg) {
    return with_io(
        input, conv2d_geometry(p, bias.has_value()), cfg, "conv2d", cq_id,
        [&](const Tensor& x, const Conv2dConfig& c) { return conv_with_weights(x, weight, bias, p, c, cq_id, fused); });
  });
}

StatusOr<Conv2dResult> conv2d_with_residual(const Tensor& input, const PreparedConv2dWeights& w, const Conv2dParams& p,
                                            const Conv2dResidual& residual, const Conv2dConfig& config, uint8_t cq_id) {
  // Weights prepared by a call that left float32 rows for its add (see
  // with_residual) keep doing so; others, prepared for bfloat16 rows, add
  // to those.
  const bool wide_weights = w.key.find(weights_key_rows(DataType::FLOAT32)) != std::string::npos;
  return with_residual(
      input, p, residual, config, cq_id,
      [&](const Conv2dResidual* fused, const Conv2dConfig& cfg) {
        return with_io(
            input, conv2d_geometry(p, true), cfg, "conv2d", cq_id,
            [&](const Tensor& x, const Conv2dConfig& c) { return conv_with_prepared(x, w, p, c, cq_id, fused); });
      },
      wide_weights);
}

StatusOr<Conv2dResult> conv_transpose2d(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
                                        const ConvTranspose2dParams& p, const Conv2dConfig& config, uint8_t cq_id) {
  return with_io(
      input, conv2d_geometry(p, bias.has_value()), config, "conv_transpose2d", cq_id,
      [&](const Tensor& x, const Conv2dConfig& c) { return conv_with_weights(x, weight, bias, p, c, cq_id); });
}

StatusOr<Conv2dResult> conv_transpose2d(const Tensor& input, const PreparedConv2dWeights& w,
                                        const ConvTranspose2dParams& p, const Conv2dConfig& config, uint8_t cq_id) {
  return with_io(input, conv2d_geometry(p, true), config, "conv_transpose2d", cq_id,
                 [&](const Tensor& x, const Conv2dConfig& c) { return conv_with_prepared(x, w, p, c, cq_id); });
}

namespace {

// The config with_io hands the kernel for a row-major output: the call the
// explanation describes.
Conv2dConfig explained_config(const Tensor& input, const Conv2dConfig& config) {
  Conv2dConfig k = config;
  const DataType in_dt = input.dtype();
  const DataType out_dt = config.dtype.value_or(is_block_float(in_dt) ? DataType::BFLOAT16 : in_dt);
  k.dtype = !is_block_float(out_dt) ? out_dt : in_dt == DataType::FLOAT32 ? DataType::FLOAT32 : DataType::BFLOAT16;
  k.output_layout = Layout::ROW_MAJOR;
  k.output_memory_config = config.output_memory_config.value_or(
      input.memory_config().is_sharded() ? DRAM_MEMORY_CONFIG : input.memory_config());
  k.shard_layout.reset();
  k.slice_config.reset();
  return k;
}

template <class Params>
StatusOr<std::string> explain_problem(const Tensor& input, const Params& p, const Conv2dConfig& config,
                                      const Conv2dResidual* residual, const TensorSpec* whole) {
  conv::ConvSelection s;
  TS_ASSIGN_OR_RETURN(const Problem pr, make_problem(input, p, config, residual, whole, &s));
  const std::string why = conv::explain(s);
  const size_t first_line = why.find('\n');
  return fmt::format("{} for {}:{}->{}{}", why.substr(0, first_line), pr.g.descriptor, short_dtype_name(pr.input.dtype),
                     short_dtype_name(pr.output.dtype), first_line == std::string::npos ? "" : why.substr(first_line));
}

}  // namespace

StatusOr<std::string> explain_conv2d(const Tensor& input, const Conv2dParams& p, const Conv2dConfig& config,
                                     const Conv2dResidual* residual) {
  TS_RETURN_IF_ERROR(ops::require_device_tensor(input, "conv2d"));
  if (residual && !residual_fuses(input, p, *residual, config)) residual = nullptr;  // a separate add follows
  return explain_problem(input, p, explained_config(input, config), residual, nullptr);
}

StatusOr<std::string> explain_conv2d_concat(std::span<const Tensor> inputs, const Conv2dParams& p,
                                            const Conv2dConfig& config) {
  TS_ASSIGN_OR_RETURN(std::optional<FusedConcat> f, plan_concat(inputs, p, config));
  if (f) return explain_problem(inputs[0], p, f->kernel, nullptr, &f->whole);
  if (inputs.size() == 1) return explain_conv2d(inputs[0], p, config);
  // Concatenated first: the conv reads the whole rows.
  const Tensor& first = inputs[0];
  std::vector<uint32_t> dims(first.shape().dims().begin(), first.shape().dims().end());
  dims.back() = p.in_channels;
  const TensorSpec whole{Shape(std::span<const uint32_t>(dims)), first.dtype(), Layout::ROW_MAJOR,
                         first.memory_config()};
  return explain_problem(first, p, explained_config(first, config), nullptr, &whole);
}

StatusOr<std::string> explain_conv_transpose2d(const Tensor& input, const ConvTranspose2dParams& p,
                                               const Conv2dConfig& config) {
  TS_RETURN_IF_ERROR(ops::require_device_tensor(input, "conv_transpose2d"));
  return explain_problem(input, p, explained_config(input, config), nullptr, nullptr);
}

std::string_view conv2d_slice_type_name(Conv2dSliceType t) {
  switch (t) {
    case Conv2dSliceType::DRAM_HEIGHT:
      return "DRAM_HEIGHT";
    case Conv2dSliceType::DRAM_WIDTH:
      return "DRAM_WIDTH";
    case Conv2dSliceType::L1_FULL:
      return "L1_FULL";
    case Conv2dSliceType::DRAM_CHANNEL:
      return "DRAM_CHANNEL";
  }
  return "?";
}

Status Conv2dConfig::validate() const {
  if (act_block_h_override % 32 != 0)
    return invalid_argument_error("Config Error: act_block_h_override must be a multiple of 32 (tile height).");
  if (act_block_w_div == 0) return invalid_argument_error("conv2d: act_block_w_div must be >= 1, got 0");
  if (override_sharding_config && reshard_if_not_optimal)
    return invalid_argument_error(
        "Incorrect config provided: reshard_if_not_optimal and override_sharding_config cannot both be set.");
  if (override_sharding_config && !core_grid)
    return invalid_argument_error("If override_sharding_config is set, core_grid must be set as well.");
  if (override_sharding_config && !shard_layout)
    return invalid_argument_error("If override_sharding_config is set, shard_layout must be set as well.");
  if (shard_layout == TensorMemoryLayout::INTERLEAVED)
    return invalid_argument_error("conv2d: shard_layout must be HEIGHT, WIDTH or BLOCK_SHARDED, got INTERLEAVED");
  return ok_status();
}

}  // namespace tessera
