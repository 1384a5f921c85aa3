#include "tessera/graph/passes.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string_view>

#include "pass_util.h"
#include "tessera/graph/host_eval.h"

namespace tessera::graph {

namespace detail {

int sole_reader(const Graph& g, const Consumers& consumers, int v) {
  if (std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end()) return -1;
  const auto& c = consumers[static_cast<size_t>(v)];
  if (c.size() != 1) return -1;
  return c[0].first;
}

void drop_nodes(Graph& g, const std::vector<bool>& dead) {
  std::vector<Node> kept;
  for (size_t n = 0; n < g.nodes.size(); ++n)
    if (!dead[n]) kept.push_back(std::move(g.nodes[n]));
  g.nodes = std::move(kept);
  for (auto& v : g.values) v.producer = -1;
  for (size_t n = 0; n < g.nodes.size(); ++n)
    for (int o : g.nodes[n].outputs) g.value(o).producer = static_cast<int>(n);
}

void replace_nodes(Graph& g, std::vector<std::vector<Node>>& replaced, const std::vector<bool>& dead) {
  std::vector<Node> nodes;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (i < replaced.size() && !replaced[i].empty())
      for (Node& n : replaced[i]) nodes.push_back(std::move(n));
    else if (dead.empty() || !dead[i])
      nodes.push_back(std::move(g.nodes[i]));
  }
  g.nodes = std::move(nodes);
  drop_nodes(g, std::vector<bool>(g.nodes.size(), false));
}

}  // namespace detail

namespace {

using detail::drop_nodes;
using detail::float_attr;
using detail::int_attr;
using detail::replace_nodes;
using detail::sole_reader;
using detail::string_attr;

// Whether constant `c` broadcasts one value per output channel of the 4D-ish
// conv output `out` (out_ch channels): a scalar, or every dim 1 but the
// channel axis counted from the end ((C), (C,1,1), (1,C,1,1)).
bool per_channel(const Value& out, const HostTensor& c, int64_t out_ch) {
  if (c.volume() == 1) return true;
  const size_t rank = out.dims.size();
  if (c.volume() != out_ch || rank < 2 || c.dims.size() > rank || c.dims.size() < rank - 1) return false;
  for (size_t d = 0; d < c.dims.size(); ++d) {
    const size_t axis = rank - c.dims.size() + d;  // aligned output axis
    if (axis != 1 && c.dims[d] != 1) return false;
  }
  return true;
}

// The conv's weights with every output channel oc scaled by mult[oc]. Conv
// weights are (out, in/g, k...); ConvTranspose's (in, out/g, k...), whose
// output channel is group(i) * (out/g) + j / kernel volume.
HostTensor scale_output_channels(const HostTensor& w, bool transpose, int64_t group, const std::vector<double>& mult) {
  HostTensor nw = w;
  const int64_t per = w.volume() / w.dims[0];  // elements per leading index
  for (int64_t i = 0; i < w.dims[0]; ++i)
    for (int64_t j = 0; j < per; ++j) {
      int64_t oc = i;
      if (transpose) {
        const int64_t kvol = per / w.dims[1];
        oc = (i / (w.dims[0] / group)) * w.dims[1] + j / kvol;
      }
      const auto k = static_cast<size_t>(i * per + j);
      nw.f[k] = static_cast<float>(w.f[k] * mult[static_cast<size_t>(oc)]);
    }
  return nw;
}

// A Conv / ConvTranspose (constant float weights, constant or no bias, no
// fused activation) whose output only a two-input `op` reads, the other
// input a constant with one value per output channel (per_channel) and the
// result the conv's shape: that reader, its constant and the channel count.
struct ConstantReader {
  int node, constant;
  int64_t out_ch;
};
std::optional<ConstantReader> constant_reader(const Graph& g,
                                              const std::vector<std::vector<std::pair<int, int>>>& consumers,
                                              const Node& conv, std::string_view op) {
  const bool transpose = conv.op_type == "ConvTranspose";
  if ((conv.op_type != "Conv" && !transpose) || conv.has_attr("tessera_activation") || conv.outputs.size() != 1)
    return std::nullopt;
  if (conv.inputs.size() < 2 || !g.is_constant(conv.inputs[1]) || g.value(conv.inputs[1]).type != ElemType::FLOAT32)
    return std::nullopt;
  if (conv.inputs.size() > 2 && conv.inputs[2] >= 0 && !g.is_constant(conv.inputs[2])) return std::nullopt;
  const int idx = sole_reader(g, consumers, conv.outputs[0]);
  if (idx < 0) return std::nullopt;
  const Node& n = g.nodes[static_cast<size_t>(idx)];
  if (n.op_type != op || n.inputs.size() != 2 || n.outputs.size() != 1) return std::nullopt;
  const int other = n.inputs[0] == conv.outputs[0] ? n.inputs[1] : n.inputs[0];
  if (other < 0 || other == conv.outputs[0] || !g.is_constant(other)) return std::nullopt;
  const Value& out = g.value(conv.outputs[0]);
  const HostTensor& w = *g.value(conv.inputs[1]).constant;
  const int64_t out_ch = transpose ? w.dims[1] * conv.attr_int("group", 1) : w.dims[0];
  if (!per_channel(out, *g.value(other).constant, out_ch) || !out.has_shape || g.value(n.outputs[0]).dims != out.dims)
    return std::nullopt;
  return ConstantReader{idx, other, out_ch};
}

}  // namespace

PassReport fold_bias_add(Graph& g) {
  PassReport r{"fold_bias_add"};
  auto consumers = g.consumers();
  std::vector<bool> dead(g.nodes.size(), false);
  for (size_t ci = 0; ci < g.nodes.size(); ++ci) {
    const Node& conv = g.nodes[ci];
    const auto found = constant_reader(g, consumers, conv, "Add");
    if (!found) continue;
    const int add_idx = found->node;
    const int64_t out_ch = found->out_ch;
    const HostTensor& c = *g.value(found->constant).constant;
    const bool has_bias = conv.inputs.size() > 2 && conv.inputs[2] >= 0;
    std::vector<float> nb(static_cast<size_t>(out_ch));
    for (size_t k = 0; k < nb.size(); ++k)
      nb[k] = static_cast<float>((has_bias ? g.value(conv.inputs[2]).constant->at(k) : 0.0) +
                                 c.at(c.volume() == 1 ? 0 : k));
    Value bv{.name = g.value(conv.inputs[1]).name + ":add_folded_bias",
             .type = ElemType::FLOAT32,
             .dims = {out_ch},
             .has_shape = true,
             .constant = HostTensor::floats({out_ch}, std::move(nb))};
    const int bid = g.add_value(std::move(bv));
    Node& c2 = g.nodes[ci];
    c2.inputs.resize(3);
    c2.inputs[2] = bid;
    c2.outputs[0] = g.nodes[static_cast<size_t>(add_idx)].outputs[0];
    dead[static_cast<size_t>(add_idx)] = true;
    ++r.rewrites;
    consumers = g.consumers();
  }
  drop_nodes(g, dead);
  return r;
}

