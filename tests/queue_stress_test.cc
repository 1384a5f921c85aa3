// Command queues and events under stress: in-order execution per queue,
// cross-queue event waits with thousands of interleaved commands, the
// write -> compute -> read choreography of a two-queue pipeline, sticky
// errors, and closing with work in flight. Also run under TSan.
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>

#include "tessera/base/affinity.h"

#include "tessera/ops/eltwise.h"
#include "tessera/ops/reference.h"
#include "test_util.h"

namespace tessera {
namespace {

TEST(Queue, RunsCommandsInOrder) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.num_command_queues = 2}));
  std::vector<int> seen[2];
  for (int i = 0; i < 5000; ++i)
    for (uint8_t q = 0; q < 2; ++q)
      ASSERT_OK(dev->enqueue_host_command(q, "test", [&seen, q, i] { seen[q].push_back(i); return Status(); }, false));
  ASSERT_OK(synchronize_device(*dev));
  for (auto& s : seen) {
    ASSERT_EQ(s.size(), 5000u);
    for (int i = 0; i < 5000; ++i) ASSERT_EQ(s[static_cast<size_t>(i)], i);
  }
}

// A ring held full (its first command blocked) by two host threads pushing
// 3000 commands each: they wait, then go on once the ring drains to half
// (CommandQueue::push); every command runs once, each thread's in order.
TEST(Queue, FullRingWaitsAndLosesNothing) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  std::atomic<bool> gate{false};
  ASSERT_OK(dev->enqueue_host_command(0, "gate", [&] {
    while (!gate.load()) std::this_thread::yield();
    return Status();
  }, false));
  std::vector<int> seen[2];
  std::mutex mu;
  std::atomic<int> pushed{0};
  auto producer = [&](int id) {
    for (int i = 0; i < 3000; ++i) {
      Status s = dev->enqueue_host_command(0, "push", [&, id, i] {
        std::lock_guard<std::mutex> lock(mu);
        seen[id].push_back(i);
        return Status();
      }, false);
      if (!s.ok()) return;
      pushed.fetch_add(1);
    }
  };
  std::thread a(producer, 0), b(producer, 1);
  // The ring fills (1024 commands in flight) and both producers wait.
  while (pushed.load() < 1000) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_LT(pushed.load(), 1030);
  gate.store(true);
  a.join();
  b.join();
  ASSERT_OK(synchronize_device(*dev));
  EXPECT_EQ(pushed.load(), 6000);
  for (const auto& v : seen) {
    ASSERT_EQ(v.size(), 3000u);
    for (int i = 0; i < 3000; ++i) ASSERT_EQ(v[static_cast<size_t>(i)], i);
  }
}

// cq 1 produces step i, records an event; cq 0 waits on it and must see step
// i done; and the other way round, thousands of times, both queues busy.
TEST(Queue, CrossQueueEventWaitsUnderStress) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.num_command_queues = 2}));
  std::atomic<int> produced[2] = {-1, -1};
  std::atomic<int> violations{0};
  const int n = 3000;
  for (int i = 0; i < n; ++i) {
    for (uint8_t from = 0; from < 2; ++from) {
      uint8_t to = 1 - from;
      ASSERT_OK(dev->enqueue_host_command(
          from, "produce", [&, from, i] { produced[from].store(i); return Status(); }, false));
      ASSERT_OK_AND_ASSIGN(Event e, record_event(*dev, from));
      ASSERT_OK(wait_for_event(to, e));
      ASSERT_OK(dev->enqueue_host_command(
          to, "consume", [&, from, i] {
            if (produced[from].load() < i) violations.fetch_add(1);
            return Status();
          },
          false));
    }
  }
  ASSERT_OK(synchronize_device(*dev));
  EXPECT_EQ(violations.load(), 0);
  EXPECT_EQ(produced[0].load(), n - 1);
  EXPECT_EQ(produced[1].load(), n - 1);
}

