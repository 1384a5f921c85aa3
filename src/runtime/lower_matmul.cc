// Lowering MatMul and Gemm nodes onto matmul / linear.
#include <mutex>

#include "lowering.h"

namespace tessera::runtime {

namespace {

// A constant b packed once for the kernels (pack_matmul_weights), on the
// step's first run, for the operands it sees (again should they change).
struct PackedB {
  std::mutex mu;
  std::optional<TensorSpec> a_spec;
  std::shared_ptr<const PackedMatmulWeights> packed;  // nullptr: the kernel reads b in place
};

StatusOr<const PackedMatmulWeights*> packed_b(PackedB& c, const Tensor& a, const Tensor& b,
                                              const std::optional<Tensor>& bias, const MatmulParams& p) {
  std::lock_guard<std::mutex> lock(c.mu);
  if (!c.a_spec || !(*c.a_spec == a.spec())) {
    TS_ASSIGN_OR_RETURN(c.packed, pack_matmul_weights(a, b, bias, p));
    c.a_spec = a.spec();
  }
  return c.packed.get();
}

}  // namespace

Status CompiledModel::Impl::lower_matmul(const Node& n) {
  if (opt.numerics == Numerics::kTt) return lower_matmul_tt(n);
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
  const DeviceComputeKernelConfig ckc = compute_kernel_config();
  auto pack = std::make_shared<PackedB>();
  steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
    TS_ASSIGN_OR_RETURN(Tensor ta, plain(s, a, cq));
    Tensor tb;
    if (const_b)
      tb = *const_b;
    else {
      TS_ASSIGN_OR_RETURN(tb, plain(s, b, cq));
    }
    MatmulParams mp{.dtype = out_dtype(y), .activation = act, .compute_kernel_config = ckc, .cq_id = cq};
    if (const_b) {
      TS_ASSIGN_OR_RETURN(mp.packed_b, packed_b(*pack, ta, tb, std::nullopt, mp));
    }
    TS_ASSIGN_OR_RETURN(Tensor out, matmul(ta, tb, mp));
    return put_plain(s, y, out);
  });
  return ok_status();
}

Status CompiledModel::Impl::lower_gemm(const Node& n) {
  if (opt.numerics == Numerics::kTt) return lower_matmul_tt(n);
  const int a = n.inputs[0], b = n.inputs[1], y = n.outputs[0];
  if (n.attr_int("transA", 0) || !g.is_constant(b) ||
      (n.inputs.size() > 2 && n.inputs[2] >= 0 && !g.is_constant(n.inputs[2])))
    return lower_fallback(n, "transA or a run-time B / C");
  const float alpha = n.attr_float("alpha", 1.0f), beta = n.attr_float("beta", 1.0f);
  const bool trans_b = n.attr_int("transB", 0) != 0;
  // alpha folds into B, beta into C, on the host.
  std::optional<HostTensor> scaled;  // B unless alpha is 1
  if (alpha != 1.0f) {
    scaled = *g.value(b).constant;
    for (float& v : scaled->f) v *= alpha;
  }
  TS_ASSIGN_OR_RETURN(Tensor weight, upload_weights(scaled ? *scaled : *g.value(b).constant, dims(b), trans_b));
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
  const auto act = activation_of(n);  // (with a full C: in the add's pass, after C)
  report.conv_flops +=
      per_run(lowering, 2ull * static_cast<uint64_t>(dims(y)[0] * nn) * static_cast<uint64_t>(dims(a)[1]));
  note_plain(a);
  const DeviceComputeKernelConfig ckc = compute_kernel_config();
  auto pack = std::make_shared<PackedB>();
  steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
    TS_ASSIGN_OR_RETURN(Tensor ta, plain(s, a, cq));
    MatmulParams mp{.transpose_b = trans_b,
                    .dtype = out_dtype(y),
                    .activation = full_c ? std::nullopt : act,
                    .compute_kernel_config = ckc,
                    .cq_id = cq};
    TS_ASSIGN_OR_RETURN(mp.packed_b, packed_b(*pack, ta, weight, bias, mp));
    TS_ASSIGN_OR_RETURN(Tensor out, linear(ta, weight, bias, mp));
    if (full_c) {
      TS_ASSIGN_OR_RETURN(out, add(out, *full_c, {.activation = act, .cq_id = cq}));
    }
    return put_plain(s, y, out);
  });
  return ok_status();
}

}  // namespace tessera::runtime
