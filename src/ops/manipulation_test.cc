// reshape, permute, pad, slice, concat and the CHW/HWC conversions against
// their reference kernels, bit for bit (values are moved, never rounded),
// over shapes, dtypes and input/output memory configs.
#include "tessera/ops/reference.h"
#include "tessera/ops/manipulation.h"

#include "tessera/device/profiler.h"

#include "tessera/ops/eltwise.h"
#include "test_util.h"

namespace tessera {
namespace {

// Input memory configs that fit a ROW_MAJOR tensor whose 2D view is h x w.
std::vector<testing::NamedConfig> configs(uint32_t h, uint32_t w, uint32_t element_bytes) {
  std::vector<testing::NamedConfig> v = {{"dram", DRAM_MEMORY_CONFIG}, {"l1", L1_MEMORY_CONFIG}};
  using ML = TensorMemoryLayout;
  if (h % 2 == 0 && (w * element_bytes) % 4 == 0)
    v.push_back({"l1_height", testing::sharded(ML::HEIGHT_SHARDED, BufferType::L1, CoreRange({0, 0}, {1, 0}), h / 2, w)});
  if (w % 2 == 0 && (w / 2 * element_bytes) % 4 == 0)
    v.push_back({"l1_width", testing::sharded(ML::WIDTH_SHARDED, BufferType::L1, CoreRange({0, 0}, {1, 0}), h, w / 2)});
  return v;
}

uint32_t rows_of(const Shape& s) { return static_cast<uint32_t>(s.volume() / s[-1]); }

template <class DeviceOp>
void check(Device& dev, const Tensor& host, const Tensor& want, DeviceOp op) {
  for (const auto& c : configs(rows_of(host.shape()), host.shape()[-1], element_size(host.dtype()))) {
    SCOPED_TRACE(c.name);
    ASSERT_OK_AND_ASSIGN(Tensor d, to_device(host, dev, c.config));
    ASSERT_OK_AND_ASSIGN(Tensor y, op(d));
    ASSERT_OK_AND_ASSIGN(Tensor got, y.cpu());
    ASSERT_EQ(got.shape(), want.shape());
    ASSERT_EQ(testing::host_bytes(got), testing::host_bytes(want));
  }
}

const DataType kTypes[] = {DataType::FLOAT32, DataType::BFLOAT16};

TEST(Reshape, KeepsRowMajorOrder) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  const std::pair<Shape, Shape> cases[] = {{Shape{2, 3, 4, 6}, Shape{6, 24}},   {Shape{1, 1, 12, 10}, Shape{3, 4, 10}},
                                           {Shape{7, 11}, Shape{77, 1}},         {Shape{7, 11}, Shape{1, 77}},
                                           {Shape{2, 1, 1, 30}, Shape{2, 6, 5}}};
  for (const auto& [from, to] : cases)
    for (DataType dt : {DataType::FLOAT32, DataType::BFLOAT16, DataType::UINT32}) {
      SCOPED_TRACE(fmt::format("{} -> {} {}", from.to_string(), to.to_string(), data_type_name(dt)));
      Tensor h = testing::random_tensor(from, dt, Layout::ROW_MAJOR, 1);
      Tensor want = allocate_tensor_on_host({to, dt, Layout::ROW_MAJOR});
      std::memcpy(want.host_data(), h.host_data(), h.spec().storage_bytes());
      check(*dev, h, want, [&](const Tensor& d) { return reshape(d, to); });
    }
}

TEST(Reshape, IsAViewWhenTheBytesStay) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  ASSERT_OK_AND_ASSIGN(auto wh, open_device({.descriptor = "wormhole_b0"}));
  Tensor h = testing::random_tensor(Shape{2, 3, 4, 16}, DataType::FLOAT32, Layout::ROW_MAJOR, 1);
  for (Device* d : {dev.get(), wh.get()}) {
    ASSERT_OK_AND_ASSIGN(Tensor x, to_device(h, *d));
    // Same last dim: always the same storage.
    ASSERT_OK_AND_ASSIGN(Tensor same, reshape(x, Shape{1, 1, 24, 16}));
    EXPECT_EQ(same.buffer(), x.buffer());
    // Regrouped rows: a view where rows are packed (one DRAM bank), a copy
    // where they are spread over 12 banks.
    ASSERT_OK_AND_ASSIGN(Tensor regrouped, reshape(x, Shape{6, 64}));
    EXPECT_EQ(regrouped.buffer() == x.buffer(), d->descriptor().num_dram_banks == 1) << d->descriptor().name;
    std::vector<std::byte> want = testing::host_bytes(h);
    EXPECT_EQ(testing::host_bytes(regrouped.cpu().value()), want);
    EXPECT_EQ(testing::host_bytes(same.cpu().value()), want);
  }
}

