// tilize / untilize against reference kernels, and reshard between DRAM- and
// L1-sharded layouts (height and width), in place and not.
#include "tessera/ops/data_movement.h"

#include "tessera/ops/reference.h"
#include "test_util.h"

namespace tessera {
namespace {

TEST(Tilize, MatchesReferenceEveryDtypeAndConfig) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.descriptor = "wormhole_b0"}));
  auto configs = testing::wormhole_memory_configs_for(192, 192);
  configs.push_back({"dram", DRAM_MEMORY_CONFIG});
  const std::pair<DataType, DataType> pairs[] = {
      {DataType::FLOAT32, DataType::FLOAT32},   {DataType::BFLOAT16, DataType::BFLOAT16},
      {DataType::FLOAT32, DataType::BFLOAT16},  {DataType::FLOAT32, DataType::BFLOAT8_B},
      {DataType::BFLOAT16, DataType::BFLOAT4_B}, {DataType::UINT32, DataType::UINT32},
      {DataType::UINT16, DataType::UINT16},     {DataType::INT32, DataType::INT32}};
  for (auto [in, out] : pairs) {
    Tensor h = testing::random_tensor(Shape{1, 3, 64, 192}, in, Layout::ROW_MAJOR, 5);
    ASSERT_OK_AND_ASSIGN(Tensor expected, reference::tilize(h, out));
    for (const auto& c : configs) {
      SCOPED_TRACE(fmt::format("{}->{} {}", data_type_name(in), data_type_name(out), c.name));
      auto d = to_device(h, *dev, c.config);
      ASSERT_TRUE(d.ok()) << d.status().to_string();
      ASSERT_OK_AND_ASSIGN(Tensor t, tilize(*d, {.dtype = out}));
      ASSERT_OK_AND_ASSIGN(Tensor got, t.cpu());
      ASSERT_EQ(testing::host_bytes(got), testing::host_bytes(expected));
      // And back.
      DataType back_type = is_block_float(out) ? DataType::FLOAT32 : out;
      ASSERT_OK_AND_ASSIGN(Tensor u, untilize(t, {.dtype = back_type}));
      ASSERT_OK_AND_ASSIGN(Tensor ugot, u.cpu());
      ASSERT_OK_AND_ASSIGN(Tensor uexp, reference::untilize(expected, back_type));
      ASSERT_EQ(testing::host_bytes(ugot), testing::host_bytes(uexp));
    }
  }
}

TEST(Tilize, OddShapesPadWithZeros) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  for (Shape s : {Shape{1}, Shape{5, 3}, Shape{2, 33, 31}, Shape{3, 2, 37, 65}}) {
    for (DataType dt : {DataType::FLOAT32, DataType::BFLOAT16}) {
      Tensor h = testing::random_tensor(s, dt, Layout::ROW_MAJOR, 2);
      ASSERT_OK_AND_ASSIGN(Tensor d, to_device(h, *dev));
      ASSERT_OK_AND_ASSIGN(Tensor t, to_layout(d, Layout::TILE));
      ASSERT_OK_AND_ASSIGN(Tensor got, t.cpu());
      ASSERT_OK_AND_ASSIGN(Tensor expected, reference::tilize(h, dt));
      ASSERT_EQ(testing::host_bytes(got), testing::host_bytes(expected)) << s.to_string();
      ASSERT_OK_AND_ASSIGN(Tensor r, to_layout(t, Layout::ROW_MAJOR));
      ASSERT_OK_AND_ASSIGN(Tensor rgot, r.cpu());
      ASSERT_EQ(testing::host_bytes(rgot), testing::host_bytes(h)) << s.to_string();
    }
  }
}

