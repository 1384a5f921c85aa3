#include "tessera/base/aligned.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace tessera {

std::shared_ptr<std::byte[]> make_aligned_bytes(size_t bytes) {
  size_t size = align_up(bytes ? bytes : 1, kHostAlignment);
  void* p = std::aligned_alloc(kHostAlignment, size);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, size);
  return std::shared_ptr<std::byte[]>(static_cast<std::byte*>(p), [](std::byte* q) { std::free(q); });
}

}  // namespace tessera
