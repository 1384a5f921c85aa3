#include "tessera/runtime/compiled_model.h"

#include <fmt/format.h>

#include <atomic>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include "runtime/host_fallback.h"
#include "tessera/cnn/layers.h"
#include "tessera/graph/host_eval.h"
#include "tessera/graph/shape_inference.h"
#include "tessera/numerics/bfloat16.h"
#include "tessera/ops/conv2d.h"
#include "tessera/ops/conv2d_l1.h"
#include "tessera/ops/conv_transpose2d.h"
#include "tessera/ops/data_movement.h"
#include "tessera/ops/eltwise.h"
#include "tessera/ops/manipulation.h"
#include "tessera/ops/matmul.h"
#include "tessera/ops/normalization.h"
#include "tessera/ops/pool2d.h"
#include "tessera/ops/upsample.h"

namespace tessera::runtime {

using graph::Graph;
using graph::HostTensor;
using graph::Node;
using Dims = std::vector<int64_t>;

namespace {

std::atomic<uint64_t> next_model_id{1};

Shape to_shape(const Dims& dims) {
  if (dims.empty()) return Shape{1};
  std::vector<uint32_t> d(dims.begin(), dims.end());
  return Shape(std::span<const uint32_t>(d));
}

// NCHW dim d lives at NHWC axis kToNhwc[d].
constexpr int kToNhwc[4] = {0, 3, 1, 2};
constexpr int kNchwToNhwcPerm[4] = {0, 2, 3, 1};
constexpr int kNhwcToNchwPerm[4] = {0, 3, 1, 2};

std::optional<UnaryWithParam> activation_of(const Node& n) {
  const std::string name = n.attr_string("tessera_activation", "");
  if (name.empty()) return std::nullopt;
  auto op = parse_unary_op(name);
  if (!op) return std::nullopt;
  return UnaryWithParam{*op, n.attr_float("tessera_activation_param", 0.0f),
                        n.attr_float("tessera_activation_scale", 1.0f), n.attr_float("tessera_activation_shift", 0.0f)};
}

// A unary node that runs on the device's unary kernel, or nullopt.
std::optional<UnaryWithParam> device_unary(const Graph& g, const Node& n) {
  float param = 0;
  const std::string name = graph::fusable_activation(g, n, &param);
  if (!name.empty()) {
    auto op = parse_unary_op(name);
    if (op) return UnaryWithParam{*op, param};
  }
  static const std::map<std::string, UnaryOpType> plain = {{"Exp", UnaryOpType::EXP},
                                                           {"Sqrt", UnaryOpType::SQRT},
                                                           {"Identity", UnaryOpType::IDENTITY},
                                                           {"Dropout", UnaryOpType::IDENTITY}};
  if (auto it = plain.find(n.op_type); it != plain.end() && n.outputs.size() == 1) return UnaryWithParam{it->second};
  return std::nullopt;
}

}  // namespace

// ------------------------------------------------------------------ Impl

struct CompiledModel::Impl {
  using Slots = std::vector<std::optional<Tensor>>;
  using Step = std::function<Status(Slots&, uint8_t cq)>;

  Device* device = nullptr;
  Graph g;
  CompileOptions opt;
  CompileReport report;
  uint64_t id = 0;
  std::vector<bool> nhwc;                        // per value: stored as NHWC on the device
  std::vector<bool> split_nhwc;                  // per value: an [N, A, B, H, W] split kept as (N, H, W, A, B)
  std::vector<std::optional<Tensor>> constants;  // per value: the device copy of a constant (plain)
  std::vector<Step> steps;
  std::vector<std::vector<int>> release;  // per step: values whose last reader it is
  std::vector<Dims> in_shapes, out_shapes;
  std::vector<std::unique_ptr<cnn::DirectConv2d>> convs;
  std::vector<std::unique_ptr<cnn::ConvTranspose2d>> deconvs;
  // Each conv layer's node, in lowering order (conv_selections).
  std::vector<std::pair<std::string, std::function<const std::string&()>>> conv_layers;
  std::vector<std::shared_ptr<const FallbackNode>> fallbacks;
  std::vector<std::vector<std::pair<int, int>>> consumers;  // per value: (node, input slot)
  // Channel concats of NHWC values (at most four, none constant): the
  // Concat node and its inputs. A Conv that alone reads one fuses it
  // (fused_concats): the Concat's step becomes a no-op and the conv reads the
  // inputs through conv2d_concat, which gathers them as its shards stage
  // their rows where it can (conv2d.h), so the concatenation is never
  // written. plan_liveness keeps the inputs to the conv.
  std::map<int, std::pair<size_t, std::vector<int>>> channel_concats;
  std::vector<std::pair<size_t, std::vector<int>>> fused_concats;  // (the conv node, the concat's inputs)
  // A micro-batched run of nodes [begin, end) (CompileOptions::micro_batch):
  // its nodes read `in` (the whole batch) as `in_part`, one group's images
  // (a view), and leave `out_part`, copied into `out` (the whole batch).
  // Every value the nodes make has `per` images.
  struct MicroBatch {
    size_t begin = 0, end = 0;
    int in = -1, in_part = -1, out = -1, out_part = -1;
    uint32_t groups = 1, per = 1;
  };
  std::vector<MicroBatch> micro_batches;

