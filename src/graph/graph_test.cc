// The graph IR: sorting, cycles, missing values, binding, dead nodes, shape
// inference with folding, and the passes (their results checked against the
// unoptimized graph on the host reference).
#include "tessera/graph/graph.h"

#include <cmath>

#include "tessera/graph/host_eval.h"
#include "tessera/graph/passes.h"
#include "tessera/graph/shape_inference.h"
#include "tessera/ops/activation.h"
#include "test_util.h"

namespace tessera::graph {
namespace {

using ::testing::HasSubstr;

int value(Graph& g, const std::string& name, std::vector<int64_t> dims = {}) {
  Value v;
  v.name = name;
  v.dims = std::move(dims);
  v.has_shape = !v.dims.empty();
  return g.add_value(std::move(v));
}

int constant(Graph& g, const std::string& name, std::vector<int64_t> dims, std::vector<float> v) {
  Value c{.name = name, .dims = dims, .has_shape = true, .constant = HostTensor::floats(dims, std::move(v))};
  return g.add_value(std::move(c));
}

// 32 values of sin(k): the (1, 2, 4, 4) input of the pass tests.
HostTensor sine_input() {
  std::vector<float> xv(32);
  for (size_t k = 0; k < xv.size(); ++k) xv[k] = std::sin(static_cast<float>(k));
  return HostTensor::floats({1, 2, 4, 4}, xv);
}

Node node(const std::string& op, std::vector<int> in, std::vector<int> out, const std::string& name) {
  Node n;
  n.op_type = op;
  n.name = name;
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  return n;
}

// x -> Relu -> a -> Sigmoid -> b, listed backwards.
Graph chain() {
  Graph g;
  const int x = value(g, "x", {2, 3}), a = value(g, "a"), b = value(g, "b");
  g.inputs = {x};
  g.nodes.push_back(node("Sigmoid", {a}, {b}, "s"));
  g.nodes.push_back(node("Relu", {x}, {a}, "r"));
  g.outputs = {b};
  return g;
}

TEST(Graph, TopologicalSortOrdersUnsortedNodes) {
  Graph g = chain();
  ASSERT_OK(g.topological_sort());
  EXPECT_EQ(g.nodes[0].op_type, "Relu");
  EXPECT_EQ(g.nodes[1].op_type, "Sigmoid");
  EXPECT_EQ(g.value(g.find("b")).producer, 1);
  ASSERT_OK(infer_shapes(g));
  EXPECT_EQ(g.value(g.find("b")).dims, (std::vector<int64_t>{2, 3}));
  EXPECT_THAT(g.to_string(), HasSubstr("%b = Sigmoid(%a) : f32[2,3]"));
}

TEST(Graph, CyclesAndMissingValuesAreErrors) {
  Graph g = chain();
  g.nodes[1].inputs = {g.find("b")};  // Relu reads Sigmoid's output: a cycle
  Status s = g.topological_sort();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("cycle"));
  Graph h = chain();
  h.nodes[1].inputs = {value(h, "ghost")};
  s = h.topological_sort();
  EXPECT_THAT(s.message(), HasSubstr("reads 'ghost', which no node, graph input or initializer provides"));
  Graph twice = chain();
  twice.nodes[1].outputs = {twice.find("b")};
  EXPECT_THAT(twice.topological_sort().message(), HasSubstr("produced by two nodes"));
}

TEST(Graph, BindConstantChecksTypeAndShape) {
  Graph g = chain();
  EXPECT_EQ(g.bind_constant("nope", HostTensor::floats({2, 3}, std::vector<float>(6))).code(), StatusCode::kNotFound);
  EXPECT_THAT(g.bind_constant("x", HostTensor::ints({2, 3}, std::vector<int64_t>(6))).message(), HasSubstr("is f32"));
  EXPECT_THAT(g.bind_constant("x", HostTensor::floats({3, 2}, std::vector<float>(6))).message(), HasSubstr("has shape [2,3]"));
  EXPECT_THAT(g.bind_constant("x", HostTensor::floats({2, 3}, std::vector<float>(5))).message(), HasSubstr("5 values"));
  ASSERT_OK(g.bind_constant("x", HostTensor::floats({2, 3}, {-1, 0, 1, 2, -3, 4})));
  EXPECT_TRUE(g.inputs.empty());
  ASSERT_OK(g.topological_sort());
  ASSERT_OK(infer_shapes(g));
  // Everything folded: no nodes left, the output is a constant.
  EXPECT_TRUE(g.nodes.empty());
  const HostTensor& out = *g.value(g.outputs[0]).constant;
  EXPECT_NEAR(out.f[0], 0.5f, 1e-6);                      // sigmoid(relu(-1))
  EXPECT_NEAR(out.f[3], 1 / (1 + std::exp(-2.0)), 1e-6);  // sigmoid(2)
}

TEST(Graph, RemoveDeadNodesKeepsWhatOutputsNeed) {
  Graph g = chain();
  const int dead = value(g, "dead");
  g.nodes.push_back(node("Tanh", {g.find("x")}, {dead}, "unused"));
  ASSERT_OK(g.topological_sort());
  g.remove_dead_nodes();
  EXPECT_EQ(g.nodes.size(), 2u);
}

TEST(ShapeInference, ShapeSubgraphsFoldToConstants) {
  // Reshape(x, Concat(Shape(x)[0:1], [-1])): the torch.flatten export pattern.
  Graph g;
  const int x = value(g, "x", {2, 3, 4});
  g.inputs = {x};
  const int shape = value(g, "shape"), first = value(g, "first"), target = value(g, "target"), y = value(g, "y");
  Value starts{.name = "starts", .type = ElemType::INT64, .dims = {1}, .has_shape = true,
               .constant = HostTensor::ints({1}, {0})};
  Value ends{.name = "ends", .type = ElemType::INT64, .dims = {1}, .has_shape = true,
             .constant = HostTensor::ints({1}, {1})};
  Value minus{.name = "minus", .type = ElemType::INT64, .dims = {1}, .has_shape = true,
              .constant = HostTensor::ints({1}, {-1})};
  const int s = g.add_value(starts), e = g.add_value(ends), m = g.add_value(minus);
  g.nodes.push_back(node("Shape", {x}, {shape}, "shape"));
  g.nodes.push_back(node("Slice", {shape, s, e}, {first}, "slice"));
  Node cat = node("Concat", {first, m}, {target}, "cat");
  cat.attrs["axis"].kind = Attribute::Kind::INT;
  g.nodes.push_back(cat);
  g.nodes.push_back(node("Reshape", {x, target}, {y}, "reshape"));
  g.outputs = {y};
  ASSERT_OK(g.topological_sort());
  ASSERT_OK(infer_shapes(g));
  g.remove_dead_nodes();
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].op_type, "Reshape");
  EXPECT_EQ(g.value(y).dims, (std::vector<int64_t>{2, 12}));
}

