// Host reference kernels driven by indices along an axis: TopK, Hardmax,
// CumSum, GatherElements, GatherND, ScatterElements, OneHot, Trilu, EyeLike
// (internal to host_eval). Detection and segmentation heads end in them.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "host_kernels.h"
#include "tessera/graph/host_eval.h"

namespace tessera::graph::host {
namespace {

// x viewed as (outer, len, inner) around `axis`.
struct AxisView {
  int64_t outer = 1, len = 1, inner = 1;
  size_t at(int64_t o, int64_t j, int64_t i) const { return static_cast<size_t>((o * len + j) * inner + i); }
};

StatusOr<AxisView> view_at(const Node& n, const Dims& d, int64_t axis_attr, size_t* axis_out = nullptr) {
  TS_RETURN_IF_ERROR(check_axis(n, axis_attr, d.size()));
  const auto axis = static_cast<size_t>(norm_axis(axis_attr, d.size()));
  AxisView v;
  for (size_t k = 0; k < d.size(); ++k) (k < axis ? v.outer : k == axis ? v.len : v.inner) *= d[k];
  if (axis_out) *axis_out = axis;
  return v;
}

// An index along a dim of `len` (negative counts from the end), range-checked.
StatusOr<int64_t> index_in(const Node& n, int64_t g, int64_t len) {
  if (g < -len || g >= len)
    return invalid_argument_error("{}: index {} is out of range for a dim of {}", n.label(), g, len);
  return g < 0 ? g + len : g;
}

// NaN above every number, as PyTorch's topk and sort order it.
bool greater(double a, double b) { return (std::isnan(a) && !std::isnan(b)) || a > b; }

}  // namespace

StatusOr<std::vector<HostTensor>> top_k(const Node& n, Ins ins, int opset) {
  const HostTensor& x = *ins[0];
  int64_t k = n.attr_int("k", -1);
  if (opset >= 10) {
    TS_RETURN_IF_ERROR(need(n, ins, 1));
    if (in(ins, 1)->size() != 1)
      return invalid_argument_error("{}: K has {} values, expected one", n.label(), in(ins, 1)->size());
    k = as_ints(*in(ins, 1))[0];
  }
  size_t axis = 0;
  TS_ASSIGN_OR_RETURN(AxisView v, view_at(n, x.dims, n.attr_int("axis", -1), &axis));
  if (k < 0 || k > v.len) return invalid_argument_error("{}: K = {} for an axis of {} elements", n.label(), k, v.len);
  const bool largest = n.attr_int("largest", 1) != 0;
  Dims out = x.dims;
  out[axis] = k;
  HostTensor values = make(x.type, out), indices = make(ElemType::INT64, out);
  std::vector<int64_t> order(static_cast<size_t>(v.len));
  for (int64_t o = 0; o < v.outer; ++o)
    for (int64_t i = 0; i < v.inner; ++i) {
      std::iota(order.begin(), order.end(), 0);
      // Ties keep the lower index first (the ONNX spec); sorted = 0 still sorts.
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        const double xa = x.at(v.at(o, a, i)), xb = x.at(v.at(o, b, i));
        return largest ? greater(xa, xb) : greater(xb, xa);
      });
      for (int64_t j = 0; j < k; ++j) {
        const size_t to = static_cast<size_t>((o * k + j) * v.inner + i);
        copy_elem(x, v.at(o, order[static_cast<size_t>(j)], i), values, to);
        indices.i[to] = order[static_cast<size_t>(j)];
      }
    }
  std::vector<HostTensor> r;
  r.push_back(std::move(values));
  r.push_back(std::move(indices));
  return r;
}

StatusOr<HostTensor> hardmax(const Node& n, const HostTensor& x, int opset) {
  const size_t r = x.dims.size();
  const int64_t axis_attr = n.attr_int("axis", opset >= 13 ? -1 : 1);
  TS_RETURN_IF_ERROR(check_axis(n, axis_attr, r));
  AxisView v;
  if (opset < 13) {  // flattened to 2-D at `axis`
    for (size_t d = 0; d < r; ++d) (static_cast<int64_t>(d) < norm_axis(axis_attr, r) ? v.outer : v.len) *= x.dims[d];
  } else {
    TS_ASSIGN_OR_RETURN(v, view_at(n, x.dims, axis_attr));
  }
  HostTensor y = make(x.type, x.dims);
  for (int64_t o = 0; o < v.outer; ++o)
    for (int64_t i = 0; i < v.inner; ++i) {
      int64_t best = 0;  // the first maximum
      for (int64_t j = 1; j < v.len; ++j)
        if (greater(x.at(v.at(o, j, i)), x.at(v.at(o, best, i)))) best = j;
      if (v.len > 0) set(y, v.at(o, best, i), 1.0);
    }
  return y;
}

