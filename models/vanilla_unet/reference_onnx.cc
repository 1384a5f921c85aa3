#include "vanilla_unet/reference_onnx.h"

#include <onnx/onnx_pb.h>

#include <fstream>

namespace tessera::models {

namespace {

class GraphWriter {
 public:
  explicit GraphWriter(onnx::GraphProto* g) : g_(g) {}

  Status initializer(const cnn::WeightMap& sd, const std::string& name) {
    const auto it = sd.find(name);
    if (it == sd.end()) return not_found_error("write_unet_onnx: the state dict has no '{}'", name);
    TS_ASSIGN_OR_RETURN(std::vector<float> v, it->second.to_vector());
    onnx::TensorProto* t = g_->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (uint32_t d : it->second.shape().dims()) t->add_dims(d);
    t->set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
    return ok_status();
  }

  // Adds a node and returns its single output's name.
  std::string node(const std::string& op, const std::vector<std::string>& inputs, const std::string& name) {
    onnx::NodeProto* n = g_->add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (const std::string& i : inputs) n->add_input(i);
    n->add_output(name + "_out");
    last_ = n;
    return name + "_out";
  }
  void ints(const char* attr, std::vector<int64_t> v) {
    onnx::AttributeProto* a = last_->add_attribute();
    a->set_name(attr);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  void integer(const char* attr, int64_t v) {
    onnx::AttributeProto* a = last_->add_attribute();
    a->set_name(attr);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  void real(const char* attr, float v) {
    onnx::AttributeProto* a = last_->add_attribute();
    a->set_name(attr);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(v);
  }

 private:
  onnx::GraphProto* g_;
  onnx::NodeProto* last_ = nullptr;
};

void value_info(onnx::ValueInfoProto* v, const std::string& name, std::vector<int64_t> shape) {
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto::FLOAT);
  for (int64_t d : shape) t->mutable_shape()->add_dim()->set_dim_value(d);
}

}  // namespace

Status write_unet_onnx(const cnn::WeightMap& sd, const std::string& path, uint32_t batch, uint32_t height,
                       uint32_t width) {
  if (!batch || height % 16 || width % 16 || !height || !width)
    return invalid_argument_error("write_unet_onnx: expected batch >= 1 and height, width multiples of 16, got {}x{}x{}",
                                  batch, height, width);
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.set_producer_name("tessera");
  auto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(13);
  onnx::GraphProto* g = model.mutable_graph();
  g->set_name("vanilla_unet");
  GraphWriter w(g);
  for (const auto& [name, t] : sd) TS_RETURN_IF_ERROR(w.initializer(sd, name));

  // _block(name): conv -> norm -> relu, twice.
  auto block = [&](const std::string& x, const std::string& module, const std::string& prefix) {
    std::string y = x;
    for (int i = 1; i <= 2; ++i) {
      const std::string conv = fmt::format("{}.{}conv{}", module, prefix, i);
      const std::string norm = fmt::format("{}.{}norm{}", module, prefix, i);
      y = w.node("Conv", {y, conv + ".weight"}, conv);
      w.ints("kernel_shape", {3, 3});
      w.ints("pads", {1, 1, 1, 1});
      y = w.node("BatchNormalization",
                 {y, norm + ".weight", norm + ".bias", norm + ".running_mean", norm + ".running_var"}, norm);
      w.real("epsilon", 1e-5f);
      y = w.node("Relu", {y}, fmt::format("{}.{}relu{}", module, prefix, i));
    }
    return y;
  };
  std::string x = "input";
  std::string skips[4];
  for (int i = 1; i <= 4; ++i) {
    x = skips[i - 1] = block(x, fmt::format("encoder{}", i), fmt::format("enc{}", i));
    x = w.node("MaxPool", {x}, fmt::format("pool{}", i));
    w.ints("kernel_shape", {2, 2});
    w.ints("strides", {2, 2});
  }
  x = block(x, "bottleneck", "bottleneck");
  for (int i = 4; i >= 1; --i) {
    const std::string up = fmt::format("upconv{}", i);
    x = w.node("ConvTranspose", {x, up + ".weight", up + ".bias"}, up);
    w.ints("kernel_shape", {2, 2});
    w.ints("strides", {2, 2});
    x = w.node("Concat", {x, skips[i - 1]}, fmt::format("cat{}", i));
    w.integer("axis", 1);
    x = block(x, fmt::format("decoder{}", i), fmt::format("dec{}", i));
  }
  x = w.node("Conv", {x, "conv.weight", "conv.bias"}, "conv");
  w.ints("kernel_shape", {1, 1});
  g->mutable_node(g->node_size() - 1)->set_output(0, "output");
  value_info(g->add_input(), "input", {batch, 3, height, width});
  value_info(g->add_output(), "output", {batch, 1, height, width});

  std::ofstream out(path, std::ios::binary);
  if (!out || !model.SerializeToOstream(&out)) return internal_error("write_unet_onnx: cannot write '{}'", path);
  return ok_status();
}

}  // namespace tessera::models
