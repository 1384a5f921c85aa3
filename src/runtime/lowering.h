// The compiler's internals (src/runtime only): CompiledModel::Impl, the state
// that lowering fills and running reads, and the op-traits table that says,
// per ONNX op type, how it lowers.
//
// How a graph is lowered: src/runtime/README.md. The files:
//   op_traits.cc         the table: op type -> lowering, per-image, constant inputs
//   compiled_model.cc    compile(): passes, planning, one step per node; run()
//   lower_conv.cc        Conv, ConvTranspose (and their sharding plans)
//   lower_spatial.cc     pools, Resize / Upsample, BatchNormalization, InstanceNormalization
//   lower_eltwise.cc     unary activations, Add / Sub / Mul / Div, Softmax, LayerNormalization
//   lower_matmul.cc      MatMul, Gemm
//   lower_data.cc        Concat, Tile, Reshape family, Transpose, Slice / Pad / Split
//   plan_*.cc            the planning passes (plans.h): micro-batching,
//                        precision, liveness
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <string_view>

#include "host_fallback.h"
#include "plans.h"
#include "tessera/cnn/layers.h"
#include "tessera/graph/host_eval.h"
#include "tessera/graph/shape_inference.h"
#include "tessera/ops/arg_reduce.h"
#include "tessera/numerics/bfloat16.h"
#include "tessera/ops/conv2d.h"
#include "tessera/ops/conv2d_l1.h"
#include "tessera/ops/conv_transpose2d.h"
#include "tessera/ops/data_movement.h"
#include "tessera/ops/eltwise.h"
#include "tessera/ops/manipulation.h"
#include "tessera/ops/matmul.h"
#include "tessera/ops/matrix_engine.h"
#include "tessera/ops/normalization.h"
#include "tessera/ops/pool2d.h"
#include "tessera/ops/quantized_conv2d.h"
#include "tessera/ops/select.h"
#include "tessera/ops/upsample.h"
#include "tessera/runtime/compiled_model.h"

namespace tessera::runtime {

using graph::Graph;
using graph::HostTensor;
using graph::Node;
using Dims = std::vector<int64_t>;

inline Shape to_shape(const Dims& dims) {
  if (dims.empty()) return Shape{1};
  std::vector<uint32_t> d(dims.begin(), dims.end());
  return Shape(std::span<const uint32_t>(d));
}

// NCHW dim d lives at NHWC axis kToNhwc[d].
inline constexpr int kToNhwc[4] = {0, 3, 1, 2};
inline constexpr int kNchwToNhwcPerm[4] = {0, 2, 3, 1};
inline constexpr int kNhwcToNchwPerm[4] = {0, 3, 1, 2};

// The activation the passes fused into `n` (tessera_activation), if any.
std::optional<UnaryWithParam> activation_of(const Node& n);
// The activation after a conv's fused residual add
// (tessera_residual_activation; identity without one); INTERNAL for a name
// the passes never write.
StatusOr<UnaryWithParam> residual_activation_of(const Node& n);
// Appends the values `patterns` name (value names, or ECMAScript regexes
// over whole names) to the graph's outputs, where the passes keep them
// (taps.cc). INVALID_ARGUMENT naming a pattern that is invalid or matches
// no value.
Status add_taps(Graph& g, const std::vector<std::string>& patterns);
// Rounds row-major values (rows of `cols`) to `df`: bfloat16, float16, or a
// block-float format in blocks of 16 along a row (as a tile's face rows
// hold them), bit-exact with pack_bfp_tiles' element codec; float32 as is.
void round_to_format(std::vector<float>& v, size_t cols, DataType df);
// A unary node that runs on the device's unary kernel, or nullopt.
std::optional<UnaryWithParam> device_unary(const Graph& g, const Node& n);

// Which inputs of an op must be constants at compile time.
enum class ConstantInputs : uint8_t { kNone, kAfterFirst, kAll };

// What the compiler knows about one ONNX op type (op_traits.cc): decisions
// as data, one row per op.
struct OpTraits {
  std::string_view op_type;
  // Appends the node's step; nullptr: the op runs as a host fallback.
  Status (CompiledModel::Impl::*lower)(const Node&) = nullptr;
  // Each image of a rank-4 batch computed alone (micro-batching may split
  // the batch around it).
  bool per_image = false;
  // May read a constant first operand at run time (others: the folder
  // should have folded it; a constant left is a fallback).
  bool constant_first = false;
  ConstantInputs constants = ConstantInputs::kNone;
  // Makes integer results (indices) as exact floats, the integers run-time
  // slots hold; other ops with an integer result run on the host.
  bool integer_results = false;
};
// nullptr for an op type the table does not know.
const OpTraits* find_op_traits(std::string_view op_type);
// Whether node `n` computes each image alone (its traits, and a Concat's axis).
bool per_image_op(const Node& n);

struct CompiledModel::Impl {
  using Slots = std::vector<std::optional<Tensor>>;
  using Step = std::function<Status(Slots&, uint8_t cq)>;

