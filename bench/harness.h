// A small timing harness for bench/: runs a body `reps` times after warm-up
// and reports median, min and max in one table row, so that a kernel and its
// anchor (memcpy, memory bandwidth) are measured side by side in one run.
// Google Benchmark reports one benchmark per row; the tables here need ratios
// between rows measured in the same run, so this stays a few lines of our own.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

namespace tessera::bench {

struct Timing {
  double median_s, min_s, max_s;
};

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

}  // namespace tessera::bench
