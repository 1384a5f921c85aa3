// project_recurrent_inputs: a recurrent layer's input products on the
// device (passes.h).
//
// An LSTM / GRU / RNN computes W x_t + Wb for every step t before anything
// depends on the previous step: about two thirds of a CRNN head's work, one
// matrix product over all steps. With constant W (and B) that product runs
// on the device as Reshape (T x N, I) -> MatMul by W^T of every direction
// (I, directions x gates x H) -> Add Wb -> Reshape (T, N, ...), and the
// layer (on the host, one step after another) reads it as its input with
// tessera_projected_inputs = 1.
#include <fmt/format.h>

#include "pass_util.h"
#include "tessera/graph/passes.h"

namespace tessera::graph {

PassReport project_recurrent_inputs(Graph& g) {
  PassReport r{"project_recurrent_inputs"};
  std::vector<std::vector<Node>> replaced(g.nodes.size());
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    const Node n = g.nodes[ni];  // (a copy: add_value below)
    const bool lstm = n.op_type == "LSTM", gru = n.op_type == "GRU";
    if ((!lstm && !gru && n.op_type != "RNN") || n.inputs.size() < 3 || n.attr_int("layout", 0) != 0 ||
        n.has_attr("tessera_projected_inputs"))
      continue;
    const int x = n.inputs[0], w = n.inputs[1], b = n.inputs.size() > 3 ? n.inputs[3] : -1;
    if (x < 0 || g.is_constant(x) || g.value(x).type != ElemType::FLOAT32 || !g.is_constant(w) ||
        (b >= 0 && !g.is_constant(b)))
      continue;
    const std::vector<int64_t> xd = g.value(x).dims;
    const HostTensor wt = *g.value(w).constant;  // (a copy: add_value below)
    if (xd.size() != 3 || wt.dims.size() != 3 || wt.dims[2] != xd[2]) continue;
    const int64_t T = xd[0], N = xd[1], I = xd[2], dirs = wt.dims[0], gh = wt.dims[1], width = dirs * gh;
    if (b >= 0 && g.value(b).constant->volume() != dirs * 2 * gh) continue;
    std::vector<float> by(static_cast<size_t>(I * width)), bias(static_cast<size_t>(width), 0.0f);
    for (int64_t d = 0; d < dirs; ++d)
      for (int64_t k = 0; k < gh; ++k) {
        for (int64_t i = 0; i < I; ++i)
          by[static_cast<size_t>(i * width + d * gh + k)] =
              static_cast<float>(wt.at(static_cast<size_t>((d * gh + k) * I + i)));
        if (b >= 0)
          bias[static_cast<size_t>(d * gh + k)] =
              static_cast<float>(g.value(b).constant->at(static_cast<size_t>(d * 2 * gh + k)));
      }
    auto ints = [&](const std::string& name, std::vector<int64_t> v) {
      return detail::ints_value(g, n.name + name, std::move(v));
    };
    auto run = [&](const std::string& name, std::vector<int64_t> dims) {
      return detail::run_value(g, n.name + name, std::move(dims));
    };
    const int weights = g.add_value({.name = n.name + ":input_weights",
                                     .dims = {I, width},
                                     .has_shape = true,
                                     .constant = HostTensor::floats({I, width}, std::move(by))});
    const int bias_v = g.add_value({.name = n.name + ":input_bias",
                                    .dims = {width},
                                    .has_shape = true,
                                    .constant = HostTensor::floats({width}, std::move(bias))});
    const int rows = run(":rows", {T * N, I}), product = run(":product", {T * N, width}),
              biased = run(":biased", {T * N, width}), steps = run(":projected", {T, N, width});
    std::vector<Node> nodes;
    nodes.push_back({.name = n.name + ":rows",
                     .op_type = "Reshape",
                     .inputs = {x, ints(":rows_shape", {T * N, I})},
                     .outputs = {rows}});
    nodes.push_back(
        {.name = n.name + ":input_product", .op_type = "MatMul", .inputs = {rows, weights}, .outputs = {product}});
    nodes.push_back(
        {.name = n.name + ":input_bias", .op_type = "Add", .inputs = {product, bias_v}, .outputs = {biased}});
    nodes.push_back({.name = n.name + ":steps",
                     .op_type = "Reshape",
                     .inputs = {biased, ints(":steps_shape", {T, N, width})},
                     .outputs = {steps}});
    Node layer = n;
    layer.inputs[0] = steps;
    layer.attrs["tessera_projected_inputs"] = detail::int_attr(1);
    nodes.push_back(std::move(layer));
    replaced[ni] = std::move(nodes);
    ++r.rewrites;
  }
  if (r.rewrites == 0) return r;
  detail::replace_nodes(g, replaced);
  return r;
}

}  // namespace tessera::graph
