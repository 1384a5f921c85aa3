// The ONNX importer: what it reads, and clear errors (never a crash) for
// malformed and hostile files, including a bounded mutation fuzz.
#include "tessera/import/onnx.h"

#include <algorithm>
#include <random>

#include "onnx_model_builder.h"
#include "tessera/graph/host_tail.h"
#include "tessera/graph/shape_inference.h"
#include "test_util.h"

namespace tessera::importer {
namespace {

using ::testing::HasSubstr;
using testing_onnx::ModelBuilder;

TEST(OnnxImport, SmallCnnImportsWithShapes) {
  ModelBuilder b = testing_onnx::small_cnn(2);
  ASSERT_OK_AND_ASSIGN(graph::Graph g, import_onnx_bytes(b.bytes()));
  EXPECT_EQ(g.opset, 13);
  ASSERT_EQ(g.inputs.size(), 1u);
  EXPECT_EQ(g.value(g.outputs[0]).dims, (std::vector<int64_t>{2, 10}));
  EXPECT_EQ(g.value(g.outputs[1]).dims, (std::vector<int64_t>{2, 8, 16, 16}));
  EXPECT_EQ(g.nodes.size(), 14u);
}

TEST(OnnxImport, UnsortedNodesConstantsIdentityAndSymbolicDims) {
  ModelBuilder b(11);
  b.input("x", {-1, 4});
  b.output("y");
  b.node("Relu", {"mid"}, {"y"});  // listed before its producer
  b.node("Identity", {"sum"}, {"mid"});
  b.node("Add", {"x", "k"}, {"sum"});
  auto* k = b.node("Constant", {}, {"k"});
  auto* a = k->add_attribute();
  a->set_name("value_floats");
  a->set_type(onnx::AttributeProto::FLOATS);
  for (float v : {1.0f, 2.0f, 3.0f, 4.0f}) a->add_floats(v);
  OnnxImportOptions o;
  o.symbolic_dim = 3;
  ASSERT_OK_AND_ASSIGN(graph::Graph g, import_onnx_bytes(b.bytes(), o));
  ASSERT_EQ(g.nodes.size(), 2u);  // the Identity is gone
  EXPECT_EQ(g.nodes[0].op_type, "Add");
  EXPECT_EQ(g.value(g.inputs[0]).dims, (std::vector<int64_t>{3, 4}));
  EXPECT_TRUE(g.is_constant(g.nodes[0].inputs[1]));
  o.input_shapes["x"] = {5, 4};
  ASSERT_OK_AND_ASSIGN(g, import_onnx_bytes(b.bytes(), o));
  EXPECT_EQ(g.value(g.outputs[0]).dims, (std::vector<int64_t>{5, 4}));
}

// An If whose branches read values of the main graph: each branch becomes
// a graph::Graph attribute with those values as its inputs, and the If node
// reads them too (named in tessera_captures), so that their producers stay
// ordered before it. The host runs the branch the condition picks; the
// If, with what follows it, is the model's host tail.
TEST(OnnxImport, IfBranchesReadTheMainGraph) {
  ModelBuilder b(13);
  b.input("x", {2, 3});
  b.output("y");
  b.node("Relu", {"x"}, {"r"});
  b.node("ReduceSum", {"r"}, {"total"});
  b.node("Greater", {"total", "zero"}, {"cond"});
  b.initializer("zero", {}, {0.0f});
  b.initializer("two", {}, {2.0f});
  auto* n = b.node("If", {"cond"}, {"picked"});
  auto branch = [&](const char* name, const char* op) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::GRAPH);
    onnx::GraphProto* g = a->mutable_g();
    auto* m = g->add_node();
    m->set_op_type(op);
    m->add_input("r");
    m->add_input("two");
    m->add_output(std::string(name) + "_out");
    g->add_output()->set_name(std::string(name) + "_out");
  };
  branch("then_branch", "Mul");
  branch("else_branch", "Sub");
  b.node("Neg", {"picked"}, {"y"});
  OnnxImportOptions o;
  o.infer_shapes = false;
  ASSERT_OK_AND_ASSIGN(graph::Graph g, import_onnx_bytes(b.bytes(), o));
  const auto it = std::find_if(g.nodes.begin(), g.nodes.end(), [](const graph::Node& x) { return x.op_type == "If"; });
  ASSERT_NE(it, g.nodes.end());
  EXPECT_EQ(it->attr_strings("tessera_captures"), (std::vector<std::string>{"r", "two"}));
  ASSERT_EQ(it->inputs.size(), 3u);
  EXPECT_EQ(g.value(it->inputs[1]).name, "r");
  ASSERT_TRUE(it->attrs.at("then_branch").g);
  EXPECT_EQ(it->attrs.at("then_branch").g->inputs.size(), 2u);
  ASSERT_OK_AND_ASSIGN(std::optional<graph::HostTail> tail, graph::HostTail::split(g));
  ASSERT_TRUE(tail);
  EXPECT_EQ(tail->num_nodes(), 2u);  // If, Neg
  ASSERT_OK(graph::infer_shapes(g));
  ASSERT_OK(tail->bind_prefix(g));
  // The prefix's outputs: what the tail reads, in the order it reads them (the
  // condition, then r; two is a constant the tail holds).
  ASSERT_EQ(g.outputs.size(), 2u);
  const graph::HostTensor r = graph::HostTensor::floats({2, 3}, {1, 2, 3, 0, 0, 1});
  ASSERT_OK_AND_ASSIGN(std::vector<graph::HostTensor> y,
                       tail->run({graph::HostTensor::floats({1}, {1}), r}));
  ASSERT_EQ(y.size(), 1u);
  EXPECT_EQ(y[0].f, (std::vector<float>{-2, -4, -6, 0, 0, -2}));
  ASSERT_OK_AND_ASSIGN(y, tail->run({graph::HostTensor::floats({1}, {0}), r}));
  EXPECT_EQ(y[0].f, (std::vector<float>{1, 0, -1, 2, 2, 1}));
  // A Loop body (declared inputs) is refused, naming the attribute.
  ModelBuilder l(13);
  l.input("x", {2});
  l.output("y");
  auto* loop = l.node("Loop", {"", "", "x"}, {"y"});
  auto* body = loop->add_attribute();
  body->set_name("body");
  body->set_type(onnx::AttributeProto::GRAPH);
  body->mutable_g()->add_input()->set_name("i");
  EXPECT_THAT(import_onnx_bytes(l.bytes(), o).status().message(),
              HasSubstr("attribute 'body': a subgraph with declared inputs (a Loop or Scan body) is not supported"));
}