TEST(ShapeInference, ErrorsNameTheNodeAndAttribute) {
  Graph g;
  const int x = value(g, "x", {1, 3, 8, 8}), w = value(g, "w"), y = value(g, "y");
  g.value(w).dims = {4, 3, 3, 3};
  g.value(w).has_shape = true;
  g.value(w).constant = HostTensor::floats({4, 3, 3, 3}, std::vector<float>(108));
  g.inputs = {x};
  Node conv = node("Conv", {x, w}, {y}, "c1");
  conv.attrs["strides"].kind = Attribute::Kind::INTS;
  conv.attrs["strides"].ints = {1, 1, 1};
  g.nodes.push_back(conv);
  g.outputs = {y};
  ASSERT_OK(g.topological_sort());
  Status s = infer_shapes(g);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("Conv 'c1': attribute 'strides' has 3 values for 2 spatial dims"));
  g.nodes[0].attrs.erase("strides");
  g.nodes[0].attrs["group"].kind = Attribute::Kind::INT;
  g.nodes[0].attrs["group"].i = 2;
  EXPECT_THAT(infer_shapes(g).message(), HasSubstr("attribute 'group' = 2 does not divide the 3 input channels"));
  g.nodes[0].attrs.erase("group");
  g.nodes[0].op_type = "NoSuchOp";
  EXPECT_EQ(infer_shapes(g).code(), StatusCode::kUnimplemented);
  // Huge declared shapes are refused before anything is allocated.
  Graph h = chain();
  h.value(h.find("x")).dims = {int64_t{1} << 40, 1 << 20};
  ASSERT_OK(h.topological_sort());
  EXPECT_THAT(infer_shapes(h).message(), HasSubstr("over the limit"));
}

// The rewrites of the pass named `pass` in optimize's reports (-1: it did not run).
int rewrites(const std::vector<PassReport>& reports, std::string_view pass) {
  for (const PassReport& r : reports)
    if (r.pass == pass) return r.rewrites;
  return -1;
}

// The passes keep results: evaluate the graph on the host before and after.
std::vector<HostTensor> run_host(const Graph& g, const HostTensor& x) {
  std::vector<std::optional<HostTensor>> vals(g.values.size());
  for (size_t v = 0; v < g.values.size(); ++v)
    if (g.values[v].constant) vals[v] = *g.values[v].constant;
  vals[static_cast<size_t>(g.inputs[0])] = x;
  for (const Node& n : g.nodes) {
    Node plain = n;  // host kernels ignore fused attributes: apply them here
    std::vector<const HostTensor*> ins;
    for (int in : n.inputs) ins.push_back(in < 0 ? nullptr : &*vals[static_cast<size_t>(in)]);
    const HostTensor* residual = nullptr;  // a fused residual (fuse_residual_adds): added after the activation
    if (n.op_type == "Conv" && ins.size() > 3) residual = ins[3], ins.resize(3), plain.inputs.resize(3);
    auto outs = evaluate(plain, ins, g.opset);
    EXPECT_TRUE(outs.ok()) << outs.status().to_string();
    if (!outs.ok()) return {};
    if (n.op_type == "SiLU") {
      for (float& f : (*outs)[0].f) f = static_cast<float>(f / (1 + std::exp(-double{f})));
    }
    if (const auto scale = n.attr_floats("tessera_channel_scale"); !scale.empty()) {  // fuse_concat_affine, NCHW
      const auto shift = n.attr_floats("tessera_channel_shift");
      const auto& d = (*outs)[0].dims;
      std::vector<float>& y = (*outs)[0].f;
      for (size_t k = 0; k < y.size(); ++k) {
        const auto c = static_cast<size_t>(static_cast<int64_t>(k) / (d[2] * d[3]) % d[1]);
        y[k] = std::fma(y[k], scale[c], shift[c]);
      }
    }
    if (const std::string act = n.attr_string("tessera_activation", ""); !act.empty()) {
      const auto op = parse_unary_op(act);
      EXPECT_TRUE(op.has_value()) << act;
      const UnaryWithParam a{op.value_or(UnaryOpType::IDENTITY), n.attr_float("tessera_activation_param", 0.0f),
                             n.attr_float("tessera_activation_scale", 1.0f),
                             n.attr_float("tessera_activation_shift", 0.0f),
                             n.attr_float("tessera_activation_param2", 0.0f)};
      for (float& f : (*outs)[0].f) f = static_cast<float>(apply_activation(a, f));
    }
    if (residual)
      for (size_t k = 0; k < (*outs)[0].f.size(); ++k) (*outs)[0].f[k] += residual->f[k];
    for (size_t k = 0; k < n.outputs.size(); ++k) vals[static_cast<size_t>(n.outputs[k])] = (*outs)[k];
  }
  std::vector<HostTensor> r;
  for (int o : g.outputs) r.push_back(*vals[static_cast<size_t>(o)]);
  return r;
}

