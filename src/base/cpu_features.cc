#include "tessera/base/cpu_features.h"

#include <cpuid.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string_view>

namespace tessera {

namespace {

// CPUID leaf 7's AMX-BF16 and AMX-TILE bits, and the OS's XCR0 tile state
// (XTILECFG, XTILEDATA). GCC 12's __builtin_cpu_supports has no AMX names.
bool amx_bf16_enabled() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool bf16 = (d >> 22) & 1, tile = (d >> 24) & 1;
  if (!bf16 || !tile || !__get_cpuid(1, &a, &b, &c, &d) || !((c >> 27) & 1)) return false;  // OSXSAVE
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  constexpr unsigned kTileState = (1u << 17) | (1u << 18);
  return (lo & kTileState) == kTileState;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = [] {
    CpuFeatures c;
    __builtin_cpu_init();
    c.avx2 = __builtin_cpu_supports("avx2");
    c.fma = __builtin_cpu_supports("fma");
    c.avx512f = __builtin_cpu_supports("avx512f");
    c.avx512bw = __builtin_cpu_supports("avx512bw");
    c.avx512vl = __builtin_cpu_supports("avx512vl");
    c.avx512dq = __builtin_cpu_supports("avx512dq");
    c.avx512_bf16 = __builtin_cpu_supports("avx512bf16");
    c.avx512_vnni = __builtin_cpu_supports("avx512vnni");
    c.amx_bf16 = amx_bf16_enabled();
    const char* isa = std::getenv("TESSERA_CPU_ISA");
    const std::string_view cap = isa ? isa : "";
    if (cap == "avx2" || cap == "scalar") {
      c.avx512f = c.avx512bw = c.avx512vl = c.avx512dq = c.avx512_bf16 = c.avx512_vnni = c.amx_bf16 = false;
      if (cap == "scalar") c.avx2 = c.fma = false;
    }
    return c;
  }();
  return f;
}

std::string CpuFeatures::to_string() const {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(avx2, "avx2");
  add(fma, "fma");
  add(avx512f, "avx512f");
  add(avx512bw, "avx512bw");
  add(avx512vl, "avx512vl");
  add(avx512dq, "avx512dq");
  add(avx512_bf16, "avx512_bf16");
  add(avx512_vnni, "avx512_vnni");
  add(amx_bf16, "amx_bf16");
  return s;
}

namespace {
std::atomic<KernelIsa> g_limit{KernelIsa::kAvx512};
}

KernelIsa kernel_isa() {
  const CpuFeatures& f = cpu_features();
  const KernelIsa best = f.has_avx512_kernels() ? KernelIsa::kAvx512
                         : f.avx2 && f.fma      ? KernelIsa::kAvx2
                                                : KernelIsa::kScalar;
  return std::min(best, g_limit.load());
}

void set_kernel_isa_limit(KernelIsa limit) { g_limit = limit; }

std::string_view kernel_isa_name(KernelIsa isa) {
  constexpr std::string_view names[] = {"scalar", "avx2", "avx512"};
  return names[static_cast<int>(isa)];
}

void set_avx512_kernels_enabled(bool enabled) { g_limit = enabled ? KernelIsa::kAvx512 : KernelIsa::kScalar; }
bool avx512_kernels_enabled() { return kernel_isa() == KernelIsa::kAvx512; }

}  // namespace tessera
