#include "host_fallback.h"

#include <cmath>
#include <cstring>
#include <type_traits>

#include "lowering.h"
#include "tessera/graph/host_eval.h"
#include "tessera/tensor/access.h"

namespace tessera::runtime {
namespace {

constexpr uint32_t kMaxFallbackTensors = 8;

struct FallbackArgs {
  const FallbackNode* node;
  uint32_t num_inputs, num_outputs;
  TensorAccess in[kMaxFallbackTensors];
  TensorAccess out[kMaxFallbackTensors];
};

// Every unit of a float32 ROW_MAJOR tensor, in row-major order.
void read_floats(const TensorAccess& a, float* dst) {
  for (uint32_t r = 0; r < a.rows; ++r)
    for (uint32_t c = 0; c < a.cols;) {
      uint32_t run = 0;
      const std::byte* p = a.unit(r, c, &run);
      run = std::min(run, a.cols - c);
      std::memcpy(dst, p, size_t{run} * 4);
      dst += run, c += run;
    }
}

void write_floats(const TensorAccess& a, const float* src) {
  for (uint32_t r = 0; r < a.rows; ++r)
    for (uint32_t c = 0; c < a.cols;) {
      uint32_t run = 0;
      std::byte* p = a.unit(r, c, &run);
      run = std::min(run, a.cols - c);
      std::memcpy(p, src, size_t{run} * 4);
      src += run, c += run;
    }
}

// The node's ONNX op on the host, then what the passes fused into it, as the
// device kernels apply it: the activation (tessera_activation), and a conv's
// residual (a fourth input) added after it with its own activation.
StatusOr<std::vector<graph::HostTensor>> evaluate_fused(const graph::Node& n, std::vector<const graph::HostTensor*> ins,
                                                        int opset) {
  const graph::HostTensor* residual = n.op_type == "Conv" && ins.size() > 3 ? ins[3] : nullptr;
  graph::Node plain = n;
  if (residual) plain.inputs.resize(3), ins.resize(3);
  TS_ASSIGN_OR_RETURN(std::vector<graph::HostTensor> outs, graph::evaluate(plain, ins, opset));
  const std::optional<UnaryWithParam> act = activation_of(n);
  const std::vector<float> scale = n.attr_floats("tessera_channel_scale"), shift = n.attr_floats("tessera_channel_shift");
  if ((!act && !residual && scale.empty()) || outs.empty() || outs[0].type != graph::ElemType::FLOAT32) return outs;
  std::vector<float>& y = outs[0].f;
  if (!scale.empty()) {  // a Concat's channel affine (graph::fuse_concat_affine), over NCHW
    const auto& d = outs[0].dims;
    if (d.size() != 4 || scale.size() != static_cast<size_t>(d[1]) || shift.size() != scale.size())
      return internal_error("{}: {} channel scales for an output of {} dims", n.label(), scale.size(), d.size());
    const auto plane = static_cast<size_t>(d[2] * d[3]);
    for (size_t k = 0; k < y.size(); ++k) {
      const size_t c = k / plane % scale.size();
      y[k] = std::fma(y[k], scale[c], shift[c]);
    }
  }
  if (act)
    for (float& v : y) v = static_cast<float>(apply_activation(*act, v));
  if (residual) {
    TS_ASSIGN_OR_RETURN(const UnaryWithParam ra, residual_activation_of(n));
    if (residual->f.size() != y.size())
      return internal_error("{}: a residual of {} values for {} outputs", n.label(), residual->f.size(), y.size());
    for (size_t k = 0; k < y.size(); ++k) y[k] = static_cast<float>(apply_activation(ra, y[k] + residual->f[k]));
  }
  return outs;
}

Status fallback_kernel(const void* raw, uint32_t, uint32_t) {
  const auto& args = *static_cast<const FallbackArgs*>(raw);
  const FallbackNode& fn = *args.node;
  std::vector<graph::HostTensor> dynamic(args.num_inputs);
  std::vector<const graph::HostTensor*> ins;
  uint32_t next = 0;
  for (size_t k = 0; k < fn.constants.size(); ++k) {
    if (fn.constants[k]) {
      ins.push_back(&*fn.constants[k]);
    } else if (fn.node.inputs[k] < 0) {
      ins.push_back(nullptr);
    } else {
      graph::HostTensor& h = dynamic[next];
      h.type = graph::ElemType::FLOAT32;
      h.dims = fn.input_dims[k];
      h.f.resize(static_cast<size_t>(h.volume()));
      read_floats(args.in[next], h.f.data());
      if (fn.input_types[k] == graph::ElemType::INT64) {
        h.type = graph::ElemType::INT64;
        h.i.assign(h.f.begin(), h.f.end());
        h.f.clear();
      }
      ins.push_back(&h);
      ++next;
    }
  }
  TS_ASSIGN_OR_RETURN(std::vector<graph::HostTensor> outs, evaluate_fused(fn.node, ins, fn.opset));
  if (outs.size() < args.num_outputs)
    return unimplemented_error("{}: the host kernel computes {} of its {} outputs", fn.node.label(), outs.size(),
                               args.num_outputs);
  for (uint32_t k = 0; k < args.num_outputs; ++k) {
    const graph::HostTensor& o = outs[k];
    if (o.volume() != static_cast<int64_t>(args.out[k].rows) * args.out[k].cols)
      return internal_error("fallback {}: output {} has {} values, the plan expected {}", fn.node.label(), k,
                            o.volume(), uint64_t{args.out[k].rows} * args.out[k].cols);
    if (o.type == graph::ElemType::FLOAT32) {
      write_floats(args.out[k], o.f.data());
    } else {
      std::vector<float> f(o.i.begin(), o.i.end());
      write_floats(args.out[k], f.data());
    }
  }
  return ok_status();
}

}  // namespace

StatusOr<std::vector<Tensor>> run_host_fallback(Device& device, const std::shared_ptr<const FallbackNode>& node,
                                                std::span<const Tensor> inputs, uint8_t cq_id) {
  if (inputs.size() > kMaxFallbackTensors || node->output_dims.size() > kMaxFallbackTensors)
    return unimplemented_error("{}: host fallback of more than {} inputs or outputs", node->node.label(),
                               kMaxFallbackTensors);
  FallbackArgs args{};
  args.node = node.get();
  args.num_inputs = static_cast<uint32_t>(inputs.size());
  args.num_outputs = static_cast<uint32_t>(node->output_dims.size());
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (inputs[k].dtype() != DataType::FLOAT32 || inputs[k].layout() != Layout::ROW_MAJOR)
      return internal_error("{}: fallback input {} is not float32 ROW_MAJOR", node->node.label(), k);
    TS_ASSIGN_OR_RETURN(args.in[k], make_access(inputs[k]));
  }
  std::vector<Tensor> outs;
  for (size_t k = 0; k < node->output_dims.size(); ++k) {
    TensorSpec spec{to_shape(node->output_dims[k]), DataType::FLOAT32, Layout::ROW_MAJOR, DRAM_MEMORY_CONFIG};
    TS_ASSIGN_OR_RETURN(Tensor t, allocate_tensor_on_device(spec, device));
    TS_ASSIGN_OR_RETURN(args.out[k], make_access(t));
    outs.push_back(std::move(t));
  }
  // The plan keeps the node alive as long as the device's program cache.
  std::shared_ptr<void> keep = std::const_pointer_cast<FallbackNode>(node);
  static_assert(std::is_trivially_copyable_v<FallbackArgs>, "kernel arguments must be trivially copyable");
  auto compile = [&]() -> StatusOr<Program> {
    Program p;
    p.key = node->key;
    p.kernel_name = "host_reference_" + node->node.op_type;
    p.kernel = fallback_kernel;
    p.num_tasks = 1;
    p.plan = keep;
    return p;
  };
  TS_ASSIGN_OR_RETURN(const Program* prog,
                      device.program_cache().get_or_compile(node->key, device.may_compile_programs(cq_id), compile));
  TS_RETURN_IF_ERROR(device.enqueue_program(cq_id, *prog, &args, sizeof(args)));
  return outs;
}

}  // namespace tessera::runtime
