#include "tessera/graph/host_tail.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "tessera/graph/host_eval.h"

namespace tessera::graph {

namespace {

// UNIMPLEMENTED naming the first node of `n` or of its subgraphs (If's
// branches) that has no host kernel.
Status check_host_kernels(const Node& n, const std::string& where) {
  if (!host_supports(n.op_type))
    return unimplemented_error("{}{} reads the result of a data-dependent shape and has no host kernel", n.label(),
                               where);
  for (const auto& [name, a] : n.attrs)
    if (a.kind == Attribute::Kind::GRAPH && a.g)
      for (const Node& m : a.g->nodes)
        TS_RETURN_IF_ERROR(check_host_kernels(m, fmt::format(" (in {}'s {})", n.label(), name)));
  return ok_status();
}

}  // namespace

bool has_data_dependent_shape(const std::string& op_type) {
  // (Unique, Compress and Loop would join here with their host kernels.)
  return op_type == "NonMaxSuppression" || op_type == "NonZero" || op_type == "If";
}

StatusOr<std::optional<HostTail>> HostTail::split(Graph& g) {
  if (std::none_of(g.nodes.begin(), g.nodes.end(), [](const Node& n) { return has_data_dependent_shape(n.op_type); }))
    return std::optional<HostTail>();
  TS_RETURN_IF_ERROR(g.topological_sort());
  std::vector<bool> from_tail(g.values.size(), false);
  std::vector<size_t> nodes;
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    const Node& n = g.nodes[ni];
    const bool reads_tail = std::any_of(n.inputs.begin(), n.inputs.end(),
                                        [&](int v) { return v >= 0 && from_tail[static_cast<size_t>(v)]; });
    if (!has_data_dependent_shape(n.op_type) && !reads_tail) continue;
    TS_RETURN_IF_ERROR(check_host_kernels(n, ""));
    nodes.push_back(ni);
    for (int v : n.outputs)
      if (v >= 0) from_tail[static_cast<size_t>(v)] = true;
  }
  HostTail t;
  t.tail_.opset = g.opset;
  t.first_ = g.nodes[nodes.front()].label();
  std::vector<int> id(g.values.size(), -1);  // g's value -> the tail's
  std::vector<int> boundary;                 // g's ids of the values the tail reads from the prefix
  for (size_t ni : nodes) {
    Node n = g.nodes[ni];
    for (int& v : n.inputs) {
      if (v < 0) continue;
      auto& mapped = id[static_cast<size_t>(v)];
      if (mapped < 0) {
        const Value& src = g.value(v);
        if (!g.is_constant(v) && src.producer < 0)
          return invalid_argument_error("{} (after a data-dependent shape) reads the graph input '{}' directly",
                                        n.label(), src.name);
        Value copy{
            .name = src.name, .type = src.type, .dims = src.dims, .has_shape = src.has_shape, .constant = src.constant};
        mapped = t.tail_.add_value(std::move(copy));
        if (!g.is_constant(v)) boundary.push_back(v), t.tail_.inputs.push_back(mapped);
      }
      v = mapped;
    }
    for (int& v : n.outputs) {
      if (v < 0) continue;
      const Value& src = g.value(v);
      v = id[static_cast<size_t>(v)] = t.tail_.add_value(Value{.name = src.name, .type = src.type});
    }
    t.tail_.nodes.push_back(std::move(n));
  }
  std::vector<int> outputs;  // the prefix's
  for (int o : g.outputs) {
    t.names_.push_back(g.value(o).name);
    if (from_tail[static_cast<size_t>(o)]) {
      t.source_.push_back(-1 - static_cast<int>(t.tail_.outputs.size()));
      t.tail_.outputs.push_back(id[static_cast<size_t>(o)]);
    } else {
      t.source_.push_back(static_cast<int>(outputs.size()));
      outputs.push_back(o);
    }
  }
  t.prefix_outputs_ = outputs.size();
  for (int v : boundary) outputs.push_back(v);  // (a model output too: listed twice)
  t.boundary_ = t.tail_.inputs;
  for (size_t k = 0; k < t.boundary_.size(); ++k) t.pos_.push_back(static_cast<int>(t.prefix_outputs_ + k));
  g.outputs = std::move(outputs);
  g.remove_dead_nodes();
  return std::optional<HostTail>(std::move(t));
}

