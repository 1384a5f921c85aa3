#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "tessera/device/device.h"
#include "tessera/perfmodel/features.h"
#include "tessera/perfmodel/measure.h"
#include "tessera/perfmodel/model_queries.h"
#include "tessera/perfmodel/predictor.h"
#include "tessera/perfmodel/sweep.h"
#include "tessera/perfmodel/train.h"

namespace tessera::perfmodel {
namespace {

constexpr const char* kShortConv =
    R"({"op":"conv2d","input":{"logical_shape":[1,64,56,56],"dtype":"FLOAT32"},"out_channels":64,"kernel_size":[3,3],"padding":[1,1]})";

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / (name + "_" + std::to_string(getpid()))).string();
}

TEST(OpQuery, ShortFormFillsDocumentedDefaults) {
  auto q = parse_op_query(kShortConv);
  ASSERT_TRUE(q.ok()) << q.status().to_string();
  EXPECT_EQ(q->op, "conv2d");
  ASSERT_EQ(q->inputs.size(), 1u);
  EXPECT_EQ(q->inputs[0].logical_shape, (std::vector<uint32_t>{1, 64, 56, 56}));
  EXPECT_EQ(q->inputs[0].layout, Layout::ROW_MAJOR);
  EXPECT_EQ(q->inputs[0].buffer_type, BufferType::DRAM);
  EXPECT_EQ(q->args.at("padding").numbers, (std::vector<double>{1, 1, 1, 1}));
  EXPECT_EQ(q->args.at("stride").numbers, (std::vector<double>{1, 1}));
  EXPECT_EQ(q->num("groups"), 1);
  EXPECT_EQ(q->word("activation"), "identity");
  EXPECT_EQ(q->word("weights_dtype"), "float32");  // "same": the input's
  EXPECT_EQ(q->word("math_fidelity"), "HiFi4");
}

TEST(OpQuery, EquivalentFormsHaveOneCanonicalJson) {
  auto a = parse_op_query(kShortConv);
  auto b = parse_op_query(
      R"({"op":"conv2d","input_a":{"logical_shape":[1,64,56,56],"tensor_layout":{"dtype":"DataType::FLOAT32",
          "memory_config":{"buffer_type":"BufferType::DRAM","memory_layout":"TensorMemoryLayout::INTERLEAVED"}}},
          "out_channels":64,"kernel_size":[3,3],"padding":[1,1,1,1],"stride":1,"weights_dtype":"float32"})");
  ASSERT_TRUE(a.ok() && b.ok()) << b.status().to_string();
  EXPECT_EQ(to_json(*a), to_json(*b));
  auto again = parse_op_query(to_json(*a));
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(*again, *a);
}

TEST(OpQuery, BinaryOpsTakeTheFirstInputsSpecForAMissingSecond) {
  auto q = parse_op_query(R"({"op":"add","input":{"logical_shape":[1,32,32,16],"dtype":"bfloat16"}})");
  ASSERT_TRUE(q.ok()) << q.status().to_string();
  ASSERT_EQ(q->inputs.size(), 2u);
  EXPECT_EQ(q->inputs[1], q->inputs[0]);
}

