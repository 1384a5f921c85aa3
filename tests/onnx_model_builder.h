// Test helper: small ONNX models written from C++ (protobuf), for the
// importer's and the compiler's tests.
#pragma once
#include <onnx/onnx_pb.h>

#include <random>
#include <string>
#include <vector>

namespace tessera::testing_onnx {

class ModelBuilder {
 public:
  explicit ModelBuilder(int opset = 13) {
    model_.set_ir_version(8);
    auto* imp = model_.add_opset_import();
    imp->set_domain("");
    imp->set_version(opset);
    model_.mutable_graph()->set_name("test");
  }
  onnx::ModelProto& model() { return model_; }
  onnx::GraphProto& graph() { return *model_.mutable_graph(); }

  void input(const std::string& name, std::vector<int64_t> dims, int type = onnx::TensorProto::FLOAT) {
    value_info(graph().add_input(), name, dims, type);
  }
  void output(const std::string& name) { graph().add_output()->set_name(name); }
  onnx::TensorProto* initializer(const std::string& name, std::vector<int64_t> dims, std::vector<float> values) {
    auto* t = graph().add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->add_dims(d);
    for (float v : values) t->add_float_data(v);
    return t;
  }
  onnx::TensorProto* int_initializer(const std::string& name, std::vector<int64_t> values) {
    auto* t = graph().add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(static_cast<int64_t>(values.size()));
    for (int64_t v : values) t->add_int64_data(v);
    return t;
  }
  // An integer initializer of another element type (UINT8, INT8, INT32:
  // quantized weights, zero points and biases), in int32_data as ONNX keeps them.
  onnx::TensorProto* typed_initializer(const std::string& name, std::vector<int64_t> dims, int type,
                                       std::vector<int32_t> values) {
    auto* t = graph().add_initializer();
    t->set_name(name);
    t->set_data_type(type);
    for (int64_t d : dims) t->add_dims(d);
    for (int32_t v : values) t->add_int32_data(v);
    return t;
  }
  // Fixed-seed random float initializer.
  onnx::TensorProto* random_initializer(const std::string& name, std::vector<int64_t> dims, float scale, uint32_t seed) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-scale, scale);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = u(rng);
    return initializer(name, dims, v);
  }
  onnx::NodeProto* node(const std::string& op, std::vector<std::string> inputs, std::vector<std::string> outputs,
                        const std::string& name = "") {
    auto* n = graph().add_node();
    n->set_op_type(op);
    n->set_name(name.empty() ? outputs[0] : name);
    for (auto& i : inputs) n->add_input(i);
    for (auto& o : outputs) n->add_output(o);
    return n;
  }
  static void ints(onnx::NodeProto* n, const std::string& name, std::vector<int64_t> v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  static void i(onnx::NodeProto* n, const std::string& name, int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void f(onnx::NodeProto* n, const std::string& name, float v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(v);
  }
  static void s(onnx::NodeProto* n, const std::string& name, const std::string& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(v);
  }
  static void strings(onnx::NodeProto* n, const std::string& name, const std::vector<std::string>& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::STRINGS);
    for (const auto& x : v) a->add_strings(x);
  }
  // A GRAPH attribute (If's branches): a subgraph of `nodes`' kind, built by
  // `fill`, whose outputs are `outputs` (element type FLOAT).
  template <class Fill>
  static void subgraph(onnx::NodeProto* n, const std::string& name, const std::vector<std::string>& outputs, Fill fill) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::GRAPH);
    onnx::GraphProto* g = a->mutable_g();
    g->set_name(name);
    fill(*g);
    for (const auto& o : outputs) {
      auto* vi = g->add_output();
      vi->set_name(o);
      vi->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
    }
  }
  std::string bytes() const { return model_.SerializeAsString(); }

 private:
  static void value_info(onnx::ValueInfoProto* vi, const std::string& name, const std::vector<int64_t>& dims, int type) {
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(type);
    auto* shape = tt->mutable_shape();
    for (int64_t d : dims) {
      if (d < 0) shape->add_dim()->set_dim_param("N");
      else shape->add_dim()->set_dim_value(d);
    }
  }
  onnx::ModelProto model_;
};

