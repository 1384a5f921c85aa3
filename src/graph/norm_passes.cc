// Rewrites of what exporters write out for GroupNorm and Conv1d into forms
// the device kernels run, and the per-channel affine a Concat takes on
// (passes.h has the contracts).
#include <algorithm>

#include "pass_util.h"
#include "tessera/graph/passes.h"

namespace tessera::graph {

using detail::Consumers;
using detail::drop_nodes;
using detail::float_attr;
using detail::floats_attr;
using detail::int_attr;
using detail::ints_attr;
using detail::replace_nodes;
using detail::sole_reader;

namespace {

// A constant with one value per channel of a (N, C, ...) value: C values,
// shaped (C), (C, 1, 1) or (1, C, 1, 1).
bool per_channel(const Graph& g, int v, int64_t c) {
  if (v < 0 || !g.is_constant(v)) return false;
  const HostTensor& t = *g.value(v).constant;
  if (t.type != ElemType::FLOAT32 || t.volume() != c) return false;
  const auto& d = t.dims;
  return d.size() == 1 || (d.size() == 3 && d[1] == 1 && d[2] == 1) ||
         (d.size() == 4 && d[0] == 1 && d[2] == 1 && d[3] == 1);
}

bool all_equal(const HostTensor& t, double v) {
  for (size_t k = 0; k < t.size(); ++k)
    if (t.at(k) != v) return false;
  return true;
}

}  // namespace

PassReport fuse_group_norm(Graph& g) {
  PassReport r{"fuse_group_norm"};
  const Consumers consumers = g.consumers();
  std::vector<bool> dead(g.nodes.size(), false);
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    const Node& in = g.nodes[ni];
    if (in.op_type != "InstanceNormalization" || in.inputs.size() != 3 || in.outputs.size() != 1) continue;
    // Reshape (N, C, H, W) -> (N, G, L) before, and back after.
    const int before = g.value(in.inputs[0]).producer;
    const int after = sole_reader(g, consumers, in.outputs[0]);
    if (before < 0 || after < 0 || dead[static_cast<size_t>(before)]) continue;
    const Node& r1 = g.nodes[static_cast<size_t>(before)];
    const Node& r2 = g.nodes[static_cast<size_t>(after)];
    if (r1.op_type != "Reshape" || r2.op_type != "Reshape" || sole_reader(g, consumers, r1.outputs[0]) != int(ni))
      continue;
    const Value& x = g.value(r1.inputs[0]);
    const Value& grouped = g.value(in.inputs[0]);
    if (!x.has_shape || x.dims.size() != 4 || grouped.dims.size() != 3 || g.value(r2.outputs[0]).dims != x.dims)
      continue;
    const int64_t c = x.dims[1], groups = grouped.dims[1];
    if (grouped.dims[0] != x.dims[0] || groups < 1 || c % groups != 0) continue;
    // InstanceNormalization's own affine per group: folded only where it is the identity.
    if (!g.is_constant(in.inputs[1]) || !g.is_constant(in.inputs[2]) ||
        !all_equal(*g.value(in.inputs[1]).constant, 1.0) || !all_equal(*g.value(in.inputs[2]).constant, 0.0))
      continue;
    std::vector<float> scale(static_cast<size_t>(c), 1.0f), shift(static_cast<size_t>(c), 0.0f);
    int out = r2.outputs[0];
    // Then Mul by a per-channel gamma and Add of a per-channel beta (either may be missing).
    for (const char* op : {"Mul", "Add"}) {
      const int ri = sole_reader(g, consumers, out);
      if (ri < 0 || dead[static_cast<size_t>(ri)]) break;
      const Node& aff = g.nodes[static_cast<size_t>(ri)];
      if (aff.op_type != op || aff.inputs.size() != 2) continue;
      const int other = aff.inputs[0] == out ? aff.inputs[1] : aff.inputs[0];
      if (!per_channel(g, other, c) || g.value(aff.outputs[0]).dims != x.dims) continue;
      const HostTensor& t = *g.value(other).constant;
      for (size_t k = 0; k < scale.size(); ++k) {
        if (*op == 'M')
          scale[k] *= t.f[k], shift[k] *= t.f[k];
        else
          shift[k] += t.f[k];
      }
      dead[static_cast<size_t>(ri)] = true;
      out = aff.outputs[0];
    }
    const std::string name = in.name;
    const float eps = in.attr_float("epsilon", 1e-5f);
    const int x_id = r1.inputs[0];
    const int sid = g.add_value({.name = name + ":gn_scale",
                                 .dims = {c},
                                 .has_shape = true,
                                 .constant = HostTensor::floats({c}, std::move(scale))});
    const int bid = g.add_value({.name = name + ":gn_shift",
                                 .dims = {c},
                                 .has_shape = true,
                                 .constant = HostTensor::floats({c}, std::move(shift))});
    Node& gn = g.nodes[ni];
    gn.op_type = "GroupNorm";
    gn.inputs = {x_id, sid, bid};
    gn.outputs = {out};
    gn.attrs.clear();
    gn.attrs["num_groups"] = int_attr(groups);
    gn.attrs["epsilon"] = float_attr(eps);
    dead[static_cast<size_t>(before)] = dead[static_cast<size_t>(after)] = true;
    ++r.rewrites;
  }
  drop_nodes(g, dead);
  return r;
}

