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
    stopping_.store(true);
    generation_.fetch_add(kRunCountMask + 1);  // ends the workers' spins
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

namespace {

constexpr uint64_t pack(uint32_t lo, uint32_t hi) { return uint64_t{lo} << 32 | hi; }
constexpr uint32_t lo_of(uint64_t r) { return static_cast<uint32_t>(r >> 32); }
constexpr uint32_t hi_of(uint64_t r) { return static_cast<uint32_t>(r); }

// Run k of num_runs over `chunks`: an even share, packed as a range.
constexpr uint64_t run_range(uint32_t chunks, uint32_t k, uint32_t num_runs) {
  return pack(static_cast<uint32_t>(uint64_t{chunks} * k / num_runs),
              static_cast<uint32_t>(uint64_t{chunks} * (k + 1) / num_runs));
}

// Runs chunk c of a launch over [0, n) in chunks of `grain`.
template <class F>
void run_chunk(const F& fn, uint32_t c, uint32_t grain, uint32_t n) {
  const uint32_t begin = c * grain;
  fn(begin, begin + grain < n ? begin + grain : n);
}

// The front chunk of `run` (its home thread), or the back one (a thief);
// false when it is empty. A claim acquires the run's last store, and with
// it what its launcher wrote before it.
bool claim(std::atomic<uint64_t>& run, bool front, uint32_t* chunk) {
  uint64_t r = run.load(std::memory_order_relaxed);
  for (;;) {
    const uint32_t lo = lo_of(r), hi = hi_of(r);
    if (lo >= hi) return false;
    const uint64_t next = front ? pack(lo + 1, hi) : pack(lo, hi - 1);
    if (run.compare_exchange_weak(r, next, std::memory_order_acquire, std::memory_order_relaxed)) {
      *chunk = front ? lo : hi - 1;
      return true;
    }
  }
}

}  // namespace

// The front of run `home`, else the back of another.
template <class Run>
static bool claim_any(Run* runs, uint32_t num_runs, uint32_t home, uint32_t* chunk) {
  if (claim(runs[home].range, true, chunk)) return true;
  for (uint32_t v = 1; v < num_runs; ++v)
    if (claim(runs[(home + v) % num_runs].range, false, chunk)) return true;
  return false;
}

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
  bool ran = false;
  for (uint32_t c; claim_any(job.runs, job.num_runs, self % job.num_runs, &c);) {
    run_chunk(job.fn, c, job.grain, job.n);
    job.done.fetch_add(1, std::memory_order_acq_rel);
    ran = true;
  }
  return ran;
}

void ThreadPool::parallel_for(uint32_t n, uint32_t grain, Fn fn) {
  if (n == 0) return;
  if (grain == 0) grain = 1;
  const uint32_t chunks = (n + grain - 1) / grain;
  if (chunks == 1 || workers_.empty()) {
    for (uint32_t c = 0; c < chunks; ++c) run_chunk(fn, c, grain, n);
    return;
  }
  if (!fast_busy_.exchange(true, std::memory_order_acquire)) {
    parallel_for_fast(n, grain, chunks, fn);
    fast_busy_.store(false, std::memory_order_release);
    return;
  }
  parallel_for_mutex(n, grain, chunks, fn);
}

// The fast path. Its state is the pool's, so a worker may touch it at any
// time: one that arrives after the launch is done finds the runs empty, and
// one whose claim succeeds holds a chunk of the current launch, which
// cannot finish before that chunk is counted, so the arguments it then
// reads are that launch's. The caller therefore returns once the workers'
// count of finished chunks reaches theirs, with no handshake to leave.
void ThreadPool::parallel_for_fast(uint32_t n, uint32_t grain, uint32_t chunks, const Fn& fn) {
  const uint32_t num_runs = std::min<uint32_t>({kMaxRuns, static_cast<uint32_t>(num_threads()), chunks});
  fast_done_.by_workers.store(0, std::memory_order_relaxed);
  fast_done_.caller_sleeping.store(false, std::memory_order_relaxed);
  // Each run's range last, released: a claim on it acquires the arguments
  // and the stores above. Runs the last launch used beyond this one's are
  // emptied.
  for (uint32_t k = 0; k < std::max(num_runs, fast_runs_used_); ++k) {
    const uint64_t range = k < num_runs ? run_range(chunks, k, num_runs) : 0;
    FastRun& run = fast_runs_[k];
    run.fn.store(&fn, std::memory_order_relaxed);
    run.n.store(n, std::memory_order_relaxed);
    run.grain.store(grain, std::memory_order_relaxed);
    run.num_runs.store(num_runs, std::memory_order_relaxed);
    run.initial.store(hi_of(range) - lo_of(range), std::memory_order_relaxed);
    run.range.store(range, std::memory_order_release);
  }
  // The count up by one, and this launch's run count for the last one's in
  // the low bits (only fast launches write those).
  generation_.fetch_add(kRunCountMask + 1 + num_runs - fast_runs_used_, std::memory_order_seq_cst);
  fast_runs_used_ = num_runs;
  // A worker about to sleep counts itself, then reads the generation (both
  // sequentially consistent): it sees this launch, or this sees it.
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    { std::lock_guard<std::mutex> lock(mu_); }  // it holds mu_ from its count until it waits
    wake_.notify_all();
  }
  uint32_t mine = 0;
  for (uint32_t c; claim_any(fast_runs_, num_runs, 0, &c); ++mine) run_chunk(fn, c, grain, n);
  const uint32_t theirs = chunks - mine;
  auto finished = [&] { return fast_done_.by_workers.load(std::memory_order_seq_cst) >= theirs; };
  if (spin_until(finished, std::chrono::microseconds(20))) return;
  // A worker still inside a chunk (a preempted vCPU): sleep. The flag and
  // the workers' count are sequentially consistent, so a worker finishing
  // sees the flag, or this sees its count.
  std::unique_lock<std::mutex> lock(mu_, std::defer_lock);
  lock_spinning(lock);
  fast_done_.caller_sleeping.store(true, std::memory_order_seq_cst);
  released_.wait(lock, finished);
}