// The two-queue loop of the original: writes on cq 1, ops on cq 0, reads on
// cq 1, ordered by four events. Every output must be relu(add(x_i, x_i)) of
// its own input: nothing lost, duplicated or reordered.
TEST(Queue, TwoQueuePipelineKeepsEveryInputWithItsOutput) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.num_command_queues = 2}));
  const Shape shape{1, 1, 64, 64};
  Tensor first = testing::random_tensor(shape, DataType::BFLOAT16, Layout::TILE, 0);
  ASSERT_OK_AND_ASSIGN(Tensor input, allocate_tensor_on_device(first.spec(), *dev));
  const int n = 300;
  std::vector<Tensor> hosts, outs;
  for (int i = 0; i < n; ++i) {
    hosts.push_back(testing::random_tensor(shape, DataType::BFLOAT16, Layout::TILE, static_cast<uint32_t>(i)));
    outs.push_back(allocate_tensor_on_host(first.spec()));
  }
  std::optional<Event> op_done, read_done;
  std::vector<Tensor> results;
  for (int i = 0; i < n; ++i) {
    if (op_done) ASSERT_OK(wait_for_event(1, *op_done));      // input consumed
    ASSERT_OK(copy_host_to_device_tensor(hosts[static_cast<size_t>(i)], input, 1));
    ASSERT_OK_AND_ASSIGN(Event written, record_event(*dev, 1));
    ASSERT_OK(wait_for_event(0, written));
    if (read_done) ASSERT_OK(wait_for_event(0, *read_done));  // previous output read
    ASSERT_OK_AND_ASSIGN(Tensor sum, add(input, input));
    ASSERT_OK_AND_ASSIGN(Tensor out, relu(sum));
    ASSERT_OK_AND_ASSIGN(op_done, record_event(*dev, 0));
    ASSERT_OK(wait_for_event(1, *op_done));
    ASSERT_OK(copy_device_to_host_tensor(out, outs[static_cast<size_t>(i)], false, 1));
    ASSERT_OK_AND_ASSIGN(read_done, record_event(*dev, 1));
    results.push_back(out);  // keep device outputs alive until read
    if (results.size() > 4) results.erase(results.begin());
  }
  ASSERT_OK(synchronize_device(*dev));
  for (int i = 0; i < n; ++i) {
    const Tensor& h = hosts[static_cast<size_t>(i)];
    ASSERT_OK_AND_ASSIGN(Tensor s, reference::add(h, h, DataType::BFLOAT16));
    ASSERT_OK_AND_ASSIGN(Tensor expected, reference::relu(s, DataType::BFLOAT16));
    ASSERT_EQ(testing::host_bytes(outs[static_cast<size_t>(i)]), testing::host_bytes(expected)) << "input " << i;
  }
}

Status failing_kernel(const void*, uint32_t, uint32_t) { return internal_error("kernel fault injected by test"); }

// The CPU each chunk's thread is pinned to (-1: not pinned), per chunk.
struct PlacementArgs {
  std::mutex* mu;
  std::set<int>* seen;
};
Status placement_kernel(const void* raw, uint32_t, uint32_t) {
  const auto& a = *static_cast<const PlacementArgs*>(raw);
  std::this_thread::sleep_for(std::chrono::microseconds(300));  // both threads take chunks
  std::lock_guard<std::mutex> lock(*a.mu);
  a.seen->insert(current_thread_pinned_cpu());
  return Status();
}

// By default a launch's threads (the queue's and the pool worker) each run
// pinned to their own physical core; with pin_threads off, the OS places them.
TEST(Queue, LaunchThreadsArePinnedToDistinctCores) {
  const std::vector<int>& cores = physical_core_cpus();
  if (cores.size() < 2) GTEST_SKIP() << "one physical core: nothing to pin apart";
  for (bool pin : {true, false}) {
    SCOPED_TRACE(pin ? "pinned" : "unpinned");
    ASSERT_OK_AND_ASSIGN(auto dev, open_device({.worker_threads = 2, .pin_threads = pin}));
    std::mutex mu;
    std::set<int> seen;
    const PlacementArgs args{&mu, &seen};
    const Program p{"test:placement", "placement", placement_kernel, 64, 1};
    ASSERT_OK(dev->enqueue_program(0, p, &args, sizeof(args)));
    ASSERT_OK(synchronize_device(*dev));
    if (pin)
      EXPECT_EQ(seen, (std::set<int>{cores[0], cores[1]}));
    else
      EXPECT_EQ(seen, (std::set<int>{-1}));
  }
}

