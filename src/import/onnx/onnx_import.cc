#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "microsoft_ops.h"
#include "tessera/graph/host_eval.h"
#include "tessera/import/onnx.h"
#include "tessera/numerics/bfloat16.h"
#include "tessera/numerics/float16.h"

namespace tessera::importer {
namespace {

using graph::Attribute;
using graph::ElemType;
using graph::HostTensor;

constexpr int kMinOpset = 1;   // older opsets' semantics are kept where they differ (Softmax, Slice, Pad, Clip)
constexpr int kMaxOpset = 17;  // ONNX 1.12, Debian's

StatusOr<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return not_found_error("cannot open '{}'", path);
  const std::streamoff size = in.tellg();
  if (size < 0) return invalid_argument_error("cannot read '{}'", path);
  std::string bytes(static_cast<size_t>(size), '\0');  // one copy of the file, read in place
  in.seekg(0);
  if (!in.read(bytes.data(), size)) return invalid_argument_error("cannot read '{}'", path);
  return bytes;
}

const char* type_name(int t) {
  return onnx::TensorProto::DataType_IsValid(t) ? onnx::TensorProto::DataType_Name(static_cast<onnx::TensorProto::DataType>(t)).c_str()
                                               : "an unknown type";
}

// Bytes per element of a tensor type, 0 when Tessera cannot read it.
size_t elem_size(int t) {
  switch (t) {
    case onnx::TensorProto::DOUBLE: case onnx::TensorProto::INT64: case onnx::TensorProto::UINT64: return 8;
    case onnx::TensorProto::FLOAT: case onnx::TensorProto::INT32: case onnx::TensorProto::UINT32: return 4;
    case onnx::TensorProto::FLOAT16: case onnx::TensorProto::BFLOAT16: case onnx::TensorProto::INT16:
    case onnx::TensorProto::UINT16: return 2;
    case onnx::TensorProto::INT8: case onnx::TensorProto::UINT8: case onnx::TensorProto::BOOL: return 1;
    default: return 0;
  }
}

bool is_float_type(int t) {
  return t == onnx::TensorProto::FLOAT || t == onnx::TensorProto::DOUBLE || t == onnx::TensorProto::FLOAT16 ||
         t == onnx::TensorProto::BFLOAT16;
}

StatusOr<ElemType> elem_type(int t, const std::string& what) {
  if (elem_size(t) == 0) return unimplemented_error("{}: element type {} is not supported", what, type_name(t));
  return is_float_type(t) ? ElemType::FLOAT32 : ElemType::INT64;
}

template <class T>
T load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));  // ONNX data is little-endian, as this machine
  return v;
}

double decode(const char* p, int t) {
  switch (t) {
    case onnx::TensorProto::FLOAT: return load<float>(p);
    case onnx::TensorProto::DOUBLE: return load<double>(p);
    case onnx::TensorProto::FLOAT16: return float16_to_float(load<uint16_t>(p));
    case onnx::TensorProto::BFLOAT16: return bfloat16_to_float(load<uint16_t>(p));
    case onnx::TensorProto::INT8: return load<int8_t>(p);
    case onnx::TensorProto::UINT8: return load<uint8_t>(p);
    case onnx::TensorProto::BOOL: return load<uint8_t>(p) != 0;
    case onnx::TensorProto::INT16: return load<int16_t>(p);
    case onnx::TensorProto::UINT16: return load<uint16_t>(p);
    case onnx::TensorProto::INT32: return load<int32_t>(p);
    case onnx::TensorProto::UINT32: return load<uint32_t>(p);
    default: return 0;
  }
}

