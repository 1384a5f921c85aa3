#include "tessera/perfmodel/model_queries.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace tessera::perfmodel {
namespace {

using graph::Graph;
using graph::Node;
using nlohmann::json;

// ONNX op types that lower to one device unary op, by the predictor's name.
constexpr std::pair<std::string_view, std::string_view> kUnary[] = {{"Relu", "relu"},
                                                                    {"Sigmoid", "sigmoid"},
                                                                    {"Tanh", "tanh"},
                                                                    {"Exp", "exp"},
                                                                    {"Sqrt", "sqrt"},
                                                                    {"Erf", "erf"},
                                                                    {"Abs", "abs"},
                                                                    {"Reciprocal", "reciprocal"},
                                                                    {"Elu", "elu"},
                                                                    {"HardSwish", "hardswish"},
                                                                    {"HardSigmoid", "hardsigmoid"},
                                                                    {"Mish", "mish"},
                                                                    {"Gelu", "gelu"},
                                                                    {"Silu", "silu"},
                                                                    {"Softplus", "softplus"},
                                                                    {"Softsign", "softsign"},
                                                                    {"Celu", "celu"},
                                                                    {"Selu", "elu"},
                                                                    {"ThresholdedRelu", "thresholded_relu"},
                                                                    {"Floor", "floor"},
                                                                    {"Ceil", "ceil"},
                                                                    {"Round", "round"},
                                                                    {"Sign", "sign"}};
constexpr std::string_view kViews[] = {"Reshape",  "Flatten", "Squeeze", "Unsqueeze",
                                       "Identity", "Dropout", "Shape",   "Constant"};
constexpr std::pair<std::string_view, std::string_view> kBinary[] = {{"Add", "add"}, {"Sub", "sub"}, {"Mul", "mul"},
                                                                     {"Div", "div"}, {"Max", "max"}, {"Min", "min"}};

std::string dtype_word(DataType t) {
  std::string w(data_type_name(t));
  for (char& c : w) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return w;
}

json shape_of(const Graph& g, int id) {
  std::vector<int64_t> d = g.value(id).dims;
  if (d.empty()) d = {1};
  return d;
}

json tensor(const Graph& g, int id, DataType dtype) {
  return {{"logical_shape", shape_of(g, id)}, {"dtype", dtype_word(dtype)}};
}

// An NCHW value as the NHWC rows the device keeps a conv net's maps in
// (element-wise ops and concats read them so: pages of C values, not of W).
// `broadcast`: a lower-rank operand of a 4-d op, right-aligned to 4-d first.
json nhwc_tensor(const Graph& g, int id, DataType dtype, bool broadcast = false) {
  std::vector<int64_t> d = g.value(id).dims;
  if (broadcast && d.size() < 4) d.insert(d.begin(), 4 - d.size(), 1);
  if (d.empty()) d = {1};
  if (d.size() == 4) d = {d[0], d[2], d[3], d[1]};
  return {{"logical_shape", d}, {"dtype", dtype_word(dtype)}};
}

std::string activation(const Node& n) {
  const std::string a = n.attr_string("tessera_activation", "identity");
  return a;
}

StatusOr<json> query_json(const Graph& g, const Node& n, const ModelQueryOptions& o, std::string* note) {
  const std::string& op = n.op_type;
  const std::string act_dtype = dtype_word(o.activations);
  if (op == "Conv") {
    const auto& w = g.value(n.inputs[1]).dims;
    if (w.size() != 4 || g.value(n.inputs[0]).dims.size() != 4) {
      *note = "not a 2-d conv";
      return json();
    }
    std::vector<int64_t> pads = n.attr_ints("pads", {0, 0, 0, 0});
    if (pads.size() != 4) pads = {0, 0, 0, 0};
    json q = {{"op", "conv2d"},
              {"input", tensor(g, n.inputs[0], o.activations)},
              {"out_channels", w[0]},
              {"kernel_size", {w[2], w[3]}},
              {"stride", n.attr_ints("strides", {1, 1})},
              {"padding", {pads[0], pads[2], pads[1], pads[3]}},
              {"dilation", n.attr_ints("dilations", {1, 1})},
              {"groups", n.attr_int("group", 1)},
              {"activation", activation(n)},
              {"weights_dtype", dtype_word(o.weights)},
              {"residual", n.inputs.size() > 3 && n.inputs[3] >= 0 ? 1 : 0}};
    return q;
  }
  if (op == "ConvTranspose") {
    const auto& w = g.value(n.inputs[1]).dims;  // (in, out / groups, kh, kw)
    if (w.size() != 4 || g.value(n.inputs[0]).dims.size() != 4) {
      *note = "not a 2-d transposed conv";
      return json();
    }
    const std::vector<int64_t> pads = n.attr_ints("pads", {0, 0, 0, 0});
    const int64_t groups = n.attr_int("group", 1);
    return json{{"op", "conv_transpose2d"},
                {"input", tensor(g, n.inputs[0], o.activations)},
                {"out_channels", w[1] * groups},
                {"kernel_size", {w[2], w[3]}},
                {"stride", n.attr_ints("strides", {1, 1})},
                {"padding", {pads.empty() ? 0 : pads[0], pads.size() > 1 ? pads[1] : 0}},
                {"output_padding", n.attr_ints("output_padding", {0, 0})},
                {"dilation", n.attr_ints("dilations", {1, 1})},
                {"groups", groups},
                {"activation", activation(n)},
                {"weights_dtype", dtype_word(o.weights)}};
  }
  if (op == "Gemm") {
    const auto& b = g.value(n.inputs[1]).dims;
    if (!g.is_constant(n.inputs[1]) || b.size() != 2) {
      *note = "a Gemm of two computed matrices";
      return json();
    }
    const int64_t out = n.attr_int("transB", 0) ? b[0] : b[1];
    return json{{"op", "linear"},
                {"input", tensor(g, n.inputs[0], o.activations)},
                {"out_features", out},
                {"bias", n.inputs.size() > 2 && n.inputs[2] >= 0 ? 1 : 0},
                {"activation", activation(n)},
                {"weights_dtype", dtype_word(o.weights)}};
  }
  if (op == "MatMul") {
    if (g.is_constant(n.inputs[1]) && g.value(n.inputs[1]).dims.size() == 2)
      return json{{"op", "linear"},
                  {"input", tensor(g, n.inputs[0], o.activations)},
                  {"out_features", g.value(n.inputs[1]).dims[1]},
                  {"bias", 0},
                  {"activation", activation(n)},
                  {"weights_dtype", dtype_word(o.weights)}};
    return json{{"op", "matmul"},
                {"input", tensor(g, n.inputs[0], o.activations)},
                {"input_b", tensor(g, n.inputs[1], o.activations)},
                {"activation", activation(n)}};
  }
  const bool map = g.value(n.inputs[0]).dims.size() == 4;  // an image map: NHWC on the device
  for (const auto& [onnx, name] : kUnary)
    if (op == onnx) return json{{"op", name}, {"input", nhwc_tensor(g, n.inputs[0], o.activations)}};
  if (op == "Clip") return json{{"op", "relu6"}, {"input", nhwc_tensor(g, n.inputs[0], o.activations)}};
  for (const auto& [onnx, name] : kBinary)
    if (op == onnx) {
      const bool b_map = map || g.value(n.inputs[1]).dims.size() == 4;
      return json{{"op", name},
                  {"input", nhwc_tensor(g, n.inputs[0], o.activations, b_map)},
                  {"input_b", nhwc_tensor(g, n.inputs[1], o.activations, b_map)},
                  {"activation", activation(n)}};
    }
  if (op == "MaxPool" || op == "AveragePool") {
    std::vector<int64_t> pads = n.attr_ints("pads", {0, 0, 0, 0});
    const std::vector<int64_t> k = n.attr_ints("kernel_shape", {2, 2});
    return json{{"op", op == "MaxPool" ? "max_pool2d" : "avg_pool2d"},
                {"input", tensor(g, n.inputs[0], o.activations)},
                {"kernel_size", k},
                {"stride", n.attr_ints("strides", {1, 1})},
                {"padding", {pads.empty() ? 0 : pads[0], pads.size() > 1 ? pads[1] : 0}},
                {"dilation", n.attr_ints("dilations", {1, 1})},
                {"ceil_mode", n.attr_int("ceil_mode", 0)}};
  }
  if (op == "GlobalAveragePool")
    return json{{"op", "global_avg_pool2d"}, {"input", tensor(g, n.inputs[0], o.activations)}};
  if (op == "Resize" || op == "Upsample") {
    const auto& in = g.value(n.inputs[0]).dims;
    const auto& out = g.value(n.outputs[0]).dims;
    if (in.size() != 4 || out.size() != 4) {
      *note = "not a 2-d resize";
      return json();
    }
    const std::string mode = n.attr_string("mode", "nearest");
    return json{{"op", "upsample"},
                {"input", tensor(g, n.inputs[0], o.activations)},
                {"scale_factor", {static_cast<double>(out[2]) / in[2], static_cast<double>(out[3]) / in[3]}},
                {"mode", mode == "nearest" ? "nearest" : "bilinear"}};
  }
  if (op == "Concat") {
    json inputs = json::array();
    const bool channels = g.value(n.inputs[0]).dims.size() == 4 && n.attr_int("axis", 1) == 1;
    for (int id : n.inputs)
      if (id >= 0) inputs.push_back(channels ? nhwc_tensor(g, id, o.activations) : tensor(g, id, o.activations));
    if (inputs.size() < 2 || inputs.size() > 16) {
      *note = fmt::format("a concat of {} inputs", inputs.size());
      return json();
    }
    return json{{"op", "concat"}, {"inputs", inputs}, {"dim", channels ? -1 : n.attr_int("axis", 0)}};
  }
  if (op == "Transpose") {
    std::vector<int64_t> perm = n.attr_ints("perm");
    if (perm.empty())
      for (size_t i = g.value(n.inputs[0]).dims.size(); i-- > 0;) perm.push_back(static_cast<int64_t>(i));
    return json{{"op", "permute"}, {"input", tensor(g, n.inputs[0], o.activations)}, {"perm", perm}};
  }
  if (op == "Softmax")
    return json{{"op", "softmax"}, {"input", tensor(g, n.inputs[0], o.activations)}, {"dim", n.attr_int("axis", -1)}};
  if (op == "LayerNormalization") return json{{"op", "layer_norm"}, {"input", tensor(g, n.inputs[0], o.activations)}};
  *note = "not in the predictor's op table";
  return json();
}

}  // namespace