Status HostTail::bind_prefix(Graph& prefix) {
  if (std::find(pos_.begin(), pos_.end(), -1) != pos_.end())
    return failed_precondition_error("the host tail is bound to its prefix already");
  if (prefix.outputs.size() != num_prefix_outputs())
    return invalid_argument_error("the prefix graph has {} outputs; the host tail split it with {}",
                                  prefix.outputs.size(), num_prefix_outputs());
  std::vector<int> outputs(prefix.outputs.begin(), prefix.outputs.begin() + static_cast<int64_t>(prefix_outputs_));
  for (size_t k = 0; k < boundary_.size(); ++k) {
    const int id = prefix.outputs[static_cast<size_t>(pos_[k])];
    const Value& p = prefix.value(id);
    Value& v = tail_.value(boundary_[k]);
    if (p.name != v.name)
      return invalid_argument_error("prefix output {} is '{}'; the host tail reads '{}' there", pos_[k], p.name,
                                    v.name);
    v.type = p.type, v.dims = p.dims, v.has_shape = p.has_shape;
    if (p.constant) {  // the tail holds it; the prefix no longer returns it
      v.constant = p.constant, pos_[k] = -1;
    } else {
      pos_[k] = static_cast<int>(outputs.size());
      outputs.push_back(id);
    }
  }
  prefix.outputs = std::move(outputs);
  return ok_status();
}

StatusOr<std::vector<HostTensor>> HostTail::run(const std::vector<HostTensor>& prefix_outputs) const {
  if (prefix_outputs.size() != num_prefix_outputs())
    return invalid_argument_error("the host tail takes the prefix's {} outputs, got {}", num_prefix_outputs(),
                                  prefix_outputs.size());
  std::vector<std::optional<HostTensor>> vals(tail_.values.size());  // (constants read in place)
  for (size_t k = 0; k < boundary_.size(); ++k) {
    if (pos_[k] < 0) continue;  // a constant the tail holds
    const Value& want = tail_.value(boundary_[k]);
    HostTensor x = prefix_outputs[static_cast<size_t>(pos_[k])];
    if (want.has_shape) {
      if (dims_volume(want.dims) != x.volume())
        return invalid_argument_error("prefix output '{}': {} values, the host tail reads {}", want.name, x.volume(),
                                      dims_to_string(want.dims));
      x.dims = want.dims;
    }
    // The device holds integers in float32: exact below 2^24, as its kernels keep them.
    if (want.type == ElemType::INT64 && x.type == ElemType::FLOAT32) {
      std::vector<int64_t> ints(x.f.size());
      for (size_t i = 0; i < ints.size(); ++i) ints[i] = static_cast<int64_t>(std::llround(x.f[i]));
      x = HostTensor::ints(x.dims, std::move(ints));
    }
    vals[static_cast<size_t>(boundary_[k])] = std::move(x);
  }
  TS_RETURN_IF_ERROR(evaluate_nodes(tail_, vals));
  std::vector<HostTensor> out;
  for (int s : source_) {
    if (s >= 0) {
      out.push_back(prefix_outputs[static_cast<size_t>(s)]);
      continue;
    }
    const int v = tail_.outputs[static_cast<size_t>(-1 - s)];
    const auto& val = vals[static_cast<size_t>(v)];
    if (!val && !tail_.value(v).constant)
      return internal_error("output '{}' was not computed", tail_.value(v).name);
    out.push_back(val ? *val : *tail_.value(v).constant);
  }
  return out;
}

HostTail::Parts HostTail::parts() const {
  return {.tail = tail_, .names = names_, .source = source_, .prefix_outputs = prefix_outputs_, .boundary = boundary_,
          .pos = pos_, .first = first_};
}

