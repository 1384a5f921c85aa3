#include "tessera/device/descriptor.h"

#include <cstdlib>
#include <fstream>

#include "test_macros.h"

namespace tessera {
namespace {

TEST(Descriptor, NativeCpuIsReadFromTheMachine) {
  ASSERT_OK_AND_ASSIGN(DeviceDescriptor d, native_cpu_descriptor());
  EXPECT_EQ(d.name, "cpu");
  EXPECT_GE(d.grid.x, 1u);
  EXPECT_EQ(d.grid.y, 1u);
  EXPECT_GE(d.l1_size_per_core, 32u * 1024);
  EXPECT_GE(d.num_dram_banks, 1u);
  EXPECT_GT(d.dram_bank_size, 0u);
  EXPECT_FALSE(d.emulated);
  EXPECT_NE(d.to_string().find("cpu:"), std::string::npos);
  // The shared cache (L3) where hwloc finds one, named in the line.
  if (d.shared_cache_size) {
    EXPECT_GE(d.shared_cache_size, uint64_t{1} << 20);
    // At most 48 MiB per core that shares it: a VM's L3 is its host's.
    EXPECT_LE(d.shared_cache_size, (uint64_t{48} << 20) * d.grid.x) << d.to_string();
    EXPECT_NE(d.to_string().find(" MiB shared cache"), std::string::npos) << d.to_string();
  }
}

TEST(Descriptor, L1SizeOverride) {
  ASSERT_OK_AND_ASSIGN(uint64_t v, parse_l1_size("1048576"));
  EXPECT_EQ(v, 1048576u);
  for (const char* bad : {"", "1MiB", "-4096", "100", "99999999999", " 4096"})
    EXPECT_ERROR(parse_l1_size(bad).status(), StatusCode::kInvalidArgument, "TESSERA_CPU_L1_SIZE must be a byte count");
  // CTest runs every suite with the override (CMakeLists.txt).
  if (const char* env = std::getenv("TESSERA_CPU_L1_SIZE")) {
    ASSERT_OK_AND_ASSIGN(DeviceDescriptor d, native_cpu_descriptor());
    EXPECT_EQ(d.l1_size_per_core, parse_l1_size(env).value());
  }
}

TEST(Descriptor, WormholeMatchesTheOriginal) {
  DeviceDescriptor d = wormhole_b0_descriptor();
  EXPECT_EQ(d.grid.x, 8u);
  EXPECT_EQ(d.grid.y, 8u);
  EXPECT_EQ(d.l1_size_per_core, 1499136u);
  EXPECT_EQ(d.num_dram_banks, 12u);
  EXPECT_EQ(d.dram_bank_size, uint64_t{1} << 30);
  EXPECT_TRUE(d.emulated);
  EXPECT_EQ(d.shared_cache_size, 0u);
  EXPECT_EQ(d.compute_grid().x, 8u);
  EXPECT_EQ(d.compute_grid().y, 8u);
  d.disabled_cores = {{7, 7}};  // one disabled corner core: 56 usable cores in a rectangle
  EXPECT_EQ(d.compute_grid().x * d.compute_grid().y, 56u);
  EXPECT_TRUE(d.compute_grid().x == 7u || d.compute_grid().y == 7u);
  EXPECT_ERROR(find_device_descriptor("grayskull"), StatusCode::kInvalidArgument, "unknown device descriptor");
}

TEST(Descriptor, FromAJsonFile) {
  const std::string dir = ::testing::TempDir();
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir + name) << text;
    return dir + name;
  };
  auto d = find_device_descriptor(write("good.json", R"({"name": "wh4", "grid": [4, 2], "l1_size_per_core": 65536,
      "num_dram_banks": 3, "dram_bank_size": 16777216, "disabled_cores": [[1, 1]]})"));
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->name, "wh4");
  EXPECT_EQ(d->grid.x, 4u);
  EXPECT_EQ(d->grid.y, 2u);
  EXPECT_EQ(d->num_dram_banks, 3u);
  EXPECT_TRUE(d->emulated);
  EXPECT_FALSE(d->is_usable({1, 1}));
  // Ops shard over the largest usable rectangle from (0, 0): here the first row.
  EXPECT_EQ(d->compute_grid().x, 4u);
  EXPECT_EQ(d->compute_grid().y, 1u);
  EXPECT_EQ(d->l1_alignment, wormhole_b0_descriptor().l1_alignment);
  const std::string base = R"("name": "x", "l1_size_per_core": 65536, "num_dram_banks": 1, "dram_bank_size": 16777216)";
  EXPECT_ERROR(find_device_descriptor(write("a.json", "[1, 2]")), StatusCode::kInvalidArgument, "expected a JSON object");
  EXPECT_ERROR(find_device_descriptor(write("b.json", "{" + base + R"(, "grid": [0, 4]})")),
               StatusCode::kInvalidArgument, "'grid' must be [x, y] with each in 1..64");
  EXPECT_ERROR(find_device_descriptor(write("c.json", "{" + base + R"(, "grid": [2, 2], "colour": 1})")),
               StatusCode::kInvalidArgument, "unknown key 'colour'");
  EXPECT_ERROR(find_device_descriptor(write("d.json", "{" + base + R"(, "grid": [2, 2], "disabled_cores": [[2, 0]]})")),
               StatusCode::kInvalidArgument, "disabled core [2,0] is not [x, y] inside the 2x2 grid");
  EXPECT_ERROR(find_device_descriptor(write("e.json", R"({"name": "x", "grid": [2, 2]})")),
               StatusCode::kInvalidArgument, "'l1_size_per_core' is missing");
  EXPECT_ERROR(find_device_descriptor(write("f.json", "{" + base + R"(, "grid": [2, 2], "l1_alignment": 24})")),
               StatusCode::kInvalidArgument, "powers of two");
  EXPECT_ERROR(find_device_descriptor(write("g.json", "{not json")), StatusCode::kInvalidArgument, "JSON object");
  EXPECT_ERROR(find_device_descriptor(dir + "missing.json"), StatusCode::kNotFound, "cannot read");
}

TEST(CoreRangeSet, OrdersAndValidates) {
  CoreRangeSet s({CoreRange({0, 0}, {1, 1}), CoreRange({3, 0}, {3, 0})});
  EXPECT_EQ(s.num_cores(), 5u);
  auto rm = s.cores(true);
  EXPECT_EQ(rm[1], (CoreCoord{1, 0}));
  auto cm = s.cores(false);
  EXPECT_EQ(cm[1], (CoreCoord{0, 1}));
  EXPECT_EQ(rm[4], (CoreCoord{3, 0}));
  EXPECT_OK(s.validate());
  CoreRangeSet overlap({CoreRange({0, 0}, {2, 2}), CoreRange({1, 1}, {3, 3})});
  EXPECT_ERROR(overlap.validate(), StatusCode::kInvalidArgument, "overlap");
  EXPECT_ERROR(CoreRangeSet(CoreRange({2, 0}, {1, 0})).validate(), StatusCode::kInvalidArgument, "start after end");
}

}  // namespace
}  // namespace tessera