TEST(OpQuery, BadQueriesSayWhatIsWrong) {
  struct Case {
    const char* json;
    StatusCode code;
    const char* says;
  };
  const Case cases[] = {
      {"{", StatusCode::kInvalidArgument, "not valid JSON"},
      {"[1]", StatusCode::kInvalidArgument, "expected a JSON object"},
      {R"({"input":{"logical_shape":[1]}})", StatusCode::kInvalidArgument, "\"op\""},
      {R"({"op":"conv3d","input":{"logical_shape":[1]}})", StatusCode::kInvalidArgument, "unknown op 'conv3d'"},
      {R"({"op":"relu","input":{"logical_shape":[1,2]},"alpha":1})", StatusCode::kInvalidArgument,
       "unknown argument 'alpha'"},
      {R"({"op":"relu"})", StatusCode::kInvalidArgument, "logical_shape"},
      {R"({"op":"relu","input":{"logical_shape":[]}})", StatusCode::kInvalidArgument, "1 to 8 dims"},
      {R"({"op":"relu","input":{"logical_shape":[0,3]}})", StatusCode::kInvalidArgument, "dims in [1, 2^24]"},
      {R"({"op":"relu","input":{"logical_shape":[2,3],"dtype":"float64"}})", StatusCode::kInvalidArgument,
       "unknown dtype 'float64'"},
      {R"({"op":"relu","input":{"logical_shape":[2,3],"dtype":"bfloat8_b"}})", StatusCode::kInvalidArgument,
       "needs layout TILE"},
      {R"({"op":"relu","input":{"logical_shape":[2,3],"memory_config":{"memory_layout":"HEIGHT_SHARDED"}}})",
       StatusCode::kUnimplemented, "HEIGHT_SHARDED"},
      {R"({"op":"conv2d","input":{"logical_shape":[1,3,8,8]},"kernel_size":[3,3]})", StatusCode::kInvalidArgument,
       "'out_channels' is required"},
      {R"({"op":"conv2d","input":{"logical_shape":[1,3,8,8]},"out_channels":4,"kernel_size":[3,3,3]})",
       StatusCode::kInvalidArgument, "expected 2 number(s)"},
      {R"({"op":"conv2d","input":{"logical_shape":[3,8,8]},"out_channels":4,"kernel_size":3})",
       StatusCode::kInvalidArgument, "4-d (N, C, H, W)"},
      {R"({"op":"conv2d","input":{"logical_shape":[1,3,8,8]},"out_channels":0,"kernel_size":3})",
       StatusCode::kInvalidArgument, "at least 1"},
      {R"({"op":"conv2d","input":{"logical_shape":[1,3,8,8]},"out_channels":4,"kernel_size":3,"activation":"swish"})",
       StatusCode::kInvalidArgument, "unknown activation 'swish'"},
      {R"({"op":"permute","input":{"logical_shape":[1,3,8,8]},"perm":[0,1,1,2]})", StatusCode::kInvalidArgument,
       "permutation"},
      {R"({"op":"matmul","input":{"logical_shape":[4,8]}})", StatusCode::kInvalidArgument, "2 to 2 input(s)"},
      {R"({"op":"upsample","input":{"logical_shape":[1,3,8,8]},"mode":"cubic"})", StatusCode::kInvalidArgument,
       "nearest or bilinear"},
      {R"({"op":"relu","input":{"logical_shape":[2,3]},"workers":-1})", StatusCode::kInvalidArgument, "workers"},
  };
  for (const Case& c : cases) {
    auto q = parse_op_query(c.json);
    ASSERT_FALSE(q.ok()) << c.json;
    EXPECT_EQ(q.status().code(), c.code) << c.json << ": " << q.status().to_string();
    EXPECT_NE(q.status().message().find(c.says), std::string::npos) << q.status().to_string();
  }
}

TEST(Features, ConvCostIsTheHandCountedOne) {
  auto q = parse_op_query(kShortConv);
  ASSERT_TRUE(q.ok());
  const OpCost c = op_cost(*q);
  EXPECT_DOUBLE_EQ(c.flops, 2.0 * 56 * 56 * 64 * 64 * 9);
  EXPECT_DOUBLE_EQ(c.bytes_read, 4.0 * (64 * 56 * 56 + 64 * 64 * 9));
  EXPECT_DOUBLE_EQ(c.bytes_written, 4.0 * 64 * 56 * 56);
  MachineFingerprint m = this_machine(2);
  m.fma_gflops = 100, m.cache_gbps = 1000;
  EXPECT_DOUBLE_EQ(roofline_floor_ns(*q, c, m), c.flops / 100);  // compute-bound at these peaks
  m.fma_gflops = 1e6;
  EXPECT_DOUBLE_EQ(roofline_floor_ns(*q, c, m), c.bytes() / 1000);
}

