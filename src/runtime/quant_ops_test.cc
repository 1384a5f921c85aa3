// Quantized models (graph::lower_quantized): QDQ models (QuantizeLinear /
// DequantizeLinear around float ops, per-tensor and per-channel, uint8 and
// int8), dynamically quantized ones (DynamicQuantizeLinear -> ConvInteger /
// MatMulInteger -> Cast -> Mul by the scales, as ONNX Runtime's quantizer
// writes them) and QOperator ones (QLinearConv, QLinearMatMul, MaxPool on
// the integers) run on the device with no host fallback and match the host
// reference kernels; the host kernels' rounding, saturation, per-axis
// scales, special values and errors.
#include <cmath>
#include <limits>

#include "graph_reference.h"
#include "onnx_model_builder.h"
#include "tessera/graph/host_eval.h"
#include "tessera/graph/passes.h"
#include "tessera/import/onnx.h"
#include "tessera/runtime/compiled_model.h"
#include "test_util.h"

namespace tessera::runtime {
namespace {

using graph::HostTensor;
using testing_onnx::ModelBuilder;
constexpr int kU8 = onnx::TensorProto::UINT8, kI8 = onnx::TensorProto::INT8, kI32 = onnx::TensorProto::INT32;

HostTensor input(const std::vector<int64_t>& dims, uint32_t seed, float scale = 2.0f) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return HostTensor::floats(dims, tessera::testing::random_values(static_cast<size_t>(n), seed, scale));
}

std::vector<int32_t> random_ints(size_t n, int lo, int hi, uint32_t seed) {
  std::vector<int32_t> v(n);
  uint32_t s = seed * 2654435761u + 1;
  for (int32_t& x : v)
    s = s * 1664525u + 1013904223u, x = lo + static_cast<int32_t>((s >> 8) % static_cast<uint32_t>(hi - lo + 1));
  return v;
}

StatusOr<std::vector<float>> run_on_device(const graph::Graph& g, const HostTensor& x, size_t output,
                                           size_t* fallbacks) {
  TS_ASSIGN_OR_RETURN(auto dev, open_device({}));
  TS_ASSIGN_OR_RETURN(auto model, CompiledModel::compile(g, *dev, {}));
  *fallbacks = model->report().fallbacks.size();
  std::vector<uint32_t> d(x.dims.begin(), x.dims.end());
  TS_ASSIGN_OR_RETURN(Tensor xt, Tensor::from_vector(x.f, Shape(std::span<const uint32_t>(d)), DataType::FLOAT32));
  TS_ASSIGN_OR_RETURN(Tensor xd, to_device(xt, *dev));
  const Tensor xs[] = {xd};
  TS_ASSIGN_OR_RETURN(auto outs, model->run(xs));
  TS_ASSIGN_OR_RETURN(Tensor host, outs.at(output).cpu());
  return host.to_vector();
}

// Compiles b's model, expects `fallbacks` host fallbacks, and compares the
// output with the host reference: equal within `step` (one quantization
// step of the last quantizer: a float conv's rounding may move a value
// across a rounding boundary), and exactly equal on at least `exact_percent`
// of them.
void expect_matches_reference(const ModelBuilder& b, const HostTensor& x, float step, size_t fallbacks = 0,
                              size_t exact_percent = 99) {
  ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(b.bytes()));
  const auto vals = tessera::testing::reference_values(g, x);
  ASSERT_FALSE(vals.empty());
  const HostTensor& want = *vals[static_cast<size_t>(g.outputs[0])];
  size_t got_fallbacks = 0;
  ASSERT_OK_AND_ASSIGN(std::vector<float> got, run_on_device(g, x, 0, &got_fallbacks));
  EXPECT_EQ(got_fallbacks, fallbacks);
  ASSERT_EQ(got.size(), want.size());
  size_t exact = 0;
  for (size_t k = 0; k < got.size(); ++k) {
    const double w = want.at(k);
    EXPECT_NEAR(got[k], w, step * 1.001 + 1e-6 * std::fabs(w)) << "at " << k;
    exact += std::fabs(got[k] - w) <= 1e-6 * std::fabs(w) + 1e-7;
  }
  EXPECT_GE(exact * 100, got.size() * exact_percent) << exact << " of " << got.size() << " equal";
}

