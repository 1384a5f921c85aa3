// ONNX's element-wise activations and variadic ops on the device (no host
// fallback), against the host reference with special values in the input:
// Softplus, Softsign, Celu, Selu, ThresholdedRelu, Floor, Ceil, Round, Sign,
// Clip with any constant bounds, HardSigmoid with any alpha and beta, alone
// and fused into the conv or add before them; Max, Min, Sum and Mean of one,
// two or three operands; a fused node that falls back to the host applying
// what was fused into it; Einsum lowered to MatMuls; ArgMax / ArgMin; TopK,
// GatherElements and LSTM on the host between device ops.
#include <cmath>
#include <limits>

#include "graph_reference.h"
#include "onnx_model_builder.h"
#include "tessera/import/onnx.h"
#include "tessera/runtime/compiled_model.h"
#include "test_util.h"

namespace tessera::runtime {
namespace {

using testing_onnx::ModelBuilder;

// Random values in [-3, 3) with zeros of both signs, denormals, halves and
// large values; with `non_finite`, infinities and NaN too (not for convs:
// a Winograd tile spreads a NaN to outputs a direct conv keeps finite).
graph::HostTensor special_input(const std::vector<int64_t>& dims, uint32_t seed, bool non_finite = true) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<float> v = tessera::testing::random_values(static_cast<size_t>(n), seed, 3.0f);
  const float inf = std::numeric_limits<float>::infinity();
  const float special[] = {0.0f, -0.0f, inf, -inf, NAN, 1e-40f, -1e-40f, 0.5f, -0.5f, 1.5f, 2.5f, -2.5f, 30.0f, -30.0f};
  for (size_t k = 0; k < std::size(special) && k < v.size(); ++k)
    if (non_finite || std::isfinite(special[k])) v[k * 7 % v.size()] = special[k];
  return graph::HostTensor::floats(dims, std::move(v));
}

// Compiles `b`'s model, checks it has no host fallback, runs it on x and
// compares every output with the host reference: NaN where it is NaN, the
// same infinities, else within `rel` relative + 1e-6 absolute.
void expect_device_matches_reference(const ModelBuilder& b, const graph::HostTensor& x, size_t fallbacks = 0,
                                     double rel = 0x1p-21) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(b.bytes()));
  const auto vals = tessera::testing::reference_values(g, x);
  ASSERT_FALSE(vals.empty());
  ASSERT_OK_AND_ASSIGN(auto model, CompiledModel::compile(g, *dev, {}));
  EXPECT_EQ(model->report().fallbacks.size(), fallbacks) << model->report().to_string();
  std::vector<uint32_t> d(x.dims.begin(), x.dims.end());
  ASSERT_OK_AND_ASSIGN(Tensor xt, Tensor::from_vector(x.f, Shape(std::span<const uint32_t>(d)), DataType::FLOAT32));
  ASSERT_OK_AND_ASSIGN(Tensor xd, to_device(xt, *dev));
  const Tensor xs[] = {xd};
  ASSERT_OK_AND_ASSIGN(auto outs, model->run(xs));
  ASSERT_EQ(outs.size(), g.outputs.size());
  for (size_t o = 0; o < outs.size(); ++o) {
    const graph::HostTensor& want = *vals[static_cast<size_t>(g.outputs[o])];
    ASSERT_OK_AND_ASSIGN(std::vector<float> got, outs[o].cpu().value().to_vector());
    ASSERT_EQ(got.size(), want.f.size());
    for (size_t k = 0; k < got.size(); ++k) {
      const float w = want.f[k];
      if (std::isnan(w))
        EXPECT_TRUE(std::isnan(got[k])) << "output " << o << " at " << k << ": " << got[k];
      else if (std::isinf(w))
        EXPECT_EQ(got[k], w) << "output " << o << " at " << k;
      else
        EXPECT_NEAR(got[k], w, rel * std::fabs(w) + 1e-6) << "output " << o << " at " << k;
    }
  }
}

struct UnaryCase {
  std::string op;
  std::vector<std::pair<std::string, float>> attrs;
  std::vector<float> bounds = {};  // Clip (opset 13): min and max as constant inputs; NAN: skipped
};

std::vector<UnaryCase> unary_cases() {
  return {{"Softplus", {}},
          {"Softsign", {}},
          {"Celu", {}},
          {"Celu", {{"alpha", 0.4f}}},
          {"Selu", {}},
          {"Selu", {{"alpha", 1.5f}, {"gamma", 2.0f}}},
          {"ThresholdedRelu", {}},
          {"ThresholdedRelu", {{"alpha", 0.3f}}},
          {"Floor", {}},
          {"Ceil", {}},
          {"Round", {}},
          {"Sign", {}},
          {"HardSigmoid", {}},
          {"HardSigmoid", {{"alpha", -0.3f}, {"beta", 0.4f}}},
          {"HardSigmoid", {{"alpha", 0.0f}, {"beta", 0.7f}}},
          {"Clip", {}, {-1.0f, 1.0f}},
          {"Clip", {}, {NAN, 0.5f}},
          {"Clip", {}, {-0.25f, NAN}}};
}