namespace {

// Every value id `g` and its subgraphs name within their graph's values.
Status check_ids(const Graph& g, const std::string& where) {
  const auto nv = static_cast<int>(g.values.size());
  auto bad = [&](int id, bool optional) { return id >= nv || id < (optional ? -1 : 0); };
  for (const auto* ids : {&g.inputs, &g.outputs})
    for (int id : *ids)
      if (bad(id, false)) return invalid_argument_error("{}: graph input or output {} of {} values", where, id, nv);
  for (const Node& n : g.nodes) {
    for (const auto* ids : {&n.inputs, &n.outputs})
      for (int id : *ids)
        if (bad(id, true)) return invalid_argument_error("{}: {} names value {} of {}", where, n.label(), id, nv);
    for (const auto& [name, a] : n.attrs)
      if (a.kind == Attribute::Kind::GRAPH) {
        if (!a.g) return invalid_argument_error("{}: {}'s graph attribute '{}' is empty", where, n.label(), name);
        TS_RETURN_IF_ERROR(check_ids(*a.g, fmt::format("{}'s '{}'", n.label(), name)));
      }
  }
  return ok_status();
}

}  // namespace

StatusOr<HostTail> HostTail::from_parts(Parts p) {
  TS_RETURN_IF_ERROR(check_ids(p.tail, "the host tail"));
  for (const Node& n : p.tail.nodes) TS_RETURN_IF_ERROR(check_host_kernels(n, ""));
  const auto nv = static_cast<int>(p.tail.values.size());
  if (p.boundary.size() != p.pos.size() || p.boundary != p.tail.inputs)
    return invalid_argument_error("the host tail: {} boundary values, {} positions, {} inputs", p.boundary.size(),
                                  p.pos.size(), p.tail.inputs.size());
  const uint64_t returned = p.prefix_outputs + static_cast<uint64_t>(std::count_if(p.pos.begin(), p.pos.end(),
                                                                                 [](int k) { return k >= 0; }));
  for (size_t k = 0; k < p.pos.size(); ++k) {
    if (p.pos[k] < -1 || (p.pos[k] >= 0 && static_cast<uint64_t>(p.pos[k]) >= returned))
      return invalid_argument_error("the host tail reads prefix output {} of {}", p.pos[k], returned);
    if (p.boundary[k] < 0 || p.boundary[k] >= nv || (p.pos[k] < 0 && !p.tail.values[static_cast<size_t>(p.boundary[k])].constant))
      return invalid_argument_error("the host tail's boundary value {} is out of range or lacks its constant",
                                    p.boundary[k]);
  }
  if (p.names.size() != p.source.size())
    return invalid_argument_error("the host tail: {} output names for {} outputs", p.names.size(), p.source.size());
  for (int s : p.source)
    if (s >= 0 ? static_cast<uint64_t>(s) >= p.prefix_outputs : static_cast<size_t>(-1 - int64_t{s}) >= p.tail.outputs.size())
      return invalid_argument_error("the host tail's output source {} is out of range", s);
  HostTail t;
  t.tail_ = std::move(p.tail), t.names_ = std::move(p.names), t.source_ = std::move(p.source);
  t.prefix_outputs_ = p.prefix_outputs, t.boundary_ = std::move(p.boundary), t.pos_ = std::move(p.pos);
  t.first_ = std::move(p.first);
  for (size_t v = 0; v < t.tail_.values.size(); ++v) t.tail_.values[v].producer = -1;
  for (size_t ni = 0; ni < t.tail_.nodes.size(); ++ni)
    for (int o : t.tail_.nodes[ni].outputs)
      if (o >= 0) t.tail_.values[static_cast<size_t>(o)].producer = static_cast<int>(ni);
  return t;
}

std::string HostTail::summary() const {
  std::map<std::string, int> count;  // op type -> nodes
  for (const Node& n : tail_.nodes) ++count[n.op_type];
  std::vector<std::pair<int, std::string>> ops;
  for (const auto& [op, k] : count) ops.emplace_back(-k, op);
  std::sort(ops.begin(), ops.end());
  std::vector<std::string> parts;
  for (size_t k = 0; k < ops.size() && k < 6; ++k)
    parts.push_back(ops[k].first == -1 ? ops[k].second : fmt::format("{} x{}", ops[k].second, -ops[k].first));
  if (ops.size() > 6) parts.push_back(fmt::format("{} other op types", ops.size() - 6));
  return fmt::format("{} node(s) from {}: {}", tail_.nodes.size(), first_, fmt::join(parts, ", "));
}

}  // namespace tessera::graph