PassReport conv1d_to_conv2d(Graph& g) {
  PassReport r{"conv1d_to_conv2d"};
  std::vector<std::vector<Node>> replaced(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node conv = g.nodes[i];  // (a copy: add_value below)
    if (conv.op_type != "Conv" || conv.inputs.size() < 2 || conv.outputs.size() != 1) continue;
    const Value x = g.value(conv.inputs[0]), y = g.value(conv.outputs[0]);
    if (!x.has_shape || x.dims.size() != 3 || !g.is_constant(conv.inputs[1]) || y.dims.size() != 3) continue;
    if (conv.attr_string("auto_pad", "NOTSET") != "NOTSET") continue;
    HostTensor w = *g.value(conv.inputs[1]).constant;
    if (w.dims.size() != 3) continue;
    w.dims = {w.dims[0], w.dims[1], 1, w.dims[2]};
    const std::vector<int64_t> pads = conv.attr_ints("pads", {0, 0}), strides = conv.attr_ints("strides", {1}),
                               dilations = conv.attr_ints("dilations", {1});
    if (pads.size() != 2 || strides.size() != 1 || dilations.size() != 1) continue;
    const int wid = g.add_value(
        {.name = g.value(conv.inputs[1]).name + ":2d", .dims = w.dims, .has_shape = true, .constant = std::move(w)});
    const int shape_in = g.add_value({.name = conv.name + ":as_2d",
                                      .type = ElemType::INT64,
                                      .dims = {4},
                                      .has_shape = true,
                                      .constant = HostTensor::ints({4}, {x.dims[0], x.dims[1], 1, x.dims[2]})});
    const int shape_out = g.add_value({.name = conv.name + ":as_1d",
                                       .type = ElemType::INT64,
                                       .dims = {3},
                                       .has_shape = true,
                                       .constant = HostTensor::ints({3}, y.dims)});
    const int x4 =
        g.add_value({.name = x.name + ":2d", .dims = {x.dims[0], x.dims[1], 1, x.dims[2]}, .has_shape = true});
    const int y4 =
        g.add_value({.name = y.name + ":2d", .dims = {y.dims[0], y.dims[1], 1, y.dims[2]}, .has_shape = true});
    Node to4{.name = conv.name + ":to_2d", .op_type = "Reshape", .inputs = {conv.inputs[0], shape_in}, .outputs = {x4}};
    Node c2 = conv;
    c2.inputs[0] = x4, c2.inputs[1] = wid, c2.outputs = {y4};
    c2.attrs["kernel_shape"] = ints_attr({1, g.value(wid).dims[3]});
    c2.attrs["pads"] = ints_attr({0, pads[0], 0, pads[1]});
    c2.attrs["strides"] = ints_attr({1, strides[0]});
    c2.attrs["dilations"] = ints_attr({1, dilations[0]});
    Node to3{
        .name = conv.name + ":to_1d", .op_type = "Reshape", .inputs = {y4, shape_out}, .outputs = {conv.outputs[0]}};
    replaced[i] = {std::move(to4), std::move(c2), std::move(to3)};
    ++r.rewrites;
  }
  if (r.rewrites == 0) return r;
  replace_nodes(g, replaced);
  return r;
}

