// Lowering unary activations, Add / Sub / Mul / Div, Softmax and LayerNormalization.
#include <array>
#include <numeric>

#include "lowering.h"

namespace tessera::runtime {

Status CompiledModel::Impl::lower_unary(const Node& n) {
  const int x = n.inputs[0], y = n.outputs[0];
  const std::optional<UnaryWithParam> act = device_unary(g, n);
  if (!act || n.outputs.size() != 1) return not_covered(n);
  const bool keep = nhwc[static_cast<size_t>(x)];
  nhwc[static_cast<size_t>(y)] = keep;
  steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
    TS_ASSIGN_OR_RETURN(Tensor in, get(s, x));
    TS_ASSIGN_OR_RETURN(Tensor out, unary(in, *act, {.dtype = out_dtype(y), .cq_id = cq}));
    return put(s, y, out);
  });
  return ok_status();
}

// A Cast of integers or booleans to FLOAT / DOUBLE: run-time slots hold
// integers as exact floats (OpTraits::integer_results; the host's results
// rounded to float as Cast rounds), so the value passes on as it is.
Status CompiledModel::Impl::lower_integer_cast(const Node& n) {
  const int x = n.inputs[0], y = n.outputs[0];
  nhwc[static_cast<size_t>(y)] = nhwc[static_cast<size_t>(x)];
  steps.push_back([=, this](Slots& s, uint8_t) -> Status {
    TS_ASSIGN_OR_RETURN(Tensor in, get(s, x));
    return put(s, y, in);
  });
  return ok_status();
}

// Boolean logic on 1 / 0 values: And as min, Or as max, Xor as |a - b|,
// Not as -a * 1 + 1 (a constant operand's booleans are 1 / 0 floats too).
Status CompiledModel::Impl::lower_logic(const Node& n) {
  if (n.op_type == "Not") {
    if (n.inputs.size() != 1 || n.inputs[0] < 0 || g.is_constant(n.inputs[0])) return not_covered(n);
    const int x = n.inputs[0], y = n.outputs[0];
    nhwc[static_cast<size_t>(y)] = nhwc[static_cast<size_t>(x)];
    steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
      TS_ASSIGN_OR_RETURN(Tensor in, get(s, x));
      const UnaryWithParam one_minus{.op = UnaryOpType::NEG, .scale = 1.0f, .shift = 1.0f};
      TS_ASSIGN_OR_RETURN(Tensor out, unary(in, one_minus, {.dtype = out_dtype(y), .cq_id = cq}));
      return put(s, y, out);
    });
    return ok_status();
  }
  if (n.inputs.size() != 2 || n.inputs[0] < 0 || n.inputs[1] < 0) return not_covered(n);
  if (n.op_type == "Xor") {
    Node x = n;
    x.attrs["tessera_activation"] = {.kind = graph::Attribute::Kind::STRING, .s = "abs"};
    return lower_binary(x, BinaryOpType::SUB);
  }
  return lower_binary(n, n.op_type == "And" ? BinaryOpType::MIN : BinaryOpType::MAX);
}

// Where(cond, a, b): the condition's booleans as 1 / 0 (or any number:
// nonzero selects a). In NHWC where every run-time operand is an NHWC value
// of the output's dims and every constant one value (a select is the same in
// either layout); plain otherwise.
Status CompiledModel::Impl::lower_where(const Node& n) {
  if (n.inputs.size() != 3 || std::any_of(n.inputs.begin(), n.inputs.end(), [](int v) { return v < 0; }))
    return not_covered(n);
  const std::array<int, 3> in = {n.inputs[0], n.inputs[1], n.inputs[2]};
  const int y = n.outputs[0];
  bool out_nhwc = rank(y) == 4, runtime = false;
  for (int v : in) {
    if (g.is_constant(v)) {
      out_nhwc = out_nhwc && graph::dims_volume(dims(v)) == 1;
    } else {
      runtime = true;
      out_nhwc = out_nhwc && nhwc[static_cast<size_t>(v)] && dims(v) == dims(y);
    }
  }
  out_nhwc = out_nhwc && runtime;
  for (int v : in) out_nhwc && !g.is_constant(v) ? note_nhwc(v) : note_plain(v);
  nhwc[static_cast<size_t>(y)] = out_nhwc;
  steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
    std::array<Tensor, 3> t;
    for (size_t k = 0; k < 3; ++k) {
      TS_ASSIGN_OR_RETURN(t[k], out_nhwc && !g.is_constant(in[k]) ? as_nhwc(s, in[k], cq) : plain(s, in[k], cq));
    }
    TS_ASSIGN_OR_RETURN(
        Tensor out,
        tessera::where(t[0], t[1], t[2], WhereParams{.dtype = out_dtype(y).value_or(act_dtype()), .cq_id = cq}));
    return out_nhwc ? put(s, y, out) : put_plain(s, y, out);
  });
  return ok_status();
}

