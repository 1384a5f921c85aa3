// Lowering convs and matmuls under Numerics::kTt: the emulated Wormhole
// matrix engine (ops/matrix_engine.h) in place of Tessera's fast kernels.
// Each step reads its input in float32 (bfloat16 converts exactly), runs one
// emulated launch and rounds the result to the value's dtype, as the
// original's packer writes its output format.
#include "lowering.h"
#include "tessera/ops/matrix_engine.h"

namespace tessera::runtime {

MatrixEngineConfig CompiledModel::Impl::engine_config() const {
  const OpPrecision& p = op_precision[lowering];
  return {.math_fidelity = fidelity_of(lowering),
          .fp32_dest_acc_en = p.accumulate_df.value_or(DataType::FLOAT32) == DataType::FLOAT32};
}

namespace {

StatusOr<Tensor> in_float32(Tensor t, uint8_t cq) {
  if (t.dtype() == DataType::FLOAT32) return t;
  return typecast(t, DataType::FLOAT32, cq);
}

}  // namespace

Status CompiledModel::Impl::lower_conv_tt(const Node& n, bool transposed) {
  const int x = n.inputs[0], y = n.outputs[0];
  if (rank(x) != 4 || !g.is_constant(n.inputs[1]))
    return lower_fallback(n, "a conv the emulated matrix engine does not cover (not 2-D, or run-time weights)");
  const bool has_bias = n.inputs.size() > 2 && n.inputs[2] >= 0;
  const DataType wdf = op_precision[lowering].weights_df.value_or(opt.weights_dtype);
  const Dims& xd = dims(x);
  const Dims& wd = dims(n.inputs[1]);
  TS_ASSIGN_OR_RETURN(Tensor w, Tensor::from_vector(g.value(n.inputs[1]).constant->f, to_shape(wd), DataType::FLOAT32));
  std::vector<float> bias;
  if (has_bias) bias = g.value(n.inputs[2]).constant->f;
  std::shared_ptr<const MatrixEngineOp> op;
  if (!transposed) {
    TS_ASSIGN_OR_RETURN(const Conv2dParams p, conv_params(n));
    TS_ASSIGN_OR_RETURN(Tensor rounded, round_conv2d_weights(w, p, wdf, DataType::FLOAT32));
    TS_ASSIGN_OR_RETURN(std::vector<float> wv, rounded.to_vector());
    TS_ASSIGN_OR_RETURN(op, MatrixEngineOp::conv2d(p, wv, bias, engine_config()));
    report.conv_flops += per_run(lowering, p.flops());
  } else {
    TS_ASSIGN_OR_RETURN(graph::SpatialGeometry geo, graph::spatial_geometry(n, xd, wd));
    for (int64_t pad : geo.pads)
      if (pad < 0) return lower_fallback(n, "an output_shape past the full output");
    const ConvTranspose2dParams p = conv_transpose_params(n, geo);
    TS_ASSIGN_OR_RETURN(Tensor rounded, round_conv_transpose2d_weights(w, p, wdf, DataType::FLOAT32));
    TS_ASSIGN_OR_RETURN(std::vector<float> wv, rounded.to_vector());
    const auto u = [](int64_t v) { return static_cast<uint32_t>(v); };
    TS_ASSIGN_OR_RETURN(
        op, MatrixEngineOp::conv_transpose2d(
                u(xd[0]), u(xd[2]), u(xd[3]), u(xd[1]), u(dims(y)[2]), u(dims(y)[3]), u(dims(y)[1]),
                u(n.attr_int("group", 1)), {u(geo.kernel[0]), u(geo.kernel[1])}, {u(geo.strides[0]), u(geo.strides[1])},
                {u(geo.pads[0]), u(geo.pads[1])}, {u(geo.dilations[0]), u(geo.dilations[1])}, wv, bias,
                activation_of(n), engine_config()));
    report.conv_flops += per_run(lowering, 2ull * static_cast<uint64_t>(graph::dims_volume(dims(y))) *
                                               static_cast<uint64_t>(wd[0] / n.attr_int("group", 1) * wd[2] * wd[3]));
  }
  const int res = !transposed && n.inputs.size() > 3 ? n.inputs[3] : -1;
  UnaryWithParam res_act;
  if (res >= 0) {
    TS_ASSIGN_OR_RETURN(res_act, residual_activation_of(n));
    note_nhwc(res);
  }
  note_nhwc(x);
  nhwc[static_cast<size_t>(y)] = true;
  steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
    TS_ASSIGN_OR_RETURN(Tensor in, as_nhwc(s, x, cq));
    TS_ASSIGN_OR_RETURN(in, in_float32(in, cq));
    std::optional<Tensor> r;
    if (res >= 0) {
      TS_ASSIGN_OR_RETURN(Tensor rt, as_nhwc(s, res, cq));
      TS_ASSIGN_OR_RETURN(r, in_float32(rt, cq));
    }
    TS_ASSIGN_OR_RETURN(Tensor out, (*op)(in, r, res_act, cq));
    if (planned_dtype(y) != DataType::FLOAT32) {
      TS_ASSIGN_OR_RETURN(out, typecast(out, planned_dtype(y), cq));
    }
    return put_nhwc(s, y, out);
  });
  return ok_status();
}