onnx::NodeProto* add_unary(ModelBuilder& b, const UnaryCase& c, const std::string& in, const std::string& out) {
  std::vector<std::string> inputs = {in};
  if (!c.bounds.empty()) {
    for (size_t k = 0; k < 2; ++k) {
      const std::string name = out + (k ? ":max" : ":min");
      if (std::isnan(c.bounds[k])) {
        inputs.push_back("");
        continue;
      }
      b.initializer(name, {}, {c.bounds[k]});
      inputs.push_back(name);
    }
  }
  onnx::NodeProto* n = b.node(c.op, inputs, {out});
  for (const auto& [k, v] : c.attrs) ModelBuilder::f(n, k, v);
  return n;
}

TEST(OnnxOps, ActivationsRunOnTheDeviceAlone) {
  for (const UnaryCase& c : unary_cases()) {
    SCOPED_TRACE(c.op + (c.attrs.empty() ? "" : " " + c.attrs[0].first));
    ModelBuilder b(13);
    b.input("x", {2, 5, 4, 6});
    add_unary(b, c, "x", "y");
    b.output("y");
    expect_device_matches_reference(b, special_input({2, 5, 4, 6}, 3));
  }
}

// Fused into a conv (HardSigmoid's alpha and beta folded into its weights)
// and into an add (the activation with its parameters and affine in the add's
// pass).
TEST(OnnxOps, ActivationsFuseIntoConvAndAdd) {
  for (const UnaryCase& c : unary_cases()) {
    SCOPED_TRACE(c.op + (c.attrs.empty() ? "" : " " + c.attrs[0].first));
    ModelBuilder b(13);
    b.input("x", {1, 3, 8, 8});
    b.random_initializer("w", {6, 3, 3, 3}, 0.5f, 4);
    b.random_initializer("bias", {6}, 0.5f, 5);
    b.random_initializer("shift", {1, 3, 1, 1}, 1.0f, 6);
    auto* conv = b.node("Conv", {"x", "w", "bias"}, {"c"});
    ModelBuilder::ints(conv, "pads", {1, 1, 1, 1});
    add_unary(b, c, "c", "y");
    b.node("Add", {"x", "shift"}, {"s"});
    add_unary(b, c, "s", "z");
    b.output("y");
    b.output("z");
    expect_device_matches_reference(b, special_input({1, 3, 8, 8}, 8, false), 0, 1e-5);  // (the conv's rounding)
  }
}

// Casts between float types: to FLOAT16 and BFLOAT16 round (float16 models
// cast around their ops), to FLOAT and DOUBLE change nothing; alone, after a
// conv (fused into it) and chained back to FLOAT, with values past float16's
// range, float16 denormals, NaN and infinities.
TEST(OnnxOps, FloatCastsRunOnTheDevice) {
  for (int to : {10, 16, 11, 1}) {
    SCOPED_TRACE(to);
    ModelBuilder chain(13);
    chain.input("x", {1, 3, 8, 8});
    ModelBuilder::i(chain.node("Cast", {"x"}, {"h"}), "to", to);
    ModelBuilder::i(chain.node("Cast", {"h"}, {"y"}), "to", onnx::TensorProto::FLOAT);
    chain.output("h");
    chain.output("y");
    graph::HostTensor x = special_input({1, 3, 8, 8}, 9);
    const float edges[] = {70000.0f, -65520.0f, 65519.0f, 3e-6f, -1e-7f, 1.00048828125f, 3.0e38f, 6.1e-5f};
    for (size_t k = 0; k < std::size(edges); ++k) x.f[x.f.size() - 1 - k] = edges[k];
    expect_device_matches_reference(chain, x, 0, 0);

    ModelBuilder fused(13);
    fused.input("x", {1, 3, 8, 8});
    fused.random_initializer("w", {4, 3, 3, 3}, 0.5f, 4);
    ModelBuilder::ints(fused.node("Conv", {"x", "w"}, {"c"}), "pads", {1, 1, 1, 1});
    ModelBuilder::i(fused.node("Cast", {"c"}, {"y"}), "to", to);
    fused.output("y");
    // (the conv's rounding may move a value to the next float16 / bfloat16)
    expect_device_matches_reference(fused, special_input({1, 3, 8, 8}, 10, false), 0, to == 16 ? 0x1p-7 : 0x1p-10);
  }
}