StatusOr<HostTensor> cum_sum(const Node& n, Ins ins) {
  TS_RETURN_IF_ERROR(need(n, ins, 1));
  const HostTensor& x = *ins[0];
  if (in(ins, 1)->size() != 1)
    return invalid_argument_error("{}: axis has {} values, expected one", n.label(), in(ins, 1)->size());
  TS_ASSIGN_OR_RETURN(AxisView v, view_at(n, x.dims, as_ints(*in(ins, 1))[0]));
  const bool exclusive = n.attr_int("exclusive", 0) != 0, reverse = n.attr_int("reverse", 0) != 0;
  HostTensor y = make(x.type, x.dims);
  for (int64_t o = 0; o < v.outer; ++o)
    for (int64_t i = 0; i < v.inner; ++i) {
      double acc = 0;
      for (int64_t s = 0; s < v.len; ++s) {
        const int64_t j = reverse ? v.len - 1 - s : s;
        if (!exclusive) acc += x.at(v.at(o, j, i));
        set(y, v.at(o, j, i), acc);
        if (exclusive) acc += x.at(v.at(o, j, i));
      }
    }
  return y;
}

namespace {

// Calls f(k, e) for every element k of GatherElements' / ScatterElements'
// indices (dims `id`, the rank of data's dims `xd`, strides `xs`), e the
// element of data it addresses: its own coordinates with the one along
// `axis` replaced by its index (a detector's RoI pooling scatters 1.9 M of
// them).
template <typename F>
Status for_each_element(const Node& n, const Dims& id, const std::vector<int64_t>& ids, const Dims& xd, const Dims& xs,
                        size_t axis, F&& f) {
  const int64_t count = dims_volume(id);
  if (count == 0) return ok_status();
  for (size_t d = 0; d < id.size(); ++d)
    if (d != axis && id[d] > xd[d])
      return invalid_argument_error("{}: indices of shape {} pass data of shape {} off axis {}", n.label(),
                                    dims_to_string(id), dims_to_string(xd), d);
  Dims steps = xs;
  steps[axis] = 0;  // (the index gives that coordinate)
  OffsetWalk base(id, std::move(steps));
  for (int64_t k = 0; k < count; ++k, base.next()) {
    TS_ASSIGN_OR_RETURN(const int64_t j, index_in(n, ids[static_cast<size_t>(k)], xd[axis]));
    f(k, static_cast<size_t>(base.offset() + j * xs[axis]));
  }
  return ok_status();
}

}  // namespace

StatusOr<HostTensor> gather_elements(const Node& n, const HostTensor& x, const HostTensor& idx) {
  if (idx.dims.size() != x.dims.size())
    return invalid_argument_error("{}: indices of rank {} for data of rank {}", n.label(), idx.dims.size(),
                                  x.dims.size());
  size_t axis = 0;
  TS_RETURN_IF_ERROR(view_at(n, x.dims, n.attr_int("axis", 0), &axis).status());
  const auto ids = as_ints(idx);
  const Dims xs = strides_of(x.dims);
  HostTensor y = make(x.type, idx.dims);
  TS_RETURN_IF_ERROR(for_each_element(n, idx.dims, ids, x.dims, xs, axis,
                                      [&](int64_t k, size_t from) { copy_elem(x, from, y, static_cast<size_t>(k)); }));
  return y;
}

StatusOr<HostTensor> scatter_elements(const Node& n, Ins ins) {
  for (size_t k = 0; k < 3; ++k) TS_RETURN_IF_ERROR(need(n, ins, k));
  const HostTensor &x = *ins[0], &idx = *ins[1], &up = *ins[2];
  TS_ASSIGN_OR_RETURN(const Reduction red, scatter_reduction(n));
  if (idx.dims != up.dims || idx.dims.size() != x.dims.size())
    return invalid_argument_error("{}: indices {} and updates {} must have one shape, of data {}'s rank", n.label(),
                                  dims_to_string(idx.dims), dims_to_string(up.dims), dims_to_string(x.dims));
  size_t axis = 0;
  TS_RETURN_IF_ERROR(view_at(n, x.dims, n.attr_int("axis", 0), &axis).status());
  const auto ids = as_ints(idx);
  const Dims xs = strides_of(x.dims);
  HostTensor y = x;
  TS_RETURN_IF_ERROR(for_each_element(n, idx.dims, ids, x.dims, xs, axis, [&](int64_t k, size_t to) {
    set(y, to, combine(red, y.at(to), up.at(static_cast<size_t>(k))));
  }));
  return y;
}

