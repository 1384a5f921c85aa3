// Per-op precision (runtime/precision.h): the JSON rules, AMP levels, what
// each op ends up with and which rule set it, that the formats asked for
// are the ones computed with, and bad rules as errors naming the rule.
#include "tessera/runtime/precision.h"

#include <bit>

#include "onnx_model_builder.h"
#include "tessera/import/onnx.h"
#include "tessera/numerics/bfloat16.h"
#include "tessera/runtime/compiled_model.h"
#include "test_util.h"

namespace tessera::runtime {
namespace {

using tessera::testing::pcc;
using tessera::testing::random_values;

std::vector<float> host(const Tensor& t) { return t.cpu().value().to_vector().value(); }

TEST(PrecisionConfig, ParsesRulesAndRoundTrips) {
  ASSERT_OK_AND_ASSIGN(PrecisionConfig c, parse_precision_config(R"({"amp_level": 1, "rules": [
      {"op_type": "Conv", "name_regex": "layer4\\..*", "output_df": "float32", "math_fidelity": "HiFi4",
       "input_df": {"1": "bfloat16"}, "accumulate_df": "float32"},
      {"name_regex": "fc"}]})"));
  EXPECT_EQ(c.amp_level, 1);
  ASSERT_EQ(c.rules.size(), 2u);
  EXPECT_EQ(c.rules[0].op_type, "Conv");
  EXPECT_EQ(c.rules[0].name_regex, "layer4\\..*");
  EXPECT_EQ(c.rules[0].output_df, DataType::FLOAT32);
  EXPECT_EQ(c.rules[0].math_fidelity, MathFidelity::HiFi4);
  EXPECT_EQ(c.rules[0].input_df.at(1), DataType::BFLOAT16);
  EXPECT_EQ(c.rules[0].accumulate_df, DataType::FLOAT32);
  EXPECT_FALSE(c.rules[1].output_df);
  ASSERT_OK_AND_ASSIGN(PrecisionConfig again, parse_precision_config(precision_config_to_json(c)));
  EXPECT_EQ(precision_config_to_json(again), precision_config_to_json(c));
  // A bare list of rules.
  ASSERT_OK_AND_ASSIGN(PrecisionConfig list, parse_precision_config(R"([{"op_type": "Gemm"}])"));
  EXPECT_EQ(list.amp_level, 0);
  EXPECT_EQ(list.rules.size(), 1u);
  EXPECT_EQ(describe_rule(c.rules[0], 0), "rule 1 (op_type Conv, name_regex 'layer4\\..*')");
  EXPECT_EQ(describe_rule(c.rules[1], 1), "rule 2 (name_regex 'fc')");
}

TEST(PrecisionConfig, BadJsonNamesTheRuleAndKey) {
  const std::pair<const char*, const char*> cases[] = {
      {"{", "not valid JSON"},
      {R"({"amp": 1})", "unknown key 'amp'"},
      {R"({"amp_level": 3})", "AMP level 3"},
      {R"({"amp_level": "1"})", "amp_level: expected 0, 1 or 2"},
      {R"({"rules": {}})", "expected a list of rules"},
      {R"([{"op_type": "Conv"}, {"output_df": "float8"}])", "rule 2: 'output_df': unknown format 'float8'"},
      {R"([{"output_df": 16}])", "rule 1: 'output_df': expected a format name"},
      {R"([{"math_fidelity": "HiFi5"}])", "rule 1: 'math_fidelity': expected LoFi, HiFi2, HiFi3 or HiFi4"},
      {R"([{"input_df": {"w": "bfloat16"}}])", "operand 'w' is not an operand index"},
      {R"([{"input_df": "bfloat16"}])", "expected an object of operand index -> format"},
      {R"([{"op": "Conv"}])", "rule 1: unknown key 'op'"},
      {R"([3])", "rule 1: expected an object"},
  };
  for (const auto& [json, want] : cases) {
    const auto r = parse_precision_config(json);
    ASSERT_FALSE(r.ok()) << json;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << json;
    EXPECT_NE(r.status().message().find(want), std::string::npos) << json << " -> " << r.status().message();
  }
}

TEST(PrecisionConfig, AmpLevels) {
  ASSERT_OK_AND_ASSIGN(auto off, amp_level_defaults(0));
  EXPECT_FALSE(off);
  ASSERT_OK_AND_ASSIGN(auto one, amp_level_defaults(1));
  EXPECT_EQ(one->dtype, DataType::BFLOAT16);
  EXPECT_EQ(one->weights_dtype, DataType::BFLOAT8_B);
  EXPECT_EQ(one->math_fidelity, MathFidelity::HiFi2);
  ASSERT_OK_AND_ASSIGN(auto two, amp_level_defaults(2));
  EXPECT_EQ(two->weights_dtype, DataType::BFLOAT4_B);
  EXPECT_EQ(two->math_fidelity, MathFidelity::LoFi);
  EXPECT_FALSE(amp_level_defaults(-1).ok());
}

class PrecisionModel : public ::testing::Test {
 protected:
  void SetUp() override {
    g_ = importer::import_onnx_bytes(testing_onnx::small_cnn(1).bytes()).value();
    dev_ = open_device({}).value();
    x_ = random_values(3 * 16 * 16, 11, 1.0f);
    in_ = to_device(Tensor::from_vector(x_, Shape{1, 3, 16, 16}, DataType::FLOAT32).value(), *dev_).value();
  }
  StatusOr<std::unique_ptr<CompiledModel>> compile(const CompileOptions& o) {
    return CompiledModel::compile(g_, *dev_, o);
  }
  std::vector<float> run(CompiledModel& m) {
    const Tensor in[] = {in_};
    return host(m.run(in).value()[0]);
  }
  // The report line of the op whose line starts with `node`.
  static std::string line_of(const CompiledModel& m, const std::string& op_type, int nth = 0) {
    for (const std::string& l : m.report().op_precisions)
      if (l.find("(" + op_type + ")") != std::string::npos && nth-- == 0) return l;
    return "";
  }
  graph::Graph g_;
  std::shared_ptr<Device> dev_;
  std::vector<float> x_;
  Tensor in_;
};

TEST_F(PrecisionModel, ReportsWhatEachOpEndedUpWithAndWhichRuleSetIt) {
  CompileOptions o;
  o.precision.amp_level = 1;
  o.precision.rules = {{.op_type = "conv", .math_fidelity = MathFidelity::HiFi4},
                       {.name_regex = "logits", .input_df = {{1, DataType::BFLOAT16}}},
                       {.name_regex = "no_such_op"}};
  ASSERT_OK_AND_ASSIGN(auto m, compile(o));
  const std::string conv = line_of(*m, "Conv");
  EXPECT_NE(conv.find("output bfloat16, weights bfloat8_b (amp_level 1), HiFi4 (rule 1 (op_type conv))"),
            std::string::npos)
      << conv;
  const std::string gemm = line_of(*m, "Gemm");
  EXPECT_NE(gemm.find("output float32, weights bfloat16 (rule 2 (name_regex 'logits')), HiFi2 (amp_level 1)"),
            std::string::npos)
      << gemm;
  ASSERT_EQ(m->report().precision_notes.size(), 1u);
  EXPECT_EQ(m->report().precision_notes[0], "rule 3 (name_regex 'no_such_op') matched no op");
  // A field no matched op takes is said.
  CompileOptions pool{.numerics = Numerics::kFast};
  pool.precision.rules = {{.op_type = "MaxPool", .math_fidelity = MathFidelity::LoFi},
                          {.op_type = "Conv", .accumulate_df = DataType::FLOAT32}};
  ASSERT_OK_AND_ASSIGN(auto pm, compile(pool));
  ASSERT_EQ(pm->report().precision_notes.size(), 2u);
  EXPECT_EQ(
      pm->report().precision_notes[0],
      "rule 1 (op_type MaxPool): math_fidelity reached no op (only Conv, ConvTranspose, MatMul and Gemm have one)");
  EXPECT_NE(
      pm->report().precision_notes[1].find("accumulate_df reached no op (Tessera's kernels accumulate in float32"),
      std::string::npos);
  // AMP level 1 is bfloat16 activations with bfloat8_b weights: the same
  // results as those options given directly at HiFi2.
  ASSERT_OK_AND_ASSIGN(auto amp, compile({.precision = {.amp_level = 1}}));
  // (Its matmul weights too, which otherwise follow the activations.)
  CompileOptions d{
      .dtype = DataType::BFLOAT16, .weights_dtype = DataType::BFLOAT8_B, .math_fidelity = MathFidelity::HiFi2};
  d.precision.rules = {{.op_type = "Gemm", .input_df = {{1, DataType::BFLOAT8_B}}}};
  ASSERT_OK_AND_ASSIGN(auto direct, compile(d));
  EXPECT_EQ(run(*amp), run(*direct));
}

// A float32 model whose first conv writes bfloat16: its output (tapped) is
// bfloat16-exact, the model's results move, and stay close.
TEST_F(PrecisionModel, OutputFormatIsTheOneWritten) {
  ASSERT_OK_AND_ASSIGN(auto f32, compile({.intermediates_to_save = {"r1"}}));
  CompileOptions o{.intermediates_to_save = {"r1"}};
  o.precision.rules = {{.name_regex = "r1", .output_df = DataType::BFLOAT16}};
  ASSERT_OK_AND_ASSIGN(auto mixed, compile(o));
  EXPECT_NE(line_of(*mixed, "Conv").find("output bfloat16 (rule 1"), std::string::npos) << line_of(*mixed, "Conv");
  const Tensor in[] = {in_};
  ASSERT_OK_AND_ASSIGN(CompiledModel::Outputs a, f32->run_with_intermediates(in));
  ASSERT_OK_AND_ASSIGN(CompiledModel::Outputs b, mixed->run_with_intermediates(in));
  const std::vector<float> tap = host(b.intermediates[0]);
  size_t inexact = 0;
  for (float v : tap) inexact += round_to_bfloat16(v) != v;
  EXPECT_EQ(inexact, 0u);
  size_t exact_in_f32 = 0;
  for (float v : host(a.intermediates[0])) exact_in_f32 += round_to_bfloat16(v) == v;
  EXPECT_LT(exact_in_f32, tap.size() / 2);  // float32's own values are not
  const std::vector<float> ya = host(a.outputs[0]), yb = host(b.outputs[0]);
  EXPECT_NE(ya, yb);
  EXPECT_GE(pcc(ya, yb), 0.999);
  // The other way: a bfloat16 model whose last conv and classifier stay
  // float32 (the classifier's weights wide too) comes closer to float32.
  CompileOptions bf{.dtype = DataType::BFLOAT16, .weights_dtype = DataType::BFLOAT16};
  ASSERT_OK_AND_ASSIGN(auto narrow, compile(bf));
  bf.precision.rules = {{.name_regex = "c3|gap|flat|logits", .output_df = DataType::FLOAT32},
                        {.op_type = "Gemm", .input_df = {{1, DataType::FLOAT32}}}};
  ASSERT_OK_AND_ASSIGN(auto wide, compile(bf));
  EXPECT_NE(line_of(*wide, "Gemm").find("weights float32 (rule 2"), std::string::npos) << line_of(*wide, "Gemm");
  auto err = [&](const std::vector<float>& y) {
    double e = 0;
    for (size_t i = 0; i < y.size(); ++i) e = std::max(e, static_cast<double>(std::abs(y[i] - ya[i])));
    return e;
  };
  EXPECT_LT(err(run(*wide)), err(run(*narrow)));
}

// MatMul / Gemm weights are rounded through the format asked for: blocks
// of 16 along a row of B share the largest exponent (block_float.h), so
// 1/256 beside 1 is lost in bfloat8_b and kept in bfloat16.
TEST(Precision, MatmulWeightsRoundThroughTheirFormat) {
  testing_onnx::ModelBuilder b(13);
  b.input("a", {1, 1});
  b.initializer("w", {1, 2}, {1.0f, 1.0f / 256});
  b.node("MatMul", {"a", "w"}, {"y"});
  b.output("y");
  ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(b.bytes()));
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  const Tensor in[] = {to_device(Tensor::from_vector({1.0f}, Shape{1, 1}, DataType::FLOAT32).value(), *dev).value()};
  for (const auto& [df, want] : {std::pair{DataType::FLOAT32, 1.0f / 256},
                                 {DataType::BFLOAT16, 1.0f / 256},
                                 {DataType::FLOAT16, 1.0f / 256},
                                 {DataType::BFLOAT8_B, 0.0f},
                                 {DataType::BFLOAT4_B, 0.0f},
                                 {DataType::BFLOAT2_B, 0.0f}}) {
    CompileOptions o;
    o.precision.rules = {{.op_type = "MatMul", .input_df = {{1, df}}}};
    ASSERT_OK_AND_ASSIGN(auto m, CompiledModel::compile(g, *dev, o));
    ASSERT_OK_AND_ASSIGN(auto y, m->run(in));
    EXPECT_EQ(host(y[0]), (std::vector<float>{1.0f, want})) << data_type_name(df);
  }
}

