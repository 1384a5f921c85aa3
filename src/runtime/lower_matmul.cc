// Lowering MatMul and Gemm nodes onto matmul / linear.
#include "lowering.h"

namespace tessera::runtime {

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
            {.dtype = out_dtype(y), .activation = act, .compute_kernel_config = ckc, .cq_id = cq}));
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
  steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
    TS_ASSIGN_OR_RETURN(Tensor ta, plain(s, a, cq));
    TS_ASSIGN_OR_RETURN(Tensor out, linear(ta, weight, bias,
                                           {.transpose_b = trans_b,
                                            .dtype = out_dtype(y),
                                            .activation = full_c ? std::nullopt : act,
                                            .compute_kernel_config = ckc,
                                            .cq_id = cq}));
    if (full_c) {
      TS_ASSIGN_OR_RETURN(out, add(out, *full_c, {.activation = act, .cq_id = cq}));
    }
    return put_plain(s, y, out);
  });
  return ok_status();
}

}  // namespace tessera::runtime
