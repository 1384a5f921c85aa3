#include "command_queue.h"

#include "tessera/base/affinity.h"
#include "tessera/base/spin.h"

#include <algorithm>
#include <atomic>
#include <chrono>

namespace tessera {

namespace {
constexpr std::chrono::microseconds kSpinMicros{20};
}  // namespace

Status run_program(ThreadPool& pool, const Program& p, const void* args) {
  std::atomic<bool> failed{false};
  Status first;
  std::mutex err_mu;
  auto chunk = [&](uint32_t b, uint32_t e) {
    if (failed.load(std::memory_order_relaxed)) return;
    Status s = p.kernel(args, b, e);
    if (!s.ok()) {
      std::lock_guard<std::mutex> lock(err_mu);
      if (!failed.exchange(true)) first = s;
    }
  };
  pool.parallel_for(p.num_tasks, p.grain, chunk);
  return first.ok() ? first : first.annotate(p.key);
}

CommandQueue::CommandQueue(uint8_t id, ThreadPool& pool, ProfileSink* profile, int cpu)
    : id_(id), pool_(pool), profile_(profile), ring_(kCapacity) {
  thread_ = std::thread([this, cpu] {
    if (cpu >= 0) pin_current_thread(cpu);  // a placement hint: unpinned, the queue still runs
    loop();
  });
}

CommandQueue::~CommandQueue() { stop(); }

uint64_t CommandQueue::push(Command&& cmd) {
  std::unique_lock<std::mutex> lock(mu_, std::defer_lock);
  lock_spinning(lock);
  if (enqueued_ - taken_ >= kCapacity) {
    // A full ring: wait until it is half empty, so that a host thread
    // enqueuing faster than the device runs wakes once per kCapacity / 2
    // commands, not once per command beside the device's threads (per-op
    // eager loops of 8000 small launches ran at half speed in that state).
    ++push_waiters_;
    not_full_.wait(lock, [&] { return enqueued_ - taken_ <= kCapacity / 2 || stopping_; });
    --push_waiters_;
  }
  if (stopping_) return 0;
  ring_[enqueued_ % kCapacity] = std::move(cmd);
  uint64_t seq = ++enqueued_;
  enqueued_mirror_.store(seq, std::memory_order_release);
  const bool wake = loop_sleeping_;
  lock.unlock();
  if (wake) not_empty_.notify_one();
  return seq;
}

uint64_t CommandQueue::enqueued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return enqueued_;
}

void CommandQueue::wait_for(uint64_t sequence) {
  // The acquire load pairs with the loop's release store after the command ran.
  if (spin_until([&] { return completed_mirror_.load(std::memory_order_acquire) >= sequence; }, kSpinMicros)) return;
  std::unique_lock<std::mutex> lock(mu_);
  ++progress_waiters_;
  while (completed_ < sequence) {
    next_wake_ = std::min(next_wake_, sequence);
    progress_.wait(lock);
  }
  --progress_waiters_;
}

Status CommandQueue::status_up_to(uint64_t sequence) const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_sequence_ <= sequence ? error_ : Status();
}

Status CommandQueue::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void CommandQueue::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  not_empty_.notify_all();
  not_full_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Status CommandQueue::run(const Program& program, const void* args, bool traced) {
  if (!profile_ || !profile_->enabled.load(std::memory_order_relaxed)) return run_program(pool_, program, args);
  auto now = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  const int64_t start = now();
  Status s = run_program(pool_, program, args);
  profile_->record(program, id_, traced, start, now());
  return s;
}

Status CommandQueue::execute(Command& cmd) {
  switch (cmd.kind) {
    case Command::Kind::kProgram:
      return run(*cmd.program, cmd.args.data(), false);
    case Command::Kind::kHost:
      return cmd.host();
    case Command::Kind::kWaitEvent: {
      cmd.wait_queue->wait_for(cmd.wait_sequence);
      Status s = cmd.wait_queue->status_up_to(cmd.wait_sequence);
      if (!s.ok())
        return aborted_error("cq {} waited on an event of cq {} whose work failed: {}", id_, cmd.wait_queue->id(),
                             s.to_string());
      return s;
    }
    case Command::Kind::kExecuteTrace: {
      const std::byte* p = cmd.trace->data;
      for (uint32_t i = 0; i < cmd.trace->num_launches; ++i) {
        const auto* rec = reinterpret_cast<const LaunchRecord*>(p);
        TS_RETURN_IF_ERROR(run(*rec->program, p + sizeof(LaunchRecord), true));
        p += rec->record_size;
      }
      return Status();
    }
  }
  return internal_error("unknown command kind");
}

void CommandQueue::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (taken_ == enqueued_ && !stopping_) {
      lock.unlock();
      const uint64_t taken = taken_;  // only this thread writes taken_
      spin_until([&] { return enqueued_mirror_.load(std::memory_order_acquire) > taken; }, kSpinMicros);
      lock_spinning(lock);
      loop_sleeping_ = true;
      not_empty_.wait(lock, [&] { return taken_ < enqueued_ || stopping_; });
      loop_sleeping_ = false;
    }
    if (taken_ == enqueued_) return;  // stopping and drained
    Command cmd = std::move(ring_[taken_ % kCapacity]);
    uint64_t seq = ++taken_;
    bool poisoned = !error_.ok();
    const bool wake_pushers = push_waiters_ > 0 && enqueued_ - taken_ <= kCapacity / 2;
    lock.unlock();
    if (wake_pushers) not_full_.notify_all();
    Status s = poisoned ? Status() : execute(cmd);
    cmd = Command();  // release captured host state before signalling completion
    lock_spinning(lock);
    if (!s.ok() && error_.ok()) {
      error_ = s;
      error_sequence_ = seq;
    }
    completed_ = seq;
    completed_mirror_.store(seq, std::memory_order_release);
    if (progress_waiters_ && completed_ >= next_wake_) {
      next_wake_ = UINT64_MAX;  // waiters still short of their sequence set it again
      progress_.notify_all();
    }
  }
}

}  // namespace tessera
