// Precision planning: each op's formats and fidelity (precision.h's rules),
// and the values kept in bfloat16 at LoFi on CPUs where convs compute on
// bfloat16-rounded operands.
//
// (-Wmaybe-uninitialized: GCC 12 reports a false positive inside <regex> with
// the sanitizers, as taps.cc says.)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <regex>

#include "lowering.h"

namespace tessera::runtime {

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

// (A Concat's inputs share its dtype: all of them stay, or none.)
std::vector<bool> plan_bfloat16_values(const Graph& g, std::span<const MicroBatch> micro_batches,
                                       const RoundsInput& rounds_input) {
  std::vector<bool> bf16_values(g.values.size(), false);
  const std::vector<std::vector<std::pair<int, int>>> consumers = g.consumers();
  auto passes_on = [](const Node& n) { return n.op_type == "MaxPool" || n.op_type == "Concat"; };
  for (const Node& n : g.nodes) {
    if (n.outputs.size() != 1) continue;
    // A conv whose SiLU runs after oneDNN writes its rows would round them
    // twice in bfloat16 (conv/onednn_plan.cc, make_pd): its result stays float32.
    const bool residual = n.inputs.size() > 3 && n.inputs[3] >= 0;
    const std::optional<UnaryWithParam> act = activation_of(n);
    const bool silu = act && act->op == UnaryOpType::SILU;
    const bool conv = (n.op_type == "Conv" && !residual) || n.op_type == "ConvTranspose";
    if ((conv && !silu) || passes_on(n)) bf16_values[static_cast<size_t>(n.outputs[0])] = true;
  }
  for (int v : g.outputs) bf16_values[static_cast<size_t>(v)] = false;
  for (const MicroBatch& mb : micro_batches)
    for (int v : {mb.in, mb.out, mb.in_part, mb.out_part})
      if (v >= 0) bf16_values[static_cast<size_t>(v)] = false;
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
  return bf16_values;
}

Status CompiledModel::Impl::plan_bfloat16_values() {
  bf16_values.assign(g.values.size(), false);
  // (Rules give ops their own weights and fidelity: the plan assumes the
  // model's; the emulated engine reads float32.)
  if (!opt.precision.rules.empty() || opt.numerics == Numerics::kTt) return ok_status();
  Conv2dConfig config{.weights_dtype = opt.weights_dtype};
  config.compute_config.math_fidelity = opt.math_fidelity;
  if (act_dtype() == DataType::FLOAT32 && conv2d_may_round_input_to_bfloat16(config))
    bf16_values = runtime::plan_bfloat16_values(g, micro_batches,
                                                [this](const Node& n, size_t slot) { return rounds_input(n, slot); });
  keeps_bf16_values = std::find(bf16_values.begin(), bf16_values.end(), true) != bf16_values.end();
  for (size_t v = 0; v < g.values.size(); ++v)
    if (bf16_values[v]) report.bfloat16_values.push_back(g.value(static_cast<int>(v)).name);
  return ok_status();
}

namespace {

// Convs and matmuls: a math fidelity, and weights when operand 1 is a constant.
bool has_fidelity(const Node& n) {
  return n.op_type == "Conv" || n.op_type == "ConvTranspose" || n.op_type == "MatMul" || n.op_type == "Gemm";
}
bool has_weights(const Graph& g, const Node& n) {
  return has_fidelity(n) && n.inputs.size() > 1 && g.is_constant(n.inputs[1]);
}
bool iequal(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

}  // namespace

Status CompiledModel::Impl::plan_op_precision() {
  const PrecisionConfig& pc = opt.precision;
  const std::string amp = pc.amp_level ? fmt::format("amp_level {}", pc.amp_level) : "";
  const std::vector<std::string> known = supported_ops();
  // The rules, checked before any op is seen.
  std::vector<std::optional<std::regex>> regexes;
  for (size_t i = 0; i < pc.rules.size(); ++i) {
    const PrecisionRule& r = pc.rules[i];
    const std::string rule = describe_rule(r, i);
    if (!r.op_type.empty() &&
        std::none_of(known.begin(), known.end(), [&](const std::string& k) { return iequal(k, r.op_type); }))
      return invalid_argument_error("{}: unknown op type '{}' (tessera ops lists the op types Tessera runs)", rule,
                                    r.op_type);
    regexes.emplace_back();
    if (!r.name_regex.empty()) {
      try {
        regexes.back().emplace(r.name_regex, std::regex::ECMAScript);
      } catch (const std::regex_error& e) {
        return invalid_argument_error("{}: name_regex '{}' is not a valid ECMAScript regex: {}", rule, r.name_regex,
                                      e.what());
      }
    }
    const bool tt = opt.numerics == Numerics::kTt;
    if (r.intermediate_df && *r.intermediate_df != DataType::FLOAT32)
      return invalid_argument_error(
          "{}: intermediate_df {}: Tessera's kernels keep partial results in float32 (the only intermediate_df they "
          "take)",
          rule, data_type_name(*r.intermediate_df));
    if (r.accumulate_df && *r.accumulate_df != DataType::FLOAT32 && !(tt && *r.accumulate_df == DataType::BFLOAT16))
      return invalid_argument_error(
          "{}: accumulate_df {}: {}", rule, data_type_name(*r.accumulate_df),
          tt ? "the matrix engine accumulates in float32 or bfloat16"
             : "Tessera's kernels keep partial results in float32 (bfloat16 with --numerics tt)");
    if (r.output_df && *r.output_df != DataType::FLOAT32 && *r.output_df != DataType::BFLOAT16)
      return invalid_argument_error("{}: output_df {}: activations are float32 or bfloat16", rule,
                                    data_type_name(*r.output_df));
  }
  auto matches = [&](size_t i, const Node& n) {
    const PrecisionRule& r = pc.rules[i];
    if (!r.op_type.empty() && !iequal(r.op_type, n.op_type)) return false;
    if (!regexes[i]) return true;
    if (std::regex_match(n.name, *regexes[i])) return true;
    for (int v : n.outputs)
      if (std::regex_match(g.value(v).name, *regexes[i])) return true;
    for (int v : n.inputs)  // its parameters (weights), not the activations it reads
      if (g.is_constant(v) && std::regex_match(g.value(v).name, *regexes[i])) return true;
    return false;
  };
  op_precision.assign(g.nodes.size(), {});
  value_df.assign(g.values.size(), std::nullopt);
  bf16_values.assign(g.values.size(), false);  // (plan_bfloat16_values runs after)
  std::vector<bool> used(pc.rules.size(), false);
  // Per rule: whether its math_fidelity / accumulate_df reached an op that has one.
  std::vector<bool> fidelity_used(pc.rules.size(), false), accumulate_used(pc.rules.size(), false);
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    const Node& n = g.nodes[ni];
    OpPrecision& p = op_precision[ni];
    const bool graph_output = !n.outputs.empty() && is_model_output(n.outputs[0]);
    p.output_df = graph_output ? DataType::FLOAT32 : act_dtype();
    if (has_weights(g, n)) {
      const bool conv = n.op_type == "Conv" || n.op_type == "ConvTranspose";
      // (Matmul weights follow the activations unless an AMP level sets them.)
      p.weights_df = conv || pc.amp_level ? opt.weights_dtype : act_dtype();
      p.weights_by = amp;
    }
    if (has_fidelity(n)) p.math_fidelity = opt.math_fidelity, p.fidelity_by = amp;
    if (has_fidelity(n) && opt.numerics == Numerics::kTt)  // (the original's defaults: Float16_b in bfloat16 models)
      p.accumulate_df = act_dtype() == DataType::FLOAT32 ? DataType::FLOAT32 : DataType::BFLOAT16;
    for (size_t i = 0; i < pc.rules.size(); ++i) {
      if (!matches(i, n)) continue;
      used[i] = true;
      const PrecisionRule& r = pc.rules[i];
      const std::string by = describe_rule(r, i);
      if (r.output_df) p.output_df = *r.output_df, p.output_by = by;
      if (r.math_fidelity && p.math_fidelity)
        p.math_fidelity = *r.math_fidelity, p.fidelity_by = by, fidelity_used[i] = true;
      if (r.accumulate_df && p.accumulate_df)
        p.accumulate_df = *r.accumulate_df, p.accumulate_by = by, accumulate_used[i] = true;
      for (const auto& [k, df] : r.input_df) {
        if (k == 1 && p.weights_df) {
          p.weights_df = df, p.weights_by = by;
          continue;
        }
        return invalid_argument_error(
            "{}: input_df[{}] on {}: only the constant weights of Conv, ConvTranspose, MatMul and Gemm (operand "
            "1) take a format; an activation keeps the format its producer writes (give that op output_df)",
            by, k, n.label());
      }
    }
    if (!p.output_by.empty())
      for (int o : n.outputs)
        if (g.value(o).type == graph::ElemType::FLOAT32) value_df[static_cast<size_t>(o)] = p.output_df;
  }
  has_value_df = std::any_of(value_df.begin(), value_df.end(), [](const auto& d) { return d.has_value(); });
  // Float32 weights in an op that computes in bfloat16 (a bfloat16 input)
  // would be rounded to bfloat16: a rule that asks so is an error.
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    const Node& n = g.nodes[ni];
    const OpPrecision& p = op_precision[ni];
    if (!p.weights_df || p.weights_by.empty() || p.weights_by == amp || *p.weights_df != DataType::FLOAT32) continue;
    if (planned_dtype(n.inputs[0]) == DataType::BFLOAT16)
      return invalid_argument_error(
          "{}: float32 weights on {}, whose input '{}' is bfloat16 (it computes in bfloat16): give that input "
          "float32 (output_df on the op that makes it) or use bfloat16 weights",
          p.weights_by, n.label(), g.value(n.inputs[0]).name);
  }
  for (size_t i = 0; i < pc.rules.size(); ++i) {
    const PrecisionRule& r = pc.rules[i];
    if (!used[i]) {
      report.precision_notes.push_back(fmt::format("{} matched no op", describe_rule(r, i)));
      continue;
    }
    // Fields no matched op takes are said, not dropped in silence.
    if (r.math_fidelity && !fidelity_used[i])
      report.precision_notes.push_back(fmt::format(
          "{}: math_fidelity reached no op (only Conv, ConvTranspose, MatMul and Gemm have one)", describe_rule(r, i)));
    if (r.accumulate_df && !accumulate_used[i])
      report.precision_notes.push_back(
          fmt::format("{}: accumulate_df reached no op ({})", describe_rule(r, i),
                      opt.numerics == Numerics::kTt
                          ? "only Conv, ConvTranspose, MatMul and Gemm have one"
                          : "Tessera's kernels accumulate in float32; the format is a --numerics tt one"));
  }
  for (size_t ni = 0; ni < g.nodes.size(); ++ni)
    report.op_precisions.push_back(
        fmt::format("{} ({}): {}", g.nodes[ni].name, g.nodes[ni].op_type, op_precision[ni].to_string()));
  return ok_status();
}

}  // namespace tessera::runtime