// Every output of `after` within `tol` of `before` (the same count and sizes).
void expect_same_results(const std::vector<HostTensor>& before, const std::vector<HostTensor>& after, double tol) {
  ASSERT_EQ(after.size(), before.size());
  for (size_t o = 0; o < before.size(); ++o) {
    ASSERT_EQ(after[o].f.size(), before[o].f.size()) << o;
    for (size_t k = 0; k < before[o].f.size(); ++k) EXPECT_NEAR(after[o].f[k], before[o].f[k], tol) << o << " " << k;
  }
}

TEST(Passes, FoldBatchNormAndFuseActivationsKeepResults) {
  Graph g;
  const int x = value(g, "x", {1, 2, 4, 4});
  g.inputs = {x};
  const int w = constant(g, "w", {3, 2, 1, 1}, {0.5f, -1, 2, 0.25f, -0.5f, 1});
  const int b = constant(g, "b", {3}, {0.1f, -0.2f, 0.3f});
  const int sc = constant(g, "s", {3}, {1.5f, 0.5f, -1}), sh = constant(g, "sh", {3}, {0.1f, 0.2f, 0.3f});
  const int mean = constant(g, "m", {3}, {0.2f, -0.1f, 0}), var = constant(g, "v", {3}, {0.5f, 2, 1});
  const int c = value(g, "c"), bn = value(g, "bn"), sg = value(g, "sg"), y = value(g, "y");
  g.nodes.push_back(node("Conv", {x, w, b}, {c}, "conv"));
  g.nodes.push_back(node("BatchNormalization", {c, sc, sh, mean, var}, {bn}, "bn"));
  g.nodes.push_back(node("Sigmoid", {bn}, {sg}, "sig"));
  g.nodes.push_back(node("Mul", {bn, sg}, {y}, "mul"));
  g.outputs = {y};
  ASSERT_OK(g.topological_sort());
  ASSERT_OK(infer_shapes(g));
  const HostTensor xin = sine_input();
  const auto before = run_host(g, xin);
  const auto reports = optimize(g);
  ASSERT_EQ(reports.size(), 24u);
  EXPECT_EQ(rewrites(reports, "fold_bias_add"), 0);  // no bias add
  EXPECT_EQ(rewrites(reports, "fold_batch_norm"), 1);  // batch norm folded
  EXPECT_EQ(rewrites(reports, "fold_scale_mul"), 0);  // no scale
  EXPECT_EQ(rewrites(reports, "fuse_activation_patterns"), 1);  // x * sigmoid(x) -> SiLU
  EXPECT_EQ(rewrites(reports, "fuse_activations"), 1);  // SiLU into the conv
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].attr_string("tessera_activation", ""), "silu");
  expect_same_results(before, run_host(g, xin), 1e-5);
}

// Paddle's exports: Conv (no bias) -> Add((1, C, 1, 1) constant) ->
// BatchNormalization -> Relu, and ConvTranspose -> Add(scalar): each becomes
// one conv with its bias, the batch norm and the activation folded in.
TEST(Passes, FoldBiasAddThenBatchNorm) {
  Graph g;
  const int x = value(g, "x", {1, 2, 4, 4});
  g.inputs = {x};
  const int w = constant(g, "w", {3, 2, 3, 3}, std::vector<float>(54, 0.f));
  for (size_t k = 0; k < 54; ++k) g.value(w).constant->f[k] = std::cos(static_cast<float>(k));
  const int bias = constant(g, "b", {1, 3, 1, 1}, {0.1f, -0.2f, 0.3f});
  const int sc = constant(g, "s", {3}, {1.5f, 0.5f, -1}), sh = constant(g, "sh", {3}, {0.1f, 0.2f, 0.3f});
  const int mean = constant(g, "m", {3}, {0.2f, -0.1f, 0}), var = constant(g, "v", {3}, {0.5f, 2, 1});
  const int wt = constant(g, "wt", {3, 1, 2, 2}, {0.5f, -1, 2, 0.25f, -0.5f, 1, 0.3f, 0.7f, -0.2f, 0.9f, 1.1f, -0.4f});
  const int scalar = constant(g, "k", {1}, {-0.75f});
  const int c = value(g, "c"), a = value(g, "a"), bn = value(g, "bn"), r = value(g, "r"), t = value(g, "t"),
            y = value(g, "y");
  Node conv = node("Conv", {x, w}, {c}, "conv");
  conv.attrs["pads"] = Attribute{.kind = Attribute::Kind::INTS, .ints = {1, 1, 1, 1}};
  g.nodes.push_back(conv);
  g.nodes.push_back(node("Add", {c, bias}, {a}, "add"));
  g.nodes.push_back(node("BatchNormalization", {a, sc, sh, mean, var}, {bn}, "bn"));
  g.nodes.push_back(node("Relu", {bn}, {r}, "relu"));
  Node convt = node("ConvTranspose", {r, wt}, {t}, "convt");
  convt.attrs["strides"] = Attribute{.kind = Attribute::Kind::INTS, .ints = {2, 2}};
  g.nodes.push_back(convt);
  g.nodes.push_back(node("Add", {scalar, t}, {y}, "add2"));
  g.outputs = {y};
  ASSERT_OK(g.topological_sort());
  ASSERT_OK(infer_shapes(g));
  const HostTensor xin = sine_input();
  const auto before = run_host(g, xin);
  const auto reports = optimize(g);
  EXPECT_EQ(rewrites(reports, "fold_bias_add"), 2);  // both adds into biases
  EXPECT_EQ(rewrites(reports, "fold_batch_norm"), 1);  // batch norm folded
  ASSERT_EQ(g.nodes.size(), 2u);
  EXPECT_EQ(g.nodes[0].attr_string("tessera_activation", ""), "relu");
  expect_same_results(before, run_host(g, xin), 1e-5);
}

