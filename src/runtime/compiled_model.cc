#include "tessera/runtime/compiled_model.h"

#include <fmt/format.h>

#include <atomic>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include "host_fallback.h"
#include "lowering.h"
#include "tessera/cnn/layers.h"
#include "tessera/device/profiler.h"
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

namespace {
std::atomic<uint64_t> next_model_id{1};
}  // namespace

std::string CompileReport::to_string() const {
  std::string s;
  for (const auto& p : passes) s += fmt::format("pass {}: {} rewrite(s)\n", p.pass, p.rewrites);
  s += fmt::format("{} device op(s), {} layout conversion(s), {:.2f} GFLOP per run\n", device_ops, layout_conversions,
                   conv_flops * 1e-9);
  if (fallbacks.empty()) s += "no host fallbacks\n";
  for (const auto& f : fallbacks) s += fmt::format("host fallback: {}\n", f);
  for (const auto& m : micro_batches) s += fmt::format("micro-batched: {}\n", m);
  for (const auto& n : precision_notes) s += fmt::format("precision: {}\n", n);
  if (!bfloat16_values.empty())
    s += fmt::format("{} value(s) kept in bfloat16 for readers that round them to it\n", bfloat16_values.size());
  return s;
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
      const DataType want = planned_dtype(outs[k]);
      if (want != DataType::FLOAT32) {
        TS_ASSIGN_OR_RETURN(y, typecast(y, want, cq));
      }
      TS_RETURN_IF_ERROR(put(s, outs[k], std::move(y)));
    }
    return ok_status();
  });
  return ok_status();
}

Status CompiledModel::Impl::lower(size_t ni) {
  const Node& n = g.nodes[ni];
  if (n.op_type == "Cast" && n.inputs.size() == 1 && n.inputs[0] >= 0 && !g.is_constant(n.inputs[0]) &&
      g.value(n.inputs[0]).type != graph::ElemType::FLOAT32 && (n.attr_int("to", 1) == 1 || n.attr_int("to", 1) == 11)) {
    ++report.device_ops;
    return lower_integer_cast(n);
  }
  // And, Or, Xor and Not read booleans: 1 and 0 in float slots, as the
  // comparisons make them (lower_logic); so does Where's condition.
  const bool logic = n.op_type == "And" || n.op_type == "Or" || n.op_type == "Xor" || n.op_type == "Not";
  for (size_t k = 0; k < n.inputs.size(); ++k) {
    const int in = n.inputs[k];
    if (in >= 0 && !g.is_constant(in) && g.value(in).type != graph::ElemType::FLOAT32 && !logic &&
        !(k == 0 && n.op_type == "Where"))
      return lower_fallback(n, "integer tensors at run time");
  }
  const OpTraits* traits = find_op_traits(n.op_type);
  for (int o : n.outputs)
    if (g.value(o).type != graph::ElemType::FLOAT32 && !(traits && traits->integer_results))
      return lower_fallback(n, "an integer result");
  const int x = n.inputs.empty() ? -1 : n.inputs[0];
  if (x >= 0 && g.is_constant(x) && !(traits && traits->constant_first))
    return lower_fallback(n, "a constant input the folder left (too large to fold)");
  if (!traits || !traits->lower) return lower_fallback(n, "no device kernel");
  ++report.device_ops;
  return (this->*traits->lower)(n);
}

Status CompiledModel::Impl::cast_to_planned(size_t node, Slots& s, uint8_t cq) {
  for (int o : g.nodes[node].outputs) {
    auto& t = s[static_cast<size_t>(o)];
    // (Graph outputs no rule gave a format become float32 as they leave: run_with_intermediates.)
    if (!t || g.value(o).type != graph::ElemType::FLOAT32 || t->dtype() == planned_dtype(o)) continue;
    if (is_model_output(o) && !value_df[static_cast<size_t>(o)]) continue;
    TS_ASSIGN_OR_RETURN(t, typecast(*t, planned_dtype(o), cq));
  }
  return ok_status();
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
    if (st.ok() && has_value_df) st = cast_to_planned(i, s, cq);
    if (st.ok() && after_step) st = after_step(i);
    if (!st.ok()) return Status(st.code(), fmt::format("{}: {}", g.nodes[i].label(), st.message()));
    for (int v : release[i]) s[static_cast<size_t>(v)].reset();
    ++i;
  }
  return ok_status();
}

// ------------------------------------------------------------------ CompiledModel

CompiledModel::CompiledModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CompiledModel::~CompiledModel() = default;

StatusOr<std::unique_ptr<CompiledModel>> CompiledModel::compile(Graph graph, Device& device,
                                                                const CompileOptions& options) {
  return compile(std::move(graph), device, options, {});
}

