// Host reference kernels for shapes and data movement, MatMul / Gemm and the
// normalizations (internal to host_eval).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <thread>

#include "host_gemm.h"
#include "host_kernels.h"
#include "tessera/base/cpu_features.h"
#include "tessera/graph/host_eval.h"

namespace tessera::graph::host {

namespace {
// The portable tier of host_gemm.h: SSE2's two doubles a vector.
constexpr int64_t L = 2, kRows = 4;
typedef double D __attribute__((vector_size(L * sizeof(double))));
#include "host_gemm_impl.h"
}  // namespace

void gemm_f32(const float* a, const float* b, bool b_transposed, float* y, int64_t m, int64_t n, int64_t k) {
  const auto columns = [&](int64_t j0, int64_t j1) {
    switch (kernel_isa()) {
      case KernelIsa::kAvx512:
        return cpu::avx512::host_gemm_f32(a, b, b_transposed, y, m, n, k, j0, j1);
      case KernelIsa::kAvx2:
        return cpu::avx2::host_gemm_f32(a, b, b_transposed, y, m, n, k, j0, j1);
      default:
        return gemm(a, b, b_transposed, y, m, n, k, j0, j1);
    }
  };
  // (A detector's box head is 1.9 G multiply-adds; a classifier's head on
  // the host, 2 M, stays on the calling thread.)
  const int64_t parts =
      m * n * k < (int64_t{1} << 27)
          ? 1
          : std::clamp<int64_t>(std::min<int64_t>(std::thread::hardware_concurrency(), n / 64), 1, 64);
  std::vector<std::thread> threads;
  for (int64_t p = 1; p < parts; ++p) threads.emplace_back(columns, n * p / parts, n * (p + 1) / parts);
  columns(0, n / parts);
  for (std::thread& t : threads) t.join();
}

// ---------------------------------------------------------------- shapes and data movement

StatusOr<HostTensor> reshape_to(const Node& n, const HostTensor& x, Dims dims) {
  if (dims_volume(dims) != x.volume())
    return invalid_argument_error("{}: cannot reshape {} ({} elements) to {}", n.label(), dims_to_string(x.dims),
                                  x.volume(), dims_to_string(dims));
  HostTensor y = x;
  y.dims = std::move(dims);
  return y;
}

StatusOr<Dims> reshape_dims(const Node& n, const Dims& in_dims, std::vector<int64_t> shape) {
  const bool allowzero = n.attr_int("allowzero", 0) != 0;
  int infer = -1;
  int64_t known = 1;
  for (size_t k = 0; k < shape.size(); ++k) {
    if (shape[k] == 0 && !allowzero) {
      if (k >= in_dims.size())
        return invalid_argument_error("{}: shape[{}] = 0 copies a dim the rank-{} input does not have", n.label(), k,
                                      in_dims.size());
      shape[k] = in_dims[k];
    }
    if (shape[k] == -1) {
      if (infer >= 0)
        return invalid_argument_error("{}: more than one -1 in shape {}", n.label(), dims_to_string(shape));
      infer = static_cast<int>(k);
    } else if (shape[k] < 0) {
      return invalid_argument_error("{}: negative dim {} in shape {}", n.label(), shape[k], dims_to_string(shape));
    } else {
      known *= shape[k];
    }
  }
  if (infer >= 0) {
    if (known == 0 || dims_volume(in_dims) % known != 0)
      return invalid_argument_error("{}: cannot infer the -1 of shape {} from {} elements", n.label(),
                                    dims_to_string(shape), dims_volume(in_dims));
    shape[static_cast<size_t>(infer)] = dims_volume(in_dims) / known;
  }
  return shape;
}

StatusOr<HostTensor> transpose(const Node& n, const HostTensor& x) {
  const size_t r = x.dims.size();
  std::vector<int64_t> perm = n.attr_ints("perm");
  if (perm.empty())
    for (size_t k = 0; k < r; ++k) perm.push_back(static_cast<int64_t>(r - 1 - k));
  if (perm.size() != r) return invalid_argument_error("{}: perm has {} entries for rank {}", n.label(), perm.size(), r);
  Dims out(r);
  for (size_t k = 0; k < r; ++k) {
    if (perm[k] < 0 || perm[k] >= static_cast<int64_t>(r))
      return invalid_argument_error("{}: perm entry {} out of range", n.label(), perm[k]);
    out[k] = x.dims[static_cast<size_t>(perm[k])];
  }
  HostTensor y = make(x.type, out);
  const auto in_strides = strides_of(x.dims);
  for (int64_t k = 0; k < dims_volume(out); ++k) {
    int64_t rem = k, src = 0;
    for (size_t d = r; d-- > 0;) {
      src += (rem % out[d]) * in_strides[static_cast<size_t>(perm[d])];
      rem /= out[d];
    }
    copy_elem(x, static_cast<size_t>(src), y, static_cast<size_t>(k));
  }
  return y;
}

StatusOr<HostTensor> concat(const Node& n, Ins ins) {
  if (ins.empty() || !ins[0]) return invalid_argument_error("{}: needs inputs", n.label());
  const size_t r = ins[0]->dims.size();
  const int64_t axis_attr = n.attr_int("axis", 0);
  TS_RETURN_IF_ERROR(check_axis(n, axis_attr, r));
  const auto axis = static_cast<size_t>(norm_axis(axis_attr, r));
  Dims out = ins[0]->dims;
  out[axis] = 0;
  for (size_t k = 0; k < ins.size(); ++k) {
    TS_RETURN_IF_ERROR(need(n, ins, k));
    const Dims& d = ins[k]->dims;
    if (d.size() != r)
      return invalid_argument_error("{}: input {} has rank {}, input 0 has {}", n.label(), k, d.size(), r);
    for (size_t j = 0; j < r; ++j)
      if (j != axis && d[j] != ins[0]->dims[j])
        return invalid_argument_error("{}: input {} has shape {}, not matching {} outside axis {}", n.label(), k,
                                      dims_to_string(d), dims_to_string(ins[0]->dims), axis);
    out[axis] += d[axis];
  }
  HostTensor y = make(ins[0]->type, out);
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < axis; ++d) outer *= out[d];
  for (size_t d = axis + 1; d < r; ++d) inner *= out[d];
  size_t w = 0;
  for (int64_t o = 0; o < outer; ++o)
    for (const HostTensor* t : ins) {
      const int64_t chunk = t->dims[axis] * inner;
      for (int64_t j = 0; j < chunk; ++j) {
        HostTensor tmp;
        if (t->type == y.type)
          copy_elem(*t, static_cast<size_t>(o * chunk + j), y, w);
        else
          set(y, w, t->at(static_cast<size_t>(o * chunk + j)));
        ++w;
      }
    }
  return y;
}