Status CompiledModel::Impl::lower_arith(const Node& n) {
  // (The comparisons' booleans are 1 and 0 in the value's float slots, as
  // integer results are.)
  static const std::map<std::string, BinaryOpType> binaries = {
      {"Add", BinaryOpType::ADD},         {"Sub", BinaryOpType::SUB},
      {"Mul", BinaryOpType::MUL},         {"Div", BinaryOpType::DIV},
      {"Max", BinaryOpType::MAX},         {"Min", BinaryOpType::MIN},
      {"Greater", BinaryOpType::GREATER}, {"GreaterOrEqual", BinaryOpType::GREATER_EQUAL},
      {"Less", BinaryOpType::LESS},       {"LessOrEqual", BinaryOpType::LESS_EQUAL},
      {"Equal", BinaryOpType::EQUAL}};
  // (graph::split_variadic makes Max and Min of other arities binary.)
  if (n.inputs.size() != 2 || n.inputs[0] < 0 || n.inputs[1] < 0)
    return lower_fallback(n,
                          fmt::format("{} operands (the optimizer's split_variadic makes them two)", n.inputs.size()));
  if (g.is_constant(n.inputs[0]) && g.is_constant(n.inputs[1])) return lower_fallback(n, "two constant operands");
  return lower_binary(n, binaries.at(n.op_type));
}

Status CompiledModel::Impl::lower_binary(const Node& n, BinaryOpType op) {
  const int a = n.inputs[0], b = n.inputs[1], y = n.outputs[0];
  const auto act = activation_of(n);
  const bool ca = g.is_constant(a), cb = g.is_constant(b);
  // Layout: NHWC when a rank-4 run-time operand is NHWC and the other is a
  // constant or rank-4 too; plain otherwise.
  // A run-time scalar (one element: a dynamically quantized model's scale
  // and zero point) broadcasts alike in either layout: it is read plain.
  const bool sa = !ca && graph::dims_volume(dims(a)) == 1 && rank(y) > 0,
             sb = !cb && graph::dims_volume(dims(b)) == 1 && rank(y) > 0;
  const bool a4 = rank(a) == 4, b4 = rank(b) == 4;
  bool out_nhwc = rank(y) == 4 && ((!ca && nhwc[static_cast<size_t>(a)] && (cb || sb || b4) && rank(b) <= 4) ||
                                   (!cb && nhwc[static_cast<size_t>(b)] && (ca || sa || a4) && rank(a) <= 4));
  std::optional<Tensor> const_a, const_b;
  if (out_nhwc) {
    if (ca) {
      TS_ASSIGN_OR_RETURN(const_a, constant_nhwc(a));
    }
    if (cb) {
      TS_ASSIGN_OR_RETURN(const_b, constant_nhwc(b));
    }
    sa ? note_plain(a) : note_nhwc(a);
    sb ? note_plain(b) : note_nhwc(b);
  } else {
    note_plain(a), note_plain(b);
  }
  nhwc[static_cast<size_t>(y)] = out_nhwc;
  steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
    Tensor ta, tb;
    if (const_a)
      ta = *const_a;
    else {
      TS_ASSIGN_OR_RETURN(ta, out_nhwc && !sa ? as_nhwc(s, a, cq) : plain(s, a, cq));
    }
    if (const_b)
      tb = *const_b;
    else {
      TS_ASSIGN_OR_RETURN(tb, out_nhwc && !sb ? as_nhwc(s, b, cq) : plain(s, b, cq));
    }
    TS_ASSIGN_OR_RETURN(Tensor out, binary(ta, tb, op, {.dtype = out_dtype(y), .activation = act, .cq_id = cq}));
    if (out_nhwc) return put(s, y, out);
    return put_plain(s, y, out);
  });
  return ok_status();
}