PassReport fold_batch_norm(Graph& g) {
  PassReport r{"fold_batch_norm"};
  auto consumers = g.consumers();
  std::vector<bool> dead(g.nodes.size(), false);
  for (size_t ci = 0; ci < g.nodes.size(); ++ci) {
    Node& conv = g.nodes[ci];
    const bool transpose = conv.op_type == "ConvTranspose";
    if ((conv.op_type != "Conv" && !transpose) || conv.has_attr("tessera_activation")) continue;
    if (conv.inputs.size() < 2 || !g.is_constant(conv.inputs[1])) continue;
    if (conv.inputs.size() > 2 && conv.inputs[2] >= 0 && !g.is_constant(conv.inputs[2])) continue;
    const int bn_idx = sole_reader(g, consumers, conv.outputs[0]);
    if (bn_idx < 0) continue;
    Node& bn = g.nodes[static_cast<size_t>(bn_idx)];
    if (bn.op_type != "BatchNormalization" || bn.outputs.size() != 1 || bn.inputs.size() != 5 ||
        bn.inputs[0] != conv.outputs[0] || bn.attr_int("training_mode", 0) != 0)
      continue;
    bool stats_const = true;
    for (size_t k = 1; k < 5; ++k) stats_const = stats_const && g.is_constant(bn.inputs[k]);
    if (!stats_const) continue;
    const HostTensor& w = *g.value(conv.inputs[1]).constant;
    const int64_t group = conv.attr_int("group", 1);
    const int64_t out_ch = transpose ? w.dims[1] * group : w.dims[0];
    const HostTensor &scale = *g.value(bn.inputs[1]).constant, &shift = *g.value(bn.inputs[2]).constant,
                     &mean = *g.value(bn.inputs[3]).constant, &var = *g.value(bn.inputs[4]).constant;
    if (scale.volume() != out_ch || shift.volume() != out_ch || mean.volume() != out_ch || var.volume() != out_ch)
      continue;
    const double eps = bn.attr_float("epsilon", 1e-5f);
    std::vector<double> mult(static_cast<size_t>(out_ch));
    for (size_t c = 0; c < mult.size(); ++c) mult[c] = scale.at(c) / std::sqrt(var.at(c) + eps);
    HostTensor nw = scale_output_channels(w, transpose, group, mult);
    std::vector<float> nb(static_cast<size_t>(out_ch));
    const bool has_bias = conv.inputs.size() > 2 && conv.inputs[2] >= 0;
    for (size_t c = 0; c < nb.size(); ++c) {
      const double b = has_bias ? g.value(conv.inputs[2]).constant->at(c) : 0.0;
      nb[c] = static_cast<float>((b - mean.at(c)) * mult[c] + shift.at(c));
    }
    Value wv{.name = g.value(conv.inputs[1]).name + ":bn_folded",
             .type = ElemType::FLOAT32,
             .dims = w.dims,
             .has_shape = true,
             .constant = std::move(nw)};
    Value bv{.name = g.value(conv.inputs[1]).name + ":bn_folded_bias",
             .type = ElemType::FLOAT32,
             .dims = {out_ch},
             .has_shape = true,
             .constant = HostTensor::floats({out_ch}, std::move(nb))};
    const int wid = g.add_value(std::move(wv)), bid = g.add_value(std::move(bv));
    Node& c2 = g.nodes[ci];  // add_value does not move nodes, but be explicit
    c2.inputs.resize(3);
    c2.inputs[1] = wid, c2.inputs[2] = bid;
    c2.outputs[0] = g.nodes[static_cast<size_t>(bn_idx)].outputs[0];
    dead[static_cast<size_t>(bn_idx)] = true;
    ++r.rewrites;
    consumers = g.consumers();
  }
  drop_nodes(g, dead);
  return r;
}

PassReport fold_scale_mul(Graph& g) {
  PassReport r{"fold_scale_mul"};
  auto consumers = g.consumers();
  std::vector<bool> dead(g.nodes.size(), false);
  for (size_t ci = 0; ci < g.nodes.size(); ++ci) {
    const Node& conv = g.nodes[ci];
    const auto found = constant_reader(g, consumers, conv, "Mul");
    if (!found) continue;
    const int mul_idx = found->node;
    const int64_t out_ch = found->out_ch, group = conv.attr_int("group", 1);
    const bool transpose = conv.op_type == "ConvTranspose";
    const bool has_bias = conv.inputs.size() > 2 && conv.inputs[2] >= 0;
    const HostTensor& w = *g.value(conv.inputs[1]).constant;
    const HostTensor& c = *g.value(found->constant).constant;
    std::vector<double> mult(static_cast<size_t>(out_ch));
    for (size_t k = 0; k < mult.size(); ++k) mult[k] = c.at(c.volume() == 1 ? 0 : k);
    std::vector<float> nb(static_cast<size_t>(out_ch));
    for (size_t k = 0; k < nb.size(); ++k)
      nb[k] = static_cast<float>((has_bias ? g.value(conv.inputs[2]).constant->at(k) : 0.0) * mult[k]);
    Value wv{.name = g.value(conv.inputs[1]).name + ":mul_folded",
             .type = ElemType::FLOAT32,
             .dims = w.dims,
             .has_shape = true,
             .constant = scale_output_channels(w, transpose, group, mult)};
    Value bv{.name = g.value(conv.inputs[1]).name + ":mul_folded_bias",
             .type = ElemType::FLOAT32,
             .dims = {out_ch},
             .has_shape = true,
             .constant = HostTensor::floats({out_ch}, std::move(nb))};
    const int wid = g.add_value(std::move(wv)), bid = g.add_value(std::move(bv));
    Node& c2 = g.nodes[ci];
    c2.inputs.resize(3);
    c2.inputs[1] = wid, c2.inputs[2] = bid;
    c2.outputs[0] = g.nodes[static_cast<size_t>(mul_idx)].outputs[0];
    dead[static_cast<size_t>(mul_idx)] = true;
    ++r.rewrites;
    consumers = g.consumers();
  }
  drop_nodes(g, dead);
  return r;
}

