// The compiler's planning passes (src/runtime only), each a function of the
// graph and the options that returns its plan. compile() stores the plans in
// CompiledModel::Impl, where lowering and running read them; plans_test.cc
// tests each pass on small graphs of its own.
//
//   plan_micro_batch.cc  runs of per-image ops a few images at a time
//   plan_precision.cc    values kept in bfloat16 at LoFi
//   plan_memory.cc       liveness: each value released after its last reader
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tessera/base/status.h"
#include "tessera/device/descriptor.h"
#include "tessera/graph/graph.h"
#include "tessera/runtime/compiled_model.h"

namespace tessera::runtime {

// A micro-batched run of nodes [begin, end) (CompileOptions::micro_batch):
// its nodes read `in` (the whole batch) as `in_part`, one group's images (a
// view), and leave `out_part`, copied into `out` (the whole batch). Every
// value the nodes make has `per` images.
struct MicroBatch {
  size_t begin = 0, end = 0;
  int in = -1, in_part = -1, out = -1, out_part = -1;
  uint32_t groups = 1, per = 1;
};

// ---- Micro-batching (plan_micro_batch.cc)

// What a group of images may occupy: the activation and weight dtypes
// (bytes per value) and the cache it should fit in.
struct MicroBatchBudget {
  DataType act_dtype = DataType::FLOAT32;
  DataType weights_dtype = DataType::FLOAT32;
  uint64_t cache_bytes = 0;
};
// The runs of `per` images per group that the budget favours, in node order
// (in_part / out_part unset). Empty when `per` does not divide the first
// input's batch or no run saves bytes.
std::vector<MicroBatch> find_micro_batches(const graph::Graph& g, uint32_t per, const MicroBatchBudget& budget);
// The runs compile() uses: CompileOptions::micro_batch images per group, or
// by default the best of one per worker and one. Empty where the device's
// DRAM has more than one bank (batch views need one) or describes another
// machine (unless asked). InvalidArgument when micro_batch does not divide
// the batch.
StatusOr<std::vector<MicroBatch>> plan_micro_batches(const graph::Graph& g, const CompileOptions& opt,
                                                     const DeviceDescriptor& device, uint32_t workers);
// Rewrites each run's nodes onto per-group values (a new value each for
// in_part and out_part, the values inside a run resized to `per` images).
// Returns one line per run for the CompileReport.
std::vector<std::string> apply_micro_batches(graph::Graph& g, std::vector<MicroBatch>& runs);

// ---- Precision (plan_precision.cc)

// Whether node `n` computes on the bfloat16-rounded values of its input `slot`.
using RoundsInput = std::function<bool(const graph::Node& n, size_t slot)>;
// Per value: whether it leaves its producer in bfloat16 although the model
// runs in float32. A fixed point: start from every value a Conv,
// ConvTranspose (but SiLU ones and convs with a residual), MaxPool or Concat
// makes, and drop those read by anything but a reader that rounds them
// (`rounds_input`) or a MaxPool / Concat whose own result stays, and the
// MaxPool / Concat results whose inputs did not all stay. Graph outputs and
// micro-batches' values keep float32.
std::vector<bool> plan_bfloat16_values(const graph::Graph& g, std::span<const MicroBatch> runs,
                                       const RoundsInput& rounds_input);

// ---- Memory (plan_memory.cc)

// A conv that reads a channel concatenation's inputs itself (conv2d_concat):
// the conv's node and the concat's inputs.
using FusedConcat = std::pair<size_t, std::vector<int>>;
// Per node: the values whose last reader it is (released after its step),
// and outputs nobody reads. Graph inputs (the caller's), graph outputs and
// constants are never released; a fused concat's inputs live to their conv;
// a run's whole input and output part are released by the run itself.
std::vector<std::vector<int>> plan_liveness(const graph::Graph& g, std::span<const FusedConcat> fused_concats,
                                            std::span<const MicroBatch> runs);

}  // namespace tessera::runtime