StatusOr<std::unique_ptr<CompiledModel>> CompiledModel::compile(Graph graph, Device& device,
                                                                const CompileOptions& options,
                                                                std::vector<PreparedLayer> prepared) {
  auto impl = std::make_unique<Impl>();
  impl->opt = options;
  TS_ASSIGN_OR_RETURN(const std::optional<AmpDefaults> amp, amp_level_defaults(options.precision.amp_level));
  if (amp)
    impl->opt.dtype = amp->dtype, impl->opt.weights_dtype = amp->weights_dtype,
    impl->opt.math_fidelity = amp->math_fidelity;
  const CompileOptions& o = impl->opt;
  if (o.dtype != DataType::FLOAT32 && o.dtype != DataType::BFLOAT16)
    return invalid_argument_error("CompileOptions::dtype must be FLOAT32 or BFLOAT16, got {}", data_type_name(o.dtype));
  if (o.dtype == DataType::BFLOAT16 && o.weights_dtype == DataType::FLOAT32)
    return invalid_argument_error("bfloat16 activations need bfloat16 or block-float weights, got float32 weights");
  impl->device = &device;
  impl->id = next_model_id++;
  for (PreparedLayer& p : prepared) {
    if (!p.weights.weight.is_on_device() || p.weights.weight.device() != &device)
      return invalid_argument_error("the prepared weights of '{}' are not on this device", p.node);
    const std::string node = p.node;
    if (!impl->given_weights.emplace(node, std::move(p)).second)
      return invalid_argument_error("two sets of prepared weights for node '{}'", node);
  }
  for (int i : graph.inputs)
    if (!graph.value(i).has_shape)
      return invalid_argument_error("graph input '{}' has no shape (run infer_shapes)", graph.value(i).name);
  impl->num_outputs = graph.outputs.size();
  TS_RETURN_IF_ERROR(add_taps(graph, options.intermediates_to_save));
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
  TS_RETURN_IF_ERROR(impl->plan_op_precision());
  TS_RETURN_IF_ERROR(impl->plan_bfloat16_values());
  for (int i : g.inputs) {
    if (g.value(i).type != graph::ElemType::FLOAT32)
      return unimplemented_error("graph input '{}' is an integer tensor; bind it as a constant (Graph::bind_constant)",
                                 g.value(i).name);
    impl->in_shapes.push_back(g.value(i).dims);
  }
  for (size_t k = 0; k < impl->num_outputs; ++k) impl->out_shapes.push_back(g.value(g.outputs[k]).dims);
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
  if (!impl->given_weights.empty())
    return invalid_argument_error("prepared weights were given for '{}', which is not a conv node of the graph",
                                  impl->given_weights.begin()->first);
  impl->release = plan_liveness(g, impl->fused_concats, impl->micro_batches);
  for (int o : g.outputs)
    if (g.is_constant(o)) TS_RETURN_IF_ERROR(impl->constant(o).status());
  auto model = std::unique_ptr<CompiledModel>(new CompiledModel(std::move(impl)));
  if (options.conv_chooser) TS_RETURN_IF_ERROR(model->prepare());
  return model;
}

Status CompiledModel::prepare() {
  // Values spread like a normalized image's, not zeros: a chooser times
  // kernels on the activations they make, and a net fed zeros may carry
  // denormal values (slow on some kernels, not on others).
  std::vector<Tensor> inputs;
  uint32_t state = 0x9e3779b9u;
  for (const Dims& dims : impl_->in_shapes) {
    const Shape shape = to_shape(dims);
    std::vector<float> v(shape.volume());
    for (float& x : v) {
      state = state * 1664525u + 1013904223u;  // a fixed-seed LCG: the same values every compile
      x = static_cast<float>(state >> 8) * (2.0f / 16777216.0f) - 1.0f;
    }
    TS_ASSIGN_OR_RETURN(Tensor host, Tensor::from_vector(std::move(v), shape, DataType::FLOAT32));
    TS_ASSIGN_OR_RETURN(Tensor x, to_device(host, *impl_->device));
    inputs.push_back(std::move(x));
  }
  TS_RETURN_IF_ERROR(run(inputs).status());
  return synchronize_device(*impl_->device);
}

StatusOr<std::vector<Tensor>> CompiledModel::run(std::span<const Tensor> inputs, uint8_t cq_id) {
  TS_ASSIGN_OR_RETURN(Outputs o, run_with_intermediates(inputs, cq_id));
  return std::move(o.outputs);
}

