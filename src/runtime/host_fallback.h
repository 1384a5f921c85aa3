// The host fallback as a device op (internal to the runtime): one launch
// that reads its float32 ROW_MAJOR inputs, evaluates a node with the host
// reference kernel (graph/host_eval.h) and writes its outputs. Being a
// launch, it orders with the queue's other work and is recorded in traces.
#pragma once
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tessera/graph/graph.h"
#include "tessera/tensor/tensor.h"

namespace tessera::runtime {

struct FallbackNode {
  std::string key;  // unique program key (model id, node name)
  graph::Node node;
  int opset = 17;
  // Per node input: the constant, or nullopt for a run-time input.
  std::vector<std::optional<graph::HostTensor>> constants;
  std::vector<std::vector<int64_t>> input_dims;   // logical dims of every input
  std::vector<graph::ElemType> input_types;       // integer values travel as exact float32
  std::vector<std::vector<int64_t>> output_dims;
  std::vector<graph::ElemType> output_types;
};

// Runs `node` on `inputs` (one per run-time input, in node input order;
// float32 ROW_MAJOR; integer tensors hold their values as float32) into newly allocated float32 ROW_MAJOR outputs in DRAM.
StatusOr<std::vector<Tensor>> run_host_fallback(Device& device, const std::shared_ptr<const FallbackNode>& node,
                                                std::span<const Tensor> inputs, uint8_t cq_id);

}  // namespace tessera::runtime
