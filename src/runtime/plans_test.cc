// The planning passes alone (plans.h), on small graphs built here: which
// runs micro-batch, which values stay bfloat16, when each value is released.
#include "plans.h"

#include <algorithm>

#include "test_util.h"

namespace tessera::runtime {
namespace {

using graph::Graph;
using graph::Node;

// Builds graphs in node order; producers are kept as Graph::topological_sort would.
struct Builder {
  Graph g;
  int value(const std::string& name, std::vector<int64_t> dims) {
    return g.add_value({.name = name, .dims = std::move(dims), .has_shape = true});
  }
  int constant(const std::string& name, std::vector<int64_t> dims) {
    std::vector<float> v(static_cast<size_t>(graph::dims_volume(dims)), 0.5f);
    return g.add_value({.name = name, .dims = dims, .has_shape = true, .constant = graph::HostTensor::floats(dims, v)});
  }
  Node& node(const std::string& op, std::vector<int> in, std::vector<int> out) {
    Node n;
    n.op_type = op;
    n.name = op + std::to_string(g.nodes.size());
    n.inputs = std::move(in);
    n.outputs = std::move(out);
    for (int o : n.outputs) g.value(o).producer = static_cast<int>(g.nodes.size());
    g.nodes.push_back(std::move(n));
    return g.nodes.back();
  }
};

const std::vector<int64_t> kMap = {8, 16, 32, 32};  // 512 KiB of float32 per value over the batch

// x -> Relu -> a -> Relu -> b -> Relu -> c -> Relu -> y: each node moves
// 1 MiB over the batch, 256 KiB per group of two images.
Builder relu_chain() {
  Builder b;
  const int x = b.value("x", kMap), a = b.value("a", kMap), v = b.value("b", kMap), c = b.value("c", kMap),
            y = b.value("y", kMap);
  b.g.inputs = {x};
  b.node("Relu", {x}, {a});
  b.node("Relu", {a}, {v});
  b.node("Relu", {v}, {c});
  b.node("Relu", {c}, {y});
  b.g.outputs = {y};
  return b;
}

constexpr MicroBatchBudget kBudget{.cache_bytes = 256 * 1024};

TEST(PlanMicroBatches, ASpillingChainOfPerImageOpsRunsInGroups) {
  const Graph g = relu_chain().g;
  const std::vector<MicroBatch> runs = find_micro_batches(g, 2, kBudget);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].begin, 0u);
  EXPECT_EQ(runs[0].end, 4u);
  EXPECT_EQ(runs[0].in, g.inputs[0]);
  EXPECT_EQ(runs[0].out, g.outputs[0]);
  EXPECT_EQ(runs[0].groups, 4u);
  EXPECT_EQ(runs[0].per, 2u);
}

TEST(PlanMicroBatches, NoRunWhereTheBatchFitsOrGroupsDoNot) {
  const Graph g = relu_chain().g;
  // The whole batch fits: nothing spills, nothing to save.
  EXPECT_TRUE(find_micro_batches(g, 2, {.cache_bytes = 4u << 20}).empty());
  // A group of four images (512 KiB per node) does not fit 256 KiB.
  EXPECT_TRUE(find_micro_batches(g, 4, kBudget).empty());
  // 3 does not divide 8; 8 is the whole batch.
  EXPECT_TRUE(find_micro_batches(g, 3, kBudget).empty());
  EXPECT_TRUE(find_micro_batches(g, 8, kBudget).empty());
}

TEST(PlanMicroBatches, AnOpThatMixesImagesEndsTheRun) {
  Builder b = relu_chain();
  // A Softmax over the batch after the chain: the run stops before it.
  const int s = b.value("s", kMap);
  b.node("Softmax", {b.g.outputs[0]}, {s}).attrs["axis"] = {.kind = graph::Attribute::Kind::INT, .i = 0};
  b.g.outputs = {s};
  const std::vector<MicroBatch> runs = find_micro_batches(b.g, 2, kBudget);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].end, 4u);
}

