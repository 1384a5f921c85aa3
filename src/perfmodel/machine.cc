#include "tessera/perfmodel/machine.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "peak.h"  // bench/peak.h: the FMA and BF16 peak loops bench_peak prints
#include "tessera/base/cpu_features.h"
#include "tessera/base/thread_pool.h"
#include "tessera/device/descriptor.h"

namespace tessera::perfmodel {
namespace {

using nlohmann::json;

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0)
      if (auto c = line.find(':'); c != std::string::npos) return line.substr(std::min(line.size(), c + 2));
  return "unknown";
}

uint64_t cache_bytes(int name) {
  const long v = sysconf(name);
  return v > 0 ? static_cast<uint64_t>(v) : 0;
}

// Copy bandwidth (bytes read + written per second) of `threads` threads each
// copying its own `bytes_per_thread`, median of 7 after 2 warm-ups.
double copy_gbps(ThreadPool& pool, size_t bytes_per_thread, int passes) {
  const uint32_t parts = static_cast<uint32_t>(pool.num_threads());
  std::vector<std::vector<char>> a(parts, std::vector<char>(bytes_per_thread, 1)),
      b(parts, std::vector<char>(bytes_per_thread, 0));
  std::vector<double> t;
  for (int rep = 0; rep < 9; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    auto body = [&](uint32_t s, uint32_t e) {
      for (uint32_t p = s; p < e; ++p)
        for (int i = 0; i < passes; ++i) std::memcpy(b[p].data(), a[p].data(), bytes_per_thread);
    };
    pool.parallel_for(parts, 1, body);
    if (rep >= 2) t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return 2.0 * static_cast<double>(bytes_per_thread) * parts * passes / t[t.size() / 2] / 1e9;
}

}  // namespace

MachineFingerprint this_machine(uint32_t workers) {
  MachineFingerprint m;
  m.cpu_model = cpu_model_name();
  m.kernel_tier = std::string(kernel_isa_name(kernel_isa()));
  m.cpu_features = cpu_features().to_string();
  m.cores = std::max(1u, std::thread::hardware_concurrency());
  m.workers = workers ? workers : static_cast<uint32_t>(std::max<size_t>(1, physical_core_cpus().size()));
  m.l1d_bytes = cache_bytes(_SC_LEVEL1_DCACHE_SIZE);
  m.l2_bytes = cache_bytes(_SC_LEVEL2_CACHE_SIZE);
  m.l3_bytes = cache_bytes(_SC_LEVEL3_CACHE_SIZE);
  return m;
}

Status measure_peaks(MachineFingerprint& m) {
  const int threads = static_cast<int>(std::max(1u, m.workers));
  m.fma_gflops = bench::fma_f32_peak_gflops(threads, 5'000'000, 5);
  m.bf16_gflops = bench::bf16_peak_gflops(threads);
  if (m.fma_gflops <= 0) m.fma_gflops = 2.0 * threads;  // no vector loops: a scalar FMA a cycle at ~1 GHz
  if (m.bf16_gflops <= 0) m.bf16_gflops = m.fma_gflops;
  ThreadPool pool(threads);
  m.dram_gbps = copy_gbps(pool, (size_t{256} << 20) / static_cast<size_t>(threads), 1);
  m.cache_gbps = copy_gbps(pool, size_t{64} << 10, 64);
  if (!(m.dram_gbps > 0) || !(m.cache_gbps > 0))
    return internal_error("measure_peaks: the bandwidth copies took no time");
  return ok_status();
}

std::vector<std::string> fingerprint_differences(const MachineFingerprint& was, const MachineFingerprint& now) {
  std::vector<std::string> d;
  auto fact = [&](const char* name, const auto& a, const auto& b) {
    if (a != b) d.push_back(fmt::format("{}: {} -> {}", name, a, b));
  };
  fact("cpu model", was.cpu_model, now.cpu_model);
  fact("kernel tier", was.kernel_tier, now.kernel_tier);
  fact("cpu features", was.cpu_features, now.cpu_features);
  fact("logical cpus", was.cores, now.cores);
  fact("workers", was.workers, now.workers);
  fact("l1d bytes", was.l1d_bytes, now.l1d_bytes);
  fact("l2 bytes", was.l2_bytes, now.l2_bytes);
  fact("l3 bytes", was.l3_bytes, now.l3_bytes);
  auto peak = [&](const char* name, double a, double b) {
    if (a > 0 && b > 0 && std::fabs(a - b) > 0.25 * std::max(a, b))
      d.push_back(fmt::format("{}: {:.1f} -> {:.1f}", name, a, b));
  };
  peak("fp32 fma GFLOP/s", was.fma_gflops, now.fma_gflops);
  peak("bf16 GFLOP/s", was.bf16_gflops, now.bf16_gflops);
  peak("dram GB/s", was.dram_gbps, now.dram_gbps);
  peak("cache GB/s", was.cache_gbps, now.cache_gbps);
  return d;
}

std::string to_json(const MachineFingerprint& m) {
  return json{{"cpu_model", m.cpu_model},       {"kernel_tier", m.kernel_tier},
              {"cpu_features", m.cpu_features}, {"cores", m.cores},
              {"workers", m.workers},           {"l1d_bytes", m.l1d_bytes},
              {"l2_bytes", m.l2_bytes},         {"l3_bytes", m.l3_bytes},
              {"fma_gflops", m.fma_gflops},     {"bf16_gflops", m.bf16_gflops},
              {"dram_gbps", m.dram_gbps},       {"cache_gbps", m.cache_gbps}}
      .dump();
}

StatusOr<MachineFingerprint> parse_fingerprint(std::string_view text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return invalid_argument_error("machine fingerprint: not a JSON object");
  MachineFingerprint m;
  auto get = [&](const char* key, auto& field) -> Status {
    auto it = j.find(key);
    using T = std::decay_t<decltype(field)>;
    const bool ok = it != j.end() && (std::is_same_v<T, std::string> ? it->is_string() : it->is_number());
    if (!ok) return invalid_argument_error("machine fingerprint: '{}' is missing or of the wrong type", key);
    field = it->get<T>();
    return ok_status();
  };
  TS_RETURN_IF_ERROR(get("cpu_model", m.cpu_model));
  TS_RETURN_IF_ERROR(get("kernel_tier", m.kernel_tier));
  TS_RETURN_IF_ERROR(get("cpu_features", m.cpu_features));
  TS_RETURN_IF_ERROR(get("cores", m.cores));
  TS_RETURN_IF_ERROR(get("workers", m.workers));
  TS_RETURN_IF_ERROR(get("l1d_bytes", m.l1d_bytes));
  TS_RETURN_IF_ERROR(get("l2_bytes", m.l2_bytes));
  TS_RETURN_IF_ERROR(get("l3_bytes", m.l3_bytes));
  TS_RETURN_IF_ERROR(get("fma_gflops", m.fma_gflops));
  TS_RETURN_IF_ERROR(get("bf16_gflops", m.bf16_gflops));
  TS_RETURN_IF_ERROR(get("dram_gbps", m.dram_gbps));
  TS_RETURN_IF_ERROR(get("cache_gbps", m.cache_gbps));
  return m;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string_view tessera_commit() { return TESSERA_COMMIT; }

}  // namespace tessera::perfmodel