PassReport fuse_activation_patterns(Graph& g) {
  PassReport r{"fuse_activation_patterns"};
  const auto consumers = g.consumers();
  std::vector<bool> dead(g.nodes.size(), false);
  for (size_t mi = 0; mi < g.nodes.size(); ++mi) {
    Node& mul = g.nodes[mi];
    if (mul.op_type != "Mul" || mul.inputs.size() != 2) continue;
    for (int side = 0; side < 2; ++side) {
      const int gate = mul.inputs[static_cast<size_t>(side)], x = mul.inputs[static_cast<size_t>(1 - side)];
      if (gate < 0 || x < 0 || g.value(gate).producer < 0) continue;
      const auto si = static_cast<size_t>(g.value(gate).producer);
      const Node& s = g.nodes[si];
      if (s.inputs.empty() || s.inputs[0] != x || sole_reader(g, consumers, gate) != static_cast<int>(mi)) continue;
      std::string fused;
      if (s.op_type == "Sigmoid")
        fused = "SiLU";
      else if (s.op_type == "HardSigmoid" && std::fabs(s.attr_float("alpha", 0.2f) - 1.0f / 6) < 1e-6f &&
               s.attr_float("beta", 0.5f) == 0.5f)
        fused = "HardSwish";
      if (fused.empty() || g.value(x).dims != g.value(mul.outputs[0]).dims) continue;
      mul.op_type = fused;
      mul.inputs = {x};
      mul.attrs.clear();
      dead[si] = true;
      ++r.rewrites;
      break;
    }
  }
  // Div(Mul(x, Clip(Add(x, 3), 0, 6)), 6) -> HardSwish(x) (Paddle's export).
  auto scalar = [&](int v, double want) {
    return g.is_constant(v) && g.value(v).constant->size() == 1 && g.value(v).constant->at(0) == want;
  };
  auto sole_producer = [&](int v, int reader, const char* op) -> int {
    if (v < 0 || g.value(v).producer < 0 || sole_reader(g, consumers, v) != reader) return -1;
    const int p = g.value(v).producer;
    return g.nodes[static_cast<size_t>(p)].op_type == op && !dead[static_cast<size_t>(p)] ? p : -1;
  };
  for (size_t di = 0; di < g.nodes.size(); ++di) {
    Node& div = g.nodes[di];
    if (dead[di] || div.op_type != "Div" || div.inputs.size() != 2 || !scalar(div.inputs[1], 6)) continue;
    const int mi = sole_producer(div.inputs[0], static_cast<int>(di), "Mul");
    if (mi < 0) continue;
    const Node& mul = g.nodes[static_cast<size_t>(mi)];
    for (int side = 0; side < 2; ++side) {
      const int x = mul.inputs[static_cast<size_t>(side)];
      const int ci = sole_producer(mul.inputs[static_cast<size_t>(1 - side)], mi, "Clip");
      if (ci < 0) continue;
      const Node& clip = g.nodes[static_cast<size_t>(ci)];
      const auto clip_act = fusable_activation(g, clip);
      if (!clip_act || clip_act->name != "relu6") continue;
      const int ai = sole_producer(clip.inputs[0], ci, "Add");
      if (ai < 0) continue;
      const Node& add = g.nodes[static_cast<size_t>(ai)];
      const bool x_plus_3 =
          (add.inputs[0] == x && scalar(add.inputs[1], 3)) || (add.inputs[1] == x && scalar(add.inputs[0], 3));
      if (!x_plus_3 || g.value(x).dims != g.value(div.outputs[0]).dims) continue;
      div.op_type = "HardSwish";
      div.inputs = {x};
      div.attrs.clear();
      dead[static_cast<size_t>(mi)] = dead[static_cast<size_t>(ci)] = dead[static_cast<size_t>(ai)] = true;
      ++r.rewrites;
      break;
    }
  }
  // Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5) -> Gelu(x): PyTorch's
  // export of nn.GELU() before opset 20, the 0.5 on either Mul (Mul(Mul(x,
  // 0.5), Add(...))), the Div by sqrt 2 or a Mul by its inverse. The same
  // with Tanh(sqrt(2/pi) * (x + 0.044715 x^3)) for the Erf -> Gelu(x;
  // approximate 'tanh') (nn.GELU(approximate='tanh')).
  auto near = [&](int v, double want) {
    return g.is_constant(v) && g.value(v).constant->size() == 1 &&
           std::fabs(g.value(v).constant->at(0) - want) <= 1e-6 * std::fabs(want);
  };
  // The nodes of Add(Erf(x / sqrt 2), 1) reading x, read only by `reader`; empty if `a` is not that.
  auto erf_plus_one = [&](int a, int reader, int x) -> std::vector<int> {
    const int ai = sole_producer(a, reader, "Add");
    if (ai < 0) return {};
    const Node& add = g.nodes[static_cast<size_t>(ai)];
    const int e = near(add.inputs[1], 1.0) ? add.inputs[0] : near(add.inputs[0], 1.0) ? add.inputs[1] : -1;
    const int ei = sole_producer(e, ai, "Erf");
    if (ei < 0) return {};
    const int scaled = g.nodes[static_cast<size_t>(ei)].inputs[0];
    int si = sole_producer(scaled, ei, "Div");
    if (si >= 0) {
      const Node& div = g.nodes[static_cast<size_t>(si)];
      if (div.inputs[0] != x || !near(div.inputs[1], std::sqrt(2.0))) return {};
    } else {
      si = sole_producer(scaled, ei, "Mul");
      if (si < 0) return {};
      const Node& mul = g.nodes[static_cast<size_t>(si)];
      const int k = mul.inputs[0] == x ? mul.inputs[1] : mul.inputs[1] == x ? mul.inputs[0] : -1;
      if (!near(k, 1 / std::sqrt(2.0))) return {};
    }
    return {ai, ei, si};
  };
  // x^3 as x * (x * x), (x * x) * x or Pow(x, 3), read only by `reader`: its nodes, or empty.
  auto cube = [&](int v, int reader, int x) -> std::vector<int> {
    if (const int pi = sole_producer(v, reader, "Pow"); pi >= 0) {
      const Node& p = g.nodes[static_cast<size_t>(pi)];
      return p.inputs[0] == x && near(p.inputs[1], 3.0) ? std::vector<int>{pi} : std::vector<int>{};
    }
    const int mi = sole_producer(v, reader, "Mul");
    if (mi < 0) return {};
    const Node& m = g.nodes[static_cast<size_t>(mi)];
    for (size_t side = 0; side < 2; ++side) {
      if (m.inputs[side] != x) continue;
      const int si = sole_producer(m.inputs[1 - side], mi, "Mul");
      if (si >= 0 && g.nodes[static_cast<size_t>(si)].inputs == std::vector<int>{x, x}) return {mi, si};
    }
    return {};
  };
  // The other operand of a Mul or Add node `n` by the scalar constant `k`, or -1.
  auto by_scalar = [&](const Node& n, double k) {
    return near(n.inputs[1], k) ? n.inputs[0] : near(n.inputs[0], k) ? n.inputs[1] : -1;
  };
  // The nodes of Add(Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)), 1) reading x,
  // read only by `reader` (nn.GELU(approximate='tanh')); empty if `a` is not that.
  auto tanh_plus_one = [&](int a, int reader, int x) -> std::vector<int> {
    const int ai = sole_producer(a, reader, "Add");
    if (ai < 0) return {};
    const int ti = sole_producer(by_scalar(g.nodes[static_cast<size_t>(ai)], 1.0), ai, "Tanh");
    if (ti < 0) return {};
    const int ki = sole_producer(g.nodes[static_cast<size_t>(ti)].inputs[0], ti, "Mul");
    if (ki < 0) return {};
    const int ii = sole_producer(by_scalar(g.nodes[static_cast<size_t>(ki)], std::sqrt(2 / M_PI)), ki, "Add");
    if (ii < 0) return {};
    const Node& inner = g.nodes[static_cast<size_t>(ii)];
    const int c3 = inner.inputs[0] == x ? inner.inputs[1] : inner.inputs[1] == x ? inner.inputs[0] : -1;
    const int ci = sole_producer(c3, ii, "Mul");
    if (ci < 0) return {};
    std::vector<int> chain = cube(by_scalar(g.nodes[static_cast<size_t>(ci)], 0.044715), ci, x);
    if (chain.empty()) return {};
    chain.insert(chain.end(), {ai, ti, ki, ii, ci});
    return chain;
  };
  // Either form: the chain, and whether it is the tanh one.
  auto gate_plus_one = [&](int a, int reader, int x, bool* tanh_form) {
    std::vector<int> chain = erf_plus_one(a, reader, x);
    *tanh_form = chain.empty();
    return chain.empty() ? tanh_plus_one(a, reader, x) : chain;
  };
  for (size_t oi = 0; oi < g.nodes.size(); ++oi) {
    Node& outer = g.nodes[oi];
    if (dead[oi] || outer.op_type != "Mul" || outer.inputs.size() != 2) continue;
    const int me = static_cast<int>(oi);
    for (int side = 0; side < 2; ++side) {
      const int l = outer.inputs[static_cast<size_t>(side)], rgt = outer.inputs[static_cast<size_t>(1 - side)];
      const int mi = sole_producer(l, me, "Mul");
      if (mi < 0) continue;
      const Node& mul = g.nodes[static_cast<size_t>(mi)];
      int x = -1;
      std::vector<int> chain;
      bool tanh_form = false;
      if (near(rgt, 0.5)) {  // Mul(Mul(x, Add(...)), 0.5)
        for (int s2 = 0; s2 < 2 && chain.empty(); ++s2) {
          x = mul.inputs[static_cast<size_t>(s2)];
          chain = gate_plus_one(mul.inputs[static_cast<size_t>(1 - s2)], mi, x, &tanh_form);
        }
      } else {  // Mul(Mul(x, 0.5), Add(...))
        x = near(mul.inputs[1], 0.5) ? mul.inputs[0] : near(mul.inputs[0], 0.5) ? mul.inputs[1] : -1;
        if (x >= 0) chain = gate_plus_one(rgt, me, x, &tanh_form);
      }
      if (chain.empty() || x < 0 || g.value(x).dims != g.value(outer.outputs[0]).dims) continue;
      outer.op_type = "Gelu";
      outer.inputs = {x};
      outer.attrs.clear();
      if (tanh_form) outer.attrs["approximate"] = string_attr("tanh");
      dead[static_cast<size_t>(mi)] = true;
      for (int k : chain) dead[static_cast<size_t>(k)] = true;
      ++r.rewrites;
      break;
    }
  }
  drop_nodes(g, dead);
  return r;
}