TEST(PlanMicroBatches, OptionsAndDeviceDecideWhetherToLook) {
  const Graph g = relu_chain().g;
  DeviceDescriptor one_bank;
  one_bank.num_dram_banks = 1;
  one_bank.shared_cache_size = 512 * 1024;  // a 256 KiB budget
  CompileOptions opt;
  ASSERT_OK_AND_ASSIGN(std::vector<MicroBatch> runs, plan_micro_batches(g, opt, one_bank, 2));
  EXPECT_EQ(runs.size(), 1u);
  opt.micro_batch = 0u;  // off
  ASSERT_OK_AND_ASSIGN(runs, plan_micro_batches(g, opt, one_bank, 2));
  EXPECT_TRUE(runs.empty());
  opt.micro_batch = 3u;
  EXPECT_THAT(plan_micro_batches(g, opt, one_bank, 2).status().message(),
              ::testing::HasSubstr("does not divide the batch of 8"));
  DeviceDescriptor banks = one_bank;
  banks.num_dram_banks = 12;  // batch views need one bank
  ASSERT_OK_AND_ASSIGN(runs, plan_micro_batches(g, CompileOptions{}, banks, 2));
  EXPECT_TRUE(runs.empty());
}

TEST(PlanMicroBatches, ApplyRewritesTheRunOntoGroupValues) {
  Graph g = relu_chain().g;
  std::vector<MicroBatch> runs = find_micro_batches(g, 2, kBudget);
  ASSERT_EQ(runs.size(), 1u);
  const size_t values = g.values.size();
  const std::vector<std::string> report = apply_micro_batches(g, runs);
  ASSERT_EQ(report.size(), 1u);
  EXPECT_THAT(report[0], ::testing::HasSubstr("4 groups of 2 image(s)"));
  const MicroBatch& mb = runs[0];
  EXPECT_EQ(g.values.size(), values + 2);
  EXPECT_EQ(g.value(mb.in_part).dims[0], 2);
  EXPECT_EQ(g.value(mb.out_part).dims[0], 2);
  EXPECT_EQ(g.nodes[0].inputs[0], mb.in_part);
  EXPECT_EQ(g.nodes[3].outputs[0], mb.out_part);
  EXPECT_EQ(g.value(mb.out_part).producer, 3);
  EXPECT_EQ(g.value(mb.out).producer, -1);
  EXPECT_EQ(g.value(g.nodes[1].inputs[0]).dims[0], 2);  // inside the run: one group's images
  EXPECT_EQ(g.value(mb.in).dims[0], 8);                 // the whole batch stays whole
}

// x -> Conv -> a -> MaxPool -> p -> Conv -> y, each conv's first input
// rounded by `rounds`.
Builder conv_pool_conv() {
  Builder b;
  const std::vector<int64_t> d = {1, 16, 8, 8};
  const int x = b.value("x", d), w = b.constant("w", {16, 16, 3, 3}), a = b.value("a", d), p = b.value("p", d),
            w2 = b.constant("w2", {16, 16, 3, 3}), y = b.value("y", d);
  b.g.inputs = {x};
  b.node("Conv", {x, w}, {a});
  b.node("MaxPool", {a}, {p});
  b.node("Conv", {p, w2}, {y});
  b.g.outputs = {y};
  return b;
}

bool conv_data_input(const Node& n, size_t slot) { return n.op_type == "Conv" && slot == 0; }

TEST(PlanBfloat16Values, ValuesOnlyRoundingReadersSeeStayBfloat16) {
  const Graph g = conv_pool_conv().g;
  const std::vector<bool> bf16 = plan_bfloat16_values(g, {}, conv_data_input);
  EXPECT_TRUE(bf16[static_cast<size_t>(g.find("a"))]);   // read by a MaxPool whose result stays
  EXPECT_TRUE(bf16[static_cast<size_t>(g.find("p"))]);   // read by a rounding conv
  EXPECT_FALSE(bf16[static_cast<size_t>(g.find("y"))]);  // a graph output
  EXPECT_FALSE(bf16[static_cast<size_t>(g.find("x"))]);  // a graph input
  // Nobody rounds: everything stays float32.
  const std::vector<bool> none = plan_bfloat16_values(g, {}, [](const Node&, size_t) { return false; });
  EXPECT_EQ(std::count(none.begin(), none.end(), true), 0);
}