TEST(Permute, MatchesReference) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  const std::vector<int> perms[] = {{0, 2, 3, 1}, {0, 3, 1, 2}, {3, 2, 1, 0}, {0, 1, 2, 3}, {1, 0, 2, 3}, {0, 1, -1, -2}};
  // The last three shapes exercise the tiled transpose of group-swapping
  // permutes (NCHW <-> NHWC) over several tiles, with 3 and > 32 channels.
  for (const Shape& s : {Shape{2, 3, 4, 6}, Shape{1, 5, 7, 3}, Shape{3, 1, 2, 34}, Shape{2, 3, 20, 30},
                         Shape{1, 70, 9, 5}, Shape{1, 33, 8, 33}})
    for (const auto& perm : perms)
      for (DataType dt : kTypes) {
        SCOPED_TRACE(fmt::format("{} ({}) {}", s.to_string(), fmt::join(perm, ","), data_type_name(dt)));
        Tensor h = testing::random_tensor(s, dt, Layout::ROW_MAJOR, 2);
        ASSERT_OK_AND_ASSIGN(Tensor want, reference::permute(h, perm));
        check(*dev, h, want, [&](const Tensor& d) { return permute(d, perm); });
      }
}

// NCHW -> NHWC into packed storage (one DRAM shard, as the compiled model
// asks for a conv's input) takes the tiled transpose, not the row gather:
// with dense rows both ways, the tile kernel that interleaves few channels.
TEST(Permute, GroupSwapRunsTheTransposeKernel) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  Tensor h = testing::random_tensor(Shape{2, 3, 20, 32}, DataType::FLOAT32, Layout::ROW_MAJOR, 2);
  const int perm[] = {0, 2, 3, 1};
  ASSERT_OK_AND_ASSIGN(Tensor d, to_device(h, *dev));  // rows of 128 B: packed
  const MemoryConfig one_shard{TensorMemoryLayout::HEIGHT_SHARDED, BufferType::DRAM,
                               ShardSpec{CoreRangeSet(CoreRange({0, 0}, {0, 0})), {2 * 20 * 32, 3},
                                         ShardOrientation::ROW_MAJOR}};
  ASSERT_OK(enable_profiler(*dev));
  ASSERT_OK_AND_ASSIGN(Tensor y, permute(d, perm, {.memory_config = one_shard}));
  ASSERT_OK_AND_ASSIGN(DeviceProfile prof, read_profile(*dev));
  ASSERT_EQ(prof.ops.size(), 1u);
  EXPECT_EQ(prof.ops[0].kernel_name, "any_permute__transpose_tiles");
  ASSERT_OK_AND_ASSIGN(Tensor want, reference::permute(h, perm));
  EXPECT_EQ(testing::host_bytes(y.cpu().value()), testing::host_bytes(want));
}