PassReport fuse_layer_norm(Graph& g) {
  PassReport r{"fuse_layer_norm"};
  const auto consumers = g.consumers();
  std::vector<bool> dead(g.nodes.size(), false);
  auto producer = [&](int v, const char* op) -> int {
    if (v < 0 || g.value(v).producer < 0) return -1;
    const int p = g.value(v).producer;
    return g.nodes[static_cast<size_t>(p)].op_type == op && !dead[static_cast<size_t>(p)] ? p : -1;
  };
  auto only_readers = [&](int v, std::initializer_list<int> readers) {
    if (std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end()) return false;
    const auto& c = consumers[static_cast<size_t>(v)];
    if (c.size() != readers.size()) return false;
    for (const auto& [node, slot] : c)
      if (std::find(readers.begin(), readers.end(), node) == readers.end()) return false;
    return true;
  };
  auto scalar = [&](int v, double* out) {
    if (!g.is_constant(v) || g.value(v).constant->size() != 1) return false;
    *out = g.value(v).constant->at(0);
    return true;
  };
  // ReduceMean over the last axis only, dims kept (opset 13's axes attribute or opset 18's input).
  auto last_axis_mean = [&](int ni, int rank) {
    const Node& n = g.nodes[static_cast<size_t>(ni)];
    std::vector<int64_t> axes = n.attr_ints("axes");
    if (n.inputs.size() > 1 && n.inputs[1] >= 0) {
      if (!g.is_constant(n.inputs[1])) return false;
      axes = g.value(n.inputs[1]).constant->i;
    }
    return n.attr_int("keepdims", 1) == 1 && axes.size() == 1 && (axes[0] == -1 || axes[0] == rank - 1);
  };
  for (size_t di = 0; di < g.nodes.size(); ++di) {
    const Node& div = g.nodes[di];
    if (dead[di] || div.op_type != "Div" || div.inputs.size() != 2) continue;
    const int d = div.inputs[0];
    const int si = producer(d, "Sub"), qi = producer(div.inputs[1], "Sqrt");
    if (si < 0 || qi < 0) continue;
    const Node& sub = g.nodes[static_cast<size_t>(si)];
    const int x = sub.inputs[0], mi = producer(sub.inputs[1], "ReduceMean");
    if (mi < 0 || g.nodes[static_cast<size_t>(mi)].inputs[0] != x || !g.value(x).has_shape) continue;
    const int rank = static_cast<int>(g.value(x).dims.size());
    const int ai = producer(g.nodes[static_cast<size_t>(qi)].inputs[0], "Add");
    if (rank < 1 || ai < 0 || !last_axis_mean(mi, rank)) continue;
    const Node& add = g.nodes[static_cast<size_t>(ai)];
    double eps = 0;
    const int vi_in = scalar(add.inputs[1], &eps) ? add.inputs[0] : scalar(add.inputs[0], &eps) ? add.inputs[1] : -1;
    const int vi = producer(vi_in, "ReduceMean");
    if (vi < 0 || !last_axis_mean(vi, rank)) continue;
    const int pv = g.nodes[static_cast<size_t>(vi)].inputs[0];
    int pi = producer(pv, "Pow");
    double two = 0;
    if (pi >= 0 && !(g.nodes[static_cast<size_t>(pi)].inputs[0] == d &&
                     scalar(g.nodes[static_cast<size_t>(pi)].inputs[1], &two) && two == 2))
      pi = -1;
    if (pi < 0) {
      pi = producer(pv, "Mul");
      if (pi >= 0 &&
          !(g.nodes[static_cast<size_t>(pi)].inputs[0] == d && g.nodes[static_cast<size_t>(pi)].inputs[1] == d))
        pi = -1;
    }
    if (pi < 0 || eps <= 0) continue;
    // Every intermediate read only inside the pattern.
    if (!only_readers(sub.inputs[1], {si}) || !only_readers(d, {pi, static_cast<int>(di)}) || !only_readers(pv, {vi}) ||
        !only_readers(vi_in, {ai}) || !only_readers(add.outputs[0], {qi}) ||
        !only_readers(g.nodes[static_cast<size_t>(qi)].outputs[0], {static_cast<int>(di)}))
      continue;
    // The affine: Mul by a constant of the last dim's size, then Add of one.
    const int64_t c = g.value(x).dims.back();
    auto last_dim_constant = [&](int v) {
      return g.is_constant(v) && g.value(v).constant->type == ElemType::FLOAT32 &&
             static_cast<int64_t>(g.value(v).constant->size()) == c;
    };
    int end = static_cast<int>(di), mul_node = -1, scale = -1, bias = -1;
    const int out = div.outputs[0];
    auto sole_node_reader = [&](int v) {
      return consumers[static_cast<size_t>(v)].size() == 1 &&
                     std::find(g.outputs.begin(), g.outputs.end(), v) == g.outputs.end()
                 ? consumers[static_cast<size_t>(v)][0].first
                 : -1;
    };
    auto other_input = [&](int ni, const char* op, int v) {
      const Node& n = g.nodes[static_cast<size_t>(ni)];
      return n.op_type == op && n.inputs.size() == 2 ? (n.inputs[0] == v ? n.inputs[1] : n.inputs[0]) : -1;
    };
    if (const int mu = sole_node_reader(out); mu >= 0 && last_dim_constant(other_input(mu, "Mul", out))) {
      end = mul_node = mu;
      scale = other_input(mu, "Mul", out);
      const int mo = g.nodes[static_cast<size_t>(mu)].outputs[0];
      if (const int ad = sole_node_reader(mo); ad >= 0 && last_dim_constant(other_input(ad, "Add", mo))) {
        end = ad;
        bias = other_input(ad, "Add", mo);
      }
    }
    if (scale < 0) {
      Value one{.name = g.value(out).name + "/layer_norm_scale",
                .dims = {c},
                .has_shape = true,
                .constant = HostTensor::floats({c}, std::vector<float>(static_cast<size_t>(c), 1.0f))};
      scale = g.add_value(std::move(one));
    }
    Node& last = g.nodes[static_cast<size_t>(end)];
    const int y = last.outputs[0];
    for (int k : {mi, si, pi, vi, ai, qi, static_cast<int>(di), mul_node})
      if (k >= 0 && k != end) dead[static_cast<size_t>(k)] = true;
    last.op_type = "LayerNormalization";
    last.inputs = bias >= 0 ? std::vector<int>{x, scale, bias} : std::vector<int>{x, scale};
    last.outputs = {y};
    last.attrs.clear();
    last.attrs["axis"] = int_attr(-1);
    last.attrs["epsilon"] = float_attr(static_cast<float>(eps));
    ++r.rewrites;
  }
  drop_nodes(g, dead);
  return r;
}

