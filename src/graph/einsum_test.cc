// Einsum: the host kernel against loops written out by hand, the equation's
// errors, and lower_einsum's rewrite against the host kernel for the forms
// models use (batched matmul, attention, outer product, transposes, sums,
// ellipses) and the forms it leaves alone (diagonals, three operands).
#include <cmath>

#include "tessera/graph/host_eval.h"
#include "tessera/graph/passes.h"
#include "tessera/graph/shape_inference.h"
#include "test_util.h"

namespace tessera::graph {
namespace {

using ::testing::HasSubstr;

HostTensor random(std::vector<int64_t> dims, uint32_t seed) {
  return HostTensor::floats(dims, tessera::testing::random_values(static_cast<size_t>(dims_volume(dims)), seed, 1.0f));
}

Node einsum(const std::string& eq, size_t inputs) {
  Node n{.name = "e", .op_type = "Einsum"};
  for (size_t k = 0; k < inputs; ++k) n.inputs.push_back(static_cast<int>(k));
  n.outputs = {static_cast<int>(inputs)};
  n.attrs["equation"] = {.kind = Attribute::Kind::STRING, .s = eq};
  return n;
}

StatusOr<HostTensor> run(const std::string& eq, std::vector<const HostTensor*> ins) {
  TS_ASSIGN_OR_RETURN(auto outs, evaluate(einsum(eq, ins.size()), ins, 13));
  return outs[0];
}

TEST(Einsum, HostKernelMatchesLoops) {
  const HostTensor a = random({2, 3, 4}, 1), b = random({2, 4, 5}, 2);
  ASSERT_OK_AND_ASSIGN(HostTensor y, run("bij,bjk->bik", {&a, &b}));
  ASSERT_EQ(y.dims, (std::vector<int64_t>{2, 3, 5}));
  for (int bi = 0; bi < 2; ++bi)
    for (int i = 0; i < 3; ++i)
      for (int k = 0; k < 5; ++k) {
        double s = 0;
        for (int j = 0; j < 4; ++j) s += double{a.f[(bi * 3 + i) * 4 + j]} * b.f[(bi * 4 + j) * 5 + k];
        EXPECT_NEAR(y.f[(bi * 3 + i) * 5 + k], s, 1e-6);
      }
  // Implicit output (labels seen once, sorted): "ij,jk" is "ij,jk->ik"; a trace; a transpose; a diagonal.
  const HostTensor m = random({3, 3}, 3);
  ASSERT_OK_AND_ASSIGN(HostTensor tr, run("ii", {&m}));
  EXPECT_NEAR(tr.f[0], double{m.f[0]} + m.f[4] + m.f[8], 1e-6);
  ASSERT_OK_AND_ASSIGN(HostTensor t, run("ij->ji", {&m}));
  EXPECT_EQ(t.f[1], m.f[3]);
  ASSERT_OK_AND_ASSIGN(HostTensor d, run("ii->i", {&m}));
  EXPECT_EQ(d.f, (std::vector<float>{m.f[0], m.f[4], m.f[8]}));
  const HostTensor p = random({3, 4}, 8), q = random({4, 5}, 9);
  ASSERT_OK_AND_ASSIGN(HostTensor ik, run("ij,jk", {&p, &q}));
  EXPECT_EQ(ik.dims, (std::vector<int64_t>{3, 5}));
}

TEST(Einsum, EllipsisBroadcastsAndErrorsNameTheEquation) {
  const HostTensor a = random({2, 1, 3, 4}, 4), b = random({5, 4, 6}, 5);
  ASSERT_OK_AND_ASSIGN(HostTensor y, run("...ij,...jk->...ik", {&a, &b}));
  EXPECT_EQ(y.dims, (std::vector<int64_t>{2, 5, 3, 6}));
  const HostTensor c = random({3, 4}, 6), e = random({5, 6}, 7);
  EXPECT_THAT(run("ij,jk->ik", {&c, &e}).status().message(), HasSubstr("label 'j'"));
  EXPECT_THAT(run("ij->ik", {&c}).status().message(), HasSubstr("output label 'k'"));
  EXPECT_THAT(run("ijk->ij", {&c}).status().message(), HasSubstr("operand 'ijk'"));
  EXPECT_THAT(run("ij,jk->ik", {&c}).status().message(), HasSubstr("2 operands for 1 inputs"));
  EXPECT_THAT(run("i1->i", {&c}).status().message(), HasSubstr("operand 'i1'"));
}

// A graph of one Einsum node over graph inputs of these shapes.
Graph one_einsum(const std::string& eq, const std::vector<std::vector<int64_t>>& shapes) {
  Graph g;
  g.opset = 13;
  Node n = einsum(eq, shapes.size());
  for (size_t k = 0; k < shapes.size(); ++k) {
    g.inputs.push_back(g.add_value({.name = "x" + std::to_string(k), .dims = shapes[k], .has_shape = true}));
    n.inputs[k] = g.inputs.back();
  }
  n.outputs = {g.add_value({.name = "y"})};
  g.outputs = n.outputs;
  g.nodes.push_back(n);
  return g;
}

// Every node on the host, in order: the graph's outputs.
std::vector<HostTensor> run_graph(const Graph& g, const std::vector<HostTensor>& inputs) {
  std::vector<std::optional<HostTensor>> vals(g.values.size());
  for (size_t k = 0; k < g.values.size(); ++k) vals[k] = g.values[k].constant;
  for (size_t k = 0; k < g.inputs.size(); ++k) vals[static_cast<size_t>(g.inputs[k])] = inputs[k];
  for (const Node& n : g.nodes) {
    std::vector<const HostTensor*> ins;
    for (int v : n.inputs) ins.push_back(v < 0 ? nullptr : &*vals[static_cast<size_t>(v)]);
    auto outs = evaluate(n, ins, g.opset);
    EXPECT_TRUE(outs.ok()) << n.label() << ": " << outs.status().to_string();
    if (!outs.ok()) return {};
    for (size_t k = 0; k < n.outputs.size(); ++k) vals[static_cast<size_t>(n.outputs[k])] = (*outs)[k];
  }
  std::vector<HostTensor> r;
  for (int o : g.outputs) r.push_back(*vals[static_cast<size_t>(o)]);
  return r;
}

TEST(Einsum, LoweringToMatMulKeepsResults) {
  struct Case {
    std::string eq;
    std::vector<std::vector<int64_t>> shapes;
    int rewrites;
  };
  const Case cases[] = {
      {"bhqd,bhkd->bhqk", {{2, 3, 5, 4}, {2, 3, 6, 4}}, 1},  // attention scores
      {"bhqk,bhkd->bhqd", {{2, 3, 5, 6}, {2, 3, 6, 4}}, 1},  // attention values
      {"bhdn,bhdm->bhnm", {{1, 2, 8, 6}, {1, 2, 8, 6}}, 1},
      {"nchw,oc->nohw", {{2, 3, 4, 5}, {6, 3}}, 1},          // a 1x1 conv
      {"ij,k->ijk", {{3, 4}, {5}}, 1},                       // an outer product
      {"bij,bjk", {{2, 3, 4}, {2, 4, 5}}, 1},                // implicit output
      {"...ij,...jk->...ik", {{2, 1, 3, 4}, {5, 4, 6}}, 1},  // broadcast batch
      {"ijk,jl->li", {{3, 4, 5}, {4, 2}}, 1},                // k only in the first: summed first
      {"ij->ji", {{3, 4}}, 1},
      {"ijk->k", {{3, 4, 5}}, 1},
      {"ii->i", {{3, 3}}, 0},                         // a diagonal: the host
      {"ij,jk,kl->il", {{2, 3}, {3, 4}, {4, 5}}, 0},  // three operands: the host
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.eq);
    Graph g = one_einsum(c.eq, c.shapes);
    ASSERT_OK(infer_shapes(g));
    std::vector<HostTensor> xs;
    for (size_t k = 0; k < c.shapes.size(); ++k) xs.push_back(random(c.shapes[k], 10 + static_cast<uint32_t>(k)));
    const auto want = run_graph(g, xs);
    const PassReport r = lower_einsum(g);
    EXPECT_EQ(r.rewrites, c.rewrites);
    for (const Node& n : g.nodes) EXPECT_EQ(n.op_type == "Einsum", c.rewrites == 0) << n.label();
    ASSERT_OK(infer_shapes(g));  // the rewrite's shapes agree with shape inference
    const auto got = run_graph(g, xs);
    ASSERT_EQ(got.size(), 1u);
    ASSERT_EQ(got[0].dims, want[0].dims);
    for (size_t k = 0; k < got[0].f.size(); ++k) EXPECT_NEAR(got[0].f[k], want[0].f[k], 1e-5) << k;
  }
}

}  // namespace
}  // namespace tessera::graph
