// Program and ProgramCache: compiled op launches.
//
// A Program is what an op compiles to for one set of attributes and tensor
// specs: the kernel chosen for this CPU's ISA and the op's parallel
// decomposition (num_tasks work items, `grain` per chunk; for sharded tensors
// a task is usually one core's shard). Programs are immutable and live as
// long as their device, so launches and traces may hold raw pointers to them.
//
// A launch pairs a Program with a runtime-argument blob: a trivially copyable
// struct of resolved buffer addresses. The kernel runs as
//   kernel(args, task_begin, task_end)
// on the device's worker threads. Replaying a trace calls exactly this and
// nothing else: no allocation, shape logic or kernel selection.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "tessera/base/status.h"

namespace tessera {

using KernelFn = Status (*)(const void* args, uint32_t task_begin, uint32_t task_end);

struct Program {
  std::string key;       // the op's descriptor string, e.g. "relu:f32[1,1,64,64]:TILE:L1/HEIGHT_SHARDED..."
  std::string kernel_name;  // which implementation was chosen, e.g. "f32_relu__avx512"
  KernelFn kernel = nullptr;
  uint32_t num_tasks = 0;
  uint32_t grain = 1;    // tasks per chunk handed to a worker
  // What the op computed at compile time and its kernel reads at run time (a
  // oneDNN primitive, scratch buffers). Owned here, so it lives as long as
  // the device; launches reach it through a pointer in their arguments.
  std::shared_ptr<void> plan;
};

// Thread-safe cache of Programs keyed by descriptor string.
class ProgramCache {
 public:
  // Returns the cached program for `key`, compiling it with `compile` on a
  // miss. With allow_compile == false (during trace capture) a miss is a
  // FAILED_PRECONDITION error naming the key.
  StatusOr<const Program*> get_or_compile(const std::string& key, bool allow_compile,
                                          const std::function<StatusOr<Program>()>& compile);
  // The cached program for `key`, or nullptr; never compiles.
  const Program* find(const std::string& key) const;
  size_t size() const;
  uint64_t hits() const;
  uint64_t misses() const;

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::unique_ptr<Program>> programs_;
  uint64_t hits_ = 0, misses_ = 0;
};

}  // namespace tessera
