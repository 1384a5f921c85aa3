#include "tessera/graph/graph.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdint>
#include <queue>
#include <unordered_map>

namespace tessera::graph {

const char* to_string(ElemType t) { return t == ElemType::FLOAT32 ? "f32" : "i64"; }

std::string dims_to_string(const std::vector<int64_t>& dims) { return fmt::format("[{}]", fmt::join(dims, ",")); }

HostTensor HostTensor::floats(std::vector<int64_t> dims, std::vector<float> values) {
  HostTensor t;
  t.type = ElemType::FLOAT32;
  t.dims = std::move(dims);
  t.f = std::move(values);
  return t;
}

HostTensor HostTensor::ints(std::vector<int64_t> dims, std::vector<int64_t> values) {
  HostTensor t;
  t.type = ElemType::INT64;
  t.dims = std::move(dims);
  t.i = std::move(values);
  return t;
}

int64_t dims_volume(const std::vector<int64_t>& dims) {
  // Saturating: dims from a file may multiply past int64 (a forged image's
  // shape); such a volume then matches nothing real and fails the checks.
  int64_t n = 1;
  for (int64_t d : dims) {
    const bool negative = (n < 0) != (d < 0);
    if (__builtin_mul_overflow(n, d, &n)) return negative ? INT64_MIN : INT64_MAX;
  }
  return n;
}

int64_t HostTensor::volume() const { return dims_volume(dims); }

std::string HostTensor::descriptor() const { return fmt::format("{}{}", to_string(type), dims_to_string(dims)); }

int64_t Node::attr_int(const std::string& n, int64_t dflt) const {
  auto it = attrs.find(n);
  return it == attrs.end() ? dflt : it->second.i;
}
float Node::attr_float(const std::string& n, float dflt) const {
  auto it = attrs.find(n);
  return it == attrs.end() ? dflt : it->second.f;
}
std::string Node::attr_string(const std::string& n, const std::string& dflt) const {
  auto it = attrs.find(n);
  return it == attrs.end() ? dflt : it->second.s;
}
std::vector<int64_t> Node::attr_ints(const std::string& n, std::vector<int64_t> dflt) const {
  auto it = attrs.find(n);
  return it == attrs.end() ? dflt : it->second.ints;
}
std::vector<float> Node::attr_floats(const std::string& n, std::vector<float> dflt) const {
  auto it = attrs.find(n);
  return it == attrs.end() ? dflt : it->second.floats;
}
std::vector<std::string> Node::attr_strings(const std::string& n) const {
  auto it = attrs.find(n);
  return it == attrs.end() ? std::vector<std::string>{} : it->second.strings;
}
std::string Node::label() const { return fmt::format("{} '{}'", op_type, name); }

int Graph::add_value(Value v) {
  values.push_back(std::move(v));
  return static_cast<int>(values.size()) - 1;
}

int Graph::find(const std::string& name) const {
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].name == name) return static_cast<int>(i);
  return -1;
}

Status Graph::topological_sort() {
  // Kahn's algorithm over value producers; stable (file order among ready nodes).
  std::vector<int> producer(values.size(), -1);
  for (size_t n = 0; n < nodes.size(); ++n)
    for (int o : nodes[n].outputs) {
      if (producer[static_cast<size_t>(o)] >= 0)
        return invalid_argument_error("value '{}' is produced by two nodes: {} and {}", values[static_cast<size_t>(o)].name,
                                      nodes[static_cast<size_t>(producer[static_cast<size_t>(o)])].label(), nodes[n].label());
      producer[static_cast<size_t>(o)] = static_cast<int>(n);
    }
  std::vector<bool> available(values.size(), false);
  for (int i : inputs) available[static_cast<size_t>(i)] = true;
  for (size_t v = 0; v < values.size(); ++v)
    if (values[v].constant) available[v] = true;
  std::vector<int> pending(nodes.size(), 0);
  std::vector<std::vector<int>> readers(values.size());
  for (size_t n = 0; n < nodes.size(); ++n)
    for (int in : nodes[n].inputs) {
      if (in < 0 || available[static_cast<size_t>(in)]) continue;
      if (producer[static_cast<size_t>(in)] < 0)
        return invalid_argument_error("{} reads '{}', which no node, graph input or initializer provides",
                                      nodes[n].label(), values[static_cast<size_t>(in)].name);
      ++pending[n];
      readers[static_cast<size_t>(in)].push_back(static_cast<int>(n));
    }
  std::priority_queue<int, std::vector<int>, std::greater<>> ready;
  for (size_t n = 0; n < nodes.size(); ++n)
    if (pending[n] == 0) ready.push(static_cast<int>(n));
  std::vector<int> order;
  while (!ready.empty()) {
    const int n = ready.top();
    ready.pop();
    order.push_back(n);
    for (int o : nodes[static_cast<size_t>(n)].outputs)
      for (int r : readers[static_cast<size_t>(o)])
        if (--pending[static_cast<size_t>(r)] == 0) ready.push(r);
  }
  if (order.size() != nodes.size()) {
    for (size_t n = 0; n < nodes.size(); ++n)
      if (pending[n] > 0)
        return invalid_argument_error("the graph has a cycle through {} (its inputs depend on its own outputs)",
                                      nodes[n].label());
  }
  std::vector<Node> sorted;
  sorted.reserve(nodes.size());
  for (int n : order) sorted.push_back(std::move(nodes[static_cast<size_t>(n)]));
  nodes = std::move(sorted);
  for (auto& v : values) v.producer = -1;
  for (size_t n = 0; n < nodes.size(); ++n)
    for (int o : nodes[n].outputs) values[static_cast<size_t>(o)].producer = static_cast<int>(n);
  return ok_status();
}