StatusOr<HostTensor> gather(const Node& n, const HostTensor& x, const HostTensor& idx) {
  const int64_t axis_attr = n.attr_int("axis", 0);
  TS_RETURN_IF_ERROR(check_axis(n, axis_attr, x.dims.size()));
  const auto axis = static_cast<size_t>(norm_axis(axis_attr, x.dims.size()));
  Dims out(x.dims.begin(), x.dims.begin() + static_cast<int64_t>(axis));
  out.insert(out.end(), idx.dims.begin(), idx.dims.end());
  out.insert(out.end(), x.dims.begin() + static_cast<int64_t>(axis) + 1, x.dims.end());
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < axis; ++d) outer *= x.dims[d];
  for (size_t d = axis + 1; d < x.dims.size(); ++d) inner *= x.dims[d];
  const int64_t len = x.dims[axis], m = idx.volume();
  HostTensor y = make(x.type, out);
  const auto ids = as_ints(idx);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < m; ++j) {
      int64_t g = ids[static_cast<size_t>(j)];
      if (g < -len || g >= len)
        return invalid_argument_error("{}: index {} is out of range for a dim of {}", n.label(), g, len);
      if (g < 0) g += len;
      for (int64_t i = 0; i < inner; ++i)
        copy_elem(x, static_cast<size_t>((o * len + g) * inner + i), y, static_cast<size_t>((o * m + j) * inner + i));
    }
  return y;
}

// A copy of data with each update slice written (or combined, with
// `reduction`) at its index tuple; indices (..., k) address data's first k
// dims. (Exporters write it for masks computed from shapes: Swin's shifted
// windows.)
StatusOr<HostTensor> scatter_nd(const Node& n, Ins ins) {
  for (size_t k = 0; k < 3; ++k) TS_RETURN_IF_ERROR(need(n, ins, k));
  const HostTensor &x = *ins[0], &idx = *ins[1], &up = *ins[2];
  TS_ASSIGN_OR_RETURN(const Reduction red, scatter_reduction(n));
  if (idx.dims.empty() || idx.dims.back() < 1 || idx.dims.back() > static_cast<int64_t>(x.dims.size()))
    return invalid_argument_error("{}: indices of shape {} for data of rank {}", n.label(), dims_to_string(idx.dims),
                                  x.dims.size());
  const auto k = static_cast<size_t>(idx.dims.back());
  Dims want(idx.dims.begin(), idx.dims.end() - 1);
  want.insert(want.end(), x.dims.begin() + static_cast<int64_t>(k), x.dims.end());
  if (up.dims != want)
    return invalid_argument_error("{}: updates of shape {}, expected {}", n.label(), dims_to_string(up.dims),
                                  dims_to_string(want));
  const int64_t slice = dims_volume(Dims(x.dims.begin() + static_cast<int64_t>(k), x.dims.end()));
  const auto strides = strides_of(x.dims);
  const auto ids = as_ints(idx);
  HostTensor y = x;
  for (size_t j = 0; j * k < ids.size(); ++j) {
    int64_t at = 0;
    for (size_t d = 0; d < k; ++d) {
      int64_t i = ids[j * k + d];
      const int64_t len = x.dims[d];
      if (i < -len || i >= len)
        return invalid_argument_error("{}: index {} is out of range for a dim of {}", n.label(), i, len);
      at += (i < 0 ? i + len : i) * strides[d];
    }
    for (int64_t s = 0; s < slice; ++s) {
      const auto dst = static_cast<size_t>(at + s);
      set(y, dst, combine(red, y.at(dst), up.at(j * static_cast<size_t>(slice) + static_cast<size_t>(s))));
    }
  }
  return y;
}

