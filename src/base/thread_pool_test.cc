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

// Launches back to back whose shapes change every time: a worker that
// arrives after a launch ended must not run a chunk of it, nor miss the
// next one's, and each launch's arguments must reach the workers intact.
TEST(ThreadPool, BackToBackLaunchesOfChangingShape) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(200);
  for (uint32_t i = 0; i < 3000; ++i) {
    const uint32_t n = 2 + i * 37 % 199, grain = 1 + i % 5, launch = i + 1;
    auto fn = [&](uint32_t b, uint32_t e) {
      ASSERT_LE(e, n);
      ASSERT_LE(e - b, grain);
      for (uint32_t k = b; k < e; ++k) hits[k].fetch_add(static_cast<int>(launch));
    };
    pool.parallel_for(n, grain, fn);
    for (uint32_t k = 0; k < n; ++k) ASSERT_EQ(hits[k].exchange(0), static_cast<int>(launch)) << "launch " << i << " k=" << k;
    for (uint32_t k = n; k < hits.size(); ++k) ASSERT_EQ(hits[k].load(), 0) << "launch " << i << " k=" << k;
  }
}

// A chunk that launches again: the fast path is its caller's, so the inner
// launch takes the mutex path, and both complete.
TEST(ThreadPool, NestedLaunchCompletes) {
  ThreadPool pool(2);
  std::atomic<uint64_t> sum{0};
  auto outer = [&](uint32_t b, uint32_t e) {
    for (uint32_t i = b; i < e; ++i) {
      auto inner = [&](uint32_t ib, uint32_t ie) {
        for (uint32_t k = ib; k < ie; ++k) sum.fetch_add(k);
      };
      pool.parallel_for(10, 3, inner);
    }
  };
  for (int r = 0; r < 50; ++r) pool.parallel_for(4, 1, outer);
  EXPECT_EQ(sum.load(), 50u * 4u * 45u);
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

// Chunks have homes: with two threads and four chunks the caller runs 0 and
// 1, the worker 2 and 3, so a launch's rows stay on the core that had them
// in the last launch (first-come claiming gave the worker chunk 1). The
// n-th chunk begun waits (up to 10 s) until the (n+1)-th, rounded up to
// even, has begun too: both threads are inside the job at each step, and
// neither can run out of its own chunks and take the other's.
TEST(ThreadPool, ChunksRunOnTheirHomeThread) {
  ThreadPool pool(2);
  for (int r = 0; r < 5; ++r) {
    std::atomic<int> started{0};
    std::thread::id ran_on[4];
    auto fn = [&](uint32_t b, uint32_t e) {
      ASSERT_EQ(e, b + 1);
      ran_on[b] = std::this_thread::get_id();
      const int ticket = started.fetch_add(1) + 1, until_started = (ticket + 1) / 2 * 2;
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (started.load() < until_started && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    };
    pool.parallel_for(4, 1, fn);
    const std::thread::id caller = std::this_thread::get_id();
    EXPECT_EQ(ran_on[0], caller) << "round " << r;
    EXPECT_EQ(ran_on[1], caller) << "round " << r;
    EXPECT_NE(ran_on[2], caller) << "round " << r;
    EXPECT_EQ(ran_on[3], ran_on[2]) << "round " << r;
  }
}

// A worker still inside its chunk long after the caller's own chunks are done
// (a preempted vCPU): the caller stops spinning, sleeps, and returns only
// once the worker's chunk is done.
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
