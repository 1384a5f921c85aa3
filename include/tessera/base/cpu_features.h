// Which vector ISAs this CPU runs, detected once. Kernels are compiled per ISA
// (files ending _avx512.cc / _avx2.cc) and chosen with these flags at program
// compile time, never inside a kernel.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tessera {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512_bf16 = false;
  bool avx512_vnni = false;
  // AMX tiles with the BF16 tile multiply, enabled by the OS (XCR0 bits 17 and
  // 18). A process still asks Linux for the tile state before its first tile
  // instruction (arch_prctl ARCH_REQ_XCOMP_PERM); oneDNN does so itself.
  bool amx_bf16 = false;

  // The AVX-512 kernel set needs F, BW, VL, DQ and BF16.
  bool has_avx512_kernels() const { return avx512f && avx512bw && avx512vl && avx512dq && avx512_bf16; }
  std::string to_string() const;  // "avx2 fma avx512f ..."
};

// The CPU's features, read once. TESSERA_CPU_ISA=avx2 (or scalar) in the
// environment hides the wider features, as on a CPU without them: with
// oneDNN's own DNNL_MAX_CPU_ISA=AVX2 the tests then run as on an AVX2-only
// machine (only instructions the CPU lacks still fault, which this cannot
// emulate). Any other value is ignored.
const CpuFeatures& cpu_features();

// The widest kernel set this CPU runs, within the limit tests may set.
enum class KernelIsa : uint8_t { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };
KernelIsa kernel_isa();
// Caps the kernel set (tests compare ISA paths); affects only programs
// compiled after the call.
void set_kernel_isa_limit(KernelIsa limit);
std::string_view kernel_isa_name(KernelIsa isa);  // "scalar", "avx2", "avx512"

// set_avx512_kernels_enabled(false) forces the portable scalar kernels (the
// reference-exact path); true lifts the cap.
void set_avx512_kernels_enabled(bool enabled);
bool avx512_kernels_enabled();

}  // namespace tessera
