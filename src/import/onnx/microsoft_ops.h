// ONNX Runtime's com.microsoft quantized ops (QLinearAdd, QLinearMul,
// QLinearConcat, QLinearGlobalAveragePool, QLinearAveragePool,
// QLinearSigmoid, QLinearLeakyRelu) expanded at import into standard ONNX
// ops: DequantizeLinear of each (x, scale, zero point) operand, the float op
// with the node's attributes, QuantizeLinear of its result (internal to the
// importer).
#pragma once
#include <string>
#include <vector>

#include "tessera/graph/graph.h"

namespace tessera::importer {

bool is_microsoft_op(const std::string& op);
// "QLinearAdd, QLinearAveragePool, ..." for error messages.
std::string microsoft_ops();
// The standard nodes for n (a com.microsoft node whose inputs and outputs are
// value ids of g; the new intermediate values are added to g). UNIMPLEMENTED
// for other ops and channels_last; INVALID_ARGUMENT for malformed operands.
StatusOr<std::vector<graph::Node>> expand_microsoft_op(graph::Graph& g, const graph::Node& n);

}  // namespace tessera::importer
