#include "tessera/base/aligned.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

namespace tessera {

std::shared_ptr<std::byte[]> make_aligned_bytes(size_t bytes) {
  size_t size = align_up(bytes ? bytes : 1, kHostAlignment);
  void* p = std::aligned_alloc(kHostAlignment, size);
  if (!p) throw std::bad_alloc();
  if (size >= (size_t{4} << 20)) advise_huge_pages(p, size);
  std::memset(p, 0, size);
  return std::shared_ptr<std::byte[]>(static_cast<std::byte*>(p), [](std::byte* q) { std::free(q); });
}

void advise_huge_pages(const void* data, size_t bytes) {
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const uintptr_t lo = (reinterpret_cast<uintptr_t>(data) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(kHuge - 1);
  if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);
}

}  // namespace tessera