void Graph::remove_dead_nodes() {
  std::vector<bool> live(values.size(), false);
  for (int o : outputs) live[static_cast<size_t>(o)] = true;
  std::vector<bool> keep(nodes.size(), false);
  for (size_t n = nodes.size(); n-- > 0;) {
    bool needed = false;
    for (int o : nodes[n].outputs) needed = needed || live[static_cast<size_t>(o)];
    if (!needed) continue;
    keep[n] = true;
    for (int in : nodes[n].inputs)
      if (in >= 0) live[static_cast<size_t>(in)] = true;
  }
  std::vector<Node> kept;
  for (size_t n = 0; n < nodes.size(); ++n)
    if (keep[n]) kept.push_back(std::move(nodes[n]));
  nodes = std::move(kept);
  // Constants no one reads free their data (folded weights, shape subgraphs).
  for (size_t v = 0; v < values.size(); ++v)
    if (!live[v] && values[v].constant) values[v].constant.reset();
  for (auto& v : values) v.producer = -1;
  for (size_t n = 0; n < nodes.size(); ++n)
    for (int o : nodes[n].outputs) values[static_cast<size_t>(o)].producer = static_cast<int>(n);
}

Status Graph::bind_constant(const std::string& input_name, HostTensor data) {
  auto it = std::find_if(inputs.begin(), inputs.end(), [&](int v) { return value(v).name == input_name; });
  if (it == inputs.end()) return not_found_error("the graph has no input '{}'", input_name);
  Value& v = value(*it);
  if (v.type != data.type)
    return invalid_argument_error("input '{}' is {}, the bound data is {}", input_name, graph::to_string(v.type),
                                  graph::to_string(data.type));
  if (v.has_shape && v.dims != data.dims)
    return invalid_argument_error("input '{}' has shape {}, the bound data has {}", input_name, dims_to_string(v.dims),
                                  dims_to_string(data.dims));
  if (static_cast<int64_t>(data.size()) != data.volume())
    return invalid_argument_error("data bound to '{}' has {} values for shape {}", input_name, data.size(),
                                  dims_to_string(data.dims));
  v.dims = data.dims;
  v.has_shape = true;
  v.constant = std::move(data);
  inputs.erase(it);
  return ok_status();
}

std::vector<std::vector<std::pair<int, int>>> Graph::consumers() const {
  std::vector<std::vector<std::pair<int, int>>> c(values.size());
  for (size_t n = 0; n < nodes.size(); ++n)
    for (size_t s = 0; s < nodes[n].inputs.size(); ++s)
      if (nodes[n].inputs[s] >= 0)
        c[static_cast<size_t>(nodes[n].inputs[s])].emplace_back(static_cast<int>(n), static_cast<int>(s));
  return c;
}

std::string Graph::to_string() const {
  std::string out;
  auto name = [&](int v) { return v < 0 ? std::string("_") : "%" + value(v).name; };
  for (int i : inputs)
    out += fmt::format("input %{} : {}{}\n", value(i).name, graph::to_string(value(i).type), dims_to_string(value(i).dims));
  for (const Node& n : nodes) {
    std::vector<std::string> outs, ins, attrs;
    for (int o : n.outputs) outs.push_back(name(o));
    for (int i : n.inputs) ins.push_back(is_constant(i) ? fmt::format("{}:const", name(i)) : name(i));
    for (const auto& [k, a] : n.attrs) {
      switch (a.kind) {
        case Attribute::Kind::INT: attrs.push_back(fmt::format("{}={}", k, a.i)); break;
        case Attribute::Kind::FLOAT: attrs.push_back(fmt::format("{}={}", k, a.f)); break;
        case Attribute::Kind::STRING: attrs.push_back(fmt::format("{}='{}'", k, a.s)); break;
        case Attribute::Kind::INTS: attrs.push_back(fmt::format("{}=[{}]", k, fmt::join(a.ints, ","))); break;
        case Attribute::Kind::FLOATS: attrs.push_back(fmt::format("{}=[{}]", k, fmt::join(a.floats, ","))); break;
        case Attribute::Kind::TENSOR: attrs.push_back(fmt::format("{}=<tensor>", k)); break;
        case Attribute::Kind::STRINGS: attrs.push_back(fmt::format("{}=['{}']", k, fmt::join(a.strings, "','"))); break;
        case Attribute::Kind::GRAPH: attrs.push_back(fmt::format("{}=<graph of {} nodes>", k, a.g ? a.g->nodes.size() : 0)); break;
      }
    }
    std::string shape;
    if (!n.outputs.empty() && value(n.outputs[0]).has_shape)
      shape = fmt::format(" : {}{}", graph::to_string(value(n.outputs[0]).type), dims_to_string(value(n.outputs[0]).dims));
    out += fmt::format("{} = {}({}){}{}\n", fmt::join(outs, ", "), n.op_type, fmt::join(ins, ", "),
                       attrs.empty() ? "" : fmt::format(" {{{}}}", fmt::join(attrs, ", ")), shape);
  }
  std::vector<std::string> outs;
  for (int o : outputs) outs.push_back(name(o));
  out += fmt::format("return {}\n", fmt::join(outs, ", "));
  return out;
}

}  // namespace tessera::graph
