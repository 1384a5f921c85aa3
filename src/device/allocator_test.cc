#include "tessera/device/allocator.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace tessera {
namespace {

TEST(RangeAllocator, FirstFitAlignedAndCoalescing) {
  RangeAllocator a(1024, 4096, 64);
  EXPECT_EQ(a.allocate(10), 1024u);
  EXPECT_EQ(a.allocate(64), 1088u);
  EXPECT_EQ(a.allocate(65), 1152u);
  EXPECT_EQ(a.allocated_bytes(), 64u + 64 + 128);
  EXPECT_TRUE(a.free(1088));
  EXPECT_EQ(a.allocate(32), 1088u);  // first fit reuses the hole
  EXPECT_TRUE(a.free(1024));
  EXPECT_TRUE(a.free(1088));
  EXPECT_TRUE(a.free(1152));
  EXPECT_FALSE(a.free(1152));  // double free is refused
  EXPECT_EQ(a.largest_free_block(), 4096u);
  EXPECT_FALSE(a.allocate(4097).has_value());
  EXPECT_EQ(a.allocate(4096), 1024u);
}

// The same sequence of allocations and frees always gives the same addresses,
// and freeing then re-allocating the same size returns the same address.
TEST(RangeAllocator, Deterministic) {
  auto run = [] {
    RangeAllocator a(0, 1 << 20, 32);
    std::mt19937 rng(5);
    std::vector<uint64_t> live, trace;
    for (int i = 0; i < 2000; ++i) {
      if (!live.empty() && rng() % 3 == 0) {
        size_t k = rng() % live.size();
        a.free(live[k]);
        live.erase(live.begin() + static_cast<long>(k));
      } else if (auto p = a.allocate(rng() % 5000)) {
        live.push_back(*p);
        trace.push_back(*p);
      }
    }
    return trace;
  };
  EXPECT_EQ(run(), run());
  RangeAllocator a(0, 1 << 16, 32);
  auto x = a.allocate(100), y = a.allocate(300);
  a.free(*y);
  EXPECT_EQ(a.allocate(300), y);
  (void)x;
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

TEST(RangeAllocator, ReserveFreePartsSkipsLiveBlocks) {
  RangeAllocator a(0, 1024, 32);
  auto x = a.allocate(64);    // [0, 64)
  auto y = a.allocate(64);    // [64, 128)
  auto z = a.allocate(64);    // [128, 192)
  a.free(*x);
  a.free(*z);
  auto parts = a.reserve_free_parts(0, 256);  // free: [0,64) and [128,256)
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0], (std::pair<uint64_t, uint64_t>{0, 64}));
  EXPECT_EQ(parts[1], (std::pair<uint64_t, uint64_t>{128, 128}));
  EXPECT_EQ(a.allocate(32), 256u);  // the reserved ranges are taken
  for (auto [addr, size] : parts) EXPECT_TRUE(a.free(addr));
  EXPECT_TRUE(a.free(*y));
  EXPECT_TRUE(a.free(256));
  EXPECT_EQ(a.largest_free_block(), 1024u);
}

}  // namespace
}  // namespace tessera
