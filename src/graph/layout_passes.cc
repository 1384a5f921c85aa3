// The layout passes: channels-last linear layers as 1x1 convs, and
// transposes that undo each other removed (passes.h).
#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "pass_util.h"
#include "tessera/graph/passes.h"

namespace tessera::graph {
namespace {

using detail::Consumers;
using detail::drop_nodes;
using detail::float_attr;
using detail::int_attr;
using detail::ints_value;
using detail::ints_attr;
using detail::replace_nodes;
using detail::run_value;
using detail::sole_reader;
using detail::string_attr;


std::vector<int64_t> permutation(const Node& t, size_t rank) {
  std::vector<int64_t> perm = t.attr_ints("perm");
  if (perm.empty())
    for (size_t k = 0; k < rank; ++k) perm.push_back(static_cast<int64_t>(rank - 1 - k));
  return perm;
}

// The constant Add operand of a linear layer's bias: one value per output
// column (dims all 1 but the last, which is `cols`) or a scalar; -1 if `add`
// is not such an Add of `y`.
int bias_operand(const Graph& g, const Node& add, int y, int64_t cols) {
  if (add.op_type != "Add" || add.inputs.size() != 2) return -1;
  const int c = add.inputs[0] == y ? add.inputs[1] : add.inputs[0];
  if (!g.is_constant(c) || g.value(c).constant->type != ElemType::FLOAT32) return -1;
  if (g.value(add.outputs[0]).dims != g.value(y).dims) return -1;
  const auto& d = g.value(c).constant->dims;
  const int64_t vol = g.value(c).constant->volume();
  if (vol == 1) return c;
  for (size_t k = 0; k + 1 < d.size(); ++k)
    if (d[k] != 1) return -1;
  return !d.empty() && d.back() == cols ? c : -1;
}

// Element-wise ops of one run-time input (any others scalar constants):
// they commute with a transpose.
bool elementwise_unary(const Graph& g, const Node& n) {
  static const std::set<std::string> kOps = {
      "Relu",      "LeakyRelu", "Elu", "Selu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh",       "Gelu", "SiLU",
      "Softplus",  "Softsign",  "Erf", "Abs",  "Neg",     "Exp",         "Log",       "Reciprocal", "Sqrt", "Clip",
      "Identity",  "Floor",     "Ceil", "Round", "Sign", "Mish"};
  if (!kOps.count(n.op_type) || n.outputs.size() != 1 || n.inputs.empty() || n.has_attr("tessera_activation"))
    return false;
  for (size_t k = 1; k < n.inputs.size(); ++k)
    if (n.inputs[k] >= 0 && (!g.is_constant(n.inputs[k]) || g.value(n.inputs[k]).constant->volume() > 1))
      return false;
  return true;
}

// Whether q (a Transpose or a Reshape) gives back the layout p (of the same
// kind) took its input from: the permutations compose to the identity, or
// the reshapes' outer dims are the same (known) dims.
bool undoes(const Graph& g, const Node& p, const Node& q) {
  const Value &x = g.value(p.inputs[0]), &y = g.value(q.outputs[0]);
  if (q.op_type == "Reshape") return x.has_shape && y.has_shape && x.dims == y.dims;
  const size_t rank = x.dims.size();
  const auto pp = permutation(p, rank), qp = permutation(q, rank);
  if (pp.size() != rank || qp.size() != rank) return false;
  for (size_t k = 0; k < rank; ++k)
    if (pp[static_cast<size_t>(qp[k])] != static_cast<int64_t>(k)) return false;
  return true;
}

}  // namespace

PassReport linear_to_conv(Graph& g) {
  PassReport r{"linear_to_conv"};
  const Consumers consumers = g.consumers();
  std::vector<bool> dead(g.nodes.size(), false);
  std::vector<std::vector<Node>> replaced(g.nodes.size());  // per MatMul: its three nodes
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& mm = g.nodes[i];
    if (mm.op_type != "MatMul" || dead[i] || mm.has_attr("tessera_activation")) continue;
    const int a = mm.inputs[0], b = mm.inputs[1], y = mm.outputs[0];
    const Value& av = g.value(a);
    // Tokens (N, L, C), a transformer's, as an (N, 1, L, C) image.
    const bool tokens = av.has_shape && av.dims.size() == 3;
    if (!av.has_shape || (av.dims.size() != 4 && !tokens) || g.is_constant(a) || !g.is_constant(b)) continue;
    const HostTensor& w = *g.value(b).constant;
    if (w.type != ElemType::FLOAT32 || w.dims.size() != 2 || w.dims[0] != av.dims.back()) continue;
    const int64_t n = av.dims[0], h = tokens ? 1 : av.dims[1], wd = av.dims[tokens ? 1 : 2], k = w.dims[0],
                  m = w.dims[1];
    // (References into g.values die with the first add_value below.)
    // The (K, M) matrix as M filters of K channels: (M, K, 1, 1).
    std::vector<float> filt(static_cast<size_t>(m * k));
    for (int64_t kk = 0; kk < k; ++kk)
      for (int64_t col = 0; col < m; ++col) filt[static_cast<size_t>(col * k + kk)] = w.f[static_cast<size_t>(kk * m + col)];
    int out = y, bias = -1;
    if (const int add = sole_reader(g, consumers, y); add >= 0 && !dead[static_cast<size_t>(add)]) {
      const int c = bias_operand(g, g.nodes[static_cast<size_t>(add)], y, m);
      if (c >= 0) {
        const HostTensor& cv = *g.value(c).constant;
        std::vector<float> bv(static_cast<size_t>(m));
        for (size_t j = 0; j < bv.size(); ++j) bv[j] = cv.f[cv.f.size() == 1 ? 0 : j];
        bias = g.add_value({.name = g.value(c).name + ":conv_bias",
                            .dims = {m},
                            .has_shape = true,
                            .constant = HostTensor::floats({m}, std::move(bv))});
        out = g.nodes[static_cast<size_t>(add)].outputs[0];
        dead[static_cast<size_t>(add)] = true;
      }
    }
    const std::string name = mm.name;
    const int a_in = a;
    std::vector<Node> nodes;
    int a4 = a, out4 = out;
    if (tokens) {
      a4 = run_value(g, g.value(a).name + ":nhwc", {n, 1, wd, k});
      out4 = run_value(g, g.value(out).name + ":nhwc", {n, 1, wd, m});
      nodes.push_back({.name = name + ":to_image",
                       .op_type = "Reshape",
                       .inputs = {a_in, ints_value(g, name + ":image_shape", {n, 1, wd, k})},
                       .outputs = {a4}});
    }
    const int wid = g.add_value({.name = g.value(b).name + ":conv_weight",
                                 .dims = {m, k, 1, 1},
                                 .has_shape = true,
                                 .constant = HostTensor::floats({m, k, 1, 1}, std::move(filt))});
    const int x_nchw = g.add_value({.name = g.value(a).name + ":nchw", .dims = {n, k, h, wd}, .has_shape = true});
    const int y_nchw = g.add_value({.name = g.value(out).name + ":nchw", .dims = {n, m, h, wd}, .has_shape = true});
    Node to_nchw{.name = name + ":to_nchw", .op_type = "Transpose", .inputs = {a4}, .outputs = {x_nchw}};
    to_nchw.attrs["perm"] = ints_attr({0, 3, 1, 2});
    Node conv{.name = name, .op_type = "Conv", .inputs = {x_nchw, wid}, .outputs = {y_nchw}};
    if (bias >= 0) conv.inputs.push_back(bias);
    conv.attrs["kernel_shape"] = ints_attr({1, 1});
    Node to_nhwc{.name = name + ":to_nhwc", .op_type = "Transpose", .inputs = {y_nchw}, .outputs = {out4}};
    to_nhwc.attrs["perm"] = ints_attr({0, 2, 3, 1});
    nodes.push_back(std::move(to_nchw)), nodes.push_back(std::move(conv)), nodes.push_back(std::move(to_nhwc));
    if (tokens)
      nodes.push_back({.name = name + ":to_tokens",
                       .op_type = "Reshape",
                       .inputs = {out4, ints_value(g, name + ":token_shape", {n, wd, m})},
                       .outputs = {out}});
    replaced[i] = std::move(nodes);
    ++r.rewrites;
  }
  // The three nodes take the MatMul's place in the order: they read what it
  // read, and the folded Add's readers come after it.
  replace_nodes(g, replaced, dead);
  return r;
}

PassReport batch_norm_to_conv(Graph& g) {
  PassReport r{"batch_norm_to_conv"};
  for (Node& bn : g.nodes) {
    if (bn.op_type != "BatchNormalization" || bn.outputs.size() != 1 || bn.inputs.size() != 5 ||
        bn.attr_int("training_mode", 0) != 0)
      continue;
    const Value& x = g.value(bn.inputs[0]);
    if (!x.has_shape || x.dims.size() != 4) continue;
    const int64_t c = x.dims[1];
    bool stats = true;
    for (size_t k = 1; k < 5; ++k)
      stats = stats && g.is_constant(bn.inputs[k]) && g.value(bn.inputs[k]).constant->volume() == c;
    if (!stats) continue;
    const double eps = bn.attr_float("epsilon", 1e-5f);
    std::vector<float> w(static_cast<size_t>(c)), b(static_cast<size_t>(c));
    for (size_t k = 0; k < w.size(); ++k) {
      const double m = g.value(bn.inputs[1]).constant->at(k) / std::sqrt(g.value(bn.inputs[4]).constant->at(k) + eps);
      w[k] = static_cast<float>(m);
      b[k] = static_cast<float>(g.value(bn.inputs[2]).constant->at(k) - g.value(bn.inputs[3]).constant->at(k) * m);
    }
    const std::string name = g.value(bn.inputs[1]).name;
    const int wid = g.add_value({.name = name + ":bn_scale", .dims = {c, 1, 1, 1}, .has_shape = true,
                                 .constant = HostTensor::floats({c, 1, 1, 1}, std::move(w))});
    const int bid = g.add_value(
        {.name = name + ":bn_shift", .dims = {c}, .has_shape = true, .constant = HostTensor::floats({c}, std::move(b))});
    bn.op_type = "Conv";
    bn.inputs = {bn.inputs[0], wid, bid};
    bn.attrs.clear();
    bn.attrs["kernel_shape"] = ints_attr({1, 1});
    bn.attrs["group"] = int_attr(c);
    ++r.rewrites;
  }
  return r;
}

PassReport lrn_to_conv(Graph& g) {
  PassReport r{"lrn_to_conv"};
  std::vector<std::vector<Node>> replaced(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node lrn = g.nodes[i];  // (a copy: add_value below)
    if (lrn.op_type != "LRN" || lrn.inputs.size() != 1 || lrn.outputs.size() != 1) continue;
    const Value x = g.value(lrn.inputs[0]);
    const int64_t size = lrn.attr_int("size", 0);
    if (!x.has_shape || x.dims.size() != 4 || size < 1 || x.type != ElemType::FLOAT32) continue;
    const int64_t c = x.dims[1], lo = (size - 1) / 2, hi = size - 1 - lo;
    const float alpha = lrn.attr_float("alpha", 1e-4f), beta = lrn.attr_float("beta", 0.75f);
    std::vector<float> w(static_cast<size_t>(c * c), 0.0f);  // (out, in): alpha / size on the band
    for (int64_t o = 0; o < c; ++o)
      for (int64_t in = std::max<int64_t>(0, o - lo); in <= std::min(c - 1, o + hi); ++in)
        w[static_cast<size_t>(o * c + in)] = alpha / static_cast<float>(size);
    const int wid = g.add_value({.name = lrn.name + ":lrn_window", .dims = {c, c, 1, 1}, .has_shape = true,
                                 .constant = HostTensor::floats({c, c, 1, 1}, std::move(w))});
    std::vector<float> bias(static_cast<size_t>(c), lrn.attr_float("bias", 1.0f));
    const int bid = g.add_value({.name = lrn.name + ":lrn_bias", .dims = {c}, .has_shape = true,
                                 .constant = HostTensor::floats({c}, std::move(bias))});
    const int sq = g.add_value({.name = lrn.name + ":square", .dims = x.dims, .has_shape = true});
    const int den = g.add_value({.name = lrn.name + ":denominator", .dims = x.dims, .has_shape = true});
    Node square{
        .name = lrn.name + ":square", .op_type = "Mul", .inputs = {lrn.inputs[0], lrn.inputs[0]}, .outputs = {sq}};
    Node window{.name = lrn.name + ":window", .op_type = "Conv", .inputs = {sq, wid, bid}, .outputs = {den}};
    window.attrs["kernel_shape"] = ints_attr({1, 1});
    window.attrs["tessera_activation"] = string_attr("pow");
    window.attrs["tessera_activation_param"] = float_attr(-beta);
    Node scale{.name = lrn.name, .op_type = "Mul", .inputs = {lrn.inputs[0], den}, .outputs = {lrn.outputs[0]}};
    replaced[i] = {std::move(square), std::move(window), std::move(scale)};
    ++r.rewrites;
  }
  if (r.rewrites == 0) return r;
  replace_nodes(g, replaced);
  return r;
}

