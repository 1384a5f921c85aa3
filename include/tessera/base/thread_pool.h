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
// A launch takes one of two paths. The fast one, for one caller at a time:
// the launch's runs and arguments live in the pool, a worker claims a chunk
// with one compare-and-swap and only then reads the arguments (a claim
// proves the launch unfinished, so they are still its own), and the caller
// returns as soon as every chunk is done, without waiting for the workers
// to leave. bench_runtime measures its cost per launch at 0.2-0.3 us of
// cross-core traffic (0.75-0.85 in the VM's slower mode), against 0.4-0.5
// (1.6-2.0) for the mutex path, alternated (bench/RESULTS.md, twenty-sixth
// run). There a worker takes from another
// thread's run only while more than a quarter of it is left (see
// far_behind), and the caller takes whatever is left. A second caller
// meanwhile (another command queue, or a chunk that launches again) takes
// the mutex path: its job lives on its own stack, linked into a list under
// the pool's mutex, and it returns once its workers have left it.
//
// Idle workers spin for about 50 us before they sleep, so back-to-back
// launches (a trace replay) do not pay a futex wake-up per launch; the
// pool's mutex is taken spinning too, and callers spin before they sleep.
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
  using Fn = FunctionRef<void(uint32_t, uint32_t)>;
  // A run of unclaimed chunks [lo, hi), packed as lo << 32 | hi: its home
  // thread claims from the front, others from the back.
  struct alignas(64) Run {
    std::atomic<uint64_t> range{0};
  };
  // Runs per launch at most; participants beyond them share runs.
  static constexpr uint32_t kMaxRuns = 16;
  // A mutex-path launch, on its caller's stack.
  struct Job {
    Fn fn;
    uint32_t n, grain, chunks, num_runs;
    Run* runs;  // num_runs of them, on the caller's stack
    std::atomic<uint32_t> done{0};
    std::atomic<int> active_workers{0};  // changed under mu_, read by the spinning caller
    bool caller_sleeping = false;        // guarded by mu_
    Job* link = nullptr;     // guarded by mu_
  };
  // A fast-path run: with the launch's arguments, written by its caller
  // before the range (released), read by a worker after it claims from this
  // run (see the .cc). A worker then finds them in the line its claim just
  // took, where one shared line of arguments was one more transfer.
  struct alignas(64) FastRun {
    std::atomic<uint64_t> range{0};
    std::atomic<const Fn*> fn{nullptr};
    std::atomic<uint32_t> n{0}, grain{1}, num_runs{0};
    std::atomic<uint32_t> initial{0};  // chunks the range began with
  };
  struct alignas(64) FastDone {
    std::atomic<uint32_t> by_workers{0};  // chunks the workers finished
    std::atomic<bool> caller_sleeping{false};
  };

  void parallel_for_fast(uint32_t n, uint32_t grain, uint32_t chunks, const Fn& fn);
  void parallel_for_mutex(uint32_t n, uint32_t grain, uint32_t chunks, Fn fn);
  bool run_fast_chunks(uint32_t self, uint64_t generation);  // a worker's part of the fast launch
  static bool far_behind(const FastRun& run);  // whether a worker may take from `run`
  bool run_mutex_jobs(uint32_t self);   // a worker's part of the mutex path's jobs
  static bool run_chunks(Job& job, uint32_t self);
  static bool has_chunks(const Job& job);
  void worker_loop(uint32_t self);

  Job* find_job() const;  // a job with unclaimed chunks; mu_ held

  // Launches so far, both paths, above the last fast launch's run count
  // (kRunCountMask bits): what idle workers poll, alone in its line
  // (arguments beside it made the caller's stores ping-pong with the polls).
  static constexpr uint64_t kRunCountMask = 0xff;
  static_assert(kMaxRuns <= kRunCountMask);
  alignas(64) std::atomic<uint64_t> generation_{0};
  FastRun fast_runs_[kMaxRuns];
  FastDone fast_done_;
  alignas(64) std::atomic<bool> fast_busy_{false};  // a caller holds the fast path
  uint32_t fast_runs_used_ = 0;  // runs the last fast launch filled; its caller's
  std::mutex mu_;
  std::atomic<int> sleepers_{0};      // workers blocked on wake_; changed under mu_
  std::condition_variable wake_;      // workers: a launch arrived or stopping
  std::condition_variable released_;  // callers: a worker left a job, or finished the fast launch
  Job* jobs_ = nullptr;               // guarded by mu_
  std::atomic<int> mutex_jobs_{0};    // jobs linked; changed under mu_, read by workers first
  std::atomic<bool> stopping_{false};  // set under mu_
  std::vector<std::thread> workers_;
};

}  // namespace tessera
