// Host reference kernels whose output shape depends on the values read:
// NonMaxSuppression, NonZero and If (internal to host_eval). A detector's
// post-processing ends in them; they run in a model's host tail
// (host_tail.h), after the device has made their inputs.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "host_kernels.h"
#include "tessera/graph/host_eval.h"

namespace tessera::graph::host {
namespace {

// A box as (y1, x1, y2, x2) with y1 <= y2 and x1 <= x2.
struct Box {
  float y1, x1, y2, x2;
  float area() const { return (y2 - y1) * (x2 - x1); }
};

// center_point_box 0: any two opposite corners, (y1, x1, y2, x2) in either
// order; 1: (x_center, y_center, width, height).
Box box_at(const float* b, bool center) {
  if (center) return {b[1] - b[3] / 2, b[0] - b[2] / 2, b[1] + b[3] / 2, b[0] + b[2] / 2};
  return {std::min(b[0], b[2]), std::min(b[1], b[3]), std::max(b[0], b[2]), std::max(b[1], b[3])};
}

// A kept box, its area computed once: every later candidate is checked
// against it.
struct KeptBox {
  Box box;
  float area;
};

// Whether the kept box `a` overlaps `b` (of area `ub`) by more than
// `threshold` of their union. Empty intersections and degenerate boxes never
// suppress (ONNX Runtime's rule, and its arithmetic).
bool suppresses(const KeptBox& a, const Box& b, float ub, float threshold) {
  const float iy1 = std::max(a.box.y1, b.y1), ix1 = std::max(a.box.x1, b.x1);
  const float iy2 = std::min(a.box.y2, b.y2), ix2 = std::min(a.box.x2, b.x2);
  if (iy2 <= iy1 || ix2 <= ix1) return false;
  const float inter = (iy2 - iy1) * (ix2 - ix1);
  const float uni = a.area + ub - inter;
  if (a.area <= 0 || ub <= 0 || uni <= 0) return false;
  return inter / uni > threshold;
}

// The boxes one class keeps, for the question "does any of them suppress
// this one?". Finite boxes are held in order of x1, so that only those whose
// x range can meet the candidate's are checked (a detector's class-offset
// NMS keeps thousands of boxes, each in its own class's region); boxes with
// a non-finite coordinate are checked one by one.
class KeptBoxes {
 public:
  void clear() { sorted_.clear(), odd_.clear(), widest_ = 0; }
  size_t size() const { return sorted_.size() + odd_.size(); }
  void add(const Box& b, float area) {
    if (!finite(b)) return odd_.push_back({b, area});
    widest_ = std::max(widest_, double{b.x2} - double{b.x1});
    const auto at =
        std::upper_bound(sorted_.begin(), sorted_.end(), b.x1, [](float x, const KeptBox& k) { return x < k.box.x1; });
    sorted_.insert(at, {b, area});
  }
  bool suppress(const Box& b, float area, float threshold) const {
    auto hit = [&](const KeptBox& k) { return suppresses(k, b, area, threshold); };
    if (std::any_of(odd_.begin(), odd_.end(), hit)) return true;
    if (!finite(b)) return std::any_of(sorted_.begin(), sorted_.end(), hit);
    // An overlap needs k.x1 < b.x2 and k.x2 > b.x1, so k.x1 > b.x1 - widest
    // (with slack for rounding: a box more is only checked).
    const double lo = double{b.x1} - widest_ * (1 + 1e-6) - 1e-6 * std::fabs(double{b.x1}) - 1e-30;
    auto it = std::lower_bound(sorted_.begin(), sorted_.end(), lo,
                               [](const KeptBox& k, double x) { return double{k.box.x1} < x; });
    for (; it != sorted_.end() && it->box.x1 < b.x2; ++it)
      if (hit(*it)) return true;
    return false;
  }