// PP-LCNet's learnable affine blocks: Conv -> Mul(scalar) -> Add(scalar) ->
// Relu, and ConvTranspose -> Mul((1, C, 1, 1)) -> Add((C, 1, 1)): each
// becomes one conv with scaled weights and bias. A Mul by a non-constant, or
// of a conv output read twice, stays.
TEST(Passes, FoldScaleMulThenBiasAdd) {
  Graph g;
  const int x = value(g, "x", {1, 2, 4, 4});
  g.inputs = {x};
  const int w = constant(g, "w", {3, 2, 3, 3}, std::vector<float>(54, 0.f));
  for (size_t k = 0; k < 54; ++k) g.value(w).constant->f[k] = std::cos(static_cast<float>(k));
  const int bias = constant(g, "b", {3}, {0.1f, -0.2f, 0.3f});
  const int s1 = constant(g, "s1", {1}, {1.25f}), b1 = constant(g, "b1", {1}, {-0.5f});
  const int wt = constant(g, "wt", {3, 2, 2, 2}, std::vector<float>(24, 0.f));
  for (size_t k = 0; k < 24; ++k) g.value(wt).constant->f[k] = std::sin(static_cast<float>(k) * 0.7f);
  const int s2 = constant(g, "s2", {1, 2, 1, 1}, {0.5f, -2}), b2 = constant(g, "b2", {2, 1, 1}, {0.25f, 0.75f});
  const int c = value(g, "c"), m = value(g, "m"), a = value(g, "a"), r = value(g, "r"), t = value(g, "t"),
            tm = value(g, "tm"), ta = value(g, "ta"), c2 = value(g, "c2"), y = value(g, "y");
  Node conv = node("Conv", {x, w, bias}, {c}, "conv");
  conv.attrs["pads"] = Attribute{.kind = Attribute::Kind::INTS, .ints = {1, 1, 1, 1}};
  g.nodes.push_back(conv);
  g.nodes.push_back(node("Mul", {c, s1}, {m}, "mul"));
  g.nodes.push_back(node("Add", {m, b1}, {a}, "add"));
  g.nodes.push_back(node("Relu", {a}, {r}, "relu"));
  Node convt = node("ConvTranspose", {r, wt}, {t}, "convt");
  convt.attrs["strides"] = Attribute{.kind = Attribute::Kind::INTS, .ints = {2, 2}};
  g.nodes.push_back(convt);
  g.nodes.push_back(node("Mul", {s2, t}, {tm}, "mul2"));
  g.nodes.push_back(node("Add", {tm, b2}, {ta}, "add2"));
  g.nodes.push_back(node("Mul", {ta, ta}, {c2}, "square"));  // not a constant scale: stays
  g.nodes.push_back(node("Add", {c2, ta}, {y}, "add3"));
  g.outputs = {y};
  ASSERT_OK(g.topological_sort());
  ASSERT_OK(infer_shapes(g));
  const HostTensor xin = sine_input();
  const auto before = run_host(g, xin);
  const auto reports = optimize(g);
  EXPECT_EQ(rewrites(reports, "fold_bias_add"), 0);  // the adds follow Muls
  EXPECT_EQ(rewrites(reports, "fold_scale_mul"), 2);  // both scales folded
  EXPECT_EQ(rewrites(reports, "fold_bias_add (after fold_scale_mul)"), 2);  // then both adds
  ASSERT_EQ(g.nodes.size(), 4u);
  EXPECT_EQ(g.nodes[0].attr_string("tessera_activation", ""), "relu");
  EXPECT_EQ(g.nodes[2].op_type, "Mul");
  expect_same_results(before, run_host(g, xin), 1e-4);
}

