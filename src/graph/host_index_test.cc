// Host reference kernels of detection and recognition heads: TopK, Hardmax,
// CumSum, GatherElements / GatherND / ScatterElements, OneHot, Trilu,
// EyeLike, the inverse and hyperbolic functions, IsNaN / IsInf, Shrink,
// MeanVarianceNormalization, LSTM / GRU / RNN and GridSample: hand-computed
// cases, special values and error paths (the conformance suite checks them
// against ONNX's outputs).
#include <cmath>
#include <limits>

#include "tessera/graph/host_eval.h"
#include "test_util.h"

namespace tessera::graph {
namespace {

using ::testing::HasSubstr;

constexpr float kInf = std::numeric_limits<float>::infinity();

Node make(const std::string& op, size_t outputs = 1) {
  Node n{.name = "n", .op_type = op};
  for (size_t k = 0; k < outputs; ++k) n.outputs.push_back(static_cast<int>(k));
  return n;
}

std::vector<HostTensor> eval(const Node& n, std::vector<const HostTensor*> ins, int opset = 13) {
  auto r = evaluate(n, ins, opset);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : std::vector<HostTensor>{};
}

std::string error_of(const Node& n, std::vector<const HostTensor*> ins, int opset = 13) {
  auto r = evaluate(n, ins, opset);
  return r.ok() ? "ok" : std::string(r.status().message());
}

TEST(HostIndex, TopKOrdersTiesByIndexAndNaNFirst) {
  const HostTensor x = HostTensor::floats({2, 4}, {1, 3, 3, 2, NAN, -kInf, 5, 5});
  const HostTensor k = HostTensor::ints({1}, {3});
  auto y = eval(make("TopK", 2), {&x, &k});
  ASSERT_EQ(y.size(), 2u);
  EXPECT_EQ(y[0].dims, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(y[1].i, (std::vector<int64_t>{1, 2, 3, 0, 2, 3}));  // ties: the lower index first; NaN above all
  EXPECT_TRUE(std::isnan(y[0].f[3]));
  EXPECT_EQ(y[0].f[4], 5.0f);
  Node smallest = make("TopK", 2);
  smallest.attrs["largest"].i = 0;
  smallest.attrs["axis"].i = 0;
  const HostTensor one = HostTensor::ints({1}, {1});
  EXPECT_EQ(eval(smallest, {&x, &one})[1].i, (std::vector<int64_t>{0, 1, 0, 0}));  // NaN last when smallest
  const HostTensor big = HostTensor::ints({1}, {5});
  EXPECT_THAT(error_of(make("TopK", 2), {&x, &big}), HasSubstr("K = 5 for an axis of 4"));
}

TEST(HostIndex, HardmaxMarksTheFirstMaximum) {
  const HostTensor x = HostTensor::floats({2, 3}, {1, 4, 4, -kInf, NAN, 2});
  EXPECT_EQ(eval(make("Hardmax"), {&x})[0].f, (std::vector<float>{0, 1, 0, 0, 1, 0}));
}

TEST(HostIndex, CumSumExclusiveReverseAndSpecialValues) {
  const HostTensor x = HostTensor::floats({2, 3}, {1, 2, 3, 4, kInf, 6});
  const HostTensor axis = HostTensor::ints({}, {1});
  EXPECT_EQ(eval(make("CumSum"), {&x, &axis})[0].f, (std::vector<float>{1, 3, 6, 4, kInf, kInf}));
  Node n = make("CumSum");
  n.attrs["exclusive"].i = 1;
  n.attrs["reverse"].i = 1;
  EXPECT_EQ(eval(n, {&x, &axis})[0].f, (std::vector<float>{5, 3, 0, kInf, 6, 0}));
  const HostTensor nan = HostTensor::floats({3}, {1, NAN, 2}), zero = HostTensor::ints({}, {0});
  auto y = eval(make("CumSum"), {&nan, &zero})[0].f;
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_TRUE(std::isnan(y[1]) && std::isnan(y[2]));
  const HostTensor bad = HostTensor::ints({}, {2});
  EXPECT_THAT(error_of(make("CumSum"), {&x, &bad}), HasSubstr("out of range"));
}

TEST(HostIndex, GatherAndScatterElements) {
  const HostTensor x = HostTensor::floats({2, 3}, {1, 2, 3, 4, 5, 6});
  const HostTensor idx = HostTensor::ints({2, 2}, {2, 0, -1, 1});
  Node g = make("GatherElements");
  g.attrs["axis"].i = 1;
  EXPECT_EQ(eval(g, {&x, &idx})[0].f, (std::vector<float>{3, 1, 6, 5}));
  const HostTensor far = HostTensor::ints({1, 1}, {3});
  EXPECT_THAT(error_of(g, {&x, &far}), HasSubstr("index 3 is out of range"));
  const HostTensor up = HostTensor::floats({2, 2}, {10, 20, 30, 40});
  Node s = make("ScatterElements");
  s.attrs["axis"].i = 1;
  EXPECT_EQ(eval(s, {&x, &idx, &up})[0].f, (std::vector<float>{20, 2, 10, 4, 40, 30}));
  s.attrs["reduction"] = {.kind = Attribute::Kind::STRING, .s = "add"};
  EXPECT_EQ(eval(s, {&x, &idx, &up})[0].f, (std::vector<float>{21, 2, 13, 4, 45, 36}));
  s.attrs["reduction"].s = "mean";
  EXPECT_THAT(error_of(s, {&x, &idx, &up}), HasSubstr("reduction 'mean'"));
}

TEST(HostIndex, GatherNDWithAndWithoutBatchDims) {
  const HostTensor x = HostTensor::floats({2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
  const HostTensor idx = HostTensor::ints({2, 2}, {0, 1, 1, 0});
  auto y = eval(make("GatherND"), {&x, &idx})[0];
  EXPECT_EQ(y.dims, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(y.f, (std::vector<float>{2, 3, 4, 5}));
  Node b = make("GatherND");
  b.attrs["batch_dims"].i = 1;
  const HostTensor per = HostTensor::ints({2, 1}, {1, 0});
  EXPECT_EQ(eval(b, {&x, &per})[0].f, (std::vector<float>{2, 3, 4, 5}));
  const HostTensor deep = HostTensor::ints({1, 4}, {0, 0, 0, 0});
  EXPECT_THAT(error_of(make("GatherND"), {&x, &deep}), HasSubstr("indices of shape [1,4]"));
}

TEST(HostIndex, OneHotTrilEyeLike) {
  const HostTensor idx = HostTensor::ints({3}, {0, -1, 7}), depth = HostTensor::floats({}, {3}),
                   vals = HostTensor::floats({2}, {-1, 2});
  EXPECT_EQ(eval(make("OneHot"), {&idx, &depth, &vals})[0].f,
            (std::vector<float>{2, -1, -1, -1, -1, 2, -1, -1, -1}));  // out of range: all off
  const HostTensor m = HostTensor::floats({2, 3}, {1, 2, 3, 4, 5, 6}), k = HostTensor::ints({}, {1});
  EXPECT_EQ(eval(make("Trilu"), {&m})[0].f, (std::vector<float>{1, 2, 3, 0, 5, 6}));
  Node lower = make("Trilu");
  lower.attrs["upper"].i = 0;
  EXPECT_EQ(eval(lower, {&m, &k})[0].f, (std::vector<float>{1, 2, 0, 4, 5, 6}));
  Node eye = make("EyeLike");
  eye.attrs["k"].i = 1;
  EXPECT_EQ(eval(eye, {&m})[0].f, (std::vector<float>{0, 1, 0, 0, 0, 1}));
  const HostTensor v = HostTensor::floats({3}, {1, 2, 3});
  EXPECT_THAT(error_of(make("Trilu"), {&v}), HasSubstr("rank 1"));
}

TEST(HostIndex, UnarySpecialValues) {
  const HostTensor x = HostTensor::floats({6}, {0.0f, -0.0f, kInf, -kInf, NAN, 0.75f});
  auto isnan = eval(make("IsNaN"), {&x})[0];
  EXPECT_EQ(isnan.type, ElemType::INT64);
  EXPECT_EQ(isnan.i, (std::vector<int64_t>{0, 0, 0, 0, 1, 0}));
  Node isinf = make("IsInf");
  isinf.attrs["detect_negative"].i = 0;
  EXPECT_EQ(eval(isinf, {&x})[0].i, (std::vector<int64_t>{0, 0, 1, 0, 0, 0}));
  auto shrink = eval(make("Shrink"), {&x})[0].f;  // lambd 0.5, bias 0
  EXPECT_EQ(shrink[2], kInf);
  EXPECT_TRUE(std::isnan(shrink[4]));
  EXPECT_EQ(shrink[5], 0.75f);
  EXPECT_EQ(shrink[0], 0.0f);
  auto sinh = eval(make("Sinh"), {&x})[0].f;
  EXPECT_TRUE(std::signbit(sinh[1]));  // -0 stays -0
  EXPECT_EQ(sinh[3], -kInf);
  auto acosh = eval(make("Acosh"), {&x})[0].f;
  EXPECT_TRUE(std::isnan(acosh[0]));  // outside the domain
  EXPECT_FLOAT_EQ(eval(make("Atanh"), {&x})[0].f[5], static_cast<float>(std::atanh(0.75)));
}

TEST(HostIndex, MeanVarianceNormalizationOverNHW) {
  const HostTensor x = HostTensor::floats({2, 1, 1, 2}, {1, 3, 5, 7});  // one channel: mean 4, std sqrt 5
  auto y = eval(make("MeanVarianceNormalization"), {&x})[0].f;
  const double s = std::sqrt(5.0);
  for (size_t k = 0; k < 4; ++k) EXPECT_NEAR(y[k], (x.f[k] - 4) / s, 1e-6);
}

TEST(HostIndex, MalformedInputsAreErrorsNamingWhatWasExpected) {
  const HostTensor m = HostTensor::floats({2, 3}, {1, 2, 3, 4, 5, 6}), v = HostTensor::floats({3}, {1, 2, 3});
  const HostTensor two = HostTensor::ints({2}, {1, 2});
  EXPECT_THAT(error_of(make("TopK", 2), {&m, &two}), HasSubstr("K has 2 values"));
  EXPECT_THAT(error_of(make("CumSum"), {&m, &two}), HasSubstr("axis has 2 values"));
  EXPECT_THAT(error_of(make("Trilu"), {&m, &two}), HasSubstr("k has 2 values"));
  EXPECT_THAT(error_of(make("EyeLike"), {&v}), HasSubstr("rank 1, expected 2"));
  const HostTensor idx = HostTensor::ints({2}, {0, 1}), zero = HostTensor::floats({}, {0}),
                   vals = HostTensor::floats({2}, {0, 1});
  EXPECT_THAT(error_of(make("OneHot"), {&idx, &zero, &vals}), HasSubstr("depth 0 is not positive"));
  EXPECT_THAT(error_of(make("OneHot"), {&idx, &two, &vals}), HasSubstr("depth has 2 values"));
  Node b = make("GatherND");
  b.attrs["batch_dims"].i = 1;
  const HostTensor per = HostTensor::ints({3, 1}, {0, 0, 0});
  EXPECT_THAT(error_of(b, {&m, &per}), HasSubstr("batch dim 0 is 3 in the indices and 2 in the data"));
  const HostTensor i2 = HostTensor::ints({2, 2}, {0, 0, 0, 0}), u3 = HostTensor::floats({2, 3}, {0, 0, 0, 0, 0, 0});
  EXPECT_THAT(error_of(make("ScatterElements"), {&m, &i2, &u3}), HasSubstr("must have one shape"));
  Node mvn = make("MeanVarianceNormalization");
  mvn.attrs["axes"] = {.kind = Attribute::Kind::INTS, .ints = {5}};
  EXPECT_THAT(error_of(mvn, {&m}), HasSubstr("axis 5 is out of range"));
}

// A recurrent layer over a random sequence.
struct Rnn {
  std::string op;
  int64_t T = 5, N = 2, I = 3, H = 4;
  HostTensor x, w, r, b;
  Rnn(std::string o, int64_t dirs) : op(std::move(o)) {
    const int64_t g = op == "LSTM" ? 4 : op == "GRU" ? 3 : 1;
    auto fill = [](std::vector<int64_t> d, uint32_t seed) {
      int64_t n = 1;
      for (int64_t v : d) n *= v;
      return HostTensor::floats(d, tessera::testing::random_values(static_cast<size_t>(n), seed, 0.8f));
    };
    x = fill({T, N, I}, 1), w = fill({dirs, g * H, I}, 2), r = fill({dirs, g * H, H}, 3),
    b = fill({dirs, 2 * g * H}, 4);
  }
};

TEST(HostIndex, RecurrentReverseIsForwardOnTheReversedSequence) {
  for (const char* op : {"LSTM", "GRU", "RNN"}) {
    SCOPED_TRACE(op);
    Rnn a(op, 1);
    Node fwd = make(op, 2), rev = make(op, 2);
    rev.attrs["direction"] = {.kind = Attribute::Kind::STRING, .s = "reverse"};
    HostTensor flipped = a.x;
    for (int64_t t = 0; t < a.T; ++t)
      for (int64_t k = 0; k < a.N * a.I; ++k)
        flipped.f[static_cast<size_t>(t * a.N * a.I + k)] = a.x.f[static_cast<size_t>((a.T - 1 - t) * a.N * a.I + k)];
    auto yf = eval(fwd, {&a.x, &a.w, &a.r, &a.b});
    auto yr = eval(rev, {&flipped, &a.w, &a.r, &a.b});
    ASSERT_EQ(yf.size(), std::string(op) == "LSTM" ? 3u : 2u);
    EXPECT_EQ(yf[0].dims, (std::vector<int64_t>{a.T, 1, a.N, a.H}));
    EXPECT_EQ(yf[1].f, yr[1].f);  // the same final state
    for (int64_t t = 0; t < a.T; ++t)
      for (int64_t k = 0; k < a.N * a.H; ++k)
        EXPECT_EQ(yf[0].f[static_cast<size_t>(t * a.N * a.H + k)],
                  yr[0].f[static_cast<size_t>((a.T - 1 - t) * a.N * a.H + k)]);
  }
}

TEST(HostIndex, RecurrentSequenceLengthsStopEachSample) {
  Rnn a("GRU", 2);
  Node n = make("GRU", 2);
  n.attrs["direction"] = {.kind = Attribute::Kind::STRING, .s = "bidirectional"};
  const HostTensor lens = HostTensor::ints({2}, {5, 2});
  auto y = eval(n, {&a.x, &a.w, &a.r, &a.b, &lens});
  ASSERT_EQ(y.size(), 2u);
  // Sample 1 stops after 2 steps: zeros after, and its forward state is its step-1 output.
  for (int64_t t = 2; t < a.T; ++t)
    for (int64_t d = 0; d < 2; ++d)
      for (int64_t j = 0; j < a.H; ++j) EXPECT_EQ(y[0].f[static_cast<size_t>(((t * 2 + d) * 2 + 1) * a.H + j)], 0.0f);
  for (int64_t j = 0; j < a.H; ++j)
    EXPECT_EQ(y[1].f[static_cast<size_t>(1 * a.H + j)], y[0].f[static_cast<size_t>(((1 * 2 + 0) * 2 + 1) * a.H + j)]);
  // The reverse direction starts at its last valid step: its state is its step-0 output.
  for (int64_t j = 0; j < a.H; ++j)
    EXPECT_EQ(y[1].f[static_cast<size_t>((2 + 1) * a.H + j)], y[0].f[static_cast<size_t>((1 * 2 + 1) * a.H + j)]);
  const HostTensor too_long = HostTensor::ints({2}, {6, 1});
  EXPECT_THAT(error_of(n, {&a.x, &a.w, &a.r, &a.b, &too_long}), HasSubstr("sequence length 6"));
  EXPECT_THAT(error_of(n, {&a.x, &a.r, &a.r, &a.b}), HasSubstr("for 2 direction(s)"));
  EXPECT_THAT(error_of(n, {&a.x, &a.w, &a.r, &a.x}), HasSubstr("B is [5,2,3], expected [2,24]"));
  Node bad = make("RNN", 2);
  bad.attrs["activations"] = {.kind = Attribute::Kind::STRINGS, .strings = {"Swish"}};
  Rnn s("RNN", 1);
  EXPECT_THAT(error_of(bad, {&s.x, &s.w, &s.r}), HasSubstr("unknown activation 'Swish'"));
}

// tessera_projected_inputs: X given as every step's W x + Wb gives the
// layer's own results; projections of the wrong width are an error.
TEST(HostIndex, RecurrentProjectedInputsAreTheLayersOwn) {
  for (const char* op : {"LSTM", "GRU", "RNN"}) {
    SCOPED_TRACE(op);
    Rnn a(op, 1);
    const int64_t gh = a.w.dims[1];
    HostTensor p = HostTensor::floats({a.T, a.N, gh}, std::vector<float>(static_cast<size_t>(a.T * a.N * gh)));
    for (int64_t t = 0; t < a.T * a.N; ++t)
      for (int64_t k = 0; k < gh; ++k) {
        double v = a.b.f[static_cast<size_t>(k)];
        for (int64_t i = 0; i < a.I; ++i)
          v += double{a.w.f[static_cast<size_t>(k * a.I + i)]} * a.x.f[static_cast<size_t>(t * a.I + i)];
        p.f[static_cast<size_t>(t * gh + k)] = static_cast<float>(v);
      }
    Node projected = make(op, 2);
    projected.attrs["tessera_projected_inputs"] = {.kind = Attribute::Kind::INT, .i = 1};
    const auto want = eval(make(op, 2), {&a.x, &a.w, &a.r, &a.b});
    const auto got = eval(projected, {&p, &a.w, &a.r, &a.b});
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < want[0].f.size(); ++k) EXPECT_NEAR(got[0].f[k], want[0].f[k], 1e-6) << k;
    EXPECT_THAT(error_of(projected, {&a.x, &a.w, &a.r, &a.b}), HasSubstr("projected inputs [5,2,3]"));
  }
}

TEST(HostIndex, GridSampleIdentityGridAndNonFinitePositions) {
  const HostTensor x = HostTensor::floats({1, 1, 2, 3}, {1, 2, 3, 4, 5, 6});
  // align_corners: the corners of the grid are the centres of the corner pixels.
  std::vector<float> g;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) g.push_back(static_cast<float>(j - 1)), g.push_back(static_cast<float>(2 * i - 1));
  g[2] = NAN, g[5] = kInf;
  const HostTensor grid = HostTensor::floats({1, 2, 3, 2}, g);
  for (const char* mode : {"bilinear", "nearest", "bicubic"}) {
    SCOPED_TRACE(mode);
    Node n = make("GridSample");
    n.attrs["align_corners"].i = 1;
    n.attrs["mode"] = {.kind = Attribute::Kind::STRING, .s = mode};
    auto y = eval(n, {&x, &grid})[0].f;
    EXPECT_EQ(y[0], 1.0f);
    EXPECT_TRUE(std::isnan(y[1]) && std::isnan(y[2]));  // a NaN or infinite position: NaN
    EXPECT_NEAR(y[3], 4.0f, 1e-6);
    EXPECT_NEAR(y[5], 6.0f, 1e-6);
  }
  Node n = make("GridSample");
  n.attrs["padding_mode"] = {.kind = Attribute::Kind::STRING, .s = "wrap"};
  EXPECT_THAT(error_of(n, {&x, &grid}), HasSubstr("padding_mode 'wrap'"));
}

}  // namespace
}  // namespace tessera::graph
