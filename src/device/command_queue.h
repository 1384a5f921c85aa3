// CommandQueue: one in-order executor thread of a device (internal).
//
// Commands sit in a fixed ring (no allocation to enqueue a trace replay or an
// event wait). Each command gets a sequence number; `completed` only grows,
// so "event done" is completed >= event.sequence and host waits need no
// per-command state. The first failing command sets the sticky error; later
// commands are skipped.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "tessera/base/status.h"
#include "tessera/base/thread_pool.h"
#include "tessera/device/program.h"

namespace tessera {

struct TraceRecord;
class CommandQueue;

struct Command {
  enum class Kind : uint8_t { kProgram, kHost, kWaitEvent, kExecuteTrace } kind = Kind::kProgram;
  const Program* program = nullptr;   // kProgram
  std::vector<std::byte> args;        // kProgram (16-byte aligned storage by construction)
  std::function<Status()> host;       // kHost
  CommandQueue* wait_queue = nullptr;  // kWaitEvent
  uint64_t wait_sequence = 0;
  const TraceRecord* trace = nullptr;  // kExecuteTrace
};

// Runs one launch on the worker pool; the first failing chunk's status wins.
Status run_program(ThreadPool& pool, const Program& program, const void* args);

// Where a profiling queue puts its launch timestamps: a fixed buffer shared
// by the device's queues, claimed with one atomic increment per launch.
struct ProfileSink {
  struct Record {
    const Program* program;
    uint8_t cq_id;
    bool traced;
    int64_t start_ns, end_ns;
  };
  std::atomic<bool> enabled{false};
  std::vector<Record> records;
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> dropped{0};
  void record(const Program& p, uint8_t cq, bool traced, int64_t start, int64_t end) {
    const size_t i = next.fetch_add(1, std::memory_order_relaxed);
    if (i < records.size())
      records[i] = {&p, cq, traced, start, end};
    else
      dropped.fetch_add(1, std::memory_order_relaxed);
  }
};

class CommandQueue {
 public:
  // cpu >= 0: the queue's thread pins itself to that logical CPU (affinity.h).
  CommandQueue(uint8_t id, ThreadPool& pool, ProfileSink* profile = nullptr, int cpu = -1);
  ~CommandQueue();

  uint8_t id() const { return id_; }
  // Enqueues and returns the command's sequence number (blocks while the ring
  // is full); 0 when the queue has been stopped (the command is dropped).
  uint64_t push(Command&& cmd);
  uint64_t enqueued() const;
  // Blocks until every command up to `sequence` has run.
  void wait_for(uint64_t sequence);
  // The sticky error if it happened at or before `sequence`, else OK.
  Status status_up_to(uint64_t sequence) const;
  Status error() const;
  // Runs what is queued, then stops the thread. Idempotent.
  void stop();

 private:
  void loop();
  Status execute(Command& cmd);
  Status run(const Program& program, const void* args, bool traced);

  static constexpr size_t kCapacity = 1024;
  const uint8_t id_;
  ThreadPool& pool_;
  ProfileSink* profile_;
  mutable std::mutex mu_;
  std::condition_variable not_empty_, not_full_;
  mutable std::condition_variable progress_;
  std::vector<Command> ring_;
  uint64_t enqueued_ = 0, taken_ = 0, completed_ = 0;
  // Mirrors of enqueued_/completed_ for spinning without the lock, and who
  // sleeps, so a notify is only paid for when someone waits (a futex wake
  // costs several microseconds on a VM).
  std::atomic<uint64_t> enqueued_mirror_{0}, completed_mirror_{0};
  bool loop_sleeping_ = false;
  int push_waiters_ = 0;  // threads in push waiting for a half-empty ring
  mutable int progress_waiters_ = 0;
  // The least sequence a sleeping waiter waits for: the loop wakes waiters
  // when it completes that one, not after every command (a host thread in
  // synchronize() woken per command cost more than the launches it waited on).
  mutable uint64_t next_wake_ = UINT64_MAX;
  Status error_;
  uint64_t error_sequence_ = UINT64_MAX;
  bool stopping_ = false;
  std::thread thread_;
};

// A captured trace as stored in the TRACE region (bank 0): a sequence of
// LaunchRecord headers, each followed by its argument blob padded to 16 B.
struct LaunchRecord {
  const Program* program;
  uint32_t args_size;
  uint32_t record_size;  // header + padded args
};

struct TraceRecord {
  uint32_t id = 0;
  uint64_t address = 0;  // in the TRACE region
  uint64_t size = 0;
  uint32_t num_launches = 0;
  const std::byte* data = nullptr;  // host memory of the trace buffer
};

}  // namespace tessera
