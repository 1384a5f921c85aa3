#include "tessera/ops/conv2d.h"

#include <optional>

#include "conv/launch.h"
#include "conv/problem.h"
#include "conv/select.h"
#include "onednn_util.h"
#include "op_common.h"
#include "tessera/base/cpu_features.h"
#include "tessera/numerics/bfloat16.h"
#include "tessera/numerics/float16.h"
#include "tessera/ops/conv2d_l1.h"
#include "tessera/ops/conv2d_weights.h"
#include "tessera/ops/conv_transpose2d.h"
#include "tessera/ops/data_movement.h"
#include "tessera/ops/eltwise.h"
#include "tessera/ops/manipulation.h"

// The front end of conv2d, conv2d_concat, conv2d_with_residual and
// conv_transpose2d: checks, the conversions around the kernel (with_io),
// the residual and concat fusions, weight rounding, and the dispatch to the
// family of the chosen algorithm (conv/launch.h).
namespace tessera {

namespace {
using conv::Problem;
using conv::staging;
}  // namespace

namespace {
// Rows (ky, kx, ci), columns oc: index of the (oc, ci, ky, kx) weight.
struct WeightMatrix {
  uint32_t cout, cin_g, kh, kw;
  explicit WeightMatrix(const Shape& d) : cout(d[0]), cin_g(d[1]), kh(d[2]), kw(d[3]) {}
  uint32_t rows() const { return kh * kw * cin_g; }
  template <class F>
  void each(F f) const {  // f(index in the weight, index in the matrix)
    for (uint32_t oc = 0; oc < cout; ++oc)
      for (uint32_t ci = 0; ci < cin_g; ++ci)
        for (uint32_t ky = 0; ky < kh; ++ky)
          for (uint32_t kx = 0; kx < kw; ++kx)
            f(((uint64_t{oc} * cin_g + ci) * kh + ky) * kw + kx, ((ky * kw + kx) * cin_g + ci) * uint64_t{cout} + oc);
  }
};
}  // namespace

StatusOr<Tensor> conv2d_weight_tiles(std::span<const float> weight, const Shape& dims, DataType wt) {
  if (dims.rank() != 4 || weight.size() != dims.volume() || !is_block_float(wt))
    return invalid_argument_error(
        "conv2d_weight_tiles: expected (out, in/groups, kh, kw) weights and a block-float "
        "dtype, found {} values of {} in {}",
        weight.size(), dims.to_string(), data_type_name(wt));
  const WeightMatrix w(dims);
  std::vector<float> m(weight.size());
  w.each([&](uint64_t at, uint64_t mat) { m[mat] = weight[at]; });
  return Tensor::from_vector(m, Shape{1, 1, w.rows(), w.cout}, wt, Layout::TILE);
}

StatusOr<std::vector<float>> conv2d_weights_from_tiles(const Tensor& tiles, const Shape& dims) {
  if (dims.rank() != 4 || tiles.is_on_device() || tiles.layout() != Layout::TILE ||
      tiles.shape() != Shape{1, 1, WeightMatrix(dims).rows(), dims[0]})
    return invalid_argument_error("conv2d_weights_from_tiles: tiles {} are not the weight matrix of {}",
                                  tiles.spec().to_string(), dims.to_string());
  TS_ASSIGN_OR_RETURN(const std::vector<float> m, tiles.to_vector());
  std::vector<float> v(m.size());
  WeightMatrix(dims).each([&](uint64_t at, uint64_t mat) { v[at] = m[mat]; });
  return v;
}

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
  } else if (wt == DataType::FLOAT16) {
    for (float& x : v) x = round_to_float16(x);
  } else if (is_block_float(wt)) {
    TS_ASSIGN_OR_RETURN(Tensor tiles, conv2d_weight_tiles(v, expected, wt));
    TS_ASSIGN_OR_RETURN(v, conv2d_weights_from_tiles(tiles, expected));
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
StatusOr<Conv2dResult> with_weights(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
                                    const Params& p, const Conv2dConfig& config, uint8_t cq_id,
                                    const Conv2dResidual* residual = nullptr, const conv::ConcatParts* cat = nullptr,
                                    const TensorSpec* whole = nullptr) {
  TS_ASSIGN_OR_RETURN(Problem pr, conv::make_problem(input, p, config, residual, whole));
  if (cat && !concat_fuses(pr)) return internal_error("conv2d_concat: the problem does not stage its rows");
  if constexpr (std::is_same_v<Params, ConvTranspose2dParams>) {
    if (pr.amx_patches()) return conv::amx_patches_with_weights(input, weight, bias, p, config, pr, cq_id);
    if (pr.patches()) return conv::patches_with_weights(input, weight, bias, p, pr, config.weights_dtype, cq_id);
  } else {
    if (pr.depthwise()) return conv::depthwise_with_weights(input, weight, bias, p, pr, config.weights_dtype, cq_id);
    if (pr.direct() && pr.winograd())
      return conv::winograd_with_weights(input, weight, bias, p, pr, config.weights_dtype, cq_id);
    if (pr.direct()) return conv::direct_with_weights(input, weight, bias, p, pr, config.weights_dtype, cq_id);
  }
  TS_ASSIGN_OR_RETURN(Tensor rounded, round_weights(weight, p, config.weights_dtype, pr.compute));
  TS_ASSIGN_OR_RETURN(const std::vector<float> bv, conv::bias_values(bias, pr.g));
  return conv::onednn_with_weights(input, rounded, bv, pr, cq_id, cat);
}

template <class Params>
StatusOr<Conv2dResult> with_prepared(const Tensor& input, const PreparedConv2dWeights& w, const Params& p,
                                     const Conv2dConfig& config, uint8_t cq_id,
                                     const Conv2dResidual* residual = nullptr, const conv::ConcatParts* cat = nullptr,
                                     const TensorSpec* whole = nullptr) {
  TS_ASSIGN_OR_RETURN(Problem pr, conv::make_problem(input, p, config, residual, whole));
  if (cat && !concat_fuses(pr)) return internal_error("conv2d_concat: the problem does not stage its rows");
  const std::string_view op = pr.g.transposed ? "conv_transpose2d" : "conv2d";
  if (w.key != pr.weights_key)
    return invalid_argument_error("{}: the prepared weights are for '{}', not for '{}'", op, w.key, pr.weights_key);
  if (w.weight.device() != input.device() || !w.weight.is_allocated() || !w.bias.is_allocated())
    return failed_precondition_error("{}: the prepared weights are not allocated on the input's device", op);
  if constexpr (std::is_same_v<Params, ConvTranspose2dParams>) {
    if (pr.amx_patches()) return conv::launch_amx_patches(input, w, p, config, pr, cq_id);
    if (pr.patches()) return conv::launch_patches(input, w, p, pr, cq_id);
  } else {
    if (pr.depthwise()) return conv::launch_depthwise(input, w, pr, cq_id);
    if (pr.direct()) return conv::launch_direct(input, w, pr, cq_id);
  }
  return conv::launch_onednn(input, w, pr, cq_id, cat);
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
  const CoreCoord grid = input.device()->descriptor().compute_grid();
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
// layout, dtype and memory config asked for. `residual`: the one the kernel
// adds (with_residual), `bias`: whether the conv has one (its L1 plan).
template <class Params, class Core>
StatusOr<Conv2dResult> with_io(const Tensor& input, const Params& p, bool bias, const Conv2dResidual* residual,
                               const Conv2dConfig& config, uint8_t cq_id, Core core) {
  constexpr bool dense = std::is_same_v<Params, Conv2dParams>;  // transposed convs' patch matmul reads interleaved rows
  const std::string_view op = dense ? "conv2d" : "conv_transpose2d";
  const Conv2dGeometry g = conv2d_geometry(p, bias);
  TS_RETURN_IF_ERROR(ops::require_device_tensor(input, op));
  const DataType in_dt = input.dtype();
  const DataType out_dt = config.dtype.value_or(is_block_float(in_dt) ? DataType::BFLOAT16 : in_dt);
  if (in_dt == DataType::FLOAT16 || out_dt == DataType::FLOAT16)
    return unimplemented_error("{}: float16 activations (in {}, out {}): the kernels read and write float32 or "
                               "bfloat16; typecast to one of them (float16 weights are taken)",
                               op, data_type_name(in_dt), data_type_name(out_dt));
  if (is_block_float(out_dt) && config.output_layout != Layout::TILE)
    return invalid_argument_error("{}: a {} output needs output_layout TILE (block-float tensors are tiles)", op,
                                  data_type_name(out_dt));
  TS_ASSIGN_OR_RETURN(const std::optional<MemoryConfig> planned, plan_output(input, g, config, out_dt, op));
  const DataType kernel_out = !is_block_float(out_dt)      ? out_dt
                              : in_dt == DataType::FLOAT32 ? DataType::FLOAT32
                                                           : DataType::BFLOAT16;
  const MemoryConfig mc = config.output_memory_config.value_or(
      planned.value_or(input.memory_config().is_sharded() ? DRAM_MEMORY_CONFIG : input.memory_config()));
  Conv2dConfig kernel = config;
  kernel.dtype = kernel_out;
  kernel.output_layout = Layout::ROW_MAJOR;
  kernel.output_memory_config = mc;
  kernel.shard_layout.reset();
  kernel.slice_config.reset();
  // Kernels of Tessera's own read and write rows (oneDNN's read tiles and
  // shards themselves and tilize their own output): the algorithm that runs
  // the conv on rows says which the input must become. Asked only where it
  // matters (tiles or shards in, tiles out): plain rows in and out take the
  // same path either way, without a second selection per call.
  bool own_kernel = false;
  if (dense &&
      (input.layout() == Layout::TILE || input.memory_config().is_sharded() || config.output_layout == Layout::TILE)) {
    TS_ASSIGN_OR_RETURN(const conv::ConvAlgorithm algorithm, conv::algorithm_for_rows(input, p, kernel, residual));
    own_kernel = !conv::is_onednn(algorithm);
  }
  TS_ASSIGN_OR_RETURN(Tensor x, kernel_input(input, op, dense, dense && !own_kernel, cq_id));
  // The oneDNN kernel tilizes its own rows into the final tiles (channel
  // shards cannot: they tilize after). Otherwise the kernel
  // writes the final memory config when no conversion follows, else dense
  // rows for the conversion to read.
  // Channel shards each own a slice of every row, so none can tilize rows.
  // (Asked without a residual: a residual only ever turns channel shards
  // into row shards, which then tilize after all.)
  const bool channel_shards =
      dense && conv::splits_channels(g, false, static_cast<uint32_t>(input.device()->workers().num_threads()), false);
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

}  // namespace

StatusOr<Conv2dResult> conv2d(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
                              const Conv2dParams& p, const Conv2dConfig& config, uint8_t cq_id) {
  return with_io(input, p, bias.has_value(), nullptr, config, cq_id,
                 [&](const Tensor& x, const Conv2dConfig& c) { return with_weights(x, weight, bias, p, c, cq_id); });
}

bool conv2d_rounds_input_to_bfloat16(const Conv2dParams& p, const Conv2dConfig& config) {
  return conv::lowers_to_bf16(conv::geometry(p), DataType::FLOAT32, config);
}
bool conv2d_may_round_input_to_bfloat16(const Conv2dConfig& config) {
  return onednn::lofi_computes_in_bf16(config.compute_config.math_fidelity);
}
bool conv_transpose2d_rounds_input_to_bfloat16(const ConvTranspose2dParams& p, const Conv2dConfig& config) {
  return conv::lowers_to_bf16(conv::geometry(p), DataType::FLOAT32, config);
}

// Prepared weights always carry a bias (zeros without one): the plan counts it.
StatusOr<Conv2dResult> conv2d(const Tensor& input, const PreparedConv2dWeights& w, const Conv2dParams& p,
                              const Conv2dConfig& config, uint8_t cq_id) {
  return with_io(input, p, true, nullptr, config, cq_id,
                 [&](const Tensor& x, const Conv2dConfig& c) { return with_prepared(x, w, p, c, cq_id); });
}

namespace {

// conv2d_concat's fused launch: the parts, their concatenation's spec and
// the kernel's config; nullopt where the inputs are concatenated first
// (concat_fuses, and a plain output config: rows, interleaved).
struct FusedConcat {
  conv::ConcatParts cat;
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
  bool plain = inputs.size() > 1 && inputs.size() <= conv::kMaxConcatParts;
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
  StatusOr<Problem> pr = conv::make_problem(first, p, f.kernel, nullptr, &f.whole);
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
  if (f) return with_weights(inputs[0], weight, bias, p, f->kernel, cq_id, nullptr, &f->cat, &f->whole);
  if (inputs.size() == 1) return conv2d(inputs[0], weight, bias, p, config, cq_id);
  TS_ASSIGN_OR_RETURN(Tensor x, concat_channels(inputs, cq_id));
  return conv2d(x, weight, bias, p, config, cq_id);
}

StatusOr<Conv2dResult> conv2d_concat(std::span<const Tensor> inputs, const PreparedConv2dWeights& w,
                                     const Conv2dParams& p, const Conv2dConfig& config, uint8_t cq_id) {
  TS_ASSIGN_OR_RETURN(std::optional<FusedConcat> f, plan_concat(inputs, p, config));
  if (f) return with_prepared(inputs[0], w, p, f->kernel, cq_id, nullptr, &f->cat, &f->whole);
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
  const bool fusable = !depthwise && config.output_layout == Layout::ROW_MAJOR && !is_block_float(out) &&
                       !config.output_memory_config.value_or(input.memory_config()).is_sharded() &&
                       !input.memory_config().is_sharded() && !config.shard_layout && !config.slice_config &&
                       p.activation.op != UnaryOpType::HARDSIGMOID &&
                       residual.activation.op != UnaryOpType::HARDSIGMOID &&
                       residual.tensor.layout() == Layout::ROW_MAJOR && residual.tensor.dtype() == out &&
                       !residual.tensor.memory_config().is_sharded();
  if (!fusable || p.activation.is_identity()) return fusable;
  // An activation before the add runs in oneDNN's post-op chain only where
  // oneDNN has it NaN-safe (onednn::runs_activation: not ReLU, ReLU6), and
  // not on AVX2-only CPUs, whose oneDNN 2.6 convs have no activation-then-sum
  // chain (they fall back to its reference kernel: minutes per frame for
  // YOLO's bottlenecks). Tessera's own kernels add it after any activation.
  if (kernel_isa() != KernelIsa::kAvx2 && onednn::runs_activation(p.activation)) return true;
  Conv2dConfig kernel = config;
  kernel.dtype = out;
  const StatusOr<conv::ConvAlgorithm> a = conv::algorithm_for_rows(input, p, kernel, &residual);
  return a.ok() && !conv::is_onednn(*a);
}

// Runs `run(&residual, config)` when the kernel can add the residual itself,
// else `run(nullptr, config)` (float32 rows, see below) and one add with the
// residual's activation.
// `prepared_key`: the key of weights prepared before (they name whether
// their call fused the residual), or null for host weights.
template <class Run>
StatusOr<Conv2dResult> with_residual(const Tensor& input, const Conv2dParams& p, const Conv2dResidual& residual,
                                     const Conv2dConfig& config, uint8_t cq_id, Run run,
                                     const std::string* prepared_key = nullptr) {
  TS_RETURN_IF_ERROR(ops::require_device_tensor(input, "conv2d"));
  TS_RETURN_IF_ERROR(ops::require_device_tensor(residual.tensor, "conv2d", "residual"));
  TS_RETURN_IF_ERROR(p.validate());
  const uint64_t rows = uint64_t{p.batch_size} * p.output_height() * p.output_width();
  if (residual.tensor.shape().volume() != rows * p.out_channels ||
      residual.tensor.shape().dims().back() != p.out_channels)
    return invalid_argument_error("conv2d: the residual has shape {}; expected the output's ({}, {}, {}, {})",
                                  residual.tensor.shape().to_string(), p.batch_size, p.output_height(),
                                  p.output_width(), p.out_channels);
  const bool may_widen =
      !prepared_key || prepared_key->find(conv::weights_key_rows(DataType::FLOAT32)) != std::string::npos;
  if (residual_fuses(input, p, residual, config) &&
      (!prepared_key || prepared_key->find(":+residual") != std::string::npos)) {
    // A kernel may still find it cannot add it (oneDNN's chain after an
    // activation it lacks, where Tessera's own pass does not apply): then
    // the add is separate, as below, and weights prepared here say so.
    StatusOr<Conv2dResult> fused = run(&residual, config);
    if (fused.ok() || fused.status().code() != StatusCode::kUnimplemented || prepared_key) return fused;
  }
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
    return with_io(input, p, bias.has_value(), fused, cfg, cq_id, [&](const Tensor& x, const Conv2dConfig& c) {
      return with_weights(x, weight, bias, p, c, cq_id, fused);
    });
  });
}

StatusOr<Conv2dResult> conv2d_with_residual(const Tensor& input, const PreparedConv2dWeights& w, const Conv2dParams& p,
                                            const Conv2dResidual& residual, const Conv2dConfig& config, uint8_t cq_id) {
  // Weights prepared by a call that left float32 rows for its add (see
  // with_residual) keep doing so; others, prepared for bfloat16 rows, add
  // to those. Weights prepared without the residual add it separately.
  return with_residual(
      input, p, residual, config, cq_id,
      [&](const Conv2dResidual* fused, const Conv2dConfig& cfg) {
        return with_io(input, p, true, fused, cfg, cq_id,
                       [&](const Tensor& x, const Conv2dConfig& c) { return with_prepared(x, w, p, c, cq_id, fused); });
      },
      &w.key);
}

StatusOr<Conv2dResult> conv_transpose2d(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
                                        const ConvTranspose2dParams& p, const Conv2dConfig& config, uint8_t cq_id) {
  return with_io(input, p, bias.has_value(), nullptr, config, cq_id,
                 [&](const Tensor& x, const Conv2dConfig& c) { return with_weights(x, weight, bias, p, c, cq_id); });
}

StatusOr<Conv2dResult> conv_transpose2d(const Tensor& input, const PreparedConv2dWeights& w,
                                        const ConvTranspose2dParams& p, const Conv2dConfig& config, uint8_t cq_id) {
  return with_io(input, p, true, nullptr, config, cq_id,
                 [&](const Tensor& x, const Conv2dConfig& c) { return with_prepared(x, w, p, c, cq_id); });
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

// What explain_* and *_algorithms describe: the problem of a call with
// these arguments (the explained call) and how its kernel was chosen.
struct Explained {
  Problem problem;
  conv::ConvSelection selection;
};

template <class Params>
StatusOr<Explained> explained_problem(const Tensor& input, const Params& p, const Conv2dConfig& config,
                                      const Conv2dResidual* residual, const TensorSpec* whole) {
  Explained e;
  TS_ASSIGN_OR_RETURN(e.problem, conv::make_problem(input, p, config, residual, whole, &e.selection));
  return e;
}

StatusOr<std::vector<std::string>> runnable(const StatusOr<Explained>& e) {
  if (!e.ok()) return e.status();
  std::vector<std::string> names;
  for (conv::ConvAlgorithm a : e->selection.runnable)
    names.emplace_back(conv::conv_algorithm_name(a));
  return names;
}

template <class Params>
StatusOr<std::string> explain_problem(const Tensor& input, const Params& p, const Conv2dConfig& config,
                                      const Conv2dResidual* residual, const TensorSpec* whole) {
  TS_ASSIGN_OR_RETURN(const Explained e, explained_problem(input, p, config, residual, whole));
  const Problem& pr = e.problem;
  const std::string why = conv::explain(e.selection);
  const size_t first_line = why.find('\n');
  return fmt::format("{} for {}:{}->{}{}", why.substr(0, first_line), pr.g.descriptor, short_dtype_name(pr.input.dtype),
                     short_dtype_name(pr.output.dtype), first_line == std::string::npos ? "" : why.substr(first_line));
}

}  // namespace

namespace {

// The explained call's problem (explained_config) for conv2d's and
// conv2d_concat's arguments, handed to `what` (explain_problem or the
// runnable list).
template <class What>
auto conv2d_call(const Tensor& input, const Conv2dParams& p, const Conv2dConfig& config, const Conv2dResidual* residual,
                 What what) -> decltype(what(input, config, residual, nullptr)) {
  TS_RETURN_IF_ERROR(ops::require_device_tensor(input, "conv2d"));
  if (residual && !residual_fuses(input, p, *residual, config)) residual = nullptr;  // a separate add follows
  return what(input, explained_config(input, config), residual, nullptr);
}

template <class What>
auto concat_call(std::span<const Tensor> inputs, const Conv2dParams& p, const Conv2dConfig& config, What what)
    -> decltype(what(inputs[0], config, nullptr, nullptr)) {
  TS_ASSIGN_OR_RETURN(std::optional<FusedConcat> f, plan_concat(inputs, p, config));
  if (f) return what(inputs[0], f->kernel, nullptr, &f->whole);
  if (inputs.size() == 1) return conv2d_call(inputs[0], p, config, nullptr, what);
  // Concatenated first: the conv reads the whole rows.
  const Tensor& first = inputs[0];
  std::vector<uint32_t> dims(first.shape().dims().begin(), first.shape().dims().end());
  dims.back() = p.in_channels;
  const TensorSpec whole{Shape(std::span<const uint32_t>(dims)), first.dtype(), Layout::ROW_MAJOR,
                         first.memory_config()};
  return what(first, explained_config(first, config), nullptr, &whole);
}

template <class Params>
auto explain_with(const Params& p) {
  return [&p](const Tensor& x, const Conv2dConfig& c, const Conv2dResidual* r, const TensorSpec* whole) {
    return explain_problem(x, p, c, r, whole);
  };
}
template <class Params>
auto list_with(const Params& p) {
  return [&p](const Tensor& x, Conv2dConfig c, const Conv2dResidual* r, const TensorSpec* whole) {
    c.algorithm.clear();  // what the selection would weigh, not the named one
    return runnable(explained_problem(x, p, c, r, whole));
  };
}

}  // namespace

StatusOr<std::string> explain_conv2d(const Tensor& input, const Conv2dParams& p, const Conv2dConfig& config,
                                     const Conv2dResidual* residual) {
  return conv2d_call(input, p, config, residual, explain_with(p));
}

StatusOr<std::string> explain_conv2d_concat(std::span<const Tensor> inputs, const Conv2dParams& p,
                                            const Conv2dConfig& config) {
  return concat_call(inputs, p, config, explain_with(p));
}

StatusOr<std::string> explain_conv_transpose2d(const Tensor& input, const ConvTranspose2dParams& p,
                                               const Conv2dConfig& config) {
  TS_RETURN_IF_ERROR(ops::require_device_tensor(input, "conv_transpose2d"));
  return explain_with(p)(input, explained_config(input, config), nullptr, nullptr);
}

StatusOr<std::vector<std::string>> conv2d_algorithms(const Tensor& input, const Conv2dParams& p,
                                                     const Conv2dConfig& config, const Conv2dResidual* residual) {
  return conv2d_call(input, p, config, residual, list_with(p));
}

StatusOr<std::vector<std::string>> conv2d_concat_algorithms(std::span<const Tensor> inputs, const Conv2dParams& p,
                                                            const Conv2dConfig& config) {
  return concat_call(inputs, p, config, list_with(p));
}

StatusOr<std::vector<std::string>> conv_transpose2d_algorithms(const Tensor& input, const ConvTranspose2dParams& p,
                                                               const Conv2dConfig& config) {
  TS_RETURN_IF_ERROR(ops::require_device_tensor(input, "conv_transpose2d"));
  return list_with(p)(input, explained_config(input, config), nullptr, nullptr);
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

namespace conv {

StatusOr<Conv2dResult> conv_with_weights(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
                                         const Conv2dParams& p, const Conv2dConfig& config, uint8_t cq_id,
                                         const Conv2dResidual* residual, const ConcatParts* cat,
                                         const TensorSpec* whole) {
  return with_weights(input, weight, bias, p, config, cq_id, residual, cat, whole);
}

StatusOr<Conv2dResult> conv_with_prepared(const Tensor& input, const PreparedConv2dWeights& w, const Conv2dParams& p,
                                          const Conv2dConfig& config, uint8_t cq_id, const Conv2dResidual* residual,
                                          const ConcatParts* cat, const TensorSpec* whole) {
  return with_prepared(input, w, p, config, cq_id, residual, cat, whole);
}

}  // namespace conv

}  // namespace tessera
