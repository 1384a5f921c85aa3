// Host <-> device transfers for every dtype x layout x memory config, on the
// native cpu device and the emulated wormhole_b0.
#include <gtest/gtest.h>

#include <gmock/gmock.h>

#include <cstring>

#include "tessera/tensor/access.h"
#include "tessera/tensor/tensor.h"
#include "test_util.h"

namespace tessera {
namespace {

using testing::NamedConfig;

const DataType kAllTypes[] = {DataType::FLOAT32, DataType::BFLOAT16, DataType::BFLOAT8_B, DataType::BFLOAT4_B,
                              DataType::UINT8,   DataType::UINT16,   DataType::UINT32,    DataType::INT32};

void round_trip_all(Device& dev, const std::vector<NamedConfig>& configs, const Shape& shape, int cq) {
  int checked = 0;
  for (DataType dt : kAllTypes) {
    for (Layout layout : {Layout::ROW_MAJOR, Layout::TILE}) {
      if (is_block_float(dt) && layout == Layout::ROW_MAJOR) continue;
      Tensor host = testing::random_tensor(shape, dt, layout, 17);
      for (const auto& c : configs) {
        SCOPED_TRACE(fmt::format("{} {} {} {}", dev.descriptor().name, data_type_name(dt), layout_name(layout), c.name));
        auto dev_t = to_device(host, dev, c.config, static_cast<uint8_t>(cq));
        ASSERT_TRUE(dev_t.ok()) << dev_t.status().to_string();
        ASSERT_OK_AND_ASSIGN(Tensor back, dev_t->cpu(true, static_cast<uint8_t>(cq)));
        ASSERT_EQ(testing::host_bytes(back), testing::host_bytes(host));
        // Into a preallocated host tensor, non-blocking, valid after synchronize.
        Tensor pre = allocate_tensor_on_host(host.spec());
        ASSERT_OK(copy_device_to_host_tensor(*dev_t, pre, false, static_cast<uint8_t>(cq)));
        ASSERT_OK(synchronize_device(dev));
        ASSERT_EQ(testing::host_bytes(pre), testing::host_bytes(host));
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 14 * static_cast<int>(configs.size()));
}

TEST(Transfer, EveryDtypeLayoutAndMemoryConfigOnCpu) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.num_command_queues = 2}));
  // 2D view 128 x 64: shards stay TILE-aligned on one or two cores.
  round_trip_all(*dev, testing::memory_configs_for(128, 64, dev->descriptor().grid.x), Shape{2, 64, 64}, 0);
  round_trip_all(*dev, testing::memory_configs_for(128, 64, dev->descriptor().grid.x), Shape{2, 64, 64}, 1);
}

TEST(Transfer, EveryDtypeLayoutAndMemoryConfigOnWormhole) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.descriptor = "wormhole_b0"}));
  round_trip_all(*dev, testing::wormhole_memory_configs_for(192, 192), Shape{1, 3, 64, 192}, 0);
}

TEST(Transfer, OddShapesInterleaved) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.descriptor = "wormhole_b0"}));
  for (Shape s : {Shape{1}, Shape{3, 5}, Shape{2, 3, 37, 33}, Shape{97, 131}}) {
    for (DataType dt : kAllTypes) {
      for (Layout layout : {Layout::ROW_MAJOR, Layout::TILE}) {
        if (is_block_float(dt) && layout == Layout::ROW_MAJOR) continue;
        Tensor host = testing::random_tensor(s, dt, layout, 3);
        for (const MemoryConfig& mc : {DRAM_MEMORY_CONFIG, L1_MEMORY_CONFIG}) {
          ASSERT_OK_AND_ASSIGN(Tensor d, to_device(host, *dev, mc));
          ASSERT_OK_AND_ASSIGN(Tensor back, d.cpu());
          ASSERT_EQ(testing::host_bytes(back), testing::host_bytes(host)) << s.to_string();
        }
      }
    }
  }
}

// Pages really are where the memory config says: interleaved tiles round-robin
// over the 12 DRAM banks, height shards on their cores in order.
TEST(Transfer, PhysicalPlacement) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.descriptor = "wormhole_b0"}));
  std::vector<float> v(64 * 448);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  ASSERT_OK_AND_ASSIGN(Tensor host, Tensor::from_vector(v, Shape{64, 448}, DataType::FLOAT32, Layout::TILE));
  ASSERT_OK_AND_ASSIGN(Tensor d, to_device(host, *dev, DRAM_MEMORY_CONFIG));
  ASSERT_OK(synchronize_device(*dev));
  // 2 x 14 tiles: tile p is page p, in bank p % 12 at offset (p / 12) * 4096.
  for (uint32_t p = 0; p < 28; ++p) {
    float first;
    std::memcpy(&first, d.buffer()->bank_data(p % 12) + (p / 12) * 4096, 4);
    EXPECT_EQ(first, static_cast<float>((p / 14) * 32 * 448 + (p % 14) * 32)) << p;
  }
  MemoryConfig hs{TensorMemoryLayout::HEIGHT_SHARDED, BufferType::L1,
                  ShardSpec{CoreRange({6, 0}, {7, 0}), {32, 448}, ShardOrientation::ROW_MAJOR}};
  ASSERT_OK_AND_ASSIGN(Tensor s, to_device(host, *dev, hs));
  ASSERT_OK(synchronize_device(*dev));
  float first_of_core7;
  std::memcpy(&first_of_core7, s.buffer()->bank_data(7), 4);
  EXPECT_EQ(first_of_core7, 32.0f * 448);
}

