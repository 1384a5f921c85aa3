// Conv kernel choosers (conv_choosers.h) through the compiler: what a
// chooser answers is what the model runs, the measured answers are cached
// per machine and reused, and a bad cache or a bad answer is an error that
// says so.
#include "tessera/perfmodel/conv_choosers.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tessera/device/device.h"
#include "tessera/perfmodel/dataset.h"
#include "tessera/perfmodel/features.h"
#include "tessera/perfmodel/sweep.h"
#include "tessera/perfmodel/train.h"
#include "tessera/runtime/compiled_model.h"
#include "test_util.h"

namespace tessera::perfmodel {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / (name + "_" + std::to_string(getpid()))).string();
}

// x (1, 32, 20, 20) -> 3x3 conv to 64 + relu -> 1x1 conv to 24: shapes where
// several kernels can run each conv on every tier.
graph::Graph two_convs() {
  graph::Graph g;
  uint32_t seed = 7;
  auto value = [&](const char* name, std::vector<int64_t> dims, bool constant = false) {
    graph::Value v{.name = name, .dims = dims, .has_shape = true};
    if (constant) {
      int64_t n = 1;
      for (int64_t d : dims) n *= d;
      std::vector<float> f(static_cast<size_t>(n));
      for (float& x : f) {
        seed = seed * 1664525u + 1013904223u;
        x = (static_cast<float>(seed >> 8) / 16777216.0f - 0.5f) * 0.2f;
      }
      v.constant = graph::HostTensor::floats(dims, std::move(f));
    }
    return g.add_value(std::move(v));
  };
  const int x = value("x", {1, 32, 20, 20}), w1 = value("w1", {64, 32, 3, 3}, true), b1 = value("b1", {64}, true);
  const int y = value("y", {1, 64, 20, 20}), w2 = value("w2", {24, 64, 1, 1}, true), z = value("z", {1, 24, 20, 20});
  g.inputs = {x};
  graph::Node c1{.name = "conv1", .op_type = "Conv", .inputs = {x, w1, b1}, .outputs = {y}};
  c1.attrs["pads"] = {.kind = graph::Attribute::Kind::INTS, .ints = {1, 1, 1, 1}};
  c1.attrs["tessera_activation"] = {.kind = graph::Attribute::Kind::STRING, .s = "relu"};
  g.nodes = {c1, {.name = "conv2", .op_type = "Conv", .inputs = {y, w2}, .outputs = {z}}};
  g.outputs = {z};
  return g;
}

struct ModelRun {
  std::vector<float> out;
  std::vector<std::string> selections;
};

StatusOr<ModelRun> compile_and_run(Device& dev, const runtime::CompileOptions& options) {
  TS_ASSIGN_OR_RETURN(auto m, runtime::CompiledModel::compile(two_convs(), dev, options));
  std::vector<float> in(32 * 20 * 20);
  for (size_t i = 0; i < in.size(); ++i) in[i] = std::sin(0.37f * static_cast<float>(i));
  TS_ASSIGN_OR_RETURN(Tensor host, Tensor::from_vector(in, Shape{1, 32, 20, 20}, DataType::FLOAT32));
  TS_ASSIGN_OR_RETURN(Tensor x, to_device(host, dev));
  const Tensor inputs[] = {x};
  TS_ASSIGN_OR_RETURN(std::vector<Tensor> outs, m->run(inputs));
  TS_ASSIGN_OR_RETURN(Tensor out, outs[0].cpu());
  ModelRun r;
  TS_ASSIGN_OR_RETURN(r.out, out.to_vector());
  r.selections = m->conv_selections();
  return r;
}

void expect_close(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  float mx = 0;
  for (float v : b) mx = std::max(mx, std::fabs(v));
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-4f * std::max(1.0f, mx)) << i;
}

bool any_contains(const std::vector<std::string>& lines, std::string_view what) {
  for (const std::string& l : lines)
    if (l.find(what) != std::string::npos) return true;
  return false;
}

