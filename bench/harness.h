// A small timing harness for bench/: runs a body `reps` times after warm-up
// and reports median, min and max in one table row, so that a kernel and its
// anchor (memcpy, memory bandwidth) are measured side by side in one run.
// Google Benchmark reports one benchmark per row; the tables here need ratios
// between rows measured in the same run, so this stays a few lines of our own.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tessera/base/affinity.h"
#include "tessera/base/status.h"
#include "tessera/base/thread_pool.h"
#include "tessera/device/profiler.h"

namespace tessera::bench {

struct Timing {
  double median_s, min_s, max_s;
};

// Per call, the sum of its launches' kernel-only times in seconds, from a
// profile of `calls` calls that each launched the same number of kernels
// (the device profiler's time: what ONNX Runtime's profiler reports for a
// node). Empty when the profile does not divide into `calls` calls or
// dropped records.
inline std::vector<double> kernel_seconds_per_call(const DeviceProfile& profile, size_t calls) {
  const size_t per_call = calls ? profile.ops.size() / calls : 0;
  if (per_call == 0 || profile.ops.size() % calls != 0 || profile.dropped != 0) return {};
  std::vector<double> s(calls, 0.0);
  for (size_t i = 0; i < profile.ops.size(); ++i) s[i / per_call] += profile.ops[i].duration_us() * 1e-6;
  return s;
}

inline Timing time_it(int reps, const std::function<void()>& body, int warmup = 2) {
  for (int i = 0; i < warmup; ++i) body();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto a = std::chrono::steady_clock::now();
    body();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t.front(), t.back()};
}

// Runs body for at least `seconds` before time_it: after its threads slept
// (between benchmark rows), a device's queue thread and worker can share one
// vCPU for the first tens of milliseconds (the scheduler places a woken
// thread beside its waker), which halved short compute-bound launches: a
// 28x28x192 depthwise launch, 200 at a time, ran at 23 us for the first
// 2,000-7,000 launches and at 11 us after.
inline void settle(double seconds, const std::function<void()>& body) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  do body();
  while (std::chrono::steady_clock::now() < until);
}

// Benchmarks stop at the first error: a failed op makes every number after it
// meaningless.
#define CHECK_OK(expr)                                                 \
  do {                                                                 \
    ::tessera::Status s_ = (expr);                                     \
    if (!s_.ok()) {                                                    \
      std::fprintf(stderr, "%s: %s\n", #expr, s_.to_string().c_str()); \
      std::exit(1);                                                    \
    }                                                                  \
  } while (0)

template <class T>
T value_or_die(StatusOr<T> r) {
  if (!r.ok()) {
    std::fprintf(stderr, "%s\n", r.status().to_string().c_str());
    std::exit(1);
  }
  return std::move(r).value();
}

// One conv layer of bench/layers/conv_layers.txt: "set name h w c k r
// stride count [groups]" per line ('#' starts a comment line).
struct ConvLayer {
  std::string set, name;
  uint32_t h, w, c, k, r, stride;
  int count;            // occurrences in the network
  uint32_t groups = 1;  // optional tenth column (c for a depthwise conv)
};

// Every layer of the file (of `only_set` when not empty); exits with a
// message naming the bad line on a malformed one.
inline std::vector<ConvLayer> read_conv_layers(const std::string& path, const char* tool,
                                               const std::string& only_set = "") {
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "%s: cannot read %s\n", tool, path.c_str());
    std::exit(2);
  }
  std::vector<ConvLayer> layers;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream f(line);
    ConvLayer l;
    if (!(f >> l.set >> l.name >> l.h >> l.w >> l.c >> l.k >> l.r >> l.stride >> l.count)) {
      std::fprintf(stderr, "%s: expected 'set name h w c k r stride count [groups]', found '%s'\n", tool,
                   line.c_str());
      std::exit(2);
    }
    if (!(f >> l.groups)) l.groups = 1;
    if (l.groups == 0 || l.c % l.groups != 0 || l.k % l.groups != 0) {
      std::fprintf(stderr, "%s: groups %u do not divide the channels: '%s'\n", tool, l.groups, line.c_str());
      std::exit(2);
    }
    if (only_set.empty() || l.set == only_set) layers.push_back(l);
  }
  return layers;
}

// "<set>.<name>\t<median ms>" lines written by bench/ort/*.js.
inline std::map<std::string, double> read_ort(const std::string& path) {
  std::map<std::string, double> ms;
  std::ifstream in(path);
  std::string key;
  double v;
  while (in >> key >> v) ms[key] = v;
  return ms;
}

