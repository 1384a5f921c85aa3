// The host reference evaluation of a graph for tests: every value of `g`
// with `x` as its (first) input, node by node on graph::evaluate, the
// unoptimized graph's oracle that compiled models are checked against.
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "tessera/graph/host_eval.h"

namespace tessera::testing {

inline std::vector<std::optional<graph::HostTensor>> reference_values(const graph::Graph& g,
                                                                      const graph::HostTensor& x) {
  std::vector<std::optional<graph::HostTensor>> vals(g.values.size());
  for (size_t v = 0; v < g.values.size(); ++v)
    if (g.values[v].constant) vals[v] = *g.values[v].constant;
  vals[static_cast<size_t>(g.inputs[0])] = x;
  for (const graph::Node& n : g.nodes) {
    std::vector<const graph::HostTensor*> ins;
    for (int in : n.inputs) ins.push_back(in < 0 ? nullptr : &*vals[static_cast<size_t>(in)]);
    auto outs = graph::evaluate(n, ins, g.opset);
    EXPECT_TRUE(outs.ok()) << outs.status().to_string();
    if (!outs.ok()) return {};
    for (size_t k = 0; k < n.outputs.size(); ++k) vals[static_cast<size_t>(n.outputs[k])] = (*outs)[k];
  }
  return vals;
}

}  // namespace tessera::testing
