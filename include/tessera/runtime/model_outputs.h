// A model's outputs as the model defines them, from what its compiled part
// returned: each host tensor as a float32 graph::HostTensor of its shape, or,
// for a model with a host tail (graph/host_tail.h: a detector's
// post-processing), those run through the tail, which gives float32 and int64
// outputs in the shapes their data gives (empty ones too).
//
//   TS_ASSIGN_OR_RETURN(auto ys, model.run(inputs));     // device tensors
//   ... each y.cpu() ...
//   TS_ASSIGN_OR_RETURN(auto outputs, runtime::model_outputs(host, tail));
//
// Session::run_outputs, the run_inference queues and `tessera run` all
// finish a model this way.
#pragma once

#include <span>
#include <vector>

#include "tessera/graph/host_tail.h"
#include "tessera/tensor/tensor.h"

namespace tessera::runtime {

// `compiled_outputs`: host tensors, the compiled model's outputs in order;
// `tail`: null where the model has none. A device tensor is
// INVALID_ARGUMENT; the tail's errors pass through.
StatusOr<std::vector<graph::HostTensor>> model_outputs(std::span<const Tensor> compiled_outputs,
                                                       const graph::HostTail* tail);

}  // namespace tessera::runtime