// A ConvNeXt block as PyTorch exports it: permute to channels-last,
// LayerNorm, Linear (MatMul + Add), GELU, Linear, permute back, layer scale,
// residual. The Linears become 1x1 convs, the transposes between them cancel,
// GELU, the scale and the residual fuse into the convs: only the LayerNorm
// keeps its two transposes (views on the device).
TEST(Passes, ChannelsLastLinearsBecomeConvs) {
  Graph g;
  const int x = value(g, "x", {1, 2, 4, 4});
  g.inputs = {x};
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols, float phase) {
    std::vector<float> v(static_cast<size_t>(rows * cols));
    for (size_t k = 0; k < v.size(); ++k) v[k] = std::cos(static_cast<float>(k) * 0.7f + phase);
    return constant(g, name, {rows, cols}, v);
  };
  const int w1 = matrix("w1", 2, 8, 0), w2 = matrix("w2", 8, 2, 1);
  const int b1 = matrix("b1", 1, 8, 2), b2 = constant(g, "b2", {2}, {0.25f, -0.5f});
  const int ln_s = constant(g, "ln_s", {2}, {1.5f, 0.75f}), ln_b = constant(g, "ln_b", {2}, {0.1f, -0.1f});
  const int gamma = constant(g, "gamma", {2, 1, 1}, {0.5f, -2.0f});
  const int t = value(g, "t"), ln = value(g, "ln"), m1 = value(g, "m1"), a1 = value(g, "a1"), ge = value(g, "ge"),
            m2 = value(g, "m2"), a2 = value(g, "a2"), back = value(g, "back"), sc = value(g, "sc"), y = value(g, "y");
  auto transpose = [&](int in, int out, std::vector<int64_t> perm, const std::string& name) {
    Node n = node("Transpose", {in}, {out}, name);
    n.attrs["perm"] = Attribute{.kind = Attribute::Kind::INTS, .ints = std::move(perm)};
    g.nodes.push_back(n);
  };
  transpose(x, t, {0, 2, 3, 1}, "to_nhwc");
  g.nodes.push_back(node("LayerNormalization", {t, ln_s, ln_b}, {ln}, "ln"));
  g.nodes.push_back(node("MatMul", {ln, w1}, {m1}, "fc1"));
  g.nodes.push_back(node("Add", {m1, b1}, {a1}, "fc1_bias"));
  g.nodes.push_back(node("Gelu", {a1}, {ge}, "gelu"));
  g.nodes.push_back(node("MatMul", {ge, w2}, {m2}, "fc2"));
  g.nodes.push_back(node("Add", {b2, m2}, {a2}, "fc2_bias"));  // the bias first
  transpose(a2, back, {0, 3, 1, 2}, "to_nchw");
  g.nodes.push_back(node("Mul", {gamma, back}, {sc}, "layer_scale"));
  g.nodes.push_back(node("Add", {sc, x}, {y}, "residual"));
  g.outputs = {y};
  ASSERT_OK(g.topological_sort());
  ASSERT_OK(infer_shapes(g));
  const HostTensor xin = sine_input();
  const auto before = run_host(g, xin);
  const auto reports = optimize(g);
  EXPECT_EQ(rewrites(reports, "linear_to_conv"), 2);
  EXPECT_EQ(rewrites(reports, "cancel_transposes"), 2);  // around GELU, and fc2's with the one back to NCHW
  std::vector<std::string> ops;
  for (const Node& n : g.nodes) ops.push_back(n.op_type);
  EXPECT_EQ(ops, (std::vector<std::string>{"Transpose", "LayerNormalization", "Transpose", "Conv", "Conv"}));
  ASSERT_EQ(g.nodes.size(), 5u);
  EXPECT_EQ(g.nodes[3].name, "fc1");
  EXPECT_EQ(g.nodes[3].attr_string("tessera_activation", ""), "gelu");
  EXPECT_EQ(g.nodes[4].inputs.size(), 4u);  // the residual
  expect_same_results(before, run_host(g, xin), 1e-4);
}

// A transformer's MLP over tokens (N, L, C): each Linear (MatMul + Add)
// becomes a 1x1 conv over an (N, 1, L, C) image between Reshapes, its bias
// and GELU folded in; the results are the graph's.
TEST(Passes, TokenLinearsBecomeConvs) {
  Graph g;
  const int x = value(g, "x", {2, 5, 8});
  g.inputs = {x};
  std::vector<float> v1(8 * 16), v2(16 * 8);
  for (size_t k = 0; k < v1.size(); ++k) v1[k] = std::cos(static_cast<float>(k) * 0.7f);
  for (size_t k = 0; k < v2.size(); ++k) v2[k] = std::sin(static_cast<float>(k) * 0.3f);
  const int w1 = constant(g, "w1", {8, 16}, v1), w2 = constant(g, "w2", {16, 8}, v2);
  const int b1 = constant(g, "b1", {16}, std::vector<float>(16, 0.25f)), b2 = constant(g, "b2", {8}, v2);
  const int m1 = value(g, "m1"), a1 = value(g, "a1"), ge = value(g, "ge"), m2 = value(g, "m2"), a2 = value(g, "a2"),
            y = value(g, "y");
  g.nodes.push_back(node("MatMul", {x, w1}, {m1}, "fc1"));
  g.nodes.push_back(node("Add", {m1, b1}, {a1}, "fc1_bias"));
  g.nodes.push_back(node("Gelu", {a1}, {ge}, "gelu"));
  g.nodes.push_back(node("MatMul", {ge, w2}, {m2}, "fc2"));
  g.nodes.push_back(node("Add", {m2, b2}, {a2}, "fc2_bias"));
  g.nodes.push_back(node("Add", {a2, x}, {y}, "residual"));
  g.outputs = {y};
  ASSERT_OK(g.topological_sort());
  ASSERT_OK(infer_shapes(g));
  std::vector<float> xv(2 * 5 * 8);
  for (size_t k = 0; k < xv.size(); ++k) xv[k] = std::sin(static_cast<float>(k) * 0.37f);
  const HostTensor xin = HostTensor::floats({2, 5, 8}, xv);
  const auto before = run_host(g, xin);
  const auto reports = optimize(g);
  EXPECT_EQ(rewrites(reports, "linear_to_conv"), 2);
  // fc1's reshape to tokens and fc2's back to an image, then its transpose to
  // NHWC and fc2's back to NCHW: GELU joins fc1's conv.
  EXPECT_EQ(rewrites(reports, "cancel_transposes"), 2);
  int convs = 0, reshapes = 0;
  for (const Node& n : g.nodes) {
    EXPECT_NE(n.op_type, "MatMul");
    EXPECT_NE(n.op_type, "Gelu");
    convs += n.op_type == "Conv";
    reshapes += n.op_type == "Reshape";
  }
  EXPECT_EQ(convs, 2);
  EXPECT_EQ(reshapes, 2);  // fc1's into the image, fc2's out of it
  expect_same_results(before, run_host(g, xin), 1e-4);
}