TEST(ConvChoosers, MeasuredChoicesRunAndAreCachedPerMachine) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.trace_region_size = 16 << 20}));
  ASSERT_OK_AND_ASSIGN(ModelRun heuristic, compile_and_run(*dev, {}));
  const std::string cache = temp_path("conv_choices.json");
  std::filesystem::remove(cache);
  runtime::CompileOptions measured;
  measured.conv_chooser = measured_conv_chooser({.cache_path = cache, .rounds = 2, .runs_per_round = 3});
  ASSERT_OK_AND_ASSIGN(ModelRun first, compile_and_run(*dev, measured));
  expect_close(first.out, heuristic.out);
  EXPECT_TRUE(any_contains(first.selections, "\n  measured: ")) << first.selections[0];
  // The cache names this machine and both problems.
  std::ifstream in(cache);
  const nlohmann::json doc = nlohmann::json::parse(in, nullptr, false);
  ASSERT_FALSE(doc.is_discarded());
  EXPECT_EQ(doc["format"], "tessera-conv-choices");
  ASSERT_EQ(doc["machines"].size(), 1u);
  EXPECT_EQ(doc["machines"].begin()->size(), 2u);
  // A new chooser on the same cache measures nothing and chooses the same.
  measured.conv_chooser = measured_conv_chooser({.cache_path = cache});
  ASSERT_OK_AND_ASSIGN(ModelRun again, compile_and_run(*dev, measured));
  EXPECT_TRUE(any_contains(again.selections, "measured (cached "));
  for (size_t i = 0; i < again.selections.size(); ++i)
    EXPECT_EQ(again.selections[i].substr(0, again.selections[i].find('\n')),
              first.selections[i].substr(0, first.selections[i].find('\n')));
  // A file that is no cache is refused, named.
  std::ofstream(cache) << "{\"format\": \"something else\"}";
  measured.conv_chooser = measured_conv_chooser({.cache_path = cache});
  EXPECT_ERROR(compile_and_run(*dev, measured).status(), StatusCode::kInvalidArgument,
               cache + ": expected a conv choice cache");
  std::filesystem::remove(cache);
  ASSERT_OK(close_device(*dev));
}

TEST(ConvChoosers, AnUnwritableCacheIsAWarning) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.trace_region_size = 16 << 20}));
  runtime::CompileOptions measured;
  measured.conv_chooser =
      measured_conv_chooser({.cache_path = "/proc/tessera-no-such-dir/conv_choices.json", .rounds = 1});
  ::testing::internal::CaptureStderr();
  ASSERT_OK_AND_ASSIGN(ModelRun r, compile_and_run(*dev, measured));
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("warning: "), std::string::npos) << err;
  EXPECT_NE(err.find("kept for this process only"), std::string::npos) << err;
  EXPECT_TRUE(any_contains(r.selections, "\n  measured: "));
  ASSERT_OK(close_device(*dev));
}

// A predictor trained on a made-up law in which oneDNN's kernel takes a
// third of any other's time: the predicted chooser runs it wherever it can.
TEST(ConvChoosers, PredictedChoicesFollowThePredictor) {
  const std::string db = temp_path("tessera_choosers.sqlite"), model = temp_path("tessera_choosers.json");
  std::filesystem::remove(db);
  {
    ASSERT_OK_AND_ASSIGN(auto d, Dataset::open(db));
    MachineFingerprint m = this_machine(2);
    m.fma_gflops = 200, m.bf16_gflops = 400, m.dram_gbps = 20, m.cache_gbps = 200;
    ASSERT_OK_AND_ASSIGN(const int64_t id, d->machine_id(m));
    ASSERT_OK(d->begin());
    for (uint64_t batch = 0; batch < 40; ++batch) {
      ASSERT_OK_AND_ASSIGN(std::vector<OpQuery> queries, sample_space("conv2d", 16, batch));
      for (const OpQuery& q : queries) {
        const double t = (500 + op_cost(q).flops / 200) * (q.word("algorithm") == "onednn" ? 0.3 : 1.0);
        ASSERT_OK(d->add({.machine_id = id,
                          .commit = "test",
                          .measured_at = utc_now(),
                          .source = "law",
                          .op = q.op,
                          .family = "conv2d",
                          .query = to_json(q),
                          .time_ns = t,
                          .min_ns = t,
                          .max_ns = t,
                          .run_a_ns = t,
                          .run_b_ns = t,
                          .passes = 2}));
      }
    }
    ASSERT_OK(d->commit());
    ASSERT_OK(train_predictor(*d, {.machine_id = id}, model).status());
  }
  ASSERT_OK_AND_ASSIGN(auto predictor, Predictor::load(model));
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  runtime::CompileOptions predicted;
  predicted.conv_chooser = predicted_conv_chooser(predictor, 2);
  ASSERT_OK_AND_ASSIGN(ModelRun r, compile_and_run(*dev, predicted));
  ASSERT_OK_AND_ASSIGN(ModelRun heuristic, compile_and_run(*dev, {}));
  expect_close(r.out, heuristic.out);
  for (const std::string& s : r.selections) {
    if (s.find("\n  predicted: ") == std::string::npos) continue;  // one kernel only: nothing asked
    EXPECT_NE(s.find(": onednn"), std::string::npos) << s;
  }
  EXPECT_TRUE(any_contains(r.selections, "\n  predicted: "));
  ASSERT_OK(close_device(*dev));
  std::filesystem::remove(db);
  std::filesystem::remove(model);
}