// Dense rows both ways take tiles: square ones (4x4 register transposes for
// 4-byte types), or long runs of pixels when there are at most four
// channels (register interleaves for 4- and 2-byte types, eight pixels at a
// time for 2-byte ones: runs of 24 and 17 pixels). Odd sizes across several
// tiles, both directions, every dtype.
TEST(Permute, DenseGroupSwapRunsTheTileKernel) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  const MemoryConfig dram{TensorMemoryLayout::INTERLEAVED, BufferType::DRAM, std::nullopt};
  for (const Shape& s : {Shape{1, 80, 9, 255}, Shape{2, 67, 3, 131}, Shape{1, 5, 13, 7}, Shape{2, 3, 71, 67},
                         Shape{1, 4, 3, 5}, Shape{1, 2, 9, 2}, Shape{1, 3, 4, 6}, Shape{3, 3, 17, 1}})
    for (const auto& perm : {std::vector<int>{0, 3, 1, 2}, std::vector<int>{0, 2, 3, 1}})
      for (DataType dt : kTypes) {
        SCOPED_TRACE(fmt::format("{} ({}) {}", s.to_string(), fmt::join(perm, ","), data_type_name(dt)));
        Tensor h = testing::random_tensor(s, dt, Layout::ROW_MAJOR, 5);
        ASSERT_OK_AND_ASSIGN(Tensor d, to_device(h, *dev));
        ASSERT_OK(enable_profiler(*dev));
        ASSERT_OK_AND_ASSIGN(Tensor y, permute(d, perm, {.memory_config = dram}));
        ASSERT_OK_AND_ASSIGN(DeviceProfile prof, read_profile(*dev));
        ASSERT_EQ(prof.ops.size(), 1u);
        EXPECT_EQ(prof.ops[0].kernel_name, "any_permute__transpose_tiles");
        ASSERT_OK_AND_ASSIGN(Tensor want, reference::permute(h, perm));
        EXPECT_EQ(testing::host_bytes(y.cpu().value()), testing::host_bytes(want));
      }
}

// permute into another float dtype: bit for bit a permute, then a typecast.
// An image's NCHW -> NHWC move (at most four channels, dense rows) converts
// on the way in one launch, in runs of 1024 pixels (maps of more, and a
// last partial run); other permutes take two launches. Two workers, so
// that tiles split the pixels.
TEST(Permute, IntoAnotherDtypeMatchesPermuteThenTypecast) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.worker_threads = 2}));
  const int nhwc[] = {0, 2, 3, 1}, nchw[] = {0, 3, 1, 2};
  const std::pair<Shape, bool> cases[] = {
      {Shape{1, 3, 67, 97}, true}, {Shape{2, 4, 33, 131}, true}, {Shape{1, 1, 5, 7}, true},
      {Shape{1, 2, 80, 80}, true}, {Shape{1, 5, 9, 11}, false},  // five channels: two launches
  };
  for (const auto& [s, one] : cases)
    for (DataType from : kTypes)
      for (DataType to : kTypes) {
        if (from == to) continue;
        SCOPED_TRACE(fmt::format("{} {} -> {}", s.to_string(), data_type_name(from), data_type_name(to)));
        Tensor h = testing::random_tensor(s, from, Layout::ROW_MAJOR, 9);
        ASSERT_OK_AND_ASSIGN(Tensor d, to_device(h, *dev));
        ASSERT_OK_AND_ASSIGN(Tensor moved, permute(d, nhwc));
        ASSERT_OK_AND_ASSIGN(Tensor want, typecast(moved, to));
        ASSERT_OK(enable_profiler(*dev));
        ASSERT_OK_AND_ASSIGN(Tensor y, permute(d, nhwc, to));
        ASSERT_OK_AND_ASSIGN(DeviceProfile prof, read_profile(*dev));
        ASSERT_OK(disable_profiler(*dev));
        EXPECT_EQ(y.dtype(), to);
        ASSERT_EQ(y.shape(), want.shape());
        EXPECT_EQ(testing::host_bytes(y.cpu().value()), testing::host_bytes(want.cpu().value()));
        if (one) {
          ASSERT_EQ(prof.ops.size(), 1u);
          EXPECT_EQ(prof.ops[0].kernel_name, "any_permute__transpose_tiles_converted");
        } else {
          EXPECT_EQ(prof.ops.size(), 2u);
        }
        // Back to NCHW: more than four channels per pixel, two launches.
        ASSERT_OK_AND_ASSIGN(Tensor back, permute(y, nchw, from));
        ASSERT_OK_AND_ASSIGN(Tensor want_back, typecast(permute(y, nchw).value(), from));
        EXPECT_EQ(testing::host_bytes(back.cpu().value()), testing::host_bytes(want_back.cpu().value()));
      }
  ASSERT_OK_AND_ASSIGN(Tensor d, to_device(testing::random_tensor(Shape{1, 3, 4, 4}, DataType::FLOAT32,
                                                                  Layout::ROW_MAJOR, 1), *dev));
  auto bad = permute(d, nhwc, DataType::BFLOAT8_B);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), ::testing::HasSubstr("bfloat8_b"));
  auto ints = permute(d, nhwc, DataType::UINT32);
  ASSERT_FALSE(ints.ok());
  EXPECT_THAT(std::string(ints.status().message()), ::testing::HasSubstr("float dtypes only, found float32 into uint32"));
}