// A TensorProto to a HostTensor: raw_data, typed fields or external data.
StatusOr<HostTensor> read_tensor(const onnx::TensorProto& t, const std::string& what, const std::string& base_dir,
                                 int64_t max_elements) {
  if (t.data_type() == onnx::TensorProto::UNDEFINED)
    return invalid_argument_error("{}: the tensor has no data type", what);
  TS_ASSIGN_OR_RETURN(ElemType type, elem_type(t.data_type(), what));
  HostTensor h;
  h.type = type;
  int64_t count = 1;
  for (int64_t d : t.dims()) {
    if (d < 0) return invalid_argument_error("{}: negative dim {}", what, d);
    if (d > 0 && count > max_elements / d)
      return invalid_argument_error("{}: declared shape over the limit of {} elements", what, max_elements);
    count *= d;
    h.dims.push_back(d);
  }
  const size_t es = elem_size(t.data_type());
  const auto n = static_cast<size_t>(count);
  std::string external;
  const std::string* raw = nullptr;
  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    std::string location;
    uint64_t offset = 0, length = n * es;
    for (const auto& kv : t.external_data()) {
      try {
        if (kv.key() == "location") location = kv.value();
        if (kv.key() == "offset") offset = std::stoull(kv.value());
        if (kv.key() == "length") length = std::stoull(kv.value());
      } catch (const std::exception&) {
        return invalid_argument_error("{}: external data '{}' = '{}' is not a number", what, kv.key(), kv.value());
      }
    }
    if (base_dir.empty()) return invalid_argument_error("{}: external data with no model directory to resolve it", what);
    if (location.empty() || location.find("..") != std::string::npos || location.front() == '/')
      return invalid_argument_error("{}: external data location '{}' is not a file next to the model", what, location);
    TS_ASSIGN_OR_RETURN(std::string file, read_file((std::filesystem::path(base_dir) / location).string()));
    if (length != n * es || offset > file.size() || length > file.size() - offset)
      return invalid_argument_error("{}: external data {} [{}, +{}) does not hold {} values", what, location, offset,
                                    length, n);
    external = file.substr(offset, length);
    raw = &external;
  } else if (t.has_raw_data()) {
    raw = &t.raw_data();
  }
  auto fill = [&](auto get) {
    if (type == ElemType::FLOAT32) {
      h.f.resize(n);
      for (size_t k = 0; k < n; ++k) h.f[k] = static_cast<float>(get(k));
    } else {
      h.i.resize(n);
      for (size_t k = 0; k < n; ++k) h.i[k] = static_cast<int64_t>(get(k));
    }
  };
  auto need = [&](int have, const char* field) -> Status {
    if (static_cast<size_t>(have) != n)
      return invalid_argument_error("{}: {} values in {} for {} elements of shape {}", what, have, field, n,
                                    graph::dims_to_string(h.dims));
    return ok_status();
  };
  if (raw) {
    if (raw->size() != n * es)
      return invalid_argument_error("{}: {} B of raw data for {} values of {} ({} B expected)", what, raw->size(), n,
                                    type_name(t.data_type()), n * es);
    const char* p = raw->data();
    const int dt = t.data_type();
    if (dt == onnx::TensorProto::INT64 || dt == onnx::TensorProto::UINT64) {
      h.i.resize(n);
      if (n) std::memcpy(h.i.data(), p, n * 8);
    } else if (dt == onnx::TensorProto::FLOAT) {
      h.f.resize(n);
      if (n) std::memcpy(h.f.data(), p, n * 4);
    } else {
      fill([&](size_t k) { return decode(p + k * es, dt); });
    }
    return h;
  }
  switch (t.data_type()) {
    case onnx::TensorProto::FLOAT:
      TS_RETURN_IF_ERROR(need(t.float_data_size(), "float_data"));
      fill([&](size_t k) { return double{t.float_data(static_cast<int>(k))}; });
      break;
    case onnx::TensorProto::DOUBLE:
      TS_RETURN_IF_ERROR(need(t.double_data_size(), "double_data"));
      fill([&](size_t k) { return t.double_data(static_cast<int>(k)); });
      break;
    case onnx::TensorProto::INT64:
      TS_RETURN_IF_ERROR(need(t.int64_data_size(), "int64_data"));
      h.i.assign(t.int64_data().begin(), t.int64_data().end());
      break;
    case onnx::TensorProto::UINT32: case onnx::TensorProto::UINT64:
      TS_RETURN_IF_ERROR(need(t.uint64_data_size(), "uint64_data"));
      h.i.assign(t.uint64_data().begin(), t.uint64_data().end());
      break;
    default: {
      // int32_data holds every narrower type, one value (or float16 bit pattern) each.
      TS_RETURN_IF_ERROR(need(t.int32_data_size(), "int32_data"));
      const int dt = t.data_type();
      fill([&](size_t k) {
        const int32_t v = t.int32_data(static_cast<int>(k));
        if (dt == onnx::TensorProto::FLOAT16) return double{float16_to_float(static_cast<uint16_t>(v))};
        if (dt == onnx::TensorProto::BFLOAT16) return double{bfloat16_to_float(static_cast<uint16_t>(v))};
        return double(v);
      });
    }
  }
  return h;
}

