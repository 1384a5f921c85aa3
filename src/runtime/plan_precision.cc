// Precision planning: the values kept in bfloat16 at LoFi on CPUs where convs
// compute on bfloat16-rounded operands.
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
  Conv2dConfig config{.weights_dtype = opt.weights_dtype};
  config.compute_config.math_fidelity = opt.math_fidelity;
  if (act_dtype() == DataType::FLOAT32 && conv2d_may_round_input_to_bfloat16(config))
    bf16_values = runtime::plan_bfloat16_values(
        g, micro_batches, [this](const Node& n, size_t slot) { return rounds_input(n, slot); });
  keeps_bf16_values = std::find(bf16_values.begin(), bf16_values.end(), true) != bf16_values.end();
  for (size_t v = 0; v < g.values.size(); ++v)
    if (bf16_values[v]) report.bfloat16_values.push_back(g.value(static_cast<int>(v)).name);
  return ok_status();
}

}  // namespace tessera::runtime