TEST(Pad, MatchesReference) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  using P = std::vector<std::array<uint32_t, 2>>;
  const std::pair<Shape, P> cases[] = {{Shape{1, 3, 5, 8}, P{{1, 2}, {0, 3}, {2, 2}}},
                                       {Shape{1, 1, 6, 3}, P{{0, 13}}},
                                       {Shape{2, 4, 4, 2}, P{{1, 1}, {0, 0}, {1, 1}, {0, 0}}},
                                       {Shape{7}, P{{3, 0}}}};
  for (const auto& [s, padding] : cases)
    for (DataType dt : kTypes) {
      SCOPED_TRACE(fmt::format("{} {}", s.to_string(), data_type_name(dt)));
      Tensor h = testing::random_tensor(s, dt, Layout::ROW_MAJOR, 3);
      ASSERT_OK_AND_ASSIGN(Tensor want, reference::pad(h, padding, -1.5f));
      check(*dev, h, want, [&](const Tensor& d) { return pad(d, padding, -1.5f); });
    }
}

TEST(Slice, MatchesReference) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  const Shape s{2, 5, 7, 12};
  const SliceParams cases[] = {
      {{0, 0, 0, 0}, {2, 5, 7, 12}, {}},          {{1, 1, 2, 3}, {2, 4, 7, 11}, {}},
      {{0, 0, 0, 0}, {2, 5, 7, 12}, {1, 2, 3, 2}}, {{0, 3, 1, 5}, {9, 9, 9, 6}, {2, 1, 1, 1}},
      {{0, 0, 0, 1}, {1, 1, 1, 12}, {1, 1, 1, 5}},
  };
  for (const SliceParams& sl : cases)
    for (DataType dt : kTypes) {
      SCOPED_TRACE(fmt::format("{} {} {}", fmt::join(sl.begin, ","), fmt::join(sl.end, ","), data_type_name(dt)));
      Tensor h = testing::random_tensor(s, dt, Layout::ROW_MAJOR, 4);
      ASSERT_OK_AND_ASSIGN(Tensor want, reference::slice(h, sl));
      check(*dev, h, want, [&](const Tensor& d) { return slice(d, sl); });
    }
}

TEST(Concat, EveryDimMatchesReference) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  for (int dim : {0, 1, 2, 3, -1})
    for (int n : {1, 2, 3, 16, 17, 40})  // past 16: in steps
      for (DataType dt : kTypes) {
        SCOPED_TRACE(fmt::format("dim {} x{} {}", dim, n, data_type_name(dt)));
        std::vector<Tensor> hosts, devs;
        for (int k = 0; k < n; ++k) {
          uint32_t dims[] = {2, 3, 4, 6};
          dims[dim < 0 ? 3 : dim] = static_cast<uint32_t>(1 + k % 3);
          hosts.push_back(testing::random_tensor(Shape(std::span<const uint32_t>(dims)), dt, Layout::ROW_MAJOR,
                                                 static_cast<uint32_t>(10 + k)));
          ASSERT_OK_AND_ASSIGN(Tensor d, to_device(hosts.back(), *dev, k % 2 ? L1_MEMORY_CONFIG : DRAM_MEMORY_CONFIG));
          devs.push_back(d);
        }
        ASSERT_OK_AND_ASSIGN(Tensor want, reference::concat(hosts, dim));
        ASSERT_OK_AND_ASSIGN(Tensor y, concat(devs, dim));
        EXPECT_EQ(y.memory_config(), DRAM_MEMORY_CONFIG);
        ASSERT_EQ(testing::host_bytes(y.cpu().value()), testing::host_bytes(want));
      }
}

