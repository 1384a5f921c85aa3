// Aligned host memory: 64-byte aligned blocks (one cache line, one AVX-512
// vector) owned by a shared handle, so queued commands can keep a host
// tensor's bytes alive until they run.
#pragma once

#include <cstddef>
#include <memory>

namespace tessera {

inline constexpr size_t kHostAlignment = 64;

// Returns zeroed memory of `bytes` (at least 1) aligned to kHostAlignment.
std::shared_ptr<std::byte[]> make_aligned_bytes(size_t bytes);

inline constexpr size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }
inline constexpr size_t div_up(size_t x, size_t a) { return (x + a - 1) / a; }

}  // namespace tessera
