// The conv2d oracle against hand-computed results, and the activation
// definitions against known values.
#include <cmath>

#include "tessera/ops/reference.h"
#include "test_util.h"

namespace tessera {
namespace {

Tensor host(const std::vector<float>& v, Shape s) { return Tensor::from_vector(v, s, DataType::FLOAT32).value(); }

std::vector<float> values(const Tensor& t) { return t.to_vector().value(); }

Conv2dParams params(uint32_t n, uint32_t h, uint32_t w, uint32_t c, uint32_t k, uint32_t kh, uint32_t kw) {
  Conv2dParams p;
  p.batch_size = n;
  p.input_height = h;
  p.input_width = w;
  p.in_channels = c;
  p.out_channels = k;
  p.kernel_size = {kh, kw};
  return p;
}

TEST(ReferenceConv2d, OnesWithPadding) {
  auto p = params(1, 3, 3, 1, 1, 3, 3).with_padding(1, 1);
  ASSERT_OK_AND_ASSIGN(
      Tensor y, reference::conv2d(host(std::vector<float>(9, 1), {1, 3, 3, 1}),
                                  host(std::vector<float>(9, 1), {1, 1, 3, 3}), std::nullopt, p, DataType::FLOAT32));
  EXPECT_EQ(y.shape(), (Shape{1, 1, 9, 1}));
  EXPECT_EQ(values(y), (std::vector<float>{4, 6, 4, 6, 9, 6, 4, 6, 4}));
  EXPECT_EQ(p.descriptor(), "conv2d:n1h3w3c1k1:r3x3s1x1p1x1x1x1d1x1g1:identity");
  EXPECT_EQ(p.flops(), 2u * 9 * 9);
}

TEST(ReferenceConv2d, PointwiseIsAMatmulPlusBias) {
  auto p = params(1, 2, 1, 2, 3, 1, 1);
  // x: pixel0 = (1, 2), pixel1 = (3, 4); W (3x2) rows (1,0), (0,1), (1,1); bias (10, 20, 30).
  ASSERT_OK_AND_ASSIGN(Tensor y,
                       reference::conv2d(host({1, 2, 3, 4}, {1, 2, 1, 2}), host({1, 0, 0, 1, 1, 1}, {3, 2, 1, 1}),
                                         host({10, 20, 30}, {1, 1, 1, 3}), p, DataType::FLOAT32));
  EXPECT_EQ(values(y), (std::vector<float>{11, 22, 33, 13, 24, 37}));
}

TEST(ReferenceConv2d, DepthwiseGroups) {
  auto p = params(1, 1, 2, 2, 2, 1, 1);
  p.groups = 2;
  ASSERT_OK_AND_ASSIGN(Tensor y, reference::conv2d(host({1, 2, 3, 4}, {1, 1, 2, 2}), host({10, 100}, {2, 1, 1, 1}),
                                                   std::nullopt, p, DataType::FLOAT32));
  EXPECT_EQ(values(y), (std::vector<float>{10, 200, 30, 400}));
}

TEST(ReferenceConv2d, StrideAndDilation) {
  auto p = params(1, 5, 5, 1, 1, 2, 2);
  p.stride = {2, 2};
  p.dilation = {2, 2};
  std::vector<float> x(25);
  for (int i = 0; i < 25; ++i) x[static_cast<size_t>(i)] = static_cast<float>(i);
  ASSERT_OK_AND_ASSIGN(Tensor y, reference::conv2d(host(x, {1, 5, 5, 1}), host({1, 1, 1, 1}, {1, 1, 2, 2}),
                                                   std::nullopt, p, DataType::FLOAT32));
  EXPECT_EQ(values(y), (std::vector<float>{24, 32, 64, 72}));
}

TEST(ReferenceConv2d, AsymmetricPaddingAndActivation) {
  auto p = params(1, 1, 3, 1, 1, 1, 3);
  p.padding = {0, 0, 2, 0};
  p.activation = {UnaryOpType::RELU6};
  ASSERT_OK_AND_ASSIGN(Tensor y, reference::conv2d(host({1, 2, 3}, {1, 1, 3, 1}), host({1, 1, 1}, {1, 1, 1, 3}),
                                                   std::nullopt, p, DataType::FLOAT32));
  EXPECT_EQ(values(y), (std::vector<float>{1, 3, 6}));
}

TEST(ReferenceConv2d, FlattenedInputAndBatch) {
  auto p = params(2, 3, 4, 5, 6, 3, 3).with_padding(1, 1);
  std::vector<float> x = testing::random_values(2 * 3 * 4 * 5, 1), w = testing::random_values(6 * 5 * 9, 2);
  ASSERT_OK_AND_ASSIGN(
      Tensor a, reference::conv2d(host(x, {2, 3, 4, 5}), host(w, {6, 5, 3, 3}), std::nullopt, p, DataType::FLOAT32));
  ASSERT_OK_AND_ASSIGN(
      Tensor b, reference::conv2d(host(x, {1, 1, 24, 5}), host(w, {6, 5, 3, 3}), std::nullopt, p, DataType::FLOAT32));
  EXPECT_EQ(a.shape(), (Shape{1, 1, 24, 6}));
  EXPECT_EQ(values(a), values(b));
  // Batch 1 of the pair equals convolving that image alone.
  auto p1 = p;
  p1.batch_size = 1;
  std::vector<float> x1(x.begin() + 60, x.end());
  ASSERT_OK_AND_ASSIGN(
      Tensor c, reference::conv2d(host(x1, {1, 3, 4, 5}), host(w, {6, 5, 3, 3}), std::nullopt, p1, DataType::FLOAT32));
  auto va = values(a), vc = values(c);
  EXPECT_EQ(std::vector<float>(va.begin() + 72, va.end()), vc);
}

TEST(ReferenceConv2d, Errors) {
  auto p = params(1, 4, 4, 4, 8, 3, 3);
  Tensor x = host(std::vector<float>(64), {1, 4, 4, 4});
  EXPECT_ERROR(
      reference::conv2d(x, host(std::vector<float>(8 * 4 * 9), {8, 4, 1, 9}), std::nullopt, p, DataType::FLOAT32),
      StatusCode::kInvalidArgument, "expected weight shape [8,4,3,3]");
  EXPECT_ERROR(reference::conv2d(host(std::vector<float>(48), {1, 4, 4, 3}),
                                 host(std::vector<float>(8 * 4 * 9), {8, 4, 3, 3}), std::nullopt, p, DataType::FLOAT32),
               StatusCode::kInvalidArgument, "expected input (1,4,4,4)");
  auto g = p;
  g.groups = 3;
  EXPECT_ERROR(g.validate(), StatusCode::kInvalidArgument, "divisible by groups 3");
  auto big = params(1, 2, 2, 1, 1, 3, 3);
  EXPECT_ERROR(big.validate(), StatusCode::kInvalidArgument, "does not fit the padded input 2x2");
  EXPECT_ERROR(
      reference::conv2d(x, host(std::vector<float>(8 * 4 * 9), {8, 4, 3, 3}), host({1, 2}, {2}), p, DataType::FLOAT32),
      StatusCode::kInvalidArgument, "expected bias with 8 values");
}

TEST(Activation, KnownValues) {
  auto f = [](UnaryOpType op, double x, float param = 0) { return apply_activation({op, param}, x); };
  EXPECT_EQ(f(UnaryOpType::RELU, -1), 0);
  EXPECT_EQ(f(UnaryOpType::RELU6, 7), 6);
  EXPECT_NEAR(f(UnaryOpType::GELU, 1), 0.8413447460685429, 1e-15);
  EXPECT_NEAR(f(UnaryOpType::SILU, 1), 0.7310585786300049, 1e-15);
  EXPECT_NEAR(f(UnaryOpType::MISH, 1), 0.8650983882673103, 1e-15);
  EXPECT_NEAR(f(UnaryOpType::SIGMOID, 0), 0.5, 1e-15);
  EXPECT_NEAR(f(UnaryOpType::TANH, 0.5), 0.46211715726000974, 1e-15);
  EXPECT_NEAR(f(UnaryOpType::LEAKY_RELU, -2, 0.1f), -0.2, 1e-7);
  EXPECT_NEAR(f(UnaryOpType::HARDSWISH, 1), 4.0 / 6, 1e-15);
  EXPECT_EQ(f(UnaryOpType::HARDSWISH, -4), 0);
  EXPECT_EQ(f(UnaryOpType::HARDSIGMOID, 0), 0.5);
  EXPECT_EQ(f(UnaryOpType::HARDSIGMOID, 4), 1);
  EXPECT_EQ(f(UnaryOpType::SQRT, 9), 3);
  EXPECT_NEAR(f(UnaryOpType::EXP, 1), M_E, 1e-15);
  EXPECT_NEAR(f(UnaryOpType::ELU, -1, 2.0f), 2 * (std::exp(-1.0) - 1), 1e-15);
  EXPECT_EQ(f(UnaryOpType::ELU, 3, 2.0f), 3);
  EXPECT_TRUE(std::signbit(f(UnaryOpType::ELU, -0.0, 1.0f)));  // ONNX: x for x >= 0
  EXPECT_NEAR(f(UnaryOpType::ERF, 0.5), 0.5204998778130465, 1e-15);
  EXPECT_EQ(f(UnaryOpType::NEG, 2), -2);
  EXPECT_EQ(f(UnaryOpType::ABS, -2), 2);
  EXPECT_EQ(f(UnaryOpType::RECIPROCAL, 4), 0.25);
  EXPECT_NEAR(f(UnaryOpType::GELU_TANH, 1), 0.8411919906082768, 1e-15);
  EXPECT_NEAR(f(UnaryOpType::LOG, M_E), 1.0, 1e-15);
  EXPECT_EQ(f(UnaryOpType::LOG, 0), -INFINITY);
  EXPECT_EQ(f(UnaryOpType::POW, -2, 3.0f), -8);
  EXPECT_TRUE(std::isnan(f(UnaryOpType::POW, -2, 1.5f)));
  EXPECT_EQ(activation_name({UnaryOpType::POW, 1.5f}), "pow(1.5)");
  for (int i = 0; i <= static_cast<int>(UnaryOpType::POW); ++i)
    EXPECT_EQ(parse_unary_op(unary_op_name(static_cast<UnaryOpType>(i))), static_cast<UnaryOpType>(i));
  EXPECT_FALSE(parse_unary_op("swish").has_value());
}

}  // namespace
}  // namespace tessera