PassReport fold_pad_into_average_pool(Graph& g) {
  PassReport r{"fold_pad_into_average_pool"};
  const Consumers consumers = g.consumers();
  std::vector<bool> dead(g.nodes.size(), false);
  for (size_t pi = 0; pi < g.nodes.size(); ++pi) {
    const Node& pad = g.nodes[pi];
    if (pad.op_type != "Pad" || pad.attr_string("mode", "constant") != "constant" || g.opset < 11) continue;
    if (pad.inputs.size() < 2 || !g.is_constant(pad.inputs[1]) || g.value(pad.inputs[0]).dims.size() != 4) continue;
    if (pad.inputs.size() > 3 && pad.inputs[3] >= 0) continue;  // the axes input
    if (pad.inputs.size() > 2 && pad.inputs[2] >= 0 &&
        (!g.is_constant(pad.inputs[2]) || g.value(pad.inputs[2]).constant->at(0) != 0.0))
      continue;
    const std::vector<int64_t>& pp = g.value(pad.inputs[1]).constant->i;
    // (N, C, H, W) begins then ends: only H and W, symmetric.
    if (pp.size() != 8 || pp[0] || pp[1] || pp[4] || pp[5] || pp[2] != pp[6] || pp[3] != pp[7] || pp[2] < 0 ||
        pp[3] < 0)
      continue;
    const int reader = sole_reader(g, consumers, pad.outputs[0]);
    if (reader < 0) continue;
    Node& pool = g.nodes[static_cast<size_t>(reader)];
    if (pool.op_type != "AveragePool" || pool.attr_string("auto_pad", "NOTSET") != "NOTSET") continue;
    std::vector<int64_t> pads = pool.attr_ints("pads", {0, 0, 0, 0});
    const std::vector<int64_t> kernel = pool.attr_ints("kernel_shape");
    const bool own = std::any_of(pads.begin(), pads.end(), [](int64_t v) { return v != 0; });
    if (pads.size() != 4 || kernel.size() != 2 || (own && pool.attr_int("count_include_pad", 0) == 0)) continue;
    pads = {pads[0] + pp[2], pads[1] + pp[3], pads[2] + pp[2], pads[3] + pp[3]};
    if (pads[0] != pads[2] || pads[1] != pads[3] || 2 * pads[0] > kernel[0] || 2 * pads[1] > kernel[1]) continue;
    pool.attrs["pads"] = ints_attr(pads);
    pool.attrs["count_include_pad"] = int_attr(1);
    pool.inputs[0] = pad.inputs[0];
    dead[pi] = true;
    ++r.rewrites;
  }
  drop_nodes(g, dead);
  return r;
}

PassReport cancel_transposes(Graph& g) {
  PassReport r{"cancel_transposes"};
  for (bool changed = true; changed;) {
    changed = false;
    const Consumers consumers = g.consumers();
    for (size_t qi = 0; qi < g.nodes.size() && !changed; ++qi) {
      const Node& q = g.nodes[qi];
      if (q.op_type != "Transpose" && q.op_type != "Reshape") continue;
      // Up from q through element-wise ops, each read only by the node below,
      // to a node of q's kind.
      std::vector<int> chain;  // element-wise nodes, nearest q first
      int below = static_cast<int>(qi), v = q.inputs[0], pi = -1;
      while (true) {
        const int prod = g.value(v).producer;
        if (prod < 0 || sole_reader(g, consumers, v) != below) break;
        const Node& p = g.nodes[static_cast<size_t>(prod)];
        if (p.op_type == q.op_type) {
          pi = prod;
          break;
        }
        if (!elementwise_unary(g, p)) break;
        chain.push_back(prod);
        below = prod, v = p.inputs[0];
      }
      if (pi < 0) continue;
      const Node& p = g.nodes[static_cast<size_t>(pi)];
      const int x = p.inputs[0], y = q.outputs[0];
      if (!undoes(g, p, q)) continue;
      if (chain.empty()) {
        // Readers of q's output read x; a graph output keeps its transposes.
        if (std::find(g.outputs.begin(), g.outputs.end(), y) != g.outputs.end()) continue;
        for (const auto& [reader, slot] : consumers[static_cast<size_t>(y)])
          g.nodes[static_cast<size_t>(reader)].inputs[static_cast<size_t>(slot)] = x;
      } else {
        // The element-wise chain runs on x's layout: the top one reads x, the
        // bottom one writes q's output, the ones between take x's dims.
        g.nodes[static_cast<size_t>(chain.back())].inputs[0] = x;
        for (size_t k = 1; k < chain.size(); ++k)
          g.value(g.nodes[static_cast<size_t>(chain[k])].outputs[0]).dims = g.value(x).dims;
        g.nodes[static_cast<size_t>(chain.front())].outputs[0] = y;
      }
      std::vector<bool> dead(g.nodes.size(), false);
      dead[qi] = dead[static_cast<size_t>(pi)] = true;
      drop_nodes(g, dead);
      ++r.rewrites;
      changed = true;
    }
  }
  return r;
}

}  // namespace tessera::graph