TEST(Transfer, InvalidSpecsAndMismatchesAreRefused) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.descriptor = "wormhole_b0"}));
  EXPECT_ERROR(Tensor::from_vector(std::vector<float>(64), Shape{8, 8}, DataType::BFLOAT8_B, Layout::ROW_MAJOR),
               StatusCode::kInvalidArgument, "bfloat8_b requires TILE layout, found ROW_MAJOR");
  Tensor host = testing::random_tensor(Shape{1, 1, 96, 64}, DataType::BFLOAT16, Layout::TILE, 1);
  using ML = TensorMemoryLayout;
  auto hs = [](uint32_t sh, uint32_t sw, CoreRangeSet g) {
    return MemoryConfig{ML::HEIGHT_SHARDED, BufferType::L1, ShardSpec{std::move(g), {sh, sw}, ShardOrientation::ROW_MAJOR}};
  };
  EXPECT_ERROR(to_device(host, *dev, hs(32, 64, CoreRange({0, 0}, {1, 0}))), StatusCode::kInvalidArgument,
               "shards must cover the tensor evenly");
  EXPECT_ERROR(to_device(host, *dev, hs(48, 64, CoreRange({0, 0}, {1, 0}))), StatusCode::kInvalidArgument,
               "TILE shards must be multiples of 32x32, found shard shape 48x64");
  EXPECT_ERROR(to_device(host, *dev, hs(32, 64, CoreRange({6, 7}, {8, 7}))), StatusCode::kInvalidArgument,
               "shard core (8,7) is outside the compute grid");
  EXPECT_ERROR(to_device(host, *dev, MemoryConfig{ML::HEIGHT_SHARDED, BufferType::L1, std::nullopt}),
               StatusCode::kInvalidArgument, "needs a shard spec");
  Tensor rm_host = testing::random_tensor(Shape{1, 1, 96, 3}, DataType::BFLOAT16, Layout::ROW_MAJOR, 1);
  EXPECT_ERROR(to_device(rm_host, *dev, hs(32, 3, CoreRange({0, 0}, {2, 0}))), StatusCode::kInvalidArgument,
               "ROW_MAJOR shard rows must be a multiple of 4 bytes");
  ASSERT_OK_AND_ASSIGN(Tensor d, to_device(host, *dev, DRAM_MEMORY_CONFIG));
  Tensor wrong = testing::random_tensor(Shape{1, 1, 96, 64}, DataType::FLOAT32, Layout::TILE, 1);
  EXPECT_ERROR(copy_host_to_device_tensor(wrong, d), StatusCode::kInvalidArgument,
               "does not match device tensor bf16[1,1,96,64]:TILE");
  EXPECT_ERROR(copy_device_to_host_tensor(d, wrong), StatusCode::kInvalidArgument, "does not match");
  EXPECT_ERROR(copy_host_to_device_tensor(host, host), StatusCode::kInvalidArgument, "expected a device tensor");
  EXPECT_ERROR(copy_host_to_device_tensor(d, d), StatusCode::kInvalidArgument, "expected a host tensor");
}