// x -> Q(uint8, 0.05, 128) -> DQ -> Conv (int8 weights, per-channel
// scales, through DQ) + bias -> Relu -> Q(int8, 0.04, 0) -> DQ -> MaxPool
// -> Q -> DQ: a QDQ model as quantization tools write one.
ModelBuilder qdq_model(int64_t batch) {
  ModelBuilder b(13);
  b.input("x", {batch, 4, 10, 10});
  b.initializer("s_in", {}, {0.05f});
  b.typed_initializer("z_in", {}, kU8, {128});
  b.typed_initializer("w_q", {6, 4, 3, 3}, kI8, random_ints(6 * 4 * 9, -127, 127, 1));
  b.initializer("w_s", {6}, {0.002f, 0.003f, 0.0025f, 0.004f, 0.001f, 0.0035f});
  b.typed_initializer("w_z", {6}, kI8, {0, 0, 0, 0, 0, 0});
  b.initializer("bias", {6}, {0.1f, -0.2f, 0.05f, 0.0f, 0.3f, -0.1f});
  b.initializer("s_mid", {}, {0.04f});
  b.typed_initializer("z_mid", {}, kI8, {0});
  b.node("QuantizeLinear", {"x", "s_in", "z_in"}, {"xq"});
  b.node("DequantizeLinear", {"xq", "s_in", "z_in"}, {"xd"});
  auto* wd = b.node("DequantizeLinear", {"w_q", "w_s", "w_z"}, {"wd"});
  b.i(wd, "axis", 0);
  auto* c = b.node("Conv", {"xd", "wd", "bias"}, {"c"});
  b.ints(c, "pads", {1, 1, 1, 1});
  b.node("Relu", {"c"}, {"r"});
  b.node("QuantizeLinear", {"r", "s_mid", "z_mid"}, {"rq"});
  b.node("DequantizeLinear", {"rq", "s_mid", "z_mid"}, {"rd"});
  auto* mp = b.node("MaxPool", {"rd"}, {"mp"});
  b.ints(mp, "kernel_shape", {2, 2});
  b.ints(mp, "strides", {2, 2});
  b.node("QuantizeLinear", {"mp", "s_mid", "z_mid"}, {"mq"});
  b.node("DequantizeLinear", {"mq", "s_mid", "z_mid"}, {"y"});
  b.output("y");
  return b;
}

TEST(QuantOps, QdqModelRunsOnTheDevice) {
  for (int64_t batch : {1, 2}) expect_matches_reference(qdq_model(batch), input({batch, 4, 10, 10}, 3), 0.04f);
}

// The QDQ conv (uint8 activations, int8 per-channel weights, a float bias)
// becomes one QuantizedConv of the float input (graph::fuse_quantized_convs):
// the device multiplies integers; the model's Quantize / Dequantize pairs
// before and after it are gone.
TEST(QuantOps, QdqConvRunsAsAnIntegerConv) {
  ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(qdq_model(1).bytes()));
  graph::Graph opt = g;
  bool fused = false;
  for (const auto& r : graph::optimize(opt)) fused |= r.pass == "fuse_quantized_convs" && r.rewrites == 1;
  EXPECT_TRUE(fused);
  size_t qconvs = 0, convs = 0;
  for (const graph::Node& n : opt.nodes) qconvs += n.op_type == "QuantizedConv", convs += n.op_type == "Conv";
  EXPECT_EQ(qconvs, 1u);
  EXPECT_EQ(convs, 0u);
  // Its Relu -> Quantize (int8, 0.04) -> Dequantize moved into it.
  for (const graph::Node& n : opt.nodes) {
    EXPECT_NE(n.op_type, "Relu");
    if (n.op_type != "QuantizedConv") continue;
    EXPECT_EQ(n.attr_string("tessera_activation", ""), "relu");
    EXPECT_EQ(n.attr_float("output_scale", 0), 0.04f);
    EXPECT_EQ(n.attr_int("output_lo", 0), -128);
    EXPECT_EQ(n.attr_int("output_hi", 0), 127);
  }
  // On the device (exact integer sums where the CPU has VNNI) against the
  // model's own ops on the host, within one step of the last quantizer.
  for (int64_t batch : {1, 3}) expect_matches_reference(qdq_model(batch), input({batch, 4, 10, 10}, 5), 0.04f);
}