// The attribute kinds known attributes must have (a wrong kind is malformed).
const std::map<std::string, Attribute::Kind>& expected_kinds() {
  using K = Attribute::Kind;
  static const std::map<std::string, K> m = {
      {"kernel_shape", K::INTS}, {"strides", K::INTS},  {"pads", K::INTS},        {"dilations", K::INTS},
      {"output_padding", K::INTS}, {"output_shape", K::INTS}, {"perm", K::INTS},  {"group", K::INT},
      {"auto_pad", K::STRING},    {"ceil_mode", K::INT},  {"count_include_pad", K::INT}, {"epsilon", K::FLOAT},
      {"alpha", K::FLOAT},        {"beta", K::FLOAT},     {"gamma", K::FLOAT},    {"transA", K::INT},
      {"transB", K::INT},         {"to", K::INT},         {"keepdims", K::INT},   {"mode", K::STRING},
      {"coordinate_transformation_mode", K::STRING},      {"nearest_mode", K::STRING},
      {"cubic_coeff_a", K::FLOAT}, {"exclude_outside", K::INT}, {"storage_order", K::INT}, {"allowzero", K::INT},
      {"blocksize", K::INT}, {"split", K::INTS}, {"scales", K::FLOATS}};
  return m;
}

const char* kind_name(Attribute::Kind k) {
  switch (k) {
    case Attribute::Kind::INT: return "INT";
    case Attribute::Kind::FLOAT: return "FLOAT";
    case Attribute::Kind::STRING: return "STRING";
    case Attribute::Kind::INTS: return "INTS";
    case Attribute::Kind::FLOATS: return "FLOATS";
    case Attribute::Kind::TENSOR: return "TENSOR";
    case Attribute::Kind::STRINGS: return "STRINGS";
    case Attribute::Kind::GRAPH: return "GRAPH";
  }
  return "?";
}

StatusOr<std::shared_ptr<const graph::Graph>> import_subgraph(const onnx::GraphProto& gp, const std::string& what,
                                                              const std::string& base_dir, int64_t max_elements,
                                                              int opset);