TEST(Features, TransposedConvCostIsTheHandCountedOne) {
  auto q = parse_op_query(R"({"op":"conv_transpose2d","input":{"logical_shape":[1,64,30,40]},"out_channels":32,
                             "kernel_size":[3,3],"stride":[2,2],"padding":[1,1],"output_padding":[1,1]})");
  ASSERT_TRUE(q.ok()) << q.status().to_string();
  const OpCost c = op_cost(*q);
  EXPECT_DOUBLE_EQ(c.flops, 2.0 * 30 * 40 * 64 * 32 * 9);
  EXPECT_DOUBLE_EQ(c.output_elements, 60.0 * 80 * 32);  // (30 - 1) * 2 - 2 + 2 + 1 + 1 = 60
  EXPECT_DOUBLE_EQ(c.bytes_read, 4.0 * (64 * 30 * 40 + 64 * 32 * 9));
}

TEST(Features, EveryFamilyHasOneLayout) {
  const MachineFingerprint m = this_machine(2);
  for (const std::string& space : sweep_ops()) {
    auto qs = sample_space(space, 24, 0);
    ASSERT_TRUE(qs.ok()) << space;
    EXPECT_FALSE(qs->empty()) << space;
    for (const OpQuery& q : *qs) {
      EXPECT_TRUE(validate(q).ok()) << to_json(q);
      std::vector<float> x;
      append_features(q, m, x);
      EXPECT_EQ(x.size(), feature_names(find_op(q.op)->family).size()) << q.op;
    }
  }
}

TEST(Sweep, LatinHypercubeHitsEveryStratumOnce) {
  const uint32_t n = 37, dims = 5;
  auto pts = latin_hypercube(n, dims, 9);
  ASSERT_EQ(pts.size(), n);
  for (uint32_t d = 0; d < dims; ++d) {
    std::set<uint32_t> strata;
    for (const auto& p : pts) {
      ASSERT_GE(p[d], 0.0);
      ASSERT_LT(p[d], 1.0);
      strata.insert(static_cast<uint32_t>(p[d] * n));
    }
    EXPECT_EQ(strata.size(), n) << "dimension " << d;
  }
  EXPECT_EQ(latin_hypercube(n, dims, 9), pts);  // deterministic
  EXPECT_NE(latin_hypercube(n, dims, 10), pts);
}

TEST(Sweep, SpacesAreDeterministicAndNamed) {
  auto a = sample_space("conv2d", 8, 3), b = sample_space("conv2d", 8, 3), c = sample_space("conv2d", 8, 4);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_NE(*a, *c);
  auto bad = sample_space("conv3d", 8, 0);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("eltwise_unary"), std::string::npos);
}

TEST(Measure, TimesAnOpAndNamesItsKernels) {
  auto device = open_device({.trace_region_size = size_t{16} << 20});
  ASSERT_TRUE(device.ok());
  for (const char* json : {R"({"op":"relu","input":{"logical_shape":[1,32,32,64]}})", kShortConv,
                           R"({"op":"linear","input":{"logical_shape":[8,256]},"out_features":128})",
                           R"({"op":"concat","inputs":[{"logical_shape":[1,8,16]},{"logical_shape":[1,8,32]}]})",
                           R"({"op":"max_pool2d","input":{"logical_shape":[1,16,32,32],"dtype":"bfloat16"}})"}) {
    auto q = parse_op_query(json);
    ASSERT_TRUE(q.ok()) << q.status().to_string();
    auto m = measure_op(**device, *q, 5);
    ASSERT_TRUE(m.ok()) << json << ": " << m.status().to_string();
    EXPECT_GT(m->time_ns, 0);
    EXPECT_LE(m->min_ns, m->time_ns);
    EXPECT_GE(m->max_ns, m->time_ns);
    EXPECT_GE(m->replays, 5u);
    EXPECT_GE(m->launches, 1u);
    EXPECT_FALSE(m->kernels.empty());
  }
  auto up = parse_op_query(R"({"op":"conv_transpose2d","input":{"logical_shape":[1,32,8,8]},"out_channels":16})");
  ASSERT_TRUE(up.ok());
  auto m = measure_op(**device, *up, 5);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_GT(m->time_ns, 0);
  EXPECT_FALSE(m->kernels.empty());
  // A configuration the op refuses: its own error.
  auto q = parse_op_query(R"({"op":"conv2d","input":{"logical_shape":[1,6,8,8]},"out_channels":4,"kernel_size":3,
                             "groups":4})");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(measure_op(**device, *q).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(close_device(**device).ok());
}

