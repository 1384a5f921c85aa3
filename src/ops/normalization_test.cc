// softmax and the norms against their double-precision reference kernels:
// within 1e-5 relative + 1e-5 absolute in float32, plus one bfloat16 ulp in
// bfloat16 (normalization.h), both ISA paths, several memory configs.
#include "tessera/ops/normalization.h"

#include <xmmintrin.h>

#include <cfloat>

#include "tessera/base/cpu_features.h"
#include "tessera/ops/eltwise.h"
#include "tessera/ops/reference.h"
#include "test_util.h"

namespace tessera {
namespace {

void expect_near_reference(const Tensor& got, const Tensor& want, DataType dt) {
  testing::expect_allclose(got, want, testing::rounding_tolerance(dt, 1e-5), 1e-5);
}

Tensor param(uint32_t c, uint32_t seed, bool positive = false) {
  auto v = testing::random_values(c, seed, 1.0f);
  if (positive)
    for (float& x : v) x = std::fabs(x) + 0.1f;
  return Tensor::from_vector(v, Shape{c}, DataType::FLOAT32).value();
}

TEST(Softmax, MatchesReference) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  for (bool avx512 : {true, false}) {
    set_avx512_kernels_enabled(avx512);
    for (const Shape& s : {Shape{1, 1000}, Shape{3, 5, 7}, Shape{2, 2500}, Shape{1, 1, 64, 64}})
      for (DataType dt : {DataType::FLOAT32, DataType::BFLOAT16}) {
        SCOPED_TRACE(fmt::format("{} {} avx512={}", s.to_string(), data_type_name(dt), avx512));
        Tensor h = testing::random_tensor(s, dt, Layout::ROW_MAJOR, 1);
        ASSERT_OK_AND_ASSIGN(Tensor want, reference::softmax(h, dt));
        for (const MemoryConfig& mc : {DRAM_MEMORY_CONFIG, L1_MEMORY_CONFIG}) {
          ASSERT_OK_AND_ASSIGN(Tensor d, to_device(h, *dev, mc));
          ASSERT_OK_AND_ASSIGN(Tensor y, softmax(d));
          EXPECT_EQ(y.spec(), d.spec());
          expect_near_reference(y.cpu().value(), want, dt);
        }
      }
  }
  set_avx512_kernels_enabled(true);
}

// log_softmax, with logits far apart (where softmax underflows to 0 and its
// log would be -inf) and NaN in a row.
TEST(LogSoftmax, MatchesReference) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  for (bool avx512 : {true, false}) {
    set_avx512_kernels_enabled(avx512);
    for (const Shape& s : {Shape{1, 1000}, Shape{3, 5, 7}, Shape{2, 2500}})
      for (DataType dt : {DataType::FLOAT32, DataType::BFLOAT16}) {
        SCOPED_TRACE(fmt::format("{} {} avx512={}", s.to_string(), data_type_name(dt), avx512));
        std::vector<float> v = testing::random_values(s.volume(), 3, 4.0f);
        v[1] = 150.0f, v[2] = -150.0f;
        v.back() = NAN;
        Tensor h = Tensor::from_vector(v, s, dt).value();
        ASSERT_OK_AND_ASSIGN(Tensor want, reference::log_softmax(h, dt));
        ASSERT_OK_AND_ASSIGN(Tensor d, to_device(h, *dev));
        ASSERT_OK_AND_ASSIGN(Tensor y, log_softmax(d));
        EXPECT_EQ(y.spec(), d.spec());
        ASSERT_OK_AND_ASSIGN(std::vector<float> got, y.cpu().value().to_vector());
        ASSERT_OK_AND_ASSIGN(std::vector<float> ref, want.to_vector());
        const double tol = dt == DataType::BFLOAT16 ? 0x1p-7 : 1e-5;
        for (size_t i = 0; i < got.size(); ++i) {
          if (std::isnan(ref[i]))
            EXPECT_TRUE(std::isnan(got[i])) << i;
          else
            EXPECT_NEAR(got[i], ref[i], tol * std::fabs(ref[i]) + 1e-5) << i;
        }
      }
  }
  set_avx512_kernels_enabled(true);
}

TEST(LayerNorm, MatchesReference) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  for (bool avx512 : {true, false})
    for (const Shape& s : {Shape{4, 768}, Shape{2, 3, 37}, Shape{1, 1, 32, 1500}})
      for (DataType dt : {DataType::FLOAT32, DataType::BFLOAT16})
        for (bool affine : {false, true}) {
          set_avx512_kernels_enabled(avx512);
          SCOPED_TRACE(fmt::format("{} {} affine={} avx512={}", s.to_string(), data_type_name(dt), affine, avx512));
          Tensor h = testing::random_tensor(s, dt, Layout::ROW_MAJOR, 2);
          NormParams hp{.epsilon = 1e-5f};
          NormParams dp = hp;
          if (affine) {
            hp.weight = param(s[-1], 3);
            hp.bias = param(s[-1], 4);
            dp.weight = to_device(*hp.weight, *dev).value();
            dp.bias = to_device(*hp.bias, *dev).value();
          }
          ASSERT_OK_AND_ASSIGN(Tensor want, reference::layer_norm(h, hp, dt));
          ASSERT_OK_AND_ASSIGN(Tensor d, to_device(h, *dev, L1_MEMORY_CONFIG));
          ASSERT_OK_AND_ASSIGN(Tensor y, layer_norm(d, dp));
          expect_near_reference(y.cpu().value(), want, dt);
        }
  set_avx512_kernels_enabled(true);
}