// A detector's heads: three (1, boxes, 85) tensors along the boxes, and a
// (1, h, w, anchors, 85) head with its anchors moved in front. Packed rows
// copy by plain pointers, a concat's source in runs of whole rows; the maps
// are large enough that the workers' chunks start mid-source. A pad along
// the boxes mixes runs with filled rows.
TEST(Concat, DetectorHeadsMatchReference) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.worker_threads = 2}));
  for (DataType dt : kTypes) {
    SCOPED_TRACE(data_type_name(dt));
    std::vector<Tensor> hosts, devs;
    for (uint32_t boxes : {4800u, 1200u, 300u}) {
      hosts.push_back(testing::random_tensor(Shape{1, boxes, 85}, dt, Layout::ROW_MAJOR, boxes));
      ASSERT_OK_AND_ASSIGN(Tensor d, to_device(hosts.back(), *dev));
      devs.push_back(d);
    }
    ASSERT_OK_AND_ASSIGN(Tensor want, reference::concat(hosts, 1));
    ASSERT_OK_AND_ASSIGN(Tensor y, concat(devs, 1));
    ASSERT_EQ(testing::host_bytes(y.cpu().value()), testing::host_bytes(want));

    const int perm[] = {0, 3, 1, 2, 4};
    Tensor head = testing::random_tensor(Shape{1, 40, 40, 3, 85}, dt, Layout::ROW_MAJOR, 7);
    ASSERT_OK_AND_ASSIGN(Tensor want_p, reference::permute(head, perm));
    ASSERT_OK_AND_ASSIGN(Tensor dh, to_device(head, *dev));
    ASSERT_OK_AND_ASSIGN(Tensor p, permute(dh, perm));
    ASSERT_EQ(testing::host_bytes(p.cpu().value()), testing::host_bytes(want_p));

    const std::vector<std::array<uint32_t, 2>> padding = {{0, 0}, {700, 900}, {0, 0}};
    ASSERT_OK_AND_ASSIGN(Tensor want_pad, reference::pad(hosts[0], padding, 2.5f));
    ASSERT_OK_AND_ASSIGN(Tensor padded, pad(devs[0], padding, 2.5f));
    ASSERT_EQ(testing::host_bytes(padded.cpu().value()), testing::host_bytes(want_pad));
  }
}