std::optional<FusableActivation> fusable_activation(const Graph& g, const Node& n) {
  using A = FusableActivation;
  const std::string& op = n.op_type;
  static const std::map<std::string, std::string> plain = {
      {"Relu", "relu"},           {"Sigmoid", "sigmoid"}, {"Tanh", "tanh"},         {"SiLU", "silu"},
      {"HardSwish", "hardswish"}, {"Mish", "mish"},       {"Softplus", "softplus"}, {"Softsign", "softsign"},
      {"Floor", "floor"},         {"Ceil", "ceil"},       {"Round", "round"},       {"Sign", "sign"}};
  if (auto it = plain.find(op); it != plain.end()) return A{it->second};
  if (op == "Cast" && n.inputs.size() == 1 && n.inputs[0] >= 0 && g.value(n.inputs[0]).type == ElemType::FLOAT32) {
    if (n.attr_int("to", 1) == 10) return A{"to_float16"};
    if (n.attr_int("to", 1) == 16) return A{"to_bfloat16"};
  }
  if (op == "Gelu" && n.attr_string("approximate", "none") == "none") return A{"gelu"};
  if (op == "Gelu" && n.attr_string("approximate", "none") == "tanh") return A{"gelu_tanh"};
  if (op == "LeakyRelu") return A{"leaky_relu", n.attr_float("alpha", 0.01f)};
  if (op == "Elu") return A{"elu", n.attr_float("alpha", 1.0f)};
  if (op == "Celu") return A{"celu", n.attr_float("alpha", 1.0f)};
  if (op == "ThresholdedRelu") return A{"thresholded_relu", n.attr_float("alpha", 1.0f)};
  if (op == "Selu")
    return A{.name = "elu",
             .param = n.attr_float("alpha", 1.67326319217681884765625f),
             .scale = n.attr_float("gamma", 1.05070102214813232421875f)};
  if (op == "HardSigmoid") {
    const double a = n.attr_float("alpha", 0.2f), b = n.attr_float("beta", 0.5f);
    if (std::fabs(a - 1.0 / 6) < 1e-6 && b == 0.5) return A{"hardsigmoid"};
    if (a == 0)  // (unbounded, so that 0 * +-inf is NaN as in ONNX's alpha x + beta)
      return A{.name = "clip",
               .param = -INFINITY,
               .param2 = INFINITY,
               .scale = 0,
               .shift = static_cast<float>(std::clamp(b, 0.0, 1.0))};
    const double lo = -b / a, hi = (1 - b) / a;
    return A{.name = "clip",
             .param = static_cast<float>(std::min(lo, hi)),
             .param2 = static_cast<float>(std::max(lo, hi)),
             .scale = static_cast<float>(a),
             .shift = static_cast<float>(b)};
  }
  if (op == "Clip") {
    double lo = -INFINITY, hi = INFINITY;
    if (g.opset < 11) {
      lo = n.attr_float("min", -3.4028234663852886e38f), hi = n.attr_float("max", 3.4028234663852886e38f);
    } else {
      if (n.inputs.size() > 1 && n.inputs[1] >= 0) {
        if (!g.is_constant(n.inputs[1]) || g.value(n.inputs[1]).constant->size() != 1) return std::nullopt;
        lo = g.value(n.inputs[1]).constant->at(0);
      }
      if (n.inputs.size() > 2 && n.inputs[2] >= 0) {
        if (!g.is_constant(n.inputs[2]) || g.value(n.inputs[2]).constant->size() != 1) return std::nullopt;
        hi = g.value(n.inputs[2]).constant->at(0);
      }
    }
    if (lo == 0 && hi == 6) return A{"relu6"};
    if (lo == 0 && hi >= 3.4e38) return A{"relu"};
    if (std::isnan(lo) || std::isnan(hi)) return std::nullopt;
    return A{.name = "clip", .param = static_cast<float>(lo), .param2 = static_cast<float>(hi)};
  }
  return std::nullopt;
}

