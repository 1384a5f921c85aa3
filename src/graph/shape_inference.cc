#include "tessera/graph/shape_inference.h"

#include <fmt/format.h>

#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "host_kernels.h"
#include "tessera/graph/host_eval.h"

namespace tessera::graph {
namespace {

using Dims = std::vector<int64_t>;

// What a shape rule sees: the node, its inputs' dims and constants.
struct Ctx {
  const Graph& g;
  const Node& n;
  int opset;
  size_t num_inputs() const { return n.inputs.size(); }
  bool has(size_t k) const { return k < n.inputs.size() && n.inputs[k] >= 0; }
  // Input k's value; a placeholder without a shape when it is missing (rules
  // read dims through dims(), which reports the missing input).
  const Value& in(size_t k) const {
    static const Value missing;
    return has(k) ? g.value(n.inputs[k]) : missing;
  }
  StatusOr<Dims> dims(size_t k) const {
    if (!has(k)) return invalid_argument_error("{}: input {} is missing", n.label(), k);
    return in(k).dims;
  }
  // A constant integer input (shape, axes, pads...).
  StatusOr<std::vector<int64_t>> ints(size_t k, const char* what) const {
    if (!has(k)) return invalid_argument_error("{}: input {} ({}) is missing", n.label(), k, what);
    const Value& v = in(k);
    if (!v.constant)
      return unimplemented_error("{}: input {} ({}, '{}') is computed at run time; Tessera needs it constant", n.label(),
                                 k, what, v.name);
    return host::as_ints(*v.constant);
  }
  StatusOr<std::vector<double>> reals(size_t k, const char* what) const {
    if (!has(k)) return invalid_argument_error("{}: input {} ({}) is missing", n.label(), k, what);
    const Value& v = in(k);
    if (!v.constant)
      return unimplemented_error("{}: input {} ({}, '{}') is computed at run time; Tessera needs it constant", n.label(),
                                 k, what, v.name);
    std::vector<double> out;
    for (size_t i = 0; i < v.constant->size(); ++i) out.push_back(v.constant->at(i));
    return out;
  }
};

struct Out {
  Dims dims;
  ElemType type;
};
using Rule = std::function<StatusOr<std::vector<Out>>(const Ctx&)>;

StatusOr<int64_t> axis_of(const Ctx& c, int64_t axis, size_t rank) {
  const auto r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= r)
    return invalid_argument_error("{}: attribute 'axis' = {} is out of range for rank {}", c.n.label(), axis, rank);
  return axis < 0 ? axis + r : axis;
}

StatusOr<std::vector<Out>> same_as_input(const Ctx& c) {
  TS_ASSIGN_OR_RETURN(Dims d, c.dims(0));
  return std::vector<Out>{{d, c.in(0).type}};
}

StatusOr<std::vector<Out>> broadcast(const Ctx& c, ElemType type) {
  TS_ASSIGN_OR_RETURN(Dims d, c.dims(0));
  for (size_t k = 1; k < c.num_inputs(); ++k) {
    TS_ASSIGN_OR_RETURN(Dims e, c.dims(k));
    auto b = broadcast_dims(d, e);
    if (!b.ok()) return invalid_argument_error("{}: {}", c.n.label(), b.status().message());
    d = *b;
  }
  return std::vector<Out>{{d, type}};
}

StatusOr<std::vector<Out>> conv(const Ctx& c, bool transpose) {
  TS_ASSIGN_OR_RETURN(Dims x, c.dims(0));
  TS_ASSIGN_OR_RETURN(Dims w, c.dims(1));
  if (x.size() < 3) return invalid_argument_error("{}: input has rank {}; expected (N, C, spatial...)", c.n.label(), x.size());
  if (w.size() != x.size())
    return invalid_argument_error("{}: weight has rank {}, input has rank {}", c.n.label(), w.size(), x.size());
  const int64_t group = c.n.attr_int("group", 1);
  if (group <= 0 || x[1] % group)
    return invalid_argument_error("{}: attribute 'group' = {} does not divide the {} input channels", c.n.label(), group,
                                  x[1]);
  if (!transpose && w[1] * group != x[1])
    return invalid_argument_error("{}: weight expects {} input channels ({} x group {}), the input has {}", c.n.label(),
                                  w[1] * group, w[1], group, x[1]);
  if (transpose && w[0] != x[1])
    return invalid_argument_error("{}: weight expects {} input channels, the input has {}", c.n.label(), w[0], x[1]);
  TS_ASSIGN_OR_RETURN(SpatialGeometry geo, spatial_geometry(c.n, x, w));
  Dims out{x[0], transpose ? w[1] * group : w[0]};
  const size_t s = x.size() - 2;
  for (size_t i = 0; i < s; ++i) {
    const int64_t eff = (geo.kernel[i] - 1) * geo.dilations[i] + 1;
    int64_t o;
    if (transpose) {
      const auto op = c.n.attr_ints("output_padding", Dims(s, 0));
      o = geo.strides[i] * (x[i + 2] - 1) + (i < op.size() ? op[i] : 0) + eff - geo.pads[i] - geo.pads[i + s];
    } else {
      const int64_t padded = x[i + 2] + geo.pads[i] + geo.pads[i + s];
      if (padded < eff)
        return invalid_argument_error("{}: kernel extent {} exceeds the padded input {} on spatial dim {}", c.n.label(),
                                      eff, padded, i);
      o = (padded - eff) / geo.strides[i] + 1;
    }
    if (o <= 0) return invalid_argument_error("{}: output size {} on spatial dim {}", c.n.label(), o, i);
    out.push_back(o);
  }
  return std::vector<Out>{{out, ElemType::FLOAT32}};
}

StatusOr<std::vector<Out>> pool(const Ctx& c) {
  TS_ASSIGN_OR_RETURN(Dims x, c.dims(0));
  if (x.size() < 3) return invalid_argument_error("{}: input has rank {}; expected (N, C, spatial...)", c.n.label(), x.size());
  TS_ASSIGN_OR_RETURN(SpatialGeometry geo, spatial_geometry(c.n, x, {}));
  const bool ceil_mode = c.n.attr_int("ceil_mode", 0) != 0;
  const std::string auto_pad = c.n.attr_string("auto_pad", "NOTSET");
  Dims out{x[0], x[1]};
  const size_t s = x.size() - 2;
  for (size_t i = 0; i < s; ++i) {
    const int64_t eff = (geo.kernel[i] - 1) * geo.dilations[i] + 1;
    int64_t o;
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      o = (x[i + 2] + geo.strides[i] - 1) / geo.strides[i];
    } else {
      const int64_t span = x[i + 2] + geo.pads[i] + geo.pads[i + s] - eff;
      if (span < 0)
        return invalid_argument_error("{}: kernel extent {} exceeds the padded input on spatial dim {}", c.n.label(), eff, i);
      o = (ceil_mode ? (span + geo.strides[i] - 1) / geo.strides[i] : span / geo.strides[i]) + 1;
      // A window must start inside the input or its begin padding.
      if (ceil_mode && (o - 1) * geo.strides[i] >= x[i + 2] + geo.pads[i]) --o;
    }
    out.push_back(o);
  }
  std::vector<Out> outs{{out, ElemType::FLOAT32}};
  if (c.n.outputs.size() > 1) outs.push_back({out, ElemType::INT64});
  return outs;
}