TEST(ConvChoosers, TheChoiceIsWhatRunsAndBadAnswersAreErrors) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  ASSERT_OK_AND_ASSIGN(ModelRun heuristic, compile_and_run(*dev, {}));
  // Always the last candidate (oneDNN's general kernel, where it can run).
  std::vector<std::string> asked;
  runtime::CompileOptions last;
  last.conv_chooser = [&](const cnn::ConvChoice& c) -> StatusOr<cnn::ConvChosen> {
    EXPECT_GE(c.algorithms.size(), 2u);
    EXPECT_NE(c.key.find(c.op), std::string::npos);
    asked.push_back(c.algorithms.back());
    return cnn::ConvChosen{c.algorithms.back(), "the last one"};
  };
  ASSERT_OK_AND_ASSIGN(ModelRun chosen, compile_and_run(*dev, last));
  expect_close(chosen.out, heuristic.out);
  ASSERT_FALSE(asked.empty());
  EXPECT_TRUE(any_contains(chosen.selections, asked.front() + " (Conv2dConfig::algorithm) for "))
      << chosen.selections[0];
  EXPECT_TRUE(any_contains(chosen.selections, "\n  the last one"));
  runtime::CompileOptions bad;
  bad.conv_chooser = [](const cnn::ConvChoice&) -> StatusOr<cnn::ConvChosen> { return cnn::ConvChosen{"fastest", ""}; };
  EXPECT_ERROR(compile_and_run(*dev, bad).status(), StatusCode::kInvalidArgument,
               "the chooser answered 'fastest', which is not one of the kernels that can run it");
  bad.conv_chooser = [](const cnn::ConvChoice&) -> StatusOr<cnn::ConvChosen> {
    return not_found_error("no conv model");
  };
  EXPECT_ERROR(compile_and_run(*dev, bad).status(), StatusCode::kNotFound, "no conv model");
  ASSERT_OK(close_device(*dev));
}

TEST(ConvChoosers, ChoicesAsPredictorQueries) {
  Conv2dParams p{.batch_size = 2, .input_height = 20, .input_width = 30, .in_channels = 32, .out_channels = 64};
  p.kernel_size = {3, 3};
  p.with_padding(1, 1);
  p.activation = {UnaryOpType::RELU};
  Conv2dConfig config{.weights_dtype = DataType::BFLOAT8_B};
  cnn::ConvChoice c{.op = "conv2d", .conv2d = &p};
  c.input = TensorSpec{Shape{2, 20, 30, 32}, DataType::BFLOAT16, Layout::ROW_MAJOR, DRAM_MEMORY_CONFIG};
  c.residual = c.input;
  c.config = &config;
  ASSERT_OK_AND_ASSIGN(OpQuery q, conv_choice_query(c, "onednn", 2));
  EXPECT_EQ(q.op, "conv2d");
  EXPECT_EQ(q.inputs[0].logical_shape, (std::vector<uint32_t>{2, 32, 20, 30}));  // NCHW
  EXPECT_EQ(q.inputs[0].dtype, DataType::BFLOAT16);
  EXPECT_EQ(q.word("algorithm"), "onednn");
  EXPECT_EQ(q.word("weights_dtype"), "bfloat8_b");
  EXPECT_EQ(q.word("activation"), "relu");
  EXPECT_EQ(q.num("residual"), 1);
  EXPECT_EQ(q.workers, 2u);
  EXPECT_EQ(parse_conv_select("measured"), ConvSelect::kMeasured);
  EXPECT_EQ(conv_select_name(ConvSelect::kPredicted), "predicted");
  EXPECT_FALSE(parse_conv_select("fastest"));
  c.conv2d = nullptr;
  EXPECT_EQ(conv_choice_query(c, "onednn", 0).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera::perfmodel