// Pow by a constant exponent. The common ones the device computes as C's
// pow does up to rounding: 1 (a copy), 2 (x * x, bit for bit powf's), 3
// (x * x * x), 4, -1 (1 / x, correctly rounded as pow), -2 (1 / (x * x)),
// +-0.5 (sqrt(x + 0)); any other with the pow activation (activation.h:
// e^(p ln|x|), C's pow at the edges).
Status CompiledModel::Impl::lower_pow(const Node& n) {
  const int x = n.inputs[0], e = n.inputs.size() > 1 ? n.inputs[1] : -1, y = n.outputs[0];
  if (e < 0 || !g.is_constant(e) || g.value(e).constant->size() != 1 || g.is_constant(x)) return not_covered(n);
  const double p = g.value(e).constant->at(0);
  if (!std::isfinite(p)) return not_covered(n);  // (x^inf and x^NaN: |x| = 1 gives 1, which e^(p ln|x|) does not)
  if (p == 2.0) {
    Node square = n;
    square.inputs = {x, x};
    return lower_binary(square, BinaryOpType::MUL);
  }
  nhwc[static_cast<size_t>(y)] = nhwc[static_cast<size_t>(x)];
  const bool common = p == 1.0 || p == 3.0 || p == 4.0 || p == -1.0 || p == -2.0 || p == 0.5 || p == -0.5;
  // x ** +-0.5: sqrt(x + 0), so that -0 gives +0 as C's pow does (sqrt keeps
  // the sign of zero); the add and the sqrt are one launch. -inf gives NaN,
  // as PyTorch's pow(x, 0.5) does (C's pow gives +inf).
  std::optional<Tensor> zero;
  if (p == 0.5 || p == -0.5) {
    TS_ASSIGN_OR_RETURN(zero, upload(HostTensor::floats({1}, {0.0f}), {1}, DataType::FLOAT32));
  }
  steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
    TS_ASSIGN_OR_RETURN(Tensor in, get(s, x));
    const EltwiseParams ep{.dtype = out_dtype(y), .cq_id = cq};
    Tensor out;
    if (!common) {
      TS_ASSIGN_OR_RETURN(out, unary(in, {UnaryOpType::POW, static_cast<float>(p)}, ep));
    } else if (zero) {
      const EltwiseParams root{
          .dtype = p > 0 ? out_dtype(y) : std::nullopt, .activation = UnaryWithParam{UnaryOpType::SQRT}, .cq_id = cq};
      TS_ASSIGN_OR_RETURN(out, add(in, *zero, root));
      if (p < 0) {
        TS_ASSIGN_OR_RETURN(out, unary(out, {UnaryOpType::RECIPROCAL}, ep));
      }
    } else if (p == 4.0) {
      TS_ASSIGN_OR_RETURN(Tensor sq, mul(in, in, {.cq_id = cq}));
      TS_ASSIGN_OR_RETURN(out, mul(sq, sq, ep));
    } else if (p == 1.0) {
      TS_ASSIGN_OR_RETURN(out, unary(in, {UnaryOpType::IDENTITY}, ep));
    } else if (p == -1.0) {
      TS_ASSIGN_OR_RETURN(out, unary(in, {UnaryOpType::RECIPROCAL}, ep));
    } else {
      TS_ASSIGN_OR_RETURN(Tensor sq, mul(in, in, {.cq_id = cq}));
      if (p == 3.0) {
        TS_ASSIGN_OR_RETURN(out, mul(sq, in, ep));
      } else {
        TS_ASSIGN_OR_RETURN(out, unary(sq, {UnaryOpType::RECIPROCAL}, ep));
      }
    }
    return put(s, y, out);
  });
  return ok_status();
}

// PRelu (x >= 0 ? x : slope * x) by a constant slope: one that is the same
// for every element is leaky_relu; otherwise relu(x) - slope * relu(-x) in
// four launches (exact: one of the two terms is 0; NaN and infinities as
// slope * x gives them).
Status CompiledModel::Impl::lower_prelu(const Node& n) {
  const int x = n.inputs[0], sl = n.inputs.size() > 1 ? n.inputs[1] : -1, y = n.outputs[0];
  if (sl < 0 || !g.is_constant(sl) || g.is_constant(x) || rank(sl) > rank(x)) return not_covered(n);
  const HostTensor& sv = *g.value(sl).constant;
  const bool uniform = std::all_of(sv.f.begin(), sv.f.end(), [&](float v) { return v == sv.f[0]; });
  const bool out_nhwc = rank(x) == 4 && nhwc[static_cast<size_t>(x)];
  nhwc[static_cast<size_t>(y)] = out_nhwc;
  if (uniform && !sv.f.empty()) {
    const UnaryWithParam leaky{UnaryOpType::LEAKY_RELU, sv.f[0]};
    steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
      TS_ASSIGN_OR_RETURN(Tensor in, get(s, x));
      TS_ASSIGN_OR_RETURN(Tensor out, unary(in, leaky, {.dtype = out_dtype(y), .cq_id = cq}));
      return put(s, y, out);
    });
    return ok_status();
  }
  Tensor slope;
  if (out_nhwc) {
    TS_ASSIGN_OR_RETURN(slope, constant_nhwc(sl));
    note_nhwc(x);
  } else {
    TS_ASSIGN_OR_RETURN(slope, constant(sl));
    note_plain(x);
  }
  TS_ASSIGN_OR_RETURN(Tensor minus_one, upload(HostTensor::floats({1}, {-1.0f}), {1}, DataType::FLOAT32));
  steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
    TS_ASSIGN_OR_RETURN(Tensor t, out_nhwc ? as_nhwc(s, x, cq) : plain(s, x, cq));
    TS_ASSIGN_OR_RETURN(Tensor pos, unary(t, {UnaryOpType::RELU}, {.cq_id = cq}));
    TS_ASSIGN_OR_RETURN(Tensor neg, binary(t, minus_one, BinaryOpType::MUL,
                                           {.activation = UnaryWithParam{UnaryOpType::RELU}, .cq_id = cq}));
    TS_ASSIGN_OR_RETURN(neg, binary(neg, slope, BinaryOpType::MUL, {.cq_id = cq}));
    TS_ASSIGN_OR_RETURN(Tensor out, binary(pos, neg, BinaryOpType::SUB, {.dtype = out_dtype(y), .cq_id = cq}));
    return out_nhwc ? put(s, y, out) : put_plain(s, y, out);
  });
  return ok_status();
}