// 3-D convs (video models) as 2-D convs over frames: temporal padding,
// stride and dilation, groups, a bias, spatial padding and stride, at batch 1
// (the frames sliced as the batch) and 2 (sliced per image), then a 5-D
// global average pool: all on the device.
TEST(OnnxOps, Conv3dRunsOnTheDeviceAsConv2dOverFrames) {
  struct Case {
    int64_t batch, kt, st, dt, pt, group;
  };
  for (const Case c :
       {Case{1, 3, 1, 1, 1, 1}, Case{2, 3, 2, 1, 1, 2}, Case{1, 2, 1, 2, 0, 1}, Case{2, 1, 1, 1, 0, 1}}) {
    SCOPED_TRACE(::testing::Message() << "batch " << c.batch << " kt " << c.kt << " st " << c.st << " dt " << c.dt
                                      << " pt " << c.pt << " group " << c.group);
    ModelBuilder b(13);
    b.input("x", {c.batch, 4, 7, 6, 5});
    b.random_initializer("w", {6, 4 / c.group, c.kt, 3, 3}, 0.4f, 11);
    b.random_initializer("bias", {6}, 0.2f, 12);
    auto* conv = b.node("Conv", {"x", "w", "bias"}, {"c"});
    ModelBuilder::ints(conv, "pads", {c.pt, 1, 0, c.pt, 1, 1});
    ModelBuilder::ints(conv, "strides", {c.st, 1, 2});
    ModelBuilder::ints(conv, "dilations", {c.dt, 1, 1});
    ModelBuilder::i(conv, "group", c.group);
    b.node("Relu", {"c"}, {"y"});
    b.node("GlobalAveragePool", {"y"}, {"pooled"});
    b.output("y");
    b.output("pooled");
    expect_device_matches_reference(b, special_input({c.batch, 4, 7, 6, 5}, 13, false), 0, 1e-5);
  }
}

// Max and Min keep a NaN from either operand, the constant's included; Sum
// and Mean add left to right (Mean then divides by the count).
TEST(OnnxOps, VariadicOpsRunOnTheDevice) {
  for (const char* op : {"Max", "Min", "Sum", "Mean"})
    for (size_t arity : {1u, 2u, 3u}) {
      SCOPED_TRACE(fmt::format("{} of {}", op, arity));
      ModelBuilder b(13);
      b.input("x", {2, 4, 3, 5});
      b.initializer("c", {1, 4, 1, 1}, {0.25f, NAN, -1.0f, 2.0f});
      b.node("Neg", {"x"}, {"nx"});
      std::vector<std::string> ins = {"x", "c", "nx"};
      ins.resize(arity);
      b.node(op, ins, {"y"});
      b.output("y");
      expect_device_matches_reference(b, special_input({2, 4, 3, 5}, 11));
    }
}

// LogSoftmax over the last axis and over the channels of a 4-D value.
TEST(OnnxOps, LogSoftmaxRunsOnTheDevice) {
  for (int64_t axis : {-1, 1}) {
    SCOPED_TRACE(axis);
    ModelBuilder b(13);
    b.input("x", {2, 6, 3, 4});
    ModelBuilder::i(b.node("LogSoftmax", {"x"}, {"y"}), "axis", axis);
    b.output("y");
    expect_device_matches_reference(b, special_input({2, 6, 3, 4}, 15), 0, 1e-5);
  }
}

// LRN (AlexNet's and GoogLeNet's) after a conv: x * x, a banded 1x1 conv
// with a pow activation, a mul; even and odd windows.
TEST(OnnxOps, LrnRunsOnTheDevice) {
  for (int64_t size : {5, 4, 1}) {
    SCOPED_TRACE(size);
    ModelBuilder b(13);
    b.input("x", {2, 3, 9, 9});
    b.random_initializer("w", {7, 3, 3, 3}, 1.0f, 16);
    b.node("Conv", {"x", "w"}, {"c"});
    auto* lrn = b.node("LRN", {"c"}, {"y"});
    ModelBuilder::i(lrn, "size", size);
    ModelBuilder::f(lrn, "alpha", 0.01f);
    ModelBuilder::f(lrn, "beta", 0.75f);
    ModelBuilder::f(lrn, "bias", 2.0f);
    b.output("y");
    expect_device_matches_reference(b, special_input({2, 3, 9, 9}, 17, false), 0, 1e-5);
  }
}

// Comparisons of float values on the device, their booleans 1 and 0 in the
// value's float slots: a detector's score threshold (Greater against a
// constant), the other four between two run-time values, each Cast to
// float (the slot as it is) and used in arithmetic, NaN comparing false.
TEST(OnnxOps, ComparisonsAndTheirCastsRunOnTheDevice) {
  for (const char* op : {"Greater", "GreaterOrEqual", "Less", "LessOrEqual", "Equal"}) {
    SCOPED_TRACE(op);
    ModelBuilder b(13);
    b.input("x", {2, 3, 5, 7});
    b.initializer("t", {1}, {0.5f});
    b.node("Relu", {"x"}, {"r"});
    b.node("Floor", {"x"}, {"f"});  // (equal to r in places: Equal and the *OrEqual hold somewhere)
    b.node(op, {"r", "f"}, {"c"});
    auto* cast = b.node("Cast", {"c"}, {"cf"});
    ModelBuilder::i(cast, "to", 1);
    b.node("Mul", {"cf", "x"}, {"masked"});
    b.node("Greater", {"x", "t"}, {"above"});
    auto* cast2 = b.node("Cast", {"above"}, {"af"});
    ModelBuilder::i(cast2, "to", 1);
    b.node("Add", {"masked", "af"}, {"y"});
    b.output("y");
    expect_device_matches_reference(b, special_input({2, 3, 5, 7}, 23), 0, 0);
  }
}