TEST(Reshard, DramShardedToL1ShardedAndBackInPlace) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.descriptor = "wormhole_b0"}));
  using ML = TensorMemoryLayout;
  auto cfg = [](ML ml, BufferType bt, CoreRange r, uint32_t sh, uint32_t sw) {
    return MemoryConfig{ml, bt, ShardSpec{CoreRangeSet(r), {sh, sw}, ShardOrientation::ROW_MAJOR}};
  };
  struct Case { std::string name; MemoryConfig dram, l1; Layout layout; };
  // 2D view: 384 x 96 for the TILE case, the UNet-like [1,1,3,6144] width case in ROW_MAJOR.
  std::vector<std::pair<Case, Shape>> cases = {
      {{"height", cfg(ML::HEIGHT_SHARDED, BufferType::DRAM, CoreRange({0, 0}, {11, 0}), 32, 96),
        cfg(ML::HEIGHT_SHARDED, BufferType::L1, CoreRange({0, 0}, {3, 2}), 32, 96), Layout::TILE},
       Shape{1, 1, 384, 96}},
      {{"width", cfg(ML::WIDTH_SHARDED, BufferType::DRAM, CoreRange({0, 0}, {11, 0}), 3, 512),
        cfg(ML::WIDTH_SHARDED, BufferType::L1, CoreRange({0, 0}, {7, 7}), 3, 96), Layout::ROW_MAJOR},
       Shape{1, 1, 3, 6144}},
  };
  for (auto& [c, shape] : cases) {
    SCOPED_TRACE(c.name);
    Tensor h = testing::random_tensor(shape, DataType::BFLOAT16, c.layout, 4);
    ASSERT_OK_AND_ASSIGN(Tensor dram, to_device(h, *dev, c.dram));
    ASSERT_OK_AND_ASSIGN(Tensor l1, reshard(dram, c.l1));
    EXPECT_EQ(l1.memory_config(), c.l1);
    ASSERT_OK_AND_ASSIGN(Tensor got, l1.cpu());
    ASSERT_EQ(testing::host_bytes(got), testing::host_bytes(h));
    // In place: write new data to DRAM, reshard into the persistent L1 tensor.
    const uint64_t addr = *l1.buffer_address();
    Tensor h2 = testing::random_tensor(shape, DataType::BFLOAT16, c.layout, 99);
    ASSERT_OK(copy_host_to_device_tensor(h2, dram));
    ASSERT_OK_AND_ASSIGN(Tensor same, reshard(dram, c.l1, l1));
    EXPECT_EQ(*same.buffer_address(), addr);
    ASSERT_OK_AND_ASSIGN(Tensor got2, l1.cpu());
    ASSERT_EQ(testing::host_bytes(got2), testing::host_bytes(h2));
    // L1 -> DRAM sharded, in place.
    ASSERT_OK_AND_ASSIGN(Tensor dram2, allocate_tensor_on_device(dram.spec(), *dev));
    ASSERT_OK(reshard(l1, c.dram, dram2).status());
    ASSERT_OK_AND_ASSIGN(Tensor got3, dram2.cpu());
    ASSERT_EQ(testing::host_bytes(got3), testing::host_bytes(h2));
    // And through every other config with to_memory_config.
    for (const auto& nc : testing::wormhole_memory_configs_for(384, 96)) {
      if (c.layout != Layout::TILE) break;
      TensorSpec spec = l1.spec();
      spec.memory_config = nc.config;
      if (!spec.validate_for_device(dev->descriptor()).ok()) continue;  // 96 wide: not every split is tile-aligned
      ASSERT_OK_AND_ASSIGN(Tensor moved, to_memory_config(l1, nc.config));
      ASSERT_OK_AND_ASSIGN(Tensor g, moved.cpu());
      ASSERT_EQ(testing::host_bytes(g), testing::host_bytes(h2)) << nc.name;
    }
  }
}

TEST(Reshard, Errors) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  Tensor h = testing::random_tensor(Shape{64, 64}, DataType::BFLOAT16, Layout::TILE, 1);
  ASSERT_OK_AND_ASSIGN(Tensor d, to_device(h, *dev));
  ASSERT_OK_AND_ASSIGN(Tensor wrong, to_device(testing::random_tensor(Shape{64, 32}, DataType::BFLOAT16, Layout::TILE, 1),
                                               *dev, L1_MEMORY_CONFIG));
  EXPECT_ERROR(reshard(d, L1_MEMORY_CONFIG, wrong), StatusCode::kInvalidArgument, "does not match the requested");
  EXPECT_ERROR(tilize(d), StatusCode::kInvalidArgument, "expected a ROW_MAJOR input");
  EXPECT_ERROR(reshard(h, L1_MEMORY_CONFIG), StatusCode::kInvalidArgument, "must be a device tensor");
}

}  // namespace
}  // namespace tessera