  const Dims& dims(int v) const { return g.value(v).dims; }
  // Graph outputs leave their producing kernel in float32 (one rounding
  // fewer than bfloat16 then a typecast); other values in the activation dtype.
  std::optional<DataType> out_dtype(int v) const {
    if (bf16_values[static_cast<size_t>(v)]) return DataType::BFLOAT16;
    // Float32 where a kernel may read a bfloat16 value (its output would follow its input).
    if (act_dtype() == DataType::FLOAT32) return keeps_bf16_values ? std::optional(DataType::FLOAT32) : std::nullopt;
    return std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end() ? std::optional(DataType::FLOAT32)
                                                                               : std::nullopt;
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
  Status plan_bfloat16_values();
  bool rounds_input(const Node& n, size_t slot) const;
  StatusOr<Conv2dParams> conv_params(const Node& n) const;
  ConvTranspose2dParams conv_transpose_params(const Node& n, const graph::SpatialGeometry& geo) const;
  // The math fidelity of matmuls and Gemms, as of convs (matmul.h: LoFi
  // computes float32 operands in bfloat16 on AMX CPUs).
  DeviceComputeKernelConfig compute_kernel_config() const { return {.math_fidelity = opt.math_fidelity}; }

  // ---- tensors in and out of slots

  StatusOr<Tensor> upload(const HostTensor& h, const Dims& dims, DataType dtype) {
    std::vector<float> f(h.size());
    for (size_t k = 0; k < f.size(); ++k) f[k] = static_cast<float>(h.at(k));
    TS_ASSIGN_OR_RETURN(Tensor host, Tensor::from_vector(f, to_shape(dims), dtype));
    return to_device(host, *device);
  }
  // Constant matmul / linear weights: bfloat16 values in bfloat16 runs, kept
  // in matmul_weights_dtype (float32 where the CPU multiplies bfloat16 in
  // float32, so they are not converted on every call).
  StatusOr<Tensor> upload_weights(HostTensor h, const Dims& dims) {
    if (act_dtype() == DataType::FLOAT32) return upload(h, dims, DataType::FLOAT32);
    const DataType wd = matmul_weights_dtype(DataType::BFLOAT16);
    if (wd == DataType::FLOAT32)
      for (float& v : h.f) v = round_to_bfloat16(v);
    return upload(h, dims, wd);
  }
  // A constant value as a plain device tensor in the activation dtype.
  StatusOr<Tensor> constant(int v) {
    auto& c = constants[static_cast<size_t>(v)];
    if (!c) {
      TS_ASSIGN_OR_RETURN(c, upload(*g.value(v).constant, dims(v), act_dtype()));
    }
    return *c;
  }
  // A host constant permuted to NHWC for a rank-4 broadcast against an NHWC
  // value: dims are right-aligned to rank 4 first.
  StatusOr<Tensor> constant_nhwc(int v) {
    Dims d = dims(v);
    while (d.size() < 4) d.insert(d.begin(), 1);
    HostTensor h = *g.value(v).constant;
    h.dims = d;
    Node t;
    t.op_type = "Transpose";
    t.attrs["perm"].kind = graph::Attribute::Kind::INTS;
    t.attrs["perm"].ints = {0, 2, 3, 1};
    const HostTensor* args[] = {&h};
    TS_ASSIGN_OR_RETURN(auto out, graph::evaluate(t, args, g.opset));
    return upload(out[0], out[0].dims, act_dtype());
  }
  // Graph inputs stay in the caller's dtype in their slots until a step
  // reads them: get() converts one to the activation dtype once (and keeps
  // that), as_nhwc() moves it to NHWC and converts it in one launch (an
  // image: permute with a dtype), where a typecast and a permute took two
  // (YOLO in bfloat16: 0.45 + 0.18 ms).
  std::vector<bool> graph_input;  // per value
  uint8_t step_cq = 0;            // the queue run_steps runs on (get's typecast)
  bool in_caller_dtype(const Slots& s, int v) const {
    const auto& t = s[static_cast<size_t>(v)];
    return graph_input[static_cast<size_t>(v)] && t && t->dtype() != act_dtype();
  }
  StatusOr<Tensor> get(Slots& s, int v) {
    if (g.is_constant(v)) return constant(v);
    auto& t = s[static_cast<size_t>(v)];
    if (!t) return internal_error("value '{}' is read before it is computed (or after its release)", g.value(v).name);
    if (in_caller_dtype(s, v)) {
      TS_ASSIGN_OR_RETURN(t, typecast(*t, act_dtype(), step_cq));
    }
    return *t;
  }
  // One channel or one pixel: NCHW and NHWC hold the same bytes.
  bool same_bytes_either_layout(int v) const {
    const Dims& d = dims(v);
    return d.size() == 4 && (d[1] == 1 || d[2] * d[3] == 1);
  }
  // The value in NCHW (plain) layout.
  StatusOr<Tensor> plain(Slots& s, int v, uint8_t cq) {
    TS_ASSIGN_OR_RETURN(Tensor t, get(s, v));
    if (!nhwc[static_cast<size_t>(v)]) return t;
    if (same_bytes_either_layout(v) && t.layout() == Layout::ROW_MAJOR && !t.memory_config().is_sharded())
      return reshape(t, to_shape(dims(v)));
    return permute(t, kNhwcToNchwPerm, {.cq_id = cq});
  }
  // The value in NHWC layout (rank 4). `dense`: a converted value lands in
  // one DRAM shard, rows back to back (a conv's input: narrow rows such as
  // an image's 3 channels would otherwise each take a padded DRAM page, and
  // the conv kernel reads dense rows in place).
  StatusOr<Tensor> as_nhwc(Slots& s, int v, uint8_t cq, bool dense = false) {
    const bool moves = !nhwc[static_cast<size_t>(v)] && !same_bytes_either_layout(v);
    const bool converts = moves && in_caller_dtype(s, v);  // a graph input: converted as it moves
    TS_ASSIGN_OR_RETURN(Tensor t, converts ? *s[static_cast<size_t>(v)] : get(s, v));
    if (nhwc[static_cast<size_t>(v)]) return t;
    const DataType dt = converts ? act_dtype() : t.dtype();
    const Dims& d4 = dims(v);
    if (dense && moves && (d4[1] * static_cast<int64_t>(element_size(dt))) % 4 == 0) {
      const auto rows = static_cast<uint32_t>(d4[0] * d4[2] * d4[3]), cols = static_cast<uint32_t>(d4[1]);
      const MemoryConfig one_shard{
          TensorMemoryLayout::HEIGHT_SHARDED, BufferType::DRAM,
          ShardSpec{CoreRangeSet(CoreRange({0, 0}, {0, 0})), {rows, cols}, ShardOrientation::ROW_MAJOR}};
      return permute(t, kNchwToNhwcPerm, dt, {.memory_config = one_shard, .cq_id = cq});
    }
    if (same_bytes_either_layout(v) && !t.memory_config().is_sharded()) {
      const Dims& d = dims(v);
      return reshape(t, Shape{static_cast<uint32_t>(d[0]), static_cast<uint32_t>(d[2]), static_cast<uint32_t>(d[3]),
                              static_cast<uint32_t>(d[1])});
    }
    return permute(t, kNchwToNhwcPerm, dt, {.cq_id = cq});
  }
  // Counts the permutes a step will do (compile-time bookkeeping).
  void note_plain(int v) {
    if (v >= 0 && nhwc[static_cast<size_t>(v)]) ++report.layout_conversions;
  }
  void note_nhwc(int v) {
    if (v >= 0 && !nhwc[static_cast<size_t>(v)] && !g.is_constant(v)) ++report.layout_conversions;
  }
  static Status put(Slots& s, int v, Tensor t) {
    s[static_cast<size_t>(v)] = std::move(t);
    return ok_status();
  }
  // An NHWC result (any shape of the right volume) stored as (N, H, W, C).
  Status put_nhwc(Slots& s, int v, const Tensor& t) {
    const Dims& d = dims(v);
    TS_ASSIGN_OR_RETURN(Tensor r, reshape(t, Shape{static_cast<uint32_t>(d[0]), static_cast<uint32_t>(d[2]),
                                                   static_cast<uint32_t>(d[3]), static_cast<uint32_t>(d[1])}));
    return put(s, v, std::move(r));
  }
  Status put_plain(Slots& s, int v, const Tensor& t) {
    if (t.shape().volume() != to_shape(dims(v)).volume())
      return internal_error("value '{}': the kernel produced {}, the graph says {}", g.value(v).name,
                            t.shape().to_string(), graph::dims_to_string(dims(v)));
    if (t.shape() == to_shape(dims(v))) return put(s, v, t);
    TS_ASSIGN_OR_RETURN(Tensor r, reshape(t, to_shape(dims(v))));
    return put(s, v, std::move(r));
  }

  // ---- lowering

  Status lower(size_t ni);
  bool splits_channels_for_transpose(const Node& n) const;
  Status lower_conv(const Node& n);
  Status plan_conv_sharding(const Node& n, const Conv2dGeometry& geo, Conv2dConfig& config);
  bool sharded_to_dram = false;  // set by plan_conv_sharding for the conv being lowered
  Status lower_conv_transpose(const Node& n);
  Status lower_pool(const Node& n);
  Status lower_resize(const Node& n, bool* lowered);
  Status lower_binary(const Node& n, BinaryOpType op);
  Status lower_gemm(const Node& n);
  Status lower_matmul(const Node& n);
  Status lower_fallback(const Node& n, const std::string& why);
  Status plan_liveness();
  // Whether nodes a and b (a before b) run in the same micro-batch run, or
  // both outside any, and `v` is not a run's input or output.
  bool same_micro_batch(size_t a, size_t b, int v) const {
    for (const MicroBatch& mb : micro_batches) {
      if (v == mb.in || v == mb.out || v == mb.in_part || v == mb.out_part) return false;
      if ((a >= mb.begin && a < mb.end) != (b >= mb.begin && b < mb.end)) return false;
    }
    return true;
  }
  Status plan_micro_batches();
  std::vector<MicroBatch> find_micro_batches(uint32_t per) const;
  uint64_t per_run(size_t ni, uint64_t work) const;
  size_t lowering = 0;  // the node being lowered

  // ---- running
  // Steps [begin, end); micro-batched runs group by group, unless `group` (a run's own steps, one group).
  Status run_steps(size_t begin, size_t end, Slots& s, uint8_t cq, bool group = false);
  Status run_micro_batch(const MicroBatch& mb, Slots& s, uint8_t cq);
};

namespace {

const std::set<std::string> kDeviceOps = {"Conv",
                                          "ConvTranspose",
                                          "MaxPool",
                                          "AveragePool",
                                          "GlobalAveragePool",
                                          "Resize",
                                          "Upsample",
                                          "BatchNormalization",
                                          "Relu",
                                          "Sigmoid",
                                          "Tanh",
                                          "SiLU",
                                          "HardSwish",
                                          "HardSigmoid",
                                          "LeakyRelu",
                                          "Mish",
                                          "Clip",
                                          "Exp",
                                          "Sqrt",
                                          "Identity",
                                          "Dropout",
                                          "Add",
                                          "Sub",
                                          "Mul",
                                          "Div",
                                          "MatMul",
                                          "Gemm",
                                          "Softmax",
                                          "Concat",
                                          "Reshape",
                                          "Flatten",
                                          "Squeeze",
                                          "Unsqueeze",
                                          "Transpose",
                                          "Slice",
                                          "Pad",
                                          "Split",
                                          "LayerNormalization"};

}  // namespace

std::vector<std::string> device_ops() { return {kDeviceOps.begin(), kDeviceOps.end()}; }

std::vector<std::string> supported_ops() {
  std::set<std::string> all(kDeviceOps.begin(), kDeviceOps.end());
  for (const auto& op : graph::host_supported_ops()) all.insert(op);
  all.insert("Constant");
  return {all.begin(), all.end()};
}

bool needs_constant_input(const Node& n, size_t slot) {
  const std::string& op = n.op_type;
  if (op == "Range" || op == "ConstantOfShape") return true;
  if (slot == 0) return false;
  if (op == "Conv" || op == "ConvTranspose" || op == "BatchNormalization" || op == "LayerNormalization" ||
      op == "Resize" || op == "Upsample" || op == "Clip" || op == "Reshape" || op == "Slice" || op == "Pad" ||
      op == "Squeeze" || op == "Unsqueeze" || op == "Split" || op == "Expand" || op == "Tile" || op == "PRelu" ||
      op == "Gemm" || op == "ConstantOfShape" || op == "Range" || op == "InstanceNormalization")
    return true;
  return op.rfind("Reduce", 0) == 0;
}

std::string CompileReport::to_string() const {
  std::string s;
  for (const auto& p : passes) s += fmt::format("pass {}: {} rewrite(s)\n", p.pass, p.rewrites);
  s += fmt::format("{} device op(s), {} layout conversion(s), {:.2f} GFLOP per run\n", device_ops, layout_conversions,
                   conv_flops * 1e-9);
  if (fallbacks.empty()) s += "no host fallbacks\n";
  for (const auto& f : fallbacks) s += fmt::format("host fallback: {}\n", f);
  for (const auto& m : micro_batches) s += fmt::format("micro-batched: {}\n", m);
  if (!bfloat16_values.empty())
    s += fmt::format("{} value(s) kept in bfloat16 for readers that round them to it\n", bfloat16_values.size());
  return s;
}

// A detection head's Reshape of an NHWC-resident [N, A * B, H, W] value into
// [N, A, B, H, W] whose one reader is a Transpose (0, 1, 3, 4, 2) to
// [N, A, H, W, B] (YOLO's anchors by box fields). On the NHWC rows that is
// one permute of whole runs of B values; taken plainly it was two full
// transposes (NHWC -> NCHW, then B innermost), 0.7 ms each for YOLO's
// 80x80x255 head.
bool CompiledModel::Impl::splits_channels_for_transpose(const Node& n) const {
  const int x = n.inputs[0], y = n.outputs[0];
  if (!nhwc[static_cast<size_t>(x)] || rank(x) != 4 || rank(y) != 5) return false;
  const Dims& xd = dims(x);
  const Dims& yd = dims(y);
  if (yd[0] != xd[0] || yd[1] * yd[2] != xd[1] || yd[3] != xd[2] || yd[4] != xd[3]) return false;
  if (std::find(g.outputs.begin(), g.outputs.end(), y) != g.outputs.end()) return false;
  const std::vector<std::pair<int, int>> readers = g.consumers()[static_cast<size_t>(y)];
  if (readers.size() != 1) return false;
  const Node& t = g.nodes[static_cast<size_t>(readers[0].first)];
  return t.op_type == "Transpose" && t.attr_ints("perm") == Dims{0, 1, 3, 4, 2};
}

Status CompiledModel::Impl::lower_fallback(const Node& n, const std::string& why) {
  if (!opt.allow_fallback) return unimplemented_error("{}: {} (and host fallbacks are disabled)", n.label(), why);
  if (!graph::host_supports(n.op_type))
    return unimplemented_error("{}: {}, and the op has no host reference kernel either", n.label(), why);
  auto fn = std::make_shared<FallbackNode>();
  fn->key = fmt::format("host_fallback:model{}:{}", id, n.name);
  fn->node = n;
  fn->opset = g.opset;
  std::vector<int> dyn;
  for (int in : n.inputs) {
    if (in >= 0 && g.is_constant(in))
      fn->constants.push_back(*g.value(in).constant);
    else
      fn->constants.push_back(std::nullopt);
    fn->input_dims.push_back(in >= 0 ? dims(in) : Dims{});
    fn->input_types.push_back(in >= 0 ? g.value(in).type : graph::ElemType::FLOAT32);
    if (in >= 0 && !g.is_constant(in)) {
      dyn.push_back(in);
      note_plain(in);
    }
  }
  for (int o : n.outputs) {
    fn->output_dims.push_back(dims(o));
    fn->output_types.push_back(g.value(o).type);
  }
  fallbacks.push_back(fn);
  report.fallbacks.push_back(fmt::format("{}: {}", n.label(), why));
  const std::vector<int> outs = n.outputs;
  steps.push_back([this, fn, dyn, outs](Slots& s, uint8_t cq) -> Status {
    std::vector<Tensor> ins;
    for (int v : dyn) {
      TS_ASSIGN_OR_RETURN(Tensor t, plain(s, v, cq));
      if (t.dtype() != DataType::FLOAT32) {
        TS_ASSIGN_OR_RETURN(t, typecast(t, DataType::FLOAT32, cq));
      }
      ins.push_back(std::move(t));
    }
    TS_ASSIGN_OR_RETURN(std::vector<Tensor> ys, run_host_fallback(*device, fn, ins, cq));
    for (size_t k = 0; k < outs.size(); ++k) {
      Tensor y = ys[k];
      const DataType want = bf16_values[static_cast<size_t>(outs[k])] ? DataType::BFLOAT16 : act_dtype();
      if (want != DataType::FLOAT32) {
        TS_ASSIGN_OR_RETURN(y, typecast(y, want, cq));
      }
      TS_RETURN_IF_ERROR(put(s, outs[k], std::move(y)));
    }
    return ok_status();
  });
  return ok_status();
}

Status CompiledModel::Impl::plan_conv_sharding(const Node& n, const Conv2dGeometry& geo, Conv2dConfig& config) {
  const bool apply = opt.apply_conv_sharding.value_or(device->descriptor().emulated);
  const DataType io = act_dtype();
  auto est = auto_shard_conv2d(geo, config, io, config.dtype.value_or(io), device->descriptor().grid);
  std::string plan;
  bool fits = false;
  if (!est.ok()) {
    plan = fmt::format("DRAM interleaved (no sharded plan: {})", est.status().message());
  } else if (Status fit = check_conv2d_l1(*est, *device); !fit.ok()) {
    plan = fmt::format("DRAM interleaved ({} does not fit L1)", est->to_string());
  } else if (2 * est->total() > device->descriptor().l1_size_per_core) {
    // Half of L1 stays for what is live around the conv (its sharded input,
    // other L1 outputs): the plan cannot see run-time occupancy.
    plan = fmt::format("DRAM interleaved ({} leaves under half of L1 free)", est->to_string());
  } else {
    fits = true;
    plan = fmt::format("L1 {}", est->to_string());
  }
  if (fits && apply) {
    config.shard_layout = est->parallel.shard_layout;
    plan += " (applied)";
    // Sharded L1 output stays only for convs reading it as their input; other readers get DRAM.
    bool conv_readers = std::find(g.outputs.begin(), g.outputs.end(), n.outputs[0]) == g.outputs.end();
    for (const auto& [reader, slot] : consumers[static_cast<size_t>(n.outputs[0])])
      conv_readers = conv_readers && slot == 0 && g.nodes[static_cast<size_t>(reader)].op_type == "Conv";
    if (!conv_readers) plan += ", then DRAM interleaved for its readers";
    sharded_to_dram = !conv_readers;
  }
  report.conv_plans.push_back(fmt::format("{}: {}", n.name, plan));
  return ok_status();
}

StatusOr<Conv2dParams> CompiledModel::Impl::conv_params(const Node& n) const {
  const int y = n.outputs[0];
  const Dims& xd = dims(n.inputs[0]);
  const Dims& wd = dims(n.inputs[1]);
  TS_ASSIGN_OR_RETURN(graph::SpatialGeometry geo, graph::spatial_geometry(n, xd, wd));
  Conv2dParams p;
  p.batch_size = static_cast<uint32_t>(xd[0]);
  p.in_channels = static_cast<uint32_t>(xd[1]);
  p.input_height = static_cast<uint32_t>(xd[2]);
  p.input_width = static_cast<uint32_t>(xd[3]);
  p.out_channels = static_cast<uint32_t>(wd[0]);
  p.groups = static_cast<uint32_t>(n.attr_int("group", 1));
  p.kernel_size = {static_cast<uint32_t>(geo.kernel[0]), static_cast<uint32_t>(geo.kernel[1])};
  p.stride = {static_cast<uint32_t>(geo.strides[0]), static_cast<uint32_t>(geo.strides[1])};
  p.dilation = {static_cast<uint32_t>(geo.dilations[0]), static_cast<uint32_t>(geo.dilations[1])};
  p.padding = {static_cast<uint32_t>(geo.pads[0]), static_cast<uint32_t>(geo.pads[2]),
               static_cast<uint32_t>(geo.pads[1]), static_cast<uint32_t>(geo.pads[3])};
  if (auto act = activation_of(n)) p.activation = *act;
  if (p.output_height() != dims(y)[2] || p.output_width() != dims(y)[3])
    return internal_error("{}: the kernel's output {}x{} differs from the inferred {}", n.label(), p.output_height(),
                          p.output_width(), graph::dims_to_string(dims(y)));
  return p;
}

// A ConvTranspose node's params but its padding and activation (which
// lower_conv_transpose derives, cropping asymmetric pads).
ConvTranspose2dParams CompiledModel::Impl::conv_transpose_params(const Node& n,
                                                                 const graph::SpatialGeometry& geo) const {
  const Dims& xd = dims(n.inputs[0]);
  const Dims& wd = dims(n.inputs[1]);
  const Dims op = n.attr_ints("output_padding", {0, 0});
  ConvTranspose2dParams p;
  p.batch_size = static_cast<uint32_t>(xd[0]);
  p.in_channels = static_cast<uint32_t>(xd[1]);
  p.input_height = static_cast<uint32_t>(xd[2]);
  p.input_width = static_cast<uint32_t>(xd[3]);
  p.groups = static_cast<uint32_t>(n.attr_int("group", 1));
  p.out_channels = static_cast<uint32_t>(wd[1]) * p.groups;
  p.kernel_size = {static_cast<uint32_t>(geo.kernel[0]), static_cast<uint32_t>(geo.kernel[1])};
  p.stride = {static_cast<uint32_t>(geo.strides[0]), static_cast<uint32_t>(geo.strides[1])};
  p.dilation = {static_cast<uint32_t>(geo.dilations[0]), static_cast<uint32_t>(geo.dilations[1])};
  p.output_padding = {static_cast<uint32_t>(op.size() > 0 ? op[0] : 0),
                      static_cast<uint32_t>(op.size() > 1 ? op[1] : 0)};
  return p;
}

// Whether node n computes on the bfloat16-rounded values of its input `slot`
// (a conv's data input, lowered to bfloat16 at LoFi).
bool CompiledModel::Impl::rounds_input(const Node& n, size_t slot) const {
  if (slot != 0 || n.inputs.size() < 2 || rank(n.inputs[0]) != 4 || !g.is_constant(n.inputs[1])) return false;
  Conv2dConfig config{.weights_dtype = opt.weights_dtype};
  config.compute_config.math_fidelity = opt.math_fidelity;
  if (n.op_type == "Conv") {
    StatusOr<Conv2dParams> p = conv_params(n);
    return p.ok() && conv2d_rounds_input_to_bfloat16(*p, config);
  }
  if (n.op_type != "ConvTranspose") return false;
  // Only kernels that equal their stride lower (patch_shape): no padding to crop.
  StatusOr<graph::SpatialGeometry> geo = graph::spatial_geometry(n, dims(n.inputs[0]), dims(n.inputs[1]));
  if (!geo.ok() || std::any_of(geo->pads.begin(), geo->pads.end(), [](int64_t v) { return v != 0; })) return false;
  const ConvTranspose2dParams p = conv_transpose_params(n, *geo);
  return p.validate().ok() && conv_transpose2d_rounds_input_to_bfloat16(p, config);
}

// A fixed point over bf16_values: start from every value a Conv,
// ConvTranspose (but SiLU ones), MaxPool or Concat makes, and drop those read
// by anything but a rounding conv or a MaxPool / Concat whose own result
// stays, and the MaxPool / Concat results whose inputs did not all stay (a
// Concat's inputs share its dtype).
Status CompiledModel::Impl::plan_bfloat16_values() {
  bf16_values.assign(g.values.size(), false);
  Conv2dConfig probe{.weights_dtype = opt.weights_dtype};
  probe.compute_config.math_fidelity = opt.math_fidelity;
  Conv2dParams any;  // a 16 -> 16 channel 3x3 conv on an 8x8 map: whether any conv lowers here
  any.in_channels = any.out_channels = 16;
  any.input_height = any.input_width = 8;
  any.with_padding(1, 1);
  if (act_dtype() != DataType::FLOAT32 || !conv2d_rounds_input_to_bfloat16(any, probe)) return ok_status();
  auto passes_on = [](const Node& n) { return n.op_type == "MaxPool" || n.op_type == "Concat"; };
  for (const Node& n : g.nodes) {
    if (n.outputs.size() != 1) continue;
    // A conv whose SiLU runs after oneDNN writes its rows would round them
    // twice in bfloat16 (conv2d.cc, make_pd): its result stays float32.
    const bool residual = n.inputs.size() > 3 && n.inputs[3] >= 0;
    const std::optional<UnaryWithParam> act = activation_of(n);
    const bool silu = act && act->op == UnaryOpType::SILU;
    const bool conv = (n.op_type == "Conv" && !residual) || n.op_type == "ConvTranspose";
    if ((conv && !silu) || passes_on(n)) bf16_values[static_cast<size_t>(n.outputs[0])] = true;
  }
  for (int v : g.outputs) bf16_values[static_cast<size_t>(v)] = false;
  for (const MicroBatch& mb : micro_batches)
    for (int v : {mb.in, mb.out, mb.in_part, mb.out_part}) bf16_values[static_cast<size_t>(v)] = false;
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t v = 0; v < g.values.size(); ++v) {
      if (!bf16_values[v]) continue;
      bool keep = true;
      for (const auto& [reader, slot] : consumers[v]) {
        const Node& r = g.nodes[static_cast<size_t>(reader)];
        keep = keep && (rounds_input(r, static_cast<size_t>(slot)) ||
                        (passes_on(r) && bf16_values[static_cast<size_t>(r.outputs[0])]));
      }
      const int made_by = g.value(static_cast<int>(v)).producer;
      if (made_by < 0)
        keep = false;
      else if (const Node& producer = g.nodes[static_cast<size_t>(made_by)]; passes_on(producer))
        for (int in : producer.inputs) keep = keep && in >= 0 && bf16_values[static_cast<size_t>(in)];
      if (!keep) {
        bf16_values[v] = false;
        changed = true;
      }
    }
  }
  keeps_bf16_values = std::find(bf16_values.begin(), bf16_values.end(), true) != bf16_values.end();
  for (size_t v = 0; v < g.values.size(); ++v)
    if (bf16_values[v]) report.bfloat16_values.push_back(g.value(static_cast<int>(v)).name);
  return ok_status();
}