StatusOr<HostTensor> slice(const Node& n, Ins ins, int opset) {
  const HostTensor& x = *ins[0];
  const size_t r = x.dims.size();
  std::vector<int64_t> starts, ends, axes, steps;
  if (opset < 10) {
    starts = n.attr_ints("starts"), ends = n.attr_ints("ends"), axes = n.attr_ints("axes");
  } else {
    TS_RETURN_IF_ERROR(need(n, ins, 1));
    TS_RETURN_IF_ERROR(need(n, ins, 2));
    starts = as_ints(*ins[1]), ends = as_ints(*ins[2]);
    if (in(ins, 3)) axes = as_ints(*in(ins, 3));
    if (in(ins, 4)) steps = as_ints(*in(ins, 4));
  }
  if (ends.size() != starts.size())
    return invalid_argument_error("{}: {} starts but {} ends", n.label(), starts.size(), ends.size());
  if (axes.empty())
    for (size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<int64_t>(k));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (axes.size() != starts.size() || steps.size() != starts.size())
    return invalid_argument_error("{}: starts, ends, axes and steps differ in length", n.label());
  std::vector<int64_t> b(r, 0), st(r, 1);
  Dims out = x.dims;
  for (size_t k = 0; k < starts.size(); ++k) {
    TS_RETURN_IF_ERROR(check_axis(n, axes[k], r));
    const auto d = static_cast<size_t>(norm_axis(axes[k], r));
    const int64_t dim = x.dims[d], step = steps[k];
    if (step == 0) return invalid_argument_error("{}: step 0 on axis {}", n.label(), d);
    int64_t s = starts[k] < 0 ? starts[k] + dim : starts[k];
    int64_t e = ends[k] < 0 ? ends[k] + dim : ends[k];
    if (step > 0) {
      s = std::clamp<int64_t>(s, 0, dim), e = std::clamp<int64_t>(e, 0, dim);
      out[d] = e > s ? (e - s + step - 1) / step : 0;
    } else {
      s = std::clamp<int64_t>(s, 0, dim - 1), e = std::clamp<int64_t>(e, -1, dim - 1);
      out[d] = s > e ? (s - e - step - 1) / -step : 0;
    }
    b[d] = s, st[d] = step;
  }
  HostTensor y = make(x.type, out);
  const auto in_strides = strides_of(x.dims);
  for (int64_t k = 0; k < dims_volume(out); ++k) {
    int64_t rem = k, src = 0;
    for (size_t d = r; d-- > 0;) {
      src += (b[d] + (rem % out[d]) * st[d]) * in_strides[d];
      rem /= out[d];
    }
    copy_elem(x, static_cast<size_t>(src), y, static_cast<size_t>(k));
  }
  return y;
}

StatusOr<HostTensor> expand(const Node& n, const HostTensor& x, const HostTensor& shape) {
  TS_ASSIGN_OR_RETURN(Dims out, broadcast_dims(x.dims, as_ints(shape)));
  (void)n;
  HostTensor y = make(x.type, out);
  Dims xd(out.size() - x.dims.size(), 1);
  xd.insert(xd.end(), x.dims.begin(), x.dims.end());
  Dims steps = strides_of(xd);
  for (size_t d = 0; d < xd.size(); ++d)
    if (xd[d] == 1) steps[d] = 0;
  OffsetWalk src(out, std::move(steps));
  for (int64_t k = 0; k < dims_volume(out); ++k, src.next())
    copy_elem(x, static_cast<size_t>(src.offset()), y, static_cast<size_t>(k));
  return y;
}

StatusOr<HostTensor> tile(const Node& n, const HostTensor& x, const HostTensor& reps_t) {
  const auto reps = as_ints(reps_t);
  if (reps.size() != x.dims.size())
    return invalid_argument_error("{}: {} repeats for rank {}", n.label(), reps.size(), x.dims.size());
  Dims out = x.dims;
  for (size_t d = 0; d < out.size(); ++d) out[d] *= reps[d];
  HostTensor y = make(x.type, out);
  const auto in_strides = strides_of(x.dims);
  for (int64_t k = 0; k < dims_volume(out); ++k) {
    int64_t rem = k, src = 0;
    for (size_t d = out.size(); d-- > 0;) {
      src += ((rem % out[d]) % x.dims[d]) * in_strides[d];
      rem /= out[d];
    }
    copy_elem(x, static_cast<size_t>(src), y, static_cast<size_t>(k));
  }
  return y;
}

