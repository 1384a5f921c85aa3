// Shape inference with constant folding, in one walk over a sorted graph:
// a node whose inputs are all constants (and whose op has a host kernel) is
// evaluated on the host and its outputs become constants (but the
// DequantizeLinear of 4-D weights, which graph::fuse_quantized_convs reads
// and then folds); every other node
// gets its output shapes from the op's shape rule. Shapes are static: the
// values a shape depends on (Reshape's shape, Slice's starts, Resize's
// scales) must fold to constants.
//
// Also home of the spatial arithmetic the runtime shares with these rules
// (padding with auto_pad, pooled and convolved sizes).
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "tessera/graph/graph.h"

namespace tessera::graph {

struct InferOptions {
  // Largest constant folding may create (elements); bigger results stay
  // nodes that run on the device.
  int64_t max_folded_elements = int64_t{1} << 24;
  // Largest tensor any value may declare or infer (elements): a guard
  // against hostile files declaring huge shapes.
  int64_t max_elements = int64_t{1} << 31;
};

// INVALID_ARGUMENT naming the node, op type and offending attribute or input
// for inconsistent graphs; UNIMPLEMENTED for ops with no shape rule.
Status infer_shapes(Graph& graph, const InferOptions& options = {});

// The ops infer_shapes has a rule for.
bool has_shape_rule(const std::string& op_type);

// Begin and end padding of each spatial dim of a Conv / pool / ConvTranspose
// node: `pads` or auto_pad (SAME_UPPER, SAME_LOWER, VALID). `in` are the
// spatial input sizes; returns {begin..., end...}.
StatusOr<std::vector<int64_t>> spatial_pads(const Node& node, const std::vector<int64_t>& in,
                                            const std::vector<int64_t>& kernel, const std::vector<int64_t>& strides,
                                            const std::vector<int64_t>& dilations);

// Kernel geometry of a Conv / ConvTranspose / pool node with the defaults
// filled in (strides and dilations 1, kernel from the weight when absent).
struct SpatialGeometry {
  std::vector<int64_t> kernel, strides, dilations, pads;  // pads: begin..., end...
};
StatusOr<SpatialGeometry> spatial_geometry(const Node& node, const std::vector<int64_t>& input_dims,
                                           const std::vector<int64_t>& weight_dims);

}  // namespace tessera::graph