StatusOr<HostTensor> gather_nd(const Node& n, const HostTensor& x, const HostTensor& idx) {
  const auto b = static_cast<size_t>(std::max<int64_t>(n.attr_int("batch_dims", 0), 0));
  if (idx.dims.empty() || b >= idx.dims.size() || b >= x.dims.size() ||
      idx.dims.back() > static_cast<int64_t>(x.dims.size() - b) || idx.dims.back() < 1)
    return invalid_argument_error("{}: indices of shape {} for data of shape {} with batch_dims {}", n.label(),
                                  dims_to_string(idx.dims), dims_to_string(x.dims), b);
  for (size_t d = 0; d < b; ++d)
    if (idx.dims[d] != x.dims[d])
      return invalid_argument_error("{}: batch dim {} is {} in the indices and {} in the data", n.label(), d,
                                    idx.dims[d], x.dims[d]);
  const auto m = static_cast<size_t>(idx.dims.back());
  Dims out(idx.dims.begin(), idx.dims.end() - 1);
  out.insert(out.end(), x.dims.begin() + static_cast<int64_t>(b + m), x.dims.end());
  int64_t batches = 1, tuples = 1, slice = 1;
  for (size_t d = 0; d < b; ++d) batches *= x.dims[d];
  for (size_t d = b; d + 1 < idx.dims.size(); ++d) tuples *= idx.dims[d];
  for (size_t d = b + m; d < x.dims.size(); ++d) slice *= x.dims[d];
  const Dims xs = strides_of(x.dims);
  const auto ids = as_ints(idx);
  HostTensor y = make(x.type, out);
  for (int64_t bi = 0; bi < batches; ++bi)
    for (int64_t t = 0; t < tuples; ++t) {
      int64_t base = bi * (b ? xs[b - 1] : 0);
      for (size_t j = 0; j < m; ++j) {
        TS_ASSIGN_OR_RETURN(int64_t g,
                            index_in(n, ids[static_cast<size_t>((bi * tuples + t) * int64_t(m)) + j], x.dims[b + j]));
        base += g * xs[b + j];
      }
      for (int64_t s = 0; s < slice; ++s)
        copy_elem(x, static_cast<size_t>(base + s), y, static_cast<size_t>((bi * tuples + t) * slice + s));
    }
  return y;
}

StatusOr<HostTensor> one_hot(const Node& n, Ins ins) {
  for (size_t k = 0; k < 3; ++k) TS_RETURN_IF_ERROR(need(n, ins, k));
  const HostTensor &idx = *ins[0], &depth_t = *ins[1], &vals = *ins[2];
  if (depth_t.size() != 1 || vals.size() != 2)
    return invalid_argument_error("{}: depth has {} values and values {}; expected 1 and 2", n.label(), depth_t.size(),
                                  vals.size());
  const auto depth = static_cast<int64_t>(depth_t.at(0));
  if (depth < 1) return invalid_argument_error("{}: depth {} is not positive", n.label(), depth);
  Dims out = idx.dims;
  const int64_t axis_attr = n.attr_int("axis", -1);
  TS_RETURN_IF_ERROR(check_axis(n, axis_attr, out.size() + 1));
  const auto axis = static_cast<size_t>(norm_axis(axis_attr, out.size() + 1));
  out.insert(out.begin() + static_cast<int64_t>(axis), depth);
  TS_ASSIGN_OR_RETURN(AxisView v, view_at(n, out, static_cast<int64_t>(axis)));
  HostTensor y = make(vals.type, out);
  for (size_t k = 0; k < y.size(); ++k) copy_elem(vals, 0, y, k);
  for (int64_t o = 0; o < v.outer; ++o)
    for (int64_t i = 0; i < v.inner; ++i) {
      int64_t g = static_cast<int64_t>(idx.at(static_cast<size_t>(o * v.inner + i)));
      if (g < 0) g += depth;
      if (g >= 0 && g < depth) copy_elem(vals, 1, y, v.at(o, g, i));  // out of range: all "off"
    }
  return y;
}

StatusOr<HostTensor> trilu(const Node& n, Ins ins) {
  const HostTensor& x = *ins[0];
  if (x.dims.size() < 2)
    return invalid_argument_error("{}: input of rank {}, expected 2 or more", n.label(), x.dims.size());
  int64_t k = 0;
  if (in(ins, 1)) {
    if (in(ins, 1)->size() != 1)
      return invalid_argument_error("{}: k has {} values, expected one", n.label(), in(ins, 1)->size());
    k = as_ints(*in(ins, 1))[0];
  }
  const bool upper = n.attr_int("upper", 1) != 0;
  const int64_t rows = x.dims[x.dims.size() - 2], cols = x.dims.back();
  HostTensor y = make(x.type, x.dims);
  for (int64_t e = 0; e < x.volume(); ++e) {
    const int64_t j = e % cols, i = e / cols % rows;
    if (upper ? j - i >= k : j - i <= k) copy_elem(x, static_cast<size_t>(e), y, static_cast<size_t>(e));
  }
  return y;
}

StatusOr<HostTensor> eye_like(const Node& n, const HostTensor& x) {
  if (x.dims.size() != 2) return invalid_argument_error("{}: input of rank {}, expected 2", n.label(), x.dims.size());
  const int64_t to = n.attr_int("dtype", x.type == ElemType::FLOAT32 ? 1 : 7), k = n.attr_int("k", 0);
  const bool to_float = to == 1 || to == 10 || to == 11 || to == 16;
  HostTensor y = make(to_float ? ElemType::FLOAT32 : ElemType::INT64, x.dims);
  for (int64_t i = 0; i < x.dims[0]; ++i)
    if (i + k >= 0 && i + k < x.dims[1]) set(y, static_cast<size_t>(i * x.dims[1] + i + k), 1.0);
  return y;
}

}  // namespace tessera::graph::host
