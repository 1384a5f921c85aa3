#include "scratch.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace tessera::cpu {

Scratch::~Scratch() { std::free(data_); }

void* Scratch::get(size_t bytes) {
  if (bytes <= size_ && data_) return data_;
  std::free(data_);
  size_ = (bytes + 63) / 64 * 64;
  data_ = static_cast<std::byte*>(std::aligned_alloc(64, size_ ? size_ : 64));
  if (!data_) throw std::bad_alloc();
  std::memset(data_, 0, size_);
  return data_;
}

const void* Scratch::zeros(size_t bytes) { return get(bytes); }

float* Scratch::floats(size_t n) { return static_cast<float*>(get(n * sizeof(float))); }

const void** Scratch::pointers(size_t n) { return static_cast<const void**>(get(n * sizeof(void*))); }

}  // namespace tessera::cpu