TEST(OnnxImport, MalformedFilesGiveClearErrors) {
  const std::string good = testing_onnx::small_cnn().bytes();
  // Truncated.
  auto r = import_onnx_bytes(good.substr(0, good.size() / 2));
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("does not parse"));
  EXPECT_EQ(import_onnx("/nonexistent/model.onnx").status().code(), StatusCode::kNotFound);
  // A wrong attribute type.
  {
    ModelBuilder b = testing_onnx::small_cnn();
    auto* c1 = b.graph().mutable_node(0);
    c1->mutable_attribute(0)->set_type(onnx::AttributeProto::FLOAT);
    c1->mutable_attribute(0)->set_f(1.0f);
    EXPECT_THAT(import_onnx_bytes(b.bytes()).status().message(),
                HasSubstr("Conv 'c1': attribute 'pads' is FLOAT, expected INTS"));
  }
  // A huge declared input shape.
  {
    ModelBuilder b;
    b.input("x", {1 << 30, 1 << 30, 1 << 30});
    b.node("Relu", {"x"}, {"y"});
    b.output("y");
    EXPECT_THAT(import_onnx_bytes(b.bytes()).status().message(), HasSubstr("over the limit"));
  }
  // An initializer whose data does not match its dims.
  {
    ModelBuilder b;
    b.input("x", {4});
    b.initializer("w", {1000000000, 1000}, {1, 2});
    b.node("Add", {"x", "w"}, {"y"});
    b.output("y");
    EXPECT_THAT(import_onnx_bytes(b.bytes()).status().message(), HasSubstr("initializer 'w'"));
  }
  // A cycle.
  {
    ModelBuilder b;
    b.input("x", {4});
    b.node("Add", {"x", "b"}, {"a"});
    b.node("Relu", {"a"}, {"b"});
    b.output("b");
    EXPECT_THAT(import_onnx_bytes(b.bytes()).status().message(), HasSubstr("cycle"));
  }
  // A missing input.
  {
    ModelBuilder b;
    b.input("x", {4});
    b.node("Add", {"x", "ghost"}, {"y"});
    b.output("y");
    EXPECT_THAT(import_onnx_bytes(b.bytes()).status().message(), HasSubstr("'ghost'"));
  }
  // Outside Tessera's scope: UNIMPLEMENTED naming what.
  {
    ModelBuilder b(18);
    b.input("x", {4});
    b.node("Relu", {"x"}, {"y"});
    b.output("y");
    EXPECT_EQ(import_onnx_bytes(b.bytes()).status().code(), StatusCode::kUnimplemented);
    ModelBuilder c;
    c.input("x", {4});
    c.node("FusedGemm", {"x"}, {"y"})->set_domain("com.microsoft");
    c.output("y");
    EXPECT_THAT(import_onnx_bytes(c.bytes()).status().message(), HasSubstr("domain 'com.microsoft'"));
    ModelBuilder d;
    d.input("x", {4});
    d.node("Frobnicate", {"x"}, {"y"});
    d.output("y");
    EXPECT_THAT(import_onnx_bytes(d.bytes()).status().message(), HasSubstr("op type 'Frobnicate' is not supported"));
  }
}

// Random byte flips, truncations and splices of a valid model: every result
// is a model or an error, never a crash (run under ASan in CI). The
// libFuzzer-style target is tests/fuzz/onnx_import_fuzz.cc.
TEST(OnnxImport, MutatedModelsNeverCrash) {
  const std::string good = testing_onnx::small_cnn().bytes();
  std::mt19937 rng(1234);
  int parsed = 0;
  for (int it = 0; it < 20000; ++it) {
    std::string m = good;
    const int edits = 1 + static_cast<int>(rng() % 8);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % m.size();
      switch (rng() % 4) {
        case 0: m[at] = static_cast<char>(rng()); break;
        case 1: m.resize(at + 1); break;
        case 2: m.insert(at, good.substr(rng() % good.size(), rng() % 64)); break;
        default: m[at] = static_cast<char>(m[at] ^ (1 << (rng() % 8))); break;
      }
      if (m.empty()) m = "x";
    }
    auto r = import_onnx_bytes(m);
    if (r.ok()) ++parsed;
    else EXPECT_FALSE(r.status().message().empty());
  }
  EXPECT_GT(parsed, 0);  // some mutations keep a valid model
}

}  // namespace
}  // namespace tessera::importer
