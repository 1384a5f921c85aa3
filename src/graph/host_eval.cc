// Reference evaluation on the host. Written for obviousness, not speed: one
// element at a time through index arithmetic, float ops in double with one
// rounding to float32 at the end.
#include "tessera/graph/host_eval.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <set>

#include "host_kernels.h"
#include "host_spatial.h"
#include "tessera/numerics/bfloat16.h"
#include "tessera/numerics/float16.h"

namespace tessera::graph {
namespace {

using namespace host;  // the kernels (host_kernels.h, host_spatial.h) this table dispatches to

// ---------------------------------------------------------------- element-wise

double round_half_even(double x) { return std::nearbyint(x); }

StatusOr<std::function<double(double)>> unary_fn(const Node& n) {
  const std::string& op = n.op_type;
  if (op == "Relu") return std::function<double(double)>([](double x) { return x < 0 ? 0.0 : x; });  // NaN kept
  if (op == "Sigmoid") return std::function<double(double)>([](double x) { return 1.0 / (1.0 + std::exp(-x)); });
  if (op == "Tanh") return std::function<double(double)>([](double x) { return std::tanh(x); });
  if (op == "Exp") return std::function<double(double)>([](double x) { return std::exp(x); });
  if (op == "Log") return std::function<double(double)>([](double x) { return std::log(x); });
  if (op == "Sqrt") return std::function<double(double)>([](double x) { return std::sqrt(x); });
  if (op == "Neg") return std::function<double(double)>([](double x) { return -x; });
  if (op == "Abs") return std::function<double(double)>([](double x) { return std::fabs(x); });
  if (op == "Reciprocal") return std::function<double(double)>([](double x) { return 1.0 / x; });
  if (op == "Floor") return std::function<double(double)>([](double x) { return std::floor(x); });
  if (op == "Ceil") return std::function<double(double)>([](double x) { return std::ceil(x); });
  if (op == "Round") return std::function<double(double)>(round_half_even);
  if (op == "Sign")  // NaN kept (numpy)
    return std::function<double(double)>([](double x) { return std::isnan(x) ? x : double((x > 0) - (x < 0)); });
  if (op == "Erf") return std::function<double(double)>([](double x) { return std::erf(x); });
  if (op == "Sin") return std::function<double(double)>([](double x) { return std::sin(x); });
  if (op == "Cos") return std::function<double(double)>([](double x) { return std::cos(x); });
  if (op == "Tan") return std::function<double(double)>([](double x) { return std::tan(x); });
  if (op == "Atan") return std::function<double(double)>([](double x) { return std::atan(x); });
  if (op == "Asin") return std::function<double(double)>([](double x) { return std::asin(x); });
  if (op == "Acos") return std::function<double(double)>([](double x) { return std::acos(x); });
  if (op == "Sinh") return std::function<double(double)>([](double x) { return std::sinh(x); });
  if (op == "Cosh") return std::function<double(double)>([](double x) { return std::cosh(x); });
  if (op == "Asinh") return std::function<double(double)>([](double x) { return std::asinh(x); });
  if (op == "Acosh") return std::function<double(double)>([](double x) { return std::acosh(x); });
  if (op == "Atanh") return std::function<double(double)>([](double x) { return std::atanh(x); });
  if (op == "IsNaN") return std::function<double(double)>([](double x) { return std::isnan(x) ? 1.0 : 0.0; });
  if (op == "IsInf") {
    const bool pos = n.attr_int("detect_positive", 1) != 0, neg = n.attr_int("detect_negative", 1) != 0;
    return std::function<double(double)>(
        [pos, neg](double x) { return std::isinf(x) && (x > 0 ? pos : neg) ? 1.0 : 0.0; });
  }
  if (op == "Shrink") {
    const double l = n.attr_float("lambd", 0.5f), b = n.attr_float("bias", 0.0f);
    return std::function<double(double)>([l, b](double x) {
      return x < -l ? x + b : x > l ? x - b : std::isnan(x) ? x : 0.0;
    });
  }
  if (op == "Softplus")  // (no overflow: max(x, 0) + log1p(e^-|x|))
    return std::function<double(double)>(
        [](double x) { return std::isnan(x) ? x : std::fmax(x, 0.0) + std::log1p(std::exp(-std::fabs(x))); });
  if (op == "Softsign") return std::function<double(double)>([](double x) { return x / (1 + std::fabs(x)); });
  if (op == "HardSwish")
    return std::function<double(double)>([](double x) { return x * std::clamp(x / 6 + 0.5, 0.0, 1.0); });
  if (op == "Mish")
    return std::function<double(double)>([](double x) { return x * std::tanh(std::log1p(std::exp(x))); });
  if (op == "Gelu") {  // opset 20; also what fuse_gelu makes of the exported Erf form
    if (n.attr_string("approximate", "none") == "tanh")
      return std::function<double(double)>(
          [](double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); });
    return std::function<double(double)>([](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); });
  }
  if (op == "Not") return std::function<double(double)>([](double x) { return x == 0 ? 1.0 : 0.0; });
  if (op == "Identity") return std::function<double(double)>([](double x) { return x; });
  if (op == "LeakyRelu") {
    const double a = n.attr_float("alpha", 0.01f);
    return std::function<double(double)>([a](double x) { return x >= 0 ? x : a * x; });
  }
  if (op == "Elu") {
    const double a = n.attr_float("alpha", 1.0f);
    return std::function<double(double)>([a](double x) { return x >= 0 ? x : a * (std::exp(x) - 1); });
  }
  if (op == "Celu") {
    const double a = n.attr_float("alpha", 1.0f);
    return std::function<double(double)>(
        [a](double x) { return std::isnan(x) ? x : std::max(0.0, x) + std::min(0.0, a * (std::exp(x / a) - 1)); });
  }
  if (op == "Selu") {
    const double a = n.attr_float("alpha", 1.67326319217681884765625f);
    const double g = n.attr_float("gamma", 1.05070102214813232421875f);
    return std::function<double(double)>([a, g](double x) { return x > 0 ? g * x : g * a * (std::exp(x) - 1); });
  }
  if (op == "HardSigmoid") {
    const double a = n.attr_float("alpha", 0.2f), b = n.attr_float("beta", 0.5f);
    return std::function<double(double)>([a, b](double x) { return std::clamp(a * x + b, 0.0, 1.0); });
  }
  if (op == "ThresholdedRelu") {
    const double a = n.attr_float("alpha", 1.0f);
    return std::function<double(double)>([a](double x) { return std::isnan(x) || x > a ? x : 0.0; });  // NaN kept
  }
  return unimplemented_error("{} has no host kernel", n.label());
}

