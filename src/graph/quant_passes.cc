// lower_quantized: quantized models on the float device (passes.h).
//
// The device computes in floats; a quantized integer (uint8, int8, an int32
// accumulator) is a float holding that integer, exact up to 2^24. Each
// quantizing op becomes the float ops of its definition, its integer results
// become FLOAT32 values, and the ops that only move or pick values (MaxPool,
// Reshape, Transpose, Concat, nearest Resize, ...) carry them on unchanged.
// A reader that needs the integer type back (a host op, a graph output)
// reads it through a Cast to INT64.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "host_kernels.h"
#include "pass_util.h"
#include "tessera/graph/host_eval.h"
#include "tessera/graph/passes.h"

namespace tessera::graph {
namespace {

using namespace detail;

// The single output of `n` evaluated on the host when every input it has is
// a constant; nullopt otherwise, or when the host kernel refuses (the node
// then runs, and reports its error, as it would have).
std::optional<HostTensor> evaluated(const Graph& g, const Node& n) {
  std::vector<const HostTensor*> ins;
  for (int v : n.inputs) {
    if (v >= 0 && !g.is_constant(v)) return std::nullopt;
    ins.push_back(v < 0 ? nullptr : &*g.value(v).constant);
  }
  auto y = evaluate(n, ins, g.opset);
  if (!y.ok() || y->size() != 1) return std::nullopt;
  return std::move((*y)[0]);
}

// Ops whose result is a choice or an arrangement of their first input's
// elements, valid on integers held in floats.
bool moves_values(const Graph& g, const Node& n) {
  static const std::set<std::string> ops = {
      "MaxPool", "GlobalMaxPool", "Reshape",      "Flatten",      "Squeeze", "Unsqueeze", "Transpose", "Slice",
      "Split",   "Identity",      "DepthToSpace", "SpaceToDepth", "Concat",  "Tile",      "Expand",    "Dropout"};
  if (n.op_type == "Resize" || n.op_type == "Upsample") return n.attr_string("mode", "nearest") == "nearest";
  if (n.op_type == "Pad")  // a constant fill is an integer too
    return n.attr_string("mode", "constant") == "constant" &&
           (n.inputs.size() < 3 || n.inputs[2] < 0 || g.is_constant(n.inputs[2]));
  if (n.op_type == "MaxPool" && n.outputs.size() > 1) return false;  // (its Indices are integers of their own)
  return ops.count(n.op_type) != 0;
}

using host::quant_range;
using host::QuantRange;

class Lowering {
 public:
  explicit Lowering(Graph& g) : g_(g) {}

  // A new run-time FLOAT32 value.
  int value(const std::string& name, std::vector<int64_t> dims) {
    return g_.add_value({.name = fmt::format("{}:{}", name, counter_++), .dims = std::move(dims), .has_shape = true});
  }
  int constant(const std::string& name, std::vector<int64_t> dims, std::vector<float> v) {
    HostTensor t = HostTensor::floats(dims, std::move(v));
    return g_.add_value({.name = fmt::format("{}:{}", name, counter_++),
                         .dims = std::move(dims),
                         .has_shape = true,
                         .constant = std::move(t)});
  }
  int emit(const Node& from, const std::string& op, std::vector<int> inputs, std::vector<int64_t> dims, int out = -1) {
    if (out < 0) out = value(from.name, std::move(dims));
    Node n{.name = fmt::format("{}:{}{}", from.name, op, counter_++),
           .op_type = op,
           .inputs = std::move(inputs),
           .outputs = {out}};
    out_.push_back(std::move(n));
    return out;
  }
  Node& last() { return out_.back(); }
  int clip(const Node& from, int x, float lo, float hi, int out) {
    if (g_.opset >= 11) {
      const int l = constant(from.name + ":lo", {}, {lo}), h = constant(from.name + ":hi", {}, {hi});
      return emit(from, "Clip", {x, l, h}, g_.value(x).dims, out);
    }
    emit(from, "Clip", {x}, g_.value(x).dims, out);
    last().attrs["min"] = float_attr(lo), last().attrs["max"] = float_attr(hi);
    return out;
  }