// Weights too large for constant folding (a VGG's classifier) stay a
// DequantizeLinear of constants, which lower_quantized dequantizes once.
TEST(QuantOps, LargeQuantizedWeightsAreDequantizedOnce) {
  importer::OnnxImportOptions options;
  options.infer.max_folded_elements = 16;  // (the conv's 216 weights do not fold at import)
  ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(qdq_model(1).bytes(), options));
  bool dequantize_left = false;
  for (const graph::Node& n : g.nodes) dequantize_left |= n.op_type == "DequantizeLinear" && g.is_constant(n.inputs[0]);
  ASSERT_TRUE(dequantize_left);
  const HostTensor x = input({1, 4, 10, 10}, 3);
  const auto vals = tessera::testing::reference_values(g, x);
  size_t fallbacks = 0;
  ASSERT_OK_AND_ASSIGN(std::vector<float> got, run_on_device(g, x, 0, &fallbacks));
  EXPECT_EQ(fallbacks, 0u);
  const HostTensor& want = *vals[static_cast<size_t>(g.outputs[0])];
  for (size_t k = 0; k < got.size(); ++k) EXPECT_NEAR(got[k], want.at(k), 0.04 * 1.001) << k;
}

TEST(QuantOps, QdqModelKeepsNaN) {
  ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(qdq_model(1).bytes()));
  HostTensor x = input({1, 4, 10, 10}, 4);
  x.f[37] = NAN;  // (channel 0, row 3, column 7)
  size_t fallbacks = 0;
  ASSERT_OK_AND_ASSIGN(std::vector<float> y, run_on_device(g, x, 0, &fallbacks));
  EXPECT_EQ(fallbacks, 0u);
  size_t nans = 0;
  for (float v : y) nans += std::isnan(v);
  EXPECT_GT(nans, 0u) << "a NaN in the input must not become a number";
}

// x -> DynamicQuantizeLinear -> ConvInteger (uint8 x, int8 weights with a
// zero point) -> Cast -> Mul (x scale * w scale) -> Add bias -> Relu, and a
// MatMulInteger head: the graph ONNX Runtime's dynamic quantizer writes.
ModelBuilder dynamic_model() {
  ModelBuilder b(13);
  b.input("x", {1, 3, 12, 12});
  b.typed_initializer("w", {8, 3, 3, 3}, kI8, random_ints(8 * 27, -100, 100, 2));
  b.typed_initializer("wz", {}, kI8, {3});
  b.initializer("ws", {}, {0.01f});
  b.initializer("bias", {1, 8, 1, 1}, {0.1f, -0.1f, 0.2f, 0.0f, -0.3f, 0.05f, 0.15f, -0.05f});
  b.typed_initializer("m", {6, 5}, kU8, random_ints(30, 0, 255, 3));
  b.typed_initializer("mz", {}, kU8, {120});
  b.initializer("ms", {}, {0.02f});
  b.node("DynamicQuantizeLinear", {"x"}, {"xq", "xs", "xz"});
  auto* c = b.node("ConvInteger", {"xq", "w", "xz", "wz"}, {"acc"});
  b.ints(c, "pads", {1, 1, 1, 1});
  b.ints(c, "strides", {2, 2});
  auto* cast = b.node("Cast", {"acc"}, {"accf"});
  b.i(cast, "to", onnx::TensorProto::FLOAT);
  b.node("Mul", {"xs", "ws"}, {"scale"});
  b.node("Mul", {"accf", "scale"}, {"deq"});
  b.node("Add", {"deq", "bias"}, {"biased"});
  b.node("Relu", {"biased"}, {"r"});
  auto* gp = b.node("GlobalAveragePool", {"r"}, {"gp"});
  (void)gp;
  b.int_initializer("flat_shape", {1, 8});
  b.node("Reshape", {"gp", "flat_shape"}, {"flat"});
  b.int_initializer("split", {6, 2});
  auto* sl = b.node("Split", {"flat", "split"}, {"f6", "f2"});
  b.i(sl, "axis", 1);
  b.node("DynamicQuantizeLinear", {"f6"}, {"fq", "fs", "fz"});
  b.node("MatMulInteger", {"fq", "m", "fz", "mz"}, {"macc"});
  auto* mc = b.node("Cast", {"macc"}, {"maccf"});
  b.i(mc, "to", onnx::TensorProto::FLOAT);
  b.node("Mul", {"fs", "ms"}, {"mscale"});
  b.node("Mul", {"maccf", "mscale"}, {"y"});
  b.output("y");
  return b;
}

