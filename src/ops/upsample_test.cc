// upsample against its reference kernel: nearest bit for bit, bilinear
// within 1e-5 relative + 1e-6 absolute (one ulp in bfloat16); integer and
// fractional scales, both align_corners variants.
#include <cstring>
#include "tessera/ops/reference.h"
#include "tessera/ops/upsample.h"

#include "tessera/base/cpu_features.h"
#include "tessera/device/profiler.h"
#include "test_util.h"

namespace tessera {
namespace {

TEST(Upsample, HandComputed) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  ASSERT_OK_AND_ASSIGN(
      Tensor d, to_device(Tensor::from_vector({1, 2, 3, 4}, Shape{1, 2, 2, 1}, DataType::FLOAT32).value(), *dev));
  ASSERT_OK_AND_ASSIGN(Tensor n, upsample(d, {}));
  EXPECT_EQ(n.cpu().value().to_vector().value(), (std::vector<float>{1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4}));
  ASSERT_OK_AND_ASSIGN(Tensor b, upsample(d, {.mode = UpsampleMode::BILINEAR, .align_corners = true}));
  auto v = b.cpu().value().to_vector().value();
  EXPECT_FLOAT_EQ(v[0], 1.0f);
  EXPECT_FLOAT_EQ(v[1], 1.0f + 1.0f / 3.0f);
  EXPECT_FLOAT_EQ(v[15], 4.0f);
}

struct Case {
  Shape shape;
  UpsampleParams p;
};

TEST(Upsample, MatchesReference) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  ASSERT_OK_AND_ASSIGN(auto wh, open_device({.descriptor = "wormhole_b0"}));
  std::vector<Case> cases;
  for (UpsampleMode mode : {UpsampleMode::NEAREST, UpsampleMode::BILINEAR})
    for (bool ac : {false, true}) {
      if (ac && mode == UpsampleMode::NEAREST) continue;
      cases.push_back({Shape{1, 30, 40, 64}, {.scale_h = 2, .scale_w = 2, .mode = mode, .align_corners = ac}});
      cases.push_back({Shape{2, 5, 7, 3}, {.scale_h = 3, .scale_w = 1, .mode = mode, .align_corners = ac}});
      cases.push_back({Shape{1, 9, 11, 37}, {.scale_h = 1.5f, .scale_w = 2.5f, .mode = mode, .align_corners = ac}});
      cases.push_back({Shape{1, 8, 8, 1100}, {.scale_h = 0.5f, .scale_w = 0.75f, .mode = mode, .align_corners = ac}});
      cases.push_back({Shape{1, 1, 1, 16}, {.scale_h = 4, .scale_w = 4, .mode = mode, .align_corners = ac}});
    }
  // Nearest rows copied whole from their predecessor, over several images.
  cases.push_back({Shape{3, 7, 5, 24}, {.scale_h = 2, .scale_w = 2, .mode = UpsampleMode::NEAREST}});
  for (const Case& c : cases)
    for (DataType dt : {DataType::FLOAT32, DataType::BFLOAT16}) {
      SCOPED_TRACE(fmt::format("{} {}", c.p.descriptor(c.shape), data_type_name(dt)));
      Tensor h = testing::random_tensor(c.shape, dt, Layout::ROW_MAJOR, 2);
      ASSERT_OK_AND_ASSIGN(Tensor ref, reference::upsample(h, c.p, dt));
      // Every kernel set: the AVX2 row kernel (bilinear) and the generic one.
      for (KernelIsa isa : {KernelIsa::kAvx512, KernelIsa::kAvx2, KernelIsa::kScalar})
        for (Device* d : {dev.get(), wh.get()})
          for (const MemoryConfig& mc : {DRAM_MEMORY_CONFIG, L1_MEMORY_CONFIG}) {
            set_kernel_isa_limit(isa);
            SCOPED_TRACE(kernel_isa_name(kernel_isa()));
            ASSERT_OK_AND_ASSIGN(Tensor in, to_device(h, *d, mc));
            ASSERT_OK_AND_ASSIGN(Tensor out, upsample(in, c.p));
            EXPECT_EQ(out.memory_config().buffer_type, mc.buffer_type);
            ASSERT_OK_AND_ASSIGN(Tensor got, out.cpu());
            if (c.p.mode == UpsampleMode::NEAREST)
              ASSERT_EQ(testing::host_bytes(got), testing::host_bytes(ref));
            else
              testing::expect_allclose(got, ref, testing::rounding_tolerance(dt, 1e-5), 1e-6);
          }
    }
  set_kernel_isa_limit(KernelIsa::kAvx512);
}