Status CompiledModel::Impl::lower_conv(const Node& n) {
  const int x = n.inputs[0], y = n.outputs[0];
  if (rank(x) != 4) return lower_fallback(n, fmt::format("{}-D convolution (the device kernel is 2-D)", rank(x) - 2));
  if (!g.is_constant(n.inputs[1])) return unimplemented_error("{}: the weight must be a constant", n.label());
  const Dims& wd = dims(n.inputs[1]);
  TS_ASSIGN_OR_RETURN(const Conv2dParams p, conv_params(n));
  TS_ASSIGN_OR_RETURN(Tensor w, Tensor::from_vector(g.value(n.inputs[1]).constant->f, to_shape(wd), DataType::FLOAT32));
  std::optional<Tensor> b;
  if (n.inputs.size() > 2 && n.inputs[2] >= 0) {
    TS_ASSIGN_OR_RETURN(
        b, Tensor::from_vector(g.value(n.inputs[2]).constant->f, Shape{p.out_channels}, DataType::FLOAT32));
  }
  report.conv_flops += per_run(lowering, p.flops());
  Conv2dConfig config{.weights_dtype = opt.weights_dtype, .dtype = out_dtype(y)};
  config.compute_config.math_fidelity = opt.math_fidelity;
  sharded_to_dram = false;
  TS_RETURN_IF_ERROR(plan_conv_sharding(n, conv2d_geometry(p, n.inputs.size() > 2 && n.inputs[2] >= 0), config));
  const int res = n.inputs.size() > 3 ? n.inputs[3] : -1;
  UnaryWithParam res_act;
  if (res >= 0) {
    auto op = parse_unary_op(n.attr_string("tessera_residual_activation", "identity"));
    if (!op) return internal_error("{}: unknown residual activation", n.label());
    res_act = {*op, n.attr_float("tessera_residual_activation_param", 0.0f)};
    note_nhwc(res);
  }
  convs.push_back(std::make_unique<cnn::DirectConv2d>(p, w, b, config));
  cnn::DirectConv2d* layer = convs.back().get();
  conv_layers.emplace_back(n.name, [layer]() -> const std::string& { return layer->selection(); });
  note_nhwc(x);
  nhwc[static_cast<size_t>(y)] = true;
  const bool to_dram = sharded_to_dram;
  const size_t step = steps.size();
  std::vector<int> parts;  // a fused channel concat's inputs (channel_concats)
  if (auto cat = channel_concats.find(x); cat != channel_concats.end() && res < 0 && consumers[x].size() == 1 &&
                                          std::find(g.outputs.begin(), g.outputs.end(), x) == g.outputs.end() &&
                                          same_micro_batch(cat->second.first, step, x)) {
    parts = cat->second.second;
    steps[cat->second.first] = [](Slots&, uint8_t) { return ok_status(); };
    fused_concats.emplace_back(step, parts);
  }
  steps.push_back([this, layer, x, y, res, res_act, to_dram, step, parts](Slots& s, uint8_t cq) -> Status {
    Tensor out;
    if (!parts.empty()) {
      std::vector<Tensor> ins;
      for (int v : parts) {
        TS_ASSIGN_OR_RETURN(Tensor t, as_nhwc(s, v, cq, /*dense=*/true));
        ins.push_back(std::move(t));
      }
      TS_ASSIGN_OR_RETURN(out, (*layer)(std::span<const Tensor>(ins), cq));
    } else if (res >= 0) {
      TS_ASSIGN_OR_RETURN(Tensor in, as_nhwc(s, x, cq, /*dense=*/true));
      TS_ASSIGN_OR_RETURN(Tensor r, as_nhwc(s, res, cq));
      // The conv may write over the residual when this is its last reader
      // and no other value (a view, the input) shares its buffer.
      const auto& dying = release[step];
      if (std::find(dying.begin(), dying.end(), res) != dying.end()) s[static_cast<size_t>(res)].reset();
      const bool in_place = r.buffer().use_count() == 1;
      TS_ASSIGN_OR_RETURN(out, (*layer)(in, Conv2dResidual{r, res_act, in_place}, cq));
    } else {
      TS_ASSIGN_OR_RETURN(Tensor in, as_nhwc(s, x, cq, /*dense=*/true));
      TS_ASSIGN_OR_RETURN(out, (*layer)(in, cq));
    }
    if (to_dram && out.memory_config().is_sharded()) {
      TS_ASSIGN_OR_RETURN(out, to_memory_config(out, DRAM_MEMORY_CONFIG, cq));
    }
    return put_nhwc(s, y, out);
  });
  return ok_status();
}