// Under --numerics tt a matmul the emulation does not cover (a run-time B)
// runs as a host fallback, reported as such.
TEST(Precision, MatrixEngineFallbacksAreReported) {
  testing_onnx::ModelBuilder b(13);
  b.input("a", {2, 3});
  b.input("bt", {3, 4});
  b.node("MatMul", {"a", "bt"}, {"y"});
  b.output("y");
  ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(b.bytes()));
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  ASSERT_OK_AND_ASSIGN(auto m, CompiledModel::compile(g, *dev, {.numerics = Numerics::kTt}));
  ASSERT_EQ(m->report().fallbacks.size(), 1u);
  EXPECT_NE(m->report().fallbacks[0].find("a matmul the emulated matrix engine does not cover"), std::string::npos)
      << m->report().fallbacks[0];
}

// A Gemm's transB weights (N, K) round as the B they are: blocks along N,
// on the fast path as under --numerics tt.
TEST(Precision, GemmTransposedWeightsRoundAlongTheirRows) {
  testing_onnx::ModelBuilder b(13);
  b.input("a", {1, 1});
  b.initializer("w", {2, 1}, {1.0f, 1.0f / 256});  // (N, K): B's one row is (1, 1/256)
  auto* fc = b.node("Gemm", {"a", "w"}, {"y"});
  b.i(fc, "transB", 1);
  b.output("y");
  ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(b.bytes()));
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  const Tensor in[] = {to_device(Tensor::from_vector({1.0f}, Shape{1, 1}, DataType::FLOAT32).value(), *dev).value()};
  for (const Numerics n : {Numerics::kFast, Numerics::kTt}) {
    CompileOptions o{.numerics = n};
    o.precision.rules = {{.op_type = "Gemm", .input_df = {{1, DataType::BFLOAT8_B}}}};
    ASSERT_OK_AND_ASSIGN(auto m, CompiledModel::compile(g, *dev, o));
    ASSERT_OK_AND_ASSIGN(auto y, m->run(in));
    EXPECT_EQ(host(y[0]), (std::vector<float>{1.0f, 0.0f})) << numerics_name(n);
  }
}