TEST(QuantOps, DynamicQuantizationRunsOnTheDevice) {
  // (the output's step: the head's scales are products of run-time ranges; 1e-4 of its range)
  expect_matches_reference(dynamic_model(), input({1, 3, 12, 12}, 5), 1e-3f);
}

TEST(QuantOps, DynamicQuantizationOfZerosIsExact) {
  // (an all-zero range: scale 1, as ONNX Runtime's)
  expect_matches_reference(dynamic_model(), HostTensor::floats({1, 3, 12, 12}, std::vector<float>(432, 0.0f)), 0.0f);
}

// QLinearConv (uint8 activations, int8 per-channel weights, int32 bias) ->
// MaxPool on the uint8 values -> Reshape -> QLinearMatMul -> DequantizeLinear.
ModelBuilder qoperator_model() {
  ModelBuilder b(13);
  b.input("x", {1, 3, 8, 8});
  b.initializer("xs", {}, {0.03f});
  b.typed_initializer("xz", {}, kU8, {100});
  b.typed_initializer("w", {4, 3, 3, 3}, kI8, random_ints(4 * 27, -127, 127, 4));
  b.initializer("ws", {4}, {0.004f, 0.002f, 0.003f, 0.005f});
  b.typed_initializer("wz", {4}, kI8, {0, 0, 0, 0});
  b.initializer("cs", {}, {0.05f});
  b.typed_initializer("cz", {}, kU8, {10});
  b.typed_initializer("cb", {4}, kI32, {500, -300, 0, 1200});
  b.typed_initializer("m", {16, 5}, kU8, random_ints(80, 0, 255, 5));
  b.initializer("ms", {}, {0.01f});
  b.typed_initializer("mz", {}, kU8, {128});
  b.initializer("ys", {}, {0.2f});
  b.typed_initializer("yz", {}, kU8, {128});
  b.node("QuantizeLinear", {"x", "xs", "xz"}, {"xq"});
  auto* c = b.node("QLinearConv", {"xq", "xs", "xz", "w", "ws", "wz", "cs", "cz", "cb"}, {"cq"});
  b.ints(c, "pads", {1, 1, 1, 1});
  auto* mp = b.node("MaxPool", {"cq"}, {"mp"});
  b.ints(mp, "kernel_shape", {2, 2});
  b.ints(mp, "strides", {2, 2});
  b.int_initializer("shape", {1, 4, 16});
  b.node("Reshape", {"mp", "shape"}, {"rows"});
  b.node("QLinearMatMul", {"rows", "cs", "cz", "m", "ms", "mz", "ys", "yz"}, {"yq"});
  b.node("DequantizeLinear", {"yq", "ys", "yz"}, {"y"});
  b.output("y");
  return b;
}

TEST(QuantOps, QOperatorModelRunsOnTheDevice) {
  expect_matches_reference(qoperator_model(), input({1, 3, 8, 8}, 6), 0.2f);
}

