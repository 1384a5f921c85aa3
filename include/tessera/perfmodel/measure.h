// Measuring one op query on a device: the ground truth the predictor learns.
//
// The op runs once eagerly (its program compiles, conv weights are
// prepared), then once inside a trace, and the trace is replayed
// `replays` times (more for short ops: about 5 ms of replays, at most 401)
// with the device profiler on. A replay's time is the sum
// of its launches' kernel-only durations (the original's "device kernel
// duration"); their 20%-trimmed mean and their range are returned with the
// kernels that ran. Inputs hold fixed-seed values in [-1, 1).
//
// Errors: the op's own validation (INVALID_ARGUMENT, UNIMPLEMENTED for a
// combination the op does not take; a sweep skips those points), and
// RESOURCE_EXHAUSTED when the tensors do not fit.
#pragma once

#include <string>
#include <vector>

#include "tessera/device/device.h"
#include "tessera/perfmodel/op_query.h"

namespace tessera::perfmodel {

struct Measurement {
  double time_ns = 0, min_ns = 0, max_ns = 0;  // 20%-trimmed mean, range
  uint32_t replays = 0;
  uint32_t launches = 0;  // per replay
  std::string kernels;    // the launches' kernel names, space-separated
};

// The device wants a TRACE region (open_device's trace_region_size; 64 MiB serves the sweeps' sizes):
// without room for the op's trace it is timed eagerly (profiler.h's traced_kernel_times).
StatusOr<Measurement> measure_op(Device& device, const OpQuery& query, uint32_t replays = 9);

}  // namespace tessera::perfmodel