// concat into another float dtype: the values are those of a concat, then a
// typecast, bit for bit. Packed rows convert as they are copied (one
// launch, "_converted"): a detector's heads along the boxes, the last dim,
// dim 0. Inputs in L1 banks are not packed: a concat, then a typecast.
TEST(Concat, IntoAnotherDtypeMatchesConcatThenTypecast) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.worker_threads = 2}));
  struct Case {
    std::vector<Shape> shapes;
    int dim;
  };
  const Case cases[] = {
      {{Shape{1, 4800, 85}, Shape{1, 1200, 85}, Shape{1, 300, 85}}, 1},
      {{Shape{2, 7, 5, 3}, Shape{2, 7, 5, 14}, Shape{2, 7, 5, 27}}, -1},
      {{Shape{3, 5, 17}, Shape{1, 5, 17}}, 0},
  };
  for (DataType from : kTypes)
    for (DataType to : kTypes) {
      if (from == to) continue;
      for (const Case& c : cases)
        for (const MemoryConfig& mc : {DRAM_MEMORY_CONFIG, L1_MEMORY_CONFIG}) {
          if (mc == L1_MEMORY_CONFIG && c.dim == 1) continue;  // the heads do not fit L1
          SCOPED_TRACE(fmt::format("{} -> {}, dim {}, {}", data_type_name(from), data_type_name(to), c.dim,
                                   mc.to_string()));
          std::vector<Tensor> hosts, devs;
          for (size_t k = 0; k < c.shapes.size(); ++k) {
            hosts.push_back(testing::random_tensor(c.shapes[k], from, Layout::ROW_MAJOR, static_cast<uint32_t>(50 + k)));
            ASSERT_OK_AND_ASSIGN(Tensor d, to_device(hosts.back(), *dev, mc));
            devs.push_back(d);
          }
          ASSERT_OK_AND_ASSIGN(Tensor same, concat(devs, c.dim));
          ASSERT_OK_AND_ASSIGN(Tensor want, typecast(same, to));
          ASSERT_OK(enable_profiler(*dev));
          ASSERT_OK_AND_ASSIGN(Tensor y, concat(devs, c.dim, to));
          ASSERT_OK_AND_ASSIGN(DeviceProfile prof, read_profile(*dev));
          ASSERT_OK(disable_profiler(*dev));
          EXPECT_EQ(y.dtype(), to);
          EXPECT_EQ(y.shape(), want.shape());
          ASSERT_EQ(testing::host_bytes(y.cpu().value()), testing::host_bytes(want.cpu().value()));
          if (mc == DRAM_MEMORY_CONFIG) {
            ASSERT_EQ(prof.ops.size(), 1u);
            EXPECT_THAT(prof.ops[0].kernel_name, ::testing::EndsWith("_converted"));
          } else {
            ASSERT_EQ(prof.ops.size(), 2u);
          }
        }
    }
  // Only float dtypes, and a clear error otherwise.
  ASSERT_OK_AND_ASSIGN(Tensor d, to_device(testing::random_tensor(Shape{2, 32}, DataType::FLOAT32, Layout::ROW_MAJOR, 1), *dev));
  const Tensor two[] = {d, d};
  auto bad = concat(two, 0, DataType::BFLOAT8_B);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), ::testing::HasSubstr("bfloat8_b"));
  auto ints = concat(two, 0, DataType::UINT32);
  ASSERT_FALSE(ints.ok());
  EXPECT_THAT(std::string(ints.status().message()), ::testing::HasSubstr("float dtypes only, found float32 into uint32"));
}

// Along the last dim of row-major DRAM tensors each output row is one copy
// per input (the whole-rows path); odd widths, several inputs, both dtypes.
TEST(Concat, LastDimOfDramRowsMatchesReference) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  for (DataType dt : kTypes)
    for (int n : {2, 3, 5}) {
      SCOPED_TRACE(fmt::format("x{} {}", n, data_type_name(dt)));
      std::vector<Tensor> hosts, devs;
      for (int k = 0; k < n; ++k) {
        hosts.push_back(testing::random_tensor(Shape{2, 7, 5, static_cast<uint32_t>(1 + 13 * k)}, dt,
                                               Layout::ROW_MAJOR, static_cast<uint32_t>(30 + k)));
        ASSERT_OK_AND_ASSIGN(Tensor d, to_device(hosts.back(), *dev));
        devs.push_back(d);
      }
      ASSERT_OK_AND_ASSIGN(Tensor want, reference::concat(hosts, -1));
      ASSERT_OK_AND_ASSIGN(Tensor y, concat(devs, -1));
      ASSERT_EQ(testing::host_bytes(y.cpu().value()), testing::host_bytes(want));
    }
}

