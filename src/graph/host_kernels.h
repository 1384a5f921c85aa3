// The host reference kernels' shared helpers and the shape and data
// movement kernels (internal to host_eval; host_data.cc). Written for
// obviousness, not speed: one element at a time through index arithmetic.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <span>
#include <utility>
#include <vector>

#include "tessera/graph/graph.h"

namespace tessera::graph::host {

using Dims = std::vector<int64_t>;
using Ins = std::span<const HostTensor* const>;

inline std::vector<int64_t> strides_of(const Dims& d) {
  std::vector<int64_t> s(d.size(), 1);
  for (size_t k = d.size(); k-- > 1;) s[k - 1] = s[k] * d[k];
  return s;
}

// An offset that follows the row-major walk through `dims`, moving by
// steps[d] per step along dim d (0 where the source is broadcast or the dim
// is addressed otherwise): each element's offset in turn, with no division
// per element (a detector's index expansions and scatters walk millions).
class OffsetWalk {
 public:
  OffsetWalk(Dims dims, Dims steps) : dims_(std::move(dims)), steps_(std::move(steps)), c_(dims_.size(), 0) {}
  int64_t offset() const { return offset_; }
  void next() {
    for (size_t d = dims_.size(); d-- > 0;) {
      if (++c_[d] < dims_[d]) {
        offset_ += steps_[d];
        return;
      }
      offset_ -= (dims_[d] - 1) * steps_[d];
      c_[d] = 0;
    }
  }

 private:
  Dims dims_, steps_, c_;
  int64_t offset_ = 0;
};

// Index into `src` (dims `sd`, right-aligned against `out`) of output element `flat`.
inline int64_t broadcast_index(int64_t flat, const Dims& out, const Dims& sd) {
  int64_t idx = 0, stride = 1;
  for (size_t k = out.size(), j = sd.size(); k-- > 0;) {
    const int64_t c = flat % out[k];
    flat /= out[k];
    if (j == 0) continue;
    --j;
    if (sd[j] != 1) idx += c * stride;
    stride *= sd[j];
  }
  return idx;
}

inline HostTensor make(ElemType t, Dims dims) {
  HostTensor h;
  h.type = t;
  const auto n = static_cast<size_t>(dims_volume(dims));
  h.dims = std::move(dims);
  if (t == ElemType::FLOAT32)
    h.f.assign(n, 0.0f);
  else
    h.i.assign(n, 0);
  return h;
}

inline void set(HostTensor& h, size_t k, double v) {
  if (h.type == ElemType::FLOAT32)
    h.f[k] = static_cast<float>(v);
  else
    h.i[k] = static_cast<int64_t>(v);
}

// Copies element `from` of `src` to element `to` of `dst` (same type).
inline void copy_elem(const HostTensor& src, size_t from, HostTensor& dst, size_t to) {
  if (src.type == ElemType::FLOAT32)
    dst.f[to] = src.f[from];
  else
    dst.i[to] = src.i[from];
}

inline int64_t norm_axis(int64_t axis, size_t rank) { return axis < 0 ? axis + static_cast<int64_t>(rank) : axis; }

inline Status check_axis(const Node& n, int64_t axis, size_t rank) {
  const int64_t r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= std::max<int64_t>(r, 1))
    return invalid_argument_error("{}: axis {} is out of range for rank {}", n.label(), axis, rank);
  return ok_status();
}

// The values as int64: INT64's exactly (through a double, INT64_MAX, which
// exporters write for "to the end", would round past the range), floats
// truncated and saturated.
inline std::vector<int64_t> as_ints(const HostTensor& t) {
  if (t.type == ElemType::INT64) return t.i;
  std::vector<int64_t> v(t.f.size());
  for (size_t k = 0; k < v.size(); ++k) {
    const double x = t.f[k];
    v[k] = std::isnan(x)                       ? 0
           : x >= 9223372036854775807.0        ? INT64_MAX
           : x <= -9223372036854775808.0       ? INT64_MIN
                                               : static_cast<int64_t>(x);
  }
  return v;
}

// How a scatter combines an update u with the value v it lands on
// (attribute 'reduction': none, add, mul, max, min).
enum class Reduction { kNone, kAdd, kMul, kMax, kMin };
inline StatusOr<Reduction> scatter_reduction(const Node& n) {
  const std::string r = n.attr_string("reduction", "none");
  if (r == "none") return Reduction::kNone;
  if (r == "add") return Reduction::kAdd;
  if (r == "mul") return Reduction::kMul;
  if (r == "max") return Reduction::kMax;
  if (r == "min") return Reduction::kMin;
  return invalid_argument_error("{}: reduction '{}', expected none, add, mul, max or min", n.label(), r);
}
inline double combine(Reduction r, double v, double u) {
  switch (r) {
    case Reduction::kAdd: return v + u;
    case Reduction::kMul: return v * u;
    case Reduction::kMax: return std::max(v, u);
    case Reduction::kMin: return std::min(v, u);
    default: return u;
  }
}

inline const HostTensor* in(Ins ins, size_t k) { return k < ins.size() ? ins[k] : nullptr; }

inline Status need(const Node& n, Ins ins, size_t k) {
  if (!in(ins, k)) return invalid_argument_error("{}: input {} is missing", n.label(), k);
  return ok_status();
}