// NaN, infinities, -0.0 and denormals in the input come out as the
// reference's: nearest copies them bit for bit, bilinear blends them (an
// infinity with a zero weight is NaN, as in the reference), on every kernel set.
TEST(Upsample, SpecialValuesAsTheReference) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  for (UpsampleMode mode : {UpsampleMode::NEAREST, UpsampleMode::BILINEAR})
    for (bool ac : {false, true}) {
      if (ac && mode == UpsampleMode::NEAREST) continue;
      const Shape shape{2, 9, 11, 37};
      const UpsampleParams p{.scale_h = 2, .scale_w = 1.5f, .mode = mode, .align_corners = ac};
      std::vector<float> v = testing::random_values(shape.volume(), 4, 2.0f);
      testing::add_special_values(v, 5, 61);
      Tensor h = Tensor::from_vector(v, shape, DataType::FLOAT32).value();
      ASSERT_OK_AND_ASSIGN(Tensor ref, reference::upsample(h, p, DataType::FLOAT32));
      for (KernelIsa isa : {KernelIsa::kAvx512, KernelIsa::kAvx2, KernelIsa::kScalar}) {
        set_kernel_isa_limit(isa);
        SCOPED_TRACE(fmt::format("{} {}", p.descriptor(shape), kernel_isa_name(kernel_isa())));
        ASSERT_OK_AND_ASSIGN(Tensor in, to_device(h, *dev));
        ASSERT_OK_AND_ASSIGN(Tensor out, upsample(in, p));
        ASSERT_OK_AND_ASSIGN(Tensor got, out.cpu());
        if (mode == UpsampleMode::NEAREST) {
          const auto g = got.to_vector().value(), w = ref.to_vector().value();
          for (size_t i = 0, bad = 0; i < g.size() && bad < 3; ++i)
            if (std::memcmp(&g[i], &w[i], 4) != 0 && ++bad)
              ADD_FAILURE() << "element " << i << ": got " << g[i] << ", reference " << w[i];
        } else {
          testing::expect_allclose(got, ref, 1e-5, 1e-6);
        }
      }
    }
  set_kernel_isa_limit(KernelIsa::kAvx512);
}

// Nearest over evenly spaced rows runs the row kernel; here with 3.7 MB of
// output, so that its tasks come in chunks that start mid-image (a row there
// cannot copy its predecessor, which another worker writes), at an 8x scale.
TEST(Upsample, NearestRowKernel) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.worker_threads = 2}));
  ASSERT_OK(enable_profiler(*dev));
  const UpsampleParams p{.scale_h = 8, .scale_w = 8, .mode = UpsampleMode::NEAREST};
  Tensor h = testing::random_tensor(Shape{2, 15, 20, 24}, DataType::FLOAT32, Layout::ROW_MAJOR, 3);
  ASSERT_OK_AND_ASSIGN(Tensor ref, reference::upsample(h, p, DataType::FLOAT32));
  ASSERT_OK_AND_ASSIGN(Tensor in, to_device(h, *dev));
  ASSERT_OK_AND_ASSIGN(Tensor out, upsample(in, p));
  ASSERT_OK_AND_ASSIGN(Tensor got, out.cpu());
  EXPECT_EQ(testing::host_bytes(got), testing::host_bytes(ref));
  ASSERT_OK_AND_ASSIGN(DeviceProfile prof, read_profile(*dev));
  ASSERT_EQ(prof.ops.size(), 1u);
  EXPECT_EQ(prof.ops[0].kernel_name, "any_upsample_nearest__rows");
  ASSERT_OK(disable_profiler(*dev));
}

