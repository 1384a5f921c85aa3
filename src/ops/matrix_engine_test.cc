// The emulated matrix engine (matrix_engine.h): each fidelity phase's
// product against hand-computed values, the destination's rounding, the
// source formats; the device op bit-exact against the scalar oracle, and
// at HiFi4 with a float32 destination close to float32 math.
#include "tessera/ops/matrix_engine.h"

#include <bit>
#include <cmath>

#include "tessera/base/cpu_features.h"
#include "tessera/numerics/bfloat16.h"
#include "tessera/ops/reference.h"
#include "test_util.h"

namespace tessera {
namespace {

constexpr MathFidelity kAll[] = {MathFidelity::LoFi, MathFidelity::HiFi2, MathFidelity::HiFi3, MathFidelity::HiFi4};

float dot1(float b, float a, MathFidelity f, bool fp32) { return matrix_engine_dot(&b, &a, 1, f, fp32); }

// a (weights, SrcA) = 1 + 2^-1 + 2^-5 + 2^-7: its high part (hidden bit and
// 4 mantissa bits) is 1.5, its low part 2^-5 + 2^-7.
// b (activations, SrcB) = 1 + 2^-6 + 2^-7: high (hidden and 6 bits) 1 + 2^-6, low 2^-7.
TEST(MatrixEngine, EachPhaseMultipliesItsParts) {
  const float a = 1.0f + 0x1p-1f + 0x1p-5f + 0x1p-7f, b = 1.0f + 0x1p-6f + 0x1p-7f;
  EXPECT_EQ(srca_part(a, false), 1.5f);
  EXPECT_EQ(srca_part(a, true), 0x1p-5f + 0x1p-7f);
  EXPECT_EQ(srcb_part(b, false), 1.0f + 0x1p-6f);
  EXPECT_EQ(srcb_part(b, true), 0x1p-7f);
  const float lofi = 1.5f * (1.0f + 0x1p-6f);                         // hi(a) * hi(b) = 1.5234375
  const float hifi2 = lofi + (0x1p-5f + 0x1p-7f) * (1.0f + 0x1p-6f);  // + lo(a) * hi(b)
  const float hifi3 = hifi2 + 1.5f * 0x1p-7f;                         // + hi(a) * lo(b)
  const float hifi4 = hifi3 + (0x1p-5f + 0x1p-7f) * 0x1p-7f;          // + lo(a) * lo(b)
  EXPECT_EQ(lofi, 1.5234375f);
  EXPECT_EQ(hifi4, a * b);  // every bit of both
  EXPECT_EQ(dot1(b, a, MathFidelity::LoFi, true), lofi);
  EXPECT_EQ(dot1(b, a, MathFidelity::HiFi2, true), hifi2);
  EXPECT_EQ(dot1(b, a, MathFidelity::HiFi3, true), hifi3);
  EXPECT_EQ(dot1(b, a, MathFidelity::HiFi4, true), hifi4);
  // A bfloat16 destination rounds after every phase's add (nearest even).
  float dst = 0;
  for (float part : {lofi, hifi2 - lofi, hifi3 - hifi2, hifi4 - hifi3}) dst = round_to_bfloat16(dst + part);
  EXPECT_EQ(dot1(b, a, MathFidelity::HiFi4, false), dst);
  EXPECT_NE(dst, hifi4);
  EXPECT_EQ(fidelity_phases(MathFidelity::LoFi), 1);
  EXPECT_EQ(fidelity_phases(MathFidelity::HiFi3), 3);
}

TEST(MatrixEngine, SourceFormats) {
  const float x = std::bit_cast<float>(0x3f8fffffu);            // 1.1249999: 23 mantissa bits set from bit 19 down
  EXPECT_EQ(std::bit_cast<uint32_t>(to_srcb(x)), 0x3f8fe000u);  // TF32: 10 mantissa bits
  EXPECT_EQ(std::bit_cast<uint32_t>(to_srca(x)), 0x3f8fc000u);  // SrcA drops TF32's last bit
  EXPECT_EQ(to_srcb(1e-40f), 0.0f);                             // denormals flush
  EXPECT_TRUE(std::signbit(to_srca(-1e-40f)));
  EXPECT_TRUE(std::isinf(to_srca(INFINITY)));
  EXPECT_TRUE(std::isnan(dot1(NAN, 1.0f, MathFidelity::HiFi4, true)));
  EXPECT_TRUE(std::isinf(dot1(2.0f, INFINITY, MathFidelity::LoFi, true)));
  // High and low parts make the source value back, for any value.
  for (float v : testing::random_values(1000, 3, 100.0f)) {
    EXPECT_EQ(srca_part(to_srca(v), false) + srca_part(to_srca(v), true), to_srca(v));
    EXPECT_EQ(srcb_part(to_srcb(v), false) + srcb_part(to_srcb(v), true), to_srcb(v));
  }
}

// On random dot products every fidelity gives its own result; HiFi4 with a
// float32 destination is float32 math on the TF32 operands.
TEST(MatrixEngine, FidelitiesDifferAndHiFi4IsOperandExact) {
  const size_t k = 200;
  const std::vector<float> b = testing::random_values(k, 5, 1.0f), a = testing::random_values(k, 6, 1.0f);
  std::vector<float> r;
  for (MathFidelity f : kAll) r.push_back(matrix_engine_dot(b.data(), a.data(), k, f, true));
  for (size_t i = 0; i + 1 < r.size(); ++i)
    for (size_t j = i + 1; j < r.size(); ++j) EXPECT_NE(r[i], r[j]) << i << " " << j;
  double exact = 0, mag = 0;
  for (size_t i = 0; i < k; ++i) exact += double{to_srcb(b[i])} * to_srca(a[i]), mag += std::abs(double{b[i]} * a[i]);
  EXPECT_NEAR(r[3], exact, 1e-6 * mag);
  EXPECT_GT(std::abs(r[0] - exact), 1e-4 * mag);  // LoFi's truncation shows
}

Tensor dev(Device& d, const std::vector<float>& v, Shape s) {
  return to_device(Tensor::from_vector(v, s, DataType::FLOAT32).value(), d).value();
}
std::vector<float> host(const Tensor& t) { return t.cpu().value().to_vector().value(); }

// A conv whose taps hold 32 channels (so K's tiles are the oracle's) is
// bit-exact with matrix_engine_dot over its K in (tap, channel) order, on
// every ISA's inner loop.
class MatrixEngineIsa : public ::testing::TestWithParam<KernelIsa> {
 protected:
  void SetUp() override {
    if (GetParam() == KernelIsa::kScalar) set_avx512_kernels_enabled(false);
    set_kernel_isa_limit(GetParam());
    if (kernel_isa() != GetParam()) GTEST_SKIP() << kernel_isa_name(GetParam()) << " is not on this CPU";
  }
  void TearDown() override {
    set_avx512_kernels_enabled(true);
    set_kernel_isa_limit(KernelIsa::kAvx512);
  }
};
INSTANTIATE_TEST_SUITE_P(Isa, MatrixEngineIsa,
                         ::testing::Values(KernelIsa::kAvx512, KernelIsa::kAvx2, KernelIsa::kScalar),
                         [](const auto& info) { return std::string(kernel_isa_name(info.param)); });

TEST_P(MatrixEngineIsa, ConvIsTheOracleBitForBit) {
  ASSERT_OK_AND_ASSIGN(auto d, open_device({}));
  Conv2dParams p{.batch_size = 1,
                 .input_height = 5,
                 .input_width = 4,
                 .in_channels = 32,
                 .out_channels = 37,
                 .kernel_size = {3, 3},
                 .stride = {2, 1}};
  p = p.with_padding(1, 1);
  const std::vector<float> x = testing::random_values(5 * 4 * 32, 7, 1.0f),
                           w = testing::random_values(37 * 32 * 9, 8, 0.5f);
  for (MathFidelity f : kAll)
    for (bool fp32 : {false, true}) {
      ASSERT_OK_AND_ASSIGN(auto op, MatrixEngineOp::conv2d(p, w, {}, {.math_fidelity = f, .fp32_dest_acc_en = fp32}));
      ASSERT_OK_AND_ASSIGN(Tensor y, (*op)(dev(*d, x, Shape{1, 5, 4, 32}), std::nullopt, {}, 0));
      const std::vector<float> got = host(y);
      ASSERT_EQ(got.size(), size_t{p.output_height()} * p.output_width() * 37);
      for (uint32_t oy = 0; oy < p.output_height(); ++oy)
        for (uint32_t ox = 0; ox < p.output_width(); ++ox)
          for (uint32_t co = 0; co < 37; ++co) {
            std::vector<float> bk, ak;
            for (uint32_t ky = 0; ky < 3; ++ky)
              for (uint32_t kx = 0; kx < 3; ++kx)
                for (uint32_t c = 0; c < 32; ++c) {
                  const int iy = static_cast<int>(oy * 2 + ky) - 1, ix = static_cast<int>(ox + kx) - 1;
                  const bool in = iy >= 0 && ix >= 0 && iy < 5 && ix < 4;
                  bk.push_back(in ? x[(static_cast<size_t>(iy) * 4 + static_cast<size_t>(ix)) * 32 + c] : 0.0f);
                  ak.push_back(w[((co * 32 + c) * 3 + ky) * 3 + kx]);
                }
            const float want = matrix_engine_dot(bk.data(), ak.data(), bk.size(), f, fp32);
            EXPECT_EQ(got[(oy * p.output_width() + ox) * 37 + co], want) << math_fidelity_name(f) << fp32;
          }
    }
}

// Matmuls with K not a multiple of 16 (a short last half), bias and an
// activation in the destination format; HiFi4 + float32 destination against
// the reference matmul.
TEST(MatrixEngine, MatmulOracleBiasAndActivation) {
  ASSERT_OK_AND_ASSIGN(auto d, open_device({}));
  const uint32_t m = 3, k = 40, n = 5;
  const std::vector<float> a = testing::random_values(m * k, 9, 1.0f), w = testing::random_values(k * n, 10, 1.0f);
  const std::vector<float> bias = testing::random_values(n, 11, 1.0f);
  for (bool fp32 : {false, true}) {
    ASSERT_OK_AND_ASSIGN(auto op,
                         MatrixEngineOp::matmul(m, k, n, w, bias, UnaryWithParam{UnaryOpType::RELU},
                                                {.math_fidelity = MathFidelity::HiFi2, .fp32_dest_acc_en = fp32}));
    ASSERT_OK_AND_ASSIGN(Tensor y, (*op)(dev(*d, a, Shape{m, k}), std::nullopt, {}, 0));
    const std::vector<float> got = host(y);
    for (uint32_t i = 0; i < m; ++i)
      for (uint32_t j = 0; j < n; ++j) {
        std::vector<float> col(k);
        for (uint32_t kk = 0; kk < k; ++kk) col[kk] = w[kk * n + j];
        float v = matrix_engine_dot(&a[i * k], col.data(), k, MathFidelity::HiFi2, fp32);
        auto dest = [&](float x) { return fp32 ? x : round_to_bfloat16(x); };
        v = dest(dest(v + dest(bias[j])));
        EXPECT_EQ(got[i * n + j], std::max(v, 0.0f)) << i << "," << j;
      }
  }
}

// Grouped, depthwise and transposed convs at HiFi4 with a float32
// destination are float32 math on bfloat16-exact operands.
TEST(MatrixEngine, HiFi4Float32DestinationMatchesTheReference) {
  ASSERT_OK_AND_ASSIGN(auto d, open_device({}));
  auto bf = [](std::vector<float> v) {
    for (float& x : v) x = round_to_bfloat16(x);
    return v;
  };
  const MatrixEngineConfig exact{.math_fidelity = MathFidelity::HiFi4, .fp32_dest_acc_en = true};
  for (uint32_t groups : {1u, 2u, 8u}) {
    Conv2dParams p{.batch_size = 2,
                   .input_height = 6,
                   .input_width = 7,
                   .in_channels = 8,
                   .out_channels = 8,
                   .kernel_size = {3, 3},
                   .groups = groups};
    p = p.with_padding(1, 1);
    const std::vector<float> x = bf(testing::random_values(2 * 6 * 7 * 8, 12, 1.0f));
    const std::vector<float> w = bf(testing::random_values(8 * (8 / groups) * 9, 13, 0.5f));
    ASSERT_OK_AND_ASSIGN(auto op, MatrixEngineOp::conv2d(p, w, {}, exact));
    ASSERT_OK_AND_ASSIGN(Tensor y, (*op)(dev(*d, x, Shape{2, 6, 7, 8}), std::nullopt, {}, 0));
    ASSERT_OK_AND_ASSIGN(
        Tensor want, reference::conv2d(Tensor::from_vector(x, Shape{2, 6, 7, 8}, DataType::FLOAT32).value(),
                                       Tensor::from_vector(w, Shape{8, 8 / groups, 3, 3}, DataType::FLOAT32).value(),
                                       std::nullopt, p, DataType::FLOAT32));
    const std::vector<float> got = host(y), ref = want.to_vector().value();
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-5f * (1 + std::abs(ref[i]))) << groups;
  }
  // Transposed: 2x2 stride 2 (a UNet's up-sampling) and 3x3 stride 2 padding 1.
  for (uint32_t kk : {2u, 3u}) {
    ConvTranspose2dParams p{.batch_size = 1,
                            .input_height = 3,
                            .input_width = 4,
                            .in_channels = 4,
                            .out_channels = 6,
                            .kernel_size = {kk, kk},
                            .stride = {2, 2}};
    const uint32_t pad = kk == 3 ? 1 : 0;
    p.padding = {pad, pad};
    const uint32_t oh = p.output_height(), ow = p.output_width();
    const std::vector<float> x = bf(testing::random_values(3 * 4 * 4, 14, 1.0f)),
                             w = bf(testing::random_values(4 * 6 * kk * kk, 15, 0.5f));
    ASSERT_OK_AND_ASSIGN(auto op, MatrixEngineOp::conv_transpose2d(1, 3, 4, 4, oh, ow, 6, 1, {kk, kk}, {2, 2},
                                                                   {pad, pad}, {1, 1}, w, {}, std::nullopt, exact));
    ASSERT_OK_AND_ASSIGN(Tensor y, (*op)(dev(*d, x, Shape{1, 3, 4, 4}), std::nullopt, {}, 0));
    ASSERT_OK_AND_ASSIGN(
        Tensor want, reference::conv_transpose2d(Tensor::from_vector(x, Shape{1, 3, 4, 4}, DataType::FLOAT32).value(),
                                                 Tensor::from_vector(w, Shape{4, 6, kk, kk}, DataType::FLOAT32).value(),
                                                 std::nullopt, p, DataType::FLOAT32));
    const std::vector<float> got = host(y), ref = want.to_vector().value();
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-5f * (1 + std::abs(ref[i]))) << kk;
  }
}

TEST(MatrixEngine, BadShapesAreErrors) {
  ASSERT_OK_AND_ASSIGN(auto d, open_device({}));
  EXPECT_FALSE(MatrixEngineOp::matmul(2, 3, 4, std::vector<float>(11), {}, std::nullopt, {}).ok());
  ASSERT_OK_AND_ASSIGN(auto op, MatrixEngineOp::matmul(2, 3, 4, std::vector<float>(12), {}, std::nullopt, {}));
  const auto r = (*op)(dev(*d, std::vector<float>(5), Shape{5}), std::nullopt, {}, 0);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  // A residual of the wrong size; a transposed conv whose channels its groups do not divide.
  const auto bad_res =
      (*op)(dev(*d, std::vector<float>(6), Shape{2, 3}), dev(*d, std::vector<float>(7), Shape{7}), {}, 0);
  EXPECT_EQ(bad_res.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_res.status().message().find("the residual must be float32 with 8 values"), std::string::npos);
  const auto t = MatrixEngineOp::conv_transpose2d(1, 2, 2, 3, 4, 4, 4, 2, {2, 2}, {2, 2}, {0, 0}, {1, 1},
                                                  std::vector<float>(3 * 2 * 4), {}, std::nullopt, {});
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera
