// A compiled graph's ops as predictor queries: what `tessera predict MODEL`
// sums into a model's predicted latency, and what `tessera sweep --models`
// measures so that the project's models' own ops are in the dataset.
//
// Each node of the graph after the compiler's passes (shapes inferred) maps
// to the query of the device op it lowers to: Conv (fused activation and
// residual included) to conv2d, ConvTranspose to conv_transpose2d, Gemm to linear, MatMul to matmul, the
// element-wise and activation ops, pools, Resize, Concat, Transpose,
// Softmax, LayerNormalization. Element-wise ops and concats of 4-d maps are
// queried on NHWC shapes (channels last, a lower-rank operand right-aligned
// first), as the device keeps a conv net's maps; 4-d graph inputs and
// outputs add the permutes that take them to NHWC and back (op type
// "layout", first and last). Reshape-like nodes are views and launch
// nothing. Anything else (and the layout conversions and typecasts the
// lowering inserts inside the graph, which it does not show) is listed as
// not modeled, with the reason, and adds nothing to the sum.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tessera/graph/graph.h"
#include "tessera/perfmodel/op_query.h"

namespace tessera::perfmodel {

struct ModelOp {
  std::string node;     // the graph node's name
  std::string op_type;  // its ONNX (or fused) op type
  std::optional<OpQuery> query;
  bool view = false;  // launches nothing (Reshape, Flatten, ...)
  std::string note;   // why there is no query
};

struct ModelQueryOptions {
  DataType activations = DataType::FLOAT32;  // the device tensors' dtype
  DataType weights = DataType::FLOAT32;      // conv and linear weights
  uint32_t workers = 0;
};

// One entry per node, in graph order, between the edges' layout
// conversions. INVALID_ARGUMENT when the graph's
// shapes have not been inferred.
StatusOr<std::vector<ModelOp>> model_ops(const graph::Graph& g, const ModelQueryOptions& options);

}  // namespace tessera::perfmodel