// ONNX Runtime's com.microsoft QOperator ops, expanded at import into
// DequantizeLinear -> the float op -> QuantizeLinear: QLinearAdd,
// QLinearLeakyRelu, QLinearMul, QLinearConcat, QLinearAveragePool,
// QLinearSigmoid and QLinearGlobalAveragePool after a QLinearConv.
ModelBuilder microsoft_model() {
  ModelBuilder b(13);
  auto* ms = b.model().add_opset_import();
  ms->set_domain("com.microsoft");
  ms->set_version(1);
  b.input("x", {1, 3, 8, 8});
  auto scalar = [&](const std::string& name, float s, int zp) {
    b.initializer(name + "_s", {}, {s});
    b.typed_initializer(name + "_z", {}, kU8, {zp});
  };
  scalar("x", 0.03f, 100), scalar("c", 0.05f, 128), scalar("a", 0.07f, 120), scalar("l", 0.06f, 110);
  scalar("k", 0.08f, 128), scalar("s", 1.0f / 256, 0), scalar("g", 0.004f, 0);
  b.typed_initializer("w", {8, 3, 3, 3}, kI8, random_ints(8 * 27, -127, 127, 8));
  b.initializer("ws", {}, {0.004f});
  b.typed_initializer("wz", {}, kI8, {0});
  b.node("QuantizeLinear", {"x", "x_s", "x_z"}, {"xq"});
  ModelBuilder::ints(b.node("QLinearConv", {"xq", "x_s", "x_z", "w", "ws", "wz", "c_s", "c_z"}, {"c"}), "pads",
                     {1, 1, 1, 1});
  auto microsoft = [&](const std::string& op, std::vector<std::string> in, const std::string& out) {
    auto* n = b.node(op, std::move(in), {out});
    n->set_domain("com.microsoft");
    return n;
  };
  microsoft("QLinearAdd", {"c", "c_s", "c_z", "c", "c_s", "c_z", "a_s", "a_z"}, "a");
  ModelBuilder::f(microsoft("QLinearLeakyRelu", {"a", "a_s", "a_z", "l_s", "l_z"}, "l"), "alpha", 0.1f);
  microsoft("QLinearMul", {"l", "l_s", "l_z", "c", "c_s", "c_z", "k_s", "k_z"}, "k");
  ModelBuilder::i(microsoft("QLinearConcat", {"k_s", "k_z", "k", "k_s", "k_z", "c", "c_s", "c_z"}, "cat"), "axis", 1);
  auto* pool = microsoft("QLinearAveragePool", {"cat", "k_s", "k_z", "k_s", "k_z"}, "ap");
  ModelBuilder::ints(pool, "kernel_shape", {2, 2});
  ModelBuilder::ints(pool, "strides", {2, 2});
  microsoft("QLinearSigmoid", {"ap", "k_s", "k_z", "s_s", "s_z"}, "s");
  ModelBuilder::i(microsoft("QLinearGlobalAveragePool", {"s", "s_s", "s_z", "g_s", "g_z"}, "g"), "channels_last", 0);
  b.node("DequantizeLinear", {"g", "g_s", "g_z"}, {"y"});
  b.output("y");
  return b;
}

TEST(QuantOps, MicrosoftQOperatorOpsRunOnTheDevice) {
  // (16 outputs; the average pool of values on a grid of one step makes exact
  // ties, which the device's and the reference's float sums may round apart)
  expect_matches_reference(microsoft_model(), input({1, 3, 8, 8}, 9), 0.004f, 0, 85);
}

// The importer fuzzer's quantized seed (every quantized form in one model).
TEST(QuantOps, SmallQuantizedModelRunsOnTheDevice) {
  // (the output: ConvInteger's integer sums; a step of its input moves them by up to 250)
  expect_matches_reference(testing_onnx::small_quantized(), input({1, 2, 6, 6}, 10), 250.0f, 0, 95);
}

TEST(QuantOps, UnsupportedMicrosoftOpsAreClearErrors) {
  ModelBuilder b = microsoft_model();
  b.graph().mutable_node(2)->set_op_type("QGemm");
  auto qgemm = importer::import_onnx_bytes(b.bytes());
  ASSERT_FALSE(qgemm.ok());
  EXPECT_NE(qgemm.status().message().find("QLinearAdd"), std::string::npos) << qgemm.status().message();
  ModelBuilder nhwc = microsoft_model();
  for (auto& a : *nhwc.graph().mutable_node(8)->mutable_attribute())
    if (a.name() == "channels_last") a.set_i(1);
  auto channels_last = importer::import_onnx_bytes(nhwc.bytes());
  ASSERT_FALSE(channels_last.ok());
  EXPECT_NE(channels_last.status().message().find("channels-last"), std::string::npos);
  ModelBuilder short_add = microsoft_model();
  short_add.graph().mutable_node(2)->mutable_input()->DeleteSubrange(4, 4);
  EXPECT_FALSE(importer::import_onnx_bytes(short_add.bytes()).ok());
}