 private:
  static bool finite(const Box& b) {
    return std::isfinite(b.x1) && std::isfinite(b.x2) && std::isfinite(b.y1) && std::isfinite(b.y2);
  }
  std::vector<KeptBox> sorted_, odd_;
  double widest_ = 0;
};

// A scalar input's value, or `dflt` when the input is skipped.
StatusOr<double> scalar_or(const Node& n, Ins ins, size_t k, double dflt, const char* what) {
  const HostTensor* t = in(ins, k);
  if (!t) return dflt;
  if (t->size() != 1) return invalid_argument_error("{}: {} must hold one value, found {}", n.label(), what, t->size());
  return t->at(0);
}

}  // namespace

// Per batch and class, in that order: the boxes scoring above
// score_threshold (when given), by descending score (ties: lower index
// first; NaN scores never selected), each kept unless it overlaps a kept
// one by more than iou_threshold, at most max_output_boxes_per_class (0, the
// default: none). Output (selected, 3): batch, class, box index.
StatusOr<HostTensor> non_max_suppression(const Node& n, Ins ins) {
  TS_RETURN_IF_ERROR(need(n, ins, 1));
  const HostTensor &boxes = *ins[0], &scores = *ins[1];
  if (boxes.type != ElemType::FLOAT32 || scores.type != ElemType::FLOAT32)
    return invalid_argument_error("{}: boxes and scores must be float32, found {} and {}", n.label(),
                                  boxes.descriptor(), scores.descriptor());
  if (boxes.dims.size() != 3 || boxes.dims[2] != 4)
    return invalid_argument_error("{}: boxes must be [batches, boxes, 4], found {}", n.label(),
                                  dims_to_string(boxes.dims));
  if (scores.dims.size() != 3 || scores.dims[0] != boxes.dims[0] || scores.dims[2] != boxes.dims[1])
    return invalid_argument_error("{}: scores must be [batches, classes, boxes] = [{}, C, {}], found {}", n.label(),
                                  boxes.dims[0], boxes.dims[1], dims_to_string(scores.dims));
  const int64_t center = n.attr_int("center_point_box", 0);
  if (center != 0 && center != 1)
    return invalid_argument_error("{}: center_point_box must be 0 or 1, found {}", n.label(), center);
  TS_ASSIGN_OR_RETURN(const double max_out_d, scalar_or(n, ins, 2, 0, "max_output_boxes_per_class"));
  TS_ASSIGN_OR_RETURN(const double iou_d, scalar_or(n, ins, 3, 0, "iou_threshold"));
  const HostTensor* score_t = in(ins, 4);
  TS_ASSIGN_OR_RETURN(const double score_th, scalar_or(n, ins, 4, 0, "score_threshold"));
  if (std::isnan(iou_d) || iou_d < 0 || iou_d > 1)
    return invalid_argument_error("{}: iou_threshold must be in [0, 1], found {}", n.label(), iou_d);
  const int64_t max_out = max_out_d < 0 ? 0 : static_cast<int64_t>(std::min(max_out_d, 9.0e18));
  const float iou = static_cast<float>(iou_d);
  const int64_t batches = boxes.dims[0], count = boxes.dims[1], classes = scores.dims[1];
  std::vector<int64_t> out;
  std::vector<int64_t> order(static_cast<size_t>(count));
  KeptBoxes kept;
  for (int64_t b = 0; b < batches; ++b) {
    const float* bb = boxes.f.data() + b * count * 4;
    for (int64_t c = 0; c < classes; ++c) {
      const float* s = scores.f.data() + (b * classes + c) * count;
      order.clear();
      for (int64_t k = 0; k < count; ++k)
        if (!std::isnan(s[k]) && (!score_t || s[k] > score_th)) order.push_back(k);
      std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return s[x] > s[y]; });
      kept.clear();
      for (int64_t k : order) {
        if (static_cast<int64_t>(kept.size()) >= max_out) break;
        const Box box = box_at(bb + k * 4, center == 1);
        const float area = box.area();
        if (kept.suppress(box, area, iou)) continue;
        kept.add(box, area);
        out.insert(out.end(), {b, c, k});
      }
    }
  }
  const int64_t selected = static_cast<int64_t>(out.size() / 3);
  return HostTensor::ints({selected, 3}, std::move(out));
}

// The coordinates of the non-zero elements (NaN counts as non-zero), in
// row-major order: (rank, count).
StatusOr<HostTensor> non_zero(const Node&, const HostTensor& x) {
  const Dims& d = x.dims;
  const std::vector<int64_t> strides = strides_of(d);
  std::vector<int64_t> flat;
  for (size_t k = 0; k < x.size(); ++k)
    if (x.at(k) != 0 || std::isnan(x.at(k))) flat.push_back(static_cast<int64_t>(k));
  const auto nnz = static_cast<int64_t>(flat.size());
  std::vector<int64_t> out(d.size() * flat.size());
  for (size_t j = 0; j < flat.size(); ++j)
    for (size_t a = 0; a < d.size(); ++a) out[a * flat.size() + j] = flat[j] / strides[a] % d[a];
  return HostTensor::ints({static_cast<int64_t>(d.size()), nnz}, std::move(out));
}

// The branch the condition picks, evaluated node by node on the values it
// reads from the scopes around it (the node's inputs after the condition,
// named in "tessera_captures": the importer's add_captures).
StatusOr<std::vector<HostTensor>> if_branch(const Node& n, Ins ins, int /*opset: the branch graph holds its own*/) {
  TS_RETURN_IF_ERROR(need(n, ins, 0));
  if (ins[0]->size() != 1)
    return invalid_argument_error("{}: the condition must hold one value, found {}", n.label(), ins[0]->descriptor());
  const char* branch = ins[0]->at(0) != 0 ? "then_branch" : "else_branch";
  const auto it = n.attrs.find(branch);
  if (it == n.attrs.end() || it->second.kind != Attribute::Kind::GRAPH || !it->second.g)
    return invalid_argument_error("{}: no {} graph", n.label(), branch);
  const Graph& g = *it->second.g;
  const std::vector<std::string> names = n.attr_strings("tessera_captures");
  std::vector<std::optional<HostTensor>> vals(g.values.size());  // (constants read in place)
  for (int v : g.inputs) {
    const std::string& name = g.value(v).name;
    const auto at = std::find(names.begin(), names.end(), name);
    const HostTensor* x = at == names.end() ? nullptr : in(ins, 1 + static_cast<size_t>(at - names.begin()));
    if (!x)
      return invalid_argument_error("{}: its {} reads '{}', which no enclosing scope gives", n.label(), branch, name);
    vals[static_cast<size_t>(v)] = *x;
  }
  TS_RETURN_IF_ERROR(evaluate_nodes(g, vals));
  std::vector<HostTensor> out;
  for (int v : g.outputs) {
    const auto& val = vals[static_cast<size_t>(v)];
    if (!val && !g.value(v).constant)
      return invalid_argument_error("{}: its {} does not compute its output '{}'", n.label(), branch, g.value(v).name);
    out.push_back(val ? *val : *g.value(v).constant);
  }
  return out;
}

}  // namespace tessera::graph::host
