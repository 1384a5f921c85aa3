// ONNX Runtime's com.microsoft quantized ops, as quantized models in the
// QOperator format carry them (ONNX model zoo int8 models, ONNX Runtime's
// quantize_static with QuantFormat.QOperator): each is its float op between
// DequantizeLinear of its inputs and QuantizeLinear of its result, as ONNX
// Runtime defines them, so that the compiler sees standard ops only
// (graph::lower_quantized puts them on the device).
#include "microsoft_ops.h"

#include <fmt/format.h>

#include <array>

namespace tessera::importer {
namespace {

struct MicrosoftOp {
  const char* op;
  const char* float_op;
  int first_input;  // the first (x, scale, zero point) triple
  int triples;      // -1: every triple from first_input on (QLinearConcat)
  int y_scale;      // input index of the result's scale; its zero point follows
};

// Sorted by op.
constexpr MicrosoftOp kOps[] = {
    {"QLinearAdd", "Add", 0, 2, 6},
    {"QLinearAveragePool", "AveragePool", 0, 1, 3},
    {"QLinearConcat", "Concat", 2, -1, 0},
    {"QLinearGlobalAveragePool", "GlobalAveragePool", 0, 1, 3},
    {"QLinearLeakyRelu", "LeakyRelu", 0, 1, 3},
    {"QLinearMul", "Mul", 0, 2, 6},
    {"QLinearSigmoid", "Sigmoid", 0, 1, 3},
};

const MicrosoftOp* find(const std::string& op) {
  for (const MicrosoftOp& m : kOps)
    if (op == m.op) return &m;
  return nullptr;
}

}  // namespace

std::string microsoft_ops() {
  std::string s;
  for (const MicrosoftOp& m : kOps) s += (s.empty() ? "" : ", ") + std::string(m.op);
  return s;
}

bool is_microsoft_op(const std::string& op) { return find(op) != nullptr; }

StatusOr<std::vector<graph::Node>> expand_microsoft_op(graph::Graph& g, const graph::Node& n) {
  const MicrosoftOp* m = find(n.op_type);
  if (!m)
    return unimplemented_error("{}: com.microsoft op {} is not supported (Tessera reads {})", n.label(), n.op_type,
                               microsoft_ops());
  // (channels_last, or older exports' nchw = 0: NHWC values)
  if (n.attr_int("channels_last", 0) != 0 || n.attr_int("nchw", 1) == 0)
    return unimplemented_error("{}: channels-last values (Tessera reads NCHW ones)", n.label());
  if (n.outputs.size() != 1) return invalid_argument_error("{}: {} outputs, expected 1", n.label(), n.outputs.size());
  auto at = [&](int k) { return k < static_cast<int>(n.inputs.size()) ? n.inputs[static_cast<size_t>(k)] : -1; };
  const int count = m->triples >= 0 ? m->triples : (static_cast<int>(n.inputs.size()) - m->first_input) / 3;
  if (count < 1 || m->first_input + 3 * count > static_cast<int>(n.inputs.size()) + 1 ||
      (m->triples < 0 && (static_cast<int>(n.inputs.size()) - m->first_input) % 3 != 0))
    return invalid_argument_error("{}: {} inputs do not make {} (x, scale, zero point) triples", n.label(),
                                  n.inputs.size(), m->triples < 0 ? "whole" : std::to_string(m->triples));
  std::vector<graph::Node> out;
  graph::Node op{.name = n.name + ":float", .op_type = m->float_op};
  for (const auto& [name, a] : n.attrs)
    if (name != "channels_last" && name != "nchw") op.attrs[name] = a;
  for (int t = 0; t < count; ++t) {
    const int x = at(m->first_input + 3 * t), s = at(m->first_input + 3 * t + 1), z = at(m->first_input + 3 * t + 2);
    if (x < 0 || s < 0) return invalid_argument_error("{}: operand {} or its scale is missing", n.label(), t);
    const int d = g.add_value({.name = fmt::format("{}:dequantized{}", n.name, t)});
    out.push_back({.name = fmt::format("{}:dequantize{}", n.name, t),
                   .op_type = "DequantizeLinear",
                   .inputs = {x, s, z},
                   .outputs = {d}});
    op.inputs.push_back(d);
  }
  const int ys = at(m->y_scale), yz = at(m->y_scale + 1);
  if (ys < 0) return invalid_argument_error("{}: the result's scale is missing", n.label());
  const int f = g.add_value({.name = n.name + ":float"});
  op.outputs = {f};
  out.push_back(std::move(op));
  out.push_back({.name = n.name, .op_type = "QuantizeLinear", .inputs = {f, ys, yz}, .outputs = n.outputs});
  return out;
}

}  // namespace tessera::importer