const std::set<std::string> kUnary = {"Relu",      "Sigmoid",  "Tanh",       "Exp",   "Log",         "Sqrt",
                                      "Neg",       "Abs",      "Reciprocal", "Floor", "Ceil",        "Round",
                                      "Sign",      "Erf",      "Sin",        "Cos",   "Tan",         "Atan",
                                      "Softplus",  "Softsign", "HardSwish",  "Mish",  "Not",         "Identity",
                                      "LeakyRelu", "Elu",      "Celu",       "Selu",  "HardSigmoid", "ThresholdedRelu",
                                      "Gelu",      "Asin",     "Acos",       "Sinh",  "Cosh",        "Asinh",
                                      "Acosh",     "Atanh",    "IsNaN",      "IsInf", "Shrink"};

StatusOr<HostTensor> unary(const Node& n, const HostTensor& x) {
  TS_ASSIGN_OR_RETURN(auto fn, unary_fn(n));
  HostTensor y = make(x.type, x.dims);
  if (n.op_type == "Not" || n.op_type == "IsNaN" || n.op_type == "IsInf") y = make(ElemType::INT64, x.dims);
  for (size_t k = 0; k < x.size(); ++k) set(y, k, fn(x.at(k)));
  return y;
}

const std::set<std::string> kBinary = {
    "Add", "Sub", "Mul", "Div",  "Pow", "Mod", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual",
    "And", "Or",  "Xor", "PRelu"};
const std::set<std::string> kCompare = {"Equal",          "Less", "Greater", "LessOrEqual",
                                        "GreaterOrEqual", "And",  "Or",      "Xor"};