StatusOr<std::vector<ModelOp>> model_ops(const Graph& g, const ModelQueryOptions& o) {
  std::vector<ModelOp> ops;
  for (const Node& n : g.nodes) {
    ModelOp m{.node = n.name, .op_type = n.op_type};
    for (int id : n.inputs)
      if (id >= 0 && !g.value(id).has_shape)
        return invalid_argument_error("model_ops: {} reads '{}', whose shape is not inferred", n.label(),
                                      g.value(id).name);
    if (std::find(std::begin(kViews), std::end(kViews), n.op_type) != std::end(kViews)) {
      m.view = true;
      m.note = "a view: no launch";
    } else {
      TS_ASSIGN_OR_RETURN(json j, query_json(g, n, o, &m.note));
      if (!j.is_null()) {
        if (o.workers) j["workers"] = o.workers;
        StatusOr<OpQuery> q = parse_op_query(j.dump());
        if (q.ok())
          m.query = *std::move(q);
        else
          m.note = q.status().to_string();
      }
    }
    ops.push_back(std::move(m));
  }
  // The layout conversions at the graph's edges: a 4-d input arrives NCHW and is permuted to the
  // NHWC rows the device computes on; a 4-d output leaves the same way back.
  auto edge = [&](int id, bool input) -> Status {
    const std::vector<int64_t>& d = g.value(id).dims;
    if (d.size() != 4 || g.is_constant(id)) return ok_status();
    json j = {{"op", "permute"},
              {"input", input ? tensor(g, id, DataType::FLOAT32) : nhwc_tensor(g, id, o.activations)},
              {"perm", input ? std::vector<int>{0, 2, 3, 1} : std::vector<int>{0, 3, 1, 2}}};
    if (o.workers) j["workers"] = o.workers;
    TS_ASSIGN_OR_RETURN(OpQuery q, parse_op_query(j.dump()));
    ops.insert(input ? ops.begin() : ops.end(), ModelOp{.node = g.value(id).name + (input ? ":to_nhwc" : ":to_nchw"),
                                                        .op_type = "layout",
                                                        .query = std::move(q)});
    return ok_status();
  };
  for (int id : g.inputs) TS_RETURN_IF_ERROR(edge(id, true));
  for (int id : g.outputs) TS_RETURN_IF_ERROR(edge(id, false));
  return ops;
}

}  // namespace tessera::perfmodel