StatusOr<std::vector<Out>> resize(const Ctx& c) {
  TS_ASSIGN_OR_RETURN(Dims x, c.dims(0));
  std::vector<double> scales;
  const bool upsample = c.n.op_type == "Upsample";
  if (upsample && c.opset < 9) {
    for (float f : c.n.attr_floats("scales")) scales.push_back(f);
  } else if (upsample || c.opset < 11) {
    TS_ASSIGN_OR_RETURN(scales, c.reals(1, "scales"));
  } else {
    if (c.has(3) && !c.in(3).dims.empty() && dims_volume(c.in(3).dims) > 0) {
      TS_ASSIGN_OR_RETURN(Dims sizes, c.ints(3, "sizes"));
      if (sizes.size() != x.size())
        return invalid_argument_error("{}: input 'sizes' has {} values for rank {}", c.n.label(), sizes.size(), x.size());
      return std::vector<Out>{{sizes, ElemType::FLOAT32}};
    }
    TS_ASSIGN_OR_RETURN(scales, c.reals(2, "scales"));
  }
  if (scales.size() != x.size())
    return invalid_argument_error("{}: 'scales' has {} values for rank {}", c.n.label(), scales.size(), x.size());
  Dims out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    if (!(scales[i] > 0)) return invalid_argument_error("{}: scale {} on dim {}", c.n.label(), scales[i], i);
    out[i] = static_cast<int64_t>(std::floor(static_cast<double>(x[i]) * scales[i] + 1e-9));
    if (out[i] <= 0) return invalid_argument_error("{}: output dim {} is {}", c.n.label(), i, out[i]);
  }
  return std::vector<Out>{{out, ElemType::FLOAT32}};
}

StatusOr<std::vector<Out>> matmul(const Ctx& c) {
  TS_ASSIGN_OR_RETURN(Dims a, c.dims(0));
  TS_ASSIGN_OR_RETURN(Dims b, c.dims(1));
  if (a.empty() || b.empty()) return invalid_argument_error("{}: scalar operand", c.n.label());
  const bool a1 = a.size() == 1, b1 = b.size() == 1;
  if (a1) a.insert(a.begin(), 1);
  if (b1) b.push_back(1);
  if (a.back() != b[b.size() - 2])
    return invalid_argument_error("{}: inner dims differ: {} x {}", c.n.label(), dims_to_string(c.in(0).dims),
                                  dims_to_string(c.in(1).dims));
  auto batch = broadcast_dims(Dims(a.begin(), a.end() - 2), Dims(b.begin(), b.end() - 2));
  if (!batch.ok()) return invalid_argument_error("{}: {}", c.n.label(), batch.status().message());
  Dims out = *batch;
  if (!a1) out.push_back(a[a.size() - 2]);
  if (!b1) out.push_back(b.back());
  return std::vector<Out>{{out, ElemType::FLOAT32}};
}

// A rule over two of the node's inputs as a Conv's / MatMul's (x, w), the
// result an integer: the Integer and QLinear quantized ops.
template <class Rule2>
StatusOr<std::vector<Out>> integer_result(const Ctx& c, size_t w, Rule2 rule) {
  if (!c.has(0) || !c.has(w)) return invalid_argument_error("{}: input {} is missing", c.n.label(), c.has(0) ? w : 0);
  Node two = c.n;
  two.inputs = {c.n.inputs[0], c.n.inputs[w]};
  TS_ASSIGN_OR_RETURN(std::vector<Out> o, rule(Ctx{c.g, two, c.opset}));
  o[0].type = ElemType::INT64;
  return o;
}

StatusOr<std::vector<Out>> gemm(const Ctx& c) {
  TS_ASSIGN_OR_RETURN(Dims a, c.dims(0));
  TS_ASSIGN_OR_RETURN(Dims b, c.dims(1));
  if (a.size() != 2 || b.size() != 2)
    return invalid_argument_error("{}: A is {}, B is {}; Gemm needs 2D operands", c.n.label(), dims_to_string(a),
                                  dims_to_string(b));
  if (c.n.attr_int("transA", 0)) std::swap(a[0], a[1]);
  if (c.n.attr_int("transB", 0)) std::swap(b[0], b[1]);
  if (a[1] != b[0]) return invalid_argument_error("{}: inner dims {} and {} differ", c.n.label(), a[1], b[0]);
  if (c.has(2)) {
    auto bc = broadcast_dims(Dims{a[0], b[1]}, c.in(2).dims);
    if (!bc.ok() || *bc != Dims{a[0], b[1]})
      return invalid_argument_error("{}: C of shape {} does not broadcast to ({}, {})", c.n.label(),
                                    dims_to_string(c.in(2).dims), a[0], b[1]);
  }
  return std::vector<Out>{{{a[0], b[1]}, ElemType::FLOAT32}};
}