StatusOr<Attribute> read_attribute(const onnx::AttributeProto& a, const std::string& label, const std::string& base_dir,
                                   int64_t max_elements, int opset) {
  Attribute r;
  const std::string what = fmt::format("{}: attribute '{}'", label, a.name());
  switch (a.type()) {
    case onnx::AttributeProto::INT: r.kind = Attribute::Kind::INT, r.i = a.i(); break;
    case onnx::AttributeProto::FLOAT: r.kind = Attribute::Kind::FLOAT, r.f = a.f(); break;
    case onnx::AttributeProto::STRING: r.kind = Attribute::Kind::STRING, r.s = a.s(); break;
    case onnx::AttributeProto::INTS:
      r.kind = Attribute::Kind::INTS, r.ints.assign(a.ints().begin(), a.ints().end());
      break;
    case onnx::AttributeProto::FLOATS:
      r.kind = Attribute::Kind::FLOATS, r.floats.assign(a.floats().begin(), a.floats().end());
      break;
    case onnx::AttributeProto::STRINGS:
      r.kind = Attribute::Kind::STRINGS, r.strings.assign(a.strings().begin(), a.strings().end());
      break;
    case onnx::AttributeProto::TENSOR: {
      r.kind = Attribute::Kind::TENSOR;
      TS_ASSIGN_OR_RETURN(HostTensor t, read_tensor(a.t(), what, base_dir, max_elements));
      r.t = std::move(t);
      break;
    }
    case onnx::AttributeProto::GRAPH: {
      r.kind = Attribute::Kind::GRAPH;
      TS_ASSIGN_OR_RETURN(r.g, import_subgraph(a.g(), what, base_dir, max_elements, opset));
      break;
    }
    case onnx::AttributeProto::UNDEFINED:
      // IR 3 files may leave the type out; infer it from the one field set.
      if (a.has_i()) r.kind = Attribute::Kind::INT, r.i = a.i();
      else if (a.has_f()) r.kind = Attribute::Kind::FLOAT, r.f = a.f();
      else if (a.has_s()) r.kind = Attribute::Kind::STRING, r.s = a.s();
      else if (a.ints_size()) r.kind = Attribute::Kind::INTS, r.ints.assign(a.ints().begin(), a.ints().end());
      else if (a.floats_size()) r.kind = Attribute::Kind::FLOATS, r.floats.assign(a.floats().begin(), a.floats().end());
      else return invalid_argument_error("{} has no type and no value", what);
      break;
    default:
      return unimplemented_error("{} is of type {} (lists of graphs and sparse tensors are not supported)", what,
                                 onnx::AttributeProto::AttributeType_Name(a.type()));
  }
  auto it = expected_kinds().find(a.name());
  if (it != expected_kinds().end() && it->second != r.kind &&
      !(a.name() == "scales" && r.kind == Attribute::Kind::FLOATS))
    return invalid_argument_error("{} is {}, expected {}", what, kind_name(r.kind), kind_name(it->second));
  return r;
}

// A Constant node's value.
StatusOr<HostTensor> constant_value(const graph::Node& n) {
  for (const auto& [name, a] : n.attrs) {
    if (name == "value" && a.t) return *a.t;
    if (name == "value_float") return HostTensor::floats({}, {a.f});
    if (name == "value_floats")
      return HostTensor::floats({static_cast<int64_t>(a.floats.size())}, a.floats);
    if (name == "value_int") return HostTensor::ints({}, {a.i});
    if (name == "value_ints") return HostTensor::ints({static_cast<int64_t>(a.ints.size())}, a.ints);
  }
  return invalid_argument_error("{}: no 'value', 'value_float(s)' or 'value_int(s)' attribute (sparse and string "
                                "constants are not supported)",
                                n.label());
}

// Rewires readers of Identity / inference Dropout outputs to their inputs.
void remove_identities(graph::Graph& g) {
  const std::set<int> outputs(g.outputs.begin(), g.outputs.end());
  std::map<int, int> alias;
  auto resolve = [&](int v) {
    while (alias.count(v)) v = alias[v];
    return v;
  };
  std::vector<graph::Node> kept;
  for (graph::Node& n : g.nodes) {
    for (int& in : n.inputs)
      if (in >= 0) in = resolve(in);
    const bool passthrough = n.op_type == "Identity" || (n.op_type == "Dropout" && n.outputs.size() == 1);
    if (passthrough && n.inputs.size() == 1 && n.inputs[0] >= 0 && !outputs.count(n.outputs[0])) {
      alias[n.outputs[0]] = n.inputs[0];
      continue;
    }
    kept.push_back(std::move(n));
  }
  g.nodes = std::move(kept);
}