Status CompiledModel::Impl::lower_conv_transpose(const Node& n) {
  const int x = n.inputs[0], y = n.outputs[0];
  if (rank(x) != 4) return lower_fallback(n, fmt::format("{}-D transposed convolution", rank(x) - 2));
  if (!g.is_constant(n.inputs[1])) return unimplemented_error("{}: the weight must be a constant", n.label());
  const Dims& xd = dims(x);
  const Dims& wd = dims(n.inputs[1]);
  TS_ASSIGN_OR_RETURN(graph::SpatialGeometry geo, graph::spatial_geometry(n, xd, wd));
  ConvTranspose2dParams p = conv_transpose_params(n, geo);
  for (int64_t pad : geo.pads)
    if (pad < 0) return lower_fallback(n, "an output_shape past the full output");
  // Asymmetric padding: run with the smaller pad of each dim, slice the rest off.
  std::array<int64_t, 2> lo{}, crop_begin{}, crop_end{};
  for (int i = 0; i < 2; ++i) {
    lo[static_cast<size_t>(i)] = std::min(geo.pads[static_cast<size_t>(i)], geo.pads[static_cast<size_t>(i) + 2]);
    crop_begin[static_cast<size_t>(i)] = geo.pads[static_cast<size_t>(i)] - lo[static_cast<size_t>(i)];
    crop_end[static_cast<size_t>(i)] = geo.pads[static_cast<size_t>(i) + 2] - lo[static_cast<size_t>(i)];
  }
  p.padding = {static_cast<uint32_t>(lo[0]), static_cast<uint32_t>(lo[1])};
  const bool crop = crop_begin[0] || crop_begin[1] || crop_end[0] || crop_end[1];
  if (auto act = activation_of(n)) {
    if (crop) return lower_fallback(n, "asymmetric padding with a fused activation");
    p.activation = *act;
  }
  if (p.output_height() - crop_begin[0] - crop_end[0] != dims(y)[2] ||
      p.output_width() - crop_begin[1] - crop_end[1] != dims(y)[3])
    return lower_fallback(n, "output geometry the device kernel does not produce");
  TS_ASSIGN_OR_RETURN(Tensor w, Tensor::from_vector(g.value(n.inputs[1]).constant->f, to_shape(wd), DataType::FLOAT32));
  std::optional<Tensor> b;
  if (n.inputs.size() > 2 && n.inputs[2] >= 0) {
    TS_ASSIGN_OR_RETURN(
        b, Tensor::from_vector(g.value(n.inputs[2]).constant->f, Shape{p.out_channels}, DataType::FLOAT32));
  }
  report.conv_flops += per_run(lowering, p.flops());
  Conv2dConfig config{.weights_dtype = opt.weights_dtype, .dtype = out_dtype(y)};
  config.compute_config.math_fidelity = opt.math_fidelity;
  deconvs.push_back(std::make_unique<cnn::ConvTranspose2d>(p, w, b, config));
  cnn::ConvTranspose2d* layer = deconvs.back().get();
  conv_layers.emplace_back(n.name, [layer]() -> const std::string& { return layer->selection(); });
  note_nhwc(x);
  nhwc[static_cast<size_t>(y)] = true;
  const uint32_t oh = p.output_height(), ow = p.output_width();
  steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
    TS_ASSIGN_OR_RETURN(Tensor in, as_nhwc(s, x, cq));
    TS_ASSIGN_OR_RETURN(Tensor out, (*layer)(in, cq));
    if (crop) {
      TS_ASSIGN_OR_RETURN(out, reshape(out, Shape{p.batch_size, oh, ow, p.out_channels}));
      SliceParams sl{.begin = {0, static_cast<uint32_t>(crop_begin[0]), static_cast<uint32_t>(crop_begin[1]), 0},
                     .end = {p.batch_size, static_cast<uint32_t>(oh - crop_end[0]),
                             static_cast<uint32_t>(ow - crop_end[1]), p.out_channels},
                     .step = {1, 1, 1, 1}};
      TS_ASSIGN_OR_RETURN(out, slice(out, sl, {.cq_id = cq}));
    }
    return put_nhwc(s, y, out);
  });
  return ok_status();
}

Status CompiledModel::Impl::lower_pool(const Node& n) {
  const int x = n.inputs[0], y = n.outputs[0];
  if (rank(x) != 4) return lower_fallback(n, fmt::format("{}-D pooling (the device kernel is 2-D)", rank(x) - 2));
  if (n.outputs.size() > 1) return lower_fallback(n, "the Indices output");
  const Dims& xd = dims(x);
  TS_ASSIGN_OR_RETURN(graph::SpatialGeometry geo, graph::spatial_geometry(n, xd, {}));
  const bool average = n.op_type == "AveragePool";
  if (n.attr_int("storage_order", 0) != 0) return lower_fallback(n, "storage_order 1");
  if (geo.pads[0] != geo.pads[2] || geo.pads[1] != geo.pads[3]) return lower_fallback(n, "asymmetric padding");
  if (2 * geo.pads[0] > geo.kernel[0] || 2 * geo.pads[1] > geo.kernel[1])
    return lower_fallback(n, "padding over half the kernel");
  if (average && geo.dilations != Dims{1, 1}) return lower_fallback(n, "dilated average pooling");
  Pool2dParams p;
  p.batch_size = static_cast<uint32_t>(xd[0]);
  p.channels = static_cast<uint32_t>(xd[1]);
  p.input_height = static_cast<uint32_t>(xd[2]);
  p.input_width = static_cast<uint32_t>(xd[3]);
  p.kernel_size = {static_cast<uint32_t>(geo.kernel[0]), static_cast<uint32_t>(geo.kernel[1])};
  p.stride = {static_cast<uint32_t>(geo.strides[0]), static_cast<uint32_t>(geo.strides[1])};
  p.dilation = {static_cast<uint32_t>(geo.dilations[0]), static_cast<uint32_t>(geo.dilations[1])};
  p.padding = {static_cast<uint32_t>(geo.pads[0]), static_cast<uint32_t>(geo.pads[1])};
  p.ceil_mode = n.attr_int("ceil_mode", 0) != 0;
  p.count_include_pad = n.attr_int("count_include_pad", 0) != 0;
  if (!p.validate().ok() || p.output_height() != dims(y)[2] || p.output_width() != dims(y)[3])
    return lower_fallback(n, "a window geometry the device kernel does not produce");
  note_nhwc(x);
  nhwc[static_cast<size_t>(y)] = true;
  steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
    TS_ASSIGN_OR_RETURN(Tensor in, as_nhwc(s, x, cq));
    TS_ASSIGN_OR_RETURN(Tensor out, average ? avg_pool2d(in, p, cq) : max_pool2d(in, p, cq));
    return put_nhwc(s, y, out);
  });
  return ok_status();
}

Status CompiledModel::Impl::lower_resize(const Node& n, bool* lowered) {
  *lowered = false;
  const int x = n.inputs[0], y = n.outputs[0];
  if (rank(x) != 4) return ok_status();
  const Dims& xd = dims(x);
  const Dims& yd = dims(y);
  if (xd[0] != yd[0] || xd[1] != yd[1]) return ok_status();
  const bool upsample_op = n.op_type == "Upsample";
  const std::string mode = n.attr_string("mode", "nearest");
  const std::string ctm = upsample_op ? "asymmetric" : n.attr_string("coordinate_transformation_mode", "half_pixel");
  if (!upsample_op && g.opset >= 11 && n.inputs.size() > 1 && n.inputs[1] >= 0 && ctm == "tf_crop_and_resize")
    return ok_status();
  UpsampleParams up;
  // Scales from the inferred sizes unless the file's scales are given (ONNX
  // maps coordinates with the given scale, not with out/in).
  up.scale_h = static_cast<float>(yd[2]) / static_cast<float>(xd[2]);
  up.scale_w = static_cast<float>(yd[3]) / static_cast<float>(xd[3]);
  const size_t scales_slot = upsample_op || g.opset < 11 ? 1 : 2;
  if (n.inputs.size() > scales_slot && n.inputs[scales_slot] >= 0 && g.is_constant(n.inputs[scales_slot]) &&
      g.value(n.inputs[scales_slot]).constant->size() == 4) {
    up.scale_h = static_cast<float>(g.value(n.inputs[scales_slot]).constant->at(2));
    up.scale_w = static_cast<float>(g.value(n.inputs[scales_slot]).constant->at(3));
  }
  if (mode == "nearest") {
    const std::string nm = n.attr_string("nearest_mode", "round_prefer_floor");
    const bool legacy = upsample_op || g.opset < 11;  // Upsample and Resize-10: asymmetric, floor
    if (!legacy && (ctm != "asymmetric" || nm != "floor")) return ok_status();
    up.mode = UpsampleMode::NEAREST;
  } else if (mode == "linear" || mode == "bilinear") {
    up.mode = UpsampleMode::BILINEAR;
    if (ctm == "align_corners") {
      // ONNX maps with the unrounded output size, PyTorch (and the kernel) with the rounded one.
      if (std::floor(xd[2] * up.scale_h) != xd[2] * up.scale_h || std::floor(xd[3] * up.scale_w) != xd[3] * up.scale_w)
        return ok_status();
      up.align_corners = true;
    } else if (ctm != "half_pixel" && !(ctm == "pytorch_half_pixel" && yd[2] > 1 && yd[3] > 1)) {
      return ok_status();
    }
  } else {
    return ok_status();
  }
  if (mode != "nearest" && (n.attr_int("exclude_outside", 0) != 0)) return ok_status();
  *lowered = true;
  note_nhwc(x);
  nhwc[static_cast<size_t>(y)] = true;
  steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
    TS_ASSIGN_OR_RETURN(Tensor in, as_nhwc(s, x, cq));
    UpsampleParams q = up;
    q.cq_id = cq;
    TS_ASSIGN_OR_RETURN(Tensor out, upsample(in, q));
    if (out.shape().volume() != to_shape(dims(y)).volume())
      return internal_error("{}: upsample produced {}, expected {}", g.value(y).name, out.shape().to_string(),
                            graph::dims_to_string(dims(y)));
    return put_nhwc(s, y, out);
  });
  return ok_status();
}

