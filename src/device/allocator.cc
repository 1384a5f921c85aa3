#include "tessera/device/allocator.h"

#include <algorithm>

#include "tessera/base/aligned.h"

namespace tessera {

RangeAllocator::RangeAllocator(uint64_t base, uint64_t size, uint64_t alignment)
    : base_(base), size_(size), alignment_(alignment ? alignment : 1) {
  if (size_) free_[base_] = size_;
}

std::optional<uint64_t> RangeAllocator::allocate(uint64_t size) {
  const uint64_t need = align_up(size ? size : 1, alignment_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < need) continue;
    const uint64_t addr = it->first, remaining = it->second - need;
    free_.erase(it);
    if (remaining) free_[addr + need] = remaining;
    live_[addr] = need;
    allocated_ += need;
    return addr;
  }
  return std::nullopt;
}

bool RangeAllocator::free(uint64_t address) {
  auto it = live_.find(address);
  if (it == live_.end()) return false;
  uint64_t addr = address, size = it->second;
  live_.erase(it);
  allocated_ -= size;
  auto next = free_.lower_bound(addr);
  if (next != free_.end() && addr + size == next->first) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == addr) {
      prev->second += size;
      return true;
    }
  }
  free_[addr] = size;
  return true;
}

std::vector<std::pair<uint64_t, uint64_t>> RangeAllocator::reserve_free_parts(uint64_t address, uint64_t size) {
  std::vector<std::pair<uint64_t, uint64_t>> parts;
  const uint64_t end = address + size;
  auto it = free_.upper_bound(address);
  if (it != free_.begin()) --it;
  while (it != free_.end() && it->first < end) {
    const uint64_t fa = it->first, fe = fa + it->second;
    const uint64_t lo = std::max(fa, address), hi = std::min(fe, end);
    if (lo >= hi) {
      ++it;
      continue;
    }
    it = free_.erase(it);
    if (fa < lo) free_[fa] = lo - fa;
    if (hi < fe) free_[hi] = fe - hi;
    live_[lo] = hi - lo;
    allocated_ += hi - lo;
    parts.emplace_back(lo, hi - lo);
  }
  return parts;
}

uint64_t RangeAllocator::largest_free_block() const {
  uint64_t best = 0;
  for (const auto& [a, s] : free_) best = std::max(best, s);
  return best;
}

}  // namespace tessera