StatusOr<HostTensor> binary(const Node& n, const HostTensor& a, const HostTensor& b) {
  TS_ASSIGN_OR_RETURN(Dims out, broadcast_dims(a.dims, b.dims));
  const std::string& op = n.op_type;
  const bool is_int = a.type == ElemType::INT64 && b.type == ElemType::INT64;
  HostTensor y = make(kCompare.count(op) || is_int ? ElemType::INT64 : ElemType::FLOAT32, out);
  if (op == "Pow" || op == "PRelu") y.type = a.type, y = make(a.type, out);
  // The op resolved once, not per element (a detector's score thresholds
  // compare a million scores here: 18 ms each when every element compared
  // the op's name).
  enum class Op { kAdd, kSub, kMul, kDiv, kPow, kMod, kEqual, kLess, kGreater, kLessEq, kGreaterEq, kAnd, kOr, kXor,
                  kPRelu, kNone };
  static const std::map<std::string, Op> kOps = {
      {"Add", Op::kAdd},          {"Sub", Op::kSub},        {"Mul", Op::kMul},
      {"Div", Op::kDiv},          {"Pow", Op::kPow},        {"Mod", Op::kMod},
      {"Equal", Op::kEqual},      {"Less", Op::kLess},      {"Greater", Op::kGreater},
      {"LessOrEqual", Op::kLessEq}, {"GreaterOrEqual", Op::kGreaterEq}, {"And", Op::kAnd},
      {"Or", Op::kOr},            {"Xor", Op::kXor},        {"PRelu", Op::kPRelu}};
  const auto found = kOps.find(op);
  const Op code = found == kOps.end() ? Op::kNone : found->second;
  const bool fmod = n.attr_int("fmod", 0) != 0;
  const bool same = a.dims == out && b.dims == out;  // no broadcast: element k of each
  const int64_t total = dims_volume(out);
  for (int64_t k = 0; k < total; ++k) {
    const double x = a.at(static_cast<size_t>(same ? k : broadcast_index(k, out, a.dims)));
    const double z = b.at(static_cast<size_t>(same ? k : broadcast_index(k, out, b.dims)));
    double r = 0;
    switch (code) {
      case Op::kAdd: r = x + z; break;
      case Op::kSub: r = x - z; break;
      case Op::kMul: r = x * z; break;
      case Op::kDiv:
        if (is_int) {
          if (z == 0) return invalid_argument_error("{}: integer division by zero", n.label());
          r = std::trunc(x / z);
        } else {
          r = static_cast<double>(static_cast<float>(x) / static_cast<float>(z));
        }
        break;
      case Op::kPow: r = std::pow(x, z); break;
      case Op::kMod:
        if (is_int) {
          if (z == 0) return invalid_argument_error("{}: integer modulo by zero", n.label());
          r = fmod ? std::fmod(x, z) : x - z * std::floor(x / z);
        } else {
          r = std::fmod(x, z);
        }
        break;
      case Op::kEqual: r = x == z; break;
      case Op::kLess: r = x < z; break;
      case Op::kGreater: r = x > z; break;
      case Op::kLessEq: r = x <= z; break;
      case Op::kGreaterEq: r = x >= z; break;
      case Op::kAnd: r = (x != 0) && (z != 0); break;
      case Op::kOr: r = (x != 0) || (z != 0); break;
      case Op::kXor: r = (x != 0) != (z != 0); break;
      case Op::kPRelu: r = x >= 0 ? x : x * z; break;
      case Op::kNone: break;
    }
    set(y, static_cast<size_t>(k), r);
  }
  return y;
}

// Sum, Mean, Max, Min over any number of broadcast inputs.
StatusOr<HostTensor> variadic(const Node& n, Ins ins) {
  if (ins.empty() || !ins[0]) return invalid_argument_error("{}: needs at least one input", n.label());
  Dims out = ins[0]->dims;
  for (size_t k = 1; k < ins.size(); ++k) {
    TS_RETURN_IF_ERROR(need(n, ins, k));
    TS_ASSIGN_OR_RETURN(out, broadcast_dims(out, ins[k]->dims));
  }
  HostTensor y = make(ins[0]->type, out);
  const int64_t total = dims_volume(out);
  for (int64_t k = 0; k < total; ++k) {
    double acc = ins[0]->at(static_cast<size_t>(broadcast_index(k, out, ins[0]->dims)));
    for (size_t j = 1; j < ins.size(); ++j) {
      const double v = ins[j]->at(static_cast<size_t>(broadcast_index(k, out, ins[j]->dims)));
      if (n.op_type == "Max")  // NaN kept (numpy's maximum)
        acc = std::isnan(acc) || acc > v ? acc : v;
      else if (n.op_type == "Min")
        acc = std::isnan(acc) || acc < v ? acc : v;
      else
        acc += v;
    }
    if (n.op_type == "Mean") acc /= static_cast<double>(ins.size());
    set(y, static_cast<size_t>(k), acc);
  }
  return y;
}