Status CompiledModel::Impl::lower_binary(const Node& n, BinaryOpType op) {
  const int a = n.inputs[0], b = n.inputs[1], y = n.outputs[0];
  const auto act = activation_of(n);
  const bool ca = g.is_constant(a), cb = g.is_constant(b);
  // Layout: NHWC when a rank-4 run-time operand is NHWC and the other is a
  // constant or rank-4 too; plain otherwise.
  const bool a4 = rank(a) == 4, b4 = rank(b) == 4;
  bool out_nhwc = rank(y) == 4 && ((!ca && nhwc[static_cast<size_t>(a)] && (cb || b4) && rank(b) <= 4) ||
                                   (!cb && nhwc[static_cast<size_t>(b)] && (ca || a4) && rank(a) <= 4));
  std::optional<Tensor> const_a, const_b;
  if (out_nhwc) {
    if (ca) {
      TS_ASSIGN_OR_RETURN(const_a, constant_nhwc(a));
    }
    if (cb) {
      TS_ASSIGN_OR_RETURN(const_b, constant_nhwc(b));
    }
    note_nhwc(a), note_nhwc(b);
  } else {
    note_plain(a), note_plain(b);
  }
  nhwc[static_cast<size_t>(y)] = out_nhwc;
  steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
    Tensor ta, tb;
    if (const_a)
      ta = *const_a;
    else {
      TS_ASSIGN_OR_RETURN(ta, out_nhwc ? as_nhwc(s, a, cq) : plain(s, a, cq));
    }
    if (const_b)
      tb = *const_b;
    else {
      TS_ASSIGN_OR_RETURN(tb, out_nhwc ? as_nhwc(s, b, cq) : plain(s, b, cq));
    }
    TS_ASSIGN_OR_RETURN(Tensor out, binary(ta, tb, op, {.dtype = out_dtype(y), .activation = act, .cq_id = cq}));
    if (out_nhwc) return put(s, y, out);
    return put_plain(s, y, out);
  });
  return ok_status();
}

Status CompiledModel::Impl::lower_matmul(const Node& n) {
  const int a = n.inputs[0], b = n.inputs[1], y = n.outputs[0];
  if (rank(a) < 2 || rank(b) < 2) return lower_fallback(n, "1-D operands");
  const auto act = activation_of(n);
  std::optional<Tensor> const_b;
  if (g.is_constant(b)) {
    TS_ASSIGN_OR_RETURN(const_b, upload_weights(*g.value(b).constant, dims(b)));
  }
  if (g.is_constant(a)) return lower_fallback(n, "a constant left operand");
  const auto& ad = dims(a);
  const auto& bd = dims(b);
  report.conv_flops +=
      per_run(lowering, 2ull * static_cast<uint64_t>(to_shape(dims(y)).volume()) * static_cast<uint64_t>(ad.back()));
  (void)bd;
  note_plain(a), note_plain(b);
  steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
    TS_ASSIGN_OR_RETURN(Tensor ta, plain(s, a, cq));
    Tensor tb;
    if (const_b)
      tb = *const_b;
    else {
      TS_ASSIGN_OR_RETURN(tb, plain(s, b, cq));
    }
    TS_ASSIGN_OR_RETURN(
        Tensor out,
        matmul(
            ta, tb,
            {.dtype = out_dtype(y), .activation = act, .compute_kernel_config = compute_kernel_config(), .cq_id = cq}));
    return put_plain(s, y, out);
  });
  return ok_status();
}

Status CompiledModel::Impl::lower_gemm(const Node& n) {
  const int a = n.inputs[0], b = n.inputs[1], y = n.outputs[0];
  if (n.attr_int("transA", 0) || !g.is_constant(b) ||
      (n.inputs.size() > 2 && n.inputs[2] >= 0 && !g.is_constant(n.inputs[2])))
    return lower_fallback(n, "transA or a run-time B / C");
  const float alpha = n.attr_float("alpha", 1.0f), beta = n.attr_float("beta", 1.0f);
  const bool trans_b = n.attr_int("transB", 0) != 0;
  // alpha folds into B, beta into C, on the host.
  HostTensor bw = *g.value(b).constant;
  for (float& v : bw.f) v *= alpha;
  TS_ASSIGN_OR_RETURN(Tensor weight, upload_weights(std::move(bw), dims(b)));
  const int64_t nn = dims(y)[1];
  std::optional<Tensor> bias;
  std::optional<Tensor> full_c;  // C that is not one row broadcast (rare)
  if (n.inputs.size() > 2 && n.inputs[2] >= 0) {
    HostTensor c = *g.value(n.inputs[2]).constant;
    for (float& v : c.f) v *= beta;
    if (c.volume() == nn) {
      TS_ASSIGN_OR_RETURN(bias, upload(c, {nn}, DataType::FLOAT32));
    } else {
      TS_ASSIGN_OR_RETURN(full_c, upload(c, c.dims, act_dtype()));
    }
  }
  const auto act = activation_of(n);
  if (full_c && act) return lower_fallback(n, "a 2-D C with a fused activation");
  report.conv_flops +=
      per_run(lowering, 2ull * static_cast<uint64_t>(dims(y)[0] * nn) * static_cast<uint64_t>(dims(a)[1]));
  note_plain(a);
  steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
    TS_ASSIGN_OR_RETURN(Tensor ta, plain(s, a, cq));
    TS_ASSIGN_OR_RETURN(Tensor out, linear(ta, weight, bias,
                                           {.transpose_b = trans_b,
                                            .dtype = out_dtype(y),
                                            .activation = act,
                                            .compute_kernel_config = compute_kernel_config(),
                                            .cq_id = cq}));
    if (full_c) {
      TS_ASSIGN_OR_RETURN(out, add(out, *full_c, {.cq_id = cq}));
    }
    return put_plain(s, y, out);
  });
  return ok_status();
}