// Where on the device: a condition from a comparison and a constant boolean
// mask that broadcasts (an attention mask: Where(mask, x, -inf)), constant
// scalar operands, rank 4 (images, NHWC) and rank 3 (plain); NaN, infinities
// and -0.0 pass through as chosen.
TEST(OnnxOps, WhereRunsOnTheDevice) {
  ModelBuilder b(13);
  b.input("x", {2, 3, 5, 7});
  b.initializer("t", {1}, {0.5f});
  b.initializer("neg", {1}, {-1.5f});
  b.initializer("ninf", {1}, {-std::numeric_limits<float>::infinity()});
  std::vector<float> mask(35);
  for (size_t i = 0; i < mask.size(); ++i) mask[i] = i % 3 ? 1.0f : 0.0f;
  b.initializer("maskf", {1, 1, 5, 7}, mask);
  b.int_initializer("s3", {6, 5, 7});
  b.node("Greater", {"x", "t"}, {"gt"});
  b.node("Where", {"gt", "x", "neg"}, {"w1"});
  auto* cast = b.node("Cast", {"maskf"}, {"mask"});
  ModelBuilder::i(cast, "to", 9);  // bool: folded into a constant
  b.node("Where", {"mask", "w1", "ninf"}, {"y1"});
  b.node("Floor", {"x"}, {"f"});
  b.node("Where", {"gt", "f", "x"}, {"y2"});
  b.node("Reshape", {"x", "s3"}, {"x3"});
  b.node("Less", {"x3", "t"}, {"gt3"});
  b.node("Where", {"gt3", "neg", "x3"}, {"y3"});
  b.output("y1"), b.output("y2"), b.output("y3");
  expect_device_matches_reference(b, special_input({2, 3, 5, 7}, 31), 0, 0);
}

// A transformer's MLP over tokens: its Linears run as 1x1 convs over an
// (N, 1, L, C) image (graph::linear_to_conv), bias and ReLU fused, with the
// residual; the values the host computes.
TEST(OnnxOps, TokenLinearsRunAsConvs) {
  ModelBuilder b(13);
  b.input("x", {2, 7, 16});
  std::vector<float> w1(16 * 24), w2(24 * 16), b1(24), b2(16);
  for (size_t i = 0; i < w1.size(); ++i) w1[i] = 0.2f * std::sin(0.37f * static_cast<float>(i));
  for (size_t i = 0; i < w2.size(); ++i) w2[i] = 0.2f * std::cos(0.23f * static_cast<float>(i));
  for (size_t i = 0; i < b1.size(); ++i) b1[i] = 0.1f * static_cast<float>(i % 5) - 0.2f;
  for (size_t i = 0; i < b2.size(); ++i) b2[i] = 0.05f * static_cast<float>(i % 3);
  b.initializer("w1", {16, 24}, w1), b.initializer("w2", {24, 16}, w2);
  b.initializer("b1", {24}, b1), b.initializer("b2", {16}, b2);
  b.node("MatMul", {"x", "w1"}, {"m1"});
  b.node("Add", {"m1", "b1"}, {"a1"});
  b.node("Relu", {"a1"}, {"r"});
  b.node("MatMul", {"r", "w2"}, {"m2"});
  b.node("Add", {"m2", "b2"}, {"a2"});
  b.node("Add", {"a2", "x"}, {"y"});
  b.output("y");
  expect_device_matches_reference(b, special_input({2, 7, 16}, 37), 0, 1e-5);
}

// Boolean logic on comparisons' results on the device: And, Or, Xor, Not
// (ONNX's GreaterOrEqual written out as Or(Greater, Equal), as its
// conformance tests' expanded forms are), the result Cast to float.
TEST(OnnxOps, BooleanLogicRunsOnTheDevice) {
  ModelBuilder b(13);
  b.input("x", {2, 3, 5, 7});
  b.initializer("t", {1}, {0.5f});
  b.node("Floor", {"x"}, {"f"});
  b.node("Greater", {"x", "t"}, {"gt"});
  b.node("Equal", {"x", "f"}, {"eq"});
  b.node("Less", {"f", "t"}, {"lt"});
  b.node("Or", {"gt", "eq"}, {"ge"});
  b.node("And", {"ge", "lt"}, {"both"});
  b.node("Xor", {"both", "gt"}, {"x1"});
  b.node("Not", {"x1"}, {"n"});
  auto* cast = b.node("Cast", {"n"}, {"y"});
  ModelBuilder::i(cast, "to", 1);
  b.output("y");
  expect_device_matches_reference(b, special_input({2, 3, 5, 7}, 29), 0, 0);
}