Status CompiledModel::Impl::lower_softmax(const Node& n) {
  const int x = n.inputs[0], y = n.outputs[0];
  const size_t r = rank(x);
  int64_t axis = n.attr_int("axis", g.opset >= 13 ? -1 : 1);
  if (axis < 0) axis += static_cast<int64_t>(r);
  note_plain(x);
  const bool legacy = g.opset < 13;
  const Dims xd = dims(x);
  const auto norm = n.op_type == "LogSoftmax" ? &log_softmax : &softmax;
  steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
    TS_ASSIGN_OR_RETURN(Tensor in, plain(s, x, cq));
    if (legacy || axis == static_cast<int64_t>(r) - 1) {
      // Older opsets normalise the 2D view flattened at `axis`.
      int64_t outer = 1, inner = 1;
      for (size_t d = 0; d < r; ++d) (static_cast<int64_t>(d) < axis ? outer : inner) *= xd[d];
      if (!legacy) outer = to_shape(xd).volume() / xd.back(), inner = xd.back();
      TS_ASSIGN_OR_RETURN(Tensor flat, reshape(in, Shape{static_cast<uint32_t>(outer), static_cast<uint32_t>(inner)}));
      TS_ASSIGN_OR_RETURN(Tensor out, norm(flat, -1, cq));
      return put_plain(s, y, out);
    }
    std::vector<int> perm(r);
    std::iota(perm.begin(), perm.end(), 0);
    std::swap(perm[static_cast<size_t>(axis)], perm.back());
    TS_ASSIGN_OR_RETURN(Tensor t, permute(in, perm, {.cq_id = cq}));
    TS_ASSIGN_OR_RETURN(Tensor sm, norm(t, -1, cq));
    TS_ASSIGN_OR_RETURN(Tensor out, permute(sm, perm, {.cq_id = cq}));
    return put_plain(s, y, out);
  });
  return ok_status();
}

Status CompiledModel::Impl::lower_layer_norm(const Node& n) {
  const int x = n.inputs[0], y = n.outputs[0];
  if (n.outputs.size() != 1) return not_covered(n);
  const size_t r = rank(x);
  int64_t axis = n.attr_int("axis", -1);
  if (axis < 0) axis += static_cast<int64_t>(r);
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < r; ++d) (static_cast<int64_t>(d) < axis ? outer : inner) *= dims(x)[d];
  if (!g.is_constant(n.inputs[1]) || (n.inputs.size() > 2 && n.inputs[2] >= 0 && !g.is_constant(n.inputs[2])))
    return lower_fallback(n, "run-time scale or bias");
  TS_ASSIGN_OR_RETURN(Tensor w, upload(*g.value(n.inputs[1]).constant, {inner}, DataType::FLOAT32));
  std::optional<Tensor> b;
  if (n.inputs.size() > 2 && n.inputs[2] >= 0) {
    TS_ASSIGN_OR_RETURN(b, upload(*g.value(n.inputs[2]).constant, {inner}, DataType::FLOAT32));
  }
  if (g.value(n.inputs[1]).constant->volume() != inner) return lower_fallback(n, "a broadcast scale");
  const float eps = n.attr_float("epsilon", 1e-5f);
  note_plain(x);
  steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
    TS_ASSIGN_OR_RETURN(Tensor in, plain(s, x, cq));
    TS_ASSIGN_OR_RETURN(Tensor flat, reshape(in, Shape{static_cast<uint32_t>(outer), static_cast<uint32_t>(inner)}));
    TS_ASSIGN_OR_RETURN(Tensor out, layer_norm(flat, {.epsilon = eps, .weight = w, .bias = b, .cq_id = cq}));
    return put_plain(s, y, out);
  });
  return ok_status();
}

}  // namespace tessera::runtime