TEST(Dataset, StoresExportsAndRefusesOtherFiles) {
  const std::string path = temp_path("tessera_dataset.sqlite");
  std::filesystem::remove(path);
  {
    auto d = Dataset::open(path);
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    MachineFingerprint m = this_machine(2);
    m.fma_gflops = 100;
    auto id = (*d)->machine_id(m);
    ASSERT_TRUE(id.ok()) << id.status().to_string();
    m.fma_gflops = 120;  // new peaks: the same machine, its peaks updated
    EXPECT_EQ(*(*d)->machine_id(m), *id);
    EXPECT_EQ((*d)->machine(*id)->fma_gflops, 120);
    MeasurementRow r{.machine_id = *id,
                     .commit = "abc",
                     .measured_at = utc_now(),
                     .source = "test",
                     .op = "relu",
                     .family = "eltwise_unary",
                     .query = "{\"op\":\"relu\", \"x\":\"a,b\"}",
                     .time_ns = 1234};
    ASSERT_TRUE((*d)->add(r).ok());
    r.query = "q2", r.status = "INVALID_ARGUMENT: no";
    ASSERT_TRUE((*d)->add(r).ok());
    EXPECT_TRUE(*(*d)->contains(*id, "abc", "q2"));
    EXPECT_FALSE(*(*d)->contains(*id, "abd", "q2"));
    ASSERT_TRUE((*d)->remove(*id, "abc", "q2").ok());
    EXPECT_FALSE(*(*d)->contains(*id, "abc", "q2"));
    ASSERT_TRUE((*d)->add(r).ok());
    EXPECT_EQ((*d)->rows(*id, true)->size(), 1u);
    EXPECT_EQ((*d)->rows(0, false)->size(), 2u);
    ASSERT_TRUE((*d)->export_csv(path + ".csv").ok());
    std::ifstream csv(path + ".csv");
    std::string header, line;
    std::getline(csv, header);
    std::getline(csv, line);
    EXPECT_NE(header.find("time_ns"), std::string::npos);
    EXPECT_NE(line.find("\"{\"\"op\"\":\"\"relu\"\", \"\"x\"\":\"\"a,b\"\"}\""), std::string::npos) << line;
  }
  std::ofstream(path + ".txt") << "not a database, just text that is long enough to have a header page............";
  auto bad = Dataset::open(path + ".txt");
  EXPECT_FALSE(bad.ok());
  EXPECT_FALSE(Dataset::open("/nonexistent_dir/x.sqlite").ok());
  std::filesystem::remove(path);
  std::filesystem::remove(path + ".csv");
  std::filesystem::remove(path + ".txt");
}

// A dataset whose times follow a known law (no device): training must learn
// it, the forest walk must agree with XGBoost (train_predictor checks), and
// the predictor must load, answer and refuse what it should.
class Trained : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    db_ = temp_path("tessera_train.sqlite");
    model_ = temp_path("tessera_predictor.json");
    std::filesystem::remove(db_);
    auto d = Dataset::open(db_);
    ASSERT_TRUE(d.ok());
    MachineFingerprint m = this_machine(2);
    m.fma_gflops = 200, m.bf16_gflops = 400, m.dram_gbps = 20, m.cache_gbps = 200;
    const int64_t id = *(*d)->machine_id(m);
    std::mt19937 rng(3);
    std::lognormal_distribution<double> noise(0.0, 0.02);
    ASSERT_TRUE((*d)->begin().ok());
    for (uint64_t batch = 0; batch < 40; ++batch)
      for (const char* space : {"eltwise_unary", "linear"}) {
        auto queries = sample_space(space, 16, batch);
        ASSERT_TRUE(queries.ok());
        for (const OpQuery& q : *queries) {
          const OpCost c = op_cost(q);
          const double t = (500 + c.bytes() / 20 + c.flops / 200) * noise(rng);  // ns
          MeasurementRow r{.machine_id = id,
                           .commit = "test",
                           .measured_at = utc_now(),
                           .source = "law",
                           .op = q.op,
                           .family = std::string(find_op(q.op)->family),
                           .query = to_json(q),
                           .time_ns = t,
                           .min_ns = t,
                           .max_ns = t,
                           .run_a_ns = t,
                           .run_b_ns = t,
                           .passes = 2};
          ASSERT_TRUE((*d)->add(r).ok());
        }
      }
    ASSERT_TRUE((*d)->commit().ok());
    auto report = train_predictor(**d, {.machine_id = id}, model_);
    ASSERT_TRUE(report.ok()) << report.status().to_string();
    report_ = new TrainReport(*report);
  }
  static void TearDownTestSuite() {
    std::filesystem::remove(db_);
    std::filesystem::remove(model_);
    delete report_;
  }
  static std::string db_, model_;
  static TrainReport* report_;
};
std::string Trained::db_, Trained::model_;
TrainReport* Trained::report_ = nullptr;