StatusOr<CompiledModel::Outputs> CompiledModel::run_with_intermediates(std::span<const Tensor> inputs, uint8_t cq_id) {
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
  Outputs r;
  for (int o : g.outputs) {
    TS_ASSIGN_OR_RETURN(Tensor t, m.get(slots, o));
    // A constant output is the model's own tensor, there for every run: the
    // caller gets a copy it may release (the Pipeline releases each output
    // it reads back).
    if (g.is_constant(o)) {
      TS_ASSIGN_OR_RETURN(t, reshard(t, t.memory_config(), std::nullopt, cq_id));
    }
    if (m.nhwc[static_cast<size_t>(o)]) {
      TS_ASSIGN_OR_RETURN(t, permute(t, kNhwcToNchwPerm, {.cq_id = cq_id}));
    }
    if (t.dtype() != DataType::FLOAT32) {
      TS_ASSIGN_OR_RETURN(t, typecast(t, DataType::FLOAT32, cq_id));
    }
    if (t.shape() != to_shape(g.value(o).dims)) {
      TS_ASSIGN_OR_RETURN(t, reshape(t, to_shape(g.value(o).dims)));
    }
    (r.outputs.size() < m.num_outputs ? r.outputs : r.intermediates).push_back(std::move(t));
  }
  return r;
}

StatusOr<std::vector<double>> CompiledModel::op_times_us(std::span<const Tensor> inputs, int runs) {
  if (runs < 1) return invalid_argument_error("op_times_us: runs must be at least 1, got {}", runs);
  Impl& m = *impl_;
  TS_RETURN_IF_ERROR(run(inputs).status());  // first-run work (weights, programs) is no part of the times
  std::vector<std::vector<double>> per(m.g.nodes.size(), std::vector<double>(static_cast<size_t>(runs), 0.0));
  TS_RETURN_IF_ERROR(enable_profiler(*m.device));
  int r = 0;
  m.after_step = [&](size_t node) -> Status {
    TS_ASSIGN_OR_RETURN(DeviceProfile p, read_profile(*m.device));
    per[node][static_cast<size_t>(r)] += p.total_us();  // (a micro-batched node: summed over its groups)
    return ok_status();
  };
  Status st = ok_status();
  for (; r < runs && st.ok(); ++r) {
    st = read_profile(*m.device).status();  // (drops the previous run's output conversions)
    if (st.ok()) st = run(inputs).status();
  }
  m.after_step = nullptr;
  TS_RETURN_IF_ERROR(disable_profiler(*m.device));
  TS_RETURN_IF_ERROR(st);
  std::vector<double> out;
  for (auto& v : per) {
    std::nth_element(v.begin(), v.begin() + runs / 2, v.end());
    out.push_back(v[static_cast<size_t>(runs / 2)]);
  }
  return out;
}

cnn::MultiInputModel CompiledModel::pipeline_model() {
  return [this](std::span<const Tensor> in) -> StatusOr<cnn::ModelOutput> {
    if (in.size() != impl_->g.inputs.size())
      return invalid_argument_error("a frame of {} input tensor(s); the model takes {} ({})", in.size(),
                                    impl_->g.inputs.size(), fmt::join(input_names(), ", "));
    TS_ASSIGN_OR_RETURN(Outputs outs, run_with_intermediates(in));
    cnn::ModelOutput main;
    if (outs.outputs.size() == 1) {
      main = cnn::ModelOutput::of(outs.outputs[0]);
    } else {
      std::vector<cnn::ModelOutput> list;
      for (auto& t : outs.outputs) list.push_back(cnn::ModelOutput::of(t));
      main = cnn::ModelOutput::of(std::move(list));
    }
    if (impl_->g.outputs.size() == impl_->num_outputs) return main;
    std::vector<cnn::ModelOutput> taps;
    for (auto& t : outs.intermediates) taps.push_back(cnn::ModelOutput::of(t));
    return cnn::ModelOutput::of({std::move(main), cnn::ModelOutput::of(std::move(taps))});
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
  for (size_t k = 0; k < impl_->num_outputs; ++k) r.push_back(impl_->g.value(impl_->g.outputs[k]).name);
  return r;
}
std::vector<std::string> CompiledModel::intermediate_names() const {
  std::vector<std::string> r;
  for (size_t k = impl_->num_outputs; k < impl_->g.outputs.size(); ++k)
    r.push_back(impl_->g.value(impl_->g.outputs[k]).name);
  return r;
}
const CompileReport& CompiledModel::report() const { return impl_->report; }
const std::vector<OpPrecision>& CompiledModel::op_precision() const { return impl_->op_precision; }
void CompiledModel::set_pass_reports(std::vector<graph::PassReport> passes) {
  impl_->report.passes = std::move(passes);
}
std::vector<std::string> CompiledModel::conv_selections() const {
  std::vector<std::string> out;
  for (const auto& l : impl_->conv_layers)
    out.push_back(fmt::format("{}: {}", l.node, l.selection().empty() ? "not run yet" : l.selection()));
  return out;
}
std::vector<PreparedLayer> CompiledModel::prepared_weights() const {
  std::vector<PreparedLayer> out;
  for (const auto& l : impl_->conv_layers)
    if (l.prepared()) out.push_back({l.node, *l.prepared(), l.selection()});
  return out;
}
const Graph& CompiledModel::graph() const { return impl_->g; }
Device& CompiledModel::device() const { return *impl_->device; }

}  // namespace tessera::runtime