// DenseNet's layers: each Concat read by a BatchNormalization and its ReLU
// (then a conv), which the concat applies as it copies
// (graph::fuse_concat_affine); one without an activation; a concat of more
// inputs than one launch reads (70); NaN, infinities and denormals kept.
TEST(OnnxOps, BatchNormAfterAConcatRunsInTheConcat) {
  for (int inputs : {2, 3, 70}) {
    SCOPED_TRACE(inputs);
    ModelBuilder b(13);
    b.input("x", {2, 3, 7, 9});
    std::vector<std::string> parts = {"x"};
    for (int k = 1; k < inputs; ++k) {
      const std::string w = fmt::format("w{}", k), y = fmt::format("y{}", k);
      b.random_initializer(w, {k % 3 + 1, 3, 1, 1}, 1.0f, static_cast<uint32_t>(20 + k));
      b.node("Conv", {"x", w}, {y});
      parts.push_back(y);
    }
    int64_t c = 3;
    for (int k = 1; k < inputs; ++k) c += k % 3 + 1;
    auto* cat = b.node("Concat", parts, {"cat"});
    ModelBuilder::i(cat, "axis", 1);
    std::vector<float> var(static_cast<size_t>(c));
    for (size_t k = 0; k < var.size(); ++k) var[k] = 0.25f + static_cast<float>(k % 5);
    b.random_initializer("scale", {c}, 1.0f, 5);
    b.random_initializer("bias", {c}, 1.0f, 6);
    b.random_initializer("mean", {c}, 1.0f, 7);
    b.initializer("var", {c}, var);
    b.node("BatchNormalization", {"cat", "scale", "bias", "mean", "var"}, {"bn"});
    const bool relu = inputs != 3;
    if (relu) b.node("Relu", {"bn"}, {"act"});
    b.random_initializer("wo", {4, c, 1, 1}, 0.5f, 8);
    b.node("Conv", {relu ? "act" : "bn", "wo"}, {"out"});
    b.output("out");
    expect_device_matches_reference(b, special_input({2, 3, 7, 9}, 19), 0, 1e-5);
  }
}

// What Swin-T's export needs: a roll (Slices to INT64_MAX, "to the end",
// and a Concat), a mask built by ScatterND on constants (folded), Dropout
// with ratio 0 in training mode and Identity (removed), and Gathers of one
// index or a run of them (slices on the device).
TEST(OnnxOps, RollScatterDropoutAndGatherRunOnTheDevice) {
  ModelBuilder b(13);
  b.input("x", {3, 2, 6, 5});
  b.int_initializer("s0", {2}), b.int_initializer("e0", {INT64_MAX}), b.int_initializer("ax", {2});
  b.int_initializer("s1", {0}), b.int_initializer("e1", {2});
  b.node("Slice", {"x", "s0", "e0", "ax"}, {"tail"});
  b.node("Slice", {"x", "s1", "e1", "ax"}, {"head"});
  ModelBuilder::i(b.node("Concat", {"tail", "head"}, {"rolled"}), "axis", 2);
  b.initializer("zeros", {6, 5}, std::vector<float>(30, 0.0f));
  onnx::TensorProto* idx = b.int_initializer("rows", {1, 4});
  idx->clear_dims(), idx->add_dims(2), idx->add_dims(1);
  b.initializer("updates", {2, 5}, {1, 2, 3, 4, 5, -1, -2, -3, -4, -5});
  b.node("ScatterND", {"zeros", "rows", "updates"}, {"mask"});
  b.node("Add", {"rolled", "mask"}, {"masked"});
  b.initializer("ratio", {}, {0.0f});
  onnx::TensorProto* mode = b.graph().add_initializer();
  mode->set_name("training"), mode->set_data_type(onnx::TensorProto::BOOL), mode->add_int32_data(1);
  b.node("Dropout", {"masked", "ratio", "training"}, {"dropped", "dropmask"});
  b.node("Identity", {"dropped"}, {"same"});
  b.int_initializer("one", {1}), b.int_initializer("last", {-1}), b.int_initializer("run", {1, 2});
  onnx::TensorProto* scalar = b.int_initializer("first", {0});
  scalar->clear_dims();
  b.node("Gather", {"same", "first"}, {"g0"});                             // (2, 6, 5)
  ModelBuilder::i(b.node("Gather", {"same", "last"}, {"g1"}), "axis", 3);  // (3, 2, 6, 1)
  ModelBuilder::i(b.node("Gather", {"same", "run"}, {"g2"}), "axis", 2);   // (3, 2, 2, 5)
  b.output("g0"), b.output("g1"), b.output("g2");
  expect_device_matches_reference(b, special_input({3, 2, 6, 5}, 18));
}