TEST_F(Trained, LearnsTheLawWithHonestError) {
  ASSERT_EQ(report_->families.size(), 2u);
  for (const FamilyReport& f : report_->families) {
    EXPECT_GT(f.test, 20u) << f.family;
    EXPECT_GT(f.test_error.r2, 0.95) << f.family;
    EXPECT_GT(f.test_error.within25, 0.9) << f.family;
    EXPECT_EQ(f.repeat10, 1.0);
  }
  const std::string md = report_->markdown();
  EXPECT_NE(md.find("eltwise_unary"), std::string::npos);
  EXPECT_NE(md.find("within ±10%"), std::string::npos);
}

TEST_F(Trained, PredictsLoadsOnceAndRefusesWhatItCannotAnswer) {
  auto p = Predictor::load(model_);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(Predictor::load(model_)->get(), p->get());  // cached
  auto q = parse_op_query(R"({"op":"relu","input":{"logical_shape":[1,64,64,64]}})");
  const OpCost c = op_cost(*q);
  const double law = 500 + c.bytes() / 20 + c.flops / 200;
  auto ns = (*p)->predict(*q);
  ASSERT_TRUE(ns.ok()) << ns.status().to_string();
  EXPECT_NEAR(*ns / law, 1.0, 0.3);
  EXPECT_GE(*ns, roofline_floor_ns(*q, c, (*p)->machine()));
  auto conv = (*p)->predict_json(kShortConv);  // no conv2d family in this model
  EXPECT_EQ(conv.status().code(), StatusCode::kNotFound);
  EXPECT_NE(conv.status().message().find("conv2d"), std::string::npos);
  EXPECT_EQ((*p)->predict_json("{\"op\":").status().code(), StatusCode::kInvalidArgument);
  // The commit differs from this build's ("test"): a warning names it.
  bool commit_warned = false;
  for (const std::string& w : (*p)->warnings()) commit_warned |= w.find("commit: test") != std::string::npos;
  EXPECT_TRUE(commit_warned);
}

TEST_F(Trained, CorruptOrForeignFilesAreRefused) {
  std::ifstream in(model_);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(Predictor::from_json(text.substr(0, text.size() / 2), "half").status().code(),
            StatusCode::kInvalidArgument);
  nlohmann::json j = nlohmann::json::parse(text);
  auto refused = [&](const nlohmann::json& doc, const char* says) {
    auto p = Predictor::from_json(doc.dump(), "forged");
    ASSERT_FALSE(p.ok()) << says;
    EXPECT_NE(p.status().message().find(says), std::string::npos) << p.status().to_string();
  };
  nlohmann::json v = j;
  v["version"] = 99;
  refused(v, "version 99");
  nlohmann::json f = j;
  f["format"] = "onnx";
  refused(f, "not a predictor");
  nlohmann::json t = j;
  t["families"]["eltwise_unary"]["trees"][0]["left"][0] = 100000;
  refused(t, "points outside");
  nlohmann::json loop = j;
  loop["families"]["eltwise_unary"]["trees"][0]["left"][0] = 0;  // a node that is its own child
  refused(loop, "points outside");
  nlohmann::json feat = j;
  feat["families"]["eltwise_unary"]["feature_names"][0] = "renamed";
  refused(feat, "features are not this Tessera's");
  nlohmann::json nan = j;
  nan["families"]["eltwise_unary"]["trees"][0]["value"][0] = "x";
  refused(nan, "non-number");
  nlohmann::json other = j;
  other["machine"]["kernel_tier"] = "avx9";
  auto p = Predictor::from_json(other.dump(), "other machine");
  ASSERT_TRUE(p.ok());
  bool warned = false;
  for (const std::string& w : (*p)->warnings()) warned |= w.find("kernel tier: avx9 ->") != std::string::npos;
  EXPECT_TRUE(warned);
  EXPECT_EQ(Predictor::load("/nonexistent/predictor.json").status().code(), StatusCode::kNotFound);
}

