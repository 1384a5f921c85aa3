// Thread placement: pinning a thread to one logical CPU.
//
// A device pins its command-queue threads and pool workers to distinct
// physical cores (DeviceParams::pin_threads). Unpinned, the scheduler put a
// pool worker woken for a launch on the same vCPU as the queue thread that
// woke it, and the two shared it for tens of milliseconds: a launch split
// over both ran at half speed (ResNet-50 with 30 ms between frames: p99
// latency 20.7-31.0 ms unpinned, 18.7-19.2 pinned; bench/RESULTS.md,
// twenty-first run).
#pragma once

namespace tessera {

// Restricts the calling thread to logical CPU `cpu` (the OS's index, as
// hwloc's PU os_index). Returns false, changing nothing, where the OS
// refuses (a CPU outside the process's allowed set) or cpu < 0.
bool pin_current_thread(int cpu);

// The logical CPU the calling thread is restricted to, or -1 where it may
// run on several.
int current_thread_pinned_cpu();

}  // namespace tessera