TEST(Queue, ErrorsAreStickyAndNothingDeadlocks) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.num_command_queues = 2}));
  Program bad{"test:fail", "fail", failing_kernel, 4, 1};
  ASSERT_OK_AND_ASSIGN(Event before, record_event(*dev, 0));
  std::atomic<int> ran_after{0};
  ASSERT_OK(dev->enqueue_program(0, bad, nullptr, 0));
  ASSERT_OK(dev->enqueue_host_command(0, "later", [&] { ran_after++; return Status(); }, false));
  ASSERT_OK_AND_ASSIGN(Event after, record_event(*dev, 0));
  // cq 1 waits on the failed work: it is poisoned too, without hanging.
  ASSERT_OK(wait_for_event(1, after));
  ASSERT_OK(dev->enqueue_host_command(1, "later", [&] { ran_after++; return Status(); }, false));
  Status s = synchronize_device(*dev);
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find("kernel fault injected by test"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("test:fail"), std::string::npos) << s.to_string();
  EXPECT_EQ(synchronize_device(*dev), s);  // sticky
  EXPECT_OK(event_synchronize(before));
  EXPECT_EQ(event_synchronize(after).code(), StatusCode::kInternal);
  EXPECT_EQ(synchronize_device(*dev, 1).code(), StatusCode::kAborted);
  EXPECT_EQ(ran_after.load(), 0);
  // A blocking read on the poisoned queue returns the error instead of data.
  Tensor h = testing::random_tensor(Shape{32, 32}, DataType::FLOAT32, Layout::TILE, 1);
  ASSERT_OK_AND_ASSIGN(Tensor d, allocate_tensor_on_device(h.spec(), *dev));
  EXPECT_EQ(d.cpu(true, 0).status().code(), StatusCode::kInternal);
  EXPECT_EQ(close_device(*dev).code(), StatusCode::kInternal);
}

TEST(Queue, CloseDrainsPendingWork) {
  std::atomic<int> ran{0};
  {
    ASSERT_OK_AND_ASSIGN(auto dev, open_device({.num_command_queues = 2}));
    for (int i = 0; i < 2000; ++i) {
      ASSERT_OK(dev->enqueue_host_command(static_cast<uint8_t>(i % 2), "work", [&] { ran++; return Status(); }, false));
      if (i % 100 == 0) {
        ASSERT_OK_AND_ASSIGN(Event e, record_event(*dev, 1));
        ASSERT_OK(wait_for_event(0, e));
      }
    }
    ASSERT_OK(close_device(*dev));
    EXPECT_ERROR(dev->enqueue_host_command(0, "write", [] { return Status(); }, false),
                 StatusCode::kFailedPrecondition, "closed");
  }
  EXPECT_EQ(ran.load(), 2000);
}

TEST(Queue, EventsFromManyHostThreads) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.num_command_queues = 2}));
  std::atomic<int> count{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        uint8_t q = static_cast<uint8_t>((t + i) % 2);
        (void)dev->enqueue_host_command(q, "w", [&] { count++; return Status(); }, false);
        auto e = record_event(*dev, q);
        if (e.ok()) (void)wait_for_event(1 - q, *e);
        if (i % 50 == 0 && e.ok()) (void)event_synchronize(*e);
      }
    });
  for (auto& t : threads) t.join();
  ASSERT_OK(synchronize_device(*dev));
  EXPECT_EQ(count.load(), 2000);
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// Host threads keep enqueueing (blocking and not) while the device closes:
// every call returns, OK or with an error, and nothing hangs.
TEST(Queue, CloseRacingWithEnqueuesNeverHangs) {
  for (int round = 0; round < 20; ++round) {
    ASSERT_OK_AND_ASSIGN(auto dev, open_device({.num_command_queues = 2}));
    std::atomic<bool> go{true};
    std::atomic<int> refused{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 3; ++t)
      threads.emplace_back([&, t] {
        for (int i = 0; go.load(); ++i) {
          Status s = dev->enqueue_host_command(static_cast<uint8_t>(t % 2), "work", [] { return Status(); },
                                               /*blocking=*/i % 2 == 0);
          if (!s.ok()) {
            refused++;
            return;
          }
        }
      });
    std::this_thread::sleep_for(std::chrono::microseconds(200 * (round % 5)));
    Status closed = close_device(*dev);
    go = false;
    for (auto& th : threads) th.join();
    EXPECT_OK(closed);
  }
}

}  // namespace
}  // namespace tessera