// Numerics::kTt: convs and the Gemm on the emulated matrix engine. Each
// fidelity gives its own results; HiFi4 with a float32 destination is
// float32 math on TF32 operands; the destination format is a rule's.
TEST_F(PrecisionModel, MatrixEngineNumerics) {
  ASSERT_OK_AND_ASSIGN(auto fast, compile({}));
  const std::vector<float> want = run(*fast);
  std::vector<std::vector<float>> ys;
  for (MathFidelity f : {MathFidelity::LoFi, MathFidelity::HiFi2, MathFidelity::HiFi3, MathFidelity::HiFi4}) {
    ASSERT_OK_AND_ASSIGN(auto m, compile({.math_fidelity = f, .numerics = Numerics::kTt}));
    EXPECT_NE(line_of(*m, "Conv").find("accumulate float32"), std::string::npos) << line_of(*m, "Conv");
    ys.push_back(run(*m));
  }
  for (size_t i = 0; i + 1 < ys.size(); ++i) EXPECT_NE(ys[i], ys[i + 1]) << i;
  EXPECT_GE(pcc(want, ys[3]), 0.99999);
  EXPECT_LT(pcc(want, ys[0]), pcc(want, ys[3]));
  // A bfloat16 destination (the default of bfloat16 models there) moves the results.
  CompileOptions bf{.numerics = Numerics::kTt};
  bf.precision.rules = {{.op_type = "Conv", .accumulate_df = DataType::BFLOAT16}};
  ASSERT_OK_AND_ASSIGN(auto m, compile(bf));
  EXPECT_NE(line_of(*m, "Conv").find("accumulate bfloat16 (rule 1"), std::string::npos) << line_of(*m, "Conv");
  EXPECT_NE(run(*m), ys[3]);
  ASSERT_OK_AND_ASSIGN(
      auto bf16,
      compile({.dtype = DataType::BFLOAT16, .weights_dtype = DataType::BFLOAT8_B, .numerics = Numerics::kTt}));
  EXPECT_NE(line_of(*bf16, "Gemm").find("accumulate bfloat16"), std::string::npos) << line_of(*bf16, "Gemm");
  EXPECT_GE(pcc(want, run(*bf16)), 0.99);
  EXPECT_EQ(parse_numerics("tt"), Numerics::kTt);
  EXPECT_FALSE(parse_numerics("exact"));
}

