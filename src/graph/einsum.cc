// Einsum: the equation resolved against the inputs' dims, the host
// reference kernel, and the pass that rewrites the one- and two-operand
// forms (attention written as einsum: "bhqd,bhkd->bhqk") into ReduceSum,
// Transpose, Reshape and one MatMul, which run on the device.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "host_kernels.h"
#include "pass_util.h"
#include "tessera/graph/host_eval.h"
#include "tessera/graph/passes.h"

namespace tessera::graph {
namespace host {
namespace {

bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// A term's labels with "..." replaced by the labels of its `e` ellipsis
// dims, the last `e` of the `total` ellipsis labels ('0', '1', ...).
std::string expand(const std::string& term, size_t e, size_t total) {
  const size_t at = term.find("...");
  if (at == std::string::npos) return term;
  std::string mid;
  for (size_t k = total - e; k < total; ++k) mid += static_cast<char>('0' + k);
  return term.substr(0, at) + mid + term.substr(at + 3);
}

}  // namespace

StatusOr<EinsumLabels> einsum_labels(const Node& n, const std::vector<Dims>& dims) {
  std::string eq;
  for (char c : n.attr_string("equation", ""))
    if (c != ' ') eq += c;
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t s = 0;;) {
    const size_t comma = lhs.find(',', s);
    terms.push_back(lhs.substr(s, comma == std::string::npos ? std::string::npos : comma - s));
    if (comma == std::string::npos) break;
    s = comma + 1;
  }
  if (terms.size() != dims.size())
    return invalid_argument_error("{}: equation '{}' has {} operands for {} inputs", n.label(), eq, terms.size(),
                                  dims.size());
  auto valid = [](const std::string& t) {
    const size_t at = t.find("...");
    std::string rest = at == std::string::npos ? t : t.substr(0, at) + t.substr(at + 3);
    return std::all_of(rest.begin(), rest.end(), is_letter);
  };
  std::vector<size_t> ell(terms.size(), 0);
  size_t total = 0;
  for (size_t k = 0; k < terms.size(); ++k) {
    const bool has = terms[k].find("...") != std::string::npos;
    const size_t letters = terms[k].size() - (has ? 3 : 0);
    if (!valid(terms[k]) || dims[k].size() < letters || (!has && dims[k].size() != letters))
      return invalid_argument_error("{}: operand '{}' of equation '{}' for an input of shape {}", n.label(), terms[k],
                                    eq, dims_to_string(dims[k]));
    ell[k] = dims[k].size() - letters;
    total = std::max(total, ell[k]);
  }
  EinsumLabels r;
  std::map<char, int> count;
  for (size_t k = 0; k < terms.size(); ++k) {
    r.in.push_back(expand(terms[k], ell[k], total));
    for (size_t d = 0; d < dims[k].size(); ++d) {
      const char l = r.in[k][d];
      ++count[l];
      auto [it, fresh] = r.size.emplace(l, dims[k][d]);
      if (fresh || it->second == dims[k][d] || dims[k][d] == 1) continue;
      if (it->second != 1)
        return invalid_argument_error("{}: label '{}' of equation '{}' is {} in one operand and {} in another",
                                      n.label(), l, eq, it->second, dims[k][d]);
      it->second = dims[k][d];  // (size 1 broadcasts, as numpy's einsum does)
    }
  }
  if (arrow == std::string::npos) {  // implicit: the ellipsis, then the labels seen once, sorted
    r.out = expand("...", total, total);
    for (const auto& [l, c] : count)
      if (c == 1 && is_letter(l)) r.out += l;
  } else {
    const std::string out = eq.substr(arrow + 2);
    if (!valid(out)) return invalid_argument_error("{}: output '{}' of equation '{}'", n.label(), out, eq);
    r.out = expand(out, out.find("...") == std::string::npos ? 0 : total, total);
    for (size_t k = 0; k < r.out.size(); ++k)
      if (!r.size.count(r.out[k]) || r.out.find(r.out[k]) != k)
        return invalid_argument_error("{}: output label '{}' of equation '{}' is not an input's, or repeats", n.label(),
                                      r.out[k], eq);
  }
  return r;
}

StatusOr<HostTensor> einsum(const Node& n, Ins ins) {
  std::vector<Dims> dims;
  for (size_t k = 0; k < ins.size(); ++k) {
    TS_RETURN_IF_ERROR(need(n, ins, k));
    dims.push_back(ins[k]->dims);
  }
  TS_ASSIGN_OR_RETURN(EinsumLabels e, einsum_labels(n, dims));
  std::string all = e.out;  // output labels, then the summed ones
  for (const auto& [l, s] : e.size)
    if (e.out.find(l) == std::string::npos) all += l;
  Dims out, sizes;
  for (char l : e.out) out.push_back(e.size[l]);
  for (char l : all) sizes.push_back(e.size[l]);
  // Each input's step per label of `all` (summed over a repeated label: a diagonal; 0 where it broadcasts).
  std::vector<Dims> step(ins.size(), Dims(all.size(), 0));
  for (size_t k = 0; k < ins.size(); ++k) {
    const Dims st = strides_of(dims[k]);
    for (size_t d = 0; d < dims[k].size(); ++d)
      if (dims[k][d] != 1) step[k][all.find(e.in[k][d])] += st[d];
  }
  HostTensor y = make(ElemType::FLOAT32, out);
  const int64_t n_out = dims_volume(out), n_sum = dims_volume(sizes) / std::max<int64_t>(n_out, 1);
  Dims c(all.size(), 0);
  for (int64_t o = 0; o < n_out; ++o) {
    double acc = 0;
    for (int64_t s = 0; s < n_sum; ++s) {
      int64_t rem = o * n_sum + s;  // the odometer over `all`, output labels outermost
      for (size_t d = all.size(); d-- > 0;) c[d] = rem % sizes[d], rem /= sizes[d];
      double p = 1;
      for (size_t k = 0; k < ins.size(); ++k) {
        int64_t off = 0;
        for (size_t d = 0; d < all.size(); ++d) off += c[d] * step[k][d];
        p *= ins[k]->at(static_cast<size_t>(off));
      }
      acc += p;
    }
    y.f[static_cast<size_t>(o)] = static_cast<float>(acc);
  }
  return y;
}

}  // namespace host