// GroupNorm as PyTorch writes it (Reshape, InstanceNormalization of scale 1
// and bias 0, Reshape, Mul by gamma, Add of beta) runs as one group norm on
// the device, with and without the affine.
TEST(OnnxOps, GroupNormAsExportedRunsOnTheDevice) {
  for (bool affine : {true, false}) {
    SCOPED_TRACE(affine);
    ModelBuilder b(13);
    b.input("x", {2, 8, 5, 6});
    b.int_initializer("grouped", {2, 4, -1});
    b.int_initializer("back", {2, 8, 5, 6});
    b.initializer("ones", {4}, {1, 1, 1, 1});
    b.initializer("zeros", {4}, {0, 0, 0, 0});
    b.random_initializer("gamma", {8, 1, 1}, 1.0f, 19);
    b.random_initializer("beta", {8, 1, 1}, 1.0f, 20);
    b.node("Reshape", {"x", "grouped"}, {"g"});
    ModelBuilder::f(b.node("InstanceNormalization", {"g", "ones", "zeros"}, {"n"}), "epsilon", 1e-5f);
    b.node("Reshape", {"n", "back"}, affine ? std::vector<std::string>{"r"} : std::vector<std::string>{"y"});
    if (affine) {
      b.node("Mul", {"r", "gamma"}, {"m"});
      b.node("Add", {"m", "beta"}, {"y"});
    }
    b.output("y");
    expect_device_matches_reference(b, special_input({2, 8, 5, 6}, 21, false), 0, 1e-5);
  }
}

// Conv1d (grouped, strided, padded, with a bias; ECA-Net's channel
// attention) runs as a 2-D conv over (N, C, 1, L).
TEST(OnnxOps, Conv1dRunsOnTheDevice) {
  ModelBuilder b(13);
  b.input("x", {2, 6, 20});
  b.random_initializer("w", {8, 3, 3}, 0.5f, 22);
  b.random_initializer("bias", {8}, 0.5f, 23);
  auto* conv = b.node("Conv", {"x", "w", "bias"}, {"c"});
  ModelBuilder::ints(conv, "pads", {1, 1});
  ModelBuilder::ints(conv, "strides", {2});
  ModelBuilder::i(conv, "group", 2);
  b.node("Sigmoid", {"c"}, {"y"});
  b.output("y");
  expect_device_matches_reference(b, special_input({2, 6, 20}, 24, false), 0, 1e-5);
}

// Reflect and edge Pads (a conv net's padding_mode='reflect', a generator's
// ReflectionPad2d(3)) run as slices and concats on the device, NHWC kept
// between convs and on a plain 3-D value; a reflect pad as wide as its dim
// (which ONNX leaves undefined) stays on the host.
TEST(OnnxOps, ReflectAndEdgePadsRunOnTheDevice) {
  for (const char* mode : {"reflect", "edge"}) {
    SCOPED_TRACE(mode);
    ModelBuilder b(13);
    b.input("x", {2, 3, 7, 6});
    b.random_initializer("w", {4, 3, 3, 3}, 0.5f, 25);
    b.node("Conv", {"x", "w"}, {"c"});  // (2, 4, 5, 4)
    b.int_initializer("pads", {0, 0, 3, 1, 0, 0, 1, 3});
    ModelBuilder::s(b.node("Pad", {"c", "pads"}, {"p"}), "mode", mode);
    b.random_initializer("w2", {5, 4, 3, 3}, 0.5f, 26);
    b.node("Conv", {"p", "w2"}, {"y"});
    b.output("y");
    expect_device_matches_reference(b, special_input({2, 3, 7, 6}, 27, false), 0, 1e-5);

    ModelBuilder b3(13);
    b3.input("x", {2, 5, 7});
    b3.int_initializer("pads", {0, 1, 2, 0, 2, 1});
    ModelBuilder::s(b3.node("Pad", {"x", "pads"}, {"y"}), "mode", mode);
    b3.output("y");
    expect_device_matches_reference(b3, special_input({2, 5, 7}, 28));
  }
  ModelBuilder b(13);
  b.input("x", {1, 2, 3, 3});
  b.int_initializer("pads", {0, 0, 3, 0, 0, 0, 0, 0});
  ModelBuilder::s(b.node("Pad", {"x", "pads"}, {"y"}), "mode", "reflect");
  b.output("y");
  ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(b.bytes()));
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  ASSERT_OK_AND_ASSIGN(auto model, CompiledModel::compile(g, *dev, {}));
  EXPECT_EQ(model->report().fallbacks.size(), 1u) << model->report().to_string();
}

// What the device paths leave to the host or refuse: a Gather of indices
// that are not one consecutive run runs on the host (and still matches); a
// ScatterND whose index is out of range is an error naming it.
TEST(OnnxOps, GatherOutOfOrderFallsBackAndScatterOutOfRangeIsAnError) {
  {
    ModelBuilder b(13);
    b.input("x", {2, 5, 3});
    b.int_initializer("idx", {3, 0});
    ModelBuilder::i(b.node("Gather", {"x", "idx"}, {"y"}), "axis", 1);
    b.output("y");
    expect_device_matches_reference(b, special_input({2, 5, 3}, 29), 1);
  }
  ModelBuilder b(13);
  b.input("x", {4, 3});
  b.initializer("zeros", {4, 3}, std::vector<float>(12, 0.0f));
  onnx::TensorProto* idx = b.int_initializer("rows", {7});
  idx->clear_dims(), idx->add_dims(1), idx->add_dims(1);
  b.initializer("updates", {1, 3}, {1, 2, 3});
  b.node("ScatterND", {"zeros", "rows", "updates"}, {"mask"});
  b.node("Add", {"x", "mask"}, {"y"});
  b.output("y");
  EXPECT_ERROR(importer::import_onnx_bytes(b.bytes()), StatusCode::kInvalidArgument, "index 7 is out of range");
}