// Shapes, data movement, MatMul / Gemm, normalizations (host_data.cc).
StatusOr<HostTensor> reshape_to(const Node& n, const HostTensor& x, Dims dims);
StatusOr<Dims> reshape_dims(const Node& n, const Dims& in_dims, std::vector<int64_t> shape);
StatusOr<HostTensor> transpose(const Node& n, const HostTensor& x);
StatusOr<HostTensor> concat(const Node& n, Ins ins);
StatusOr<HostTensor> gather(const Node& n, const HostTensor& x, const HostTensor& idx);
StatusOr<HostTensor> scatter_nd(const Node& n, Ins ins);
StatusOr<HostTensor> slice(const Node& n, Ins ins, int opset);
StatusOr<HostTensor> expand(const Node& n, const HostTensor& x, const HostTensor& shape);
StatusOr<HostTensor> tile(const Node& n, const HostTensor& x, const HostTensor& reps_t);
StatusOr<HostTensor> pad(const Node& n, Ins ins, int opset);
StatusOr<std::vector<HostTensor>> split(const Node& n, Ins ins, int opset);
StatusOr<HostTensor> matmul(const Node& n, const HostTensor& a0, const HostTensor& b0);
StatusOr<HostTensor> gemm(const Node& n, Ins ins);
StatusOr<HostTensor> range(const Node& n, Ins ins);
StatusOr<HostTensor> constant_of_shape(const Node& n, const HostTensor& shape);
StatusOr<HostTensor> squeeze_unsqueeze(const Node& n, Ins ins, int opset);
StatusOr<HostTensor> flatten(const Node& n, const HostTensor& x);
StatusOr<std::vector<HostTensor>> batch_norm(const Node& n, Ins ins);
StatusOr<HostTensor> instance_norm(const Node& n, Ins ins);
StatusOr<HostTensor> lrn(const Node& n, const HostTensor& x);
StatusOr<HostTensor> group_norm(const Node& n, Ins ins);
StatusOr<std::vector<HostTensor>> layer_norm(const Node& n, Ins ins);
StatusOr<HostTensor> depth_space(const Node& n, const HostTensor& x);
StatusOr<HostTensor> mean_variance_normalization(const Node& n, const HostTensor& x);

// Index-driven kernels (host_index.cc).
StatusOr<std::vector<HostTensor>> top_k(const Node& n, Ins ins, int opset);
StatusOr<HostTensor> hardmax(const Node& n, const HostTensor& x, int opset);
StatusOr<HostTensor> cum_sum(const Node& n, Ins ins);
StatusOr<HostTensor> gather_elements(const Node& n, const HostTensor& x, const HostTensor& idx);
StatusOr<HostTensor> gather_nd(const Node& n, const HostTensor& x, const HostTensor& idx);
StatusOr<HostTensor> scatter_elements(const Node& n, Ins ins);
StatusOr<HostTensor> one_hot(const Node& n, Ins ins);
StatusOr<HostTensor> trilu(const Node& n, Ins ins);
StatusOr<HostTensor> eye_like(const Node& n, const HostTensor& x);

// LSTM, GRU and RNN: Y, Y_h (and LSTM's Y_c) (host_recurrent.cc).
StatusOr<std::vector<HostTensor>> recurrent(const Node& n, Ins ins);

// Quantization (host_quant.cc): integers are INT64, saturated to the node's
// tessera_quant_type (uint8 when absent): quant_range, nullopt for a type
// Tessera does not quantize to.
struct QuantRange {
  double lo, hi;
};
std::optional<QuantRange> quant_range(const Node& n);
StatusOr<HostTensor> quantize_linear(const Node& n, Ins ins);
StatusOr<HostTensor> dequantize_linear(const Node& n, Ins ins);
StatusOr<std::vector<HostTensor>> dynamic_quantize_linear(const HostTensor& x);
StatusOr<HostTensor> conv_integer(const Node& n, Ins ins);
StatusOr<HostTensor> matmul_integer(const Node& n, Ins ins);
StatusOr<HostTensor> qlinear_conv(const Node& n, Ins ins);
// fuse_quantized_convs's QuantizedConv (passes.h): x quantized to uint8 (a
// NaN stays NaN, as on the device), the centered integer conv, times
// input_scale * weight_scales[c], plus the bias (quantized_conv2d.h).
StatusOr<HostTensor> quantized_conv(const Node& n, Ins ins);
StatusOr<HostTensor> qlinear_matmul(const Node& n, Ins ins);

// An Einsum equation resolved against its inputs' dims (einsum.cc): each
// input's label per dim ("..." expanded into labels '0', '1', ... of its
// own), the output's labels (the implicit form's when the equation has no
// "->"), and each label's size (1 broadcasts).
struct EinsumLabels {
  std::vector<std::string> in;
  std::string out;
  std::map<char, int64_t> size;
};
StatusOr<EinsumLabels> einsum_labels(const Node& n, const std::vector<Dims>& dims);
StatusOr<HostTensor> einsum(const Node& n, Ins ins);

// Output shapes that depend on the values read (host_detect.cc).
StatusOr<HostTensor> non_max_suppression(const Node& n, Ins ins);
StatusOr<HostTensor> non_zero(const Node& n, const HostTensor& x);
StatusOr<std::vector<HostTensor>> if_branch(const Node& n, Ins ins, int opset);

}  // namespace tessera::graph::host
