// Device profiler: per-launch timestamps taken on the command queues, the
// "device (kernel-only) time" of the original's profiler (CUDA: events
// around each kernel). Off by default; enabling it preallocates `capacity`
// records, so recording allocates nothing (also during trace replay, where
// each recorded launch is timed). Records past the capacity are counted as
// dropped, never silently lost.
//
//   TS_RETURN_IF_ERROR(enable_profiler(*device));
//   ... run ops or replay traces ...
//   TS_ASSIGN_OR_RETURN(DeviceProfile p, read_profile(*device));   // synchronizes, clears
//   TS_RETURN_IF_ERROR(write_chrome_trace(p, "ops.json"));         // chrome://tracing, Perfetto
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tessera/device/device.h"

namespace tessera {

struct OpTiming {
  std::string key;          // the program's descriptor string
  std::string kernel_name;  // the kernel chosen for it
  uint8_t cq_id = 0;
  bool traced = false;               // run by a trace replay
  int64_t start_ns = 0, end_ns = 0;  // steady clock
  double duration_us() const { return static_cast<double>(end_ns - start_ns) / 1e3; }
};

struct DeviceProfile {
  std::vector<OpTiming> ops;  // in completion order per queue
  uint64_t dropped = 0;       // launches past the capacity
  // Sum of launch durations (kernel-only time).
  double total_us() const;
};

Status enable_profiler(Device& device, size_t capacity = 1 << 16);
Status disable_profiler(Device& device);
// Synchronizes the device, returns what was recorded since the last read and clears it.
StatusOr<DeviceProfile> read_profile(Device& device);
// The kernel time of `call` (ops it enqueues on queue `cq_id`) as a model
// replays it: captured once as a trace, replayed once to warm caches and
// page tables, then `replays` times with the profiler on, each replay to
// completion. Run `call` once eagerly before (the programs it compiles and
// the memory it first touches are no part of its time). A device without
// room for the trace (resource exhausted) times `call` eagerly instead:
// once untimed, then `replays` times back to back. The profiler is off
// after (what it held is cleared). Errors: the call's, a capture's, or
// INTERNAL when the runs recorded unevenly.
struct TracedTimes {
  std::vector<double> ns;  // each replay's launches' summed kernel time, in replay order
  uint32_t launches = 0;   // per replay
  std::string kernels;     // the launches' kernel names, space separated
};
StatusOr<TracedTimes> traced_kernel_times(Device& device, const std::function<Status()>& call, uint32_t replays,
                                          uint8_t cq_id = 0);

// Chrome trace event format: one complete event per launch, one row per queue; the event is named
// after the kernel and its args carry the op descriptor ("op").
Status write_chrome_trace(const DeviceProfile& profile, const std::string& path);

}  // namespace tessera