TEST(Train, ErrorStatsAreTheTextbookOnes) {
  const ErrorStats e = error_stats({100, 200, 300, 400}, {110, 150, 300, 500});
  EXPECT_EQ(e.n, 4u);
  EXPECT_DOUBLE_EQ(e.mape, (0.1 + 0.25 + 0 + 0.25) / 4);
  EXPECT_DOUBLE_EQ(e.within10, 0.5);
  EXPECT_DOUBLE_EQ(e.within25, 1.0);
  EXPECT_NEAR(e.r2, 1 - (100.0 + 2500 + 0 + 10000) / 50000, 1e-12);
}

TEST(Train, AnEmptyDatasetSaysSweepFirst) {
  const std::string path = temp_path("tessera_empty.sqlite");
  std::filesystem::remove(path);
  auto d = Dataset::open(path);
  ASSERT_TRUE(d.ok());
  auto r = train_predictor(**d, {}, path + ".json");
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("tessera sweep"), std::string::npos);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace tessera::perfmodel

namespace tessera::perfmodel {
namespace {

// A hand-built graph after the passes: Conv (+relu, + residual) -> GlobalAveragePool -> Flatten -> Gemm, and a
// node the predictor has no op for.
TEST(ModelOps, EachNodeBecomesItsDeviceOpsQuery) {
  graph::Graph g;
  auto value = [&](const char* name, std::vector<int64_t> dims, bool constant = false) {
    graph::Value v{.name = name, .dims = dims, .has_shape = true};
    if (constant) {
      int64_t n = 1;
      for (int64_t d : dims) n *= d;
      v.constant = graph::HostTensor::floats(dims, std::vector<float>(static_cast<size_t>(n), 0.5f));
    }
    return g.add_value(std::move(v));
  };
  const int x = value("x", {2, 3, 16, 16}), w = value("w", {8, 3, 3, 3}, true), skip = value("skip", {2, 8, 8, 8});
  const int y = value("y", {2, 8, 8, 8}), p = value("p", {2, 8, 1, 1}), f = value("f", {2, 8});
  const int fc = value("fc", {10, 8}, true), out = value("out", {2, 10}), z = value("z", {2, 10});
  g.inputs = {x, skip};
  graph::Node conv{.name = "conv", .op_type = "Conv", .inputs = {x, w, -1, skip}, .outputs = {y}};
  conv.attrs["strides"] = {.kind = graph::Attribute::Kind::INTS, .ints = {2, 2}};
  conv.attrs["pads"] = {.kind = graph::Attribute::Kind::INTS, .ints = {1, 1, 1, 1}};
  conv.attrs["tessera_activation"] = {.kind = graph::Attribute::Kind::STRING, .s = "relu"};
  graph::Node gemm{.name = "fc", .op_type = "Gemm", .inputs = {f, fc}, .outputs = {out}};
  gemm.attrs["transB"] = {.kind = graph::Attribute::Kind::INT, .i = 1};
  g.nodes = {conv,
             {.name = "gap", .op_type = "GlobalAveragePool", .inputs = {y}, .outputs = {p}},
             {.name = "flat", .op_type = "Flatten", .inputs = {p}, .outputs = {f}},
             gemm,
             {.name = "odd", .op_type = "Einsum", .inputs = {out}, .outputs = {z}}};
  g.outputs = {z};
  auto ops = model_ops(g, {.activations = DataType::BFLOAT16, .weights = DataType::BFLOAT8_B});
  ASSERT_TRUE(ops.ok()) << ops.status().to_string();
  ASSERT_EQ(ops->size(), 7u);  // the two 4-d inputs' layout conversions, then the nodes
  for (int i : {0, 1}) {
    EXPECT_EQ((*ops)[static_cast<size_t>(i)].op_type, "layout");
    EXPECT_EQ((*ops)[static_cast<size_t>(i)].query->op, "permute");
  }
  EXPECT_EQ((*ops)[1].query->inputs[0].logical_shape, (std::vector<uint32_t>{2, 3, 16, 16}));  // x, NCHW
  ops->erase(ops->begin(), ops->begin() + 2);
  const OpQuery& c = *(*ops)[0].query;
  EXPECT_EQ(c.op, "conv2d");
  EXPECT_EQ(c.inputs[0].logical_shape, (std::vector<uint32_t>{2, 3, 16, 16}));
  EXPECT_EQ(c.inputs[0].dtype, DataType::BFLOAT16);
  EXPECT_EQ(c.num("out_channels"), 8);
  EXPECT_EQ(c.args.at("kernel_size").numbers, (std::vector<double>{3, 3}));
  EXPECT_EQ(c.args.at("stride").numbers, (std::vector<double>{2, 2}));
  EXPECT_EQ(c.args.at("padding").numbers, (std::vector<double>{1, 1, 1, 1}));
  EXPECT_EQ(c.word("activation"), "relu");
  EXPECT_EQ(c.word("weights_dtype"), "bfloat8_b");
  EXPECT_EQ(c.num("residual"), 1);
  EXPECT_EQ((*ops)[1].query->op, "global_avg_pool2d");
  EXPECT_TRUE((*ops)[2].view);
  EXPECT_FALSE((*ops)[2].query);
  EXPECT_EQ((*ops)[3].query->op, "linear");
  EXPECT_EQ((*ops)[3].query->num("out_features"), 10);
  EXPECT_FALSE((*ops)[4].query);
  EXPECT_NE((*ops)[4].note.find("not in the predictor's op table"), std::string::npos);
  g.value(y).has_shape = false;
  EXPECT_EQ(model_ops(g, {}).status().code(), StatusCode::kInvalidArgument);
}


TEST(ModelOps, ElementWiseOpsOfMapsAreQueriedChannelsLast) {
  graph::Graph g;
  auto value = [&](const char* name, std::vector<int64_t> dims) {
    return g.add_value({.name = name, .dims = dims, .has_shape = true});
  };
  const int x = value("x", {1, 16, 7, 9}), s = value("s", {1, 16, 1, 1}), b = value("b", {16, 1, 1});
  const int y = value("y", {1, 16, 7, 9}), z = value("z", {1, 16, 7, 9}), r = value("r", {1, 16, 7, 9});
  g.inputs = {x, s, b};
  g.nodes = {{.name = "se", .op_type = "Mul", .inputs = {x, s}, .outputs = {y}},
             {.name = "bias", .op_type = "Add", .inputs = {y, b}, .outputs = {z}},
             {.name = "act", .op_type = "Relu", .inputs = {z}, .outputs = {r}}};
  g.outputs = {r};
  auto ops = model_ops(g, {});
  ASSERT_TRUE(ops.ok()) << ops.status().to_string();
  ASSERT_EQ(ops->size(), 3u + 3u);  // x's and s's conversions to NHWC, the nodes, r's back to NCHW
  EXPECT_EQ(ops->back().query->inputs[0].logical_shape, (std::vector<uint32_t>{1, 7, 9, 16}));  // r, NHWC
  EXPECT_EQ(ops->back().query->args.at("perm").numbers, (std::vector<double>{0, 3, 1, 2}));
  ops->erase(ops->begin(), ops->begin() + 2);
  EXPECT_EQ((*ops)[0].query->inputs[0].logical_shape, (std::vector<uint32_t>{1, 7, 9, 16}));
  EXPECT_EQ((*ops)[0].query->inputs[1].logical_shape, (std::vector<uint32_t>{1, 1, 1, 16}));
  EXPECT_EQ((*ops)[1].query->inputs[1].logical_shape, (std::vector<uint32_t>{1, 1, 1, 16}));  // (16, 1, 1) aligned
  EXPECT_EQ((*ops)[2].query->inputs[0].logical_shape, (std::vector<uint32_t>{1, 7, 9, 16}));
}

}  // namespace
}  // namespace tessera::perfmodel