// A Gemm with a full 2-D C and a fused Relu: the Relu in the add of C.
TEST(OnnxOps, GemmWithFullCAndAnActivationRunsOnTheDevice) {
  ModelBuilder b(13);
  b.input("x", {3, 8});
  b.random_initializer("w", {8, 4}, 1.0f, 12);
  b.random_initializer("c", {3, 4}, 1.0f, 13);
  b.node("Gemm", {"x", "w", "c"}, {"g"});
  b.node("Relu", {"g"}, {"y"});
  b.output("y");
  expect_device_matches_reference(b, special_input({3, 8}, 14), 0);
}

// A ConvTranspose with asymmetric pads and a fused Relu runs on the host
// (lower_conv_transpose's fallback); the host applies the fused activation
// as the device would (it ran without it before).
TEST(OnnxOps, HostFallbackAppliesTheFusedActivation) {
  ModelBuilder b(13);
  b.input("x", {1, 3, 5, 5});
  b.random_initializer("w", {3, 4, 3, 3}, 1.0f, 12);
  auto* ct = b.node("ConvTranspose", {"x", "w"}, {"c"});
  ModelBuilder::ints(ct, "strides", {2, 2});
  ModelBuilder::ints(ct, "pads", {0, 1, 1, 0});
  b.node("Relu", {"c"}, {"y"});
  b.output("y");
  expect_device_matches_reference(b, special_input({1, 3, 5, 5}, 14, false), 1, 1e-5);
}

// Attention written with einsum runs on the device: lower_einsum's
// transposes, reshapes and MatMuls (no host fallback).
TEST(OnnxOps, EinsumAttentionRunsOnTheDevice) {
  ModelBuilder b(13);
  b.input("x", {2, 3, 5, 4});
  ModelBuilder::s(b.node("Einsum", {"x", "x"}, {"s"}), "equation", "bhqd,bhkd->bhqk");
  b.node("Softmax", {"s"}, {"a"});
  ModelBuilder::s(b.node("Einsum", {"a", "x"}, {"y"}), "equation", "bhqk,bhkd->bhqd");
  b.output("y");
  expect_device_matches_reference(b, special_input({2, 3, 5, 4}, 31, false), 0, 1e-5);
}

// A detection head's top-k and gather run on the host between device ops;
// their integer indices travel through the device as floats, exactly.
TEST(OnnxOps, TopKAndGatherElementsRunOnTheHostBetweenDeviceOps) {
  ModelBuilder b(13);
  b.input("x", {2, 24, 5});
  b.int_initializer("k", {6});
  auto* topk = b.node("TopK", {"x", "k"}, {"v", "i"});
  ModelBuilder::i(topk, "axis", 1);
  ModelBuilder::i(b.node("GatherElements", {"x", "i"}, {"g"}), "axis", 1);
  b.node("Sigmoid", {"g"}, {"y"});
  b.output("v");
  b.output("y");
  expect_device_matches_reference(b, special_input({2, 24, 5}, 32), 2);
}

// ArgMax / ArgMin on the device: over a conv's NHWC channels (a
// segmentation head's per-pixel class; no permute), over the last axis and
// over a middle one (a permute), keepdims either way, both tie rules, on
// rounded values (ties) with NaN and infinities: the host reference's
// indices exactly, and no host fallback.
TEST(OnnxOps, ArgMaxAndArgMinRunOnTheDevice) {
  ModelBuilder b(13);
  b.input("x", {2, 5, 6, 7});
  b.random_initializer("w", {9, 5, 3, 3}, 0.5f, 4);
  ModelBuilder::ints(b.node("Conv", {"x", "w"}, {"c"}), "pads", {1, 1, 1, 1});
  b.node("Round", {"x"}, {"r"});
  struct Case {
    std::string op, in;
    int64_t axis, keepdims, last;
  };
  const Case cases[] = {{"ArgMax", "c", 1, 0, 0}, {"ArgMin", "c", 1, 1, 1}, {"ArgMax", "r", -1, 1, 0},
                        {"ArgMin", "r", -1, 0, 1}, {"ArgMax", "r", 2, 0, 1}, {"ArgMin", "r", 0, 1, 0}};
  std::vector<std::string> outs;
  for (const Case& c : cases) {
    const std::string y = fmt::format("{}_{}_{}_{}_{}", c.op, c.in, c.axis, c.keepdims, c.last);
    auto* n = b.node(c.op, {c.in}, {y});
    ModelBuilder::i(n, "axis", c.axis);
    ModelBuilder::i(n, "keepdims", c.keepdims);
    ModelBuilder::i(n, "select_last_index", c.last);
    b.output(y);
    outs.push_back(y);
  }
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(b.bytes()));
  // (NaN and infinities reach the rounded values only: a conv of them is NaN throughout)
  graph::HostTensor x = special_input({2, 5, 6, 7}, 41, false);
  for (size_t k = 3; k < x.f.size(); k += 37) x.f[k] = k % 2 ? NAN : -std::numeric_limits<float>::infinity();
  const auto vals = tessera::testing::reference_values(g, x);
  ASSERT_FALSE(vals.empty());
  ASSERT_OK_AND_ASSIGN(auto model, CompiledModel::compile(g, *dev, {}));
  EXPECT_EQ(model->report().fallbacks.size(), 0u) << model->report().to_string();
  ASSERT_OK_AND_ASSIGN(Tensor xt, Tensor::from_vector(x.f, Shape{2, 5, 6, 7}, DataType::FLOAT32));
  ASSERT_OK_AND_ASSIGN(Tensor xd, to_device(xt, *dev));
  const Tensor xs[] = {xd};
  ASSERT_OK_AND_ASSIGN(auto got, model->run(xs));
  ASSERT_EQ(got.size(), outs.size());
  for (size_t o = 0; o < got.size(); ++o) {
    SCOPED_TRACE(outs[o]);
    const graph::HostTensor& want = *vals[static_cast<size_t>(g.outputs[o])];
    ASSERT_EQ(want.type, graph::ElemType::INT64);
    ASSERT_OK_AND_ASSIGN(std::vector<float> v, got[o].cpu().value().to_vector());
    std::vector<float> w(want.i.begin(), want.i.end());
    EXPECT_EQ(v, w);
    std::vector<int64_t> want_dims = want.dims;
    std::vector<int64_t> got_dims;
    for (int k = 0; k < got[o].shape().rank(); ++k) got_dims.push_back(got[o].shape()[k]);
    EXPECT_EQ(got_dims, want_dims);
  }
}