// The integer type a quantizing node writes, as the attribute
// tessera_quant_type ("uint8", "int8", ...): Tessera holds integers as INT64
// (graph.h), which forgets the range QuantizeLinear saturates to. ONNX takes
// it from the zero point's type (uint8 when there is none); the zero point
// is an initializer, a Constant, a Cast or another quantizer's output, so the
// types are followed through the sorted nodes. `types` holds the file's
// element types by value id (initializers, inputs, value_info, Constants).
void record_quant_types(graph::Graph& g, std::map<int, int> types) {
  auto type_of = [&](const graph::Node& n, size_t k) {
    if (k >= n.inputs.size() || n.inputs[k] < 0) return static_cast<int>(onnx::TensorProto::UINT8);
    auto it = types.find(n.inputs[k]);
    return it == types.end() ? static_cast<int>(onnx::TensorProto::UNDEFINED) : it->second;
  };
  auto name = [](int t) {
    std::string s = type_name(t);
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return s;
  };
  // Ops whose output has their first input's element type.
  static const std::set<std::string> passthrough = {
      "Reshape", "Flatten",  "Squeeze",      "Unsqueeze",    "Transpose", "Slice", "Gather", "Concat", "Split",
      "MaxPool", "Identity", "DepthToSpace", "SpaceToDepth", "Resize",    "Pad",   "Tile",   "Expand"};
  for (graph::Node& n : g.nodes) {
    int out = onnx::TensorProto::UNDEFINED;
    size_t zero_point = 0;  // the input whose type names the result's, 0: none
    if (n.op_type == "QuantizeLinear") zero_point = 2;
    if (n.op_type == "QLinearConv" || n.op_type == "QLinearMatMul") zero_point = 7;
    if (zero_point) {
      out = type_of(n, zero_point);
      if (out != onnx::TensorProto::UNDEFINED) {
        graph::Attribute a;
        a.kind = graph::Attribute::Kind::STRING;
        a.s = name(out);
        n.attrs["tessera_quant_type"] = a;
      }
      if (!n.outputs.empty()) types[n.outputs[0]] = out;
    } else if (n.op_type == "DynamicQuantizeLinear") {
      for (size_t k : {size_t{0}, size_t{2}})
        if (k < n.outputs.size()) types[n.outputs[k]] = onnx::TensorProto::UINT8;
    } else if (n.op_type == "Cast" && !n.outputs.empty()) {
      types[n.outputs[0]] = static_cast<int>(n.attr_int("to", onnx::TensorProto::FLOAT));
    } else if (passthrough.count(n.op_type) && !n.inputs.empty()) {
      const int t = type_of(n, 0);
      for (int o : n.outputs) types[o] = t;
    }
  }
}
// The values a node's subgraphs read from the scopes around them become the
// node's inputs too (after its own, named in "tessera_captures"), so that
// the outer graph orders and keeps their producers.
void add_captures(graph::Node& n, const std::function<int(const std::string&)>& value_id) {
  std::vector<std::string> names;
  for (const auto& [key, a] : n.attrs)
    if (a.kind == Attribute::Kind::GRAPH && a.g)
      for (int v : a.g->inputs)
        if (std::find(names.begin(), names.end(), a.g->value(v).name) == names.end())
          names.push_back(a.g->value(v).name);
  if (names.empty()) return;
  for (const std::string& name : names) n.inputs.push_back(value_id(name));
  n.attrs["tessera_captures"] = Attribute{.kind = Attribute::Kind::STRINGS, .strings = names};
}

