// Helpers the graph passes share (passes.cc, layout_passes.cc).
#pragma once
#include <utility>
#include <vector>

#include "tessera/graph/graph.h"

namespace tessera::graph::detail {

using Consumers = std::vector<std::vector<std::pair<int, int>>>;

// The only reader of value `v`, or -1 (no reader, several, or a graph output).
int sole_reader(const Graph& g, const Consumers& consumers, int v);
// Drops the nodes marked dead and recomputes every value's producer.
void drop_nodes(Graph& g, const std::vector<bool>& dead);

}  // namespace tessera::graph::detail