StatusOr<HostTensor> clip(const Node& n, Ins ins, int opset) {
  const HostTensor& x = *ins[0];
  double lo = -std::numeric_limits<double>::infinity(), hi = std::numeric_limits<double>::infinity();
  if (opset < 11) {
    lo = n.attr_float("min", -std::numeric_limits<float>::max());
    hi = n.attr_float("max", std::numeric_limits<float>::max());
  } else {
    if (in(ins, 1)) lo = in(ins, 1)->at(0);
    if (in(ins, 2)) hi = in(ins, 2)->at(0);
  }
  HostTensor y = make(x.type, x.dims);
  for (size_t k = 0; k < x.size(); ++k) set(y, k, std::min(std::max(x.at(k), lo), hi));
  return y;
}

StatusOr<HostTensor> where(const Node& n, Ins ins) {
  for (size_t k = 0; k < 3; ++k) TS_RETURN_IF_ERROR(need(n, ins, k));
  TS_ASSIGN_OR_RETURN(Dims out, broadcast_dims(ins[0]->dims, ins[1]->dims));
  TS_ASSIGN_OR_RETURN(out, broadcast_dims(out, ins[2]->dims));
  HostTensor y = make(ins[1]->type, out);
  for (int64_t k = 0; k < dims_volume(out); ++k) {
    const bool c = ins[0]->at(static_cast<size_t>(broadcast_index(k, out, ins[0]->dims))) != 0;
    const HostTensor& s = c ? *ins[1] : *ins[2];
    copy_elem(s, static_cast<size_t>(broadcast_index(k, out, s.dims)), y, static_cast<size_t>(k));
  }
  return y;
}

// Cast; CastLike passes the type of its second input (as 1 FLOAT or 7 INT64).
StatusOr<HostTensor> cast(const Node& n, const HostTensor& x, std::optional<int64_t> like = std::nullopt) {
  // ONNX TensorProto data types: 1 FLOAT, 10 FLOAT16, 11 DOUBLE, 16 BFLOAT16 are floats; the rest integers/bool.
  const int64_t to = like ? *like : n.attr_int("to", 1);
  const bool to_float = to == 1 || to == 10 || to == 11 || to == 16;
  HostTensor y = make(to_float ? ElemType::FLOAT32 : ElemType::INT64, x.dims);
  for (size_t k = 0; k < x.size(); ++k) {
    double v = x.at(k);
    if (to == 10) v = round_to_float16(static_cast<float>(v));  // FLOAT16, BFLOAT16: held as floats, rounded
    if (to == 16) v = round_to_bfloat16(static_cast<float>(v));
    if (!to_float) {
      if (to == 9)
        v = v != 0;  // BOOL
      else
        v = std::trunc(v);
    }
    set(y, k, v);
  }
  return y;
}

// ---------------------------------------------------------------- reductions

StatusOr<HostTensor> reduce(const Node& n, Ins ins, int opset) {
  const HostTensor& x = *ins[0];
  const std::string& op = n.op_type;
  std::vector<int64_t> axes = n.attr_ints("axes");
  const bool axes_input = (op == "ReduceSum" && opset >= 13) || opset >= 18;
  if (axes_input && in(ins, 1)) axes = as_ints(*in(ins, 1));
  const bool keepdims = n.attr_int("keepdims", 1) != 0;
  const size_t r = x.dims.size();
  std::vector<bool> reduced(r, false);
  if (axes.empty()) {
    if (axes_input && n.attr_int("noop_with_empty_axes", 0)) return x;
    std::fill(reduced.begin(), reduced.end(), true);
  }
  for (int64_t a : axes) {
    TS_RETURN_IF_ERROR(check_axis(n, a, r));
    reduced[static_cast<size_t>(norm_axis(a, r))] = true;
  }
  Dims out, kept;
  for (size_t d = 0; d < r; ++d) {
    if (!reduced[d])
      out.push_back(x.dims[d]), kept.push_back(x.dims[d]);
    else if (keepdims)
      out.push_back(1), kept.push_back(1);
    else
      kept.push_back(1);
  }
  const int64_t outer = dims_volume(out);
  const bool is_max = op == "ReduceMax", is_min = op == "ReduceMin", is_prod = op == "ReduceProd";
  std::vector<double> acc(static_cast<size_t>(outer), is_max    ? -std::numeric_limits<double>::infinity()
                                                      : is_min  ? std::numeric_limits<double>::infinity()
                                                      : is_prod ? 1.0
                                                                : 0.0);
  std::vector<int64_t> count(static_cast<size_t>(outer), 0);
  const auto kept_strides = strides_of(kept);
  const int64_t total = dims_volume(x.dims);
  for (int64_t k = 0; k < total; ++k) {
    int64_t rem = k, o = 0;
    for (size_t d = r; d-- > 0;) {
      const int64_t c = rem % x.dims[d];
      rem /= x.dims[d];
      if (!reduced[d]) o += c * kept_strides[d];
    }
    double v = x.at(static_cast<size_t>(k));
    double& a = acc[static_cast<size_t>(o)];
    if (is_max)  // (NaN wins, as numpy's maximum.reduce in ONNX's reference and PyTorch's amax)
      a = std::isnan(v) || v > a ? v : a;
    else if (is_min)
      a = std::isnan(v) || v < a ? v : a;
    else if (is_prod)
      a *= v;
    else if (op == "ReduceL1")
      a += std::fabs(v);
    else if (op == "ReduceL2" || op == "ReduceSumSquare")
      a += v * v;
    else if (op == "ReduceLogSumExp")
      a += std::exp(v);
    else
      a += v;
    ++count[static_cast<size_t>(o)];
  }
  HostTensor y = make(x.type, out);
  for (int64_t o = 0; o < outer; ++o) {
    double v = acc[static_cast<size_t>(o)];
    if (op == "ReduceMean")
      v /= static_cast<double>(std::max<int64_t>(count[static_cast<size_t>(o)], 1));
    else if (op == "ReduceL2")
      v = std::sqrt(v);
    else if (op == "ReduceLogSum" || op == "ReduceLogSumExp")
      v = std::log(v);
    set(y, static_cast<size_t>(o), v);
  }
  return y;
}

