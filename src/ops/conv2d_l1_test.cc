// conv2d's L1 plan: parallel configs, block sizes, the estimate, the
// original's L1 failures on wormhole_b0, and sharded outputs that hold the
// same values as the DRAM ones.
#include "tessera/ops/conv2d_l1.h"

#include "tessera/ops/data_movement.h"
#include "test_util.h"

namespace tessera {
namespace {

Conv2dParams unet_conv(uint32_t h, uint32_t w, uint32_t cin, uint32_t cout) {
  Conv2dParams p;
  p.input_height = h, p.input_width = w, p.in_channels = cin, p.out_channels = cout;
  p.kernel_size = {3, 3};
  p.with_padding(1, 1);
  p.activation = {UnaryOpType::RELU};
  return p;
}

constexpr CoreCoord kWormholeGrid{8, 8};

TEST(CoreRanges, NumCoresToCoreRangeSet) {
  ASSERT_OK_AND_ASSIGN(CoreRangeSet one, num_cores_to_corerangeset(1, kWormholeGrid));
  EXPECT_EQ(one, CoreRangeSet(CoreRange({0, 0}, {0, 0})));
  ASSERT_OK_AND_ASSIGN(CoreRangeSet four, num_cores_to_corerangeset(4, kWormholeGrid));
  EXPECT_EQ(four, CoreRangeSet(CoreRange({0, 0}, {3, 0})));
  ASSERT_OK_AND_ASSIGN(CoreRangeSet s63, num_cores_to_corerangeset(63, kWormholeGrid));
  EXPECT_EQ(s63, CoreRangeSet({CoreRange({0, 0}, {7, 6}), CoreRange({0, 7}, {6, 7})}));
  EXPECT_EQ(s63.num_cores(), 63u);
  ASSERT_OK_AND_ASSIGN(CoreRangeSet cols, num_cores_to_corerangeset(10, kWormholeGrid, false));
  EXPECT_EQ(cols, CoreRangeSet({CoreRange({0, 0}, {0, 7}), CoreRange({1, 0}, {1, 1})}));
  EXPECT_THAT(num_cores_to_corerangeset(65, kWormholeGrid).status().message(),
              ::testing::HasSubstr("expected 1..64 cores for a 8x8 grid, got 65"));
}

TEST(Conv2dL1, HeightShardingUsesTheClosestDivisorOfTheTileRows) {
  // UNet enc1 at 480x640: 9600 tile rows over 64 cores, 150 tiles each.
  const Conv2dGeometry g = conv2d_geometry(unet_conv(480, 640, 32, 32), false);
  ASSERT_OK_AND_ASSIGN(auto pc, determine_conv2d_parallel_config(g, TensorMemoryLayout::HEIGHT_SHARDED, Layout::TILE,
                                                                 kWormholeGrid, std::nullopt));
  EXPECT_EQ(pc.cores_nhw, 64u);
  EXPECT_EQ(pc.output_memory_config.shard_spec->shape, (std::array<uint32_t, 2>{4800, 32}));
  // The bottleneck at 30x40: 1200 rows are 38 tiles, so 38 cores of 32 rows.
  const Conv2dGeometry b = conv2d_geometry(unet_conv(30, 40, 512, 512), false);
  ASSERT_OK_AND_ASSIGN(auto pb, determine_conv2d_parallel_config(b, TensorMemoryLayout::HEIGHT_SHARDED, Layout::TILE,
                                                                 kWormholeGrid, std::nullopt));
  EXPECT_EQ(pb.cores_nhw, 38u);
  EXPECT_EQ(pb.output_memory_config.shard_spec->shape, (std::array<uint32_t, 2>{32, 512}));
  // Row-major outputs split whole rows: 1200 = 60 x 20.
  ASSERT_OK_AND_ASSIGN(auto pr, determine_conv2d_parallel_config(b, TensorMemoryLayout::HEIGHT_SHARDED,
                                                                 Layout::ROW_MAJOR, kWormholeGrid, std::nullopt));
  EXPECT_EQ(pr.cores_nhw, 60u);
  EXPECT_EQ(pr.output_memory_config.shard_spec->shape, (std::array<uint32_t, 2>{20, 512}));
  // Width and block sharding split whole channel tiles.
  ASSERT_OK_AND_ASSIGN(auto pw, determine_conv2d_parallel_config(b, TensorMemoryLayout::WIDTH_SHARDED, Layout::TILE,
                                                                 kWormholeGrid, std::nullopt));
  EXPECT_EQ(pw.cores_c, 16u);
  EXPECT_EQ(pw.output_memory_config.shard_spec->shape, (std::array<uint32_t, 2>{1216, 32}));
  ASSERT_OK_AND_ASSIGN(auto pk, determine_conv2d_parallel_config(b, TensorMemoryLayout::BLOCK_SHARDED, Layout::TILE,
                                                                 kWormholeGrid, std::nullopt));
  EXPECT_EQ(pk.cores_c, 8u);
  EXPECT_EQ(pk.cores_nhw, 2u);
  EXPECT_EQ(pk.output_memory_config.shard_spec->shape, (std::array<uint32_t, 2>{608, 64}));
  // A core grid that cannot hold even shards is refused.
  EXPECT_THAT(determine_conv2d_parallel_config(b, TensorMemoryLayout::HEIGHT_SHARDED, Layout::TILE, kWormholeGrid,
                                               CoreRangeSet(CoreRange({0, 0}, {7, 0})))
                  .status()
                  .message(),
              ::testing::HasSubstr("does not split evenly over the 8 cores of core_grid"));
}

TEST(Conv2dL1, ActBlockHeight) {
  const Conv2dGeometry g = conv2d_geometry(unet_conv(480, 640, 32, 32), false);
  ASSERT_OK_AND_ASSIGN(auto pc, determine_conv2d_parallel_config(g, TensorMemoryLayout::HEIGHT_SHARDED, Layout::TILE,
                                                                 kWormholeGrid, std::nullopt));
  auto abh = [&](uint32_t override_rows) -> uint32_t {
    Conv2dConfig c;
    c.act_block_h_override = override_rows;
    StatusOr<Conv2dL1Estimate> e = estimate_conv2d_l1(g, pc, c, DataType::BFLOAT16, DataType::BFLOAT16);
    return e.ok() ? e->act_block_h : 0;
  };
  EXPECT_EQ(abh(0), 4800u);    // all 150 tile rows of a core
  EXPECT_EQ(abh(320), 320u);   // 10 tiles divide 150
  EXPECT_EQ(abh(128), 96u);    // 4 tiles do not: the closest smaller divisor, 3
  Conv2dConfig bad;
  bad.act_block_h_override = 48;
  EXPECT_EQ(estimate_conv2d_l1(g, pc, bad, DataType::BFLOAT16, DataType::BFLOAT16).status().message(),
            "Config Error: act_block_h_override must be a multiple of 32 (tile height).");
  // The pieces of the estimate for enc1 conv2 as the UNet configures it.
  Conv2dConfig unet;
  unet.weights_dtype = DataType::BFLOAT8_B;
  unet.act_block_h_override = 6 * 32;
  unet.enable_act_double_buffer = unet.enable_weights_double_buffer = true;
  unet.compute_config = {.math_fidelity = MathFidelity::LoFi, .fp32_dest_acc_en = true, .packer_l1_acc = true};
  ASSERT_OK_AND_ASSIGN(Conv2dL1Estimate e, estimate_conv2d_l1(g, pc, unet, DataType::BFLOAT8_B, DataType::BFLOAT8_B));
  EXPECT_EQ(e.act_block_w, 96u);                         // round_up(32 * 3, 32)
  EXPECT_EQ(e.activation_cb, 192u * 96 * 2 * 2);         // bfloat16 rows, double buffered
  EXPECT_EQ(e.weights_cb, 3u * 1088 * 2);                // 96 x 32 bfloat8_b = 3 tiles, double buffered
  EXPECT_EQ(e.partials_cb, 192u * 32 * 4);               // float32 partials
  EXPECT_EQ(e.output_buffer, 150u * 1088);               // 4800 x 32 bfloat8_b
  EXPECT_EQ(e.halo_buffer, (482u * 642 / 64 + 1 + 2 * 642 + 2) * 32 * 2);
}

class Conv2dL1Device : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(wh_, open_device({.descriptor = "wormhole_b0", .l1_small_size = 98304}));
  }
  std::shared_ptr<Device> wh_;
};