StatusOr<HostTensor> pad(const Node& n, Ins ins, int opset) {
  const HostTensor& x = *ins[0];
  const size_t r = x.dims.size();
  std::vector<int64_t> pads = n.attr_ints(opset < 11 ? "pads" : "paddings");
  if (opset < 11) pads = n.attr_ints("pads");
  double value = n.attr_float("value", 0.0f);
  if (opset >= 11) {
    TS_RETURN_IF_ERROR(need(n, ins, 1));
    pads = as_ints(*ins[1]);
    if (in(ins, 2) && in(ins, 2)->size() > 0) value = in(ins, 2)->at(0);
  }
  std::vector<int64_t> axes;
  if (in(ins, 3)) axes = as_ints(*in(ins, 3));
  if (axes.empty())
    for (size_t k = 0; k < r; ++k) axes.push_back(static_cast<int64_t>(k));
  if (pads.size() != 2 * axes.size())
    return invalid_argument_error("{}: {} pads for {} axes", n.label(), pads.size(), axes.size());
  std::vector<int64_t> lo(r, 0), hi(r, 0);
  for (size_t k = 0; k < axes.size(); ++k) {
    TS_RETURN_IF_ERROR(check_axis(n, axes[k], r));
    const auto d = static_cast<size_t>(norm_axis(axes[k], r));
    lo[d] = pads[k], hi[d] = pads[k + axes.size()];
  }
  const std::string mode = n.attr_string("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge")
    return unimplemented_error("{}: mode '{}'", n.label(), mode);
  Dims out(r);
  for (size_t d = 0; d < r; ++d) {
    out[d] = x.dims[d] + lo[d] + hi[d];
    if (out[d] < 0) return invalid_argument_error("{}: pads crop axis {} below zero", n.label(), d);
  }
  HostTensor y = make(x.type, out);
  const auto in_strides = strides_of(x.dims);
  for (int64_t k = 0; k < dims_volume(out); ++k) {
    int64_t rem = k, src = 0;
    bool outside = false;
    for (size_t d = r; d-- > 0;) {
      int64_t c = rem % out[d] - lo[d];
      rem /= out[d];
      const int64_t len = x.dims[d];
      if (c < 0 || c >= len) {
        if (mode == "constant")
          outside = true;
        else if (mode == "edge")
          c = std::clamp<int64_t>(c, 0, len - 1);
        else {  // reflect
          if (len == 1)
            c = 0;
          else {
            const int64_t period = 2 * (len - 1);
            c = ((c % period) + period) % period;
            if (c >= len) c = period - c;
          }
        }
      }
      src += c * in_strides[d];
    }
    if (outside)
      set(y, static_cast<size_t>(k), value);
    else
      copy_elem(x, static_cast<size_t>(src), y, static_cast<size_t>(k));
  }
  return y;
}

StatusOr<std::vector<HostTensor>> split(const Node& n, Ins ins, int opset) {
  const HostTensor& x = *ins[0];
  const int64_t axis_attr = n.attr_int("axis", 0);
  TS_RETURN_IF_ERROR(check_axis(n, axis_attr, x.dims.size()));
  const auto axis = static_cast<size_t>(norm_axis(axis_attr, x.dims.size()));
  std::vector<int64_t> sizes = n.attr_ints("split");
  if (opset >= 13 && in(ins, 1)) sizes = as_ints(*in(ins, 1));
  const size_t outs = n.outputs.size();
  const int64_t len = x.dims[axis];
  if (sizes.empty()) {
    const int64_t num = n.attr_int("num_outputs", static_cast<int64_t>(outs));
    const int64_t each = (len + num - 1) / std::max<int64_t>(num, 1);
    for (int64_t k = 0; k < num; ++k) sizes.push_back(std::min(each, len - k * each));
  }
  if (sizes.size() != outs || std::accumulate(sizes.begin(), sizes.end(), int64_t{0}) != len)
    return invalid_argument_error("{}: split sizes {} do not cover the axis of {} in {} outputs", n.label(),
                                  dims_to_string(sizes), len, outs);
  std::vector<HostTensor> ys;
  int64_t begin = 0;
  for (int64_t s : sizes) {
    Node sl;
    sl.op_type = "Slice";
    HostTensor st = HostTensor::ints({1}, {begin}), en = HostTensor::ints({1}, {begin + s}),
               ax = HostTensor::ints({1}, {static_cast<int64_t>(axis)});
    const HostTensor* args[] = {&x, &st, &en, &ax};
    TS_ASSIGN_OR_RETURN(HostTensor y, slice(sl, args, 13));
    ys.push_back(std::move(y));
    begin += s;
  }
  return ys;
}

StatusOr<HostTensor> matmul(const Node& n, const HostTensor& a0, const HostTensor& b0) {
  HostTensor a = a0, b = b0;
  const bool a1 = a.dims.size() == 1, b1 = b.dims.size() == 1;
  if (a1) a.dims.insert(a.dims.begin(), 1);
  if (b1) b.dims.push_back(1);
  if (a.dims.size() < 2 || b.dims.size() < 2) return invalid_argument_error("{}: scalar operands", n.label());
  const int64_t m = a.dims[a.dims.size() - 2], k = a.dims.back(), k2 = b.dims[b.dims.size() - 2], nn = b.dims.back();
  if (k != k2)
    return invalid_argument_error("{}: inner dims differ: {} x {}", n.label(), dims_to_string(a0.dims),
                                  dims_to_string(b0.dims));
  Dims ab(a.dims.begin(), a.dims.end() - 2), bb(b.dims.begin(), b.dims.end() - 2);
  TS_ASSIGN_OR_RETURN(Dims batch, broadcast_dims(ab, bb));
  Dims out = batch;
  out.push_back(m), out.push_back(nn);
  HostTensor y = make(ElemType::FLOAT32, out);
  for (int64_t bi = 0; bi < dims_volume(batch); ++bi) {
    const int64_t ao = broadcast_index(bi, batch, ab) * m * k, bo = broadcast_index(bi, batch, bb) * k * nn;
    if (a.type == ElemType::FLOAT32 && b.type == ElemType::FLOAT32) {
      gemm_f32(a.f.data() + ao, b.f.data() + bo, false, y.f.data() + bi * m * nn, m, nn, k);
      continue;
    }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < nn; ++j) {
        double s = 0;
        for (int64_t q = 0; q < k; ++q)
          s += a.at(static_cast<size_t>(ao + i * k + q)) * b.at(static_cast<size_t>(bo + q * nn + j));
        y.f[static_cast<size_t>((bi * m + i) * nn + j)] = static_cast<float>(s);
      }
  }
  if (a1) out.erase(out.end() - 2);
  if (b1) out.pop_back();
  y.dims = out;
  return y;
}

