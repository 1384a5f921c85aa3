// Host reference kernels: hand-computed cases for the index arithmetic
// (the conformance suite checks them against ONNX's outputs at scale) and
// their error paths. Exact comparisons unless a tolerance is stated.
#include "tessera/graph/host_eval.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "tessera/base/cpu_features.h"
#include "test_util.h"

namespace tessera::graph {
namespace {

using ::testing::HasSubstr;

Node make(const std::string& op, size_t outputs = 1) {
  Node n;
  n.op_type = op;
  n.name = "n";
  for (size_t k = 0; k < outputs; ++k) n.outputs.push_back(static_cast<int>(k));
  return n;
}

void set_ints(Node& n, const std::string& k, std::vector<int64_t> v) {
  n.attrs[k].kind = Attribute::Kind::INTS;
  n.attrs[k].ints = std::move(v);
}

std::vector<HostTensor> eval(const Node& n, std::vector<const HostTensor*> ins, int opset = 13) {
  auto r = evaluate(n, ins, opset);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : std::vector<HostTensor>{};
}

TEST(HostEval, BroadcastBinaryAndIntegerDivision) {
  const HostTensor a = HostTensor::floats({2, 1}, {1, 2}), b = HostTensor::floats({3}, {10, 20, 30});
  auto y = eval(make("Add"), {&a, &b});
  EXPECT_EQ(y[0].dims, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(y[0].f, (std::vector<float>{11, 21, 31, 12, 22, 32}));
  const HostTensor i = HostTensor::ints({2}, {7, -7}), j = HostTensor::ints({1}, {2});
  EXPECT_EQ(eval(make("Div"), {&i, &j})[0].i, (std::vector<int64_t>{3, -3}));
  const HostTensor zero = HostTensor::ints({1}, {0});
  EXPECT_THAT(evaluate(make("Div"), std::vector<const HostTensor*>{&i, &zero}, 13).status().message(),
              HasSubstr("division by zero"));
  const HostTensor c = HostTensor::floats({4}, {1, 2, 3, 4});
  EXPECT_THAT(evaluate(make("Add"), std::vector<const HostTensor*>{&b, &c}, 13).status().message(),
              HasSubstr("do not broadcast"));
}

TEST(HostEval, SliceWithNegativeStepsAndClamping) {
  const HostTensor x = HostTensor::floats({5}, {0, 1, 2, 3, 4});
  const HostTensor st = HostTensor::ints({1}, {-1}), en = HostTensor::ints({1}, {-100}), ax = HostTensor::ints({1}, {0}),
                   sp = HostTensor::ints({1}, {-2});
  EXPECT_EQ(eval(make("Slice"), {&x, &st, &en, &ax, &sp})[0].f, (std::vector<float>{4, 2, 0}));
  const HostTensor zero = HostTensor::ints({1}, {0});
  EXPECT_THAT(evaluate(make("Slice"), std::vector<const HostTensor*>{&x, &st, &en, &ax, &zero}, 13).status().message(),
              HasSubstr("step 0"));
}

TEST(HostEval, GatherReduceAndArgMax) {
  const HostTensor x = HostTensor::floats({2, 3}, {1, 5, 3, 4, 2, 6});
  const HostTensor idx = HostTensor::ints({2}, {2, -3});
  Node g = make("Gather");
  g.attrs["axis"].i = 1;
  EXPECT_EQ(eval(g, {&x, &idx})[0].f, (std::vector<float>{3, 1, 6, 4}));
  const HostTensor bad = HostTensor::ints({1}, {3});
  EXPECT_THAT(evaluate(g, std::vector<const HostTensor*>{&x, &bad}, 13).status().message(), HasSubstr("out of range"));
  Node r = make("ReduceMean");
  set_ints(r, "axes", {1});
  r.attrs["keepdims"].i = 0;
  EXPECT_EQ(eval(r, {&x})[0].f, (std::vector<float>{3, 4}));
  Node am = make("ArgMax");
  am.attrs["axis"].i = 1;
  EXPECT_EQ(eval(am, {&x})[0].i, (std::vector<int64_t>{1, 2}));
}

TEST(HostEval, InstanceNormalizationPerImageAndChannel) {
  // Channel 0: 1..4 (mean 2.5, biased variance 1.25); channel 1 constant (variance 0: its bias).
  const HostTensor x = HostTensor::floats({1, 2, 2, 2}, {1, 2, 3, 4, 7, 7, 7, 7});
  const HostTensor scale = HostTensor::floats({2}, {2, 3}), bias = HostTensor::floats({2}, {1, -1});
  Node n = make("InstanceNormalization");
  n.attrs["epsilon"] = {.kind = Attribute::Kind::FLOAT, .f = 1e-5f};
  const std::vector<float> y = eval(n, {&x, &scale, &bias})[0].f;
  const double sd = std::sqrt(1.25 + double{1e-5f});
  const double want[] = {2 * -1.5 / sd + 1, 2 * -0.5 / sd + 1, 2 * 0.5 / sd + 1, 2 * 1.5 / sd + 1, -1, -1, -1, -1};
  for (size_t k = 0; k < 8; ++k) EXPECT_NEAR(y[k], want[k], 1e-6) << k;
  const HostTensor flat = HostTensor::floats({2, 4}, std::vector<float>(8, 1.0f));
  EXPECT_FALSE(evaluate(n, std::vector<const HostTensor*>{&flat, &scale, &bias}, 13).ok());  // rank 2
}

TEST(HostEval, PoolingWithAsymmetricPadsAndIndices) {
  // 1x1x3x3, 2x2 max pool, stride 1, pads (top 1, left 0, bottom 0, right 1).
  const HostTensor x = HostTensor::floats({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  Node p = make("MaxPool", 2);
  set_ints(p, "kernel_shape", {2, 2});
  set_ints(p, "pads", {1, 0, 0, 1});
  auto y = eval(p, {&x});
  EXPECT_EQ(y[0].dims, (std::vector<int64_t>{1, 1, 3, 3}));
  EXPECT_EQ(y[0].f, (std::vector<float>{2, 3, 3, 5, 6, 6, 8, 9, 9}));
  EXPECT_EQ(y[1].i, (std::vector<int64_t>{1, 2, 2, 4, 5, 5, 7, 8, 8}));
  Node a = make("AveragePool");
  set_ints(a, "kernel_shape", {2, 2});
  set_ints(a, "pads", {1, 1, 1, 1});
  a.attrs["count_include_pad"].i = 1;
  EXPECT_FLOAT_EQ(eval(a, {&x})[0].f[0], 0.25f);  // one real element of four
}

TEST(HostEval, ResizeModes) {
  const HostTensor x = HostTensor::floats({1, 1, 1, 2}, {0, 10});
  const HostTensor scales = HostTensor::floats({4}, {1, 1, 1, 2});
  Node r = make("Resize");
  r.attrs["mode"] = Attribute{.kind = Attribute::Kind::STRING, .s = "linear"};
  auto y = eval(r, {&x, nullptr, &scales});
  // half_pixel: sources -0.25, 0.25, 0.75, 1.25 (clamped at the edges).
  EXPECT_EQ(y[0].f, (std::vector<float>{0, 2.5f, 7.5f, 10}));
  r.attrs["coordinate_transformation_mode"] = Attribute{.kind = Attribute::Kind::STRING, .s = "align_corners"};
  y = eval(r, {&x, nullptr, &scales});
  EXPECT_NEAR(y[0].f[1], 10.0f / 3, 1e-5);
  r.attrs["mode"].s = "nearest";
  r.attrs["coordinate_transformation_mode"].s = "asymmetric";
  r.attrs["nearest_mode"] = Attribute{.kind = Attribute::Kind::STRING, .s = "floor"};
  EXPECT_EQ(eval(r, {&x, nullptr, &scales})[0].f, (std::vector<float>{0, 0, 10, 10}));
  r.attrs["mode"].s = "area";
  EXPECT_THAT(evaluate(r, std::vector<const HostTensor*>{&x, nullptr, &scales}, 13).status().message(),
              HasSubstr("'mode' = 'area'"));
}

TEST(HostEval, ConvAndConvTransposeAreAdjoint) {
  // <conv(x, w), y> == <x, conv_transpose(y, w)> for one channel, stride 2, pad 1.
  std::vector<float> xv(25), yv(9), wv(9);
  for (size_t k = 0; k < 25; ++k) xv[k] = std::sin(0.7f * static_cast<float>(k));
  for (size_t k = 0; k < 9; ++k) yv[k] = std::cos(0.3f * static_cast<float>(k)), wv[k] = 0.1f * static_cast<float>(k) - 0.4f;
  const HostTensor x = HostTensor::floats({1, 1, 5, 5}, xv), y = HostTensor::floats({1, 1, 3, 3}, yv),
                   w = HostTensor::floats({1, 1, 3, 3}, wv);
  Node c = make("Conv");
  set_ints(c, "strides", {2, 2});
  set_ints(c, "pads", {1, 1, 1, 1});
  Node t = c;
  t.op_type = "ConvTranspose";
  set_ints(t, "output_padding", {0, 0});
  auto cx = eval(c, {&x, &w});
  auto ty = eval(t, {&y, &w});
  ASSERT_EQ(ty[0].dims, (std::vector<int64_t>{1, 1, 5, 5}));
  double lhs = 0, rhs = 0;
  for (size_t k = 0; k < 9; ++k) lhs += double{cx[0].f[k]} * yv[k];
  for (size_t k = 0; k < 25; ++k) rhs += double{ty[0].f[k]} * xv[k];
  EXPECT_NEAR(lhs, rhs, 1e-5);
}

TEST(HostEval, UnknownOpsAndMissingInputs) {
  const HostTensor x = HostTensor::floats({1}, {1});
  EXPECT_EQ(evaluate(make("NoSuchOp"), std::vector<const HostTensor*>{&x}, 13).status().code(), StatusCode::kUnimplemented);
  EXPECT_THAT(evaluate(make("Add"), std::vector<const HostTensor*>{&x, nullptr}, 13).status().message(),
              HasSubstr("input 1 is missing"));
  EXPECT_FALSE(host_supports("NoSuchOp"));
  EXPECT_TRUE(host_supports("Resize"));
}

// MatMul (and Gemm with B transposed) of float32 operands sums exact double
// products in k's order on every kernel tier: the same bits as a plain
// double loop, over shapes with partial row and column blocks, k past a
// block of 256, and special values.
TEST(HostEval, MatMulSumsInDoubleBitForBitOnEveryTier) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), -0.0f, 1e-40f, -3e-39f, 3e38f};
  for (KernelIsa isa : {KernelIsa::kScalar, KernelIsa::kAvx2, KernelIsa::kAvx512}) {
    set_kernel_isa_limit(isa);
    for (int64_t m : {1, 3, 8, 9})
      for (int64_t n : {1, 7, 16, 33})
        for (int64_t k : {1, 5, 300}) {
          for (bool special : {false, true}) {
            SCOPED_TRACE(fmt::format("{} x {} x {}, isa {}{}", m, n, k, kernel_isa_name(kernel_isa()),
                                     special ? ", special values" : ""));
            std::vector<float> av(static_cast<size_t>(m * k)), bv(static_cast<size_t>(k * n));
            for (float& v : av) v = u(rng);
            for (float& v : bv) v = u(rng);
            if (special)
              for (size_t j = 0; j < std::size(specials); ++j) {
                av[(j * 37) % av.size()] = specials[j];
                bv[(j * 53 + 1) % bv.size()] = specials[(j + 3) % std::size(specials)];
              }
            std::vector<float> btv(bv.size());  // b transposed, for Gemm's transB
            for (int64_t q = 0; q < k; ++q)
              for (int64_t j = 0; j < n; ++j) btv[static_cast<size_t>(j * k + q)] = bv[static_cast<size_t>(q * n + j)];
            const HostTensor a = HostTensor::floats({m, k}, av), b = HostTensor::floats({k, n}, bv),
                             bt = HostTensor::floats({n, k}, btv);
            const auto y = eval(make("MatMul"), {&a, &b});
            Node gemm = make("Gemm");
            gemm.attrs["transB"] = {.kind = Attribute::Kind::INT, .i = 1};
            const auto yt = eval(gemm, {&a, &bt});
            ASSERT_EQ(y.size(), 1u);
            ASSERT_EQ(yt.size(), 1u);
            ASSERT_EQ(yt[0].dims, (std::vector<int64_t>{m, n}));
            EXPECT_EQ(std::memcmp(yt[0].f.data(), y[0].f.data(), y[0].f.size() * 4), 0);
            for (int64_t i = 0; i < m; ++i)
              for (int64_t j = 0; j < n; ++j) {
                double sum = 0;
                for (int64_t q = 0; q < k; ++q)
                  sum += double{av[static_cast<size_t>(i * k + q)]} * double{bv[static_cast<size_t>(q * n + j)]};
                const float want = static_cast<float>(sum), got = y[0].f[static_cast<size_t>(i * n + j)];
                if (std::isnan(want)) {
                  EXPECT_TRUE(std::isnan(got)) << i << "," << j;
                } else {
                  uint32_t wb, gb;
                  std::memcpy(&wb, &want, 4), std::memcpy(&gb, &got, 4);
                  EXPECT_EQ(gb, wb) << i << "," << j << ": " << got << " vs " << want;
                }
              }
          }
        }
  }
  set_kernel_isa_limit(KernelIsa::kAvx512);
  // 2^27 multiply-adds and more split their columns over the cores: the
  // same bits.
  const int64_t m = 32, n = 2050, k = 2048;
  std::vector<float> av(static_cast<size_t>(m * k)), bv(static_cast<size_t>(k * n));
  for (float& v : av) v = u(rng);
  for (float& v : bv) v = u(rng);
  const HostTensor a = HostTensor::floats({m, k}, av), b = HostTensor::floats({k, n}, bv);
  const auto y = eval(make("MatMul"), {&a, &b});
  ASSERT_EQ(y.size(), 1u);
  std::vector<double> sum(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t q = 0; q < k; ++q)
      for (int64_t j = 0; j < n; ++j)
        sum[static_cast<size_t>(i * n + j)] +=
            double{av[static_cast<size_t>(i * k + q)]} * double{bv[static_cast<size_t>(q * n + j)]};
  for (size_t e = 0; e < sum.size(); ++e) ASSERT_EQ(y[0].f[e], static_cast<float>(sum[e])) << e;
}

// RoiAlign over a map whose values are linear in (y, x), which bilinear
// sampling reproduces exactly: each bin's average is the value at its
// samples' mean. Then max mode, regions off the map, a non-finite region
// (NaN outputs) and the errors.
TEST(HostEval, RoiAlignAveragesBilinearSamples) {
  std::vector<float> v(16);
  for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<float>(k);  // 4 * y + x
  const HostTensor x = HostTensor::floats({1, 1, 4, 4}, v);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const HostTensor rois = HostTensor::floats({3, 4}, {0, 0, 2, 2, 10, 10, 12, 12, 0, nan, 2, 2});
  const HostTensor batch = HostTensor::ints({3}, {0, 0, 0});
  auto roi_align = [&](const std::string& mode, const std::string& coords, int64_t size, int64_t ratio) {
    Node n = make("RoiAlign");
    n.attrs["mode"] = {.kind = Attribute::Kind::STRING, .s = mode};
    n.attrs["coordinate_transformation_mode"] = {.kind = Attribute::Kind::STRING, .s = coords};
    n.attrs["output_height"] = {.kind = Attribute::Kind::INT, .i = size};
    n.attrs["output_width"] = {.kind = Attribute::Kind::INT, .i = size};
    n.attrs["sampling_ratio"] = {.kind = Attribute::Kind::INT, .i = ratio};
    return n;
  };
  // Bins of 1 x 1 pixel from (0, 0), samples at 0.25 and 0.75 of each.
  auto y = eval(roi_align("avg", "output_half_pixel", 2, 2), {&x, &rois, &batch}, 16);
  ASSERT_EQ(y.size(), 1u);
  EXPECT_EQ(y[0].dims, (std::vector<int64_t>{3, 1, 2, 2}));
  for (int k = 0; k < 4; ++k) {
    const float want = 4 * (0.5f + static_cast<float>(k / 2)) + 0.5f + static_cast<float>(k % 2);
    EXPECT_FLOAT_EQ(y[0].f[static_cast<size_t>(k)], want);
    EXPECT_EQ(y[0].f[static_cast<size_t>(4 + k)], 0.0f);  // more than a pixel off the map: zeros
    EXPECT_TRUE(std::isnan(y[0].f[static_cast<size_t>(8 + k)]));
  }
  // Three channels, each its own linear map (c + 1) * (4y + x) - c; two
  // images, the region on the second.
  std::vector<float> v3(2 * 3 * 16);
  for (int b = 0; b < 2; ++b)
    for (int c = 0; c < 3; ++c)
      for (int k = 0; k < 16; ++k)
        v3[static_cast<size_t>((b * 3 + c) * 16 + k)] = static_cast<float>((c + 1) * k - c + 100 * b);
  const HostTensor x3 = HostTensor::floats({2, 3, 4, 4}, v3), second = HostTensor::ints({3}, {1, 1, 1});
  y = eval(roi_align("avg", "output_half_pixel", 2, 2), {&x3, &rois, &second}, 16);
  ASSERT_EQ(y[0].dims, (std::vector<int64_t>{3, 3, 2, 2}));
  for (int c = 0; c < 3; ++c)
    for (int k = 0; k < 4; ++k) {
      const float at = 4 * (0.5f + static_cast<float>(k / 2)) + 0.5f + static_cast<float>(k % 2);
      const float want = static_cast<float>(c + 1) * at - static_cast<float>(c) + 100;
      EXPECT_FLOAT_EQ(y[0].f[static_cast<size_t>(c * 4 + k)], want);
    }
  // half_pixel shifts the region back by half a pixel: the one sample of a
  // 1 x 1 output lands on (0.5, 0.5), not on pixel (1, 1).
  y = eval(roi_align("avg", "half_pixel", 1, 1), {&x, &rois, &batch}, 16);
  EXPECT_FLOAT_EQ(y[0].f[0], 2.5f);
  // Max mode: one sample on pixel (1, 1) exactly: its value, weight 1.
  y = eval(roi_align("max", "output_half_pixel", 1, 1), {&x, &rois, &batch}, 16);
  EXPECT_EQ(y[0].f[0], 5.0f);
  // Opset 10's default is output_half_pixel, opset 16's half_pixel.
  Node plain = make("RoiAlign");
  EXPECT_FLOAT_EQ(eval(plain, {&x, &rois, &batch}, 10)[0].f[0], 5.0f);
  EXPECT_FLOAT_EQ(eval(plain, {&x, &rois, &batch}, 16)[0].f[0], 2.5f);
  const HostTensor far = HostTensor::ints({3}, {0, 1, 0});
  using Ins = std::vector<const HostTensor*>;
  auto r = evaluate(plain, Ins{&x, &rois, &far}, 16);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("region 1 names image 1 of a batch of 1"));
  r = evaluate(roi_align("median", "half_pixel", 1, 1), Ins{&x, &rois, &batch}, 16);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("mode 'median', expected avg or max"));
  const HostTensor flat = HostTensor::floats({3, 2}, {0, 0, 1, 1, 2, 2});
  r = evaluate(plain, Ins{&x, &flat, &batch}, 16);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("expected (N, C, H, W), (R, 4) and (R)"));
  r = evaluate(roi_align("avg", "align_corners", 1, 1), Ins{&x, &rois, &batch}, 16);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("'align_corners', expected half_pixel or output_half_pixel"));
  r = evaluate(roi_align("avg", "half_pixel", 0, 1), Ins{&x, &rois, &batch}, 16);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("output 0 x 0 and sampling_ratio 1: expected positive sizes"));
}

// Gemm reading B in place (transB or not) checks the inner dims as the
// copying path does.
TEST(HostEval, GemmInnerDimsMustAgree) {
  const HostTensor a = HostTensor::floats({2, 3}, std::vector<float>(6, 1.0f));
  const HostTensor b = HostTensor::floats({2, 3}, std::vector<float>(6, 1.0f));
  Node gemm = make("Gemm");
  auto r = evaluate(gemm, std::vector<const HostTensor*>{&a, &b}, 13);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("inner dims differ: [2,3] x [2,3]"));
  gemm.attrs["transB"] = {.kind = Attribute::Kind::INT, .i = 1};  // (2, 3) x (3, 2): fine
  const auto y = eval(gemm, {&a, &b});
  ASSERT_EQ(y.size(), 1u);
  EXPECT_EQ(y[0].f, (std::vector<float>{3, 3, 3, 3}));
  const HostTensor c = HostTensor::floats({2, 4}, std::vector<float>(8, 1.0f));
  r = evaluate(gemm, std::vector<const HostTensor*>{&a, &c}, 13);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("(transposed)"));
}

}  // namespace
}  // namespace tessera::graph