TEST_F(Conv2dL1Device, CircularBuffersBeyondL1FailLikeTheOriginal) {
  const Conv2dParams p = unet_conv(480, 640, 32, 32);
  Tensor x = testing::random_tensor(Shape{1, 480, 640, 32}, DataType::BFLOAT16, Layout::ROW_MAJOR, 1);
  ASSERT_OK_AND_ASSIGN(Tensor dx, to_device(x, *wh_, DRAM_MEMORY_CONFIG));
  ASSERT_OK_AND_ASSIGN(Tensor w, Tensor::from_vector(testing::random_values(32 * 32 * 9, 2, 0.1f),
                                                     Shape{32, 32, 3, 3}, DataType::FLOAT32));
  // Every row on one core: the activation block alone is 307200 x 96 x 2 B.
  Conv2dConfig one_core{.shard_layout = TensorMemoryLayout::HEIGHT_SHARDED,
                        .core_grid = CoreRangeSet(CoreRange({0, 0}, {0, 0})),
                        .override_sharding_config = true};
  Status s = conv2d(dx, w, std::nullopt, p, one_core).status();
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), ::testing::StartsWith("Statically allocated circular buffers on core range "
                                                 "[(x=0,y=0) - (x=0,y=0)] grow to "));
  EXPECT_THAT(s.message(), ::testing::HasSubstr("B which is beyond max L1 size of 1499136 B"));
  // Eight cores with small blocks: the CBs fit, the 2.4 MB output shard does not.
  Conv2dConfig eight{.shard_layout = TensorMemoryLayout::HEIGHT_SHARDED,
                     .core_grid = CoreRangeSet(CoreRange({0, 0}, {7, 0})),
                     .override_sharding_config = true,
                     .act_block_h_override = 32};
  s = conv2d(dx, w, std::nullopt, p, eight).status();
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), ::testing::StartsWith("Statically allocated circular buffers on core range "
                                                 "[(x=0,y=0) - (x=7,y=0)] clash with L1 buffers"));
  // Sliced through DRAM, the same conv fits: the op picks the slice count.
  Conv2dConfig sliced{.act_block_h_override = 32,
                      .slice_config = Conv2dSliceConfig{Conv2dSliceType::DRAM_HEIGHT, 0}};
  ASSERT_OK_AND_ASSIGN(Conv2dResult r, conv2d(dx, w, std::nullopt, p, sliced));
  EXPECT_EQ(r.output.memory_config(), DRAM_MEMORY_CONFIG);
  // One explicit height slice on the whole grid is too much for L1.
  sliced.slice_config->num_slices = 1;
  sliced.shard_layout = TensorMemoryLayout::HEIGHT_SHARDED;
  sliced.core_grid = CoreRangeSet(CoreRange({0, 0}, {1, 0}));
  sliced.override_sharding_config = true;
  EXPECT_EQ(conv2d(dx, w, std::nullopt, p, sliced).status().code(), StatusCode::kResourceExhausted);
}