StatusOr<HostTensor> gemm(const Node& n, Ins ins) {
  const HostTensor &a0 = *ins[0], &b0 = *ins[1];
  if (a0.dims.size() != 2 || b0.dims.size() != 2)
    return invalid_argument_error("{}: Gemm needs 2D A and B", n.label());
  const bool trans_a = n.attr_int("transA", 0) != 0, trans_b = n.attr_int("transB", 0) != 0;
  HostTensor y;
  if (!trans_a && a0.type == ElemType::FLOAT32 && b0.type == ElemType::FLOAT32) {
    // (B as it is, transposed or not: a classifier's or a box head's weights
    // are not copied.)
    const int64_t m = a0.dims[0], k = a0.dims[1], nn = b0.dims[trans_b ? 0 : 1];
    if (b0.dims[trans_b ? 1 : 0] != k)
      return invalid_argument_error("{}: inner dims differ: {} x {}{}", n.label(), dims_to_string(a0.dims),
                                    dims_to_string(b0.dims), trans_b ? " (transposed)" : "");
    y = make(ElemType::FLOAT32, {m, nn});
    gemm_f32(a0.f.data(), b0.f.data(), trans_b, y.f.data(), m, nn, k);
  } else {
    HostTensor a = a0, b = b0;
    Node t;
    t.op_type = "Transpose";
    if (trans_a) {
      TS_ASSIGN_OR_RETURN(a, transpose(t, a));
    }
    if (trans_b) {
      TS_ASSIGN_OR_RETURN(b, transpose(t, b));
    }
    TS_ASSIGN_OR_RETURN(y, matmul(n, a, b));
  }
  const double alpha = n.attr_float("alpha", 1.0f), beta = n.attr_float("beta", 1.0f);
  const HostTensor* c = in(ins, 2);
  for (int64_t k = 0; k < y.volume(); ++k) {
    double v = alpha * y.f[static_cast<size_t>(k)];
    if (c) v += beta * c->at(static_cast<size_t>(broadcast_index(k, y.dims, c->dims)));
    y.f[static_cast<size_t>(k)] = static_cast<float>(v);
  }
  return y;
}

StatusOr<HostTensor> range(const Node& n, Ins ins) {
  for (size_t k = 0; k < 3; ++k) TS_RETURN_IF_ERROR(need(n, ins, k));
  const double start = ins[0]->at(0), limit = ins[1]->at(0), delta = ins[2]->at(0);
  if (delta == 0) return invalid_argument_error("{}: delta 0", n.label());
  const auto count = static_cast<int64_t>(std::max(0.0, std::ceil((limit - start) / delta)));
  if (count > (int64_t{1} << 28)) return invalid_argument_error("{}: {} elements", n.label(), count);
  HostTensor y = make(ins[0]->type, {count});
  for (int64_t k = 0; k < count; ++k) set(y, static_cast<size_t>(k), start + static_cast<double>(k) * delta);
  return y;
}

StatusOr<HostTensor> constant_of_shape(const Node& n, const HostTensor& shape) {
  Dims dims = as_ints(shape);
  for (int64_t d : dims)
    if (d < 0) return invalid_argument_error("{}: negative dim in {}", n.label(), dims_to_string(dims));
  if (dims_volume(dims) > (int64_t{1} << 28))
    return invalid_argument_error("{}: {} elements", n.label(), dims_volume(dims));
  HostTensor value = HostTensor::floats({1}, {0.0f});
  if (auto it = n.attrs.find("value"); it != n.attrs.end() && it->second.t) value = *it->second.t;
  HostTensor y = make(value.type, dims);
  for (size_t k = 0; k < y.size(); ++k) copy_elem(value, 0, y, k);
  return y;
}

StatusOr<HostTensor> squeeze_unsqueeze(const Node& n, Ins ins, int opset) {
  const HostTensor& x = *ins[0];
  std::vector<int64_t> axes = n.attr_ints("axes");
  if (opset >= 13 && in(ins, 1)) axes = as_ints(*in(ins, 1));
  Dims dims = x.dims;
  if (n.op_type == "Squeeze") {
    const size_t r = dims.size();
    std::vector<bool> drop(r, axes.empty());
    for (int64_t a : axes) {
      TS_RETURN_IF_ERROR(check_axis(n, a, r));
      const auto d = static_cast<size_t>(norm_axis(a, r));
      if (dims[d] != 1) return invalid_argument_error("{}: axis {} has size {}, not 1", n.label(), a, dims[d]);
      drop[d] = true;
    }
    Dims kept;
    for (size_t d = 0; d < r; ++d)
      if (!drop[d] || dims[d] != 1) kept.push_back(dims[d]);
    dims = kept;
  } else {
    const size_t r = dims.size() + axes.size();
    std::vector<int64_t> norm;
    for (int64_t a : axes) {
      TS_RETURN_IF_ERROR(check_axis(n, a, r));
      norm.push_back(norm_axis(a, r));
    }
    std::sort(norm.begin(), norm.end());
    for (int64_t a : norm) dims.insert(dims.begin() + a, 1);
  }
  return reshape_to(n, x, dims);
}