// A subgraph (an If's branch): its initializers and Constant nodes become
// constants, its nodes are read as the main graph's are, and every value it
// reads but neither declares nor makes (one of the scopes around it) becomes
// one of its inputs, by name. Declared inputs (a Loop body's) and the
// com.microsoft ops are not supported in subgraphs.
StatusOr<std::shared_ptr<const graph::Graph>> import_subgraph(const onnx::GraphProto& gp, const std::string& what,
                                                              const std::string& base_dir, int64_t max_elements,
                                                              int opset) {
  if (gp.input_size() > 0)
    return unimplemented_error("{}: a subgraph with declared inputs (a Loop or Scan body) is not supported", what);
  auto sg = std::make_shared<graph::Graph>();
  sg->opset = opset;
  std::map<std::string, int> ids;
  std::set<int> made;
  auto value_id = [&](const std::string& name) {
    if (auto it = ids.find(name); it != ids.end()) return it->second;
    graph::Value v;
    v.name = name;
    return ids[name] = sg->add_value(std::move(v));
  };
  for (const onnx::TensorProto& t : gp.initializer()) {
    TS_ASSIGN_OR_RETURN(HostTensor h, read_tensor(t, fmt::format("{}: initializer '{}'", what, t.name()), base_dir,
                                                  max_elements));
    graph::Value& v = sg->value(value_id(t.name()));
    v.type = h.type, v.dims = h.dims, v.has_shape = true, v.constant = std::move(h);
    made.insert(ids[t.name()]);
  }
  for (int i = 0; i < gp.node_size(); ++i) {
    const onnx::NodeProto& np = gp.node(i);
    graph::Node n;
    n.op_type = np.op_type();
    n.name = np.name().empty() ? fmt::format("{}_{}", np.op_type(), i) : np.name();
    if (!np.domain().empty() && np.domain() != "ai.onnx")
      return unimplemented_error("{}: {} in domain '{}' (subgraphs read the default domain only)", what, n.label(),
                                 np.domain());
    for (const auto& a : np.attribute()) {
      if (n.attrs.count(a.name())) return invalid_argument_error("{}: attribute '{}' is given twice", n.label(), a.name());
      TS_ASSIGN_OR_RETURN(n.attrs[a.name()], read_attribute(a, n.label(), base_dir, max_elements, opset));
    }
    for (const auto& name : np.input()) n.inputs.push_back(name.empty() ? -1 : value_id(name));
    add_captures(n, value_id);
    for (const auto& name : np.output()) {
      const int id = value_id(name.empty() ? fmt::format("{}:unused{}", n.name, n.outputs.size()) : name);
      if (!made.insert(id).second) return invalid_argument_error("{}: value '{}' is made twice", what, name);
      n.outputs.push_back(id);
    }
    if (n.op_type == "Constant") {
      TS_ASSIGN_OR_RETURN(HostTensor h, constant_value(n));
      graph::Value& v = sg->value(n.outputs.at(0));
      v.type = h.type, v.dims = h.dims, v.has_shape = true, v.constant = std::move(h);
      continue;
    }
    sg->nodes.push_back(std::move(n));
  }
  for (const onnx::ValueInfoProto& out : gp.output()) sg->outputs.push_back(value_id(out.name()));
  if (sg->outputs.empty()) return invalid_argument_error("{}: the subgraph has no outputs", what);
  for (size_t v = 0; v < sg->values.size(); ++v)  // read here, made outside
    if (!made.count(static_cast<int>(v))) sg->inputs.push_back(static_cast<int>(v));
  TS_RETURN_IF_ERROR(sg->topological_sort());
  return std::shared_ptr<const graph::Graph>(std::move(sg));
}

}  // namespace

StatusOr<graph::HostTensor> load_tensor_proto(const std::string& path) {
  TS_ASSIGN_OR_RETURN(std::string bytes, read_file(path));
  onnx::TensorProto t;
  if (!t.ParseFromString(bytes)) return invalid_argument_error("{}: not a serialized ONNX TensorProto", path);
  return read_tensor(t, path, std::filesystem::path(path).parent_path().string(), int64_t{1} << 31);
}

StatusOr<graph::Graph> import_onnx(const std::string& path, const OnnxImportOptions& options) {
  TS_ASSIGN_OR_RETURN(std::string bytes, read_file(path));
  auto g = import_onnx_bytes(bytes, options, std::filesystem::path(path).parent_path().string());
  if (!g.ok()) return Status(g.status().code(), fmt::format("{}: {}", path, g.status().message()));
  return g;
}