// Whether a worker may take from another's run: only while more than a
// quarter of it is left, its owner far behind (a late start, a preempted
// vCPU). Taking the last chunks of a thread a little behind moved them to a
// core that had not produced their input: MobileNetV2's 112x112 layers,
// 1x1 16 -> 96 and depthwise 32, ran 20% and 30% slower than in the mutex
// path, whose workers came too late to take any. The caller takes every
// chunk left, so a launch never waits on a worker that does not come.
bool ThreadPool::far_behind(const FastRun& r) {
  const uint64_t range = r.range.load(std::memory_order_relaxed);
  const uint32_t left = hi_of(range) > lo_of(range) ? hi_of(range) - lo_of(range) : 0;
  return uint64_t{left} * 4 > r.initial.load(std::memory_order_relaxed);
}

bool ThreadPool::run_fast_chunks(uint32_t self, uint64_t generation) {
  // Which runs to try: the last fast launch's count as the worker saw it,
  // or an older one (a claim then reads the current count).
  uint32_t num_runs = static_cast<uint32_t>(generation & kRunCountMask);
  bool ran = false;
  for (;;) {
    FastRun* run = nullptr;
    uint32_t c = 0;
    for (uint32_t v = 0; v < num_runs && !run; ++v) {
      FastRun& r = fast_runs_[(self + v) % num_runs];
      if (v > 0 && !far_behind(r)) continue;
      if (claim(r.range, v == 0, &c)) run = &r;
    }
    if (!run) return ran;
    // The claim holds the launch open: these are its arguments.
    const Fn& fn = *run->fn.load(std::memory_order_relaxed);
    num_runs = run->num_runs.load(std::memory_order_relaxed);
    run_chunk(fn, c, run->grain.load(std::memory_order_relaxed), run->n.load(std::memory_order_relaxed));
    fast_done_.by_workers.fetch_add(1, std::memory_order_seq_cst);
    if (fast_done_.caller_sleeping.load(std::memory_order_seq_cst)) {
      { std::lock_guard<std::mutex> lock(mu_); }  // the caller holds mu_ from its flag until it waits
      released_.notify_all();
    }
    ran = true;
  }
}

// The mutex path: a second caller while the fast path is taken.
void ThreadPool::parallel_for_mutex(uint32_t n, uint32_t grain, uint32_t chunks, Fn fn) {
  const uint32_t num_runs = std::min<uint32_t>({kMaxRuns, static_cast<uint32_t>(num_threads()), chunks});
  Run runs[kMaxRuns];
  for (uint32_t k = 0; k < num_runs; ++k) runs[k].range.store(run_range(chunks, k, num_runs), std::memory_order_relaxed);
  Job job{fn, n, grain, chunks, num_runs, runs};
  std::unique_lock<std::mutex> lock(mu_, std::defer_lock);
  lock_spinning(lock);
  job.link = jobs_;
  jobs_ = &job;
  mutex_jobs_.fetch_add(1, std::memory_order_relaxed);
  generation_.fetch_add(kRunCountMask + 1, std::memory_order_seq_cst);
  const bool wake = sleepers_.load() > 0;
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
  mutex_jobs_.fetch_sub(1, std::memory_order_relaxed);
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

// A worker's part of the mutex path's jobs; returns whether it ran any.
bool ThreadPool::run_mutex_jobs(uint32_t self) {
  if (mutex_jobs_.load(std::memory_order_acquire) == 0) return false;
  std::unique_lock<std::mutex> lock(mu_, std::defer_lock);
  lock_spinning(lock);
  bool ran = false;
  while (Job* job = find_job()) {
    job->active_workers.fetch_add(1);
    lock.unlock();
    run_chunks(*job, self);
    lock_spinning(lock);
    // The job is the caller's: once the count reaches zero the caller may
    // return (it spins on the count without mu_), so read its flag first.
    const bool caller_sleeping = job->caller_sleeping;
    if (job->active_workers.fetch_sub(1, std::memory_order_acq_rel) == 1 && caller_sleeping) released_.notify_all();
    ran = true;
  }
  return ran;
}

void ThreadPool::worker_loop(uint32_t self) {
  for (;;) {
    // Read before looking for work, so a launch after the look changes it.
    const uint64_t seen = generation_.load(std::memory_order_acquire);
    const bool ran_fast = run_fast_chunks(self, seen);
    if (run_mutex_jobs(self) || ran_fast) continue;
    if (stopping_.load()) return;
    // Spin briefly for the next launch, then sleep until one arrives: a
    // futex wake-up per launch left a worker out of most of the next one's
    // chunks on a VM.
    if (spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; },
                   std::chrono::microseconds(50)))
      continue;
    std::unique_lock<std::mutex> lock(mu_, std::defer_lock);
    lock_spinning(lock);
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    if (generation_.load(std::memory_order_seq_cst) == seen && !stopping_.load()) wake_.wait(lock);
    sleepers_.fetch_sub(1, std::memory_order_seq_cst);
  }
}

}  // namespace tessera