// An LSTM with its activations named (a STRINGS attribute) imports and runs
// on the host, every output.
TEST(OnnxOps, LstmWithNamedActivationsRunsOnTheHost) {
  ModelBuilder b(13);
  b.input("x", {4, 2, 3});
  b.random_initializer("w", {2, 16, 3}, 0.8f, 33);
  b.random_initializer("r", {2, 16, 4}, 0.8f, 34);
  b.random_initializer("bias", {2, 32}, 0.8f, 35);
  auto* lstm = b.node("LSTM", {"x", "w", "r", "bias"}, {"y", "h", "c"});
  ModelBuilder::i(lstm, "hidden_size", 4);
  ModelBuilder::s(lstm, "direction", "bidirectional");
  ModelBuilder::strings(lstm, "activations", {"Sigmoid", "Tanh", "Tanh", "HardSigmoid", "Tanh", "Softsign"});
  b.output("y");
  b.output("h");
  b.output("c");
  expect_device_matches_reference(b, special_input({4, 2, 3}, 36), 1);
}

// The input products of a recurrent layer on the device
// (project_recurrent_inputs), the recurrence on the host: a GRU both ways
// with linear_before_reset, a reverse RNN with clipping, and an LSTM with
// initial states, peepholes and sequence lengths, against the reference's
// whole layer.
TEST(OnnxOps, RecurrentInputProductsRunOnTheDevice) {
  for (const std::string op : {"GRU", "RNN", "LSTM"}) {
    SCOPED_TRACE(op);
    const int64_t gates = op == "LSTM" ? 4 : op == "GRU" ? 3 : 1, dirs = op == "RNN" ? 1 : 2, H = 5;
    ModelBuilder b(13);
    b.input("x", {6, 2, 7});
    b.random_initializer("w", {dirs, gates * H, 7}, 0.6f, 40);
    b.random_initializer("r", {dirs, gates * H, H}, 0.6f, 41);
    b.random_initializer("bias", {dirs, 2 * gates * H}, 0.4f, 42);
    std::vector<std::string> ins{"x", "w", "r", "bias"};
    if (op == "LSTM") {
      b.int_initializer("lens", {6, 4});
      b.random_initializer("h0", {dirs, 2, H}, 0.5f, 43);
      b.random_initializer("c0", {dirs, 2, H}, 0.5f, 44);
      b.random_initializer("p", {dirs, 3 * H}, 0.5f, 45);
      ins.insert(ins.end(), {"lens", "h0", "c0", "p"});
    }
    auto* n = b.node(op, ins, {"y", "h"});
    ModelBuilder::i(n, "hidden_size", H);
    ModelBuilder::s(n, "direction", op == "RNN" ? "reverse" : "bidirectional");
    if (op == "GRU") ModelBuilder::i(n, "linear_before_reset", 1);
    if (op == "RNN") ModelBuilder::f(n, "clip", 1.5f);
    b.output("y");
    b.output("h");
    ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
    ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(b.bytes()));
    ASSERT_OK_AND_ASSIGN(auto model, CompiledModel::compile(g, *dev, {}));
    int projected = -1;
    for (const auto& p : model->report().passes)
      if (p.pass == "project_recurrent_inputs") projected = p.rewrites;
    EXPECT_EQ(projected, 1);
    // (the device's float32 products against the reference's double ones)
    expect_device_matches_reference(b, special_input({6, 2, 7}, 46, false), 1, 1e-5);
  }
}

}  // namespace
}  // namespace tessera::runtime