namespace {

using detail::ints_attr;
using host::Dims;

// The pass's node builder: values and nodes with unique names.
struct Builder {
  Graph& g;
  const Node& at;
  std::vector<Node> nodes;
  int next = 0;
  int value(const Dims& d) {
    return g.add_value({.name = fmt::format("{}:einsum{}", at.name, next++), .dims = d, .has_shape = true});
  }
  int constant(const Dims& v) { return detail::ints_value(g, fmt::format("{}:einsum{}", at.name, next++), v); }
  Node& add(const char* op, std::vector<int> ins, int out) {
    nodes.push_back({.name = fmt::format("{}:{}{}", at.name, op, nodes.size()),
                     .op_type = op,
                     .inputs = std::move(ins),
                     .outputs = {out}});
    return nodes.back();
  }
  // x (labels `have`) summed over the labels not in `keep`.
  int sum_out(int x, std::string& have, const std::string& keep) {
    Dims axes, d;
    std::string left;
    for (size_t k = 0; k < have.size(); ++k)
      if (keep.find(have[k]) == std::string::npos)
        axes.push_back(static_cast<int64_t>(k));
      else
        left += have[k], d.push_back(g.value(x).dims[k]);
    if (axes.empty()) return x;
    const int y = value(d);
    Node& r = add("ReduceSum", {x}, y);
    if (g.opset >= 13)
      r.inputs.push_back(constant(axes));
    else
      r.attrs["axes"] = ints_attr(axes);
    r.attrs["keepdims"] = detail::int_attr(0);
    have = left;
    return y;
  }
  // x (labels `have`) with its dims in the order of `want`; `out` for the result when given.
  int permute(int x, const std::string& have, const std::string& want, int out = -1) {
    Dims perm, d;
    for (char l : want) perm.push_back(static_cast<int64_t>(have.find(l)));
    for (int64_t p : perm) d.push_back(g.value(x).dims[static_cast<size_t>(p)]);
    bool same = true;
    for (size_t k = 0; k < perm.size(); ++k) same = same && perm[k] == static_cast<int64_t>(k);
    if (same && out < 0) return x;
    const int y = out >= 0 ? out : value(d);
    add("Transpose", {x}, y).attrs["perm"] = ints_attr(perm);
    return y;
  }
  int reshape(int x, const Dims& d, int out = -1) {
    if (g.value(x).dims == d && out < 0) return x;
    const int y = out >= 0 ? out : value(d);
    add("Reshape", {x, constant(d)}, y);
    return y;
  }
};

}  // namespace