PassReport fuse_activations(Graph& g) {
  PassReport r{"fuse_activations"};
  g.values.reserve(g.values.size() + 2 * g.nodes.size());  // add_value below keeps references valid
  const std::set<std::string> producers = {"Conv", "ConvTranspose", "QuantizedConv", "Add", "Sub",
                                           "Mul",  "Div",           "MatMul",        "Gemm"};
  const auto consumers = g.consumers();
  std::vector<bool> dead(g.nodes.size(), false);
  for (size_t pi = 0; pi < g.nodes.size(); ++pi) {
    Node& p = g.nodes[pi];
    // (A QuantizedConv that quantizes its output applies nothing after that.)
    if (!producers.count(p.op_type) || p.has_attr("tessera_activation") || p.has_attr("output_scale") ||
        p.outputs.size() != 1)
      continue;
    const int ai = sole_reader(g, consumers, p.outputs[0]);
    if (ai < 0) continue;
    const Node& act = g.nodes[static_cast<size_t>(ai)];
    std::optional<FusableActivation> fa = fusable_activation(g, act);
    // HardSigmoid(alpha, beta) = clip(alpha x + beta, 0, 1) is PyTorch's
    // clip(y / 6 + 1/2, 0, 1) of y = 6 alpha x + 6 beta - 3: scale a conv's
    // weights and bias into that form, then fuse the PyTorch activation
    // (the values a conv with it computes stay within float32 rounding of
    // ONNX's; a clip and an affine elsewhere).
    if (act.op_type == "HardSigmoid" && fa && fa->name == "clip" && p.op_type == "Conv" && g.is_constant(p.inputs[1]) &&
        (p.inputs.size() < 3 || p.inputs[2] < 0 || g.is_constant(p.inputs[2]))) {
      const double a = act.attr_float("alpha", 0.2f), b = act.attr_float("beta", 0.5f);
      HostTensor w = *g.value(p.inputs[1]).constant;
      const int64_t out_ch = w.dims[0];
      for (float& v : w.f) v = static_cast<float>(v * 6 * a);
      std::vector<float> bias(static_cast<size_t>(out_ch));
      for (size_t c = 0; c < bias.size(); ++c) {
        const double b0 = p.inputs.size() > 2 && p.inputs[2] >= 0 ? g.value(p.inputs[2]).constant->at(c) : 0.0;
        bias[c] = static_cast<float>(b0 * 6 * a + 6 * b - 3);
      }
      Value wv{.name = g.value(p.inputs[1]).name + ":hardsigmoid",
               .type = ElemType::FLOAT32,
               .dims = w.dims,
               .has_shape = true,
               .constant = std::move(w)};
      Value bv{.name = g.value(p.inputs[1]).name + ":hardsigmoid_bias",
               .type = ElemType::FLOAT32,
               .dims = {out_ch},
               .has_shape = true,
               .constant = HostTensor::floats({out_ch}, std::move(bias))};
      const int wid = g.add_value(std::move(wv)), bid = g.add_value(std::move(bv));
      Node& pc = g.nodes[pi];
      pc.inputs.resize(3);
      pc.inputs[1] = wid, pc.inputs[2] = bid;
      fa = FusableActivation{"hardsigmoid"};
    }
    if (!fa || act.inputs[0] != p.outputs[0]) continue;
    // Conv, matmul and element-wise kernels apply any activation.
    p.attrs["tessera_activation"] = string_attr(fa->name);
    if (fa->param != 0) p.attrs["tessera_activation_param"] = float_attr(fa->param);
    if (fa->param2 != 0) p.attrs["tessera_activation_param2"] = float_attr(fa->param2);
    if (fa->scale != 1) p.attrs["tessera_activation_scale"] = float_attr(fa->scale);
    if (fa->shift != 0) p.attrs["tessera_activation_shift"] = float_attr(fa->shift);
    p.outputs[0] = act.outputs[0];
    dead[static_cast<size_t>(ai)] = true;
    ++r.rewrites;
  }
  drop_nodes(g, dead);
  return r;
}