// Reshapes around element-wise ops cancel only where the second gives back
// the first one's input dims, also where that is a graph output (the
// element-wise op then writes it, in its dims).
TEST(Passes, ReshapesCancelOnlyBackToTheSameDims) {
  for (const std::vector<int64_t>& back : {std::vector<int64_t>{2, 3, 4}, std::vector<int64_t>{2, 12}}) {
    for (bool output : {false, true}) {
      Graph g;
      const int x = value(g, "x", {2, 3, 4});
      g.inputs = {x};
      const auto shape = [&](const std::string& name, const std::vector<int64_t>& d) {
        const int64_t r = static_cast<int64_t>(d.size());
        return g.add_value({.name = name, .type = ElemType::INT64, .dims = {r}, .has_shape = true,
                            .constant = HostTensor::ints({r}, d)});
      };
      const int s1 = shape("s1", {6, 4}), s2 = shape("s2", back);
      const int r1 = value(g, "r1"), t = value(g, "t"), r2 = value(g, "r2"), y = value(g, "y");
      g.nodes.push_back(node("Reshape", {x, s1}, {r1}, "to_rows"));
      g.nodes.push_back(node("Tanh", {r1}, {t}, "tanh"));
      g.nodes.push_back(node("Reshape", {t, s2}, {r2}, "back"));
      if (!output) g.nodes.push_back(node("Neg", {r2}, {y}, "neg"));
      g.outputs = {output ? r2 : y};
      ASSERT_OK(g.topological_sort());
      ASSERT_OK(infer_shapes(g));
      const HostTensor xin = HostTensor::floats({2, 3, 4}, std::vector<float>(24, 0.5f));
      const auto before = run_host(g, xin);
      const bool same = back.size() == 3;
      EXPECT_EQ(cancel_transposes(g).rewrites, same ? 1 : 0);
      int reshapes = 0;
      for (const Node& n : g.nodes) reshapes += n.op_type == "Reshape";
      EXPECT_EQ(reshapes, same ? 0 : 2);
      expect_same_results(before, run_host(g, xin), 0.0);
      EXPECT_EQ(g.value(g.outputs[0]).dims, back);
    }
  }
}

// avg_pool2d(padding=1) as PyTorch exports it (Pad, then AveragePool): the
// pool pads itself, counting the zeros; a pool with padding it does not
// count keeps its Pad.
TEST(Passes, ZeroPadFoldsIntoTheAveragePool) {
  for (bool counted : {true, false}) {
    Graph g;
    const int x = value(g, "x", {1, 2, 4, 4});
    g.inputs = {x};
    const int pads = g.add_value({.name = "pads", .type = ElemType::INT64, .dims = {8}, .has_shape = true,
                                  .constant = HostTensor::ints({8}, {0, 0, 1, 1, 0, 0, 1, 1})});
    const int p = value(g, "p"), y = value(g, "y");
    g.nodes.push_back(node("Pad", {x, pads}, {p}, "pad"));
    Node pool = node("AveragePool", {p}, {y}, "pool");
    pool.attrs["kernel_shape"] = Attribute{.kind = Attribute::Kind::INTS, .ints = {3, 3}};
    if (!counted) pool.attrs["pads"] = Attribute{.kind = Attribute::Kind::INTS, .ints = {1, 1, 1, 1}};
    g.nodes.push_back(pool);
    g.outputs = {y};
    ASSERT_OK(g.topological_sort());
    ASSERT_OK(infer_shapes(g));
    const HostTensor xin = sine_input();
    const auto before = run_host(g, xin);
    const auto reports = optimize(g);
    EXPECT_EQ(rewrites(reports, "fold_pad_into_average_pool"), counted ? 1 : 0);
    ASSERT_EQ(g.nodes.size(), counted ? 1u : 2u);
    if (counted) {
      EXPECT_EQ(g.nodes[0].attr_ints("pads"), (std::vector<int64_t>{1, 1, 1, 1}));
      EXPECT_EQ(g.nodes[0].attr_int("count_include_pad", 0), 1);
    }
    expect_same_results(before, run_host(g, xin), 1e-6);
  }
}

// DenseNet's pre-activation: a BatchNormalization no conv precedes, then
// ReLU: a 1x1 depthwise Conv with the ReLU fused, the same results.
TEST(Passes, StandaloneBatchNormBecomesADepthwiseConv) {
  Graph g;
  const int x = value(g, "x", {1, 2, 4, 4});
  g.inputs = {x};
  const int sc = constant(g, "s", {2}, {1.5f, -0.5f}), sh = constant(g, "sh", {2}, {0.1f, 0.2f});
  const int mean = constant(g, "m", {2}, {0.2f, -0.1f}), var = constant(g, "v", {2}, {0.5f, 2});
  const int a = value(g, "a"), bn = value(g, "bn"), y = value(g, "y");
  g.nodes.push_back(node("Relu", {x}, {a}, "pre"));
  g.nodes.push_back(node("BatchNormalization", {a, sc, sh, mean, var}, {bn}, "bn"));
  g.nodes.push_back(node("Relu", {bn}, {y}, "relu"));
  g.outputs = {y};
  ASSERT_OK(g.topological_sort());
  ASSERT_OK(infer_shapes(g));
  const HostTensor xin = sine_input();
  const auto before = run_host(g, xin);
  const auto reports = optimize(g);
  EXPECT_EQ(rewrites(reports, "fold_batch_norm"), 0);
  EXPECT_EQ(rewrites(reports, "batch_norm_to_conv"), 1);
  ASSERT_EQ(g.nodes.size(), 2u);
  EXPECT_EQ(g.nodes[1].op_type, "Conv");
  EXPECT_EQ(g.nodes[1].attr_int("group", 1), 2);
  EXPECT_EQ(g.nodes[1].attr_string("tessera_activation", ""), "relu");
  expect_same_results(before, run_host(g, xin), 1e-5);
}