StatusOr<HostTensor> flatten(const Node& n, const HostTensor& x) {
  const int64_t axis_attr = n.attr_int("axis", 1);
  const auto r = static_cast<int64_t>(x.dims.size());
  if (axis_attr < -r || axis_attr > r)
    return invalid_argument_error("{}: axis {} for rank {}", n.label(), axis_attr, r);
  const int64_t axis = axis_attr < 0 ? axis_attr + r : axis_attr;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < r; ++d) (d < axis ? outer : inner) *= x.dims[static_cast<size_t>(d)];
  return reshape_to(n, x, {outer, inner});
}

// Inference mode; training mode (opset 14+) normalises with the batch's
// statistics and also returns the updated running mean and variance.
StatusOr<std::vector<HostTensor>> batch_norm(const Node& n, Ins ins) {
  for (size_t k = 0; k < 5; ++k) TS_RETURN_IF_ERROR(need(n, ins, k));
  const HostTensor& x = *ins[0];
  if (x.dims.size() < 2) return invalid_argument_error("{}: input of rank {}", n.label(), x.dims.size());
  const int64_t c = x.dims[1];
  for (size_t k = 1; k < 5; ++k)
    if (ins[k]->volume() != c)
      return invalid_argument_error("{}: input {} has {} values for {} channels", n.label(), k, ins[k]->volume(), c);
  const double eps = n.attr_float("epsilon", 1e-5f);
  const bool training = n.attr_int("training_mode", 0) != 0;
  int64_t inner = 1;
  for (size_t d = 2; d < x.dims.size(); ++d) inner *= x.dims[d];
  std::vector<double> mean(static_cast<size_t>(c)), var(static_cast<size_t>(c));
  for (size_t ch = 0; ch < mean.size(); ++ch) mean[ch] = ins[3]->at(ch), var[ch] = ins[4]->at(ch);
  std::vector<HostTensor> outs;
  if (training) {
    std::vector<double> sum(mean.size(), 0), sq(mean.size(), 0);
    const double count = static_cast<double>(x.volume() / c);
    for (int64_t k = 0; k < x.volume(); ++k) sum[static_cast<size_t>((k / inner) % c)] += x.at(static_cast<size_t>(k));
    for (size_t ch = 0; ch < sum.size(); ++ch) sum[ch] /= count;
    for (int64_t k = 0; k < x.volume(); ++k) {
      const auto ch = static_cast<size_t>((k / inner) % c);
      const double d = x.at(static_cast<size_t>(k)) - sum[ch];
      sq[ch] += d * d;
    }
    const double momentum = n.attr_float("momentum", 0.9f);
    HostTensor rm = make(ElemType::FLOAT32, {c}), rv = make(ElemType::FLOAT32, {c});
    for (size_t ch = 0; ch < sum.size(); ++ch) {
      sq[ch] /= count;
      rm.f[ch] = static_cast<float>(mean[ch] * momentum + sum[ch] * (1 - momentum));
      rv.f[ch] = static_cast<float>(var[ch] * momentum + sq[ch] * (1 - momentum));
      mean[ch] = sum[ch], var[ch] = sq[ch];
    }
    outs.resize(1);
    outs.push_back(std::move(rm));
    outs.push_back(std::move(rv));
  } else {
    outs.resize(1);
  }
  HostTensor y = make(ElemType::FLOAT32, x.dims);
  for (int64_t k = 0; k < x.volume(); ++k) {
    const auto ch = static_cast<size_t>((k / inner) % c);
    const double v = (x.at(static_cast<size_t>(k)) - mean[ch]) / std::sqrt(var[ch] + eps);
    y.f[static_cast<size_t>(k)] = static_cast<float>(v * ins[1]->at(ch) + ins[2]->at(ch));
  }
  outs[0] = std::move(y);
  return outs;
}

// Per image and channel over the spatial dims (rank >= 3), in double:
// (x - mean) / sqrt(var + eps) * scale[c] + B[c], the biased variance.
StatusOr<HostTensor> instance_norm(const Node& n, Ins ins) {
  for (size_t k = 0; k < 3; ++k) TS_RETURN_IF_ERROR(need(n, ins, k));
  const HostTensor& x = *ins[0];
  if (x.dims.size() < 3) return invalid_argument_error("{}: input of rank {}, expected 3 or more", n.label(), x.dims.size());
  const int64_t c = x.dims[1];
  for (size_t k = 1; k < 3; ++k)
    if (ins[k]->volume() != c)
      return invalid_argument_error("{}: input {} has {} values for {} channels", n.label(), k, ins[k]->volume(), c);
  const double eps = n.attr_float("epsilon", 1e-5f);
  int64_t inner = 1;
  for (size_t d = 2; d < x.dims.size(); ++d) inner *= x.dims[d];
  HostTensor y = make(ElemType::FLOAT32, x.dims);
  for (int64_t plane = 0; inner > 0 && plane < x.volume() / inner; ++plane) {  // (image, channel)
    const auto at = static_cast<size_t>(plane * inner);
    double mean = 0, var = 0;
    for (int64_t k = 0; k < inner; ++k) mean += x.at(at + static_cast<size_t>(k));
    mean /= static_cast<double>(inner);
    for (int64_t k = 0; k < inner; ++k) {
      const double d = x.at(at + static_cast<size_t>(k)) - mean;
      var += d * d;
    }
    var /= static_cast<double>(inner);
    const auto ch = static_cast<size_t>(plane % c);
    const double scale = ins[1]->at(ch) / std::sqrt(var + eps), bias = ins[2]->at(ch);
    for (int64_t k = 0; k < inner; ++k)
      y.f[at + static_cast<size_t>(k)] = static_cast<float>((x.at(at + static_cast<size_t>(k)) - mean) * scale + bias);
  }
  return y;
}