PassReport fuse_residual_adds(Graph& g) {
  PassReport r{"fuse_residual_adds"};
  const auto consumers = g.consumers();
  std::vector<bool> dead(g.nodes.size(), false);
  for (size_t ai = 0; ai < g.nodes.size(); ++ai) {
    const Node& add = g.nodes[ai];
    if (add.op_type != "Add" || add.inputs.size() != 2 || add.inputs[0] < 0 || add.inputs[1] < 0) continue;
    const Value& out = g.value(add.outputs[0]);
    if (out.dims.size() != 4 || g.value(add.inputs[0]).dims != out.dims || g.value(add.inputs[1]).dims != out.dims)
      continue;
    // (A residual activation carries one parameter, no affine.)
    if (add.has_attr("tessera_activation_param2") || add.has_attr("tessera_activation_scale") ||
        add.has_attr("tessera_activation_shift"))
      continue;
    // The conv computed last takes the other operand, which exists by then.
    int best = -1, best_side = -1;
    for (int side = 0; side < 2; ++side) {
      const int v = add.inputs[static_cast<size_t>(side)], other = add.inputs[static_cast<size_t>(1 - side)];
      const int ci = g.value(v).producer;
      if (ci < 0 || g.is_constant(other) || sole_reader(g, consumers, v) != static_cast<int>(ai)) continue;
      const Node& conv = g.nodes[static_cast<size_t>(ci)];
      if (conv.op_type != "Conv" || conv.inputs.size() > 3 || g.value(conv.inputs[0]).dims.size() != 4) continue;
      if (g.value(other).producer >= ci || ci <= best) continue;
      best = ci, best_side = side;
    }
    if (best < 0) continue;
    Node& conv = g.nodes[static_cast<size_t>(best)];
    conv.inputs.resize(4, -1);
    conv.inputs[3] = add.inputs[static_cast<size_t>(1 - best_side)];
    Attribute act;
    act.kind = Attribute::Kind::STRING;
    act.s = add.attr_string("tessera_activation", "identity");
    conv.attrs["tessera_residual_activation"] = act;
    if (add.has_attr("tessera_activation_param"))
      conv.attrs["tessera_residual_activation_param"] = add.attrs.at("tessera_activation_param");
    conv.outputs[0] = add.outputs[0];
    dead[ai] = true;
    ++r.rewrites;
  }
  drop_nodes(g, dead);
  return r;
}

PassReport fuse_activation_affine(Graph& g) {
  PassReport r{"fuse_activation_affine"};
  auto consumers = g.consumers();
  std::vector<bool> dead(g.nodes.size(), false);
  // The scalar constant of a Mul / Add / Sub node reading `v` (x op c, or
  // c op x for Mul and Add), or nullopt.
  auto scalar_of = [&](const Node& n, int v) -> std::optional<double> {
    if (n.inputs.size() != 2 || n.outputs.size() != 1) return std::nullopt;
    for (int side = 0; side < 2; ++side) {
      const int x = n.inputs[static_cast<size_t>(side)], c = n.inputs[static_cast<size_t>(1 - side)];
      if (x != v || !g.is_constant(c) || g.value(c).constant->volume() != 1 || g.value(c).type != ElemType::FLOAT32 ||
          g.value(x).dims != g.value(n.outputs[0]).dims)
        continue;
      if (n.op_type == "Sub" && side == 1) continue;  // c - x
      return g.value(c).constant->at(0);
    }
    return std::nullopt;
  };
  for (size_t ci = 0; ci < g.nodes.size(); ++ci) {
    if (dead[ci] || g.nodes[ci].op_type != "Conv" || g.nodes[ci].attr_string("tessera_activation", "").empty() ||
        g.nodes[ci].has_attr("tessera_activation_scale") || g.nodes[ci].inputs.size() > 3)
      continue;
    double scale = 1, shift = 0;
    int out = g.nodes[ci].outputs[0];
    std::vector<int> fused;
    for (const bool want_mul : {true, false}) {
      const int reader = sole_reader(g, consumers, out);
      if (reader < 0) break;
      const Node& n = g.nodes[static_cast<size_t>(reader)];
      const bool mul = n.op_type == "Mul";
      if (mul != want_mul || (!mul && n.op_type != "Add" && n.op_type != "Sub")) continue;
      if (n.has_attr("tessera_activation")) break;  // (what was fused into it would be lost)
      const std::optional<double> c = scalar_of(n, out);
      if (!c) break;
      if (mul)
        scale = *c;
      else
        shift = n.op_type == "Sub" ? -*c : *c;
      fused.push_back(reader);
      out = n.outputs[0];
    }
    if (fused.empty()) continue;
    Node& conv = g.nodes[ci];
    conv.attrs["tessera_activation_scale"] = float_attr(static_cast<float>(scale));
    conv.attrs["tessera_activation_shift"] = float_attr(static_cast<float>(shift));
    conv.outputs[0] = out;
    for (int f : fused) dead[static_cast<size_t>(f)] = true;
    ++r.rewrites;
    consumers = g.consumers();
  }
  drop_nodes(g, dead);
  return r;
}

bool float_to_float32(const Graph& g, const Node& n) {
  if (n.op_type != "Cast" || n.inputs.size() != 1 || n.inputs[0] < 0) return false;
  const int64_t to = n.attr_int("to", 1);
  return (to == 1 || to == 11) && g.value(n.inputs[0]).type == ElemType::FLOAT32;
}