TEST(GroupNorm, MatchesReference) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  struct Case {
    Shape s;
    uint32_t groups;
  };
  for (const Case& c : {Case{Shape{1, 8, 8, 32}, 8}, Case{Shape{2, 5, 3, 12}, 3}, Case{Shape{1, 1, 49, 2048}, 1},
                        Case{Shape{1, 4, 4, 2048}, 32}})
    for (DataType dt : {DataType::FLOAT32, DataType::BFLOAT16}) {
      SCOPED_TRACE(fmt::format("{} g{} {}", c.s.to_string(), c.groups, data_type_name(dt)));
      Tensor h = testing::random_tensor(c.s, dt, Layout::ROW_MAJOR, 5);
      NormParams hp{.weight = param(c.s[3], 6), .bias = param(c.s[3], 7)};
      NormParams dp{.weight = to_device(*hp.weight, *dev).value(), .bias = to_device(*hp.bias, *dev).value()};
      ASSERT_OK_AND_ASSIGN(Tensor want, reference::group_norm(h, c.groups, hp, dt));
      ASSERT_OK_AND_ASSIGN(Tensor d, to_device(h, *dev));
      ASSERT_OK_AND_ASSIGN(Tensor y, group_norm(d, c.groups, dp));
      expect_near_reference(y.cpu().value(), want, dt);
    }
}

TEST(BatchNorm, MatchesReference) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  ASSERT_OK_AND_ASSIGN(auto wh, open_device({.descriptor = "wormhole_b0"}));
  for (const Shape& s : {Shape{1, 8, 8, 32}, Shape{2, 3, 5, 1100}, Shape{1, 1, 96, 64}})
    for (DataType dt : {DataType::FLOAT32, DataType::BFLOAT16}) {
      SCOPED_TRACE(fmt::format("{} {}", s.to_string(), data_type_name(dt)));
      const uint32_t c = s[-1];
      Tensor h = testing::random_tensor(s, dt, Layout::ROW_MAJOR, 8);
      Tensor mean = param(c, 9), var = param(c, 10, true);
      NormParams hp{.epsilon = 1e-3f, .weight = param(c, 11), .bias = param(c, 12)};
      ASSERT_OK_AND_ASSIGN(Tensor want, reference::batch_norm(h, mean, var, hp, dt));
      for (Device* dv : {dev.get(), wh.get()}) {
        NormParams dp{
            .epsilon = 1e-3f, .weight = to_device(*hp.weight, *dv).value(), .bias = to_device(*hp.bias, *dv).value()};
        ASSERT_OK_AND_ASSIGN(Tensor d, to_device(h, *dv, L1_MEMORY_CONFIG));
        ASSERT_OK_AND_ASSIGN(Tensor y, batch_norm(d, to_device(mean, *dv).value(), to_device(var, *dv).value(), dp));
        expect_near_reference(y.cpu().value(), want, dt);
      }
    }
}

// NaN, infinities, -0.0 and denormals in the input come out as the
// reference's: a row (softmax, layer_norm), group or element (batch_norm)
// holding a NaN or an infinity is NaN where the reference's is, on both
// kernel sets.
TEST(Normalization, SpecialValuesAsTheReference) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  const Shape s{2, 4, 5, 48};
  std::vector<float> v = testing::random_values(s.volume(), 13, 2.0f);
  testing::add_special_values(v, 9, 211);
  Tensor h = Tensor::from_vector(v, s, DataType::FLOAT32).value();
  const uint32_t c = s[-1];
  NormParams hp{.epsilon = 1e-5f, .weight = param(c, 3), .bias = param(c, 4)};
  NormParams dp{
      .epsilon = 1e-5f, .weight = to_device(*hp.weight, *dev).value(), .bias = to_device(*hp.bias, *dev).value()};
  Tensor mean = param(c, 9), var = param(c, 10, true);
  for (bool avx512 : {true, false}) {
    set_avx512_kernels_enabled(avx512);
    SCOPED_TRACE(avx512 ? "avx512" : "avx2");
    ASSERT_OK_AND_ASSIGN(Tensor d, to_device(h, *dev));
    {
      SCOPED_TRACE("softmax");
      ASSERT_OK_AND_ASSIGN(Tensor want, reference::softmax(h, DataType::FLOAT32));
      ASSERT_OK_AND_ASSIGN(Tensor y, softmax(d));
      expect_near_reference(y.cpu().value(), want, DataType::FLOAT32);
    }
    {
      SCOPED_TRACE("layer_norm");
      ASSERT_OK_AND_ASSIGN(Tensor want, reference::layer_norm(h, hp, DataType::FLOAT32));
      ASSERT_OK_AND_ASSIGN(Tensor y, layer_norm(d, dp));
      expect_near_reference(y.cpu().value(), want, DataType::FLOAT32);
    }
    {
      SCOPED_TRACE("group_norm");
      ASSERT_OK_AND_ASSIGN(Tensor want, reference::group_norm(h, 4, hp, DataType::FLOAT32));
      ASSERT_OK_AND_ASSIGN(Tensor y, group_norm(d, 4, dp));
      expect_near_reference(y.cpu().value(), want, DataType::FLOAT32);
    }
    {
      SCOPED_TRACE("batch_norm");
      ASSERT_OK_AND_ASSIGN(Tensor want, reference::batch_norm(h, mean, var, hp, DataType::FLOAT32));
      ASSERT_OK_AND_ASSIGN(Tensor y, batch_norm(d, to_device(mean, *dev).value(), to_device(var, *dev).value(), dp));
      expect_near_reference(y.cpu().value(), want, DataType::FLOAT32);
    }
  }
  set_avx512_kernels_enabled(true);
}

