// Shared plumbing for device ops (internal): compile-or-fetch a program and
// enqueue one launch with a trivially copyable argument struct.
#pragma once

#include <algorithm>
#include <string>
#include <type_traits>

#include "tessera/device/device.h"
#include "tessera/tensor/access.h"
#include "tessera/tensor/tensor.h"

namespace tessera::ops {

template <class Args>
Status launch(Device& device, uint8_t cq_id, const std::string& key, const std::function<StatusOr<Program>()>& compile,
              const Args& args) {
  static_assert(std::is_trivially_copyable_v<Args>, "kernel arguments must be trivially copyable");
  TS_ASSIGN_OR_RETURN(const Program* p, device.program_cache().get_or_compile(key, device.may_compile_programs(cq_id),
                                                                             compile));
  return device.enqueue_program(cq_id, *p, &args, sizeof(Args));
}

Status require_device_tensor(const Tensor& t, std::string_view op, std::string_view name = "input");

// Index `i` over `n` dims of sizes `dims` (row-major) mapped into two operands
// that broadcast: sum of coordinate * stride, strides 0 where they broadcast.
inline void broadcast_indices(uint32_t i, uint32_t n, const uint32_t* dims, const uint32_t* stride_a,
                              const uint32_t* stride_b, uint32_t* a, uint32_t* b) {
  *a = *b = 0;
  for (uint32_t j = n; j-- > 0;) {
    const uint32_t c = i % dims[j];
    i /= dims[j];
    *a += c * stride_a[j];
    *b += c * stride_b[j];
  }
}

// Tasks per chunk for `n` tasks that together touch `total_bytes`: about 4
// chunks per worker thread, but no chunk under `min_chunk_bytes`. Handing a
// chunk to another core costs a wake-up; in a model it pays from about 256
// KiB per chunk for memory-bound kernels, because the producer left the data
// in both cores' caches and one core alone copies at half the bandwidth
// (YOLO bfloat16, alternated builds: its 13 channel concats of 0.4-3.3 MB
// took 1.16-1.21 -> 0.83-0.93 ms in all against 1 MiB chunks, which ran
// most of them on one core). The pool's chunk homes (thread_pool.h) keep
// such splits from costing an op that re-reads data hot in one core's cache
// (bench/RESULTS.md, twenty-fourth run).
inline constexpr uint64_t kMinChunkBytesStreaming = 256 * 1024;
// Element-wise passes whose arithmetic outweighs their bytes: transcendental
// activations, and bfloat16 operands widened and rounded in registers. On the
// AVX2 VM a bfloat16 silu over 40x40x256 (1.6 MB moved) ran on one core at
// about 1 ns per element, 0.47 ms where two 128 KiB-or-larger chunks per
// core take half that.
inline constexpr uint64_t kMinChunkBytesCompute = 128 * 1024;
uint32_t default_grain(const Device& device, uint32_t n, uint64_t total_bytes, uint64_t min_chunk_bytes);
// Whether a copy that reads and writes `bytes` in all should write its output
// with non-temporal stores (cpu/stream_copy.h): when they exceed the cache the
// cores share (16 MiB where it is unknown), the output would not stay there
// for the next op anyway.
bool streams_output(const Device& device, uint64_t bytes);

}  // namespace tessera::ops