StatusOr<std::vector<Out>> reshape(const Ctx& c) {
  TS_ASSIGN_OR_RETURN(Dims x, c.dims(0));
  Dims shape = c.n.attr_ints("shape");
  if (c.opset >= 5) { TS_ASSIGN_OR_RETURN(shape, c.ints(1, "shape")); }
  const bool allowzero = c.n.attr_int("allowzero", 0) != 0;
  int infer = -1;
  int64_t known = 1;
  for (size_t k = 0; k < shape.size(); ++k) {
    if (shape[k] == 0 && !allowzero) {
      if (k >= x.size()) return invalid_argument_error("{}: shape[{}] = 0 but the input has rank {}", c.n.label(), k, x.size());
      shape[k] = x[k];
    }
    if (shape[k] == -1) {
      if (infer >= 0) return invalid_argument_error("{}: two -1 entries in shape {}", c.n.label(), dims_to_string(shape));
      infer = static_cast<int>(k);
    } else if (shape[k] < 0) {
      return invalid_argument_error("{}: negative entry in shape {}", c.n.label(), dims_to_string(shape));
    } else if (__builtin_mul_overflow(known, shape[k], &known)) {
      return invalid_argument_error("{}: shape {} has more elements than int64 counts", c.n.label(),
                                    dims_to_string(shape));
    }
  }
  if (infer >= 0) {
    if (known == 0 || dims_volume(x) % known)
      return invalid_argument_error("{}: cannot infer the -1 in {} for {} elements", c.n.label(), dims_to_string(shape),
                                    dims_volume(x));
    shape[static_cast<size_t>(infer)] = dims_volume(x) / known;
  }
  if (dims_volume(shape) != dims_volume(x))
    return invalid_argument_error("{}: cannot reshape {} to {}", c.n.label(), dims_to_string(x), dims_to_string(shape));
  return std::vector<Out>{{shape, c.in(0).type}};
}

// A rule mapping input 0's dims to the one output's, which keeps input 0's type.
StatusOr<std::vector<Out>> by_dims(const Ctx& c, const std::function<StatusOr<Dims>(const Dims&)>& f) {
  TS_ASSIGN_OR_RETURN(Dims x, c.dims(0));
  TS_ASSIGN_OR_RETURN(Dims out, f(x));
  return std::vector<Out>{{out, c.in(0).type}};
}

StatusOr<Dims> slice_dims(const Ctx& c, const Dims& x) {
  Dims starts, ends, axes, steps;
  if (c.opset < 10) {
    starts = c.n.attr_ints("starts"), ends = c.n.attr_ints("ends"), axes = c.n.attr_ints("axes");
  } else {
    TS_ASSIGN_OR_RETURN(starts, c.ints(1, "starts"));
    TS_ASSIGN_OR_RETURN(ends, c.ints(2, "ends"));
    if (c.has(3)) { TS_ASSIGN_OR_RETURN(axes, c.ints(3, "axes")); }
    if (c.has(4)) { TS_ASSIGN_OR_RETURN(steps, c.ints(4, "steps")); }
  }
  if (axes.empty())
    for (size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<int64_t>(k));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    return invalid_argument_error("{}: starts, ends, axes and steps differ in length", c.n.label());
  Dims out = x;
  for (size_t k = 0; k < starts.size(); ++k) {
    TS_ASSIGN_OR_RETURN(int64_t d, axis_of(c, axes[k], x.size()));
    const int64_t dim = x[static_cast<size_t>(d)], step = steps[k];
    if (step == 0) return invalid_argument_error("{}: step 0 on axis {}", c.n.label(), d);
    int64_t s = starts[k] < 0 ? starts[k] + dim : starts[k];
    int64_t e = ends[k] < 0 ? ends[k] + dim : ends[k];
    if (step > 0) {
      s = std::clamp<int64_t>(s, 0, dim), e = std::clamp<int64_t>(e, 0, dim);
      out[static_cast<size_t>(d)] = e > s ? (e - s + step - 1) / step : 0;
    } else {
      s = std::clamp<int64_t>(s, 0, dim - 1), e = std::clamp<int64_t>(e, -1, dim - 1);
      out[static_cast<size_t>(d)] = s > e ? (s - e - step - 1) / -step : 0;
    }
  }
  return out;
}

StatusOr<std::vector<Out>> concat(const Ctx& c) {
  TS_ASSIGN_OR_RETURN(Dims out, c.dims(0));
  TS_ASSIGN_OR_RETURN(int64_t axis, axis_of(c, c.n.attr_int("axis", 0), out.size()));
  out[static_cast<size_t>(axis)] = 0;
  for (size_t k = 0; k < c.num_inputs(); ++k) {
    TS_ASSIGN_OR_RETURN(Dims d, c.dims(k));
    if (d.size() != out.size())
      return invalid_argument_error("{}: input {} has rank {}, input 0 has {}", c.n.label(), k, d.size(), out.size());
    for (size_t j = 0; j < d.size(); ++j)
      if (static_cast<int64_t>(j) != axis && d[j] != out[j])
        return invalid_argument_error("{}: input {} has shape {}, which differs from input 0 outside axis {}",
                                      c.n.label(), k, dims_to_string(d), axis);
    out[static_cast<size_t>(axis)] += d[static_cast<size_t>(axis)];
  }
  return std::vector<Out>{{out, c.in(0).type}};
}

StatusOr<std::vector<Out>> split(const Ctx& c) {
  TS_ASSIGN_OR_RETURN(Dims x, c.dims(0));
  TS_ASSIGN_OR_RETURN(int64_t axis, axis_of(c, c.n.attr_int("axis", 0), x.size()));
  Dims sizes = c.n.attr_ints("split");
  if (c.opset >= 13 && c.has(1)) { TS_ASSIGN_OR_RETURN(sizes, c.ints(1, "split")); }
  const int64_t len = x[static_cast<size_t>(axis)];
  const auto outs = static_cast<int64_t>(c.n.outputs.size());
  if (sizes.empty()) {
    const int64_t num = c.n.attr_int("num_outputs", outs);
    const int64_t each = (len + num - 1) / std::max<int64_t>(num, 1);
    for (int64_t k = 0; k < num; ++k) sizes.push_back(std::min(each, len - k * each));
  }
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  if (static_cast<int64_t>(sizes.size()) != outs || total != len)
    return invalid_argument_error("{}: split sizes {} do not cover the axis of {} in {} outputs", c.n.label(),
                                  dims_to_string(sizes), len, outs);
  std::vector<Out> r;
  for (int64_t s : sizes) {
    Dims d = x;
    d[static_cast<size_t>(axis)] = s;
    r.push_back({d, c.in(0).type});
  }
  return r;
}