Status CompiledModel::Impl::lower(size_t ni) {
  const Node& n = g.nodes[ni];
  const std::string& op = n.op_type;
  for (int in : n.inputs)
    if (in >= 0 && !g.is_constant(in) && g.value(in).type != graph::ElemType::FLOAT32)
      return lower_fallback(n, "integer tensors at run time");
  for (int o : n.outputs)
    if (g.value(o).type != graph::ElemType::FLOAT32) return lower_fallback(n, "an integer result");
  const int x = n.inputs.empty() ? -1 : n.inputs[0];
  if (x >= 0 && g.is_constant(x) && op != "Concat" && op != "Add" && op != "Sub" && op != "Mul" && op != "Div")
    return lower_fallback(n, "a constant input the folder left (too large to fold)");
  const int y = n.outputs[0];
  ++report.device_ops;
  if (op == "Conv") return lower_conv(n);
  if (op == "ConvTranspose") return lower_conv_transpose(n);
  if (op == "MaxPool" || op == "AveragePool") return lower_pool(n);
  if (op == "GlobalAveragePool") {
    if (rank(x) != 4) return lower_fallback(n, "a non-4D input");
    note_nhwc(x);
    nhwc[static_cast<size_t>(y)] = true;
    steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
      TS_ASSIGN_OR_RETURN(Tensor in, as_nhwc(s, x, cq));
      TS_ASSIGN_OR_RETURN(Tensor out, global_avg_pool2d(in, cq));
      return put_nhwc(s, y, out);
    });
    return ok_status();
  }
  if (op == "Resize" || op == "Upsample") {
    bool lowered = false;
    TS_RETURN_IF_ERROR(lower_resize(n, &lowered));
    if (lowered) return ok_status();
    --report.device_ops;
    return lower_fallback(
        n, fmt::format("mode '{}' / coordinate mode '{}' has no device kernel", n.attr_string("mode", "nearest"),
                       n.attr_string("coordinate_transformation_mode", "half_pixel")));
  }
  if (op == "BatchNormalization" && rank(x) == 4 && n.outputs.size() == 1) {
    std::array<Tensor, 4> stats;
    for (size_t k = 0; k < 4; ++k) {
      if (!g.is_constant(n.inputs[k + 1]))
        return unimplemented_error("{}: input {} must be a constant", n.label(), k + 1);
      TS_ASSIGN_OR_RETURN(stats[k],
                          upload(*g.value(n.inputs[k + 1]).constant, dims(n.inputs[k + 1]), DataType::FLOAT32));
    }
    const float eps = n.attr_float("epsilon", 1e-5f);
    note_nhwc(x);
    nhwc[static_cast<size_t>(y)] = true;
    steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
      TS_ASSIGN_OR_RETURN(Tensor in, as_nhwc(s, x, cq));
      NormParams np{.epsilon = eps, .weight = stats[0], .bias = stats[1], .cq_id = cq};
      TS_ASSIGN_OR_RETURN(Tensor out, batch_norm(in, stats[2], stats[3], np));
      return put(s, y, out);
    });
    return ok_status();
  }
  if (auto act = device_unary(g, n); act && n.outputs.size() == 1) {
    const bool keep = nhwc[static_cast<size_t>(x)];
    nhwc[static_cast<size_t>(y)] = keep;
    steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
      TS_ASSIGN_OR_RETURN(Tensor in, get(s, x));
      TS_ASSIGN_OR_RETURN(Tensor out, unary(in, *act, {.dtype = out_dtype(y), .cq_id = cq}));
      return put(s, y, out);
    });
    return ok_status();
  }
  if (op == "SiLU") {
    const bool keep = nhwc[static_cast<size_t>(x)];
    nhwc[static_cast<size_t>(y)] = keep;
    steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
      TS_ASSIGN_OR_RETURN(Tensor in, get(s, x));
      TS_ASSIGN_OR_RETURN(Tensor out, unary(in, {UnaryOpType::SILU}, {.dtype = out_dtype(y), .cq_id = cq}));
      return put(s, y, out);
    });
    return ok_status();
  }
  static const std::map<std::string, BinaryOpType> binaries = {
      {"Add", BinaryOpType::ADD}, {"Sub", BinaryOpType::SUB}, {"Mul", BinaryOpType::MUL}, {"Div", BinaryOpType::DIV}};
  if (auto it = binaries.find(op); it != binaries.end()) {
    if (g.is_constant(n.inputs[0]) && g.is_constant(n.inputs[1])) return lower_fallback(n, "two constant operands");
    return lower_binary(n, it->second);
  }
  if (op == "MatMul") return lower_matmul(n);
  if (op == "Gemm") return lower_gemm(n);
  if (op == "Softmax") {
    const size_t r = rank(x);
    int64_t axis = n.attr_int("axis", g.opset >= 13 ? -1 : 1);
    if (axis < 0) axis += static_cast<int64_t>(r);
    note_plain(x);
    const bool legacy = g.opset < 13;
    const Dims xd = dims(x);
    steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
      TS_ASSIGN_OR_RETURN(Tensor in, plain(s, x, cq));
      if (legacy || axis == static_cast<int64_t>(r) - 1) {
        // Older opsets normalise the 2D view flattened at `axis`.
        int64_t outer = 1, inner = 1;
        for (size_t d = 0; d < r; ++d) (static_cast<int64_t>(d) < axis ? outer : inner) *= xd[d];
        if (!legacy) outer = to_shape(xd).volume() / xd.back(), inner = xd.back();
        TS_ASSIGN_OR_RETURN(Tensor flat,
                            reshape(in, Shape{static_cast<uint32_t>(outer), static_cast<uint32_t>(inner)}));
        TS_ASSIGN_OR_RETURN(Tensor out, softmax(flat, -1, cq));
        return put_plain(s, y, out);
      }
      std::vector<int> perm(r);
      std::iota(perm.begin(), perm.end(), 0);
      std::swap(perm[static_cast<size_t>(axis)], perm.back());
      TS_ASSIGN_OR_RETURN(Tensor t, permute(in, perm, {.cq_id = cq}));
      TS_ASSIGN_OR_RETURN(Tensor sm, softmax(t, -1, cq));
      TS_ASSIGN_OR_RETURN(Tensor out, permute(sm, perm, {.cq_id = cq}));
      return put_plain(s, y, out);
    });
    return ok_status();
  }
  if (op == "Concat") {
    const size_t r = rank(y);
    int64_t axis = n.attr_int("axis", 0);
    if (axis < 0) axis += static_cast<int64_t>(r);
    bool any_nhwc = false;
    for (int in : n.inputs) any_nhwc = any_nhwc || (in >= 0 && nhwc[static_cast<size_t>(in)]);
    const bool out_nhwc = r == 4 && any_nhwc;
    std::vector<std::optional<Tensor>> consts(n.inputs.size());
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const int in = n.inputs[k];
      if (g.is_constant(in)) {
        TS_ASSIGN_OR_RETURN(consts[k], out_nhwc ? constant_nhwc(in) : constant(in));
      } else if (out_nhwc)
        note_nhwc(in);
      else
        note_plain(in);
    }
    nhwc[static_cast<size_t>(y)] = out_nhwc;
    const int dim = out_nhwc ? kToNhwc[axis] : static_cast<int>(axis);
    const std::vector<int> ins = n.inputs;
    if (out_nhwc && dim == 3 && ins.size() <= 4 &&
        std::none_of(ins.begin(), ins.end(), [&](int in) { return in < 0 || g.is_constant(in); }))
      channel_concats[y] = {lowering, ins};
    steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
      std::vector<Tensor> ts;
      for (size_t k = 0; k < ins.size(); ++k) {
        if (consts[k]) {
          ts.push_back(*consts[k]);
          continue;
        }
        TS_ASSIGN_OR_RETURN(Tensor t, out_nhwc ? as_nhwc(s, ins[k], cq) : plain(s, ins[k], cq));
        ts.push_back(std::move(t));
      }
      // A graph output in a bfloat16 run leaves in float32, converted as it
      // is copied (out_dtype).
      TS_ASSIGN_OR_RETURN(Tensor out, concat(ts, dim, out_dtype(y).value_or(ts[0].dtype()), {.cq_id = cq}));
      return put(s, y, out);
    });
    return ok_status();
  }
  if (op == "Reshape" && splits_channels_for_transpose(n)) {
    // Kept as the NHWC rows viewed as (N, H, W, A, B): the Transpose moves
    // whole runs of B values (see splits_channels_for_transpose).
    split_nhwc[static_cast<size_t>(y)] = true;
    const Dims& d = dims(y);
    const Shape view{static_cast<uint32_t>(d[0]), static_cast<uint32_t>(d[3]), static_cast<uint32_t>(d[4]),
                     static_cast<uint32_t>(d[1]), static_cast<uint32_t>(d[2])};
    steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
      TS_ASSIGN_OR_RETURN(Tensor in, get(s, x));
      if (in.memory_config().is_sharded()) {
        TS_ASSIGN_OR_RETURN(in, to_memory_config(in, DRAM_MEMORY_CONFIG, cq));
      }
      TS_ASSIGN_OR_RETURN(Tensor out, reshape(in, view));
      return put(s, y, out);
    });
    return ok_status();
  }
  if (op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze") {
    note_plain(x);
    steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
      TS_ASSIGN_OR_RETURN(Tensor in, plain(s, x, cq));
      TS_ASSIGN_OR_RETURN(Tensor out, reshape(in, to_shape(dims(y))));
      return put(s, y, out);
    });
    return ok_status();
  }
  if (op == "Transpose") {
    const size_t r = rank(x);
    Dims perm = n.attr_ints("perm");
    if (perm.empty())
      for (size_t k = 0; k < r; ++k) perm.push_back(static_cast<int64_t>(r - 1 - k));
    const bool from_nhwc = nhwc[static_cast<size_t>(x)];
    std::vector<int> p(r);
    for (size_t k = 0; k < r; ++k) p[k] = from_nhwc ? kToNhwc[perm[k]] : static_cast<int>(perm[k]);
    if (split_nhwc[static_cast<size_t>(x)]) p = {0, 3, 1, 2, 4};  // (N, H, W, A, B) -> (N, A, H, W, B)
    steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
      TS_ASSIGN_OR_RETURN(Tensor in, get(s, x));
      TS_ASSIGN_OR_RETURN(Tensor out, permute(in, p, {.cq_id = cq}));
      return put(s, y, out);
    });
    return ok_status();
  }
  if (op == "Slice" || op == "Pad" || op == "Split") {
    // Evaluate the index arithmetic once on the host: per output, begin/end/step per dim (plain layout).
    const size_t r = rank(x);
    const bool from_nhwc = nhwc[static_cast<size_t>(x)] && r == 4;
    auto map = [&](auto v) {  // reorder per-dim NCHW values to NHWC
      if (!from_nhwc) return v;
      auto o = v;
      for (size_t d = 0; d < 4; ++d) o[static_cast<size_t>(kToNhwc[d])] = v[d];
      return o;
    };
    if (op == "Pad") {
      if (n.attr_string("mode", "constant") != "constant") return lower_fallback(n, "pad modes other than constant");
      const Dims& xd = dims(x);
      const Dims& yd = dims(y);
      Dims pads = n.attr_ints("pads");
      if (g.opset >= 11) pads = g.value(n.inputs[1]).constant->i;
      if (n.inputs.size() > 3 && n.inputs[3] >= 0) return lower_fallback(n, "the axes input");
      float value = n.attr_float("value", 0.0f);
      if (g.opset >= 11 && n.inputs.size() > 2 && n.inputs[2] >= 0 && g.value(n.inputs[2]).constant->size())
        value = static_cast<float>(g.value(n.inputs[2]).constant->at(0));
      std::vector<std::array<uint32_t, 2>> pp(r);
      for (size_t d = 0; d < r; ++d) {
        if (pads[d] < 0 || pads[d + r] < 0) return lower_fallback(n, "negative pads (cropping)");
        pp[d] = {static_cast<uint32_t>(pads[d]), static_cast<uint32_t>(pads[d + r])};
      }
      (void)xd, (void)yd;
      pp = map(pp);
      nhwc[static_cast<size_t>(y)] = from_nhwc;
      steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
        TS_ASSIGN_OR_RETURN(Tensor in, get(s, x));
        TS_ASSIGN_OR_RETURN(Tensor out, pad(in, pp, value, {.cq_id = cq}));
        return put(s, y, out);
      });
      return ok_status();
    }
    // Slice / Split: per output the [begin, end) per dim.
    std::vector<SliceParams> slices;
    if (op == "Slice") {
      // Re-derive begin/step from the host kernel's rules on a small index probe.
      std::vector<int64_t> starts, ends, axes, steps_v;
      if (g.opset < 10) {
        starts = n.attr_ints("starts"), ends = n.attr_ints("ends"), axes = n.attr_ints("axes");
      } else {
        starts = g.value(n.inputs[1]).constant->i, ends = g.value(n.inputs[2]).constant->i;
        if (n.inputs.size() > 3 && n.inputs[3] >= 0) axes = g.value(n.inputs[3]).constant->i;
        if (n.inputs.size() > 4 && n.inputs[4] >= 0) steps_v = g.value(n.inputs[4]).constant->i;
      }
      if (axes.empty())
        for (size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<int64_t>(k));
      if (steps_v.empty()) steps_v.assign(starts.size(), 1);
      SliceParams sl;
      const Dims& xd = dims(x);
      for (size_t d = 0; d < r; ++d)
        sl.begin.push_back(0), sl.end.push_back(static_cast<uint32_t>(xd[d])), sl.step.push_back(1);
      for (size_t k = 0; k < starts.size(); ++k) {
        const auto d = static_cast<size_t>(axes[k] < 0 ? axes[k] + static_cast<int64_t>(r) : axes[k]);
        const int64_t dim = xd[d];
        if (steps_v[k] < 1) return lower_fallback(n, "negative steps");
        auto clamp = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + dim : v, 0, dim); };
        sl.begin[d] = static_cast<uint32_t>(clamp(starts[k]));
        sl.end[d] = static_cast<uint32_t>(clamp(ends[k]));
        sl.step[d] = static_cast<uint32_t>(steps_v[k]);
        if (sl.begin[d] >= sl.end[d]) return lower_fallback(n, "an empty result");
      }
      slices.push_back(sl);
    } else {
      const Dims& xd = dims(x);
      int64_t axis = n.attr_int("axis", 0);
      if (axis < 0) axis += static_cast<int64_t>(r);
      uint32_t begin = 0;
      for (int o : n.outputs) {
        SliceParams sl;
        for (size_t d = 0; d < r; ++d)
          sl.begin.push_back(0), sl.end.push_back(static_cast<uint32_t>(xd[d])), sl.step.push_back(1);
        const auto len = static_cast<uint32_t>(dims(o)[static_cast<size_t>(axis)]);
        if (len == 0) return lower_fallback(n, "an empty output");
        sl.begin[static_cast<size_t>(axis)] = begin;
        sl.end[static_cast<size_t>(axis)] = begin + len;
        begin += len;
        slices.push_back(sl);
      }
    }
    for (auto& sl : slices) sl.begin = map(sl.begin), sl.end = map(sl.end), sl.step = map(sl.step);
    const std::vector<int> outs = n.outputs;
    for (int o : outs) nhwc[static_cast<size_t>(o)] = from_nhwc;
    steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
      TS_ASSIGN_OR_RETURN(Tensor in, get(s, x));
      for (size_t k = 0; k < outs.size(); ++k) {
        TS_ASSIGN_OR_RETURN(Tensor out, slice(in, slices[k], {.cq_id = cq}));
        TS_RETURN_IF_ERROR(put(s, outs[k], out));
      }
      return ok_status();
    });
    return ok_status();
  }
  if (op == "LayerNormalization" && n.outputs.size() == 1) {
    const size_t r = rank(x);
    int64_t axis = n.attr_int("axis", -1);
    if (axis < 0) axis += static_cast<int64_t>(r);
    int64_t outer = 1, inner = 1;
    for (size_t d = 0; d < r; ++d) (static_cast<int64_t>(d) < axis ? outer : inner) *= dims(x)[d];
    if (!g.is_constant(n.inputs[1]) || (n.inputs.size() > 2 && n.inputs[2] >= 0 && !g.is_constant(n.inputs[2])))
      return lower_fallback(n, "run-time scale or bias");
    TS_ASSIGN_OR_RETURN(Tensor w, upload(*g.value(n.inputs[1]).constant, {inner}, DataType::FLOAT32));
    std::optional<Tensor> b;
    if (n.inputs.size() > 2 && n.inputs[2] >= 0) {
      TS_ASSIGN_OR_RETURN(b, upload(*g.value(n.inputs[2]).constant, {inner}, DataType::FLOAT32));
    }
    if (g.value(n.inputs[1]).constant->volume() != inner) return lower_fallback(n, "a broadcast scale");
    const float eps = n.attr_float("epsilon", 1e-5f);
    note_plain(x);
    steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
      TS_ASSIGN_OR_RETURN(Tensor in, plain(s, x, cq));
      TS_ASSIGN_OR_RETURN(Tensor flat, reshape(in, Shape{static_cast<uint32_t>(outer), static_cast<uint32_t>(inner)}));
      TS_ASSIGN_OR_RETURN(Tensor out, layer_norm(flat, {.epsilon = eps, .weight = w, .bias = b, .cq_id = cq}));
      return put_plain(s, y, out);
    });
    return ok_status();
  }
  --report.device_ops;
  if (kDeviceOps.count(op)) return lower_fallback(n, "attributes the device kernel does not cover");
  return lower_fallback(n, "no device kernel");
}