TEST(QuantOps, IntegerGraphOutputKeepsItsType) {
  ModelBuilder b(13);
  b.input("x", {1, 2, 3, 4});
  b.initializer("s", {}, {0.1f});
  b.typed_initializer("z", {}, kI8, {-5});
  b.node("QuantizeLinear", {"x", "s", "z"}, {"q"});
  b.output("q");
  ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(b.bytes()));
  EXPECT_EQ(g.value(g.outputs[0]).type, graph::ElemType::INT64);
  const HostTensor x = input({1, 2, 3, 4}, 7, 20.0f);
  const auto vals = tessera::testing::reference_values(g, x);
  size_t fallbacks = 0;
  ASSERT_OK_AND_ASSIGN(std::vector<float> got, run_on_device(g, x, 0, &fallbacks));
  EXPECT_EQ(fallbacks, 1u);  // (the Cast back to integers)
  const HostTensor& want = *vals[static_cast<size_t>(g.outputs[0])];
  for (size_t k = 0; k < got.size(); ++k) {
    EXPECT_EQ(got[k], want.at(k)) << k;
    EXPECT_GE(want.at(k), -128);
    EXPECT_LE(want.at(k), 127);
  }
}

// ------------------------------------------------------------- host kernels

StatusOr<std::vector<HostTensor>> eval(const std::string& op, std::vector<HostTensor> ins,
                                       const std::string& quant_type = "", int64_t axis = 1) {
  graph::Node n{.name = "q", .op_type = op};
  if (!quant_type.empty()) n.attrs["tessera_quant_type"] = {.kind = graph::Attribute::Kind::STRING, .s = quant_type};
  n.attrs["axis"] = {.kind = graph::Attribute::Kind::INT, .i = axis};
  n.outputs = op == "DynamicQuantizeLinear" ? std::vector<int>{0, 1, 2} : std::vector<int>{0};
  std::vector<const HostTensor*> p;
  for (const HostTensor& t : ins) p.push_back(&t);
  return graph::evaluate(n, p, 13);
}

TEST(QuantOps, QuantizeRoundsHalfToEvenAndSaturates) {
  const float inf = std::numeric_limits<float>::infinity();
  const HostTensor x = HostTensor::floats({8}, {0.25f, 0.75f, -0.25f, -0.75f, 100.0f, -100.0f, inf, -inf});
  // x / 0.5 = 0.5, 1.5, -0.5, -1.5: half to even gives 0, 2, -0, -2.
  ASSERT_OK_AND_ASSIGN(auto u8,
                       eval("QuantizeLinear", {x, HostTensor::floats({}, {0.5f}), HostTensor::ints({}, {10})}));
  EXPECT_EQ(u8[0].i, (std::vector<int64_t>{10, 12, 10, 8, 210, 0, 255, 0}));
  ASSERT_OK_AND_ASSIGN(auto i8,
                       eval("QuantizeLinear", {x, HostTensor::floats({}, {0.5f}), HostTensor::ints({}, {0})}, "int8"));
  EXPECT_EQ(i8[0].i, (std::vector<int64_t>{0, 2, 0, -2, 127, -128, 127, -128}));
  ASSERT_OK_AND_ASSIGN(auto nan, eval("QuantizeLinear", {HostTensor::floats({1}, {NAN}), HostTensor::floats({}, {1.0f}),
                                                         HostTensor::ints({}, {7})}));
  EXPECT_EQ(nan[0].i[0], 7);  // (an integer has no NaN: the zero point, which dequantizes to 0)
}