StatusOr<HostTensor> arg_reduce(const Node& n, const HostTensor& x) {
  const int64_t axis_attr = n.attr_int("axis", 0);
  TS_RETURN_IF_ERROR(check_axis(n, axis_attr, x.dims.size()));
  const auto axis = static_cast<size_t>(norm_axis(axis_attr, x.dims.size()));
  const bool keepdims = n.attr_int("keepdims", 1) != 0, last = n.attr_int("select_last_index", 0) != 0;
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < axis; ++d) outer *= x.dims[d];
  for (size_t d = axis + 1; d < x.dims.size(); ++d) inner *= x.dims[d];
  const int64_t len = x.dims[axis];
  Dims out = x.dims;
  if (keepdims)
    out[axis] = 1;
  else
    out.erase(out.begin() + static_cast<int64_t>(axis));
  HostTensor y = make(ElemType::INT64, out);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      int64_t best = 0;
      for (int64_t j = 1; j < len; ++j) {
        const double v = x.at(static_cast<size_t>((o * len + j) * inner + i));
        const double b = x.at(static_cast<size_t>((o * len + best) * inner + i));
        // A NaN beats every number (PyTorch's argmax / argmin: a NaN input is named, not hidden).
        bool better;
        if (std::isnan(b)) better = last && std::isnan(v);
        else if (std::isnan(v)) better = true;
        else better = n.op_type == "ArgMax" ? (last ? v >= b : v > b) : (last ? v <= b : v < b);
        if (better) best = j;
      }
      y.i[static_cast<size_t>(o * inner + i)] = best;
    }
  return y;
}

StatusOr<HostTensor> softmax(const Node& n, const HostTensor& x, int opset) {
  const size_t r = x.dims.size();
  const int64_t axis_attr = n.attr_int("axis", opset >= 13 ? -1 : 1);
  TS_RETURN_IF_ERROR(check_axis(n, axis_attr, r));
  const auto axis = static_cast<size_t>(norm_axis(axis_attr, r));
  int64_t outer = 1, len = 1, inner = 1;
  if (opset < 13) {  // flattened to 2D at `axis`
    for (size_t d = 0; d < r; ++d) (d < axis ? outer : len) *= x.dims[d];
  } else {
    for (size_t d = 0; d < axis; ++d) outer *= x.dims[d];
    len = x.dims[axis];
    for (size_t d = axis + 1; d < r; ++d) inner *= x.dims[d];
  }
  HostTensor y = make(ElemType::FLOAT32, x.dims);
  const bool log = n.op_type == "LogSoftmax";
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t j) { return static_cast<size_t>((o * len + j) * inner + i); };
      double m = -std::numeric_limits<double>::infinity(), s = 0;
      for (int64_t j = 0; j < len; ++j) m = std::max(m, double{x.f[at(j)]});
      for (int64_t j = 0; j < len; ++j) s += std::exp(x.f[at(j)] - m);
      for (int64_t j = 0; j < len; ++j)
        y.f[at(j)] = static_cast<float>(log ? x.f[at(j)] - m - std::log(s) : std::exp(x.f[at(j)] - m) / s);
    }
  return y;
}

