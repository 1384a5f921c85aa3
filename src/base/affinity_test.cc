#include "tessera/base/affinity.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "tessera/base/thread_pool.h"

namespace tessera {
namespace {

// The CPUs this process may run on.
std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> v;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return v;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) v.push_back(c);
  return v;
}

TEST(Affinity, PinsTheCallingThreadOnly) {
  const std::vector<int> cpus = allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  const int before = current_thread_pinned_cpu();
  std::thread([&] {
    EXPECT_TRUE(pin_current_thread(cpus.back()));
    EXPECT_EQ(current_thread_pinned_cpu(), cpus.back());
  }).join();
  EXPECT_EQ(current_thread_pinned_cpu(), before);  // this thread unchanged
}

TEST(Affinity, RefusedCpusChangeNothing) {
  std::thread([] {
    const int before = current_thread_pinned_cpu();
    EXPECT_FALSE(pin_current_thread(-1));
    EXPECT_FALSE(pin_current_thread(CPU_SETSIZE));
    EXPECT_EQ(current_thread_pinned_cpu(), before);
  }).join();
}

// Each worker pins itself to its CPU; the caller stays as it was.
TEST(Affinity, PoolWorkersRunOnTheirCpus) {
  const std::vector<int> cpus = allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  ThreadPool pool(3, {cpus.front(), cpus.back()});
  const std::thread::id caller = std::this_thread::get_id();
  const int caller_cpu = current_thread_pinned_cpu();
  std::atomic<int> wrong{0}, by_workers{0};
  auto fn = [&](uint32_t, uint32_t) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));  // every thread gets chunks
    const int cpu = current_thread_pinned_cpu();
    if (std::this_thread::get_id() == caller) {
      if (cpu != caller_cpu) wrong.fetch_add(1);
      return;
    }
    by_workers.fetch_add(1);
    if (cpu != cpus.front() && cpu != cpus.back()) wrong.fetch_add(1);
  };
  for (int r = 0; r < 20 && by_workers.load() == 0; ++r) pool.parallel_for(64, 1, fn);
  EXPECT_GT(by_workers.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace tessera