Status CompiledModel::Impl::plan_liveness() {
  // The last step reading each value; graph outputs live to the end.
  std::vector<int> last(g.values.size(), -1);
  for (size_t ni = 0; ni < g.nodes.size(); ++ni)
    for (int in : g.nodes[ni].inputs)
      if (in >= 0) last[static_cast<size_t>(in)] = static_cast<int>(ni);
  for (int o : g.outputs) last[static_cast<size_t>(o)] = -1;
  for (int i : g.inputs) last[static_cast<size_t>(i)] = -1;  // owned by the caller
  // A fused channel concat's inputs are read by its conv (fused_concats).
  for (const auto& [conv, ins] : fused_concats)
    for (int in : ins)
      if (last[static_cast<size_t>(in)] >= 0)
        last[static_cast<size_t>(in)] = std::max(last[static_cast<size_t>(in)], static_cast<int>(conv));
  std::set<int> held;  // a micro-batch's output part lives to the group's end (run_micro_batch)
  for (const MicroBatch& mb : micro_batches) {
    held.insert(mb.in);  // read through in_part; released by run_micro_batch
    held.insert(mb.out_part);
    last[static_cast<size_t>(mb.out_part)] = -1;
  }
  release.assign(g.nodes.size(), {});
  for (size_t v = 0; v < last.size(); ++v)
    if (last[v] >= 0 && !g.values[v].constant) release[static_cast<size_t>(last[v])].push_back(static_cast<int>(v));
  // Outputs nobody reads (a Dropout mask, a skipped optional) go right away.
  for (size_t ni = 0; ni < g.nodes.size(); ++ni)
    for (int o : g.nodes[ni].outputs)
      if (last[static_cast<size_t>(o)] < 0 && !held.count(o) &&
          std::find(g.outputs.begin(), g.outputs.end(), o) == g.outputs.end())
        release[ni].push_back(o);
  return ok_status();
}

namespace {

// Ops that treat each image of the batch on its own, given rank-4 values
// whose dim 0 is the batch (checked by the caller).
bool per_image_op(const Node& n) {
  static const std::set<std::string> ops = {"Conv",
                                            "ConvTranspose",
                                            "MaxPool",
                                            "AveragePool",
                                            "GlobalAveragePool",
                                            "BatchNormalization",
                                            "Relu",
                                            "Sigmoid",
                                            "Tanh",
                                            "SiLU",
                                            "HardSwish",
                                            "HardSigmoid",
                                            "LeakyRelu",
                                            "Mish",
                                            "Clip",
                                            "Exp",
                                            "Sqrt",
                                            "Add",
                                            "Sub",
                                            "Mul",
                                            "Div",
                                            "Concat"};
  if (!ops.count(n.op_type) || n.outputs.size() != 1) return false;
  if (n.op_type == "Concat") {
    const int64_t axis = n.attr_int("axis", 1);
    return axis != 0 && axis != -4;
  }
  return true;
}

}  // namespace

// The micro-batched runs (CompileOptions::micro_batch) of `per` images per
// group. A cut is a point between two nodes where one value alone is live
// (made before, read after): a run of nodes between two cuts reads only the
// first cut's value and leaves only the second's, so it can run group by
// group. Within each longest chain of such intervals whose ops are
// per-image and fit the cache per group, the run is the stretch of whole
// intervals with the largest estimated saving (below), if positive.
std::vector<CompiledModel::Impl::MicroBatch> CompiledModel::Impl::find_micro_batches(uint32_t per) const {
  const size_t k = g.nodes.size();
  const int64_t batch = g.value(g.inputs[0]).dims.empty() ? 0 : g.value(g.inputs[0]).dims[0];
  if (per == 0 || batch <= per || batch % per != 0) return {};
  const uint64_t es = element_size(act_dtype());
  auto batched = [&](int v) {
    const graph::Value& val = g.value(v);
    return val.type == graph::ElemType::FLOAT32 && val.has_shape && val.dims.size() == 4 && val.dims[0] == batch;
  };
  auto bytes = [&](int v, int64_t images) {
    return static_cast<uint64_t>(graph::dims_volume(g.value(v).dims) / batch * images) * es;
  };
  // Per node: whether it may run per group, and whether the whole batch spills.
  std::vector<bool> fits(k), spills(k);
  std::vector<uint64_t> whole(k), weights(k);  // bytes each node moves over the whole batch; its constants' bytes
  const uint64_t wes = opt.weights_dtype == DataType::FLOAT32 ? 4 : 2;  // block floats: about 1, counted as 2
  const uint64_t shared = device->descriptor().shared_cache_size;
  const uint64_t budget = opt.micro_batch_cache_bytes ? opt.micro_batch_cache_bytes
                          : shared                    ? shared / 2
                                                      : uint64_t{16} << 20;
  for (size_t ni = 0; ni < k; ++ni) {
    const Node& n = g.nodes[ni];
    bool ok = per_image_op(n) && batched(n.outputs[0]);
    uint64_t group = bytes(n.outputs[0], per);
    whole[ni] = bytes(n.outputs[0], batch);
    for (int v : n.inputs) {
      if (v < 0) continue;
      if (g.is_constant(v)) {  // weights; an element-wise operand must not vary by image
        const auto& d = g.value(v).dims;
        weights[ni] += static_cast<uint64_t>(graph::dims_volume(d)) * wes;
        ok = ok && n.op_type != "Concat" &&
             (n.op_type == "Conv" || n.op_type == "ConvTranspose" || n.op_type == "BatchNormalization" ||
              d.size() < 4 || d[0] == 1);
        continue;
      }
      ok = ok && batched(v);
      group += bytes(v, per);
      whole[ni] += bytes(v, batch);
    }
    fits[ni] = ok && group <= budget;
    spills[ni] = whole[ni] > budget;
  }
  // Cuts: positions p (before node p) where one batched value alone is live.
  std::vector<int> made(g.values.size(), -1), last(g.values.size(), -1);
  for (size_t ni = 0; ni < k; ++ni) {
    for (int v : g.nodes[ni].inputs)
      if (v >= 0) last[static_cast<size_t>(v)] = static_cast<int>(ni);
    for (int v : g.nodes[ni].outputs) made[static_cast<size_t>(v)] = static_cast<int>(ni);
  }
  for (int o : g.outputs) last[static_cast<size_t>(o)] = std::numeric_limits<int>::max();
  std::vector<std::pair<size_t, int>> cuts;  // (position, the live value)
  for (size_t p = 0; p <= k; ++p) {
    int live = -1, count = 0;
    for (size_t v = 0; v < g.values.size() && count < 2; ++v) {
      const bool input = std::find(g.inputs.begin(), g.inputs.end(), static_cast<int>(v)) != g.inputs.end();
      if (g.values[v].constant || last[v] < static_cast<int>(p) || made[v] >= static_cast<int>(p) ||
          (made[v] < 0 && !input))
        continue;
      live = static_cast<int>(v);
      ++count;
    }
    if (count == 1 && batched(live)) cuts.emplace_back(p, live);
  }
  auto all_fit = [&](size_t i) {  // interval i: nodes [cuts[i], cuts[i + 1])
    for (size_t ni = cuts[i].first; ni < cuts[i + 1].first; ++ni)
      if (!fits[ni]) return false;
    return true;
  };
  // A run [a, b) of cuts pays for copying its output into the whole batch
  // (read and written) and for reading its weights once per group; it saves
  // about kSavedShare of the bytes its spilling nodes move over the whole
  // batch (ResNet-50 at batch 8: 6 ms saved on 554 MB moved, about 240 MB
  // of DRAM traffic at 40 GB/s).
  constexpr double kSavedShare = 0.4;
  const int64_t groups = batch / per;
  std::vector<double> saved(cuts.size(), 0.0);  // saved[i]: net bytes of intervals [0, i)
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    saved[i + 1] = saved[i];
    for (size_t ni = cuts[i].first; ni < cuts[i + 1].first; ++ni) {
      if (spills[ni]) saved[i + 1] += kSavedShare * static_cast<double>(whole[ni]);
      saved[i + 1] -= static_cast<double>((groups - 1) * static_cast<int64_t>(weights[ni]));
    }
  }
  std::vector<MicroBatch> runs;
  for (size_t c = 0; c + 1 < cuts.size();) {
    size_t end = c;
    while (end + 1 < cuts.size() && all_fit(end)) ++end;
    const size_t first = c;
    c = end == first ? c + 1 : end;
    // The best run inside the chain of intervals [first, end).
    double best = 0;
    size_t a0 = 0, b0 = 0;
    for (size_t a = first; a < end; ++a)
      for (size_t b = a + 1; b <= end; ++b) {
        const double net = saved[b] - saved[a] - 2.0 * static_cast<double>(bytes(cuts[b].second, batch));
        if (net > best) best = net, a0 = a, b0 = b;
      }
    if (best <= 0) continue;
    MicroBatch mb;
    mb.begin = cuts[a0].first;
    mb.end = cuts[b0].first;
    mb.in = cuts[a0].second;
    mb.out = cuts[b0].second;
    mb.per = per;
    mb.groups = static_cast<uint32_t>(groups);
    runs.push_back(mb);
  }
  return runs;
}

// Picks the images per group (CompileOptions::micro_batch; by default one
// per worker thread, so that each worker's convs keep one image's maps in its
// own cache, else one) and rewrites each run's nodes onto per-group values.
// ResNet-50 at batch 8 on two workers, device-only, two alternated rounds:
// 146.1 / 153.4 ms whole-batch, 141.6 / 144.3 with one image per group,
// 140.2 / 138.0 with two.
Status CompiledModel::Impl::plan_micro_batches() {
  if (opt.micro_batch == 0u || g.inputs.empty()) return ok_status();
  const auto& d0 = g.value(g.inputs[0]).dims;
  if (opt.micro_batch && !d0.empty() && *opt.micro_batch < d0[0] && d0[0] % *opt.micro_batch != 0)
    return invalid_argument_error("CompileOptions::micro_batch {} does not divide the batch of {} images",
                                  *opt.micro_batch, d0[0]);
  if (!opt.micro_batch && device->descriptor().emulated) return ok_status();
  if (device->descriptor().num_dram_banks != 1) return ok_status();  // batch views need one DRAM bank
  std::vector<MicroBatch> runs;
  if (opt.micro_batch) {
    runs = find_micro_batches(*opt.micro_batch);
  } else {
    // The candidate covering the most nodes; ties go to the larger groups.
    auto covered = [](const std::vector<MicroBatch>& r) {
      size_t n = 0;
      for (const auto& mb : r) n += mb.end - mb.begin;
      return n;
    };
    for (uint32_t per : {static_cast<uint32_t>(device->workers().num_threads()), 1u}) {
      std::vector<MicroBatch> r = find_micro_batches(per);
      if (covered(r) > covered(runs)) runs = std::move(r);
    }
  }
  for (MicroBatch mb : runs) {
    auto part = [&](int v) {
      graph::Value pv = g.value(v);
      pv.name += "/micro_batch";
      pv.constant.reset();
      pv.dims[0] = mb.per;
      return g.add_value(std::move(pv));
    };
    mb.in_part = part(mb.in);
    mb.out_part = part(mb.out);
    for (size_t ni = mb.begin; ni < mb.end; ++ni) {
      Node& n = g.nodes[ni];
      for (int& v : n.inputs) {
        if (v == mb.in)
          v = mb.in_part;
        else if (v == mb.out)
          v = mb.out_part;
      }
      for (int& v : n.outputs) {
        if (v == mb.out) {
          v = mb.out_part;
          g.value(mb.out_part).producer = static_cast<int>(ni);
          g.value(mb.out).producer = -1;
        } else {
          g.value(v).dims[0] = mb.per;
        }
      }
    }
    report.micro_batches.push_back(fmt::format("nodes {} .. {} ({}): {} groups of {} image(s)",
                                               g.nodes[mb.begin].label(), g.nodes[mb.end - 1].label(),
                                               mb.end - mb.begin, mb.groups, mb.per));
    micro_batches.push_back(mb);
  }
  return ok_status();
}