PassReport remove_identities(Graph& g) {
  PassReport r{"remove_identities"};
  const auto consumers = g.consumers();
  const std::set<int> outputs(g.outputs.begin(), g.outputs.end());
  auto read = [&](int v) { return outputs.count(v) != 0 || !consumers[static_cast<size_t>(v)].empty(); };
  std::vector<int> alias(g.values.size());
  for (size_t v = 0; v < alias.size(); ++v) alias[v] = static_cast<int>(v);
  std::vector<bool> dead(g.nodes.size(), false);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.inputs.empty() || n.inputs[0] < 0 || n.outputs.empty() || outputs.count(n.outputs[0])) continue;
    bool identity = (n.op_type == "Identity" || float_to_float32(g, n)) && n.outputs.size() == 1;
    if (n.op_type == "Dropout") {
      // (Training mode with a ratio of 0, as F.dropout(p=0) exports, drops nothing.)
      const int ratio = n.inputs.size() > 1 ? n.inputs[1] : -1, mode = n.inputs.size() > 2 ? n.inputs[2] : -1;
      const bool zero = ratio >= 0 && g.is_constant(ratio) && g.value(ratio).constant->at(0) == 0;
      const bool training = !zero && mode >= 0 && (!g.is_constant(mode) || g.value(mode).constant->at(0) != 0);
      identity = !training && (n.outputs.size() == 1 || n.outputs[1] < 0 || !read(n.outputs[1]));
    }
    if (!identity) continue;
    alias[static_cast<size_t>(n.outputs[0])] = alias[static_cast<size_t>(n.inputs[0])];
    dead[i] = true;
    ++r.rewrites;
  }
  if (r.rewrites == 0) return r;
  for (Node& n : g.nodes)
    for (int& v : n.inputs)
      if (v >= 0) v = alias[static_cast<size_t>(v)];
  drop_nodes(g, dead);
  return r;
}

PassReport split_variadic(Graph& g) {
  PassReport r{"split_variadic"};
  std::vector<std::vector<Node>> replaced(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node n = g.nodes[i];  // (a copy: add_value below)
    const bool mean = n.op_type == "Mean", add = n.op_type == "Sum" || mean;
    if ((!add && n.op_type != "Max" && n.op_type != "Min") || n.outputs.size() != 1 || n.inputs.empty() ||
        (n.inputs.size() == 2 && !add) || std::count(n.inputs.begin(), n.inputs.end(), -1) != 0)
      continue;
    // The dims of each partial result (broadcast so far), before anything is added.
    std::vector<std::vector<int64_t>> partial = {g.value(n.inputs[0]).dims};
    bool shaped = g.value(n.inputs[0]).has_shape;
    for (size_t k = 1; k < n.inputs.size() && shaped; ++k) {
      const Value& v = g.value(n.inputs[k]);
      StatusOr<std::vector<int64_t>> d = broadcast_dims(partial.back(), v.dims);
      shaped = v.has_shape && d.ok();
      if (shaped) partial.push_back(*d);
    }
    if (!shaped) continue;
    const Value out = g.value(n.outputs[0]);
    std::vector<Node> chain;
    int acc = n.inputs[0];
    for (size_t k = 1; k < n.inputs.size(); ++k) {
      const bool last = k + 1 == n.inputs.size() && !mean;
      const int y = last ? n.outputs[0]
                         : g.add_value({.name = fmt::format("{}:{}", out.name, k),
                                        .type = out.type,
                                        .dims = partial[k],
                                        .has_shape = true});
      chain.push_back({.name = fmt::format("{}:{}", n.name, k),
                       .op_type = add ? "Add" : n.op_type,
                       .inputs = {acc, n.inputs[k]},
                       .outputs = {y}});
      acc = y;
    }
    if (mean) {
      const auto count = static_cast<float>(n.inputs.size());
      const int c = g.add_value({.name = n.name + ":count",
                                 .type = ElemType::FLOAT32,
                                 .dims = {},
                                 .has_shape = true,
                                 .constant = HostTensor::floats({}, {count})});
      chain.push_back({.name = n.name, .op_type = "Div", .inputs = {acc, c}, .outputs = {n.outputs[0]}});
    } else if (n.inputs.size() == 1) {
      chain.push_back({.name = n.name, .op_type = "Identity", .inputs = {acc}, .outputs = {n.outputs[0]}});
    }
    replaced[i] = std::move(chain);
    ++r.rewrites;
  }
  if (r.rewrites == 0) return r;
  replace_nodes(g, replaced);
  return r;
}

std::vector<PassReport> optimize(Graph& g) {
  std::vector<PassReport> reports;
  // Activations and LayerNorm rebuilt first: linear_to_conv and
  // cancel_transposes see whole activations between transposes, and the
  // folds below see the convs linear_to_conv makes.
  reports.push_back(fuse_quantized_convs(g));  // (before lower_quantized takes the pairs apart)
  reports.push_back(lower_quantized(g));       // (its Casts of floats become Identity)
  reports.push_back(split_variadic(g));
  reports.push_back(remove_identities(g));  // (split_variadic's Identity for one operand too)
  reports.push_back(lower_einsum(g));       // (its transposes meet cancel_transposes)
  reports.push_back(project_recurrent_inputs(g));
  reports.push_back(fuse_activation_patterns(g));
  reports.push_back(fuse_layer_norm(g));
  reports.push_back(fuse_group_norm(g));
  reports.push_back(conv1d_to_conv2d(g));
  reports.push_back(linear_to_conv(g));
  reports.push_back(cancel_transposes(g));
  reports.push_back(fold_bias_add(g));
  reports.push_back(fold_batch_norm(g));
  reports.push_back(batch_norm_to_conv(g));  // those fold_batch_norm left: per-channel 1x1 depthwise convs
  reports.push_back(lrn_to_conv(g));
  reports.push_back(fold_pad_into_average_pool(g));
  reports.push_back(fold_scale_mul(g));
  PassReport again = fold_bias_add(g);  // the Add after a folded Mul (Paddle's learnable affine blocks)
  again.pass = "fold_bias_add (after fold_scale_mul)";
  reports.push_back(again);
  reports.push_back(conv3d_to_conv2d(g));  // (after the folds: a batch norm joins the 3-D weights first)
  reports.push_back(fuse_activations(g));
  reports.push_back(fuse_activation_affine(g));
  reports.push_back(fuse_residual_adds(g));
  reports.push_back(fuse_concat_affine(g));
  g.remove_dead_nodes();
  return reports;
}

}  // namespace tessera::graph
