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

}  // namespace tessera::runtime