TEST(PlanBfloat16Values, AnExactReaderKeepsTheValueAndWhatPassesItOnFloat32) {
  Builder b = conv_pool_conv();
  const int r = b.value("r", {1, 16, 8, 8});
  b.node("Relu", {b.g.find("p")}, {r});  // reads p exactly
  b.g.outputs.push_back(r);
  const std::vector<bool> bf16 = plan_bfloat16_values(b.g, {}, conv_data_input);
  EXPECT_FALSE(bf16[static_cast<size_t>(b.g.find("p"))]);
  // The MaxPool's result is float32, so its input must be too.
  EXPECT_FALSE(bf16[static_cast<size_t>(b.g.find("a"))]);
}

TEST(PlanBfloat16Values, SiluConvsAndMicroBatchValuesKeepFloat32) {
  Builder b = conv_pool_conv();
  b.g.nodes[0].attrs["tessera_activation"] = {.kind = graph::Attribute::Kind::STRING, .s = "silu"};
  std::vector<bool> bf16 = plan_bfloat16_values(b.g, {}, conv_data_input);
  EXPECT_FALSE(bf16[static_cast<size_t>(b.g.find("a"))]);  // oneDNN's SiLU would round twice
  EXPECT_FALSE(bf16[static_cast<size_t>(b.g.find("p"))]);  // the MaxPool's input did not stay
  Builder c = conv_pool_conv();
  const MicroBatch mb{.begin = 1, .end = 2, .in = c.g.find("a"), .out = c.g.find("p")};
  bf16 = plan_bfloat16_values(c.g, {&mb, 1}, conv_data_input);
  EXPECT_FALSE(bf16[static_cast<size_t>(c.g.find("a"))]);
  EXPECT_FALSE(bf16[static_cast<size_t>(c.g.find("p"))]);
}

// Where value v is released: the node whose release list holds it, or -1.
int released_at(const std::vector<std::vector<int>>& release, int v) {
  for (size_t n = 0; n < release.size(); ++n)
    if (std::count(release[n].begin(), release[n].end(), v)) return static_cast<int>(n);
  return -1;
}

TEST(PlanLiveness, EachIntermediateGoesAfterItsLastReader) {
  Builder b = relu_chain();
  // b is read again by the last node: it lives until then.
  b.g.nodes[3].inputs.push_back(b.g.find("b"));
  const int mask = b.value("mask", kMap);
  b.g.nodes[1].outputs.push_back(mask);  // an output nobody reads
  const auto release = plan_liveness(b.g, {}, {});
  ASSERT_EQ(release.size(), 4u);
  EXPECT_EQ(released_at(release, b.g.find("a")), 1);
  EXPECT_EQ(released_at(release, b.g.find("b")), 3);
  EXPECT_EQ(released_at(release, b.g.find("c")), 3);
  EXPECT_EQ(released_at(release, mask), 1);
  EXPECT_EQ(released_at(release, b.g.find("x")), -1);  // the caller's
  EXPECT_EQ(released_at(release, b.g.find("y")), -1);  // a graph output
}

TEST(PlanLiveness, FusedConcatInputsLiveToTheirConvAndConstantsStay) {
  Builder b = conv_pool_conv();
  // The second conv also reads `a` through a fused concat.
  const std::vector<FusedConcat> fused = {{2, {b.g.find("a")}}};
  const auto release = plan_liveness(b.g, fused, {});
  EXPECT_EQ(released_at(release, b.g.find("a")), 2);
  EXPECT_EQ(released_at(release, b.g.find("p")), 2);
  EXPECT_EQ(released_at(release, b.g.find("w")), -1);
  EXPECT_EQ(released_at(release, b.g.find("w2")), -1);
}

TEST(PlanLiveness, AMicroBatchRunReleasesItsOwnInputAndOutputPart) {
  Graph g = relu_chain().g;
  std::vector<MicroBatch> runs = find_micro_batches(g, 2, kBudget);
  apply_micro_batches(g, runs);
  const auto release = plan_liveness(g, {}, runs);
  EXPECT_EQ(released_at(release, runs[0].out_part), -1);  // read by the run after each group
  EXPECT_EQ(released_at(release, runs[0].in), -1);        // the graph input here; a run's input otherwise
  EXPECT_EQ(released_at(release, runs[0].in_part), 0);    // one group's view, after its reader
}

}  // namespace
}  // namespace tessera::runtime