using Eval = std::function<StatusOr<std::vector<HostTensor>>(const Node&, Ins, int)>;

template <class F>
Eval one(F f) {
  return [f](const Node& n, Ins ins, int opset) -> StatusOr<std::vector<HostTensor>> {
    TS_RETURN_IF_ERROR(need(n, ins, 0));
    auto r = f(n, ins, opset);
    if (!r.ok()) return r.status();
    std::vector<HostTensor> v;
    v.push_back(std::move(*r));
    return v;
  };
}

// A kernel of two required inputs, f(node, x, y).
template <class F>
Eval two(F f) {
  return one([f](const Node& n, Ins ins, int) -> StatusOr<HostTensor> {
    TS_RETURN_IF_ERROR(need(n, ins, 1));
    return f(n, *ins[0], *ins[1]);
  });
}

const std::map<std::string, Eval>& table() {
  static const std::map<std::string, Eval> t = [] {
    std::map<std::string, Eval> m;
    for (const auto& op : kUnary) m[op] = one([](const Node& n, Ins ins, int) { return unary(n, *ins[0]); });
    for (const auto& op : kBinary)
      m[op] = one([](const Node& n, Ins ins, int) -> StatusOr<HostTensor> {
        TS_RETURN_IF_ERROR(need(n, ins, 1));
        return binary(n, *ins[0], *ins[1]);
      });
    for (const char* op : {"Sum", "Mean", "Max", "Min"})
      m[op] = one([](const Node& n, Ins ins, int) { return variadic(n, ins); });
    for (const char* op : {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                           "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"})
      m[op] = one([](const Node& n, Ins ins, int opset) { return reduce(n, ins, opset); });
    for (const char* op : {"ArgMax", "ArgMin"})
      m[op] = one([](const Node& n, Ins ins, int) { return arg_reduce(n, *ins[0]); });
    for (const char* op : {"Softmax", "LogSoftmax"})
      m[op] = one([](const Node& n, Ins ins, int opset) { return softmax(n, *ins[0], opset); });
    m["Clip"] = one([](const Node& n, Ins ins, int opset) { return clip(n, ins, opset); });
    m["Where"] = one([](const Node& n, Ins ins, int) { return where(n, ins); });
    m["Cast"] = one([](const Node& n, Ins ins, int) { return cast(n, *ins[0]); });
    m["CastLike"] = one([](const Node& n, Ins ins, int) -> StatusOr<HostTensor> {
      TS_RETURN_IF_ERROR(need(n, ins, 1));
      return cast(n, *ins[0], ins[1]->type == ElemType::FLOAT32 ? 1 : 7);
    });
    m["TopK"] = [](const Node& n, Ins ins, int opset) -> StatusOr<std::vector<HostTensor>> {
      TS_RETURN_IF_ERROR(need(n, ins, 0));
      return top_k(n, ins, opset);
    };
    m["Hardmax"] = one([](const Node& n, Ins ins, int opset) { return hardmax(n, *ins[0], opset); });
    m["CumSum"] = one([](const Node& n, Ins ins, int) { return cum_sum(n, ins); });
    m["GatherElements"] = two(gather_elements);
    m["GatherND"] = two(gather_nd);
    m["ScatterElements"] = one([](const Node& n, Ins ins, int) { return scatter_elements(n, ins); });
    m["OneHot"] = one([](const Node& n, Ins ins, int) { return one_hot(n, ins); });
    m["Trilu"] = one([](const Node& n, Ins ins, int) { return trilu(n, ins); });
    m["EyeLike"] = one([](const Node& n, Ins ins, int) { return eye_like(n, *ins[0]); });
    m["Einsum"] = one([](const Node& n, Ins ins, int) { return einsum(n, ins); });
    m["MeanVarianceNormalization"] =
        one([](const Node& n, Ins ins, int) { return mean_variance_normalization(n, *ins[0]); });
    for (const char* op : {"LSTM", "GRU", "RNN"}) m[op] = [](const Node& n, Ins ins, int) { return recurrent(n, ins); };
    m["QuantizeLinear"] = one([](const Node& n, Ins ins, int) { return quantize_linear(n, ins); });
    m["DequantizeLinear"] = one([](const Node& n, Ins ins, int) { return dequantize_linear(n, ins); });
    m["DynamicQuantizeLinear"] = [](const Node& n, Ins ins, int) -> StatusOr<std::vector<HostTensor>> {
      TS_RETURN_IF_ERROR(need(n, ins, 0));
      return dynamic_quantize_linear(*ins[0]);
    };
    m["ConvInteger"] = one([](const Node& n, Ins ins, int) { return conv_integer(n, ins); });
    m["MatMulInteger"] = one([](const Node& n, Ins ins, int) { return matmul_integer(n, ins); });
    m["QLinearConv"] = one([](const Node& n, Ins ins, int) { return qlinear_conv(n, ins); });
    m["QuantizedConv"] = one([](const Node& n, Ins ins, int) { return quantized_conv(n, ins); });
    m["QLinearMatMul"] = one([](const Node& n, Ins ins, int) { return qlinear_matmul(n, ins); });
    m["GridSample"] = [](const Node& n, Ins ins, int) { return host::grid_sample(n, ins); };
    m["RoiAlign"] = [](const Node& n, Ins ins, int opset) { return host::roi_align(n, ins, opset); };
    m["NonMaxSuppression"] = one([](const Node& n, Ins ins, int) { return non_max_suppression(n, ins); });
    m["NonZero"] = one([](const Node& n, Ins ins, int) { return non_zero(n, *ins[0]); });
    m["If"] = [](const Node& n, Ins ins, int opset) { return if_branch(n, ins, opset); };
    m["Shape"] = one([](const Node& n, Ins ins, int) -> StatusOr<HostTensor> {
      const auto r = static_cast<int64_t>(ins[0]->dims.size());
      int64_t s = n.attr_int("start", 0), e = n.attr_int("end", r);
      s = std::clamp<int64_t>(s < 0 ? s + r : s, 0, r), e = std::clamp<int64_t>(e < 0 ? e + r : e, 0, r);
      std::vector<int64_t> v(ins[0]->dims.begin() + s, ins[0]->dims.begin() + std::max(s, e));
      return HostTensor::ints({static_cast<int64_t>(v.size())}, v);
    });
    m["Size"] =
        one([](const Node&, Ins ins, int) -> StatusOr<HostTensor> { return HostTensor::ints({}, {ins[0]->volume()}); });
    m["Reshape"] = one([](const Node& n, Ins ins, int opset) -> StatusOr<HostTensor> {
      std::vector<int64_t> shape = n.attr_ints("shape");
      if (opset >= 5) {
        TS_RETURN_IF_ERROR(need(n, ins, 1));
        shape = as_ints(*ins[1]);
      }
      TS_ASSIGN_OR_RETURN(Dims d, reshape_dims(n, ins[0]->dims, shape));
      return reshape_to(n, *ins[0], d);
    });
    m["Flatten"] = one([](const Node& n, Ins ins, int) { return flatten(n, *ins[0]); });
    for (const char* op : {"Squeeze", "Unsqueeze"})
      m[op] = one([](const Node& n, Ins ins, int opset) { return squeeze_unsqueeze(n, ins, opset); });
    m["Transpose"] = one([](const Node& n, Ins ins, int) { return transpose(n, *ins[0]); });
    m["Concat"] = one([](const Node& n, Ins ins, int) { return concat(n, ins); });
    m["Gather"] = two(gather);
    m["Slice"] = one([](const Node& n, Ins ins, int opset) { return slice(n, ins, opset); });
    m["ScatterND"] = one([](const Node& n, Ins ins, int) { return scatter_nd(n, ins); });
    m["Expand"] = two(expand);
    m["Tile"] = two(tile);
    m["Pad"] = one([](const Node& n, Ins ins, int opset) { return pad(n, ins, opset); });
    m["Range"] = one([](const Node& n, Ins ins, int) { return range(n, ins); });
    m["ConstantOfShape"] = one([](const Node& n, Ins ins, int) { return constant_of_shape(n, *ins[0]); });
    m["MatMul"] = two(matmul);
    m["Gemm"] = one([](const Node& n, Ins ins, int) -> StatusOr<HostTensor> {
      TS_RETURN_IF_ERROR(need(n, ins, 1));
      return gemm(n, ins);
    });
    m["BatchNormalization"] = [](const Node& n, Ins ins, int) { return batch_norm(n, ins); };
    m["InstanceNormalization"] = one([](const Node& n, Ins ins, int) { return instance_norm(n, ins); });
    m["GroupNorm"] = one([](const Node& n, Ins ins, int) { return group_norm(n, ins); });
    m["LRN"] = one([](const Node& n, Ins ins, int) -> StatusOr<HostTensor> {
      TS_RETURN_IF_ERROR(need(n, ins, 0));
      return lrn(n, *ins[0]);
    });
    m["LayerNormalization"] = [](const Node& n, Ins ins, int) -> StatusOr<std::vector<HostTensor>> {
      TS_RETURN_IF_ERROR(need(n, ins, 0));
      return layer_norm(n, ins);
    };
    for (const char* op : {"DepthToSpace", "SpaceToDepth"})
      m[op] = one([](const Node& n, Ins ins, int) { return depth_space(n, *ins[0]); });
    // Inference Dropout: the input, and an all-true mask when asked for.
    m["Dropout"] = [](const Node& n, Ins ins, int) -> StatusOr<std::vector<HostTensor>> {
      TS_RETURN_IF_ERROR(need(n, ins, 0));
      if (in(ins, 2) && in(ins, 2)->at(0) != 0 && (!in(ins, 1) || in(ins, 1)->at(0) != 0))
        return unimplemented_error("{}: training mode (random masks)", n.label());
      std::vector<HostTensor> r{*ins[0]};
      if (n.outputs.size() > 1) {
        HostTensor mask = make(ElemType::INT64, ins[0]->dims);
        std::fill(mask.i.begin(), mask.i.end(), 1);
        r.push_back(std::move(mask));
      }
      return r;
    };
    m["Conv"] = [](const Node& n, Ins ins, int) { return host::conv(n, ins); };
    m["ConvTranspose"] = [](const Node& n, Ins ins, int) { return host::conv_transpose(n, ins); };
    for (const char* op : {"MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool"})
      m[op] = [](const Node& n, Ins ins, int) { return host::pool(n, ins); };
    for (const char* op : {"Resize", "Upsample"})
      m[op] = [](const Node& n, Ins ins, int opset) { return host::resize(n, ins, opset); };
    m["Split"] = [](const Node& n, Ins ins, int opset) -> StatusOr<std::vector<HostTensor>> {
      TS_RETURN_IF_ERROR(need(n, ins, 0));
      return split(n, ins, opset);
    };
    return m;
  }();
  return t;
}

}  // namespace