// Bilinear over evenly spaced rows runs the widest row kernel the CPU has,
// float32 and bfloat16 (channel counts with and without a vector tail), with
// results equal across the AVX-512 and AVX2 kernels (the same fused
// multiply-adds in the same order). The larger maps give the AVX-512 kernel
// several column strips per row (it keeps each input row's horizontal blends
// per strip) and tasks that start mid-image; one scale is fractional.
TEST(Upsample, BilinearRowKernel) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.worker_threads = 2}));
  const KernelIsa native = kernel_isa();
  ASSERT_OK(enable_profiler(*dev));
  struct RowCase {
    Shape shape;
    float scale_h, scale_w;
  };
  const RowCase cases[] = {{Shape{2, 6, 9, 64}, 2, 2},    {Shape{2, 6, 9, 21}, 2, 2},  {Shape{2, 40, 45, 64}, 2, 2},
                           {Shape{1, 7, 9, 600}, 2, 2},   {Shape{3, 11, 70, 17}, 1.5f, 2.5f}};
  for (const RowCase& rc : cases)
    for (DataType dt : {DataType::FLOAT32, DataType::BFLOAT16}) {
      const UpsampleParams p{.scale_h = rc.scale_h, .scale_w = rc.scale_w, .mode = UpsampleMode::BILINEAR};
      SCOPED_TRACE(fmt::format("{} {}", p.descriptor(rc.shape), data_type_name(dt)));
      Tensor h = testing::random_tensor(rc.shape, dt, Layout::ROW_MAJOR, 4);
      ASSERT_OK_AND_ASSIGN(Tensor in, to_device(h, *dev));
      std::vector<std::vector<std::byte>> results;
      for (KernelIsa isa : {KernelIsa::kAvx512, KernelIsa::kAvx2}) {
        if (isa > native) continue;
        set_kernel_isa_limit(isa);
        ASSERT_OK_AND_ASSIGN(Tensor out, upsample(in, p));
        ASSERT_OK_AND_ASSIGN(Tensor got, out.cpu());
        results.push_back(testing::host_bytes(got));
        ASSERT_OK_AND_ASSIGN(DeviceProfile prof, read_profile(*dev));
        ASSERT_EQ(prof.ops.size(), 1u);
        EXPECT_EQ(prof.ops[0].kernel_name, fmt::format("{}_upsample_bilinear__{}_rows", short_dtype_name(dt),
                                                       kernel_isa_name(isa)));
      }
      for (size_t i = 1; i < results.size(); ++i) EXPECT_EQ(results[i], results[0]);
    }
  set_kernel_isa_limit(native);
  ASSERT_OK(disable_profiler(*dev));
}

TEST(Upsample, Errors) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  ASSERT_OK_AND_ASSIGN(
      Tensor d, to_device(testing::random_tensor(Shape{1, 4, 4, 8}, DataType::FLOAT32, Layout::ROW_MAJOR, 1), *dev));
  EXPECT_ERROR(upsample(d, {.scale_h = 0}), StatusCode::kInvalidArgument, "scale factors must be finite and > 0");
  EXPECT_ERROR(upsample(d, {.scale_h = 0.1f}), StatusCode::kInvalidArgument, "output size 0x8 from 4x4");
  EXPECT_ERROR(upsample(d, {.align_corners = true}), StatusCode::kInvalidArgument, "align_corners applies to bilinear");
  ASSERT_OK_AND_ASSIGN(Tensor flat,
                       to_device(testing::random_tensor(Shape{16, 8}, DataType::FLOAT32, Layout::ROW_MAJOR, 1), *dev));
  EXPECT_ERROR(upsample(flat, {}), StatusCode::kInvalidArgument, "expected an (N, H, W, C) input, found [16,8]");
}

}  // namespace
}  // namespace tessera
