// Helpers the graph passes share (passes.cc, layout_passes.cc).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "tessera/graph/graph.h"

namespace tessera::graph::detail {

using Consumers = std::vector<std::vector<std::pair<int, int>>>;

// The only reader of value `v`, or -1 (no reader, several, or a graph output).
int sole_reader(const Graph& g, const Consumers& consumers, int v);
// Drops the nodes marked dead and recomputes every value's producer.
void drop_nodes(Graph& g, const std::vector<bool>& dead);
// Puts replaced[i]'s nodes (where not empty) in node i's place in the order,
// drops the nodes marked dead (empty: none), and recomputes every value's
// producer. The replacements read what node i read and write what its
// readers read, so the order stays topological.
void replace_nodes(Graph& g, std::vector<std::vector<Node>>& replaced, const std::vector<bool>& dead = {});

// A new INT64 constant of rank 1 holding `v` (a Reshape's shape, a Slice's
// bounds), and a new run-time FLOAT32 value of known dims.
inline int ints_value(Graph& g, std::string name, std::vector<int64_t> v) {
  const auto n = static_cast<int64_t>(v.size());
  return g.add_value({.name = std::move(name),
                      .type = ElemType::INT64,
                      .dims = {n},
                      .has_shape = true,
                      .constant = HostTensor::ints({n}, std::move(v))});
}
inline int run_value(Graph& g, std::string name, std::vector<int64_t> dims) {
  return g.add_value({.name = std::move(name), .dims = std::move(dims), .has_shape = true});
}

// Attributes the passes write.
inline Attribute int_attr(int64_t i) { return {.kind = Attribute::Kind::INT, .i = i}; }
inline Attribute float_attr(float f) { return {.kind = Attribute::Kind::FLOAT, .f = f}; }
inline Attribute string_attr(std::string s) { return {.kind = Attribute::Kind::STRING, .s = std::move(s)}; }
inline Attribute ints_attr(std::vector<int64_t> v) { return {.kind = Attribute::Kind::INTS, .ints = std::move(v)}; }
inline Attribute floats_attr(std::vector<float> v) { return {.kind = Attribute::Kind::FLOATS, .floats = std::move(v)}; }

}  // namespace tessera::graph::detail