PassReport lower_einsum(Graph& g) {
  PassReport r{"lower_einsum"};
  std::vector<std::vector<Node>> replaced(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node n = g.nodes[i];  // (a copy: add_value below)
    if (n.op_type != "Einsum" || n.inputs.empty() || n.inputs.size() > 2 || n.outputs.size() != 1) continue;
    std::vector<Dims> dims;
    bool ok = true;
    for (int v : n.inputs) {
      ok = ok && v >= 0 && g.value(v).has_shape && g.value(v).type == ElemType::FLOAT32;
      if (ok) dims.push_back(g.value(v).dims);
    }
    if (!ok) continue;
    auto e = host::einsum_labels(n, dims);
    if (!e.ok()) continue;
    for (const std::string& t : e->in)  // a repeated label (a diagonal) stays on the host
      for (size_t k = 0; k < t.size(); ++k) ok = ok && t.find(t[k]) == k;
    if (!ok) continue;
    const std::string lo = e->out;
    Builder b{g, n};
    const int y = n.outputs[0];
    if (n.inputs.size() == 1) {
      std::string la = e->in[0];
      const int s = b.sum_out(n.inputs[0], la, lo);
      if (s == n.inputs[0] && la == lo) continue;  // an identity ("ij->ij"): left to the host kernel, a copy
      b.permute(s, la, lo, y);
    } else {
      std::string la = e->in[0], lb = e->in[1];
      const int a = b.sum_out(n.inputs[0], la, lb + lo), c = b.sum_out(n.inputs[1], lb, la + lo);
      std::string batch, left, right, contract;
      for (char l : lo)
        (la.find(l) != std::string::npos ? (lb.find(l) != std::string::npos ? batch : left) : right) += l;
      for (char l : la)
        if (lb.find(l) != std::string::npos && lo.find(l) == std::string::npos) contract += l;
      auto size_in = [&](int v, const std::string& have, char l) { return g.value(v).dims[have.find(l)]; };
      int64_t L = 1, K = 1, R = 1;
      Dims ba, bb, mid;
      for (char l : batch) ba.push_back(size_in(a, la, l)), bb.push_back(size_in(c, lb, l));
      for (char l : left) L *= e->size[l];
      for (char l : right) R *= e->size[l];
      for (char l : contract) {
        K *= e->size[l];
        ok = ok && size_in(a, la, l) == size_in(c, lb, l);  // no broadcasting in a contraction
      }
      if (!ok) continue;
      Dims da = ba, db = bb;
      da.push_back(L), da.push_back(K), db.push_back(K), db.push_back(R);
      const int pa = b.reshape(b.permute(a, la, batch + left + contract), da);
      const int pb = b.reshape(b.permute(c, lb, batch + contract + right), db);
      Dims dm;
      for (char l : batch) dm.push_back(e->size[l]);
      mid = dm;
      dm.push_back(L), dm.push_back(R);
      const int m = b.value(dm);
      b.add("MatMul", {pa, pb}, m);
      for (char l : left + right) mid.push_back(e->size[l]);
      const std::string order = batch + left + right;
      if (order == lo)
        b.reshape(m, mid, y);
      else
        b.permute(b.reshape(m, mid), order, lo, y);
    }
    replaced[i] = std::move(b.nodes);
    ++r.rewrites;
  }
  if (r.rewrites == 0) return r;
  detail::replace_nodes(g, replaced);
  return r;
}

}  // namespace tessera::graph