// DenseNet's layers: Concat -> BatchNormalization -> ReLU -> Conv. The batch
// norm and its ReLU join the concat (one pass over the data); a concat whose
// output something else reads too keeps its own, as does a batch norm along
// another axis than the concat's.
TEST(Passes, BatchNormAfterAConcatJoinsIt) {
  for (bool read_twice : {false, true}) {
    SCOPED_TRACE(read_twice ? "concat read twice" : "concat read once");
    Graph g;
    const int x = value(g, "x", {1, 2, 4, 4});
    g.inputs = {x};
    const int sc = constant(g, "s", {4}, {1.5f, -0.5f, 2, 0.25f}), sh = constant(g, "sh", {4}, {0.1f, 0.2f, -1, 0});
    const int mean = constant(g, "m", {4}, {0.2f, -0.1f, 0, 1}), var = constant(g, "v", {4}, {0.5f, 2, 1, 4});
    const int w = constant(g, "w", {3, 4, 1, 1}, {1, 2, 3, 4, -1, 0.5f, 0, 2, 0.25f, 1, -2, 1});
    const int a = value(g, "a"), b = value(g, "b"), cat = value(g, "cat"), bn = value(g, "bn"), r = value(g, "r"),
              y = value(g, "y");
    g.nodes.push_back(node("Relu", {x}, {a}, "a"));
    g.nodes.push_back(node("Sigmoid", {x}, {b}, "b"));
    Node c = node("Concat", {a, b}, {cat}, "cat");
    c.attrs["axis"] = Attribute{.kind = Attribute::Kind::INT, .i = 1};
    g.nodes.push_back(c);
    g.nodes.push_back(node("BatchNormalization", {cat, sc, sh, mean, var}, {bn}, "bn"));
    g.nodes.push_back(node("Relu", {bn}, {r}, "relu"));
    g.nodes.push_back(node("Conv", {r, w}, {y}, "conv"));
    g.outputs = {y};
    if (read_twice) g.outputs.push_back(cat);
    ASSERT_OK(g.topological_sort());
    ASSERT_OK(infer_shapes(g));
    const HostTensor xin = sine_input();
    const auto before = run_host(g, xin);
    const auto reports = optimize(g);
    EXPECT_EQ(rewrites(reports, "batch_norm_to_conv"), 1);
    EXPECT_EQ(rewrites(reports, "fuse_concat_affine"), read_twice ? 0 : 1);
    ASSERT_EQ(g.nodes.size(), read_twice ? 5u : 4u);
    const Node& joined = g.nodes[2];
    EXPECT_EQ(joined.op_type, "Concat");
    if (!read_twice) {
      EXPECT_EQ(joined.attr_floats("tessera_channel_scale").size(), 4u);
      EXPECT_EQ(joined.attr_floats("tessera_channel_shift").size(), 4u);
      EXPECT_EQ(joined.attr_string("tessera_activation", ""), "relu");
      EXPECT_EQ(joined.outputs[0], g.nodes[3].inputs[0]);
    }
    expect_same_results(before, run_host(g, xin), 1e-5);
  }
}

// Transposes that do not undo each other, a transposed value read twice, a
// MatMul over a 3-D value or by a run-time matrix: all stay as they are.
TEST(Passes, TransposesAndLinearsThatStay) {
  Graph g;
  const int x = value(g, "x", {1, 2, 4, 4});
  g.inputs = {x};
  const int w = constant(g, "w", {2, 3}, {0.5f, -1, 2, 0.25f, 1, -0.75f});
  const int t1 = value(g, "t1"), t2 = value(g, "t2"), r = value(g, "r"), t3 = value(g, "t3"), m = value(g, "m"),
            mm = value(g, "mm");
  auto transpose = [&](int in, int out, std::vector<int64_t> perm, const std::string& name) {
    Node n = node("Transpose", {in}, {out}, name);
    n.attrs["perm"] = Attribute{.kind = Attribute::Kind::INTS, .ints = std::move(perm)};
    g.nodes.push_back(n);
  };
  transpose(x, t1, {0, 2, 3, 1}, "a");       // (1, 4, 4, 2)
  transpose(t1, t2, {0, 1, 3, 2}, "b");      // not the inverse
  g.nodes.push_back(node("Relu", {t2}, {r}, "relu"));
  transpose(r, t3, {0, 3, 1, 2}, "c");       // the inverse of a, but b is between
  g.nodes.push_back(node("MatMul", {t3, w}, {m}, "by_constant"));  // (1, 4, 4, 2) x (2, 3): converted
  g.nodes.push_back(node("MatMul", {t1, t2}, {mm}, "run_time"));   // t1 read twice; both operands at run time
  g.outputs = {m, mm};
  ASSERT_OK(g.topological_sort());
  ASSERT_OK(infer_shapes(g));
  Graph before = g;
  const auto reports = optimize(g);
  EXPECT_EQ(rewrites(reports, "cancel_transposes"), 0);
  EXPECT_EQ(rewrites(reports, "linear_to_conv"), 1);
  HostTensor xin = sine_input();
  expect_same_results(run_host(before, xin), run_host(g, xin), 1e-5);
}