PassReport fuse_concat_affine(Graph& g) {
  PassReport r{"fuse_concat_affine"};
  const Consumers consumers = g.consumers();
  std::vector<bool> dead(g.nodes.size(), false);
  for (size_t ci = 0; ci < g.nodes.size(); ++ci) {
    Node& cat = g.nodes[ci];
    if (cat.op_type != "Concat" || cat.outputs.size() != 1 || cat.has_attr("tessera_channel_scale")) continue;
    const Value& y = g.value(cat.outputs[0]);
    if (!y.has_shape || y.dims.size() != 4 || y.type != ElemType::FLOAT32) continue;
    const int64_t axis = cat.attr_int("axis", 0);
    if (axis != 1 && axis != -3) continue;
    const int di = sole_reader(g, consumers, cat.outputs[0]);
    if (di < 0) continue;
    const Node& dw = g.nodes[static_cast<size_t>(di)];
    // A 1x1 depthwise Conv of stride 1 without padding (batch_norm_to_conv's),
    // constant weights (C, 1, 1, 1) and bias, no residual.
    const int64_t c = y.dims[1];
    if (dw.op_type != "Conv" || dw.outputs.size() != 1 || dw.inputs.size() < 2 || dw.inputs.size() > 3 ||
        dw.inputs[0] != cat.outputs[0] || !g.is_constant(dw.inputs[1]) || dw.attr_int("group", 1) != c)
      continue;
    const bool has_bias = dw.inputs.size() == 3 && dw.inputs[2] >= 0;
    if (has_bias && !g.is_constant(dw.inputs[2])) continue;
    const HostTensor& w = *g.value(dw.inputs[1]).constant;
    if (w.dims != std::vector<int64_t>{c, 1, 1, 1} || (has_bias && g.value(dw.inputs[2]).constant->volume() != c))
      continue;
    auto all_of = [&](const char* name, int64_t v) {
      const std::vector<int64_t> a = dw.attr_ints(name, {});
      return std::all_of(a.begin(), a.end(), [v](int64_t x) { return x == v; });
    };
    if (!all_of("strides", 1) || !all_of("pads", 0) || dw.attr_string("auto_pad", "NOTSET") != "NOTSET" ||
        g.value(dw.outputs[0]).dims != y.dims)
      continue;
    std::vector<float> scale(static_cast<size_t>(c)), shift(static_cast<size_t>(c), 0.0f);
    for (size_t k = 0; k < scale.size(); ++k) {
      scale[k] = static_cast<float>(w.at(k));
      if (has_bias) shift[k] = static_cast<float>(g.value(dw.inputs[2]).constant->at(k));
    }
    cat.attrs["tessera_channel_scale"] = floats_attr(std::move(scale));
    cat.attrs["tessera_channel_shift"] = floats_attr(std::move(shift));
    for (const auto& [name, a] : dw.attrs)
      if (name.starts_with("tessera_activation")) cat.attrs[name] = a;
    cat.outputs[0] = dw.outputs[0];
    dead[static_cast<size_t>(di)] = true;
    ++r.rewrites;
  }
  drop_nodes(g, dead);
  return r;
}

}  // namespace tessera::graph