// A detector's post-processing after a few device ops: x (1, 8, 5) -> Relu;
// boxes = its first 4 columns, scores = sigmoid of the 5th; NonMaxSuppression
// (at most 5, IoU 0.5) -> the kept indices `keep` (int64), the kept boxes
// gathered, and an If (torchvision's pattern) returning them when any were
// kept, else an empty (0, 4) constant: outputs `boxes`, `keep`.
inline ModelBuilder nms_detector() {
  ModelBuilder b(13);
  b.input("x", {1, 8, 5});
  b.int_initializer("s0", {0}), b.int_initializer("s4", {4}), b.int_initializer("s5", {5});
  b.int_initializer("axis2", {2}), b.int_initializer("max", {5}), b.int_initializer("col", {2});
  b.int_initializer("axis1", {1}), b.int_initializer("shape84", {8, 4}), b.int_initializer("zero", {0});
  b.initializer("iou", {1}, {0.5f});
  b.node("Relu", {"x"}, {"r"});
  b.node("Slice", {"r", "s0", "s4", "axis2"}, {"boxes3"});
  b.node("Slice", {"r", "s4", "s5", "axis2"}, {"s_col"});
  auto* t = b.node("Transpose", {"s_col"}, {"s_row"});
  ModelBuilder::ints(t, "perm", {0, 2, 1});
  b.node("Sigmoid", {"s_row"}, {"scores"});
  b.node("NonMaxSuppression", {"boxes3", "scores", "max", "iou"}, {"sel"});
  auto* g1 = b.node("Gather", {"sel", "col"}, {"keep2"});
  ModelBuilder::i(g1, "axis", 1);
  b.node("Squeeze", {"keep2", "axis1"}, {"keep"});
  b.node("Reshape", {"boxes3", "shape84"}, {"boxes2"});
  b.node("Gather", {"boxes2", "keep"}, {"kept"});
  b.node("Size", {"keep"}, {"count"});
  b.node("Greater", {"count", "zero"}, {"any"});
  auto* ifn = b.node("If", {"any"}, {"boxes"});
  ModelBuilder::subgraph(ifn, "then_branch", {"tb"}, [](onnx::GraphProto& g) {
    auto* n = g.add_node();
    n->set_op_type("Identity"), n->set_name("then_id"), n->add_input("kept"), n->add_output("tb");
  });
  ModelBuilder::subgraph(ifn, "else_branch", {"eb"}, [](onnx::GraphProto& g) {
    auto* n = g.add_node();
    n->set_op_type("Constant"), n->set_name("else_empty"), n->add_output("eb");
    auto* a = n->add_attribute();
    a->set_name("value"), a->set_type(onnx::AttributeProto::TENSOR);
    a->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
    a->mutable_t()->add_dims(0), a->mutable_t()->add_dims(4);
  });
  b.output("boxes");
  b.output("keep");
  return b;
}