  Device* device = nullptr;
  Graph g;
  CompileOptions opt;
  CompileReport report;
  uint64_t id = 0;
  std::vector<bool> nhwc;                        // per value: stored as NHWC on the device
  // Per value: an [N, A, B, H, W] split kept as (N, H, W, A, B) (lower_reshape);
  // only a Transpose, or after a channel shuffle a Reshape, reads one.
  std::vector<bool> split_nhwc;
  std::vector<std::optional<Tensor>> constants;  // per value: the device copy of a constant (plain)
  std::vector<Step> steps;
  std::vector<std::vector<int>> release;  // per step: values whose last reader it is
  std::vector<Dims> in_shapes, out_shapes;
  std::vector<std::unique_ptr<cnn::DirectConv2d>> convs;
  std::vector<std::unique_ptr<cnn::ConvTranspose2d>> deconvs;
  std::vector<std::unique_ptr<QuantizedConv2d>> quantized_convs;
  // Each conv layer with its node, in lowering order (conv_selections,
  // prepared_weights).
  struct ConvLayerRef {
    std::string node;
    cnn::DirectConv2d* conv = nullptr;
    cnn::ConvTranspose2d* deconv = nullptr;
    const std::string& selection() const { return conv ? conv->selection() : deconv->selection(); }
    const std::optional<PreparedConv2dWeights>& prepared() const {
      return conv ? conv->prepared() : deconv->prepared();
    }
  };
  std::vector<ConvLayerRef> conv_layers;
  std::map<std::string, PreparedLayer> given_weights;  // compile's prepared weights, by node, until lowered
  std::vector<std::shared_ptr<const FallbackNode>> fallbacks;
  std::vector<std::vector<std::pair<int, int>>> consumers;  // per value: (node, input slot)
  // Channel concats of NHWC values (at most four, none constant): the
  // Concat node and its inputs. A Conv that alone reads one fuses it
  // (fused_concats): the Concat's step becomes a no-op and the conv reads the
  // inputs through conv2d_concat, which gathers them as its shards stage
  // their rows where it can (conv2d.h), so the concatenation is never
  // written. plan_liveness keeps the inputs to the conv.
  std::map<int, std::pair<size_t, std::vector<int>>> channel_concats;
  std::vector<FusedConcat> fused_concats;  // (the conv node, the concat's inputs)
  std::vector<MicroBatch> micro_batches;   // plan_micro_batches (plans.h)

