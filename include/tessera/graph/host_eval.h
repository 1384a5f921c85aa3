// Host (reference) evaluation of graph nodes: the simplest possible code for
// each op, in double where it matters, on HostTensors.
//
// Three users: constant folding (a node whose inputs are all constants is
// evaluated at compile time), the runtime's fallback for ops or attributes
// no device kernel covers (run as one device launch, reported to the user),
// and tests, as the oracle for the device lowering of whole graphs.
#pragma once
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tessera/graph/graph.h"

namespace tessera::graph {

// Whether evaluate() implements `op_type` (some attribute values may still
// be refused, with UNIMPLEMENTED naming them).
bool host_supports(const std::string& op_type);
// Every op type host_supports() accepts, sorted.
std::vector<std::string> host_supported_ops();

// Evaluates `node` on `inputs` (nullptr for a skipped optional input) under
// the default-domain `opset`. INVALID_ARGUMENT for inputs that contradict the
// op (naming the node), UNIMPLEMENTED for op variants not covered.
StatusOr<std::vector<HostTensor>> evaluate(const Node& node, std::span<const HostTensor* const> inputs, int opset);

// Evaluates `g`'s nodes in order on `values` (a slot per value of `g`, its
// inputs filled in); each node's outputs land in their slots. A constant
// whose slot is empty is read from `g` where it is (a box head's weights are
// not copied per run).
// INVALID_ARGUMENT naming a node that reads a value not computed. (A host
// tail, host_tail.h, and If's branches run this way.)
Status evaluate_nodes(const Graph& g, std::vector<std::optional<HostTensor>>& values);

// numpy broadcasting of two shapes; INVALID_ARGUMENT when they do not broadcast.
StatusOr<std::vector<int64_t>> broadcast_dims(const std::vector<int64_t>& a, const std::vector<int64_t>& b);

}  // namespace tessera::graph