TEST_F(PrecisionModel, BadRulesAreErrorsNamingTheRule) {
  auto error_of = [&](PrecisionConfig pc, DataType dtype = DataType::FLOAT32) {
    CompileOptions o{.dtype = dtype, .weights_dtype = dtype};
    o.precision = std::move(pc);
    StatusOr<std::unique_ptr<CompiledModel>> m = compile(o);
    EXPECT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
    return std::string(m.status().message());
  };
  auto has = [](const std::string& msg, const std::string& want) {
    EXPECT_NE(msg.find(want), std::string::npos) << msg;
  };
  has(error_of({.rules = {{}, {.op_type = "Convolution"}}}), "rule 2 (op_type Convolution): unknown op type");
  has(error_of({.rules = {{.name_regex = "conv[1"}}}), "rule 1 (name_regex 'conv[1'): name_regex 'conv[1' is not");
  has(error_of({.rules = {{.output_df = DataType::BFLOAT8_B}}}),
      "output_df bfloat8_b: activations are float32 or bfloat16");
  has(error_of({.rules = {{.accumulate_df = DataType::BFLOAT16}}}), "accumulate_df bfloat16: Tessera's kernels");
  {
    CompileOptions o{.numerics = Numerics::kTt};
    o.precision.rules = {{.accumulate_df = DataType::BFLOAT8_B}};
    const auto m = compile(o);
    ASSERT_FALSE(m.ok());
    has(std::string(m.status().message()), "rule 1 (every op): accumulate_df bfloat8_b: the matrix engine");
  }
  has(error_of({.rules = {{.intermediate_df = DataType::BFLOAT8_B}}}), "intermediate_df bfloat8_b");
  has(error_of({.rules = {{.op_type = "Conv", .input_df = {{0, DataType::BFLOAT16}}}}}),
      "rule 1 (op_type Conv): input_df[0] on Conv");
  has(error_of({.rules = {{.op_type = "MaxPool", .input_df = {{1, DataType::BFLOAT16}}}}}), "input_df[1] on MaxPool");
  // Float32 weights on a conv that computes in bfloat16.
  has(error_of({.rules = {{.name_regex = "c3", .input_df = {{1, DataType::FLOAT32}}}}}, DataType::BFLOAT16),
      "rule 1 (name_regex 'c3'): float32 weights on");
  has(error_of({.amp_level = 5}), "AMP level 5");
}

}  // namespace
}  // namespace tessera::runtime
