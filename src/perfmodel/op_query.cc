// The predictor's op table and the OpQuery JSON parser (nlohmann-json).
#include "tessera/perfmodel/op_query.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <nlohmann/json.hpp>

#include "tessera/device/buffer.h"
#include "tessera/ops/activation.h"

namespace tessera::perfmodel {
namespace {

using nlohmann::json;
constexpr auto N = ArgKind::kNumber;
constexpr auto V = ArgKind::kNumbers;
constexpr auto W = ArgKind::kWord;

// "same": the first input's dtype (resolved when parsed).
constexpr ArgSpec kConvArgs[] = {
    {"out_channels", N, 1, "", "output channels"},
    {"kernel_size", V, 2, "", "(kh, kw)"},
    {"stride", V, 2, "[1,1]", "(sh, sw)"},
    {"padding", V, 4, "[0,0,0,0]", "(top, bottom, left, right), or (ph, pw)"},
    {"dilation", V, 2, "[1,1]", "(dh, dw)"},
    {"groups", N, 1, "1", ""},
    {"activation", W, 0, "\"identity\"", "the fused activation (relu, silu, ...)"},
    {"weights_dtype", W, 0, "\"same\"", "default: the input's dtype"},
    {"dtype", W, 0, "\"same\"", "output dtype; default: the input's"},
    {"math_fidelity", W, 0, "\"HiFi4\"", "LoFi | HiFi2 | HiFi3 | HiFi4"},
    {"residual", N, 1, "0", "1: a skip connection of the output's shape, added by the kernel"},
    {"algorithm", W, 0, "\"auto\"", "the kernel (conv2d_algorithms' names); auto: conv2d's selection"},
};
constexpr ArgSpec kConvTransposeArgs[] = {
    {"out_channels", N, 1, "", "output channels"},
    {"kernel_size", V, 2, "[2,2]", "(kh, kw)"},
    {"stride", V, 2, "[2,2]", "(sh, sw)"},
    {"padding", V, 2, "[0,0]", "(ph, pw), symmetric"},
    {"output_padding", V, 2, "[0,0]", ""},
    {"dilation", V, 2, "[1,1]", ""},
    {"groups", N, 1, "1", ""},
    {"activation", W, 0, "\"identity\"", ""},
    {"weights_dtype", W, 0, "\"same\"", ""},
    {"dtype", W, 0, "\"same\"", "output dtype"},
    {"algorithm", W, 0, "\"auto\"", "the kernel (conv_transpose2d_algorithms' names)"},
};
constexpr ArgSpec kLinearArgs[] = {
    {"out_features", N, 1, "", "output features (the weight is out_features x in_features)"},
    {"bias", N, 1, "1", "1: with a bias"},
    {"activation", W, 0, "\"identity\"", ""},
    {"weights_dtype", W, 0, "\"same\"", ""},
    {"dtype", W, 0, "\"same\"", "output dtype"},
};
constexpr ArgSpec kMatmulArgs[] = {
    {"transpose_b", N, 1, "0", ""},
    {"activation", W, 0, "\"identity\"", ""},
    {"dtype", W, 0, "\"same\"", "output dtype"},
};
constexpr ArgSpec kUnaryArgs[] = {{"dtype", W, 0, "\"same\"", "output dtype"}};
constexpr ArgSpec kBinaryArgs[] = {
    {"activation", W, 0, "\"identity\"", "fused after the op"},
    {"dtype", W, 0, "\"same\"", "output dtype"},
};
constexpr ArgSpec kPoolArgs[] = {
    {"kernel_size", V, 2, "[2,2]", ""},
    {"stride", V, 2, "[2,2]", ""},
    {"padding", V, 2, "[0,0]", "(ph, pw), symmetric"},
    {"dilation", V, 2, "[1,1]", ""},
    {"ceil_mode", N, 1, "0", ""},
};
constexpr ArgSpec kUpsampleArgs[] = {
    {"scale_factor", V, 2, "[2,2]", "(sh, sw)"},
    {"mode", W, 0, "\"nearest\"", "nearest | bilinear"},
};
constexpr ArgSpec kTypecastArgs[] = {{"dtype", W, 0, "", "the output dtype"}};
constexpr ArgSpec kTilizeArgs[] = {{"dtype", W, 0, "\"same\"", "the output dtype"}};
constexpr ArgSpec kPermuteArgs[] = {{"perm", V, 0, "", "a permutation of the input's dims"}};
constexpr ArgSpec kConcatArgs[] = {{"dim", N, 1, "-1", ""}};
constexpr ArgSpec kSoftmaxArgs[] = {{"dim", N, 1, "-1", ""}};

#define TS_UNARY(name) \
  { name, "eltwise_unary", 1, 1, false, kUnaryArgs, "y = f(x)" }
#define TS_BINARY(name) \
  { name, "eltwise_binary", 1, 2, false, kBinaryArgs, "y = a op b (b: a's spec when omitted)" }
constexpr OpSpec kOps[] = {
    {"conv2d", "conv2d", 1, 1, true, kConvArgs, "conv2d, the weights prepared once"},
    {"conv_transpose2d", "conv_transpose2d", 1, 1, true, kConvTransposeArgs, "the weights prepared once"},
    {"linear", "matmul", 1, 1, false, kLinearArgs, "y = x W^T + b, W a device constant"},
    {"matmul", "matmul", 2, 2, false, kMatmulArgs, "a (.., M, K) x b (.., K, N)"},
    TS_UNARY("relu"),
    TS_UNARY("relu6"),
    TS_UNARY("silu"),
    TS_UNARY("gelu"),
    TS_UNARY("gelu_tanh"),
    TS_UNARY("sigmoid"),
    TS_UNARY("tanh"),
    TS_UNARY("hardswish"),
    TS_UNARY("hardsigmoid"),
    TS_UNARY("mish"),
    TS_UNARY("exp"),
    TS_UNARY("sqrt"),
    TS_UNARY("elu"),
    TS_UNARY("erf"),
    TS_UNARY("abs"),
    TS_UNARY("reciprocal"),
    TS_UNARY("softplus"),
    TS_UNARY("softsign"),
    TS_UNARY("celu"),
    TS_UNARY("thresholded_relu"),
    TS_UNARY("clip"),
    TS_UNARY("floor"),
    TS_UNARY("ceil"),
    TS_UNARY("round"),
    TS_UNARY("sign"),
    TS_BINARY("add"),
    TS_BINARY("sub"),
    TS_BINARY("mul"),
    TS_BINARY("div"),
    TS_BINARY("max"),
    TS_BINARY("min"),
    {"max_pool2d", "spatial", 1, 1, true, kPoolArgs, ""},
    {"avg_pool2d", "spatial", 1, 1, true, kPoolArgs, ""},
    {"global_avg_pool2d", "spatial", 1, 1, true, {}, ""},
    {"upsample", "spatial", 1, 1, true, kUpsampleArgs, ""},
    {"typecast", "data_movement", 1, 1, false, kTypecastArgs, ""},
    {"tilize", "data_movement", 1, 1, false, kTilizeArgs, "ROW_MAJOR to TILE"},
    {"untilize", "data_movement", 1, 1, false, {}, "TILE to ROW_MAJOR"},
    {"permute", "data_movement", 1, 1, false, kPermuteArgs, ""},
    {"concat", "data_movement", 2, 16, false, kConcatArgs, ""},
    {"softmax", "norm", 1, 1, false, kSoftmaxArgs, ""},
    {"layer_norm", "norm", 1, 1, false, {}, "over the last dim, no affine"},
};
#undef TS_UNARY
#undef TS_BINARY

std::string upper(std::string_view s) {
  std::string u(s);
  for (char& c : u) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return u;
}

std::string_view strip_prefix(std::string_view w) {  // "DataType::BFLOAT16", "DataType.BFLOAT16"
  for (std::string_view p : {"::", "."})
    if (auto i = w.rfind(p); i != std::string_view::npos) w.remove_prefix(i + p.size());
  return w;
}

StatusOr<std::string> word_of(const json& j, std::string_view what) {
  if (!j.is_string()) return invalid_argument_error("{}: expected a string, found {}", what, j.dump());
  return j.get<std::string>();
}

StatusOr<TensorQuery> parse_tensor(const json& j, std::string_view what) {
  if (!j.is_object())
    return invalid_argument_error("{}: expected an object with logical_shape, found {}", what, j.dump());
  TensorQuery t;
  auto shape = j.find("logical_shape");
  if (shape == j.end()) return invalid_argument_error("{}: logical_shape is missing", what);
  if (!shape->is_array() || shape->empty() || shape->size() > 8)
    return invalid_argument_error("{}.logical_shape: expected 1 to 8 dims, found {}", what, shape->dump());
  for (const json& d : *shape) {
    if (!d.is_number_integer() || d.get<int64_t>() < 1 || d.get<int64_t>() > (int64_t{1} << 24))
      return invalid_argument_error("{}.logical_shape: expected dims in [1, 2^24], found {}", what, shape->dump());
    t.logical_shape.push_back(d.get<uint32_t>());
  }
  // dtype / layout / memory_config at the top or in the original's "tensor_layout".
  const json* layout = &j;
  if (auto tl = j.find("tensor_layout"); tl != j.end()) {
    if (!tl->is_object()) return invalid_argument_error("{}.tensor_layout: expected an object", what);
    layout = &*tl;
  }
  for (const auto& [key, value] : j.items())
    if (key != "logical_shape" && key != "tensor_layout" && key != "dtype" && key != "layout" && key != "memory_config")
      return invalid_argument_error("{}: unknown field '{}' (expected logical_shape, dtype, layout, memory_config)",
                                    what, key);
  if (auto d = layout->find("dtype"); d != layout->end()) {
    TS_ASSIGN_OR_RETURN(std::string w, word_of(*d, std::string(what) + ".dtype"));
    auto dt = parse_dtype_word(w);
    if (!dt) return invalid_argument_error("{}.dtype: unknown dtype '{}' (FLOAT32, BFLOAT16, BFLOAT8_B, ...)", what, w);
    t.dtype = *dt;
  }
  auto page = layout->find("layout");
  if (page == layout->end()) page = layout->find("page_config");
  if (page != layout->end()) {
    std::string w = page->is_string() ? upper(strip_prefix(page->get<std::string>())) : page->dump();
    if (w == "ROW_MAJOR")
      t.layout = Layout::ROW_MAJOR;
    else if (w == "TILE")
      t.layout = Layout::TILE;
    else
      return invalid_argument_error("{}.layout: expected ROW_MAJOR or TILE, found {}", what, page->dump());
  }
  if (auto m = layout->find("memory_config"); m != layout->end()) {
    if (!m->is_object()) return invalid_argument_error("{}.memory_config: expected an object", what);
    for (const auto& [key, value] : m->items()) {
      if (!value.is_string()) return invalid_argument_error("{}.memory_config.{}: expected a string", what, key);
      const std::string w = upper(strip_prefix(value.get<std::string>()));
      if (key == "buffer_type") {
        if (w == "DRAM")
          t.buffer_type = BufferType::DRAM;
        else if (w == "L1")
          t.buffer_type = BufferType::L1;
        else
          return invalid_argument_error("{}.memory_config.buffer_type: expected DRAM or L1, found {}", what, w);
      } else if (key == "memory_layout") {
        if (w != "INTERLEAVED")
          return unimplemented_error(
              "{}.memory_config.memory_layout: {} inputs are not predicted yet (INTERLEAVED only)", what, w);
      } else {
        return invalid_argument_error("{}.memory_config: unknown field '{}' (expected buffer_type, memory_layout)",
                                      what, key);
      }
    }
  }
  if (is_block_float(t.dtype) && t.layout != Layout::TILE)
    return invalid_argument_error("{}: {} needs layout TILE, found ROW_MAJOR", what, data_type_name(t.dtype));
  return t;
}

StatusOr<ArgValue> parse_arg(const ArgSpec& spec, const json& j, const OpQuery& q) {
  ArgValue v;
  const std::string what = q.op + "." + std::string(spec.name);
  if (spec.kind == ArgKind::kWord) {
    TS_ASSIGN_OR_RETURN(v.word, word_of(j, what));
    return v;
  }
  if (j.is_number())
    v.numbers.push_back(j.get<double>());
  else if (j.is_array())
    for (const json& e : j) {
      if (!e.is_number()) return invalid_argument_error("{}: expected numbers, found {}", what, j.dump());
      v.numbers.push_back(e.get<double>());
    }
  else
    return invalid_argument_error("{}: expected a number or an array of numbers, found {}", what, j.dump());
  for (double d : v.numbers)
    if (!std::isfinite(d) || std::fabs(d) > 1e9) return invalid_argument_error("{}: {} is out of range", what, d);
  const size_t want = spec.kind == ArgKind::kNumber ? 1 : spec.count;
  if (spec.kind == ArgKind::kNumbers && spec.count == 4 && v.numbers.size() == 2)
    v.numbers = {v.numbers[0], v.numbers[0], v.numbers[1], v.numbers[1]};
  if (spec.kind == ArgKind::kNumbers && spec.count == 2 && v.numbers.size() == 1) v.numbers.push_back(v.numbers[0]);
  if (want != 0 && v.numbers.size() != want)
    return invalid_argument_error("{}: expected {} number(s), found {}", what, want, j.dump());
  return v;
}

bool is_activation(const std::string& w) { return parse_unary_op(w).has_value(); }

// Checks the inputs, words and arities against the op's table (allocates nothing on success).
Status check(const OpQuery& q) {
  const OpSpec* op = find_op(q.op);
  if (!op)
    return invalid_argument_error(
        "unknown op '{}' (known: conv2d, linear, matmul, relu, add, max_pool2d, ...; "
        "docs/predictor.md lists them)",
        q.op);
  if (q.inputs.size() < op->min_inputs || q.inputs.size() > op->max_inputs)
    return invalid_argument_error("{}: expected {} to {} input(s), found {}", q.op, op->min_inputs, op->max_inputs,
                                  q.inputs.size());
  for (const TensorQuery& t : q.inputs) {
    if (t.logical_shape.empty()) return invalid_argument_error("{}: an input has no logical_shape", q.op);
    if (op->spatial && t.logical_shape.size() != 4)
      return invalid_argument_error("{}: expected a 4-d (N, C, H, W) input, found rank {}", q.op,
                                    t.logical_shape.size());
  }
  for (const auto& [name, value] : q.args)
    if (std::none_of(op->args.begin(), op->args.end(), [&](const ArgSpec& a) { return a.name == name; }))
      return invalid_argument_error("{}: unknown argument '{}'", q.op, name);
  for (const ArgSpec& a : op->args) {
    auto it = q.args.find(a.name);
    if (it == q.args.end()) return invalid_argument_error("{}: argument '{}' is missing", q.op, a.name);
    const ArgValue& v = it->second;
    if (a.kind == ArgKind::kWord) {
      if (!v.numbers.empty()) return invalid_argument_error("{}.{}: expected a word", q.op, a.name);
      const bool dtype_arg = a.name == "dtype" || a.name == "weights_dtype";
      if (dtype_arg && v.word != "same" && !parse_dtype_word(v.word))
        return invalid_argument_error("{}.{}: unknown dtype '{}'", q.op, a.name, v.word);
      if (a.name == "activation" && !is_activation(v.word))
        return invalid_argument_error("{}.activation: unknown activation '{}' (identity, relu, silu, ...)", q.op,
                                      v.word);
      if (a.name == "mode" && v.word != "nearest" && v.word != "bilinear")
        return invalid_argument_error("{}.mode: expected nearest or bilinear, found '{}'", q.op, v.word);
      if (a.name == "math_fidelity" && v.word != "LoFi" && v.word != "HiFi2" && v.word != "HiFi3" && v.word != "HiFi4")
        return invalid_argument_error("{}.math_fidelity: expected LoFi, HiFi2, HiFi3 or HiFi4, found '{}'", q.op,
                                      v.word);
      continue;
    }
    const size_t want = a.kind == ArgKind::kNumber ? 1 : a.count;
    if (want != 0 && v.numbers.size() != want)
      return invalid_argument_error("{}.{}: expected {} number(s), found {}", q.op, a.name, want, v.numbers.size());
  }
  if (q.op == "permute") {
    std::vector<double> p = q.args.find("perm")->second.numbers;
    const size_t rank = q.inputs[0].logical_shape.size();
    std::sort(p.begin(), p.end());
    bool ok = p.size() == rank;
    for (size_t i = 0; ok && i < p.size(); ++i) ok = p[i] == static_cast<double>(i);
    if (!ok) return invalid_argument_error("permute.perm: expected a permutation of 0..{}", rank - 1);
  }
  if (q.op == "matmul")
    for (const TensorQuery& t : q.inputs)
      if (t.logical_shape.size() < 2) return invalid_argument_error("matmul: expected inputs of rank 2 or more");
  for (const auto& [name, v] : q.args) {
    if (name == "dim" || name == "perm") continue;
    const bool at_least_one = name == "kernel_size" || name == "stride" || name == "dilation";
    for (double d : v.numbers)
      if (d < (at_least_one ? 1 : 0) || (name == "scale_factor" && !(d > 0)))
        return invalid_argument_error("{}.{}: expected values of at least {}, found {}", q.op, name,
                                      at_least_one ? 1 : 0, d);
  }
  for (const char* positive : {"out_channels", "out_features", "groups"})
    if (auto it = q.args.find(positive); it != q.args.end() && it->second.numbers[0] < 1)
      return invalid_argument_error("{}.{}: expected at least 1, found {}", q.op, positive, it->second.numbers[0]);
  if (q.workers > 4096) return invalid_argument_error("workers: expected at most 4096, found {}", q.workers);
  return ok_status();
}

}  // namespace

uint64_t TensorQuery::volume() const {
  uint64_t v = 1;
  for (uint32_t d : logical_shape) v *= d;
  return v;
}

double OpQuery::num(std::string_view name, size_t i) const {
  auto it = args.find(name);
  return it != args.end() && i < it->second.numbers.size() ? it->second.numbers[i] : 0.0;
}

const std::string& OpQuery::word(std::string_view name) const {
  static const std::string kNone;
  auto it = args.find(name);
  return it != args.end() ? it->second.word : kNone;
}

std::span<const OpSpec> op_specs() { return kOps; }

const OpSpec* find_op(std::string_view name) {
  for (const OpSpec& op : kOps)
    if (op.name == name) return &op;
  return nullptr;
}

std::vector<std::string_view> op_families() {
  std::vector<std::string_view> f;
  for (const OpSpec& op : kOps)
    if (std::find(f.begin(), f.end(), op.family) == f.end()) f.push_back(op.family);
  return f;
}

std::optional<DataType> parse_dtype_word(std::string_view word) {
  std::string w(strip_prefix(word));
  for (char& c : w) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return parse_data_type(w);
}

StatusOr<OpQuery> parse_op_query(std::string_view text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument_error("op query: not valid JSON: {}", text.substr(0, 200));
  if (!j.is_object()) return invalid_argument_error("op query: expected a JSON object, found {}", j.dump());
  OpQuery q;
  auto op = j.find("op");
  if (op == j.end() || !op->is_string()) return invalid_argument_error("op query: expected \"op\": NAME (a string)");
  q.op = op->get<std::string>();
  const OpSpec* spec = find_op(q.op);
  if (!spec) return check(q);  // the unknown-op error
  std::optional<TensorQuery> first, second;
  for (const auto& [key, value] : j.items()) {
    if (key == "op") continue;
    if (key == "input" || key == "input_a") {
      if (first) return invalid_argument_error("{}: the first input is given twice (input, input_a)", q.op);
      TS_ASSIGN_OR_RETURN(first, parse_tensor(value, key));
    } else if (key == "input_b") {
      TS_ASSIGN_OR_RETURN(second, parse_tensor(value, key));
    } else if (key == "inputs") {
      if (!value.is_array()) return invalid_argument_error("{}.inputs: expected an array of tensors", q.op);
      for (size_t i = 0; i < value.size(); ++i) {
        TS_ASSIGN_OR_RETURN(TensorQuery t, parse_tensor(value[i], "inputs[" + std::to_string(i) + "]"));
        q.inputs.push_back(std::move(t));
      }
    } else if (key == "workers") {
      if (!value.is_number_unsigned())
        return invalid_argument_error("workers: expected a count, found {}", value.dump());
      q.workers = value.get<uint32_t>();
    } else {
      auto a = std::find_if(spec->args.begin(), spec->args.end(), [&](const ArgSpec& s) { return s.name == key; });
      if (a == spec->args.end()) {
        std::string known;
        for (const ArgSpec& s : spec->args) known += (known.empty() ? "" : ", ") + std::string(s.name);
        return invalid_argument_error("{}: unknown argument '{}' (expected input, inputs, workers{}{})", q.op, key,
                                      known.empty() ? "" : ", ", known);
      }
      TS_ASSIGN_OR_RETURN(q.args[key], parse_arg(*a, value, q));
    }
  }
  if (!q.inputs.empty() && (first || second))
    return invalid_argument_error("{}: give the inputs as \"inputs\" or as input/input_b, not both", q.op);
  if (first) q.inputs.push_back(*first);
  if (second) {
    if (!first) return invalid_argument_error("{}: input_b without input", q.op);
    q.inputs.push_back(*second);
  }
  if (q.inputs.empty()) return invalid_argument_error("{}: expected \"input\": {{\"logical_shape\": [...]}}", q.op);
  if (spec->family == "eltwise_binary" && q.inputs.size() == 1) q.inputs.push_back(q.inputs[0]);
  for (const ArgSpec& a : spec->args) {
    if (q.args.count(a.name)) continue;
    if (a.fallback.empty()) return invalid_argument_error("{}: argument '{}' is required ({})", q.op, a.name, a.doc);
    TS_ASSIGN_OR_RETURN(q.args[std::string(a.name)], parse_arg(a, json::parse(a.fallback, nullptr, false), q));
  }
  for (const char* name : {"dtype", "weights_dtype"})  // "same" and other spellings -> the dtype's name
    if (auto it = q.args.find(name); it != q.args.end() && it->second.numbers.empty()) {
      std::string& w = it->second.word;
      const auto dt = w == "same" ? std::optional<DataType>(q.inputs[0].dtype) : parse_dtype_word(w);
      if (!dt) return invalid_argument_error("{}.{}: unknown dtype '{}'", q.op, name, w);
      w = std::string(data_type_name(*dt));
    }
  TS_RETURN_IF_ERROR(check(q));
  return q;
}

Status validate(const OpQuery& query) { return check(query); }

namespace {
json number(double d) {  // integers print as integers
  return d == std::trunc(d) && std::fabs(d) < 1e15 ? json(static_cast<int64_t>(d)) : json(d);
}
}  // namespace

std::string to_json(const OpQuery& q) {
  json j = json::object();  // std::map keys: sorted
  j["op"] = q.op;
  json inputs = json::array();
  for (const TensorQuery& t : q.inputs)
    inputs.push_back(
        {{"logical_shape", t.logical_shape},
         {"dtype", upper(data_type_name(t.dtype))},
         {"layout", std::string(layout_name(t.layout))},
         {"memory_config",
          {{"buffer_type", std::string(buffer_type_name(t.buffer_type))}, {"memory_layout", "INTERLEAVED"}}}});
  j["inputs"] = inputs;
  for (const auto& [name, v] : q.args) {
    if (!v.word.empty() || v.numbers.empty())
      j[name] = v.word;
    else if (v.numbers.size() == 1 && find_op(q.op) &&
             std::any_of(find_op(q.op)->args.begin(), find_op(q.op)->args.end(),
                         [&](const ArgSpec& a) { return a.name == name && a.kind == ArgKind::kNumber; }))
      j[name] = number(v.numbers[0]);
    else {
      json a = json::array();
      for (double d : v.numbers) a.push_back(number(d));
      j[name] = a;
    }
  }
  if (q.workers) j["workers"] = q.workers;
  return j.dump();
}

}  // namespace tessera::perfmodel