// Work per run of a node lowered for one micro-batch group: times the groups.
uint64_t CompiledModel::Impl::per_run(size_t ni, uint64_t work) const {
  for (const auto& mb : micro_batches)
    if (ni >= mb.begin && ni < mb.end) return work * mb.groups;
  return work;
}

Status CompiledModel::Impl::run_steps(size_t begin, size_t end, Slots& s, uint8_t cq, bool group) {
  step_cq = cq;
  for (size_t i = begin; i < end;) {
    auto mb =
        std::find_if(micro_batches.begin(), micro_batches.end(), [&](const MicroBatch& m) { return m.begin == i; });
    if (!group && mb != micro_batches.end()) {
      TS_RETURN_IF_ERROR(run_micro_batch(*mb, s, cq));
      i = mb->end;
      continue;
    }
    Status st = steps[i](s, cq);
    if (!st.ok()) return Status(st.code(), fmt::format("{}: {}", g.nodes[i].label(), st.message()));
    for (int v : release[i]) s[static_cast<size_t>(v)].reset();
    ++i;
  }
  return ok_status();
}

Status CompiledModel::Impl::run_micro_batch(const MicroBatch& mb, Slots& s, uint8_t cq) {
  TS_ASSIGN_OR_RETURN(Tensor whole, get(s, mb.in));
  if (whole.memory_config().is_sharded() || whole.memory_config().buffer_type != BufferType::DRAM) {
    TS_ASSIGN_OR_RETURN(whole, to_memory_config(whole, DRAM_MEMORY_CONFIG, cq));
  }
  std::optional<Tensor> out;
  for (uint32_t grp = 0; grp < mb.groups; ++grp) {
    // Held here as well as in the slot, so no kernel writes over the input in place.
    TS_ASSIGN_OR_RETURN(Tensor part, whole.batch_view(grp * mb.per, mb.per));
    s[static_cast<size_t>(mb.in_part)] = part;
    TS_RETURN_IF_ERROR(run_steps(mb.begin, mb.end, s, cq, /*group=*/true));
    TS_ASSIGN_OR_RETURN(Tensor result, get(s, mb.out_part));
    if (!out) {
      TensorSpec spec = result.spec();
      std::vector<uint32_t> d(spec.shape.dims().begin(), spec.shape.dims().end());
      d[0] *= mb.groups;
      spec.shape = Shape(std::span<const uint32_t>(d));
      spec.memory_config = DRAM_MEMORY_CONFIG;
      TS_ASSIGN_OR_RETURN(out, allocate_tensor_on_device(spec, *device));
    }
    TS_ASSIGN_OR_RETURN(Tensor dst, out->batch_view(grp * mb.per, mb.per));
    TS_RETURN_IF_ERROR(reshard(result, DRAM_MEMORY_CONFIG, dst, cq).status());
    s[static_cast<size_t>(mb.in_part)].reset();
    s[static_cast<size_t>(mb.out_part)].reset();
  }
  s[static_cast<size_t>(mb.out)] = std::move(*out);
  // The whole input has no reader past the run (a cut); graph inputs belong to the caller.
  if (std::find(g.inputs.begin(), g.inputs.end(), mb.in) == g.inputs.end()) s[static_cast<size_t>(mb.in)].reset();
  return ok_status();
}

// ------------------------------------------------------------------ CompiledModel

CompiledModel::CompiledModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CompiledModel::~CompiledModel() = default;

StatusOr<std::unique_ptr<CompiledModel>> CompiledModel::compile(Graph graph, Device& device,
                                                                const CompileOptions& options) {
  if (options.dtype != DataType::FLOAT32 && options.dtype != DataType::BFLOAT16)
    return invalid_argument_error("CompileOptions::dtype must be FLOAT32 or BFLOAT16, got {}",
                                  data_type_name(options.dtype));
  if (options.dtype == DataType::BFLOAT16 && options.weights_dtype == DataType::FLOAT32)
    return invalid_argument_error("bfloat16 activations need bfloat16 or block-float weights, got float32 weights");
  auto impl = std::make_unique<Impl>();
  impl->device = &device;
  impl->opt = options;
  impl->id = next_model_id++;
  for (int i : graph.inputs)
    if (!graph.value(i).has_shape)
      return invalid_argument_error("graph input '{}' has no shape (run infer_shapes)", graph.value(i).name);
  if (options.optimize) impl->report.passes = graph::optimize(graph);
  impl->g = std::move(graph);
  Graph& g = impl->g;
  TS_RETURN_IF_ERROR(impl->plan_micro_batches());
  impl->nhwc.assign(g.values.size(), false);
  impl->split_nhwc.assign(g.values.size(), false);
  impl->consumers = g.consumers();
  impl->constants.assign(g.values.size(), std::nullopt);
  impl->graph_input.assign(g.values.size(), false);
  for (int i : g.inputs) impl->graph_input[static_cast<size_t>(i)] = true;
  TS_RETURN_IF_ERROR(impl->plan_bfloat16_values());
  for (int i : g.inputs) {
    if (g.value(i).type != graph::ElemType::FLOAT32)
      return unimplemented_error("graph input '{}' is an integer tensor; bind it as a constant (Graph::bind_constant)",
                                 g.value(i).name);
    impl->in_shapes.push_back(g.value(i).dims);
  }
  for (int o : g.outputs) impl->out_shapes.push_back(g.value(o).dims);
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    const size_t before = impl->steps.size();
    for (const auto& mb : impl->micro_batches)
      if (mb.begin == ni) impl->nhwc[static_cast<size_t>(mb.in_part)] = impl->nhwc[static_cast<size_t>(mb.in)];
    impl->lowering = ni;
    TS_RETURN_IF_ERROR(impl->lower(ni));
    if (impl->steps.size() != before + 1)
      return internal_error("{} lowered to {} steps", g.nodes[ni].label(), impl->steps.size() - before);
    for (const auto& mb : impl->micro_batches)
      if (mb.end == ni + 1) impl->nhwc[static_cast<size_t>(mb.out)] = impl->nhwc[static_cast<size_t>(mb.out_part)];
  }
  TS_RETURN_IF_ERROR(impl->plan_liveness());
  for (int o : g.outputs)
    if (g.is_constant(o)) TS_RETURN_IF_ERROR(impl->constant(o).status());
  return std::unique_ptr<CompiledModel>(new CompiledModel(std::move(impl)));
}

StatusOr<std::vector<Tensor>> CompiledModel::run(std::span<const Tensor> inputs, uint8_t cq_id) {
  Impl& m = *impl_;
  const Graph& g = m.g;
  if (inputs.size() != g.inputs.size())
    return invalid_argument_error("the model takes {} input(s), got {}", g.inputs.size(), inputs.size());
  Impl::Slots slots(g.values.size());
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& t = inputs[k];
    const Shape want = to_shape(m.in_shapes[k]);
    if (!t.is_on_device() || t.shape().volume() != want.volume() || t.layout() != Layout::ROW_MAJOR)
      return invalid_argument_error("input {} ('{}'): expected a ROW_MAJOR device tensor of shape {}, got {} {} on {}",
                                    k, g.value(g.inputs[k]).name, graph::dims_to_string(m.in_shapes[k]),
                                    t.shape().to_string(), layout_name(t.layout()),
                                    t.is_on_device() ? "the device" : "the host");
    Tensor x = t;
    if (x.shape() != want) {
      TS_ASSIGN_OR_RETURN(x, reshape(x, want));
    }
    // float32 / bfloat16 rows convert to the activation dtype where first
    // read (Impl::get, as_nhwc); other dtypes here.
    if (x.dtype() != DataType::FLOAT32 && x.dtype() != DataType::BFLOAT16) {
      TS_ASSIGN_OR_RETURN(x, typecast(x, m.act_dtype(), cq_id));
    }
    slots[static_cast<size_t>(g.inputs[k])] = std::move(x);
  }
  TS_RETURN_IF_ERROR(m.run_steps(0, m.steps.size(), slots, cq_id));
  std::vector<Tensor> outs;
  for (int o : g.outputs) {
    TS_ASSIGN_OR_RETURN(Tensor t, m.get(slots, o));
    if (m.nhwc[static_cast<size_t>(o)]) {
      TS_ASSIGN_OR_RETURN(t, permute(t, kNhwcToNchwPerm, {.cq_id = cq_id}));
    }
    if (t.dtype() != DataType::FLOAT32) {
      TS_ASSIGN_OR_RETURN(t, typecast(t, DataType::FLOAT32, cq_id));
    }
    if (t.shape() != to_shape(g.value(o).dims)) {
      TS_ASSIGN_OR_RETURN(t, reshape(t, to_shape(g.value(o).dims)));
    }
    outs.push_back(std::move(t));
  }
  return outs;
}

cnn::Model CompiledModel::pipeline_model() {
  return [this](const Tensor& input) -> StatusOr<cnn::ModelOutput> {
    if (impl_->g.inputs.size() != 1)
      return invalid_argument_error("the Pipeline feeds one input; the model takes {}", impl_->g.inputs.size());
    const Tensor in[] = {input};
    TS_ASSIGN_OR_RETURN(std::vector<Tensor> outs, run(in));
    if (outs.size() == 1) return cnn::ModelOutput::of(outs[0]);
    std::vector<cnn::ModelOutput> list;
    for (auto& t : outs) list.push_back(cnn::ModelOutput::of(t));
    return cnn::ModelOutput::of(std::move(list));
  };
}

const std::vector<Dims>& CompiledModel::input_shapes() const { return impl_->in_shapes; }
const std::vector<Dims>& CompiledModel::output_shapes() const { return impl_->out_shapes; }
std::vector<std::string> CompiledModel::input_names() const {
  std::vector<std::string> r;
  for (int i : impl_->g.inputs) r.push_back(impl_->g.value(i).name);
  return r;
}
std::vector<std::string> CompiledModel::output_names() const {
  std::vector<std::string> r;
  for (int o : impl_->g.outputs) r.push_back(impl_->g.value(o).name);
  return r;
}
const CompileReport& CompiledModel::report() const { return impl_->report; }
std::vector<std::string> CompiledModel::conv_selections() const {
  std::vector<std::string> out;
  for (const auto& [name, selection] : impl_->conv_layers)
    out.push_back(fmt::format("{}: {}", name, selection().empty() ? "not run yet" : selection()));
  return out;
}
const Graph& CompiledModel::graph() const { return impl_->g; }
Device& CompiledModel::device() const { return *impl_->device; }

}  // namespace tessera::runtime