// Masked attention rows (scores 90 and 100 below the rest, as Swin's -100
// mask makes): where the reference's probability is below the smallest
// normal float softmax gives 0 (normalization.h), elsewhere the reference's;
// log_softmax stays finite as the reference. The workers keep denormals
// for the next op (an add of denormals is still denormal), and so does the
// calling thread.
TEST(Softmax, FlushesWhatWouldBeDenormalAndRestoresTheThreads) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  const Shape s{64, 49};
  std::vector<float> v = testing::random_values(s.volume(), 21, 1.0f);
  for (size_t i = 0; i < v.size(); ++i)
    if (i % 49 >= 30) v[i] -= i % 2 ? 100.0f : 90.0f;
  v[5] = 1e-40f, v[6] = -1e-40f;  // denormal logits
  Tensor h = Tensor::from_vector(v, s, DataType::FLOAT32).value();
  ASSERT_OK_AND_ASSIGN(std::vector<float> ref, reference::softmax(h, DataType::FLOAT32).value().to_vector());
  ASSERT_OK_AND_ASSIGN(Tensor want_log, reference::log_softmax(h, DataType::FLOAT32));
  const unsigned csr = _mm_getcsr();
  for (bool avx512 : {true, false}) {
    set_avx512_kernels_enabled(avx512);
    SCOPED_TRACE(avx512 ? "avx512" : "avx2");
    ASSERT_OK_AND_ASSIGN(Tensor d, to_device(h, *dev));
    ASSERT_OK_AND_ASSIGN(std::vector<float> got, softmax(d).value().cpu().value().to_vector());
    size_t flushed = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (std::fabs(ref[i]) < FLT_MIN) {
        flushed += ref[i] != 0;
        EXPECT_EQ(got[i], 0.0f) << i;
      } else {
        EXPECT_NEAR(got[i], ref[i], 1e-5 * ref[i] + 1e-5) << i;
      }
    }
    EXPECT_GT(flushed, 0u);  // the case is the one the flush is for
    expect_near_reference(log_softmax(d).value().cpu().value(), want_log, DataType::FLOAT32);
    Tensor tiny = Tensor::from_vector(std::vector<float>(256, 1e-39f), Shape{256}, DataType::FLOAT32).value();
    ASSERT_OK_AND_ASSIGN(Tensor dt, to_device(tiny, *dev));
    ASSERT_OK_AND_ASSIGN(std::vector<float> sum, add(dt, dt).value().cpu().value().to_vector());
    for (float x : sum) EXPECT_EQ(x, 2e-39f);
  }
  set_avx512_kernels_enabled(true);
  EXPECT_EQ(_mm_getcsr(), csr);
}

TEST(Normalization, Errors) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  ASSERT_OK_AND_ASSIGN(
      Tensor d, to_device(testing::random_tensor(Shape{1, 2, 2, 6}, DataType::FLOAT32, Layout::ROW_MAJOR, 1), *dev));
  EXPECT_ERROR(softmax(d, 1), StatusCode::kUnimplemented, "only the last dim is supported, found dim 1");
  EXPECT_ERROR(group_norm(d, 4), StatusCode::kInvalidArgument, "6 channels do not split into 4 groups");
  ASSERT_OK_AND_ASSIGN(Tensor five, to_device(param(5, 1), *dev));
  EXPECT_ERROR(layer_norm(d, {.weight = five}), StatusCode::kInvalidArgument,
               "layer_norm: expected weight to be a ROW_MAJOR float32 or bfloat16 tensor of 6 values");
  EXPECT_ERROR(batch_norm(d, five, five), StatusCode::kInvalidArgument, "expected running_mean to be");
  EXPECT_ERROR(softmax(testing::random_tensor(Shape{4}, DataType::FLOAT32, Layout::ROW_MAJOR, 1)),
               StatusCode::kInvalidArgument, "must be a device tensor");
}

}  // namespace
}  // namespace tessera