StatusOr<std::vector<int64_t>> broadcast_dims(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  const size_t r = std::max(a.size(), b.size());
  std::vector<int64_t> out(r);
  for (size_t k = 0; k < r; ++k) {
    const int64_t x = k < r - a.size() ? 1 : a[k - (r - a.size())];
    const int64_t y = k < r - b.size() ? 1 : b[k - (r - b.size())];
    if (x != y && x != 1 && y != 1)
      return invalid_argument_error("shapes {} and {} do not broadcast", dims_to_string(a), dims_to_string(b));
    out[k] = x == 1 ? y : x;
  }
  return out;
}

bool host_supports(const std::string& op_type) { return table().count(op_type) != 0; }

std::vector<std::string> host_supported_ops() {
  std::vector<std::string> ops;
  for (const auto& [k, v] : table()) ops.push_back(k);
  return ops;
}

Status evaluate_nodes(const Graph& g, std::vector<std::optional<HostTensor>>& values) {
  for (const Node& n : g.nodes) {
    std::vector<const HostTensor*> ins;
    for (int v : n.inputs) {
      if (v < 0) {
        ins.push_back(nullptr);
      } else if (values[static_cast<size_t>(v)]) {
        ins.push_back(&*values[static_cast<size_t>(v)]);
      } else if (g.value(v).constant) {
        ins.push_back(&*g.value(v).constant);
      } else {
        return invalid_argument_error("{}: input '{}' is not computed", n.label(), g.value(v).name);
      }
    }
    TS_ASSIGN_OR_RETURN(std::vector<HostTensor> outs, evaluate(n, ins, g.opset));
    for (size_t k = 0; k < n.outputs.size() && k < outs.size(); ++k)
      if (n.outputs[k] >= 0) values[static_cast<size_t>(n.outputs[k])] = std::move(outs[k]);
  }
  return ok_status();
}

StatusOr<std::vector<HostTensor>> evaluate(const Node& node, std::span<const HostTensor* const> inputs, int opset) {
  auto it = table().find(node.op_type);
  if (it == table().end()) return unimplemented_error("{} has no host kernel", node.label());
  TS_ASSIGN_OR_RETURN(std::vector<HostTensor> outs, it->second(node, inputs, opset));
  if (outs.size() < node.outputs.size())
    return invalid_argument_error("{} has {} outputs; the op produces {}", node.label(), node.outputs.size(),
                                  outs.size());
  return outs;
}

}  // namespace tessera::graph