// A small CNN with the patterns the passes rewrite: Conv -> BatchNormalization
// -> Relu, Conv -> Sigmoid * x (SiLU), a residual Add, MaxPool, Concat,
// Resize (nearest, 2x), GlobalAveragePool -> Flatten -> Gemm. Input x (N, 3, 16, 16).
inline ModelBuilder small_cnn(int64_t batch = 1) {
  ModelBuilder b(13);
  b.input("x", {batch, 3, 16, 16});
  b.random_initializer("w1", {8, 3, 3, 3}, 0.3f, 1);
  b.random_initializer("b1", {8}, 0.1f, 2);
  b.random_initializer("bn_s", {8}, 0.5f, 3);
  b.random_initializer("bn_b", {8}, 0.1f, 4);
  b.random_initializer("bn_m", {8}, 0.1f, 5);
  b.initializer("bn_v", {8}, std::vector<float>(8, 0.8f));
  b.random_initializer("w2", {8, 8, 3, 3}, 0.2f, 6);
  b.random_initializer("w3", {8, 16, 1, 1}, 0.2f, 7);
  b.random_initializer("fc_w", {10, 8}, 0.3f, 8);
  b.random_initializer("fc_b", {10}, 0.1f, 9);
  b.initializer("scales", {4}, {1, 1, 2, 2});
  auto* c1 = b.node("Conv", {"x", "w1", "b1"}, {"c1"});
  b.ints(c1, "pads", {1, 1, 1, 1});
  b.node("BatchNormalization", {"c1", "bn_s", "bn_b", "bn_m", "bn_v"}, {"bn"});
  b.node("Relu", {"bn"}, {"r1"});
  auto* c2 = b.node("Conv", {"r1", "w2"}, {"c2"});
  b.ints(c2, "pads", {1, 1, 1, 1});
  b.node("Sigmoid", {"c2"}, {"sg"});
  b.node("Mul", {"c2", "sg"}, {"silu"});
  b.node("Add", {"silu", "r1"}, {"res"});
  auto* mp = b.node("MaxPool", {"res"}, {"mp"});
  b.ints(mp, "kernel_shape", {2, 2});
  b.ints(mp, "strides", {2, 2});
  auto* rs = b.node("Resize", {"mp", "", "scales"}, {"up"});
  b.s(rs, "mode", "nearest");
  b.s(rs, "coordinate_transformation_mode", "asymmetric");
  b.s(rs, "nearest_mode", "floor");
  auto* cat = b.node("Concat", {"up", "res"}, {"cat"});
  b.i(cat, "axis", 1);
  b.node("Conv", {"cat", "w3"}, {"c3"});
  b.node("GlobalAveragePool", {"c3"}, {"gap"});
  b.node("Flatten", {"gap"}, {"flat"});
  auto* fc = b.node("Gemm", {"flat", "fc_w", "fc_b"}, {"logits"});
  b.i(fc, "transB", 1);
  b.output("logits");
  b.output("up");
  return b;
}

// A small quantized model of every quantized form the importer reads: a
// QDQ input, QLinearConv (int8 weights, int32 bias), ONNX Runtime's
// com.microsoft QLinearAdd, DequantizeLinear, then DynamicQuantizeLinear ->
// ConvInteger -> Cast. Input x (1, 2, 6, 6); the fuzzer's second seed.
inline ModelBuilder small_quantized() {
  ModelBuilder b(13);
  auto* ms = b.model().add_opset_import();
  ms->set_domain("com.microsoft");
  ms->set_version(1);
  b.input("x", {1, 2, 6, 6});
  b.initializer("s", {}, {0.05f});
  b.typed_initializer("z", {}, onnx::TensorProto::UINT8, {128});
  b.typed_initializer("w", {3, 2, 3, 3}, onnx::TensorProto::INT8,
                      {5,  -3, 7,  1, 0,  -9, 4, 2,  -1, 3,  8, -6, 2, 1,  0, -4, 6, 5,
                       -2, 9,  -5, 3, 7,  1,  0, -8, 4,  -1, 2, 6,  5, -3, 1, 0,  7, -2,
                       3,  -7, 8,  0, -1, 2,  5, -4, 6,  1,  9, -3, 0, 2,  4, -6, 1, 3});
  b.initializer("ws", {3}, {0.01f, 0.02f, 0.015f});
  b.typed_initializer("wz", {3}, onnx::TensorProto::INT8, {0, 0, 0});
  b.typed_initializer("bias", {3}, onnx::TensorProto::INT32, {100, -50, 0});
  b.node("QuantizeLinear", {"x", "s", "z"}, {"xq"});
  auto* conv = b.node("QLinearConv", {"xq", "s", "z", "w", "ws", "wz", "s", "z", "bias"}, {"c"});
  b.ints(conv, "pads", {1, 1, 1, 1});
  auto* add = b.node("QLinearAdd", {"c", "s", "z", "c", "s", "z", "s", "z"}, {"a"});
  add->set_domain("com.microsoft");
  b.node("DequantizeLinear", {"a", "s", "z"}, {"f"});
  b.node("DynamicQuantizeLinear", {"f"}, {"fq", "fs", "fz"});
  b.typed_initializer("w2", {2, 3, 1, 1}, onnx::TensorProto::UINT8, {3, 250, 17, 128, 0, 64});
  b.node("ConvInteger", {"fq", "w2", "fz"}, {"acc"});
  b.i(b.node("Cast", {"acc"}, {"y"}), "to", onnx::TensorProto::FLOAT);
  b.output("y");
  return b;
}

}  // namespace tessera::testing_onnx
