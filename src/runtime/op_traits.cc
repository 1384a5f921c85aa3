// The op-traits table: every ONNX op type the compiler knows, with how it
// lowers, whether it computes each image alone, and which of its inputs must
// be constants. Adding an op is one row here and its lowering function
// (src/runtime/README.md walks through one).
#include <algorithm>

#include "lowering.h"

namespace tessera::runtime {

namespace {

using I = CompiledModel::Impl;
constexpr auto kAfterFirst = ConstantInputs::kAfterFirst;
constexpr auto kAll = ConstantInputs::kAll;
constexpr auto kNone = ConstantInputs::kNone;

// Sorted by op type (find_op_traits searches it).
constexpr OpTraits kOpTraits[] = {
    // op type, lowering, per image, constant first operand, constant inputs, integer results
    {"Abs", &I::lower_unary, true},
    {"Add", &I::lower_arith, true, true},
    {"And", &I::lower_logic, true, false, kNone, true},  // booleans as 1 / 0 (lower_logic)
    {"ArgMax", &I::lower_arg_reduce, false, false, kNone, true},  // indices (arg_reduce.h)
    {"ArgMin", &I::lower_arg_reduce, false, false, kNone, true},
    {"AveragePool", &I::lower_pool, true},
    {"BatchNormalization", &I::lower_batch_norm, true, false, kAfterFirst},
    {"Cast", &I::lower_unary, true},  // between float types (integers: the host)
    {"Ceil", &I::lower_unary, true},
    {"Celu", &I::lower_unary, true},
    {"Clip", &I::lower_unary, true, false, kAfterFirst},
    {"Concat", &I::lower_concat, true, true},  // per image unless along the batch (per_image_op)
    {"ConstantOfShape", nullptr, false, false, kAll},
    {"Conv", &I::lower_conv, true, false, kAfterFirst},
    {"ConvInteger", nullptr, false, false, kAfterFirst},
    {"ConvTranspose", &I::lower_conv_transpose, true, false, kAfterFirst},
    {"CumSum", nullptr, false, false, kAfterFirst},
    {"DepthToSpace", &I::lower_depth_space, true},
    {"DequantizeLinear", nullptr, false, false, kAfterFirst},
    {"Div", &I::lower_arith, true, true},
    {"Dropout", &I::lower_unary},
    {"Elu", &I::lower_unary, true},
    {"Equal", &I::lower_arith, true, true, kNone, true},  // 1 / 0 (activation.h's comparisons)
    {"Erf", &I::lower_unary, true},
    {"Exp", &I::lower_unary, true},
    {"Expand", nullptr, false, false, kAfterFirst},
    {"Flatten", &I::lower_reshape},
    {"Floor", &I::lower_unary, true},
    {"Gather", &I::lower_gather, false, false, kAfterFirst},
    {"Gelu", &I::lower_unary, true},
    {"Gemm", &I::lower_gemm, false, false, kAfterFirst},
    {"GlobalAveragePool", &I::lower_global_avg_pool, true},
    {"GlobalMaxPool", &I::lower_global_max_pool, true},
    {"Greater", &I::lower_arith, true, true, kNone, true},
    {"GreaterOrEqual", &I::lower_arith, true, true, kNone, true},
    {"GroupNorm", &I::lower_instance_norm, true, false, kAfterFirst},
    {"HardSigmoid", &I::lower_unary, true},
    {"HardSwish", &I::lower_unary, true},
    {"Identity", &I::lower_unary},
    {"InstanceNormalization", &I::lower_instance_norm, true, false, kAfterFirst},
    {"LayerNormalization", &I::lower_layer_norm, false, false, kAfterFirst},
    {"LeakyRelu", &I::lower_unary, true},
    {"Less", &I::lower_arith, true, true, kNone, true},
    {"LessOrEqual", &I::lower_arith, true, true, kNone, true},
    {"Log", &I::lower_unary, true},
    {"LogSoftmax", &I::lower_softmax},
    {"MatMul", &I::lower_matmul},
    {"MatMulInteger", nullptr, false, false, kAfterFirst},
    {"Max", &I::lower_arith, true, true},
    {"MaxPool", &I::lower_pool, true},
    {"Min", &I::lower_arith, true, true},
    {"Mish", &I::lower_unary, true},
    {"Mul", &I::lower_arith, true, true},
    {"Neg", &I::lower_unary, true},
    {"Not", &I::lower_logic, true, false, kNone, true},
    {"OneHot", nullptr, false, false, kAfterFirst},
    {"Or", &I::lower_logic, true, false, kNone, true},
    {"PRelu", &I::lower_prelu, false, false, kAfterFirst},
    {"Pad", &I::lower_slice_pad_split, false, false, kAfterFirst},
    {"Pow", &I::lower_pow, true},
    {"QLinearConv", nullptr, false, false, kAfterFirst},
    {"QLinearMatMul", nullptr, false, false, kAfterFirst},
    {"QuantizeLinear", nullptr, false, false, kAfterFirst},
    {"QuantizedConv", &I::lower_quantized_conv, true, false, kAfterFirst},  // (graph::fuse_quantized_convs)
    {"Range", nullptr, false, false, kAll},
    {"Reciprocal", &I::lower_unary, true},
    {"ReduceL1", &I::lower_reduce, false, false, kAfterFirst},
    {"ReduceL2", &I::lower_reduce, false, false, kAfterFirst},
    {"ReduceLogSum", nullptr, false, false, kAfterFirst},
    {"ReduceLogSumExp", nullptr, false, false, kAfterFirst},
    {"ReduceMax", &I::lower_reduce, false, false, kAfterFirst},
    {"ReduceMean", &I::lower_reduce, false, false, kAfterFirst},
    {"ReduceMin", &I::lower_reduce, false, false, kAfterFirst},
    {"ReduceProd", nullptr, false, false, kAfterFirst},
    {"ReduceSum", &I::lower_reduce, false, false, kAfterFirst},
    {"ReduceSumSquare", &I::lower_reduce, false, false, kAfterFirst},
    {"Relu", &I::lower_unary, true},
    {"Reshape", &I::lower_reshape, false, false, kAfterFirst},
    {"Resize", &I::lower_resize_node, false, false, kAfterFirst},
    {"Round", &I::lower_unary, true},
    {"Selu", &I::lower_unary, true},
    {"SiLU", &I::lower_unary, true},
    {"Sigmoid", &I::lower_unary, true},
    {"Sign", &I::lower_unary, true},
    {"Slice", &I::lower_slice_pad_split, false, false, kAfterFirst},
    {"Softmax", &I::lower_softmax},
    {"Softplus", &I::lower_unary, true},
    {"Softsign", &I::lower_unary, true},
    {"SpaceToDepth", &I::lower_depth_space, true},
    {"Split", &I::lower_slice_pad_split, false, false, kAfterFirst},
    {"Sqrt", &I::lower_unary, true},
    {"Squeeze", &I::lower_reshape, false, false, kAfterFirst},
    {"Sub", &I::lower_arith, true, true},
    {"Tanh", &I::lower_unary, true},
    {"ThresholdedRelu", &I::lower_unary, true},
    {"Tile", &I::lower_tile, false, false, kAfterFirst},
    {"TopK", nullptr, false, false, kAfterFirst},
    {"Transpose", &I::lower_transpose},
    {"Trilu", nullptr, false, false, kAfterFirst},
    {"Unsqueeze", &I::lower_reshape, false, false, kAfterFirst},
    {"Upsample", &I::lower_resize_node, false, false, kAfterFirst},
    {"Where", &I::lower_where, false, true},  // its condition: booleans as 1 / 0 (lower_where)
    {"Xor", &I::lower_logic, true, false, kNone, true},
};

constexpr bool sorted() {
  for (size_t i = 1; i < std::size(kOpTraits); ++i)
    if (!(kOpTraits[i - 1].op_type < kOpTraits[i].op_type)) return false;
  return true;
}
static_assert(sorted(), "kOpTraits must be sorted by op type, each op once");

}  // namespace

const OpTraits* find_op_traits(std::string_view op_type) {
  const auto it = std::lower_bound(std::begin(kOpTraits), std::end(kOpTraits), op_type,
                                   [](const OpTraits& t, std::string_view op) { return t.op_type < op; });
  return it != std::end(kOpTraits) && it->op_type == op_type ? &*it : nullptr;
}

bool per_image_op(const Node& n) {
  const OpTraits* t = find_op_traits(n.op_type);
  if (!t || !t->per_image || n.outputs.size() != 1) return false;
  if (n.op_type == "Concat") {
    const int64_t axis = n.attr_int("axis", 1);
    return axis != 0 && axis != -4;
  }
  return true;
}

std::optional<UnaryWithParam> activation_of(const Node& n) {
  const std::string name = n.attr_string("tessera_activation", "");
  if (name.empty()) return std::nullopt;
  auto op = parse_unary_op(name);
  if (!op) return std::nullopt;
  return UnaryWithParam{*op, n.attr_float("tessera_activation_param", 0.0f),
                        n.attr_float("tessera_activation_scale", 1.0f), n.attr_float("tessera_activation_shift", 0.0f),
                        n.attr_float("tessera_activation_param2", 0.0f)};
}

StatusOr<UnaryWithParam> residual_activation_of(const Node& n) {
  auto op = parse_unary_op(n.attr_string("tessera_residual_activation", "identity"));
  if (!op) return internal_error("{}: unknown residual activation", n.label());
  return UnaryWithParam{*op, n.attr_float("tessera_residual_activation_param", 0.0f)};
}

std::optional<UnaryWithParam> device_unary(const Graph& g, const Node& n) {
  if (n.outputs.size() != 1) return std::nullopt;
  if (const auto a = graph::fusable_activation(g, n)) {
    if (auto op = parse_unary_op(a->name)) return UnaryWithParam{*op, a->param, a->scale, a->shift, a->param2};
  }
  static const std::map<std::string, UnaryOpType> plain = {
      {"Exp", UnaryOpType::EXP}, {"Sqrt", UnaryOpType::SQRT},         {"Erf", UnaryOpType::ERF},
      {"Neg", UnaryOpType::NEG}, {"Abs", UnaryOpType::ABS},           {"Reciprocal", UnaryOpType::RECIPROCAL},
      {"Log", UnaryOpType::LOG}, {"Identity", UnaryOpType::IDENTITY}, {"Dropout", UnaryOpType::IDENTITY}};
  if (auto it = plain.find(n.op_type); it != plain.end()) return UnaryWithParam{it->second};
  if (graph::float_to_float32(g, n)) return UnaryWithParam{UnaryOpType::IDENTITY};
  return std::nullopt;
}

std::vector<std::string> device_ops() {
  std::vector<std::string> ops;
  for (const OpTraits& t : kOpTraits)
    if (t.lower) ops.emplace_back(t.op_type);
  return ops;
}

std::vector<std::string> supported_ops() {
  std::set<std::string> all;
  for (const OpTraits& t : kOpTraits)
    if (t.lower) all.emplace(t.op_type);
  for (const auto& op : graph::host_supported_ops()) all.insert(op);
  all.insert("Constant");
  return {all.begin(), all.end()};
}

bool needs_constant_input(const Node& n, size_t slot) {
  const OpTraits* t = find_op_traits(n.op_type);
  if (!t) return false;
  return t->constants == ConstantInputs::kAll || (slot > 0 && t->constants == ConstantInputs::kAfterFirst);
}

}  // namespace tessera::runtime
