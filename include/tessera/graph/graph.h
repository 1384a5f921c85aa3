// The graph IR: what a model computes, independent of any file format or
// device. Importers (src/import/) build it, passes (passes.h) rewrite it, the
// runtime (tessera/runtime/compiled_model.h) lowers it onto device ops.
//
// A Graph is a list of nodes in topological order over values. Every value
// has a static shape (ONNX's logical layout, NCHW for images) and an element
// type; constants (initializers, folded subgraphs) carry their data on the
// host. Ops keep ONNX's names and attributes, so an ONNX node is one Node.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/base/status.h"

namespace tessera::graph {

// Element types a value may have. Integer and boolean types of a file are
// read as INT64 (shape arithmetic, indices); float types as FLOAT32.
enum class ElemType : uint8_t { FLOAT32, INT64 };
const char* to_string(ElemType t);

// A host array in row-major order: the data of constants and of host-side
// (reference) evaluation. Exactly one of f / i is used, by `type`.
struct HostTensor {
  ElemType type = ElemType::FLOAT32;
  std::vector<int64_t> dims;  // empty: a scalar
  std::vector<float> f;
  std::vector<int64_t> i;

  static HostTensor floats(std::vector<int64_t> dims, std::vector<float> values);
  static HostTensor ints(std::vector<int64_t> dims, std::vector<int64_t> values);
  int64_t volume() const;
  size_t size() const { return type == ElemType::FLOAT32 ? f.size() : i.size(); }
  double at(size_t k) const { return type == ElemType::FLOAT32 ? double{f[k]} : static_cast<double>(i[k]); }
  // "f32[1,3,224,224]"
  std::string descriptor() const;
};

struct Value {
  std::string name;
  ElemType type = ElemType::FLOAT32;
  std::vector<int64_t> dims;  // valid once shapes are inferred (has_shape)
  bool has_shape = false;
  std::optional<HostTensor> constant;
  int producer = -1;  // node index, -1 for graph inputs and constants
};

class Graph;

// An attribute: the ONNX kinds Tessera reads.
struct Attribute {
  enum class Kind : uint8_t { INT, FLOAT, STRING, INTS, FLOATS, TENSOR, STRINGS, GRAPH };
  Kind kind = Kind::INT;
  int64_t i = 0;
  float f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<float> floats;
  std::optional<HostTensor> t;
  std::vector<std::string> strings;  // (recurrent layers' activations)
  // GRAPH: a subgraph (If's branches), whose inputs are the values it reads
  // from the scopes around it, by name (the importer adds them to the node's
  // inputs too, named in its "tessera_captures" attribute).
  std::shared_ptr<const Graph> g;
};

struct Node {
  std::string name;     // the file's node name, or "<op_type>_<index>" when it has none
  std::string op_type;  // ONNX op type ("Conv", "Relu", ...) or a Tessera fused op ("FusedConv")
  std::vector<int> inputs;   // value ids; -1 for a skipped optional input
  std::vector<int> outputs;  // value ids
  std::map<std::string, Attribute> attrs;

  bool has_attr(const std::string& n) const { return attrs.count(n) != 0; }
  int64_t attr_int(const std::string& n, int64_t dflt) const;
  float attr_float(const std::string& n, float dflt) const;
  std::string attr_string(const std::string& n, const std::string& dflt) const;
  std::vector<int64_t> attr_ints(const std::string& n, std::vector<int64_t> dflt = {}) const;
  std::vector<float> attr_floats(const std::string& n, std::vector<float> dflt = {}) const;
  std::vector<std::string> attr_strings(const std::string& n) const;
  // "Conv 'conv1'" for error messages.
  std::string label() const;
};

class Graph {
 public:
  int opset = 17;  // the default-domain opset the nodes follow
  std::vector<Value> values;
  std::vector<Node> nodes;
  std::vector<int> inputs;   // non-constant graph inputs, in file order
  std::vector<int> outputs;

  int add_value(Value v);
  // The id of a value by name, or -1.
  int find(const std::string& name) const;
  const Value& value(int id) const { return values[static_cast<size_t>(id)]; }
  Value& value(int id) { return values[static_cast<size_t>(id)]; }
  bool is_constant(int id) const { return id >= 0 && values[static_cast<size_t>(id)].constant.has_value(); }

  // Orders nodes so every input is produced before it is read. Errors:
  // INVALID_ARGUMENT naming a node on a cycle, or a node reading a value no
  // node, input or initializer provides.
  Status topological_sort();
  // Recomputes Value::producer; drops nodes whose outputs nothing reads
  // (not graph outputs, not read by another node) and values no one uses.
  void remove_dead_nodes();
  // Turns a graph input into a constant (a model's shape or weight inputs
  // given at compile time). NOT_FOUND for an unknown name; INVALID_ARGUMENT
  // when the data's type or shape contradicts the declared one.
  Status bind_constant(const std::string& input_name, HostTensor data);
  // Consumers of each value: (node index, input slot).
  std::vector<std::vector<std::pair<int, int>>> consumers() const;
  // One line per node: "%y = Conv(%x, %w) {kernel_shape=[3,3]} : f32[1,8,5,5]".
  std::string to_string() const;
};

std::string dims_to_string(const std::vector<int64_t>& dims);
// The product of `dims` (1 for a scalar).
int64_t dims_volume(const std::vector<int64_t>& dims);

}  // namespace tessera::graph