StatusOr<graph::Graph> import_onnx_bytes(std::string_view bytes, const OnnxImportOptions& options,
                                         const std::string& base_dir) {
  onnx::ModelProto model;
  if (bytes.size() > static_cast<size_t>(INT32_MAX) || !model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    return invalid_argument_error("not an ONNX model: the protobuf does not parse ({} B; truncated or another format?)",
                                  bytes.size());
  if (!model.has_graph()) return invalid_argument_error("the model has no graph");
  graph::Graph g;
  g.opset = -1;
  for (const auto& imp : model.opset_import()) {
    if (imp.domain().empty() || imp.domain() == "ai.onnx") g.opset = static_cast<int>(imp.version());
  }
  if (g.opset < 0) {
    if (model.opset_import_size() > 0)
      return unimplemented_error("the model imports no default-domain (ai.onnx) opset");
    g.opset = kMinOpset;  // IR 3 files without opset_import
  }
  if (g.opset < kMinOpset || g.opset > kMaxOpset)
    return unimplemented_error("opset {} is outside the range Tessera supports ({}-{})", g.opset, kMinOpset, kMaxOpset);
  const onnx::GraphProto& gp = model.graph();
  if (gp.sparse_initializer_size() > 0)
    return unimplemented_error("{} sparse initializers; Tessera reads dense initializers only", gp.sparse_initializer_size());
  const int64_t max_elements = options.infer.max_elements;

  std::map<std::string, int> ids;
  std::map<int, int> file_types;  // value id -> the file's element type (record_quant_types)
  auto value_id = [&](const std::string& name) {
    auto it = ids.find(name);
    if (it != ids.end()) return it->second;
    graph::Value v;
    v.name = name;
    const int id = g.add_value(std::move(v));
    ids[name] = id;
    return id;
  };
  for (const onnx::TensorProto& t : gp.initializer()) {
    if (t.name().empty()) return invalid_argument_error("an initializer has no name");
    if (ids.count(t.name())) return invalid_argument_error("initializer '{}' is defined twice", t.name());
    TS_ASSIGN_OR_RETURN(HostTensor h, read_tensor(t, fmt::format("initializer '{}'", t.name()), base_dir, max_elements));
    graph::Value& v = g.value(value_id(t.name()));
    file_types[value_id(t.name())] = t.data_type();
    v.type = h.type;
    v.dims = h.dims;
    v.has_shape = true;
    v.constant = std::move(h);
  }
  for (const onnx::ValueInfoProto& in : gp.input()) {
    const int id = value_id(in.name());
    if (g.is_constant(id)) continue;  // IR 3 lists initializers as inputs too
    if (std::find(g.inputs.begin(), g.inputs.end(), id) != g.inputs.end())
      return invalid_argument_error("graph input '{}' is listed twice", in.name());
    graph::Value& v = g.value(id);
    if (!in.type().has_tensor_type())
      return unimplemented_error("graph input '{}' is not a tensor (sequences, maps and optionals are not supported)",
                                 in.name());
    const auto& tt = in.type().tensor_type();
    TS_ASSIGN_OR_RETURN(v.type, elem_type(tt.elem_type(), fmt::format("graph input '{}'", in.name())));
    file_types[id] = tt.elem_type();
    if (auto it = options.input_shapes.find(in.name()); it != options.input_shapes.end()) {
      v.dims = it->second;
    } else if (tt.has_shape()) {
      for (const auto& d : tt.shape().dim()) {
        if (d.has_dim_value()) {
          if (d.dim_value() < 0)
            return invalid_argument_error("graph input '{}' declares a negative dim {}", in.name(), d.dim_value());
          v.dims.push_back(d.dim_value());
        } else {
          v.dims.push_back(options.symbolic_dim);  // a symbolic ('N', 'batch') or unknown dim
        }
      }
    } else {
      return invalid_argument_error("graph input '{}' has no shape; give one in OnnxImportOptions::input_shapes",
                                    in.name());
    }
    v.has_shape = true;
    g.inputs.push_back(id);
  }
  for (int i = 0; i < gp.node_size(); ++i) {
    const onnx::NodeProto& np = gp.node(i);
    graph::Node n;
    n.op_type = np.op_type();
    n.name = np.name().empty() ? fmt::format("{}_{}", np.op_type(), i) : np.name();
    const bool microsoft = np.domain() == "com.microsoft" && is_microsoft_op(n.op_type);
    if (!np.domain().empty() && np.domain() != "ai.onnx" && !microsoft)
      return unimplemented_error(
          "{}: domain '{}' is not supported (Tessera reads the default ai.onnx domain, and com.microsoft's {})",
          n.label(), np.domain(), microsoft_ops());
    if (n.op_type.empty()) return invalid_argument_error("node {} has no op type", i);
    for (const auto& a : np.attribute()) {
      if (n.attrs.count(a.name())) return invalid_argument_error("{}: attribute '{}' is given twice", n.label(), a.name());
      TS_ASSIGN_OR_RETURN(n.attrs[a.name()], read_attribute(a, n.label(), base_dir, max_elements, g.opset));
    }
    for (const auto& name : np.input()) n.inputs.push_back(name.empty() ? -1 : value_id(name));
    add_captures(n, value_id);
    if (np.output_size() == 0) return invalid_argument_error("{} has no outputs", n.label());
    for (const auto& name : np.output()) {
      if (name.empty()) {  // a skipped optional output: give it a private name
        n.outputs.push_back(value_id(fmt::format("{}:unused{}", n.name, n.outputs.size())));
        continue;
      }
      const int id = value_id(name);
      if (g.is_constant(id) || std::find(g.inputs.begin(), g.inputs.end(), id) != g.inputs.end())
        return invalid_argument_error("{} writes '{}', which is a graph input or initializer", n.label(), name);
      n.outputs.push_back(id);
    }
    if (n.op_type == "Constant") {
      if (n.outputs.size() != 1) return invalid_argument_error("{} has {} outputs, expected 1", n.label(), n.outputs.size());
      TS_ASSIGN_OR_RETURN(HostTensor h, constant_value(n));
      if (auto a = n.attrs.find("value"); a != n.attrs.end() && a->second.t) {
        for (const auto& pa : np.attribute())
          if (pa.name() == "value") file_types[n.outputs[0]] = pa.t().data_type();
      }
      graph::Value& v = g.value(n.outputs[0]);
      if (v.constant) return invalid_argument_error("value '{}' is produced by two nodes", v.name);
      v.type = h.type;
      v.dims = h.dims;
      v.has_shape = true;
      v.constant = std::move(h);
      continue;
    }
    if (microsoft) {
      TS_ASSIGN_OR_RETURN(std::vector<graph::Node> standard, expand_microsoft_op(g, n));
      for (graph::Node& e : standard) g.nodes.push_back(std::move(e));
      continue;
    }
    g.nodes.push_back(std::move(n));
  }
  for (const onnx::ValueInfoProto& out : gp.output()) {
    auto it = ids.find(out.name());
    if (it == ids.end()) return invalid_argument_error("graph output '{}' is not produced by any node", out.name());
    g.outputs.push_back(it->second);
  }
  if (g.outputs.empty()) return invalid_argument_error("the graph has no outputs");
  for (const onnx::ValueInfoProto& vi : gp.value_info())
    if (auto it = ids.find(vi.name()); it != ids.end() && vi.type().has_tensor_type())
      file_types.emplace(it->second, vi.type().tensor_type().elem_type());
  TS_RETURN_IF_ERROR(g.topological_sort());
  record_quant_types(g, std::move(file_types));
  remove_identities(g);
  if (options.infer_shapes) {
    TS_RETURN_IF_ERROR(graph::infer_shapes(g, options.infer));
    g.remove_dead_nodes();
  }
  return g;
}

StatusOr<std::map<std::string, HostTensor>> load_onnx_initializer_tensors(const std::string& path) {
  TS_ASSIGN_OR_RETURN(std::string bytes, read_file(path));
  onnx::ModelProto model;
  if (!model.ParseFromString(bytes)) return invalid_argument_error("{}: not an ONNX model (protobuf parse failed)", path);
  if (model.graph().sparse_initializer_size() > 0)
    return unimplemented_error("{}: {} sparse initializers; Tessera reads dense initializers only", path,
                               model.graph().sparse_initializer_size());
  const std::string dir = std::filesystem::path(path).parent_path().string();
  std::map<std::string, HostTensor> out;
  for (const onnx::TensorProto& t : model.graph().initializer()) {
    const std::string what = fmt::format("{}: initializer '{}'", path, t.name());
    TS_ASSIGN_OR_RETURN(HostTensor h, read_tensor(t, what, dir, int64_t{1} << 31));
    out.emplace(t.name(), std::move(h));
  }
  return out;
}

std::vector<std::string> importable_ops() {
  std::vector<std::string> ops;
  for (const std::string& op : graph::host_supported_ops())
    if (graph::has_shape_rule(op)) ops.push_back(op);
  for (const char* op : {"Conv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
                         "Resize", "Upsample", "Constant"})
    ops.push_back(op);
  std::sort(ops.begin(), ops.end());
  return ops;
}

}  // namespace tessera::importer