// Outputs larger than the shared cache are written by non-temporal stores
// (ops::streams_output): here, maps just over that size. Odd widths start
// most rows' pieces off the 16-byte grid, so every piece has a plainly
// copied head and tail. Along the channels (whole rows) and along the height
// (runs of whole rows), both dtypes.
TEST(Concat, LargeOutputsStreamAndMatchReference) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.worker_threads = 2}));
  const uint64_t shared = dev->descriptor().shared_cache_size, streams_over = shared ? shared : uint64_t{16} << 20;
  for (DataType dt : kTypes)
    for (int dim : {3, 1}) {
      SCOPED_TRACE(fmt::format("{} dim {}", data_type_name(dt), dim));
      // Rows of 128 channels whose read and written bytes just exceed it.
      const uint64_t row_bytes = 128 * element_size(dt), rows = streams_over / (2 * row_bytes) + 97;
      std::vector<Tensor> hosts, devs;
      for (uint32_t c : {61u, 67u}) {
        const uint32_t part = static_cast<uint32_t>(rows * c / 128 + 1);
        const Shape s = dim == 3 ? Shape{1, static_cast<uint32_t>(rows / 160 + 1), 160, c} : Shape{1, part, 1, 128};
        hosts.push_back(testing::random_tensor(s, dt, Layout::ROW_MAJOR, c));
        ASSERT_OK_AND_ASSIGN(Tensor d, to_device(hosts.back(), *dev));
        devs.push_back(d);
      }
      ASSERT_OK_AND_ASSIGN(Tensor want, reference::concat(hosts, dim));
      ASSERT_OK(enable_profiler(*dev));
      ASSERT_OK_AND_ASSIGN(Tensor y, concat(devs, dim));
      ASSERT_OK_AND_ASSIGN(DeviceProfile prof, read_profile(*dev));
      ASSERT_OK(disable_profiler(*dev));
      ASSERT_EQ(prof.ops.size(), 1u);
      EXPECT_EQ(prof.ops[0].kernel_name, dim == 3 ? "any_concat__rows_streamed" : "any_concat__gather_streamed");
      ASSERT_EQ(testing::host_bytes(y.cpu().value()), testing::host_bytes(want));
    }
}

TEST(Concat, ChannelsOfHeightShardedActivations) {
  // The UNet's skip connection: two (1,1,H*W,C) activations height-sharded
  // on the same cores, concatenated into a height-sharded [h, 2C] output.
  ASSERT_OK_AND_ASSIGN(auto wh, open_device({.descriptor = "wormhole_b0"}));
  const CoreRange cores({0, 0}, {7, 0});
  using ML = TensorMemoryLayout;
  Tensor ha = testing::random_tensor(Shape{1, 1, 256, 32}, DataType::BFLOAT16, Layout::ROW_MAJOR, 1);
  Tensor hb = testing::random_tensor(Shape{1, 1, 256, 32}, DataType::BFLOAT16, Layout::ROW_MAJOR, 2);
  ASSERT_OK_AND_ASSIGN(Tensor a, to_device(ha, *wh, testing::sharded(ML::HEIGHT_SHARDED, BufferType::L1, cores, 32, 32)));
  ASSERT_OK_AND_ASSIGN(Tensor b, to_device(hb, *wh, DRAM_MEMORY_CONFIG));
  const MemoryConfig out_mc = testing::sharded(ML::HEIGHT_SHARDED, BufferType::L1, cores, 32, 64);
  const Tensor in[] = {a, b};
  ASSERT_OK_AND_ASSIGN(Tensor y, concat(in, 3, {.memory_config = out_mc}));
  EXPECT_EQ(y.memory_config(), out_mc);
  const Tensor hin[] = {ha, hb};
  ASSERT_OK_AND_ASSIGN(Tensor want, reference::concat(hin, 3));
  EXPECT_EQ(testing::host_bytes(y.cpu().value()), testing::host_bytes(want));
}

TEST(ConvertHwc, RoundTripAndMatchesPermute) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  Tensor h = testing::random_tensor(Shape{1, 1, 3, 4800}, DataType::FLOAT32, Layout::ROW_MAJOR, 5);
  const int perm[] = {0, 1, 3, 2};
  ASSERT_OK_AND_ASSIGN(Tensor want, reference::permute(h, perm));
  check(*dev, h, want, [&](const Tensor& d) { return convert_to_hwc(d); });
  ASSERT_OK_AND_ASSIGN(Tensor d, to_device(h, *dev));
  ASSERT_OK_AND_ASSIGN(Tensor hwc, convert_to_hwc(d));
  ASSERT_OK_AND_ASSIGN(Tensor chw, convert_to_chw(hwc, DataType::BFLOAT16));
  EXPECT_EQ(chw.dtype(), DataType::BFLOAT16);
  ASSERT_OK_AND_ASSIGN(Tensor want_bf16, host_typecast(h, DataType::BFLOAT16));
  EXPECT_EQ(testing::host_bytes(chw.cpu().value()), testing::host_bytes(want_bf16));
}