// The VM's placement of its two vCPUs, which the host changes every few
// seconds: the mean round trip of a cache line between threads pinned to
// `cpu_a` and `cpu_b`. On the development VM it reads 50-110 ns with both
// vCPUs in one core complex (copy bandwidth 42-45 GB/s) and about 500 ns
// with them in two (67-81 GB/s: two links to memory), so memory-bound rows
// gain from the second placement and short launches lose (bench/RESULTS.md,
// twenty-seventh run).
inline double core_round_trip_ns(int cpu_a, int cpu_b, long trips = 20000) {
  alignas(64) std::atomic<long> ping{0};
  alignas(64) std::atomic<long> pong{0};
  double ns = 0;
  std::thread answer([&] {
    pin_current_thread(cpu_b);
    for (long i = 1; i <= trips; ++i) {
      while (ping.load(std::memory_order_acquire) != i) {
      }
      pong.store(i, std::memory_order_release);
    }
  });
  std::thread ask([&] {
    pin_current_thread(cpu_a);
    const auto t0 = std::chrono::steady_clock::now();
    for (long i = 1; i <= trips; ++i) {
      ping.store(i, std::memory_order_release);
      while (pong.load(std::memory_order_acquire) != i) {
      }
    }
    ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / trips;
  });
  ask.join();
  answer.join();
  return ns;
}

// Memory bandwidth of this machine with a pool's threads over buffers of
// `bytes` each (touched once, here): read (sum), write (memset), copy
// (memcpy, read + write bytes counted). Kept for a run, the copy measure is
// also each benchmark row's anchor, taken right before it, since the VM's
// placement (core_round_trip_ns) changes the bandwidth between rows.
class BandwidthProbe {
 public:
  explicit BandwidthProbe(size_t bytes) : a_(bytes / sizeof(float), 1.0f), b_(bytes / sizeof(float), 0.0f) {}

  double read_gbs(ThreadPool& pool, int reps, int warmup = 2) {
    std::vector<double> sums(static_cast<size_t>(pool.num_threads()));
    const Timing t = time_it(reps, [&] {
      split(pool, [&](uint32_t p, size_t s, size_t e) {
        float acc[16] = {};
        for (size_t i = s; i + 16 <= e; i += 16)
          for (int k = 0; k < 16; ++k) acc[k] += a_[i + static_cast<size_t>(k)];
        double sum = 0;
        for (float x : acc) sum += x;
        sums[p] = sum;
      });
    }, warmup);
    return bytes() / t.median_s / 1e9;
  }
  double write_gbs(ThreadPool& pool, int reps, int warmup = 2) {
    const Timing t = time_it(reps, [&] {
      split(pool, [&](uint32_t, size_t s, size_t e) { std::memset(&b_[s], 0, (e - s) * sizeof(float)); });
    }, warmup);
    return bytes() / t.median_s / 1e9;
  }
  double copy_gbs(ThreadPool& pool, int reps, int warmup = 2) {
    const Timing t = time_it(reps, [&] {
      split(pool, [&](uint32_t, size_t s, size_t e) { std::memcpy(&b_[s], &a_[s], (e - s) * sizeof(float)); });
    }, warmup);
    return 2.0 * bytes() / t.median_s / 1e9;
  }

 private:
  double bytes() const { return static_cast<double>(a_.size() * sizeof(float)); }
  // fn(part, begin, end) over one even share of the buffers per pool thread.
  template <class F>
  void split(ThreadPool& pool, const F& fn) {
    const size_t n = a_.size();
    const uint32_t parts = static_cast<uint32_t>(pool.num_threads());
    auto body = [&](uint32_t s, uint32_t e) {
      for (uint32_t p = s; p < e; ++p) fn(p, n * p / parts, n * (p + 1) / parts);
    };
    pool.parallel_for(parts, 1, body);
  }

  std::vector<float> a_, b_;
};

struct Bandwidth {
  double read, write, copy;
};
inline Bandwidth measure_bandwidth(ThreadPool& pool, size_t bytes, int reps) {
  BandwidthProbe probe(bytes);
  const double read = probe.read_gbs(pool, reps), write = probe.write_gbs(pool, reps);
  return {read, write, probe.copy_gbs(pool, reps)};
}

}  // namespace tessera::bench