// Batch views share the tensor's storage: reads see the right images,
// writes land in the parent, the view keeps the parent alive and frees
// nothing; out-of-range, sharded, TILE and misaligned views are refused.
TEST(Transfer, BatchViewsShareStorage) {
  for (std::string_view desc : {"cpu", "wormhole_b0"}) {
    SCOPED_TRACE(desc);
    ASSERT_OK_AND_ASSIGN(auto dev, open_device({.descriptor = std::string(desc)}));
    for (const Shape& shape : {Shape{5, 3, 7, 4}, Shape{6, 24, 16}, Shape{4, 3}}) {
      SCOPED_TRACE(shape.to_string());
      const uint64_t per = shape.volume() / shape[0];
      std::vector<float> values(shape.volume());
      for (size_t k = 0; k < values.size(); ++k) values[k] = static_cast<float>(k);
      ASSERT_OK_AND_ASSIGN(Tensor host, Tensor::from_vector(values, shape, DataType::FLOAT32));
      ASSERT_OK_AND_ASSIGN(Tensor whole, to_device(host, *dev));
      const uint32_t banks = dev->descriptor().num_dram_banks;
      for (uint32_t first = 0; first < shape[0]; ++first) {
        const uint32_t count = std::min<uint32_t>(2, shape[0] - first);
        auto view = whole.batch_view(first, count);
        if ((first * per / shape[-1]) % banks != 0) {  // rows of the first item start mid-round
          EXPECT_EQ(view.status().code(), StatusCode::kFailedPrecondition);
          continue;
        }
        ASSERT_OK(view.status());
        EXPECT_EQ(view->shape()[0], count);
        ASSERT_OK_AND_ASSIGN(Tensor got, view->cpu());
        ASSERT_OK_AND_ASSIGN(auto v, got.to_vector());
        for (size_t k = 0; k < v.size(); ++k) ASSERT_EQ(v[k], values[first * per + k]);
        // The host tensor's views too.
        ASSERT_OK_AND_ASSIGN(Tensor hv, host.batch_view(first, count));
        ASSERT_OK_AND_ASSIGN(auto hvv, hv.to_vector());
        EXPECT_EQ(hvv, v);
      }
      // A write through a view lands in the parent's images.
      if (((shape[0] - 1) * per / shape[-1]) % banks == 0) {
        ASSERT_OK_AND_ASSIGN(Tensor last, whole.batch_view(shape[0] - 1, 1));
        std::vector<float> ones(per, -1.0f);
        std::vector<uint32_t> d(shape.dims().begin(), shape.dims().end());
        d[0] = 1;
        ASSERT_OK_AND_ASSIGN(Tensor src, Tensor::from_vector(ones, Shape(std::span<const uint32_t>(d)), DataType::FLOAT32));
        ASSERT_OK(copy_host_to_device_tensor(src, last));
        ASSERT_OK_AND_ASSIGN(Tensor back, whole.cpu());
        ASSERT_OK_AND_ASSIGN(auto b, back.to_vector());
        for (size_t k = 0; k < b.size(); ++k) ASSERT_EQ(b[k], k < (shape[0] - 1) * per ? values[k] : -1.0f);
      }
    }
  }
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  ASSERT_OK_AND_ASSIGN(Tensor whole, to_device(testing::random_tensor(Shape{4, 8, 16}, DataType::FLOAT32,
                                                                      Layout::ROW_MAJOR, 3), *dev));
  // The view keeps the parent's memory: the parent's last handle goes, the view still reads.
  ASSERT_OK_AND_ASSIGN(Tensor want, whole.cpu());
  ASSERT_OK_AND_ASSIGN(Tensor view, whole.batch_view(2, 2));
  const uint64_t used = dev->memory_stats(BufferType::DRAM).allocated_bytes;
  whole = Tensor();
  EXPECT_EQ(dev->memory_stats(BufferType::DRAM).allocated_bytes, used);
  deallocate(view);  // a view frees nothing
  EXPECT_EQ(dev->memory_stats(BufferType::DRAM).allocated_bytes, used);
  ASSERT_OK_AND_ASSIGN(Tensor got, view.cpu());
  const auto want_bytes = testing::host_bytes(want);
  EXPECT_EQ(testing::host_bytes(got), std::vector<std::byte>(want_bytes.begin() + 2 * 8 * 16 * 4, want_bytes.end()));
  view = Tensor();
  EXPECT_LT(dev->memory_stats(BufferType::DRAM).allocated_bytes, used);
  // Refused views.
  ASSERT_OK_AND_ASSIGN(Tensor t, to_device(testing::random_tensor(Shape{4, 8, 16}, DataType::FLOAT32,
                                                                  Layout::ROW_MAJOR, 4), *dev));
  EXPECT_EQ(t.batch_view(3, 2).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(t.batch_view(0, 0).status().code(), StatusCode::kOutOfRange);
  EXPECT_THAT(t.batch_view(5, 1).status().message(), ::testing::HasSubstr("items [5, 6) of f32[4,8,16]"));
  ASSERT_OK_AND_ASSIGN(Tensor tiles, to_device(testing::random_tensor(Shape{4, 32, 32}, DataType::FLOAT32,
                                                                      Layout::TILE, 5), *dev));
  EXPECT_EQ(tiles.batch_view(0, 1).status().code(), StatusCode::kFailedPrecondition);
  const MemoryConfig sharded{TensorMemoryLayout::HEIGHT_SHARDED, BufferType::L1,
                             ShardSpec{CoreRangeSet(CoreRange({0, 0}, {0, 0})), {32, 16}, ShardOrientation::ROW_MAJOR}};
  ASSERT_OK_AND_ASSIGN(Tensor sh, to_device(testing::random_tensor(Shape{4, 8, 16}, DataType::FLOAT32,
                                                                   Layout::ROW_MAJOR, 6), *dev, sharded));
  EXPECT_EQ(sh.batch_view(0, 1).status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tessera
