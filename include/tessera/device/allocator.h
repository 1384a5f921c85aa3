// RangeAllocator: the deterministic allocator behind every device region.
//
// First fit over an address-ordered free list, with neighbours coalesced on
// free. The same sequence of allocate/free calls always yields the same
// addresses; this is what lets a pipeline free its compile-time input and
// re-allocate it at the address a trace captured. One allocator serves all
// banks of a region in lockstep: an address is valid in every bank, as in the
// original's banked allocator.
//
// Not thread-safe; the Device serialises access.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

namespace tessera {

class RangeAllocator {
 public:
  RangeAllocator() = default;
  RangeAllocator(uint64_t base, uint64_t size, uint64_t alignment);

  // Returns the address of `size` bytes (rounded up to the alignment), or
  // nullopt when no free block is large enough. size 0 allocates one unit.
  std::optional<uint64_t> allocate(uint64_t size);
  // Returns false when `address` is not the start of a live allocation.
  bool free(uint64_t address);
  // Allocates every free part of [address, address + size) as its own block
  // and returns the parts (address, size); parts in use are left alone.
  std::vector<std::pair<uint64_t, uint64_t>> reserve_free_parts(uint64_t address, uint64_t size);

  uint64_t base() const { return base_; }
  uint64_t size() const { return size_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t free_bytes() const { return size_ - allocated_; }
  uint64_t allocated_bytes() const { return allocated_; }
  uint64_t largest_free_block() const;
  size_t num_allocations() const { return live_.size(); }

 private:
  uint64_t base_ = 0, size_ = 0, alignment_ = 1, allocated_ = 0;
  std::map<uint64_t, uint64_t> free_;  // address -> size
  std::map<uint64_t, uint64_t> live_;  // address -> size
};

}  // namespace tessera