TEST(QuantOps, PerAxisScalesAndZeroPoints) {
  const HostTensor x = HostTensor::floats({2, 3}, {1, 1, 1, -1, -1, -1});
  ASSERT_OK_AND_ASSIGN(auto q, eval("QuantizeLinear", {x, HostTensor::floats({3}, {0.5f, 0.25f, 1.0f}),
                                                       HostTensor::ints({3}, {0, 10, 20})}));
  EXPECT_EQ(q[0].i, (std::vector<int64_t>{2, 14, 21, 0, 6, 19}));
  ASSERT_OK_AND_ASSIGN(auto d, eval("DequantizeLinear", {q[0], HostTensor::floats({3}, {0.5f, 0.25f, 1.0f}),
                                                         HostTensor::ints({3}, {0, 10, 20})}));
  EXPECT_EQ(d[0].f, (std::vector<float>{1, 1, 1, 0, -1, -1}));  // (uint8 saturated -1 / 0.5 at 0)
  ASSERT_OK_AND_ASSIGN(
      auto rows, eval("DequantizeLinear",
                      {HostTensor::ints({2, 3}, {1, 2, 3, 4, 5, 6}), HostTensor::floats({2}, {1.0f, 10.0f})}, "", 0));
  EXPECT_EQ(rows[0].f, (std::vector<float>{1, 2, 3, 40, 50, 60}));
}

TEST(QuantOps, DynamicQuantizeLinearFollowsOnnx) {
  // ONNX's example: range [min(x, 0), max(x, 0)] = [-1, 2] over 255 steps.
  ASSERT_OK_AND_ASSIGN(auto r, eval("DynamicQuantizeLinear", {HostTensor::floats({4}, {0.0f, 2.0f, -1.0f, 1.0f})}));
  EXPECT_FLOAT_EQ(r[1].f[0], 3.0f / 255.0f);
  EXPECT_EQ(r[2].i[0], 85);
  EXPECT_EQ(r[0].i, (std::vector<int64_t>{85, 255, 0, 170}));
  ASSERT_OK_AND_ASSIGN(auto zeros, eval("DynamicQuantizeLinear", {HostTensor::floats({3}, {0.0f, 0.0f, -0.0f})}));
  EXPECT_EQ(zeros[0].i, (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(zeros[1].f[0], 1.0f);  // (ONNX Runtime's scale for an empty range)
}

TEST(QuantOps, BadInputsAreErrors) {
  const HostTensor x = HostTensor::floats({2, 3}, {1, 2, 3, 4, 5, 6});
  auto wrong_len = eval("QuantizeLinear", {x, HostTensor::floats({2}, {1, 1})});
  ASSERT_FALSE(wrong_len.ok());
  EXPECT_NE(wrong_len.status().message().find("expected a scalar or (3)"), std::string::npos)
      << wrong_len.status().message();
  auto zp_shape = eval("QuantizeLinear", {x, HostTensor::floats({3}, {1, 1, 1}), HostTensor::ints({2}, {0, 0})});
  EXPECT_FALSE(zp_shape.ok());
  auto int32 = eval("QuantizeLinear", {x, HostTensor::floats({}, {1})}, "int32");
  ASSERT_FALSE(int32.ok());
  EXPECT_NE(int32.status().message().find("int32"), std::string::npos);
  auto missing = eval("DequantizeLinear", {x});
  EXPECT_FALSE(missing.ok());
  auto vector_scale =
      eval("QLinearMatMul", {x, HostTensor::floats({2}, {1, 1}), HostTensor::ints({}, {0}),
                             HostTensor::ints({3, 1}, {1, 1, 1}), HostTensor::floats({}, {1}),
                             HostTensor::ints({}, {0}), HostTensor::floats({}, {1}), HostTensor::ints({}, {0})});
  ASSERT_FALSE(vector_scale.ok());
  EXPECT_NE(vector_scale.status().message().find("must be a scalar"), std::string::npos);
}

TEST(QuantOps, ImporterRecordsTheQuantizedType) {
  ModelBuilder b(13);
  b.input("x", {1, 4});
  b.initializer("s", {}, {1.0f});
  b.typed_initializer("z8", {}, kI8, {0});
  b.node("QuantizeLinear", {"x", "s", "z8"}, {"a"});
  b.node("QuantizeLinear", {"x", "s"}, {"c"});  // no zero point: uint8
  b.output("a");
  b.output("c");
  ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(b.bytes()));
  ASSERT_EQ(g.nodes.size(), 2u);
  EXPECT_EQ(g.nodes[0].attr_string("tessera_quant_type", ""), "int8");
  EXPECT_EQ(g.nodes[1].attr_string("tessera_quant_type", ""), "uint8");
}

}  // namespace
}  // namespace tessera::runtime