// Tessera's GroupNorm (graph::fuse_group_norm): per image and group of C / G
// consecutive channels over those channels and the spatial dims, in double,
// then scale[c] and shift[c].
StatusOr<HostTensor> group_norm(const Node& n, Ins ins) {
  for (size_t k = 0; k < 3; ++k) TS_RETURN_IF_ERROR(need(n, ins, k));
  const HostTensor& x = *ins[0];
  const int64_t groups = n.attr_int("num_groups", 0);
  if (x.dims.size() < 3 || groups < 1 || x.dims[1] % groups != 0)
    return invalid_argument_error("{}: input {} with {} groups", n.label(), dims_to_string(x.dims), groups);
  const int64_t c = x.dims[1];
  for (size_t k = 1; k < 3; ++k)
    if (ins[k]->volume() != c)
      return invalid_argument_error("{}: input {} has {} values for {} channels", n.label(), k, ins[k]->volume(), c);
  int64_t inner = 1;
  for (size_t d = 2; d < x.dims.size(); ++d) inner *= x.dims[d];
  const int64_t len = c / groups * inner;
  const double eps = n.attr_float("epsilon", 1e-5f);
  HostTensor y = make(ElemType::FLOAT32, x.dims);
  for (int64_t at = 0; len > 0 && at < x.volume(); at += len) {  // one (image, group)
    double mean = 0, var = 0;
    for (int64_t k = 0; k < len; ++k) mean += x.at(static_cast<size_t>(at + k));
    mean /= static_cast<double>(len);
    for (int64_t k = 0; k < len; ++k) {
      const double d = x.at(static_cast<size_t>(at + k)) - mean;
      var += d * d;
    }
    const double rstd = 1.0 / std::sqrt(var / static_cast<double>(len) + eps);
    for (int64_t k = 0; k < len; ++k) {
      const auto ch = static_cast<size_t>((at + k) / inner % c);
      y.f[static_cast<size_t>(at + k)] =
          static_cast<float>((x.at(static_cast<size_t>(at + k)) - mean) * rstd * ins[1]->at(ch) + ins[2]->at(ch));
    }
  }
  return y;
}

// (x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9) over `axes` (default 0, 2, 3),
// as the ONNX function defines MeanVarianceNormalization.
StatusOr<HostTensor> mean_variance_normalization(const Node& n, const HostTensor& x) {
  const size_t r = x.dims.size();
  std::vector<bool> reduced(r, false);
  for (int64_t a : n.attr_ints("axes", {0, 2, 3})) {
    TS_RETURN_IF_ERROR(check_axis(n, a, r));
    reduced[static_cast<size_t>(norm_axis(a, r))] = true;
  }
  Dims kept = x.dims;
  for (size_t d = 0; d < r; ++d)
    if (reduced[d]) kept[d] = 1;
  const Dims ks = strides_of(kept);
  auto group = [&](int64_t flat) {  // the flat index of the element's statistics
    int64_t o = 0;
    for (size_t d = r; d-- > 0; flat /= x.dims[d])
      if (!reduced[d]) o += flat % x.dims[d] * ks[d];
    return static_cast<size_t>(o);
  };
  const auto groups = static_cast<size_t>(dims_volume(kept));
  std::vector<double> sum(groups, 0), sq(groups, 0);
  for (int64_t k = 0; k < x.volume(); ++k) {
    const double v = x.at(static_cast<size_t>(k));
    sum[group(k)] += v, sq[group(k)] += v * v;
  }
  const double len = static_cast<double>(x.volume()) / static_cast<double>(std::max<size_t>(groups, 1));
  HostTensor y = make(ElemType::FLOAT32, x.dims);
  for (int64_t k = 0; k < x.volume(); ++k) {
    const size_t gi = group(k);
    const double mean = sum[gi] / len, var = sq[gi] / len - mean * mean;
    y.f[static_cast<size_t>(k)] = static_cast<float>((x.at(static_cast<size_t>(k)) - mean) / (std::sqrt(var) + 1e-9));
  }
  return y;
}