// Conv + activation, then a scalar Mul and Add (or Sub): the affine joins
// the conv's activation; a per-channel Mul, a Mul read twice and an affine
// after a conv without an activation (folded into its weights instead) stay.
TEST(Passes, FuseActivationAffine) {
  Graph g;
  const int x = value(g, "x", {1, 2, 4, 4});
  g.inputs = {x};
  auto weights = [&](const std::string& name, float phase) {
    const int w = constant(g, name, {2, 2, 3, 3}, std::vector<float>(36, 0.f));
    for (size_t k = 0; k < 36; ++k) g.value(w).constant->f[k] = std::cos(static_cast<float>(k) + phase) * 0.5f;
    return w;
  };
  const int w1 = weights("w1", 0), w2 = weights("w2", 1), w3 = weights("w3", 2);
  const int s = constant(g, "s", {}, {1.5f}), b = constant(g, "b", {1}, {-0.25f}), d = constant(g, "d", {1}, {0.75f});
  const int pc = constant(g, "pc", {1, 2, 1, 1}, {0.5f, 2.0f});
  const int c1 = value(g, "c1"), h1 = value(g, "h1"), m1 = value(g, "m1"), a1 = value(g, "a1");
  const int c2 = value(g, "c2"), r2 = value(g, "r2"), s2 = value(g, "s2");
  const int c3 = value(g, "c3"), r3 = value(g, "r3"), p3 = value(g, "p3"), y = value(g, "y"), z = value(g, "z");
  auto conv = [&](int in, int w, int out, const std::string& name) {
    Node n = node("Conv", {in, w}, {out}, name);
    n.attrs["pads"] = Attribute{.kind = Attribute::Kind::INTS, .ints = {1, 1, 1, 1}};
    g.nodes.push_back(n);
  };
  conv(x, w1, c1, "conv1");
  g.nodes.push_back(node("HardSwish", {c1}, {h1}, "hs"));
  g.nodes.push_back(node("Mul", {s, h1}, {m1}, "mul"));  // the scalar first
  g.nodes.push_back(node("Add", {m1, b}, {a1}, "add"));
  conv(a1, w2, c2, "conv2");
  g.nodes.push_back(node("Relu", {c2}, {r2}, "relu2"));
  g.nodes.push_back(node("Sub", {r2, d}, {s2}, "sub"));
  conv(s2, w3, c3, "conv3");
  g.nodes.push_back(node("Relu", {c3}, {r3}, "relu3"));
  g.nodes.push_back(node("Mul", {r3, pc}, {p3}, "per_channel"));
  g.nodes.push_back(node("Add", {p3, s2}, {y}, "join"));
  g.nodes.push_back(node("Mul", {y, s}, {z}, "last"));  // y is read by the output too
  g.outputs = {z, y};
  ASSERT_OK(g.topological_sort());
  ASSERT_OK(infer_shapes(g));
  const HostTensor xin = sine_input();
  const auto before = run_host(g, xin);
  const auto reports = optimize(g);
  EXPECT_EQ(rewrites(reports, "fuse_activation_affine"), 2);
  int fused = 0;
  for (const Node& n : g.nodes) {
    if (!n.has_attr("tessera_activation_scale")) continue;
    ++fused;
    if (n.name == "conv1") {
      EXPECT_EQ(n.attr_string("tessera_activation", ""), "hardswish");
      EXPECT_FLOAT_EQ(n.attr_float("tessera_activation_scale", 0), 1.5f);
      EXPECT_FLOAT_EQ(n.attr_float("tessera_activation_shift", 0), -0.25f);
    } else {
      EXPECT_EQ(n.name, "conv2");
      EXPECT_FLOAT_EQ(n.attr_float("tessera_activation_scale", 0), 1.0f);
      EXPECT_FLOAT_EQ(n.attr_float("tessera_activation_shift", 0), -0.75f);
    }
  }
  EXPECT_EQ(fused, 2);
  expect_same_results(before, run_host(g, xin), 1e-5);
}

// Conv + Relu, then an Add of a scalar that has a Clip after it: the Clip
// fuses into the Add, which must then stay (absorbing the Add into the
// conv's affine would drop the Clip: quantized models' requantization).
TEST(Passes, AffineWithItsOwnActivationStays) {
  Graph g;
  const int x = value(g, "x", {1, 2, 4, 4});
  g.inputs = {x};
  const int w = constant(g, "w", {2, 2, 3, 3}, std::vector<float>(36, 0.f));
  for (size_t k = 0; k < 36; ++k) g.value(w).constant->f[k] = std::cos(static_cast<float>(k)) * 0.5f;
  const int shift = constant(g, "shift", {}, {0.5f}), lo = constant(g, "lo", {}, {0.0f}), hi = constant(g, "hi", {}, {0.75f});
  const int c = value(g, "c"), r = value(g, "r"), a = value(g, "a"), y = value(g, "y");
  Node conv = node("Conv", {x, w}, {c}, "conv");
  conv.attrs["pads"] = Attribute{.kind = Attribute::Kind::INTS, .ints = {1, 1, 1, 1}};
  g.nodes.push_back(conv);
  g.nodes.push_back(node("Relu", {c}, {r}, "relu"));
  g.nodes.push_back(node("Add", {r, shift}, {a}, "add"));
  g.nodes.push_back(node("Clip", {a, lo, hi}, {y}, "clip"));
  g.outputs = {y};
  ASSERT_OK(g.topological_sort());
  ASSERT_OK(infer_shapes(g));
  const HostTensor xin = sine_input();
  const auto before = run_host(g, xin);
  const auto reports = optimize(g);
  EXPECT_EQ(rewrites(reports, "fuse_activation_affine"), 0) << g.to_string();
  expect_same_results(before, run_host(g, xin), 1e-5);
}

}  // namespace
}  // namespace tessera::graph
