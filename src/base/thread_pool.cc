#include "tessera/base/thread_pool.h"

#include <algorithm>
#include <chrono>

#include "tessera/base/affinity.h"
#include "tessera/base/spin.h"

namespace tessera {

ThreadPool::ThreadPool(int num_threads, std::vector<int> worker_cpus) {
  for (int i = 1; i < num_threads; ++i) {
    const int cpu = worker_cpus.empty() ? -1 : worker_cpus[static_cast<size_t>(i - 1) % worker_cpus.size()];
    workers_.emplace_back([this, cpu, i] {
      if (cpu >= 0) pin_current_thread(cpu);  // a placement hint: unpinned, the worker still runs
      worker_loop(static_cast<uint32_t>(i));
    });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

namespace {

constexpr uint64_t pack(uint32_t lo, uint32_t hi) { return uint64_t{lo} << 32 | hi; }
constexpr uint32_t lo_of(uint64_t r) { return static_cast<uint32_t>(r >> 32); }
constexpr uint32_t hi_of(uint64_t r) { return static_cast<uint32_t>(r); }

// The front chunk of `run` (its home thread), or the back one (a thief);
// false when it is empty.
bool claim(std::atomic<uint64_t>& run, bool front, uint32_t* chunk) {
  uint64_t r = run.load(std::memory_order_relaxed);
  for (;;) {
    const uint32_t lo = lo_of(r), hi = hi_of(r);
    if (lo >= hi) return false;
    const uint64_t next = front ? pack(lo + 1, hi) : pack(lo, hi - 1);
    if (run.compare_exchange_weak(r, next, std::memory_order_relaxed)) {
      *chunk = front ? lo : hi - 1;
      return true;
    }
  }
}

}  // namespace

bool ThreadPool::has_chunks(const Job& job) {
  for (uint32_t k = 0; k < job.num_runs; ++k) {
    const uint64_t r = job.runs[k].range.load(std::memory_order_relaxed);
    if (lo_of(r) < hi_of(r)) return true;
  }
  return false;
}

// Claims and runs chunks until none are left, its home run's first, then
// the others' from their backs; returns whether it ran any.
bool ThreadPool::run_chunks(Job& job, uint32_t self) {
  const uint32_t home = self % job.num_runs;
  bool ran = false;
  for (uint32_t c;;) {
    bool got = claim(job.runs[home].range, true, &c);
    for (uint32_t v = 1; !got && v < job.num_runs; ++v) got = claim(job.runs[(home + v) % job.num_runs].range, false, &c);
    if (!got) return ran;
    const uint32_t begin = c * job.grain, end = begin + job.grain < job.n ? begin + job.grain : job.n;
    job.fn(begin, end);
    job.done.fetch_add(1, std::memory_order_acq_rel);
    ran = true;
  }
}

void ThreadPool::parallel_for(uint32_t n, uint32_t grain, FunctionRef<void(uint32_t, uint32_t)> fn) {
  if (n == 0) return;
  if (grain == 0) grain = 1;
  uint32_t chunks = (n + grain - 1) / grain;
  if (chunks == 1 || workers_.empty()) {
    for (uint32_t b = 0; b < n; b += grain) fn(b, b + grain < n ? b + grain : n);
    return;
  }
  const uint32_t num_runs = std::min<uint32_t>({kMaxRuns, static_cast<uint32_t>(num_threads()), chunks});
  Run runs[kMaxRuns];
  for (uint32_t k = 0; k < num_runs; ++k)
    runs[k].range.store(pack(static_cast<uint32_t>(uint64_t{chunks} * k / num_runs),
                             static_cast<uint32_t>(uint64_t{chunks} * (k + 1) / num_runs)),
                        std::memory_order_relaxed);
  Job job{fn, n, grain, chunks, num_runs, runs};
  std::unique_lock<std::mutex> lock(mu_, std::defer_lock);
  lock_spinning(lock);
  job.link = jobs_;
  jobs_ = &job;
  generation_.fetch_add(1, std::memory_order_release);
  const bool wake = sleepers_ > 0;
  lock.unlock();
  if (wake) wake_.notify_all();
  run_chunks(job, 0);
  // Wait until every chunk is done; spin first, as the workers are finishing.
  spin_until([&] { return job.done.load(std::memory_order_acquire) >= chunks; }, std::chrono::microseconds(20));
  lock_spinning(lock);
  // Unlink so no new worker joins, then wait for the ones inside: spinning
  // (they leave right after their last chunk), then asleep.
  for (Job** p = &jobs_; *p; p = &(*p)->link) {
    if (*p == &job) {
      *p = job.link;
      break;
    }
  }
  if (job.active_workers.load() == 0) return;
  lock.unlock();
  if (spin_until([&] { return job.active_workers.load(std::memory_order_acquire) == 0; },
                 std::chrono::microseconds(20)))
    return;
  lock_spinning(lock);
  if (job.active_workers.load() != 0) {
    job.caller_sleeping = true;
    released_.wait(lock, [&] { return job.active_workers.load() == 0; });
  }
}

ThreadPool::Job* ThreadPool::find_job() const {
  Job* job = jobs_;
  while (job && !has_chunks(*job)) job = job->link;
  return job;
}

void ThreadPool::worker_loop(uint32_t self) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    Job* job = find_job();
    if (!job) {
      if (stopping_) return;
      // Spin briefly for the next launch, then sleep until one arrives. The
      // generation (read under mu_, so no launch is missed) changes with each
      // launch; a job still linked whose chunks are all claimed is no reason
      // to stay awake, nor to sleep: waiting on the job count instead put the
      // worker to sleep after every launch, and a futex wake-up per launch
      // left it out of most of the next one's chunks on a VM.
      const uint64_t seen = generation_.load(std::memory_order_relaxed);
      lock.unlock();
      const bool launched = spin_until(
          [&] { return generation_.load(std::memory_order_acquire) != seen; }, std::chrono::microseconds(50));
      lock_spinning(lock);
      if (launched || generation_.load(std::memory_order_relaxed) != seen || stopping_) continue;
      ++sleepers_;
      wake_.wait(lock);
      --sleepers_;
      continue;
    }
    job->active_workers.fetch_add(1);
    lock.unlock();
    run_chunks(*job, self);
    lock_spinning(lock);
    // The job is the caller's: once the count reaches zero the caller may
    // return (it spins on the count without mu_), so read its flag first.
    const bool caller_sleeping = job->caller_sleeping;
    if (job->active_workers.fetch_sub(1, std::memory_order_acq_rel) == 1 && caller_sleeping) released_.notify_all();
  }
}

}  // namespace tessera
