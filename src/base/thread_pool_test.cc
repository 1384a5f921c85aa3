#include "tessera/base/thread_pool.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace tessera
