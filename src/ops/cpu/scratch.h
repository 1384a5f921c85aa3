// Per-thread scratch memory for the ISA-flagged kernels (*_avx2.cc,
// *_avx512.cc). Its members are defined in scratch.cc, compiled for the
// baseline ISA: a std::vector grown inside an ISA-flagged file instantiates
// out-of-line members there, weak symbols the linker may hand to every caller
// in the program, which then run AVX instructions on any CPU
// (scripts/check_isa_symbols.py fails the build on those).
#pragma once

#include <cstddef>

namespace tessera::cpu {

class Scratch {
 public:
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch();

  // At least `bytes` bytes, 64-byte aligned. Growing drops the contents (the
  // new memory is zero); otherwise they stay.
  void* get(size_t bytes);
  // At least `bytes` zero bytes (callers only read them).
  const void* zeros(size_t bytes);

  // get() as n floats or n pointers (out of line too: an inline member
  // emitted in an ISA-flagged file is such a weak symbol).
  float* floats(size_t n);
  const void** pointers(size_t n);

 private:
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace tessera::cpu