// Local response normalization across channels (rank >= 3), in double:
// x / (bias + alpha / size * sum of x^2 over channels [c - floor((size - 1) / 2),
// c + ceil((size - 1) / 2)])^beta.
StatusOr<HostTensor> lrn(const Node& n, const HostTensor& x) {
  if (x.dims.size() < 3)
    return invalid_argument_error("{}: input of rank {}, expected 3 or more", n.label(), x.dims.size());
  const int64_t size = n.attr_int("size", 0);
  if (size < 1) return invalid_argument_error("{}: size {}, expected a positive window", n.label(), size);
  const double alpha = n.attr_float("alpha", 1e-4f), beta = n.attr_float("beta", 0.75f);
  const double bias = n.attr_float("bias", 1.0f);
  const int64_t c = x.dims[1], lo = (size - 1) / 2, hi = size - 1 - lo;
  int64_t inner = 1;
  for (size_t d = 2; d < x.dims.size(); ++d) inner *= x.dims[d];
  HostTensor y = make(ElemType::FLOAT32, x.dims);
  for (int64_t k = 0; k < x.volume(); ++k) {
    const int64_t ch = k / inner % c, base = k - ch * inner;
    double sq = 0;
    for (int64_t i = std::max<int64_t>(0, ch - lo); i <= std::min(c - 1, ch + hi); ++i) {
      const double v = x.at(static_cast<size_t>(base + i * inner));
      sq += v * v;
    }
    const double den = std::pow(bias + alpha / static_cast<double>(size) * sq, beta);
    y.f[static_cast<size_t>(k)] = static_cast<float>(x.at(static_cast<size_t>(k)) / den);
  }
  return y;
}

// Also returns the Mean and InvStdDev outputs (the input's dims with 1s on the normalised axes).
StatusOr<std::vector<HostTensor>> layer_norm(const Node& n, Ins ins) {
  TS_RETURN_IF_ERROR(need(n, ins, 1));
  const HostTensor& x = *ins[0];
  const int64_t axis_attr = n.attr_int("axis", -1);
  TS_RETURN_IF_ERROR(check_axis(n, axis_attr, x.dims.size()));
  const auto axis = static_cast<size_t>(norm_axis(axis_attr, x.dims.size()));
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < x.dims.size(); ++d) (d < axis ? outer : inner) *= x.dims[d];
  const double eps = n.attr_float("epsilon", 1e-5f);
  const Dims norm_dims(x.dims.begin() + static_cast<int64_t>(axis), x.dims.end());
  HostTensor y = make(ElemType::FLOAT32, x.dims);
  Dims stat_dims(x.dims.begin(), x.dims.begin() + static_cast<int64_t>(axis));
  stat_dims.resize(x.dims.size(), 1);
  HostTensor mean_t = make(ElemType::FLOAT32, stat_dims), inv_t = make(ElemType::FLOAT32, stat_dims);
  for (int64_t o = 0; o < outer; ++o) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < inner; ++i) mean += x.at(static_cast<size_t>(o * inner + i));
    mean /= static_cast<double>(inner);
    for (int64_t i = 0; i < inner; ++i) {
      const double d = x.at(static_cast<size_t>(o * inner + i)) - mean;
      var += d * d;
    }
    var /= static_cast<double>(inner);
    mean_t.f[static_cast<size_t>(o)] = static_cast<float>(mean);
    inv_t.f[static_cast<size_t>(o)] = static_cast<float>(1 / std::sqrt(var + eps));
    for (int64_t i = 0; i < inner; ++i) {
      double v = (x.at(static_cast<size_t>(o * inner + i)) - mean) / std::sqrt(var + eps);
      v *= ins[1]->at(static_cast<size_t>(broadcast_index(i, norm_dims, ins[1]->dims)));
      if (in(ins, 2)) v += ins[2]->at(static_cast<size_t>(broadcast_index(i, norm_dims, ins[2]->dims)));
      y.f[static_cast<size_t>(o * inner + i)] = static_cast<float>(v);
    }
  }
  std::vector<HostTensor> r;
  r.push_back(std::move(y));
  r.push_back(std::move(mean_t));
  r.push_back(std::move(inv_t));
  return r;
}

StatusOr<HostTensor> depth_space(const Node& n, const HostTensor& x) {
  if (x.dims.size() != 4) return invalid_argument_error("{}: needs a 4D input", n.label());
  const int64_t b = n.attr_int("blocksize", 0);
  if (b <= 0) return invalid_argument_error("{}: blocksize {}", n.label(), b);
  const int64_t N = x.dims[0], C = x.dims[1], H = x.dims[2], W = x.dims[3];
  const bool to_depth = n.op_type == "SpaceToDepth";
  const bool crd = n.attr_string("mode", "DCR") == "CRD";
  if (to_depth ? (H % b || W % b) : (C % (b * b)))
    return invalid_argument_error("{}: shape {} does not divide by blocksize {}", n.label(), dims_to_string(x.dims), b);
  Dims out = to_depth ? Dims{N, C * b * b, H / b, W / b} : Dims{N, C / (b * b), H * b, W * b};
  HostTensor y = make(x.type, out);
  const int64_t oc = out[1], oh = out[2], ow = out[3];
  for (int64_t nn = 0; nn < N; ++nn)
    for (int64_t c = 0; c < oc; ++c)
      for (int64_t h = 0; h < oh; ++h)
        for (int64_t w = 0; w < ow; ++w) {
          int64_t sc, sh, sw;
          if (to_depth) {
            const int64_t blk = c / C, cc = c % C;
            sc = cc, sh = h * b + blk / b, sw = w * b + blk % b;
          } else {
            const int64_t bh = h % b, bw = w % b;
            sc = crd ? c * b * b + bh * b + bw : (bh * b + bw) * oc + c;
            sh = h / b, sw = w / b;
          }
          copy_elem(x, static_cast<size_t>(((nn * C + sc) * H + sh) * W + sw), y,
                    static_cast<size_t>(((nn * oc + c) * oh + h) * ow + w));
        }
  return y;
}

}  // namespace tessera::graph::host