  // A scale or zero point as a constant that broadcasts against a value of
  // rank `rank` along `axis` (per tensor: shape (1)); nullopt when it is
  // not a constant of one or dims[axis] values.
  std::optional<int> broadcastable(const Node& n, int v, size_t rank, int64_t axis_len) {
    if (!g_.is_constant(v)) return std::nullopt;
    const HostTensor& t = *g_.value(v).constant;
    std::vector<float> f(t.size());
    for (size_t k = 0; k < f.size(); ++k) f[k] = static_cast<float>(t.at(k));
    if (t.volume() == 1) return constant(n.name, {1}, f);
    if (t.dims.size() != 1 || t.dims[0] != axis_len) return std::nullopt;
    const int64_t axis =
        n.attr_int("axis", 1) < 0 ? n.attr_int("axis", 1) + static_cast<int64_t>(rank) : n.attr_int("axis", 1);
    std::vector<int64_t> dims{axis_len};
    for (int64_t k = axis + 1; k < static_cast<int64_t>(rank); ++k) dims.push_back(1);
    return constant(n.name, dims, f);
  }
  bool all_zero(int v) const {
    if (v < 0) return true;
    if (!g_.is_constant(v)) return false;
    const HostTensor& t = *g_.value(v).constant;
    for (size_t k = 0; k < t.size(); ++k)
      if (t.at(k) != 0) return false;
    return true;
  }
  // A scalar operand: the constant as shape (1), or the run-time value.
  std::optional<int> scalar(const Node& n, int v) {
    if (g_.value(v).constant) return broadcastable(n, v, 0, 1);
    return dims_volume(g_.value(v).dims) == 1 ? std::optional<int>(v) : std::nullopt;
  }
  bool float_now(int v) const { return v >= 0 && !g_.is_constant(v) && g_.value(v).type == ElemType::FLOAT32; }
  // x - zero point (x itself for a zero point of 0 or none).
  std::optional<int> centered(const Node& n, int x, int zp) {
    if (all_zero(zp)) return x;
    const auto z = scalar(n, zp);
    if (!z) return std::nullopt;
    return emit(n, "Sub", {x, *z}, g_.value(x).dims);
  }
  // The constant integer weight minus its zero point (per output channel),
  // as floats: nullopt when either is not a constant or they disagree.
  std::optional<int> centered_weight(const Node& n, int w, int zp, int64_t axis) {
    if (!g_.is_constant(w) || (zp >= 0 && !g_.is_constant(zp))) return std::nullopt;
    const HostTensor& t = *g_.value(w).constant;
    const size_t zs = zp >= 0 ? g_.value(zp).constant->size() : 0;
    int64_t inner = 1;
    for (size_t k = static_cast<size_t>(axis) + 1; k < t.dims.size(); ++k) inner *= t.dims[k];
    if (zs > 1 && (t.dims.empty() || static_cast<int64_t>(zs) != t.dims[static_cast<size_t>(axis)]))
      return std::nullopt;
    std::vector<float> f(t.size());
    for (size_t k = 0; k < f.size(); ++k) {
      const size_t c = zs > 1 ? static_cast<size_t>(static_cast<int64_t>(k) / inner % static_cast<int64_t>(zs)) : 0;
      f[k] = static_cast<float>(t.at(k) - (zs ? g_.value(zp).constant->at(c) : 0.0));
    }
    return constant(n.name + ":weight", t.dims, std::move(f));
  }
  // round(acc * multiplier) + zero point, saturated to n's type, into `out`.
  bool requantize(const Node& n, int acc, int multiplier, int zp, int out) {
    const auto r = quant_range(n);
    const auto z = zp >= 0 ? scalar(n, zp) : std::nullopt;
    if (!r || (zp >= 0 && !z)) return false;
    const std::vector<int64_t> d = g_.value(acc).dims;
    int v = emit(n, "Mul", {acc, multiplier}, d);
    v = emit(n, "Round", {v}, d);
    if (!all_zero(zp)) v = emit(n, "Add", {v, *z}, d);
    clip(n, v, static_cast<float>(r->lo), static_cast<float>(r->hi), out);
    return true;
  }
  Node conv_like(const Node& n, const std::string& op, std::vector<int> inputs, int out) {
    Node c{.name = n.name, .op_type = op, .inputs = std::move(inputs), .outputs = {out}};
    for (const char* a : {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"})
      if (n.has_attr(a)) c.attrs[a] = n.attrs.at(a);
    return c;
  }

  // The scale and zero point operands of a Quantize / DequantizeLinear
  // over x, broadcastable against it (the zero point -1 when it is absent
  // or zero); nullopt when they are neither constants of one or
  // dims[axis] values nor run-time scalars.
  std::optional<std::pair<int, int>> scale_and_zero_point(const Node& n, const std::vector<int64_t>& d) {
    const int s = n.inputs[1], zp = n.inputs.size() > 2 ? n.inputs[2] : -1;
    const auto rank = static_cast<int64_t>(d.size());
    const int64_t axis_len = d.empty() ? 1 : d[static_cast<size_t>((n.attr_int("axis", 1) + rank) % rank)];
    const auto sc = g_.is_constant(s) ? broadcastable(n, s, d.size(), axis_len) : scalar(n, s);
    const auto z = zp < 0 || all_zero(zp) ? std::optional<int>(-1)
                   : g_.is_constant(zp)   ? broadcastable(n, zp, d.size(), axis_len)
                                          : scalar(n, zp);
    if (!sc || !z) return std::nullopt;
    return std::pair{*sc, *z};
  }
  bool quantize(const Node& n) {  // QuantizeLinear(x, scale, zero point): clip(round(x / scale) + zero point)
    const int x = n.inputs[0];
    const auto r = quant_range(n);
    if (!r || !float_now(x) || n.attr_int("saturate", 1) == 0) return false;
    const std::vector<int64_t> d = g_.value(x).dims;
    const auto sz = scale_and_zero_point(n, d);
    if (!sz) return false;
    int v = emit(n, "Round", {emit(n, "Div", {x, sz->first}, d)}, d);
    if (sz->second >= 0) v = emit(n, "Add", {v, sz->second}, d);
    clip(n, v, static_cast<float>(r->lo), static_cast<float>(r->hi), n.outputs[0]);
    if (const auto st = per_tensor(n)) quantized_[n.outputs[0]] = {x, st->first, st->second, *r};
    return true;
  }
  // A per-tensor constant scale and zero point (0 when absent), or nullopt.
  std::optional<std::pair<float, float>> per_tensor(const Node& n) const {
    const int s = n.inputs[1], zp = n.inputs.size() > 2 ? n.inputs[2] : -1;
    if (!g_.is_constant(s) || g_.value(s).constant->volume() != 1) return std::nullopt;
    if (zp >= 0 && (!g_.is_constant(zp) || g_.value(zp).constant->volume() != 1)) return std::nullopt;
    return std::pair{static_cast<float>(g_.value(s).constant->at(0)),
                     zp >= 0 ? static_cast<float>(g_.value(zp).constant->at(0)) : 0.0f};
  }
  // DequantizeLinear right after a QuantizeLinear of the same per-tensor
  // scale s and zero point z (a QDQ model's every activation): the pair is
  // clip(round(x / s), lo - z, hi - z) * s, which is clip(round(x / s) * s,
  // (lo - z) * s, (hi - z) * s) bit for bit (s > 0: rounding is monotonic):
  // two launches, Div + Round and Mul + Clip, where the ops one by one take four.
  bool fake_quantize(const Node& n) {
    const auto q = quantized_.find(n.inputs[0]);
    const auto st = per_tensor(n);
    if (q == quantized_.end() || !st || st->first != q->second.scale || st->second != q->second.zero_point ||
        !(st->first > 0))
      return false;
    const Quantized& p = q->second;
    const std::vector<int64_t> d = g_.value(p.x).dims;
    const int s = constant(n.name + ":scale", {1}, {p.scale});
    const int v = emit(n, "Mul", {emit(n, "Round", {emit(n, "Div", {p.x, s}, d)}, d), s}, d);
    // (in float, as the device's Mul rounds them: the bounds are what it gives at the saturated integers)
    clip(n, v, (static_cast<float>(p.range.lo) - p.zero_point) * p.scale,
         (static_cast<float>(p.range.hi) - p.zero_point) * p.scale, n.outputs[0]);
    return true;
  }
  bool dequantize(const Node& n) {  // DequantizeLinear(x, scale, zero point): (x - zero point) * scale
    const int x = n.inputs[0];
    if (!float_now(x)) return false;
    if (fake_quantize(n)) return true;
    const std::vector<int64_t> d = g_.value(x).dims;
    const auto sz = scale_and_zero_point(n, d);
    if (!sz) return false;
    const int v = sz->second >= 0 ? emit(n, "Sub", {x, sz->second}, d) : x;
    emit(n, "Mul", {v, sz->first}, d, n.outputs[0]);
    return true;
  }
  // Whether v is >= 0 (or NaN) wherever it is defined: made by an op that
  // cannot go below 0, or moved, pooled or summed from such values
  // (DynamicQuantizeLinear skips the minimum of a value after a ReLU).
  bool non_negative(int v, int depth = 0) {
    if (v < 0 || depth > 16) return false;
    if (g_.is_constant(v)) {
      const HostTensor& t = *g_.value(v).constant;
      for (size_t k = 0; k < t.size(); ++k)
        if (t.at(k) < 0) return false;
      return true;
    }
    const int p = static_cast<size_t>(v) < producer_.size() ? producer_[static_cast<size_t>(v)] : -1;
    if (p < 0) return false;
    const Node& n = nodes_[static_cast<size_t>(p)];
    static const std::set<std::string> positive = {"Relu", "Sigmoid", "Softplus", "Abs", "Exp", "Sqrt"};
    if (positive.count(n.op_type)) return true;
    if (n.op_type == "Clip")
      return n.inputs.size() > 1 && n.inputs[1] >= 0 && g_.is_constant(n.inputs[1]) &&
             g_.value(n.inputs[1]).constant->at(0) >= 0;
    static const std::set<std::string> keep = {
        "MaxPool",   "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Resize",    "Upsample", "Reshape", "Flatten",
        "Transpose", "Slice",       "Identity",          "Squeeze",       "Unsqueeze", "Concat",   "Add",     "Mul"};
    if (!keep.count(n.op_type) || ((n.op_type == "Resize" || n.op_type == "Upsample") &&
                                   n.attr_string("mode", "nearest") == "cubic"))  // (cubic overshoots)
      return false;
    const bool all = n.op_type == "Concat" || n.op_type == "Add" || n.op_type == "Mul";
    for (size_t k = 0; k < (all ? n.inputs.size() : 1); ++k)
      if (!non_negative(n.inputs[k], depth + 1)) return false;
    return true;
  }
  // The maximum of every element of x, a scalar. Over a 4-D value first a
  // MaxPool of bands of rows (kh x W windows, H / kh output rows that the
  // device's workers share: a pool over the whole image is one task), then
  // a ReduceMax of those.
  int global_max(const Node& n, int x) {
    const std::vector<int64_t> d = g_.value(x).dims;
    int v = x;
    if (d.size() == 4 && d[2] * d[3] >= 4096) {
      int64_t kh = 1;
      for (int64_t k = 1; k <= d[2]; ++k)
        if (d[2] % k == 0 && d[2] / k >= 16) kh = k;
      v = emit(n, "MaxPool", {x}, {d[0], d[1], d[2] / kh, 1});
      last().attrs["kernel_shape"] = ints_attr({kh, d[3]});
      last().attrs["strides"] = ints_attr({kh, d[3]});
    }
    v = emit(n, "ReduceMax", {v}, {});
    last().attrs["keepdims"] = int_attr(0);
    return v;
  }
  // DynamicQuantizeLinear(x) -> y, scale, zero point, as ONNX defines it:
  // the range [min(x, 0), max(x, 0)] over 255 steps; an empty range (x all
  // zeros) has scale 1, as ONNX Runtime's (the device adds 1 - sign(range)).
  bool dynamic_quantize(const Node& n) {
    const int x = n.inputs[0];
    if (!float_now(x) || n.outputs.size() != 3) return false;
    const std::vector<int64_t> d = g_.value(x).dims;
    const int zero = constant(n.name + ":zero", {}, {0.0f}), one = constant(n.name + ":one", {}, {1.0f});
    int lo = zero;  // min(x, 0) = -max(-x, 0)
    if (!non_negative(x)) lo = emit(n, "Neg", {emit(n, "Max", {global_max(n, emit(n, "Neg", {x}, d)), zero}, {})}, {});
    const int hi = emit(n, "Max", {global_max(n, x), zero}, {});
    const int range = emit(n, "Sub", {hi, lo}, {});
    const int steps = emit(n, "Div", {range, constant(n.name + ":steps", {}, {255.0f})}, {});
    const int empty = emit(n, "Sub", {one, emit(n, "Sign", {range}, {})}, {});
    const int scale = emit(n, "Add", {steps, empty}, {}, n.outputs[1]);
    const int izp = emit(n, "Sub", {zero, emit(n, "Div", {lo, scale}, {})}, {});
    const int zp = emit(n, "Round", {clip(n, izp, 0, 255, value(n.name, {}))}, {}, n.outputs[2]);
    int v = emit(n, "Round", {emit(n, "Div", {x, scale}, d)}, d);
    v = emit(n, "Add", {v, zp}, d);
    clip(n, v, 0, 255, n.outputs[0]);
    return true;
  }
  bool conv_integer(const Node& n) {  // ConvInteger(x, w, x zero point, w zero point)
    const int x = n.inputs[0];
    if (!float_now(x) || n.inputs.size() < 2) return false;
    const auto w = centered_weight(n, n.inputs[1], n.inputs.size() > 3 ? n.inputs[3] : -1, 0);
    if (!w) return false;
    const auto xc = centered(n, x, n.inputs.size() > 2 ? n.inputs[2] : -1);
    if (!xc) return false;
    out_.push_back(conv_like(n, "Conv", {*xc, *w}, n.outputs[0]));
    return true;
  }
  bool matmul_integer(const Node& n) {  // MatMulInteger(a, b, a zero point, b zero point)
    const int a = n.inputs[0];
    if (!float_now(a) || n.inputs.size() < 2 || g_.value(n.inputs[1]).dims.size() < 2) return false;
    const auto b = centered_weight(n, n.inputs[1], n.inputs.size() > 3 ? n.inputs[3] : -1,
                                   static_cast<int64_t>(g_.value(n.inputs[1]).dims.size()) - 1);
    if (!b) return false;
    const auto ac = centered(n, a, n.inputs.size() > 2 ? n.inputs[2] : -1);
    if (!ac) return false;
    emit(n, "MatMul", {*ac, *b}, g_.value(n.outputs[0]).dims, n.outputs[0]);
    return true;
  }
  // QLinearConv / QLinearMatMul: the integer product of the centered
  // operands, then requantized by x_scale * w_scale / y_scale (per output
  // channel), as ONNX Runtime computes it.
  bool qlinear(const Node& n) {
    const bool conv = n.op_type == "QLinearConv";
    if (n.inputs.size() < 8 || !float_now(n.inputs[0])) return false;
    for (size_t k = 1; k < n.inputs.size(); ++k)
      if (k != 3 && n.inputs[k] >= 0 && !g_.is_constant(n.inputs[k])) return false;
    if (n.inputs[1] < 0 || n.inputs[4] < 0 || n.inputs[6] < 0) return false;
    // (copies: the values below grow g_.values)
    const HostTensor xs = *g_.value(n.inputs[1]).constant, ws = *g_.value(n.inputs[4]).constant,
                     ys = *g_.value(n.inputs[6]).constant;
    const std::vector<int64_t> wd = g_.value(n.inputs[3]).dims;
    if (xs.volume() != 1 || ys.volume() != 1 || wd.size() < 2) return false;
    const int64_t channels = conv ? wd[0] : wd.back();
    if (ws.volume() != 1 && (!conv || ws.volume() != channels)) return false;
    const auto w = centered_weight(n, n.inputs[3], n.inputs[5], conv ? 0 : static_cast<int64_t>(wd.size()) - 1);
    const auto xc = centered(n, n.inputs[0], n.inputs[2]);
    if (!w || !xc) return false;
    std::vector<float> m;
    for (size_t c = 0; c < ws.size(); ++c)
      m.push_back(static_cast<float>(xs.at(0)) * static_cast<float>(ws.at(c)) / static_cast<float>(ys.at(0)));
    const size_t rank = g_.value(n.outputs[0]).dims.size();
    std::vector<int64_t> md{static_cast<int64_t>(m.size())};
    for (size_t k = 2; k < rank && m.size() > 1; ++k) md.push_back(1);
    const int mult = constant(n.name + ":multiplier", md, std::move(m));
    const int acc = value(n.name, g_.value(n.outputs[0]).dims);
    if (conv) {
      std::vector<int> ins{*xc, *w};
      if (n.inputs.size() > 8 && n.inputs[8] >= 0) {
        const HostTensor& b = *g_.value(n.inputs[8]).constant;
        std::vector<float> f(b.size());
        for (size_t k = 0; k < f.size(); ++k) f[k] = static_cast<float>(b.at(k));
        ins.push_back(constant(n.name + ":bias", b.dims, std::move(f)));
      }
      out_.push_back(conv_like(n, "Conv", std::move(ins), acc));
    } else {
      emit(n, "MatMul", {*xc, *w}, g_.value(acc).dims, acc);
    }
    return requantize(n, acc, mult, n.inputs[7], n.outputs[0]);
  }

  // A DequantizeLinear of constant weights that constant folding left (more
  // elements than it folds: a VGG's 102 M classifier weights) dequantized
  // here, once, instead of on the host at every run.
  bool dequantize_constant(const Node& n) {
    std::optional<HostTensor> y = evaluated(g_, n);
    if (!y) return false;
    g_.value(n.outputs[0]).constant = std::move(*y);
    return true;
  }

  bool lower(const Node& n) {
    if (n.inputs.empty() || n.inputs[0] < 0 || n.outputs.empty()) return false;
    if (n.op_type == "DequantizeLinear" && g_.is_constant(n.inputs[0])) return dequantize_constant(n);
    const size_t before = out_.size();
    bool done = false;
    if (n.op_type == "QuantizeLinear" && n.inputs.size() >= 2) done = quantize(n);
    if (n.op_type == "DequantizeLinear" && n.inputs.size() >= 2) done = dequantize(n);
    if (n.op_type == "DynamicQuantizeLinear" && n.inputs.size() == 1) done = dynamic_quantize(n);
    if (n.op_type == "ConvInteger") done = conv_integer(n);
    if (n.op_type == "MatMulInteger") done = matmul_integer(n);
    if (n.op_type == "QLinearConv" || n.op_type == "QLinearMatMul") done = qlinear(n);
    if (!done) out_.resize(before);  // (a rule that gave up part way)
    return done;
  }

  // The range of the integers a lowered node's outputs hold.
  static QuantRange result_range(const Node& n) {
    if (n.op_type == "ConvInteger" || n.op_type == "MatMulInteger") return {-2147483648.0, 2147483647.0};
    if (n.op_type == "DynamicQuantizeLinear") return {0, 255};
    return quant_range(n).value_or(QuantRange{0, 255});
  }
  // The range of an ONNX integer type (TensorProto's numbering), nullopt for others.
  static std::optional<QuantRange> type_range(int64_t t) {
    switch (t) {
      case 2:
        return QuantRange{0, 255};  // UINT8
      case 3:
        return QuantRange{-128, 127};  // INT8
      case 4:
        return QuantRange{0, 65535};  // UINT16
      case 5:
        return QuantRange{-32768, 32767};  // INT16
      case 6:
        return QuantRange{-2147483648.0, 2147483647.0};  // INT32
      case 7:
        return QuantRange{-9223372036854775808.0, 9223372036854775807.0};  // INT64
      case 12:
        return QuantRange{0, 4294967295.0};  // UINT32
      case 13:
        return QuantRange{0, 18446744073709551615.0};  // UINT64
      default:
        return std::nullopt;
    }
  }

  PassReport run() {
    PassReport r{"lower_quantized"};
    std::map<int, QuantRange> floats;  // integer values now held in floats, with their range
    std::map<int, int> as_ints;        // those Cast back to INT64 for a reader that needs integers
    auto retype = [&](const Node& n, QuantRange range) {
      for (int o : n.outputs)
        if (g_.value(o).type == ElemType::INT64) g_.value(o).type = ElemType::FLOAT32, floats[o] = range;
    };
    nodes_ = std::move(g_.nodes);
    g_.nodes.clear();
    producer_.assign(g_.values.size(), -1);
    for (size_t i = 0; i < nodes_.size(); ++i)
      for (int o : nodes_[i].outputs) producer_[static_cast<size_t>(o)] = static_cast<int>(i);
    for (const Node& n : nodes_) {
      if (lower(n)) {
        retype(n, result_range(n));
        ++r.rewrites;
        continue;
      }
      Node kept = n;
      bool carried = !n.inputs.empty() && floats.count(n.inputs[0]) && moves_values(g_, n);
      if (n.op_type == "Concat")
        carried = carried && std::all_of(n.inputs.begin(), n.inputs.end(), [&](int v) { return floats.count(v) != 0; });
      // A Cast to a float type, or to an integer type that holds the value's
      // range (PyTorch's QuantizeLinear -> Cast(UINT8) -> DequantizeLinear), copies.
      const auto in_range = n.op_type == "Cast" && !n.inputs.empty() && floats.count(n.inputs[0])
                                ? std::optional<QuantRange>(floats.at(n.inputs[0]))
                                : std::nullopt;
      const auto to = in_range ? type_range(n.attr_int("to", 1)) : std::nullopt;
      if (in_range && g_.value(n.outputs[0]).type == ElemType::FLOAT32) {
        kept.op_type = "Identity", kept.attrs.clear();
      } else if (in_range && to && to->lo <= in_range->lo && in_range->hi <= to->hi) {
        kept.op_type = "Identity", kept.attrs.clear();
        retype(n, *in_range);
        if (auto q = quantized_.find(n.inputs[0]); q != quantized_.end()) quantized_[n.outputs[0]] = q->second;
      } else if (carried) {
        QuantRange range = floats.at(n.inputs[0]);
        for (int v : n.inputs)
          if (floats.count(v)) range = {std::min(range.lo, floats.at(v).lo), std::max(range.hi, floats.at(v).hi)};
        retype(n, range);
      } else {
        for (int& in : kept.inputs) {  // a reader that needs integers gets them back (one Cast a value)
          if (!floats.count(in)) continue;
          if (auto it = as_ints.find(in); it != as_ints.end()) {
            in = it->second;
            continue;
          }
          const int back = g_.add_value({.name = g_.value(in).name + ":int",
                                         .type = ElemType::INT64,
                                         .dims = g_.value(in).dims,
                                         .has_shape = true});
          out_.push_back({.name = g_.value(in).name + ":to_int", .op_type = "Cast", .inputs = {in}, .outputs = {back}});
          out_.back().attrs["to"] = int_attr(7);
          in = as_ints[in] = back;
        }
      }
      out_.push_back(std::move(kept));
    }
    // Graph outputs keep their integer type: the float lands in a new value, a Cast writes the output.
    for (int o : g_.outputs) {
      if (!floats.count(o)) continue;
      Value f = g_.value(o);
      f.name += ":float";
      const int fid = g_.add_value(std::move(f));
      g_.value(o).type = ElemType::INT64;
      for (Node& n : out_) {
        for (int& in : n.inputs)
          if (in == o) in = fid;
        for (int& out : n.outputs)
          if (out == o) out = fid;
      }
      out_.push_back({.name = g_.value(o).name + ":to_int", .op_type = "Cast", .inputs = {fid}, .outputs = {o}});
      out_.back().attrs["to"] = int_attr(7);
    }
    g_.nodes = std::move(out_);
    g_.remove_dead_nodes();
    return r;
  }

 private:
  Graph& g_;
  std::vector<Node> nodes_;    // the graph's nodes; out_: the rewritten ones
  std::vector<int> producer_;  // the node of nodes_ that writes each value (of those before the pass)
  // Values a lowered QuantizeLinear of a per-tensor constant scale wrote:
  // its float input, scale, zero point and range (fake_quantize).
  struct Quantized {
    int x;
    float scale, zero_point;
    QuantRange range;
  };
  std::map<int, Quantized> quantized_;
  std::vector<Node> out_;
  int counter_ = 0;
};

}  // namespace

PassReport lower_quantized(Graph& g) { return Lowering(g).run(); }

namespace {

// The constant scalar (one value) `v`, or nullopt; absent (-1): `dflt`.
std::optional<double> const_scalar(const Graph& g, int v, std::optional<double> dflt = std::nullopt) {
  if (v < 0) return dflt;
  if (!g.is_constant(v) || g.value(v).constant->volume() != 1) return std::nullopt;
  return g.value(v).constant->at(0);
}
const Node* made_by(const Graph& g, int v, const char* op) {
  if (v < 0 || g.value(v).producer < 0) return nullptr;
  const Node& n = g.nodes[static_cast<size_t>(g.value(v).producer)];
  return n.op_type == op ? &n : nullptr;
}

// A QuantizedConv's output through [Relu ->] QuantizeLinear (uint8 / int8,
// constant scalars) [-> Cast to its type] -> DequantizeLinear of the same
// scale and zero point: the pair moves into the conv's epilogue
// (output_scale, output_zero_point, output_lo / hi; the Relu as its
// activation), and the conv writes the DequantizeLinear's value. The Relu's
// value may also feed QuantizedConvs that quantize it with the same scale
// and zero point: they read the new value instead, which quantizes to the
// same integers. Marks the folded nodes in `dead`.
void fold_output_quantization(Graph& g, std::vector<bool>& dead) {
  const auto consumers = g.consumers();
  auto is_output = [&](int v) { return std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end(); };
  for (size_t ci = 0; ci < g.nodes.size(); ++ci) {
    if (g.nodes[ci].op_type != "QuantizedConv" || g.nodes[ci].has_attr("tessera_activation")) continue;
    int v = g.nodes[ci].outputs[0];
    int relu = sole_reader(g, consumers, v);
    if (relu < 0 || g.nodes[static_cast<size_t>(relu)].op_type != "Relu") relu = -1;
    if (relu >= 0) v = g.nodes[static_cast<size_t>(relu)].outputs[0];
    if (is_output(v)) continue;
    // v's readers: one QuantizeLinear, and QuantizedConvs of its scale and zero point.
    int qi = -1;
    std::vector<std::pair<int, int>> convs;
    bool ok = true;
    for (const auto& [reader, slot] : consumers[static_cast<size_t>(v)]) {
      const Node& n = g.nodes[static_cast<size_t>(reader)];
      if (n.op_type == "QuantizeLinear" && slot == 0 && qi < 0)
        qi = reader;
      else if (n.op_type == "QuantizedConv" && slot == 0)
        convs.emplace_back(reader, slot);
      else
        ok = false;
    }
    if (!ok || qi < 0) continue;
    const Node& q = g.nodes[static_cast<size_t>(qi)];
    const std::string type = q.attr_string("tessera_quant_type", "uint8");
    const auto s = const_scalar(g, q.inputs.size() > 1 ? q.inputs[1] : -1);
    const auto z = const_scalar(g, q.inputs.size() > 2 ? q.inputs[2] : -1, 0);
    if ((type != "uint8" && type != "int8") || q.attr_int("saturate", 1) == 0 || !s || !z || !(*s > 0) ||
        !std::isfinite(*s))
      continue;
    for (const auto& [reader, slot] : convs) {
      const Node& n = g.nodes[static_cast<size_t>(reader)];
      ok = ok && n.attr_float("input_scale", 0) == static_cast<float>(*s) && n.attr_int("input_zero_point", -1) == *z;
    }
    int w = q.outputs[0], cast = sole_reader(g, consumers, w);
    if (cast >= 0 && g.nodes[static_cast<size_t>(cast)].op_type == "Cast" &&
        g.nodes[static_cast<size_t>(cast)].attr_int("to", 0) == (type == "uint8" ? 2 : 3))
      w = g.nodes[static_cast<size_t>(cast)].outputs[0];
    else
      cast = -1;
    const int di = sole_reader(g, consumers, w);
    if (!ok || di < 0 || g.nodes[static_cast<size_t>(di)].op_type != "DequantizeLinear") continue;
    const Node& dq = g.nodes[static_cast<size_t>(di)];
    if (dq.inputs.size() < 2 || dq.inputs[0] != w || const_scalar(g, dq.inputs[1]) != s ||
        const_scalar(g, dq.inputs.size() > 2 ? dq.inputs[2] : -1, 0) != z)
      continue;
    const int d = dq.outputs[0];
    Node& c = g.nodes[ci];
    if (relu >= 0) c.attrs["tessera_activation"] = string_attr("relu");
    c.attrs["output_scale"] = float_attr(static_cast<float>(*s));
    c.attrs["output_zero_point"] = int_attr(static_cast<int64_t>(*z));
    c.attrs["output_lo"] = int_attr(type == "uint8" ? 0 : -128);
    c.attrs["output_hi"] = int_attr(type == "uint8" ? 255 : 127);
    c.outputs = {d};
    for (const auto& [reader, slot] : convs) g.nodes[static_cast<size_t>(reader)].inputs[0] = d;
    for (int k : {relu, qi, cast, di})
      if (k >= 0) dead[static_cast<size_t>(k)] = true;
  }
}

}  // namespace

PassReport fuse_quantized_convs(Graph& g) {
  PassReport r{"fuse_quantized_convs"};
  g.remove_dead_nodes();                                   // (fresh producers)
  g.values.reserve(g.values.size() + 2 * g.nodes.size());  // add_value below keeps references valid
  for (Node& conv : g.nodes) {
    if (conv.op_type != "Conv" || conv.attr_int("group", 1) != 1 || conv.inputs.size() < 2 ||
        g.value(conv.inputs[0]).dims.size() != 4)
      continue;
    // The input: DequantizeLinear(uint8 QuantizeLinear(x)) of one scale and zero point.
    const Node* dq = made_by(g, conv.inputs[0], "DequantizeLinear");
    if (!dq || dq->inputs.size() < 2) continue;
    int xq = dq->inputs[0];
    if (const Node* cast = made_by(g, xq, "Cast"); cast && cast->attr_int("to", 0) == 2) xq = cast->inputs[0];
    const Node* q = made_by(g, xq, "QuantizeLinear");
    if (!q || q->inputs.size() < 2 || q->attr_string("tessera_quant_type", "uint8") != "uint8" ||
        q->attr_int("saturate", 1) == 0)
      continue;
    const auto sx = const_scalar(g, dq->inputs[1]), zx = const_scalar(g, dq->inputs.size() > 2 ? dq->inputs[2] : -1, 0);
    const auto sq = const_scalar(g, q->inputs[1]), zq = const_scalar(g, q->inputs.size() > 2 ? q->inputs[2] : -1, 0);
    if (!sx || !zx || sx != sq || zx != zq || !(*sx > 0) || !std::isfinite(*sx) || *zx < 0 || *zx > 255 ||
        *zx != std::nearbyint(*zx))
      continue;
    // The weights: constant int8 values behind a DequantizeLinear of zero
    // point 0, per tensor or per output channel (axis 0).
    const Node* wdq = made_by(g, conv.inputs[1], "DequantizeLinear");
    if (!wdq || wdq->inputs.size() < 2 || !g.is_constant(wdq->inputs[0]) || !g.is_constant(wdq->inputs[1])) continue;
    const HostTensor& wq = *g.value(wdq->inputs[0]).constant;
    const HostTensor& ws = *g.value(wdq->inputs[1]).constant;
    if (wq.dims.size() != 4 || wq.size() != static_cast<size_t>(wq.volume())) continue;
    const int64_t cout = wq.dims[0];
    const int wzp = wdq->inputs.size() > 2 ? wdq->inputs[2] : -1;
    bool ok = (ws.volume() == 1 || (ws.volume() == cout && ws.dims.size() == 1 && wdq->attr_int("axis", 1) == 0)) &&
              (wzp < 0 || g.is_constant(wzp));
    for (size_t k = 0; ok && wzp >= 0 && k < g.value(wzp).constant->size(); ++k) ok = g.value(wzp).constant->at(k) == 0;
    std::vector<float> w(wq.size()), scales;
    for (size_t k = 0; ok && k < wq.size(); ++k) {
      const double v = wq.at(k);
      ok = v >= -128 && v <= 127 && v == std::nearbyint(v);
      w[k] = static_cast<float>(v);
    }
    for (size_t k = 0; ok && k < ws.size(); ++k) {
      scales.push_back(static_cast<float>(ws.at(k)));
      ok = scales.back() > 0 && std::isfinite(scales.back());
    }
    // The bias: a float constant, or a constant behind a DequantizeLinear (int32).
    const int b = conv.inputs.size() > 2 ? conv.inputs[2] : -1;
    std::optional<HostTensor> bias;
    if (ok && b >= 0) {
      if (g.is_constant(b)) {
        bias = *g.value(b).constant;
      } else if (const Node* bdq = made_by(g, b, "DequantizeLinear")) {
        bias = evaluated(g, *bdq);
      }
      ok = bias && bias->volume() == cout;
    }
    if (!ok) continue;
    const int wv = g.add_value({.name = g.value(conv.inputs[1]).name + ":int8",
                                .type = ElemType::FLOAT32,
                                .dims = wq.dims,
                                .has_shape = true,
                                .constant = HostTensor::floats(wq.dims, std::move(w))});
    std::vector<int> inputs = {q->inputs[0], wv};
    if (bias) {
      std::vector<float> bf(static_cast<size_t>(cout));
      for (size_t k = 0; k < bf.size(); ++k) bf[k] = static_cast<float>(bias->at(k));
      inputs.push_back(g.add_value({.name = g.value(b).name + ":float",
                                    .type = ElemType::FLOAT32,
                                    .dims = {cout},
                                    .has_shape = true,
                                    .constant = HostTensor::floats({cout}, std::move(bf))}));
    }
    Node& c = conv;  // (add_value keeps node references)
    c.op_type = "QuantizedConv";
    c.inputs = std::move(inputs);
    c.attrs["input_scale"] = float_attr(static_cast<float>(*sx));
    c.attrs["input_zero_point"] = int_attr(static_cast<int64_t>(*zx));
    c.attrs["weight_scales"] = floats_attr(std::move(scales));
    ++r.rewrites;
  }
  std::vector<bool> dead(g.nodes.size(), false);
  fold_output_quantization(g, dead);
  // The DequantizeLinear of weights no QuantizedConv took (infer_shapes
  // left them) fold into float constants, as every other constant node did.
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.op_type != "DequantizeLinear" || n.outputs.size() != 1) continue;
    if (n.inputs.empty() || !g.is_constant(n.inputs[0])) continue;
    std::optional<HostTensor> y = evaluated(g, n);
    if (!y) continue;  // (lowered or run on the host as before)
    g.value(n.outputs[0]).constant = std::move(*y);
    dead[i] = true;
  }
  drop_nodes(g, dead);
  g.remove_dead_nodes();
  return r;
}

}  // namespace tessera::graph