StatusOr<std::vector<Out>> reduce(const Ctx& c) {
  TS_ASSIGN_OR_RETURN(Dims x, c.dims(0));
  Dims axes = c.n.attr_ints("axes");
  const bool axes_input = (c.n.op_type == "ReduceSum" && c.opset >= 13) || c.opset >= 18;
  if (axes_input && c.has(1)) { TS_ASSIGN_OR_RETURN(axes, c.ints(1, "axes")); }
  const bool keepdims = c.n.attr_int("keepdims", 1) != 0;
  if (axes.empty() && axes_input && c.n.attr_int("noop_with_empty_axes", 0)) return same_as_input(c);
  std::vector<bool> red(x.size(), axes.empty());
  for (int64_t a : axes) {
    TS_ASSIGN_OR_RETURN(int64_t d, axis_of(c, a, x.size()));
    red[static_cast<size_t>(d)] = true;
  }
  Dims out;
  for (size_t d = 0; d < x.size(); ++d)
    if (!red[d]) out.push_back(x[d]);
    else if (keepdims) out.push_back(1);
  return std::vector<Out>{{out, c.in(0).type}};
}

const std::map<std::string, Rule>& rules() {
  static const std::map<std::string, Rule> t = [] {
    std::map<std::string, Rule> m;
    for (const char* op : {"Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Neg", "Abs", "Reciprocal", "Floor", "Ceil",
                           "Round", "Sign", "Erf", "Sin", "Cos", "Tan", "Atan", "Softplus", "Softsign", "HardSwish",
                           "Mish", "Identity", "LeakyRelu", "Elu", "Celu", "Selu", "HardSigmoid", "ThresholdedRelu",
                           "Clip", "Softmax", "LogSoftmax", "InstanceNormalization", "LRN", "SiLU", "Gelu",
                           "ScatterND", "GroupNorm", "Asin", "Acos", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh",
                           "Shrink", "Hardmax", "CumSum", "ScatterElements", "Trilu", "MeanVarianceNormalization"})
      m[op] = same_as_input;
    for (const char* op : {"IsNaN", "IsInf"})
      m[op] = [](const Ctx& c) -> StatusOr<std::vector<Out>> {
        TS_ASSIGN_OR_RETURN(Dims d, c.dims(0));
        return std::vector<Out>{{d, ElemType::INT64}};
      };
    m["CastLike"] = [](const Ctx& c) -> StatusOr<std::vector<Out>> {
      TS_ASSIGN_OR_RETURN(Dims d, c.dims(0));
      TS_RETURN_IF_ERROR(c.dims(1).status());
      return std::vector<Out>{{d, c.in(1).type}};
    };
    m["EyeLike"] = [](const Ctx& c) -> StatusOr<std::vector<Out>> {
      TS_ASSIGN_OR_RETURN(Dims d, c.dims(0));
      const int64_t to = c.n.attr_int("dtype", c.in(0).type == ElemType::FLOAT32 ? 1 : 7);
      return std::vector<Out>{{d, to == 1 || to == 10 || to == 11 || to == 16 ? ElemType::FLOAT32 : ElemType::INT64}};
    };
    m["TopK"] = [](const Ctx& c) -> StatusOr<std::vector<Out>> {
      TS_ASSIGN_OR_RETURN(Dims x, c.dims(0));
      TS_ASSIGN_OR_RETURN(int64_t axis, axis_of(c, c.n.attr_int("axis", -1), x.size()));
      int64_t k = c.n.attr_int("k", -1);
      if (c.opset >= 10) {
        TS_ASSIGN_OR_RETURN(Dims kv, c.ints(1, "K"));
        if (kv.size() != 1) return invalid_argument_error("{}: K has {} values, expected one", c.n.label(), kv.size());
        k = kv[0];
      }
      if (k < 0 || k > x[static_cast<size_t>(axis)])
        return invalid_argument_error("{}: K = {} for an axis of {} elements", c.n.label(), k, x[static_cast<size_t>(axis)]);
      x[static_cast<size_t>(axis)] = k;
      return std::vector<Out>{{x, c.in(0).type}, {x, ElemType::INT64}};
    };
    m["GatherElements"] = [](const Ctx& c) -> StatusOr<std::vector<Out>> {
      TS_ASSIGN_OR_RETURN(Dims x, c.dims(0));
      TS_ASSIGN_OR_RETURN(Dims idx, c.dims(1));
      if (idx.size() != x.size())
        return invalid_argument_error("{}: indices of rank {} for data of rank {}", c.n.label(), idx.size(), x.size());
      return std::vector<Out>{{idx, c.in(0).type}};
    };
    m["GatherND"] = [](const Ctx& c) -> StatusOr<std::vector<Out>> {
      TS_ASSIGN_OR_RETURN(Dims x, c.dims(0));
      TS_ASSIGN_OR_RETURN(Dims idx, c.dims(1));
      const int64_t b = c.n.attr_int("batch_dims", 0);
      if (idx.empty() || b < 0 || b >= static_cast<int64_t>(idx.size()) || idx.back() < 1 ||
          b + idx.back() > static_cast<int64_t>(x.size()))
        return invalid_argument_error("{}: indices of shape {} for data of shape {} with batch_dims {}", c.n.label(),
                                      dims_to_string(idx), dims_to_string(x), b);
      Dims out(idx.begin(), idx.end() - 1);
      out.insert(out.end(), x.begin() + b + idx.back(), x.end());
      return std::vector<Out>{{out, c.in(0).type}};
    };
    m["OneHot"] = [](const Ctx& c) -> StatusOr<std::vector<Out>> {
      TS_ASSIGN_OR_RETURN(Dims idx, c.dims(0));
      TS_ASSIGN_OR_RETURN(Dims depth, c.ints(1, "depth"));
      TS_RETURN_IF_ERROR(c.dims(2).status());
      if (depth.size() != 1 || depth[0] < 1)
        return invalid_argument_error("{}: depth {}, expected one positive value", c.n.label(), dims_to_string(depth));
      TS_ASSIGN_OR_RETURN(int64_t axis, axis_of(c, c.n.attr_int("axis", -1), idx.size() + 1));
      idx.insert(idx.begin() + axis, depth[0]);
      return std::vector<Out>{{idx, c.in(2).type}};
    };
    m["Einsum"] = [](const Ctx& c) -> StatusOr<std::vector<Out>> {
      std::vector<Dims> dims;
      for (size_t k = 0; k < c.num_inputs(); ++k) {
        TS_ASSIGN_OR_RETURN(Dims d, c.dims(k));
        dims.push_back(d);
      }
      TS_ASSIGN_OR_RETURN(host::EinsumLabels e, host::einsum_labels(c.n, dims));
      Dims out;
      for (char l : e.out) out.push_back(e.size[l]);
      return std::vector<Out>{{out, ElemType::FLOAT32}};
    };
    for (const char* op : {"LSTM", "GRU", "RNN"})
      m[op] = [](const Ctx& c) -> StatusOr<std::vector<Out>> {
        TS_ASSIGN_OR_RETURN(Dims x, c.dims(0));
        TS_ASSIGN_OR_RETURN(Dims r, c.dims(2));
        if (x.size() != 3 || r.size() != 3)
          return invalid_argument_error("{}: X {} and R {}, expected rank 3", c.n.label(), dims_to_string(x),
                                        dims_to_string(r));
        const int64_t dirs = c.n.attr_string("direction", "forward") == "bidirectional" ? 2 : 1;
        const int64_t h = c.n.attr_int("hidden_size", r[2]);
        const bool bm = c.n.attr_int("layout", 0) != 0;
        const Dims state = bm ? Dims{x[0], dirs, h} : Dims{dirs, x[1], h};
        std::vector<Out> o{{bm ? Dims{x[0], x[1], dirs, h} : Dims{x[0], dirs, x[1], h}, ElemType::FLOAT32},
                           {state, ElemType::FLOAT32}};
        if (c.n.op_type == "LSTM") o.push_back({state, ElemType::FLOAT32});
        return o;
      };
    m["GridSample"] = [](const Ctx& c) -> StatusOr<std::vector<Out>> {
      TS_ASSIGN_OR_RETURN(Dims x, c.dims(0));
      TS_ASSIGN_OR_RETURN(Dims grid, c.dims(1));
      if (x.size() != 4 || grid.size() != 4 || grid[0] != x[0] || grid[3] != 2)
        return unimplemented_error("{}: X {} and grid {}: Tessera samples (N, C, H, W) at (N, Ho, Wo, 2)",
                                   c.n.label(), dims_to_string(x), dims_to_string(grid));
      return std::vector<Out>{{{x[0], x[1], grid[1], grid[2]}, ElemType::FLOAT32}};
    };
    m["RoiAlign"] = [](const Ctx& c) -> StatusOr<std::vector<Out>> {
      TS_ASSIGN_OR_RETURN(Dims x, c.dims(0));
      TS_ASSIGN_OR_RETURN(Dims rois, c.dims(1));
      if (x.size() != 4 || rois.size() != 2 || rois[1] != 4)
        return invalid_argument_error("{}: X {} and rois {}: expected (N, C, H, W) and (R, 4)", c.n.label(),
                                      dims_to_string(x), dims_to_string(rois));
      return std::vector<Out>{
          {{rois[0], x[1], c.n.attr_int("output_height", 1), c.n.attr_int("output_width", 1)}, ElemType::FLOAT32}};
    };
    m["BatchNormalization"] = [](const Ctx& c) -> StatusOr<std::vector<Out>> {
      TS_ASSIGN_OR_RETURN(auto o, same_as_input(c));
      if (c.n.outputs.size() > 1) {
        TS_ASSIGN_OR_RETURN(Dims x, c.dims(0));
        if (x.size() < 2) return invalid_argument_error("{}: input of rank {}", c.n.label(), x.size());
        for (size_t k = 1; k < c.n.outputs.size(); ++k) o.push_back({{x[1]}, ElemType::FLOAT32});
      }
      return o;
    };
    m["LayerNormalization"] = [](const Ctx& c) -> StatusOr<std::vector<Out>> {
      TS_ASSIGN_OR_RETURN(auto o, same_as_input(c));
      TS_ASSIGN_OR_RETURN(Dims x, c.dims(0));
      TS_ASSIGN_OR_RETURN(int64_t axis, axis_of(c, c.n.attr_int("axis", -1), x.size()));
      Dims stat(x.begin(), x.begin() + axis);
      stat.resize(x.size(), 1);
      for (size_t k = 1; k < c.n.outputs.size(); ++k) o.push_back({stat, ElemType::FLOAT32});
      return o;
    };
    m["Dropout"] = [](const Ctx& c) -> StatusOr<std::vector<Out>> {
      TS_ASSIGN_OR_RETURN(auto o, same_as_input(c));
      if (c.n.outputs.size() > 1) o.push_back({o[0].dims, ElemType::INT64});
      return o;
    };
    m["Not"] = [](const Ctx& c) -> StatusOr<std::vector<Out>> {
      TS_ASSIGN_OR_RETURN(Dims d, c.dims(0));
      return std::vector<Out>{{d, ElemType::INT64}};
    };
    m["Cast"] = [](const Ctx& c) -> StatusOr<std::vector<Out>> {
      TS_ASSIGN_OR_RETURN(Dims d, c.dims(0));
      const int64_t to = c.n.attr_int("to", 1);
      return std::vector<Out>{{d, to == 1 || to == 10 || to == 11 || to == 16 ? ElemType::FLOAT32 : ElemType::INT64}};
    };
    for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow", "Mod", "Sum", "Mean", "Max", "Min", "PRelu"})
      m[op] = [](const Ctx& c) {
        ElemType t = c.in(0).type;
        for (size_t k = 1; k < c.num_inputs() && c.n.op_type != "Pow" && c.n.op_type != "PRelu"; ++k)
          if (c.has(k) && c.in(k).type == ElemType::FLOAT32) t = ElemType::FLOAT32;
        return broadcast(c, t);
      };
    for (const char* op : {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor"})
      m[op] = [](const Ctx& c) { return broadcast(c, ElemType::INT64); };
    m["Where"] = [](const Ctx& c) -> StatusOr<std::vector<Out>> {
      TS_ASSIGN_OR_RETURN(auto o, broadcast(c, ElemType::FLOAT32));
      o[0].type = c.in(1).type;
      return o;
    };
    m["Conv"] = [](const Ctx& c) { return conv(c, false); };
    m["QuantizedConv"] = [](const Ctx& c) { return conv(c, false); };
    m["ConvInteger"] = [](const Ctx& c) { return integer_result(c, 1, [](const Ctx& x) { return conv(x, false); }); };
    m["QLinearConv"] = [](const Ctx& c) { return integer_result(c, 3, [](const Ctx& x) { return conv(x, false); }); };
    m["MatMulInteger"] = [](const Ctx& c) { return integer_result(c, 1, matmul); };
    m["QLinearMatMul"] = [](const Ctx& c) { return integer_result(c, 3, matmul); };
    m["QuantizeLinear"] = [](const Ctx& c) -> StatusOr<std::vector<Out>> {
      TS_ASSIGN_OR_RETURN(Dims d, c.dims(0));
      return std::vector<Out>{{d, ElemType::INT64}};
    };
    m["DequantizeLinear"] = [](const Ctx& c) -> StatusOr<std::vector<Out>> {
      TS_ASSIGN_OR_RETURN(Dims d, c.dims(0));
      return std::vector<Out>{{d, ElemType::FLOAT32}};
    };
    m["DynamicQuantizeLinear"] = [](const Ctx& c) -> StatusOr<std::vector<Out>> {
      TS_ASSIGN_OR_RETURN(Dims d, c.dims(0));
      return std::vector<Out>{{d, ElemType::INT64}, {{}, ElemType::FLOAT32}, {{}, ElemType::INT64}};
    };
    m["ConvTranspose"] = [](const Ctx& c) { return conv(c, true); };
    for (const char* op : {"MaxPool", "AveragePool", "LpPool"}) m[op] = pool;
    for (const char* op : {"GlobalAveragePool", "GlobalMaxPool"})
      m[op] = [](const Ctx& c) -> StatusOr<std::vector<Out>> {
        TS_ASSIGN_OR_RETURN(Dims x, c.dims(0));
        if (x.size() < 3) return invalid_argument_error("{}: input has rank {}", c.n.label(), x.size());
        for (size_t d = 2; d < x.size(); ++d) x[d] = 1;
        return std::vector<Out>{{x, ElemType::FLOAT32}};
      };
    m["Resize"] = resize;
    m["Upsample"] = resize;
    m["MatMul"] = matmul;
    m["Gemm"] = gemm;
    m["Reshape"] = reshape;
    m["Flatten"] = [](const Ctx& c) {
      return by_dims(c, [&](const Dims& x) -> StatusOr<Dims> {
        const auto r = static_cast<int64_t>(x.size());
        int64_t axis = c.n.attr_int("axis", 1);
        if (axis < -r || axis > r)
          return invalid_argument_error("{}: attribute 'axis' = {} for rank {}", c.n.label(), axis, r);
        if (axis < 0) axis += r;
        int64_t outer = 1, inner = 1;
        for (int64_t d = 0; d < r; ++d) (d < axis ? outer : inner) *= x[static_cast<size_t>(d)];
        return Dims{outer, inner};
      });
    };
    for (const char* op : {"Squeeze", "Unsqueeze"})
      m[op] = [](const Ctx& c) {
        return by_dims(c, [&](const Dims& x) -> StatusOr<Dims> {
          Dims axes = c.n.attr_ints("axes");
          if (c.opset >= 13 && c.has(1)) { TS_ASSIGN_OR_RETURN(axes, c.ints(1, "axes")); }
          Dims d = x;
          if (c.n.op_type == "Squeeze") {
            std::vector<bool> drop(x.size(), axes.empty());
            for (int64_t a : axes) {
              TS_ASSIGN_OR_RETURN(int64_t k, axis_of(c, a, x.size()));
              if (x[static_cast<size_t>(k)] != 1)
                return invalid_argument_error("{}: axis {} has size {}, not 1", c.n.label(), a, x[static_cast<size_t>(k)]);
              drop[static_cast<size_t>(k)] = true;
            }
            d.clear();
            for (size_t k = 0; k < x.size(); ++k)
              if (!drop[k] || x[k] != 1) d.push_back(x[k]);
          } else {
            Dims norm;
            for (int64_t a : axes) {
              TS_ASSIGN_OR_RETURN(int64_t k, axis_of(c, a, x.size() + axes.size()));
              norm.push_back(k);
            }
            std::sort(norm.begin(), norm.end());
            for (int64_t a : norm) d.insert(d.begin() + a, 1);
          }
          return d;
        });
      };
    m["Transpose"] = [](const Ctx& c) {
      return by_dims(c, [&](const Dims& x) -> StatusOr<Dims> {
        Dims perm = c.n.attr_ints("perm");
        if (perm.empty())
          for (size_t k = 0; k < x.size(); ++k) perm.push_back(static_cast<int64_t>(x.size() - 1 - k));
        if (perm.size() != x.size())
          return invalid_argument_error("{}: attribute 'perm' has {} entries for rank {}", c.n.label(), perm.size(),
                                        x.size());
        Dims out;
        std::vector<bool> seen(x.size(), false);
        for (int64_t p : perm) {
          if (p < 0 || p >= static_cast<int64_t>(x.size()) || seen[static_cast<size_t>(p)])
            return invalid_argument_error("{}: attribute 'perm' = {} is not a permutation", c.n.label(),
                                          dims_to_string(perm));
          seen[static_cast<size_t>(p)] = true;
          out.push_back(x[static_cast<size_t>(p)]);
        }
        return out;
      });
    };
    m["Concat"] = concat;
    m["Split"] = split;
    m["Slice"] = [](const Ctx& c) { return by_dims(c, [&](const Dims& x) { return slice_dims(c, x); }); };
    m["Pad"] = [](const Ctx& c) {
      return by_dims(c, [&](const Dims& x) -> StatusOr<Dims> {
        Dims pads = c.n.attr_ints("pads");
        if (c.opset >= 11) { TS_ASSIGN_OR_RETURN(pads, c.ints(1, "pads")); }
        Dims axes;
        if (c.has(3)) { TS_ASSIGN_OR_RETURN(axes, c.ints(3, "axes")); }
        if (axes.empty())
          for (size_t k = 0; k < x.size(); ++k) axes.push_back(static_cast<int64_t>(k));
        if (pads.size() != 2 * axes.size())
          return invalid_argument_error("{}: {} pads for {} axes", c.n.label(), pads.size(), axes.size());
        Dims out = x;
        for (size_t k = 0; k < axes.size(); ++k) {
          TS_ASSIGN_OR_RETURN(int64_t d, axis_of(c, axes[k], x.size()));
          out[static_cast<size_t>(d)] += pads[k] + pads[k + axes.size()];
          if (out[static_cast<size_t>(d)] < 0)
            return invalid_argument_error("{}: pads crop axis {} below zero", c.n.label(), d);
        }
        return out;
      });
    };
    m["Gather"] = [](const Ctx& c) -> StatusOr<std::vector<Out>> {
      TS_ASSIGN_OR_RETURN(Dims x, c.dims(0));
      TS_ASSIGN_OR_RETURN(Dims idx, c.dims(1));
      TS_ASSIGN_OR_RETURN(int64_t axis, axis_of(c, c.n.attr_int("axis", 0), x.size()));
      Dims out(x.begin(), x.begin() + axis);
      out.insert(out.end(), idx.begin(), idx.end());
      out.insert(out.end(), x.begin() + axis + 1, x.end());
      return std::vector<Out>{{out, c.in(0).type}};
    };
    m["Expand"] = [](const Ctx& c) {
      return by_dims(c, [&](const Dims& x) -> StatusOr<Dims> {
        TS_ASSIGN_OR_RETURN(Dims shape, c.ints(1, "shape"));
        auto b = broadcast_dims(x, shape);
        if (!b.ok()) return invalid_argument_error("{}: {}", c.n.label(), b.status().message());
        return *b;
      });
    };
    m["Tile"] = [](const Ctx& c) {
      return by_dims(c, [&](const Dims& x) -> StatusOr<Dims> {
        TS_ASSIGN_OR_RETURN(Dims reps, c.ints(1, "repeats"));
        if (reps.size() != x.size())
          return invalid_argument_error("{}: {} repeats for rank {}", c.n.label(), reps.size(), x.size());
        Dims out = x;
        for (size_t k = 0; k < x.size(); ++k) out[k] *= reps[k];
        return out;
      });
    };
    for (const char* op : {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                           "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"})
      m[op] = reduce;
    for (const char* op : {"ArgMax", "ArgMin"})
      m[op] = [](const Ctx& c) -> StatusOr<std::vector<Out>> {
        TS_ASSIGN_OR_RETURN(Dims x, c.dims(0));
        TS_ASSIGN_OR_RETURN(int64_t axis, axis_of(c, c.n.attr_int("axis", 0), x.size()));
        if (c.n.attr_int("keepdims", 1)) x[static_cast<size_t>(axis)] = 1;
        else x.erase(x.begin() + axis);
        return std::vector<Out>{{x, ElemType::INT64}};
      };
    for (const char* op : {"DepthToSpace", "SpaceToDepth"})
      m[op] = [](const Ctx& c) {
        return by_dims(c, [&](const Dims& x) -> StatusOr<Dims> {
          const int64_t b = c.n.attr_int("blocksize", 0);
          if (x.size() != 4 || b <= 0)
            return invalid_argument_error("{}: needs a 4D input and a positive 'blocksize'", c.n.label());
          if (c.n.op_type == "SpaceToDepth") {
            if (x[2] % b || x[3] % b) return invalid_argument_error("{}: H, W not divisible by {}", c.n.label(), b);
            return Dims{x[0], x[1] * b * b, x[2] / b, x[3] / b};
          }
          if (x[1] % (b * b)) return invalid_argument_error("{}: C not divisible by {}", c.n.label(), b * b);
          return Dims{x[0], x[1] / (b * b), x[2] * b, x[3] * b};
        });
      };
    return m;
  }();
  return t;
}

}  // namespace

bool has_shape_rule(const std::string& op_type) { return rules().count(op_type) != 0; }

StatusOr<SpatialGeometry> spatial_geometry(const Node& node, const std::vector<int64_t>& x,
                                           const std::vector<int64_t>& w) {
  const size_t s = x.size() - 2;
  SpatialGeometry g;
  g.kernel = node.attr_ints("kernel_shape");
  if (g.kernel.empty() && w.size() == x.size()) g.kernel.assign(w.begin() + 2, w.end());
  if (g.kernel.size() != s)
    return invalid_argument_error("{}: attribute 'kernel_shape' has {} values for {} spatial dims", node.label(),
                                  g.kernel.size(), s);
  g.strides = node.attr_ints("strides", std::vector<int64_t>(s, 1));
  g.dilations = node.attr_ints("dilations", std::vector<int64_t>(s, 1));
  if (g.strides.size() != s) return invalid_argument_error("{}: attribute 'strides' has {} values for {} spatial dims", node.label(), g.strides.size(), s);
  if (g.dilations.size() != s) return invalid_argument_error("{}: attribute 'dilations' has {} values for {} spatial dims", node.label(), g.dilations.size(), s);
  for (size_t i = 0; i < s; ++i) {
    if (g.kernel[i] <= 0 || g.strides[i] <= 0 || g.dilations[i] <= 0)
      return invalid_argument_error("{}: kernel {}, strides {} and dilations {} must be positive", node.label(),
                                    dims_to_string(g.kernel), dims_to_string(g.strides), dims_to_string(g.dilations));
    if (w.size() == x.size() && w[i + 2] != g.kernel[i])
      return invalid_argument_error("{}: attribute 'kernel_shape' {} differs from the weight's {}", node.label(),
                                    dims_to_string(g.kernel), dims_to_string(w));
  }
  std::vector<int64_t> in(x.begin() + 2, x.end());
  TS_ASSIGN_OR_RETURN(g.pads, spatial_pads(node, in, g.kernel, g.strides, g.dilations));
  return g;
}

StatusOr<std::vector<int64_t>> spatial_pads(const Node& node, const std::vector<int64_t>& in,
                                            const std::vector<int64_t>& kernel, const std::vector<int64_t>& strides,
                                            const std::vector<int64_t>& dilations) {
  const size_t s = in.size();
  const std::string auto_pad = node.attr_string("auto_pad", "NOTSET");
  std::vector<int64_t> pads(2 * s, 0);
  const bool transpose = node.op_type == "ConvTranspose";
  if (transpose) {
    // Total padding from the requested output shape (output_shape, or in * stride for SAME).
    std::vector<int64_t> want = node.attr_ints("output_shape");
    if (want.size() > s) want.erase(want.begin(), want.end() - static_cast<int64_t>(s));
    if (want.empty() && (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER"))
      for (size_t i = 0; i < s; ++i) want.push_back(in[i] * strides[i]);
    if (!want.empty()) {
      if (want.size() != s)
        return invalid_argument_error("{}: attribute 'output_shape' has {} values for {} spatial dims", node.label(),
                                      want.size(), s);
      const auto op = node.attr_ints("output_padding", std::vector<int64_t>(s, 0));
      for (size_t i = 0; i < s; ++i) {
        const int64_t total = strides[i] * (in[i] - 1) + (i < op.size() ? op[i] : 0) +
                              ((kernel[i] - 1) * dilations[i] + 1) - want[i];
        const int64_t small = total / 2, big = total - total / 2;
        // The ONNX spec: SAME_UPPER puts the odd unit at the end, anything else at the begin.
        pads[i] = auto_pad == "SAME_UPPER" ? small : big;
        pads[i + s] = auto_pad == "SAME_UPPER" ? big : small;
        if (total < 0) pads[i] = 0, pads[i + s] = total;  // a longer output: zeros past the end
      }
      return pads;
    }
  }
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (size_t i = 0; i < s; ++i) {
      const int64_t out = (in[i] + strides[i] - 1) / strides[i];
      const int64_t total = std::max<int64_t>(0, (out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - in[i]);
      const int64_t small = total / 2, big = total - small;
      pads[i] = auto_pad == "SAME_UPPER" ? small : big;
      pads[i + s] = auto_pad == "SAME_UPPER" ? big : small;
    }
    return pads;
  }
  if (auto_pad == "VALID") return pads;
  if (auto_pad != "NOTSET")
    return invalid_argument_error("{}: attribute 'auto_pad' = '{}' (expected NOTSET, SAME_UPPER, SAME_LOWER or VALID)",
                                  node.label(), auto_pad);
  if (node.has_attr("pads")) {
    pads = node.attr_ints("pads");
    if (pads.size() != 2 * s)
      return invalid_argument_error("{}: attribute 'pads' has {} values for {} spatial dims", node.label(), pads.size(), s);
    for (int64_t p : pads)
      if (p < 0) return invalid_argument_error("{}: negative value in attribute 'pads' {}", node.label(), dims_to_string(pads));
  }
  return pads;
}

Status infer_shapes(Graph& g, const InferOptions& options) {
  auto check_size = [&](const Value& v, const Node* n) -> Status {
    int64_t total = 1;
    for (int64_t d : v.dims) {
      if (d < 0) return invalid_argument_error("value '{}' has a negative dim in {}", v.name, dims_to_string(v.dims));
      if (d > 0 && total > options.max_elements / d)
        return invalid_argument_error("value '{}'{} has shape {}: over the limit of {} elements", v.name,
                                      n ? " of " + n->label() : std::string(), dims_to_string(v.dims),
                                      options.max_elements);
      total *= d;
    }
    return ok_status();
  };
  for (int i : g.inputs) {
    if (!g.value(i).has_shape)
      return invalid_argument_error("graph input '{}' has no static shape; give one when importing", g.value(i).name);
    TS_RETURN_IF_ERROR(check_size(g.value(i), nullptr));
  }
  for (const Value& v : g.values)
    if (v.constant) TS_RETURN_IF_ERROR(check_size(v, nullptr));
  std::vector<bool> folded(g.nodes.size(), false);
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    Node& n = g.nodes[ni];
    for (int in : n.inputs)
      if (in >= 0 && !g.value(in).has_shape)
        return internal_error("{}: input '{}' has no shape (nodes not sorted?)", n.label(), g.value(in).name);
    // Constant folding.
    bool all_const = !n.inputs.empty() || n.op_type == "Constant";
    int64_t in_elems = 0;
    for (int in : n.inputs) {
      if (in < 0) continue;
      if (!g.is_constant(in)) all_const = false;
      else in_elems += g.value(in).constant->volume();
    }
    if (n.op_type == "Shape" || n.op_type == "Size") all_const = true;  // needs only the input's dims
    // Quantized conv weights stay behind their DequantizeLinear, so that
    // graph::fuse_quantized_convs finds the integers (it folds the rest).
    if (n.op_type == "DequantizeLinear" && !n.inputs.empty() && g.value(n.inputs[0]).dims.size() == 4)
      all_const = false;
    if (all_const && host_supports(n.op_type) && in_elems <= options.max_folded_elements) {
      std::vector<HostTensor> stand_ins;  // Shape / Size of a computed value
      std::vector<const HostTensor*> args;
      stand_ins.reserve(n.inputs.size());
      for (int in : n.inputs) {
        if (in < 0) args.push_back(nullptr);
        else if (g.is_constant(in)) args.push_back(&*g.value(in).constant);
        else {
          HostTensor t;
          t.dims = g.value(in).dims;
          stand_ins.push_back(std::move(t));
          args.push_back(&stand_ins.back());
        }
      }
      auto outs = evaluate(n, args, g.opset);
      if (outs.ok()) {
        for (size_t k = 0; k < n.outputs.size() && k < outs->size(); ++k) {
          Value& v = g.value(n.outputs[k]);
          v.type = (*outs)[k].type;
          v.dims = (*outs)[k].dims;
          v.has_shape = true;
          v.constant = std::move((*outs)[k]);
          TS_RETURN_IF_ERROR(check_size(v, &n));
        }
        if (outs->size() >= n.outputs.size()) {
          folded[ni] = true;
          continue;
        }
      } else if (outs.status().code() != StatusCode::kUnimplemented) {
        return outs.status();
      }
    }
    auto it = rules().find(n.op_type);
    if (it == rules().end()) return unimplemented_error("{}: op type '{}' is not supported", n.label(), n.op_type);
    TS_ASSIGN_OR_RETURN(std::vector<Out> outs, it->second(Ctx{g, n, g.opset}));
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      if (k >= outs.size())
        return invalid_argument_error("{} has {} outputs; the op produces {}", n.label(), n.outputs.size(), outs.size());
      Value& v = g.value(n.outputs[k]);
      v.type = outs[k].type;
      v.dims = outs[k].dims;
      v.has_shape = true;
      TS_RETURN_IF_ERROR(check_size(v, &n));
    }
  }
  for (int o : g.outputs)
    if (!g.value(o).has_shape) return invalid_argument_error("graph output '{}' is never computed", g.value(o).name);
  // Folded nodes are gone: their outputs are constants now.
  std::vector<Node> kept;
  for (size_t ni = 0; ni < g.nodes.size(); ++ni)
    if (!folded[ni]) kept.push_back(std::move(g.nodes[ni]));
  g.nodes = std::move(kept);
  for (auto& v : g.values) v.producer = -1;
  for (size_t ni = 0; ni < g.nodes.size(); ++ni)
    for (int o : g.nodes[ni].outputs) g.value(o).producer = static_cast<int>(ni);
  return ok_status();
}

}  // namespace tessera::graph
