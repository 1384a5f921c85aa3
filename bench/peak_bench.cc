// Measured peaks of this machine: FP32 FMA, BF16 dot-product and (where the
// CPU has it) AMX BF16 tile FLOP/s and
// memory bandwidth, on 1 thread and on every core. Kernel targets ("85% of
// peak", "70% of bandwidth") are stated against these numbers.
//
//   bench_peak
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "tessera/base/cpu_features.h"
#include "tessera/base/thread_pool.h"

#include "peak.h"

namespace {

using namespace tessera;

double bandwidth(ThreadPool& pool, size_t bytes, int kind) {  // 0 read, 1 write, 2 copy
  const size_t n = bytes / 4;
  std::vector<float> a(n, 1.0f), b(n, 0.0f);
  const uint32_t parts = static_cast<uint32_t>(pool.num_threads());
  std::vector<float> sums(parts);
  auto t = bench::time_it(9, [&] {
    auto body = [&](uint32_t s, uint32_t e) {
      for (uint32_t p = s; p < e; ++p) {
        size_t lo = n * p / parts, hi = n * (p + 1) / parts;
        if (kind == 0) {
          float acc[16] = {};
          for (size_t i = lo; i + 16 <= hi; i += 16)
            for (int k = 0; k < 16; ++k) acc[k] += a[i + static_cast<size_t>(k)];
          sums[p] = acc[0] + acc[15];
        } else if (kind == 1) {
          std::memset(&b[lo], 0, (hi - lo) * 4);
        } else {
          std::memcpy(&b[lo], &a[lo], (hi - lo) * 4);
        }
      }
    };
    pool.parallel_for(parts, 1, body);
  });
  return (kind == 2 ? 2.0 : 1.0) * static_cast<double>(bytes) / t.median_s / 1e9;
}

}  // namespace

int main() {
  std::printf("# Measured peaks (%s; peak loops: %s)\n\n", cpu_features().to_string().c_str(),
              std::string(bench::peak_isa()).c_str());
  if (!bench::has_bf16_dot())
    std::printf("No BF16 dot-product instruction: bfloat16 computes in float32, and its peak is the FP32 one.\n\n");
  std::printf("| threads | FP32 FMA GFLOP/s | BF16 dot GFLOP/s | AMX BF16 GFLOP/s | VNNI u8s8 GOP/s | read GB/s | "
              "write GB/s | copy GB/s (read+write) |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  const int all = static_cast<int>(std::thread::hardware_concurrency());
  for (int threads : {1, all}) {
    ThreadPool pool(threads);
    const size_t bytes = size_t{256} << 20;
    const double amx = bench::amx_bf16_peak_gflops(threads);
    const double vnni = bench::dot_u8s8_peak_gops(threads);
    std::printf("| %d | %.0f | %.0f | %s | %s | %.1f | %.1f | %.1f |\n", threads, bench::fma_f32_peak_gflops(threads),
                bench::dot_bf16_peak_gflops(threads), amx > 0 ? std::to_string(std::lround(amx)).c_str() : "-",
                vnni > 0 ? std::to_string(std::lround(vnni)).c_str() : "-", bandwidth(pool, bytes, 0),
                bandwidth(pool, bytes, 1), bandwidth(pool, bytes, 2));
  }
  return 0;
}
