#include "tessera/base/thread_pool.h"

#include <gtest/gtest.h>

#include <chrono>
#include <numeric>
#include <thread>

namespace tessera {
namespace {

TEST(ThreadPool, CoversEveryIndexOnce) {
  ThreadPool pool(3);
  for (uint32_t n : {0u, 1u, 7u, 64u, 1000u}) {
    for (uint32_t grain : {1u, 3u, 64u}) {
      std::vector<std::atomic<int>> hits(n);
      auto fn = [&](uint32_t b, uint32_t e) {
        for (uint32_t i = b; i < e; ++i) hits[i].fetch_add(1);
      };
      pool.parallel_for(n, grain, fn);
      for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
    }
  }
}

TEST(ThreadPool, ConcurrentCallersShareWorkers) {
  ThreadPool pool(2);
  std::atomic<uint64_t> sum{0};
  auto caller = [&] {
    for (int r = 0; r < 200; ++r) {
      auto fn = [&](uint32_t b, uint32_t e) {
        for (uint32_t i = b; i < e; ++i) sum.fetch_add(i);
      };
      pool.parallel_for(100, 7, fn);
    }
  };
  std::thread a(caller), b(caller);
  a.join();
  b.join();
  EXPECT_EQ(sum.load(), 2u * 200u * 4950u);
}

// A worker still inside its chunk long after the caller's own chunks are done
// (a preempted vCPU): the caller stops spinning, sleeps, and returns only
// once the worker has left the job, whose state lives on the caller's stack.
TEST(ThreadPool, CallerWaitsForASlowWorker) {
  ThreadPool pool(2);
  for (int r = 0; r < 20; ++r) {
    std::atomic<int> finished{0};
    std::atomic<std::thread::id> first{};
    auto fn = [&](uint32_t, uint32_t) {
      std::thread::id none{};
      // Whichever thread claims a chunk second finishes at once; the other
      // sleeps well past the caller's spin budgets.
      if (first.compare_exchange_strong(none, std::this_thread::get_id()))
        std::this_thread::sleep_for(std::chrono::milliseconds(r % 2 ? 2 : 0));
      finished.fetch_add(1);
    };
    pool.parallel_for(2, 1, fn);
    EXPECT_EQ(finished.load(), 2) << "round " << r;
  }
}

}  // namespace
}  // namespace tessera
