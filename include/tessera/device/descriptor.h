// DeviceDescriptor: what a device looks like to configurations written for it.
//
// The native CPU descriptor is read from the machine: a 1 x N grid of the
// machine's physical cores, L1 = each core's private L2 cache (the budget a
// core's working set should fit), one DRAM bank per NUMA node sized from
// physical memory. The environment variable TESSERA_CPU_L1_SIZE (bytes)
// overrides that L1 size, so that a test suite sees the same device on every
// machine (CTest sets 1 MiB; this machine's L2 may be 512 KiB). The built-in `wormhole_b0` descriptor reproduces the
// original's n150 user grid (8x8 cores, 1,499,136 B of L1 each, 12 DRAM banks
// of 1 GiB) so that seed-style configurations, including their L1 failures,
// run unchanged; its memory is host memory reserved lazily.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/base/status.h"
#include "tessera/device/core_coord.h"

namespace tessera {

struct DeviceDescriptor {
  std::string name;                     // "cpu" or "wormhole_b0"
  CoreCoord grid;                       // compute grid size: x columns, y rows
  uint64_t l1_size_per_core = 0;        // bytes
  // Bytes of the cache the cores share (the CPU's L3, from hwloc, at most
  // 48 MiB per core that shares it: a VM sees its host's whole L3; 0 where
  // there is none or it is unknown). Not part of the seeds' descriptor:
  // compile-time choices such as micro-batching size themselves by it.
  uint64_t shared_cache_size = 0;
  uint32_t num_dram_banks = 0;
  uint64_t dram_bank_size = 0;          // bytes per bank
  uint32_t l1_alignment = 16;           // bytes; buffer addresses and pages
  uint32_t dram_alignment = 32;
  // Row pages in DRAM start this many bytes apart (0: dram_alignment). The
  // CPU device packs them (1): its DRAM is host memory, and padding a row of
  // 1-15 float32 channels to a 64-byte page made every op on it move 4-64x
  // the data, one page at a time.
  uint32_t dram_page_alignment = 0;
  std::string isa;                      // vector ISA features used by kernels
  std::vector<CoreCoord> disabled_cores;  // inside `grid`, not usable
  uint32_t host_cores = 1;              // physical cores backing the device
  bool emulated = false;                // true: a descriptor of another machine

  uint32_t num_cores() const { return grid.x * grid.y; }
  uint32_t core_index(CoreCoord c) const { return c.y * grid.x + c.x; }
  bool is_usable(CoreCoord c) const;
  // The grid ops shard over (the original's compute_with_storage_grid_size):
  // the largest rectangle of usable cores from (0, 0), so that a harvested
  // device's disabled cores are never given work; `grid` when none are.
  CoreCoord compute_grid() const;
  std::string to_string() const;  // one line for logs and the demo
};

StatusOr<DeviceDescriptor> native_cpu_descriptor();
// One logical CPU (the OS's index) per physical core this process may run
// on, in hwloc's order: where a device pins its threads. Empty where hwloc
// cannot read the topology.
const std::vector<int>& physical_core_cpus();
// TESSERA_CPU_L1_SIZE's value: a decimal byte count in 4096..2^32.
StatusOr<uint64_t> parse_l1_size(std::string_view text);
DeviceDescriptor wormhole_b0_descriptor();
// "cpu", "wormhole_b0", or a path ending in .json: an emulated device of
// another shape (descriptor.cc lists the keys; wormhole_b0's alignments
// where they are left out). INVALID_ARGUMENT naming the key for a bad file.
StatusOr<DeviceDescriptor> find_device_descriptor(std::string_view name);

}  // namespace tessera
