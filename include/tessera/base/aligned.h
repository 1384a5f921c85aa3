// Aligned host memory: 64-byte aligned blocks (one cache line, one AVX-512
// vector) owned by a shared handle, so queued commands can keep a host
// tensor's bytes alive until they run.
#pragma once

#include <cstddef>
#include <memory>

namespace tessera {

inline constexpr size_t kHostAlignment = 64;

// Returns zeroed memory of `bytes` (at least 1) aligned to kHostAlignment.
// Blocks of 4 MiB and more are backed by transparent huge pages.
std::shared_ptr<std::byte[]> make_aligned_bytes(size_t bytes);

// Asks the kernel to back the whole 2 MiB pages inside [data, data + bytes)
// with transparent huge pages, before they are first touched. Where THP is
// "madvise" only (the Zen 5 VM), first touching 100 MB costs 16 ms so, 50 ms
// in 4 KiB pages. A no-op where the range holds no whole huge page.
void advise_huge_pages(const void* data, size_t bytes);

inline constexpr size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }
inline constexpr size_t div_up(size_t x, size_t a) { return (x + a - 1) / a; }

}  // namespace tessera
