// Copies into outputs too large to stay in the cache (internal). A plain
// store reads each destination line from memory before it overwrites it, so
// a copy moves a third more bytes through DRAM than it needs; non-temporal
// stores send whole lines to memory without that read. A UNet's 480x640
// float32 concat of two 32-channel maps (157 MB read and written): 3.2 ->
// 2.5 ms on two cores, 16- and 64-byte stores alike (bench/RESULTS.md,
// twenty-seventh run). The stores are weakly ordered: a kernel that made
// them calls stream_fence() before it returns.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace tessera::cpu {

// Copies n bytes; the 16-byte-aligned part of dst by non-temporal stores.
inline void stream_copy(std::byte* dst, const std::byte* src, size_t n) {
#if defined(__SSE2__)
  const size_t head = std::min(n, (16 - reinterpret_cast<uintptr_t>(dst) % 16) % 16);
  std::memcpy(dst, src, head);
  size_t i = head;
  for (; i + 16 <= n; i += 16)
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
  std::memcpy(dst + i, src + i, n - i);
#else
  std::memcpy(dst, src, n);
#endif
}

// Orders the calling thread's non-temporal stores before its later stores
// (the pool's completion signal among them).
inline void stream_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

}  // namespace tessera::cpu
