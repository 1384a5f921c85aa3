#include "tessera/base/thread_pool.h"

#include <chrono>

#include "tessera/base/affinity.h"
#include "tessera/base/spin.h"

namespace tessera {

ThreadPool::ThreadPool(int num_threads, std::vector<int> worker_cpus) {
  for (int i = 1; i < num_threads; ++i) {
    const int cpu = worker_cpus.empty() ? -1 : worker_cpus[static_cast<size_t>(i - 1) % worker_cpus.size()];
    workers_.emplace_back([this, cpu] {
      if (cpu >= 0) pin_current_thread(cpu);  // a placement hint: unpinned, the worker still runs
      worker_loop();
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

// Claims and runs chunks until none are left; returns whether it ran any.
bool ThreadPool::run_chunks(Job& job) {
  bool ran = false;
  for (uint32_t c; (c = job.next.fetch_add(1, std::memory_order_relaxed)) < job.chunks;) {
    uint32_t begin = c * job.grain;
    uint32_t end = begin + job.grain < job.n ? begin + job.grain : job.n;
    job.fn(begin, end);
    job.done.fetch_add(1, std::memory_order_acq_rel);
    ran = true;
  }
  return ran;
}

void ThreadPool::parallel_for(uint32_t n, uint32_t grain, FunctionRef<void(uint32_t, uint32_t)> fn) {
  if (n == 0) return;
  if (grain == 0) grain = 1;
  uint32_t chunks = (n + grain - 1) / grain;
  if (chunks == 1 || workers_.empty()) {
    for (uint32_t b = 0; b < n; b += grain) fn(b, b + grain < n ? b + grain : n);
    return;
  }
  Job job{fn, n, grain, chunks};
  std::unique_lock<std::mutex> lock(mu_, std::defer_lock);
  lock_spinning(lock);
  job.link = jobs_;
  jobs_ = &job;
  generation_.fetch_add(1, std::memory_order_release);
  const bool wake = sleepers_ > 0;
  lock.unlock();
  if (wake) wake_.notify_all();
  run_chunks(job);
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
  while (job && job->next.load(std::memory_order_relaxed) >= job->chunks) job = job->link;
  return job;
}

void ThreadPool::worker_loop() {
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
    run_chunks(*job);
    lock_spinning(lock);
    // The job is the caller's: once the count reaches zero the caller may
    // return (it spins on the count without mu_), so read its flag first.
    const bool caller_sleeping = job->caller_sleeping;
    if (job->active_workers.fetch_sub(1, std::memory_order_acq_rel) == 1 && caller_sleeping) released_.notify_all();
  }
}

}  // namespace tessera