  const Dims& dims(int v) const { return g.value(v).dims; }
  // Graph outputs leave their producing kernel in float32 (one rounding
  // fewer than bfloat16 then a typecast); other values in the activation dtype.
  std::optional<DataType> out_dtype(int v) const {
    if (value_df[static_cast<size_t>(v)]) return value_df[static_cast<size_t>(v)];
    if (bf16_values[static_cast<size_t>(v)]) return DataType::BFLOAT16;
    // Explicit where a kernel may read a value of another dtype (its output would follow its input).
    const bool mixed = keeps_bf16_values || has_value_df;
    if (act_dtype() == DataType::FLOAT32) return mixed ? std::optional(DataType::FLOAT32) : std::nullopt;
    if (is_model_output(v)) return DataType::FLOAT32;
    return mixed ? std::optional(act_dtype()) : std::nullopt;
  }
  // The dtype value v has in its slot once its step ran.
  DataType planned_dtype(int v) const { return out_dtype(v).value_or(act_dtype()); }
  // The graph's own outputs: g.outputs before the taps compile appended
  // (CompileOptions::intermediates_to_save). A tapped value keeps the dtype
  // its readers read, so tapping changes no result.
  size_t num_outputs = 0;
  bool is_model_output(int v) const {
    return std::find(g.outputs.begin(), g.outputs.begin() + static_cast<std::ptrdiff_t>(num_outputs), v) !=
           g.outputs.begin() + static_cast<std::ptrdiff_t>(num_outputs);
  }
  size_t rank(int v) const { return dims(v).size(); }
  DataType act_dtype() const { return opt.dtype; }
  // Float32 activations at math fidelity LoFi on CPUs with AMX: the values
  // whose every reader computes on their bfloat16-rounded values (a conv
  // that lowers to bfloat16, conv2d_rounds_input_to_bfloat16) or passes them
  // on unchanged to such readers (MaxPool, Concat) leave their producer
  // (Conv, ConvTranspose, or those two) in bfloat16: the same results, half
  // the bytes, no conversion as the conv stages them
  // (plan_bfloat16_values). Graph outputs, residual readers and
  // micro-batches' values keep float32.
  std::vector<bool> bf16_values;
  bool keeps_bf16_values = false;  // any of them
  Status plan_bfloat16_values();   // plan_precision.cc
  // Per node: its formats and fidelity (precision.h: the defaults, the AMP
  // level, the rules); per value: the dtype a rule's output_df gave it. A
  // step whose op writes another dtype (ops that follow their input's) is
  // followed by a typecast to it (run_steps), when any rule set one.
  std::vector<OpPrecision> op_precision;
  std::vector<std::optional<DataType>> value_df;
  bool has_value_df = false;
  Status plan_op_precision();  // plan_precision.cc
  MathFidelity fidelity_of(size_t node) const { return op_precision[node].math_fidelity.value_or(opt.math_fidelity); }
  bool rounds_input(const Node& n, size_t slot) const;
  StatusOr<Conv2dParams> conv_params(const Node& n) const;
  ConvTranspose2dParams conv_transpose_params(const Node& n, const graph::SpatialGeometry& geo) const;
  // The math fidelity of the matmul or Gemm being lowered (call it at lowering, not in a step), as of convs (matmul.h:
  // LoFi computes float32 operands in bfloat16 on AMX CPUs).
  DeviceComputeKernelConfig compute_kernel_config() const { return {.math_fidelity = fidelity_of(lowering)}; }

  // ---- tensors in and out of slots (slots.cc)

  StatusOr<Tensor> upload(const HostTensor& h, const Dims& dims, DataType dtype);
  // Constant matmul / linear weights of the node being lowered, rounded to
  // its weights format (op_precision): in a bfloat16 op kept in
  // matmul_weights_dtype (float32 where the CPU multiplies bfloat16 in
  // float32, so they are not converted on every call), else float32.
  // `transposed`: a Gemm's transB weights, (N, K): block-float blocks run
  // along N all the same (the matrix engine emulation's layout too).
  StatusOr<Tensor> upload_weights(const HostTensor& h, const Dims& dims, bool transposed = false);
  // A constant value as a plain device tensor in the activation dtype.
  StatusOr<Tensor> constant(int v);
  // A host constant permuted to NHWC for a rank-4 broadcast against an NHWC
  // value: dims are right-aligned to rank 4 first.
  StatusOr<Tensor> constant_nhwc(int v);
  // Graph inputs stay in the caller's dtype in their slots until a step
  // reads them: get() converts one to the activation dtype once (and keeps
  // that), as_nhwc() moves it to NHWC and converts it in one launch (an
  // image: permute with a dtype), where a typecast and a permute took two
  // (YOLO in bfloat16: 0.45 + 0.18 ms).
  std::vector<bool> graph_input;  // per value
  uint8_t step_cq = 0;            // the queue run_steps runs on (get's typecast)
  bool in_caller_dtype(const Slots& s, int v) const;
  StatusOr<Tensor> get(Slots& s, int v);
  // One channel or one pixel: NCHW and NHWC hold the same bytes.
  bool same_bytes_either_layout(int v) const;
  // The value in NCHW (plain) layout.
  StatusOr<Tensor> plain(Slots& s, int v, uint8_t cq);
  // The value in NHWC layout (rank 4). `dense`: a converted value lands in
  // one DRAM shard, rows back to back (a conv's input: narrow rows such as
  // an image's 3 channels would otherwise each take a padded DRAM page, and
  // the conv kernel reads dense rows in place).
  StatusOr<Tensor> as_nhwc(Slots& s, int v, uint8_t cq, bool dense = false);
  // Counts the permutes a step will do (compile-time bookkeeping).
  void note_plain(int v);
  void note_nhwc(int v);
  static Status put(Slots& s, int v, Tensor t);
  // An NHWC result (any shape of the right volume) stored as (N, H, W, C).
  Status put_nhwc(Slots& s, int v, const Tensor& t);
  Status put_plain(Slots& s, int v, const Tensor& t);

  // ---- lowering