TEST(Manipulation, Errors) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  Tensor h = testing::random_tensor(Shape{2, 4, 6}, DataType::FLOAT32, Layout::ROW_MAJOR, 1);
  ASSERT_OK_AND_ASSIGN(Tensor d, to_device(h, *dev));
  ASSERT_OK_AND_ASSIGN(Tensor t, to_device(testing::random_tensor(Shape{32, 32}, DataType::FLOAT32, Layout::TILE, 1),
                                           *dev));
  ASSERT_OK_AND_ASSIGN(Tensor b, to_device(testing::random_tensor(Shape{2, 4, 6}, DataType::BFLOAT16,
                                                                   Layout::ROW_MAJOR, 1), *dev));
  EXPECT_ERROR(reshape(d, Shape{5, 10}), StatusCode::kInvalidArgument,
               "reshape: cannot reshape [2,4,6] (48 elements) to [5,10] (50 elements)");
  EXPECT_ERROR(reshape(t, Shape{1024}), StatusCode::kUnimplemented, "expected a ROW_MAJOR input");
  const int dup[] = {0, 0, 1};
  EXPECT_ERROR(permute(d, dup), StatusCode::kInvalidArgument, "(0,0,1) is not a permutation of 3 dims");
  const int short_perm[] = {0, 1};
  EXPECT_ERROR(permute(d, short_perm), StatusCode::kInvalidArgument, "expected 3 dims");
  const std::array<uint32_t, 2> too_many[] = {{1, 1}, {1, 1}, {1, 1}, {1, 1}};
  EXPECT_ERROR(pad(d, too_many), StatusCode::kInvalidArgument, "4 padding pairs for the 3 dims");
  EXPECT_ERROR(slice(d, {{0, 2, 0}, {2, 2, 6}, {}}), StatusCode::kInvalidArgument, "dim 1 of [2,4,6] is empty");
  EXPECT_ERROR(slice(d, {{0, 0, 0}, {2, 4, 6}, {1, 0, 1}}), StatusCode::kInvalidArgument, "step of dim 1 must be >= 1");
  EXPECT_ERROR(slice(d, {{0, 0}, {2, 4}, {}}), StatusCode::kInvalidArgument, "expected begin, end (and step) with 3");
  const Tensor mixed[] = {d, b};
  EXPECT_ERROR(concat(mixed, 0), StatusCode::kInvalidArgument, "concat: input 1 is bfloat16, expected float32");
  ASSERT_OK_AND_ASSIGN(Tensor e, to_device(testing::random_tensor(Shape{2, 5, 6}, DataType::FLOAT32,
                                                                   Layout::ROW_MAJOR, 1), *dev));
  const Tensor uneven[] = {d, e};
  EXPECT_OK(concat(uneven, 1).status());
  EXPECT_ERROR(concat(uneven, 2), StatusCode::kInvalidArgument, "differs from input 0's [2,4,6] outside dim 2");
  EXPECT_ERROR(concat(uneven, 3), StatusCode::kInvalidArgument, "dim 3 is out of range for rank 3");
  EXPECT_ERROR(concat(std::span<const Tensor>{}, 0), StatusCode::kInvalidArgument, "at least one input");
  EXPECT_ERROR(convert_to_hwc(d), StatusCode::kInvalidArgument, "expected a (1, 1, rows, cols) input, found [2,4,6]");
  MemoryConfig bad = testing::sharded(TensorMemoryLayout::HEIGHT_SHARDED, BufferType::L1, CoreRange({0, 0}, {1, 0}),
                                      3, 6);
  EXPECT_ERROR(reshape(d, Shape{8, 6}, {.memory_config = bad}), StatusCode::kInvalidArgument, "reshape: memory config");
}

}  // namespace
}  // namespace tessera