Status CompiledModel::Impl::lower_matmul_tt(const Node& n) {
  const int a = n.inputs[0], b = n.inputs[1], y = n.outputs[0];
  const bool gemm = n.op_type == "Gemm";
  const bool has_c = gemm && n.inputs.size() > 2 && n.inputs[2] >= 0;
  if (rank(a) < 2 || rank(b) != 2 || !g.is_constant(b) || g.is_constant(a) || (gemm && n.attr_int("transA", 0)) ||
      (has_c && !g.is_constant(n.inputs[2])))
    return lower_fallback(n, "a matmul the emulated matrix engine does not cover (run-time or batched B, transA)");
  const Dims& bd = dims(b);
  const bool trans_b = gemm && n.attr_int("transB", 0) != 0;
  const auto k = static_cast<uint32_t>(trans_b ? bd[1] : bd[0]), nn = static_cast<uint32_t>(trans_b ? bd[0] : bd[1]);
  const float alpha = gemm ? n.attr_float("alpha", 1.0f) : 1.0f, beta = gemm ? n.attr_float("beta", 1.0f) : 1.0f;
  const std::vector<float>& bv = g.value(b).constant->f;
  std::vector<float> w(size_t{k} * nn);
  for (uint32_t i = 0; i < k; ++i)
    for (uint32_t j = 0; j < nn; ++j)
      w[size_t{i} * nn + j] = alpha * (trans_b ? bv[size_t{j} * k + i] : bv[size_t{i} * nn + j]);
  round_to_format(w, nn, op_precision[lowering].weights_df.value_or(DataType::FLOAT32));
  std::vector<float> bias(nn, 0.0f);
  if (has_c) {
    const HostTensor& c = *g.value(n.inputs[2]).constant;
    if (c.volume() != 1 && c.volume() != nn)
      return lower_fallback(n, "a 2-D C the emulated matrix engine does not cover");
    for (uint32_t j = 0; j < nn; ++j) bias[j] = beta * c.f[c.volume() == 1 ? 0 : j];
  }
  const uint32_t m = static_cast<uint32_t>(graph::dims_volume(dims(a)) / k);
  TS_ASSIGN_OR_RETURN(auto op, MatrixEngineOp::matmul(m, k, nn, w, bias, activation_of(n), engine_config()));
  report.conv_flops += per_run(lowering, 2ull * m * k * nn);
  note_plain(a);
  steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
    TS_ASSIGN_OR_RETURN(Tensor in, plain(s, a, cq));
    TS_ASSIGN_OR_RETURN(in, in_float32(in, cq));
    TS_ASSIGN_OR_RETURN(Tensor out, (*op)(in, std::nullopt, {}, cq));
    if (planned_dtype(y) != DataType::FLOAT32) {
      TS_ASSIGN_OR_RETURN(out, typecast(out, planned_dtype(y), cq));
    }
    return put_plain(s, y, out);
  });
  return ok_status();
}

}  // namespace tessera::runtime