TEST_F(Conv2dL1Device, ContradictoryKnobsGetTheOriginalsMessages) {
  const Conv2dParams p = unet_conv(8, 8, 16, 16);
  Tensor x = testing::random_tensor(Shape{1, 8, 8, 16}, DataType::BFLOAT16, Layout::ROW_MAJOR, 1);
  ASSERT_OK_AND_ASSIGN(Tensor dx, to_device(x, *wh_, DRAM_MEMORY_CONFIG));
  ASSERT_OK_AND_ASSIGN(Tensor w, Tensor::from_vector(testing::random_values(16 * 16 * 9, 2, 0.1f),
                                                     Shape{16, 16, 3, 3}, DataType::FLOAT32));
  auto message = [&](Conv2dConfig c) { return std::string(conv2d(dx, w, std::nullopt, p, c).status().message()); };
  EXPECT_EQ(message({.act_block_h_override = 40}),
            "Config Error: act_block_h_override must be a multiple of 32 (tile height).");
  EXPECT_EQ(message({.shard_layout = TensorMemoryLayout::HEIGHT_SHARDED,
                     .core_grid = CoreRangeSet(CoreRange({0, 0}, {1, 0})),
                     .override_sharding_config = true,
                     .reshard_if_not_optimal = true}),
            "Incorrect config provided: reshard_if_not_optimal and override_sharding_config cannot both be set.");
  EXPECT_EQ(message({.shard_layout = TensorMemoryLayout::HEIGHT_SHARDED, .override_sharding_config = true}),
            "If override_sharding_config is set, core_grid must be set as well.");
  EXPECT_EQ(message({.core_grid = CoreRangeSet(CoreRange({0, 0}, {1, 0})), .override_sharding_config = true}),
            "If override_sharding_config is set, shard_layout must be set as well.");
  EXPECT_THAT(message({.slice_config = Conv2dSliceConfig{Conv2dSliceType::DRAM_CHANNEL, 2}}),
              ::testing::HasSubstr("a convolution sums over them"));
}

TEST_F(Conv2dL1Device, ShardedOutputsHoldTheDramValues) {
  Conv2dParams p = unet_conv(30, 40, 64, 64);
  Tensor x = testing::random_tensor(Shape{1, 30, 40, 64}, DataType::BFLOAT16, Layout::ROW_MAJOR, 1);
  ASSERT_OK_AND_ASSIGN(Tensor dx, to_device(x, *wh_, DRAM_MEMORY_CONFIG));
  ASSERT_OK_AND_ASSIGN(Tensor w, Tensor::from_vector(testing::random_values(64 * 64 * 9, 2, 0.1f),
                                                     Shape{64, 64, 3, 3}, DataType::FLOAT32));
  ASSERT_OK_AND_ASSIGN(Conv2dResult plain, conv2d(dx, w, std::nullopt, p, {}));
  ASSERT_OK_AND_ASSIGN(Tensor want, plain.output.cpu());
  for (TensorMemoryLayout l : {TensorMemoryLayout::HEIGHT_SHARDED, TensorMemoryLayout::WIDTH_SHARDED,
                               TensorMemoryLayout::BLOCK_SHARDED}) {
    for (Layout out : {Layout::ROW_MAJOR, Layout::TILE}) {
      SCOPED_TRACE(fmt::format("{} {}", memory_layout_name(l), layout_name(out)));
      ASSERT_OK_AND_ASSIGN(Conv2dResult r, conv2d(dx, plain.weights, p,
                                                  {.output_layout = out, .shard_layout = l, .act_block_h_override = 32}));
      EXPECT_EQ(r.output.memory_config().memory_layout, l);
      EXPECT_EQ(r.output.memory_config().buffer_type, BufferType::L1);
      ASSERT_OK_AND_ASSIGN(Tensor rm, out == Layout::TILE
                                          ? to_layout(r.output, Layout::ROW_MAJOR, {.memory_config = DRAM_MEMORY_CONFIG})
                                          : to_memory_config(r.output, DRAM_MEMORY_CONFIG));
      ASSERT_OK_AND_ASSIGN(Tensor got, rm.cpu());
      EXPECT_EQ(testing::host_bytes(got), testing::host_bytes(want));
    }
  }
  // A sharded L1 input keeps its sharding for the next conv.
  ASSERT_OK_AND_ASSIGN(Conv2dResult a,
                       conv2d(dx, plain.weights, p, {.shard_layout = TensorMemoryLayout::HEIGHT_SHARDED}));
  ASSERT_OK_AND_ASSIGN(Conv2dResult b, conv2d(a.output, plain.weights, p, {}));
  EXPECT_EQ(b.output.memory_config(), a.output.memory_config());
  // Auto sharding picks a layout whose plan fits.
  ASSERT_OK_AND_ASSIGN(Conv2dResult c, conv2d(dx, plain.weights, p, {.slice_config = Conv2dL1FullSliceConfig}));
  EXPECT_TRUE(c.output.memory_config().is_sharded());
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// The conv kernel tilizes its own rows (whole tile bands through the tilize
// and block-float kernels, bands shared between shards row by row): bit for
// bit what tilize() makes of the row-major output, for every tile dtype, odd
// row counts and channel counts, batches, interleaved and sharded outputs.
TEST(Conv2dTiles, FusedTileOutputsEqualTilize) {
  ASSERT_OK_AND_ASSIGN(auto cpu, open_device({}));
  ASSERT_OK_AND_ASSIGN(auto wh, open_device({.descriptor = "wormhole_b0"}));
  struct Case {
    uint32_t n, h, w, cin, cout;
  };
  for (const Case& c : {Case{1, 13, 7, 16, 40}, Case{2, 9, 10, 8, 32}, Case{1, 30, 40, 64, 64}, Case{3, 5, 5, 4, 1}}) {
    for (DataType in : {DataType::BFLOAT16, DataType::FLOAT32}) {
      for (DataType out : {DataType::BFLOAT16, DataType::FLOAT32, DataType::BFLOAT8_B, DataType::BFLOAT4_B}) {
        if (in == DataType::FLOAT32 && out == DataType::BFLOAT16) continue;  // oneDNN: no f32 -> bf16 conv
        for (auto* dev : {cpu.get(), wh.get()}) {
          SCOPED_TRACE(fmt::format("n{} {}x{} {}->{} {}->{} on {}", c.n, c.h, c.w, c.cin, c.cout, data_type_name(in),
                                   data_type_name(out), dev->descriptor().name));
          Conv2dParams p;
          p.batch_size = c.n, p.input_height = c.h, p.input_width = c.w, p.in_channels = c.cin, p.out_channels = c.cout;
          p.with_padding(1, 1);
          p.activation = {UnaryOpType::RELU};
          Tensor x = testing::random_tensor(Shape{c.n, c.h, c.w, c.cin}, in, Layout::ROW_MAJOR, 1);
          ASSERT_OK_AND_ASSIGN(Tensor dx, to_device(x, *dev, DRAM_MEMORY_CONFIG));
          ASSERT_OK_AND_ASSIGN(Tensor wt, Tensor::from_vector(testing::random_values(c.cout * c.cin * 9, 2, 0.2f),
                                                              Shape{c.cout, c.cin, 3, 3}, DataType::FLOAT32));
          const DataType rows = out == DataType::FLOAT32 || in == DataType::FLOAT32 ? DataType::FLOAT32
                                                                                    : DataType::BFLOAT16;
          ASSERT_OK_AND_ASSIGN(Conv2dResult rm, conv2d(dx, wt, std::nullopt, p, {.dtype = rows}));
          std::vector<std::optional<TensorMemoryLayout>> layouts{std::nullopt};
          if (dev == wh.get() && c.cout % 32 == 0) layouts.push_back(TensorMemoryLayout::HEIGHT_SHARDED);
          for (auto layout : layouts) {
            ASSERT_OK_AND_ASSIGN(Conv2dResult tiled,
                                 conv2d(dx, rm.weights, p,
                                        {.dtype = out, .output_layout = Layout::TILE, .shard_layout = layout}));
            ASSERT_OK_AND_ASSIGN(Tensor want, tilize(rm.output, {.memory_config = tiled.output.memory_config(),
                                                                 .dtype = out}));
            ASSERT_OK_AND_ASSIGN(Tensor a, tiled.output.cpu());
            ASSERT_OK_AND_ASSIGN(Tensor b, want.cpu());
            EXPECT_EQ(testing::host_bytes(a), testing::host_bytes(b));
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// The conv kernel reads tiles and shards itself (each shard untilizes or
// gathers the rows it reads, halo included): bit for bit what it computes
// from the same values as interleaved rows.
TEST(Conv2dTiles, TileAndShardedInputsEqualRows) {
  ASSERT_OK_AND_ASSIGN(auto wh, open_device({.descriptor = "wormhole_b0"}));
  ASSERT_OK_AND_ASSIGN(auto cpu, open_device({}));
  struct Case {
    uint32_t n, h, w, cin, cout;
  };
  for (const Case& c : {Case{1, 13, 7, 40, 16}, Case{2, 9, 10, 32, 32}, Case{1, 30, 40, 64, 64}}) {
    for (DataType tile_type : {DataType::BFLOAT16, DataType::BFLOAT8_B, DataType::BFLOAT4_B, DataType::FLOAT32}) {
      for (auto* dev : {cpu.get(), wh.get()}) {
        SCOPED_TRACE(fmt::format("n{} {}x{} {}->{} {} on {}", c.n, c.h, c.w, c.cin, c.cout, data_type_name(tile_type),
                                 dev->descriptor().name));
        Conv2dParams p;
        p.batch_size = c.n, p.input_height = c.h, p.input_width = c.w, p.in_channels = c.cin, p.out_channels = c.cout;
        p.with_padding(1, 1);
        const DataType rows = tile_type == DataType::FLOAT32 ? DataType::FLOAT32 : DataType::BFLOAT16;
        Tensor x = testing::random_tensor(Shape{1, 1, c.n * c.h * c.w, c.cin}, DataType::FLOAT32, Layout::ROW_MAJOR, 3);
        ASSERT_OK_AND_ASSIGN(Tensor dx, to_device(x, *dev, DRAM_MEMORY_CONFIG));
        ASSERT_OK_AND_ASSIGN(Tensor tiles, tilize(dx, {.dtype = tile_type}));
        ASSERT_OK_AND_ASSIGN(Tensor plain, untilize(tiles, {.dtype = rows}));
        ASSERT_OK_AND_ASSIGN(Tensor wt, Tensor::from_vector(testing::random_values(c.cout * c.cin * 9, 2, 0.2f),
                                                            Shape{c.cout, c.cin, 3, 3}, DataType::FLOAT32));
        ASSERT_OK_AND_ASSIGN(Conv2dResult want, conv2d(plain, wt, std::nullopt, p, {}));
        ASSERT_OK_AND_ASSIGN(Tensor want_h, want.output.cpu());
        std::vector<Tensor> inputs{tiles};
        if (dev == wh.get()) {
          // Height-sharded rows over 8 cores (the row count divides evenly in these cases).
          const uint32_t total = c.n * c.h * c.w;
          if (total % 8 == 0) {
            MemoryConfig hs{TensorMemoryLayout::HEIGHT_SHARDED, BufferType::L1,
                            ShardSpec{CoreRangeSet(CoreRange({0, 0}, {7, 0})), {total / 8, c.cin}}};
            ASSERT_OK_AND_ASSIGN(Tensor sharded, to_memory_config(plain, hs));
            inputs.push_back(sharded);
          }
        }
        for (const Tensor& in : inputs) {
          ASSERT_OK_AND_ASSIGN(Conv2dResult got, conv2d(in, want.weights, p, {.dtype = rows}));
          ASSERT_OK_AND_ASSIGN(Tensor got_h, got.output.cpu());
          EXPECT_EQ(testing::host_bytes(got_h), testing::host_bytes(want_h)) << in.spec().to_string();
        }
      }
    }
  }
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

TEST(Conv2dL1, PlanErrors) {
  Conv2dParams p;
  p.input_height = 30, p.input_width = 40, p.in_channels = 96, p.out_channels = 64;
  p.with_padding(1, 1);
  const Conv2dGeometry g = conv2d_geometry(p, false);
  // Width sharding splits the padded input channels over act_block_w_div blocks per core.
  ASSERT_OK_AND_ASSIGN(auto pw, determine_conv2d_parallel_config(g, TensorMemoryLayout::WIDTH_SHARDED, Layout::TILE,
                                                                 {8, 8}, std::nullopt));
  Conv2dConfig c;
  c.act_block_w_div = 5;
  EXPECT_THAT(estimate_conv2d_l1(g, pw, c, DataType::BFLOAT16, DataType::BFLOAT16).status().message(),
              ::testing::StartsWith("Padded In Channels = "));
  const CoreRangeSet l_shape({CoreRange({0, 0}, {1, 1}), CoreRange({2, 0}, {2, 0})});
  EXPECT_THAT(determine_conv2d_parallel_config(g, TensorMemoryLayout::BLOCK_SHARDED, Layout::TILE, {8, 8}, l_shape)
                  .status()
                  .message(),
              ::testing::HasSubstr("BLOCK_SHARDED needs a rectangular core_grid"));
  EXPECT_EQ(determine_conv2d_parallel_config(g, TensorMemoryLayout::INTERLEAVED, Layout::TILE, {8, 8}, std::nullopt)
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  // More DRAM slices than output rows.
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  Tensor x = testing::random_tensor(Shape{1, 30, 40, 96}, DataType::BFLOAT16, Layout::ROW_MAJOR, 1);
  ASSERT_OK_AND_ASSIGN(Tensor dx, to_device(x, *dev, DRAM_MEMORY_CONFIG));
  ASSERT_OK_AND_ASSIGN(Tensor w, Tensor::from_vector(testing::random_values(64 * 96 * 9, 2, 0.1f),
                                                     Shape{64, 96, 3, 3}, DataType::FLOAT32));
  EXPECT_THAT(conv2d(dx, w, std::nullopt, p, {.slice_config = Conv2dSliceConfig{Conv2dSliceType::DRAM_HEIGHT, 31}})
                  .status()
                  .message(),
              ::testing::HasSubstr("31 DRAM_HEIGHT slices for an output 30 rows long"));
}

}  // namespace
}  // namespace tessera
