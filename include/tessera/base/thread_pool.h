// ThreadPool: the worker threads that execute a device's per-core programs.
//
// parallel_for(n, fn) runs fn(begin, end) over [0, n) split into chunks and
// returns when every chunk is done. The calling thread works too, so a call
// never waits on a busy pool to make progress, and several threads (one per
// command queue) may call parallel_for concurrently: their jobs share the
// workers. No allocation happens on this path.
//
// Chunks have homes: a launch's chunks are cut into one even run per thread
// (fewer when there are fewer chunks, at most kMaxRuns); participant k (the
// caller is 0, worker i is i) first runs run k % runs, front to back, then
// takes chunks from the back of the others' runs. So chunk c of a launch
// runs on the same thread, launch after launch, whenever the threads arrive
// in time: a memory-bound op then reads rows its producer wrote into the
// same core's cache, where first-come claiming scattered them over both
// cores (see bench/RESULTS.md, twenty-fourth run).
//
// Idle workers spin for about 50 us before they sleep, so back-to-back
// launches (a trace replay) do not pay a futex wake-up per launch; the
// pool's mutex is taken spinning too, and a caller waits for its workers to
// leave its job spinning before it sleeps.
//
// Thread-safety: all methods may be called from any thread. The destructor
// must not race with parallel_for.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace tessera {

// A non-owning reference to a callable, so parallel_for needs no allocation.
template <class Sig>
class FunctionRef;
template <class R, class... A>
class FunctionRef<R(A...)> {
 public:
  template <class F>
  FunctionRef(F& f) : obj_(&f), call_([](void* o, A... a) -> R { return (*static_cast<F*>(o))(a...); }) {}
  R operator()(A... a) const { return call_(obj_, a...); }

 private:
  void* obj_;
  R (*call_)(void*, A...);
};

class ThreadPool {
 public:
  // `num_threads` counts the caller: num_threads - 1 workers are started.
  // With `worker_cpus`, worker i (1 .. num_threads - 1) pins itself to
  // logical CPU worker_cpus[(i - 1) % size] (see affinity.h); a CPU the OS
  // refuses leaves that worker unpinned.
  explicit ThreadPool(int num_threads, std::vector<int> worker_cpus = {});
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn over [0, n) in chunks of `grain` indices. n == 0 is a no-op; when
  // the work fits one chunk it runs inline on the caller.
  void parallel_for(uint32_t n, uint32_t grain, FunctionRef<void(uint32_t, uint32_t)> fn);

 private:
  // A run of unclaimed chunks [lo, hi), packed as lo << 32 | hi: its home
  // thread claims from the front, others from the back.
  struct alignas(64) Run {
    std::atomic<uint64_t> range{0};
  };
  // Runs per job at most; participants beyond them share runs.
  static constexpr uint32_t kMaxRuns = 16;
  struct Job {
    FunctionRef<void(uint32_t, uint32_t)> fn;
    uint32_t n, grain, chunks, num_runs;
    Run* runs;  // num_runs of them, on the caller's stack
    std::atomic<uint32_t> done{0};
    std::atomic<int> active_workers{0};  // changed under mu_, read by the spinning caller
    bool caller_sleeping = false;        // guarded by mu_
    Job* link = nullptr;     // guarded by mu_
  };
  static bool run_chunks(Job& job, uint32_t self);
  static bool has_chunks(const Job& job);
  void worker_loop(uint32_t self);

  Job* find_job() const;  // a job with unclaimed chunks; mu_ held

  std::mutex mu_;
  std::atomic<uint64_t> generation_{0};  // launches so far; written under mu_, read while spinning
  int sleepers_ = 0;                  // workers blocked on wake_; guarded by mu_
  std::condition_variable wake_;      // workers: a job arrived or stopping
  std::condition_variable released_;  // callers: a worker left a job
  Job* jobs_ = nullptr;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace tessera