  // Lowers node `ni` through its op's traits (op_traits.cc): appends exactly
  // one step, or a host fallback's.
  Status lower(size_t ni);
  // One per op family; each the `lower` of its ops' OpTraits rows.
  Status lower_conv(const Node& n);  // lower_conv.cc
  Status lower_quantized_conv(const Node& n);
  struct ConvLayerInputs {
    Tensor weight;
    std::optional<Tensor> bias;
    Conv2dConfig config;
  };
  StatusOr<ConvLayerInputs> conv_layer_inputs(const Node& n, uint32_t cout, uint64_t flops);
  template <class Layer>
  void take_given_weights(const Node& n, Layer& layer);  // from given_weights, if it has n's
  Status lower_conv_transpose(const Node& n);
  Status plan_conv_sharding(const Node& n, const Conv2dGeometry& geo, Conv2dConfig& config);
  bool sharded_to_dram = false;      // set by plan_conv_sharding for the conv being lowered
  Status lower_pool(const Node& n);  // lower_spatial.cc
  Status lower_global_avg_pool(const Node& n);
  Status lower_global_max_pool(const Node& n);
  Status lower_depth_space(const Node& n);  // lower_data.cc
  Status lower_reduce(const Node& n);
  Status lower_prelu(const Node& n);  // lower_eltwise.cc
  Status lower_reduce_rows(const Node& n, std::vector<int64_t> axes);  // any rank, any axes
  Status lower_resize_node(const Node& n);
  Status lower_resize(const Node& n, bool* lowered);
  Status lower_batch_norm(const Node& n);
  Status lower_instance_norm(const Node& n);
  Status lower_unary(const Node& n);  // lower_eltwise.cc
  Status lower_integer_cast(const Node& n);
  Status lower_logic(const Node& n);
  Status lower_where(const Node& n);
  Node spatial_reduce(const Node& n, const char* op) const;  // lower_spatial.cc
  Status lower_arith(const Node& n);
  Status lower_binary(const Node& n, BinaryOpType op);
  Status lower_pow(const Node& n);
  Status lower_softmax(const Node& n);
  Status lower_arg_reduce(const Node& n);  // ArgMax, ArgMin
  Status lower_layer_norm(const Node& n);
  Status lower_matmul(const Node& n);  // lower_matmul.cc
  Status lower_gemm(const Node& n);
  Status lower_concat(const Node& n);  // lower_data.cc
  Status lower_tile(const Node& n);
  Status lower_reshape(const Node& n);
  bool splits_channels_for_transpose(const Node& n) const;
  bool merges_split_channels(const Node& transpose) const;
  Status lower_transpose(const Node& n);
  Status lower_slice_pad_split(const Node& n);
  Status lower_gather(const Node& n);
  Status lower_edge_pad(const Node& n);
  Status lower_fallback(const Node& n, const std::string& why);  // compiled_model.cc
  // Numerics::kTt (lower_tt.cc): convs and matmuls on the emulated matrix engine.
  Status lower_conv_tt(const Node& n, bool transposed);
  Status lower_matmul_tt(const Node& n);
  MatrixEngineConfig engine_config() const;  // the node being lowered's
  // A device op whose attributes its kernel does not cover: a host fallback.
  Status not_covered(const Node& n) {
    --report.device_ops;
    return lower_fallback(n, "attributes the device kernel does not cover");
  }
  // Whether nodes a and b (a before b) run in the same micro-batch run, or
  // both outside any, and `v` is not a run's input or output.
  bool same_micro_batch(size_t a, size_t b, int v) const {
    for (const MicroBatch& mb : micro_batches) {
      if (v == mb.in || v == mb.out || v == mb.in_part || v == mb.out_part) return false;
      if ((a >= mb.begin && a < mb.end) != (b >= mb.begin && b < mb.end)) return false;
    }
    return true;
  }
  Status plan_micro_batches();  // plan_micro_batch.cc: micro_batches, the graph rewritten onto them
  uint64_t per_run(size_t ni, uint64_t work) const;
  size_t lowering = 0;  // the node being lowered

  // ---- running
  // Steps [begin, end); micro-batched runs group by group, unless `group` (a run's own steps, one group).
  Status run_steps(size_t begin, size_t end, Slots& s, uint8_t cq, bool group = false);
  // Called after each step when set (op_times_us).
  std::function<Status(size_t node)> after_step;
  // Typecasts node's outputs that its kernel left in another dtype than planned_dtype.
  Status cast_to_planned(size_t node, Slots& s, uint8_t cq);
  Status run_micro_batch(const MicroBatch& mb, Slots& s, uint8_t cq);
};

}  // namespace tessera::runtime
