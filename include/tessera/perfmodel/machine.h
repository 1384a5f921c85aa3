// The machine a measurement or a learned model belongs to: what the CPU is
// (model, kernel tier, features, cores, caches), how many workers ran the
// ops, and its measured peaks (FLOP/s and bandwidth), which the roofline
// features and the predictor's floor are computed from.
//
// Timings carry over between machines only as far as their fingerprints
// agree; a learned model loaded on another machine warns, naming each
// difference (fingerprint_differences).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/base/status.h"

namespace tessera::perfmodel {

struct MachineFingerprint {
  std::string cpu_model;                               // /proc/cpuinfo's model name
  std::string kernel_tier;                             // "avx512", "avx2", "scalar" (kernel_isa())
  std::string cpu_features;                            // cpu_features().to_string()
  uint32_t cores = 0;                                  // logical CPUs
  uint32_t workers = 0;                                // the device's worker threads
  uint64_t l1d_bytes = 0, l2_bytes = 0, l3_bytes = 0;  // per core (l1d, l2), shared (l3)
  // Measured with `workers` threads (measure_peaks); 0 until measured.
  double fma_gflops = 0;   // FP32 FMA
  double bf16_gflops = 0;  // the peak bfloat16 convolutions run at (AMX, BF16 dot, else FP32)
  double dram_gbps = 0;    // copy bandwidth (read + write) over 256 MiB
  double cache_gbps = 0;   // copy bandwidth over 64 KiB per worker (L1/L2-resident)

  bool operator==(const MachineFingerprint&) const = default;
};

// This machine's static facts for a device of `workers` threads (0: one per
// physical core, the device's default); no peaks.
MachineFingerprint this_machine(uint32_t workers = 0);
// Runs the peak loops and bandwidth copies (about two seconds).
Status measure_peaks(MachineFingerprint& m);

// "kernel tier: avx512 -> avx2", one line per static fact that differs
// (peaks are measurements and may drift; they differ when over 25% apart).
std::vector<std::string> fingerprint_differences(const MachineFingerprint& was, const MachineFingerprint& now);

std::string to_json(const MachineFingerprint& m);
StatusOr<MachineFingerprint> parse_fingerprint(std::string_view json);

// "2026-12-02T21:03:42Z"
std::string utc_now();

// The Tessera build ("git describe" at configure time).
std::string_view tessera_commit();

}  // namespace tessera::perfmodel
