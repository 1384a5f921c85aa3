// The ONNX backend node tests of Debian's libonnx-testdata, run through
// Tessera's ops directly (the importer comes later): each test's one-node
// model.onnx is mapped onto device ops, its test_data_set_* inputs are run,
// and the outputs are compared with the stored ones at the backend tests'
// rtol 1e-3, with atol 1e-5 (float32 accumulation orders differ from the
// exporters' double ones).
//
// Tests whose op or attributes Tessera does not cover are skipped with the
// reason; the test prints every test's status and fails if a mapped test
// fails. NCHW tensors of the ONNX convention are permuted to NHWC on the
// device and back, as an importer does.
#include <onnx/onnx_pb.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>

#include "tessera/ops/conv2d.h"
#include "tessera/ops/conv_transpose2d.h"
#include "tessera/ops/eltwise.h"
#include "tessera/ops/manipulation.h"
#include "tessera/ops/matmul.h"
#include "tessera/ops/normalization.h"
#include "tessera/ops/pool2d.h"
#include "tessera/ops/upsample.h"
#include "test_util.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
constexpr char kNodeDir[] = "/usr/share/libonnx-testdata/data/node";

// A graph input: float values (a Tensor) or int64 values (shapes, indices).
struct Value {
  std::vector<int64_t> dims;
  std::optional<Tensor> tensor;  // float32 host tensor
  std::vector<int64_t> ints;
  bool is_int = false;
};

Shape to_shape(const std::vector<int64_t>& dims) {
  if (dims.empty()) return Shape{1};  // scalars run as one element
  std::vector<uint32_t> d(dims.begin(), dims.end());
  return Shape(std::span<const uint32_t>(d));
}

StatusOr<Value> read_tensor(const onnx::TensorProto& t) {
  Value v;
  v.dims.assign(t.dims().begin(), t.dims().end());
  uint64_t n = 1;
  for (int64_t d : v.dims) {
    if (d <= 0) return unimplemented_error("empty tensor {}", t.name());
    n *= static_cast<uint64_t>(d);
    if (n > (uint64_t{1} << 28)) return unimplemented_error("tensor {} with over 2^28 elements", t.name());
  }
  const std::string& raw = t.raw_data();
  if (t.data_type() == onnx::TensorProto::FLOAT) {
    std::vector<float> f(n);
    if (!raw.empty()) {
      if (raw.size() != n * 4) return invalid_argument_error("{}: raw_data has {} bytes", t.name(), raw.size());
      std::memcpy(f.data(), raw.data(), raw.size());
    } else {
      if (static_cast<uint64_t>(t.float_data_size()) != n) return invalid_argument_error("{}: float_data size", t.name());
      std::copy(t.float_data().begin(), t.float_data().end(), f.begin());
    }
    TS_ASSIGN_OR_RETURN(Tensor h, Tensor::from_vector(f, to_shape(v.dims), DataType::FLOAT32));
    v.tensor = h;
    return v;
  }
  if (t.data_type() == onnx::TensorProto::INT64) {
    v.is_int = true;
    v.ints.resize(n);
    if (!raw.empty())
      std::memcpy(v.ints.data(), raw.data(), std::min<size_t>(raw.size(), n * 8));
    else
      std::copy(t.int64_data().begin(), t.int64_data().end(), v.ints.begin());
    return v;
  }
  return unimplemented_error("input dtype {} (only float32 and int64 inputs are mapped)",
                             onnx::TensorProto::DataType_Name(static_cast<onnx::TensorProto::DataType>(t.data_type())));
}

template <class Proto>
StatusOr<Proto> read_proto(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  Proto proto;
  if (!in || !proto.ParseFromIstream(&in)) return invalid_argument_error("cannot parse {}", p.string());
  return proto;
}

// Node attributes with defaults.
struct Attrs {
  const onnx::NodeProto& node;
  const onnx::AttributeProto* find(const std::string& name) const {
    for (const auto& a : node.attribute())
      if (a.name() == name) return &a;
    return nullptr;
  }
  int64_t i(const std::string& n, int64_t d) const { auto* a = find(n); return a ? a->i() : d; }
  float f(const std::string& n, float d) const { auto* a = find(n); return a ? a->f() : d; }
  std::string s(const std::string& n, const std::string& d) const { auto* a = find(n); return a ? a->s() : d; }
  std::vector<int64_t> ints(const std::string& n, std::vector<int64_t> d = {}) const {
    auto* a = find(n);
    return a ? std::vector<int64_t>(a->ints().begin(), a->ints().end()) : d;
  }
};

class Runner {
 public:
  Runner(Device& dev, const onnx::NodeProto& node, std::vector<Value> in, int opset)
      : dev_(dev), node_(node), a_{node}, in_(std::move(in)), opset_(opset) {}

  StatusOr<std::vector<Tensor>> run();

 private:
  bool has(size_t i) const { return i < in_.size() && (in_[i].tensor || in_[i].is_int); }
  StatusOr<Tensor> dev(size_t i) {
    if (!has(i) || !in_[i].tensor) return unimplemented_error("input {} is not a float tensor", i);
    return to_device(*in_[i].tensor, dev_);
  }
  StatusOr<std::vector<int64_t>> ints(size_t i) {
    if (!has(i) || !in_[i].is_int) return unimplemented_error("input {} is not an int64 tensor", i);
    return in_[i].ints;
  }
  int rank(size_t i) const { return static_cast<int>(in_[i].dims.size()); }
  static StatusOr<std::vector<Tensor>> one(StatusOr<Tensor> t) {
    if (!t.ok()) return t.status();
    TS_ASSIGN_OR_RETURN(Tensor h, t->cpu());
    return std::vector<Tensor>{h};
  }
  // (N, C, H, W) device tensor -> NHWC, and an NHWC op result back to NCHW.
  static StatusOr<Tensor> to_nhwc(const Tensor& t) {
    const int perm[] = {0, 2, 3, 1};
    return permute(t, perm);
  }
  static StatusOr<Tensor> to_nchw(const Tensor& t, uint32_t n, uint32_t h, uint32_t w, uint32_t c) {
    TS_ASSIGN_OR_RETURN(Tensor r, reshape(t, Shape{n, h, w, c}));
    const int perm[] = {0, 3, 1, 2};
    return permute(r, perm);
  }
  Status require_4d(size_t i) {
    if (rank(i) != 4) return unimplemented_error("{}D spatial input (only 2D is mapped)", rank(i) - 2);
    return ok_status();
  }
  // Symmetric 2D pads from ONNX [top, left, bottom, right] (+ auto_pad).
  StatusOr<std::array<uint32_t, 4>> pads2d(const std::array<uint32_t, 2>& k, const std::array<uint32_t, 2>& s,
                                           const std::array<uint32_t, 2>& d, uint32_t h, uint32_t w) {
    const std::string auto_pad = a_.s("auto_pad", "NOTSET");
    if (auto_pad == "VALID") return std::array<uint32_t, 4>{0, 0, 0, 0};
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      std::array<uint32_t, 4> p{};
      const uint32_t in[2] = {h, w};
      for (int i = 0; i < 2; ++i) {
        const int64_t out = (in[i] + s[i] - 1) / s[i];
        const int64_t total = std::max<int64_t>(0, (out - 1) * s[i] + (int64_t{k[i]} - 1) * d[i] + 1 - in[i]);
        const auto small = static_cast<uint32_t>(total / 2), big = static_cast<uint32_t>(total - total / 2);
        p[static_cast<size_t>(i)] = auto_pad == "SAME_UPPER" ? small : big;
        p[static_cast<size_t>(i) + 2] = auto_pad == "SAME_UPPER" ? big : small;
      }
      return p;
    }
    auto v = a_.ints("pads", {0, 0, 0, 0});
    if (v.size() != 4) return unimplemented_error("pads of size {}", v.size());
    return std::array<uint32_t, 4>{static_cast<uint32_t>(v[0]), static_cast<uint32_t>(v[1]),
                                   static_cast<uint32_t>(v[2]), static_cast<uint32_t>(v[3])};
  }
  static std::array<uint32_t, 2> pair(const std::vector<int64_t>& v, uint32_t d) {
    if (v.size() < 2) return {d, d};
    return {static_cast<uint32_t>(v[0]), static_cast<uint32_t>(v[1])};
  }

  StatusOr<std::vector<Tensor>> unary(UnaryWithParam act) {
    TS_ASSIGN_OR_RETURN(Tensor x, dev(0));
    return one(tessera::unary(x, act));
  }
  StatusOr<std::vector<Tensor>> binary(BinaryOpType op) {
    TS_ASSIGN_OR_RETURN(Tensor x, dev(0));
    TS_ASSIGN_OR_RETURN(Tensor y, dev(1));
    return one(tessera::binary(x, y, op));
  }
  StatusOr<std::vector<Tensor>> conv();
  StatusOr<std::vector<Tensor>> conv_transpose();
  StatusOr<std::vector<Tensor>> pool(bool average);
  StatusOr<std::vector<Tensor>> gemm();
  StatusOr<std::vector<Tensor>> softmax_op();
  StatusOr<std::vector<Tensor>> slice_op();
  StatusOr<std::vector<Tensor>> pad_op();
  StatusOr<std::vector<Tensor>> resize();

  Device& dev_;
  const onnx::NodeProto& node_;
  Attrs a_;
  std::vector<Value> in_;
  int opset_;
};

StatusOr<std::vector<Tensor>> Runner::conv() {
  TS_RETURN_IF_ERROR(require_4d(0));
  TS_ASSIGN_OR_RETURN(Tensor x, dev(0));
  const auto& xd = in_[0].dims;
  const auto& wd = in_[1].dims;
  Conv2dParams p;
  p.batch_size = static_cast<uint32_t>(xd[0]);
  p.in_channels = static_cast<uint32_t>(xd[1]);
  p.input_height = static_cast<uint32_t>(xd[2]);
  p.input_width = static_cast<uint32_t>(xd[3]);
  p.out_channels = static_cast<uint32_t>(wd[0]);
  p.groups = static_cast<uint32_t>(a_.i("group", 1));
  p.kernel_size = pair(a_.ints("kernel_shape", {wd[2], wd[3]}), 1);
  p.stride = pair(a_.ints("strides"), 1);
  p.dilation = pair(a_.ints("dilations"), 1);
  TS_ASSIGN_OR_RETURN(auto pads, pads2d(p.kernel_size, p.stride, p.dilation, p.input_height, p.input_width));
  p.padding = {pads[0], pads[2], pads[1], pads[3]};
  TS_ASSIGN_OR_RETURN(Tensor nhwc, to_nhwc(x));
  std::optional<Tensor> bias;
  if (has(2)) bias = *in_[2].tensor;
  TS_ASSIGN_OR_RETURN(Conv2dResult r, conv2d(nhwc, *in_[1].tensor, bias, p, {.weights_dtype = DataType::FLOAT32}));
  return one(to_nchw(r.output, p.batch_size, r.output_height, r.output_width, p.out_channels));
}

StatusOr<std::vector<Tensor>> Runner::conv_transpose() {
  TS_RETURN_IF_ERROR(require_4d(0));
  if (a_.find("output_shape")) return unimplemented_error("output_shape attribute");
  TS_ASSIGN_OR_RETURN(Tensor x, dev(0));
  const auto& xd = in_[0].dims;
  const auto& wd = in_[1].dims;
  ConvTranspose2dParams p;
  p.batch_size = static_cast<uint32_t>(xd[0]);
  p.in_channels = static_cast<uint32_t>(xd[1]);
  p.input_height = static_cast<uint32_t>(xd[2]);
  p.input_width = static_cast<uint32_t>(xd[3]);
  p.groups = static_cast<uint32_t>(a_.i("group", 1));
  p.out_channels = static_cast<uint32_t>(wd[1]) * p.groups;
  p.kernel_size = pair(a_.ints("kernel_shape", {wd[2], wd[3]}), 1);
  p.stride = pair(a_.ints("strides"), 1);
  p.dilation = pair(a_.ints("dilations"), 1);
  p.output_padding = pair(a_.ints("output_padding"), 0);
  if (a_.s("auto_pad", "NOTSET") != "NOTSET") return unimplemented_error("auto_pad for ConvTranspose");
  auto pads = a_.ints("pads", {0, 0, 0, 0});
  if (pads[0] != pads[2] || pads[1] != pads[3]) return unimplemented_error("asymmetric ConvTranspose pads");
  p.padding = {static_cast<uint32_t>(pads[0]), static_cast<uint32_t>(pads[1])};
  TS_ASSIGN_OR_RETURN(Tensor nhwc, to_nhwc(x));
  std::optional<Tensor> bias;
  if (has(2)) bias = *in_[2].tensor;
  TS_ASSIGN_OR_RETURN(Conv2dResult r,
                      conv_transpose2d(nhwc, *in_[1].tensor, bias, p, {.weights_dtype = DataType::FLOAT32}));
  return one(to_nchw(r.output, p.batch_size, r.output_height, r.output_width, p.out_channels));
}

StatusOr<std::vector<Tensor>> Runner::pool(bool average) {
  TS_RETURN_IF_ERROR(require_4d(0));
  if (node_.output_size() > 1) return unimplemented_error("the Indices output");
  if (a_.i("storage_order", 0) != 0) return unimplemented_error("storage_order 1");
  TS_ASSIGN_OR_RETURN(Tensor x, dev(0));
  const auto& xd = in_[0].dims;
  Pool2dParams p;
  p.batch_size = static_cast<uint32_t>(xd[0]);
  p.channels = static_cast<uint32_t>(xd[1]);
  p.input_height = static_cast<uint32_t>(xd[2]);
  p.input_width = static_cast<uint32_t>(xd[3]);
  p.kernel_size = pair(a_.ints("kernel_shape"), 1);
  p.stride = pair(a_.ints("strides"), 1);
  p.dilation = pair(a_.ints("dilations"), 1);
  p.ceil_mode = a_.i("ceil_mode", 0) != 0;
  p.count_include_pad = a_.i("count_include_pad", 0) != 0;
  TS_ASSIGN_OR_RETURN(auto pads, pads2d(p.kernel_size, p.stride, p.dilation, p.input_height, p.input_width));
  if (pads[0] != pads[2] || pads[1] != pads[3]) return unimplemented_error("asymmetric pooling pads");
  if (2 * pads[0] > p.kernel_size[0] || 2 * pads[1] > p.kernel_size[1])
    return unimplemented_error("padding over half the kernel (PyTorch's limit, which Tessera's pools keep)");
  p.padding = {pads[0], pads[1]};
  TS_ASSIGN_OR_RETURN(Tensor nhwc, to_nhwc(x));
  TS_ASSIGN_OR_RETURN(Tensor y, average ? avg_pool2d(nhwc, p) : max_pool2d(nhwc, p));
  return one(to_nchw(y, p.batch_size, p.output_height(), p.output_width(), p.channels));
}

StatusOr<std::vector<Tensor>> Runner::gemm() {
  if (a_.i("transA", 0)) return unimplemented_error("transA");
  const float alpha = a_.f("alpha", 1.0f), beta = a_.f("beta", 1.0f);
  TS_ASSIGN_OR_RETURN(Tensor a, dev(0));
  TS_ASSIGN_OR_RETURN(Tensor b, dev(1));
  TS_ASSIGN_OR_RETURN(Tensor y, matmul(a, b, {.transpose_b = a_.i("transB", 0) != 0}));
  if (alpha != 1.0f) {
    TS_ASSIGN_OR_RETURN(Tensor s, to_device(Tensor::from_vector({alpha}, Shape{1}, DataType::FLOAT32).value(), dev_));
    TS_ASSIGN_OR_RETURN(y, mul(y, s));
  }
  if (has(2) && beta != 0.0f) {
    // beta * C is folded on the host, as an importer folds constants.
    TS_ASSIGN_OR_RETURN(std::vector<float> c, in_[2].tensor->to_vector());
    for (float& v : c) v *= beta;
    TS_ASSIGN_OR_RETURN(Tensor ch, Tensor::from_vector(c, in_[2].tensor->shape(), DataType::FLOAT32));
    TS_ASSIGN_OR_RETURN(Tensor cd, to_device(ch, dev_));
    TS_ASSIGN_OR_RETURN(y, add(y, cd));
  }
  return one(y);
}

StatusOr<std::vector<Tensor>> Runner::softmax_op() {
  TS_ASSIGN_OR_RETURN(Tensor x, dev(0));
  const int r = rank(0);
  int axis = static_cast<int>(a_.i("axis", opset_ >= 13 ? -1 : 1));
  if (axis < 0) axis += r;
  if (opset_ < 13) {
    // Older opsets flatten to 2D at `axis` and normalise each row.
    uint32_t outer = 1, inner = 1;
    for (int d = 0; d < r; ++d) (d < axis ? outer : inner) *= static_cast<uint32_t>(in_[0].dims[static_cast<size_t>(d)]);
    TS_ASSIGN_OR_RETURN(Tensor flat, reshape(x, Shape{outer, inner}));
    TS_ASSIGN_OR_RETURN(Tensor s, softmax(flat));
    return one(reshape(s, x.shape()));
  }
  if (axis == r - 1) return one(softmax(x));
  // Move the axis last, normalise, move it back.
  std::vector<int> perm(static_cast<size_t>(r)), back(static_cast<size_t>(r));
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[static_cast<size_t>(axis)], perm.back());
  TS_ASSIGN_OR_RETURN(Tensor t, permute(x, perm));
  TS_ASSIGN_OR_RETURN(Tensor s, softmax(t));
  return one(permute(s, perm));  // a swap is its own inverse
}

StatusOr<std::vector<Tensor>> Runner::slice_op() {
  TS_ASSIGN_OR_RETURN(Tensor x, dev(0));
  TS_ASSIGN_OR_RETURN(auto starts, ints(1));
  TS_ASSIGN_OR_RETURN(auto ends, ints(2));
  const int r = rank(0);
  std::vector<int64_t> axes(starts.size()), steps(starts.size(), 1);
  std::iota(axes.begin(), axes.end(), 0);
  if (has(3)) {
    TS_ASSIGN_OR_RETURN(axes, ints(3));
  }
  if (has(4)) {
    TS_ASSIGN_OR_RETURN(steps, ints(4));
  }
  SliceParams sl;
  for (int d = 0; d < r; ++d) {
    sl.begin.push_back(0);
    sl.end.push_back(static_cast<uint32_t>(in_[0].dims[static_cast<size_t>(d)]));
    sl.step.push_back(1);
  }
  for (size_t i = 0; i < axes.size(); ++i) {
    const auto d = static_cast<size_t>(axes[i] < 0 ? axes[i] + r : axes[i]);
    const int64_t dim = in_[0].dims[d];
    if (steps[i] < 1) return unimplemented_error("negative slice steps");
    auto clamp = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + dim : v, 0, dim); };
    sl.begin[d] = static_cast<uint32_t>(clamp(starts[i]));
    sl.end[d] = static_cast<uint32_t>(clamp(ends[i]));
    sl.step[d] = static_cast<uint32_t>(steps[i]);
    if (sl.begin[d] >= sl.end[d]) return unimplemented_error("an empty result (Tessera tensors are never empty)");
  }
  return one(slice(x, sl));
}

StatusOr<std::vector<Tensor>> Runner::pad_op() {
  if (a_.s("mode", "constant") != "constant") return unimplemented_error("pad mode {}", a_.s("mode", ""));
  TS_ASSIGN_OR_RETURN(Tensor x, dev(0));
  std::vector<int64_t> pads = a_.ints("pads");
  float value = a_.f("value", 0.0f);
  if (opset_ >= 11) {
    TS_ASSIGN_OR_RETURN(pads, ints(1));
    if (has(2)) value = in_[2].tensor->to_vector().value()[0];
  }
  const size_t r = in_[0].dims.size();
  if (pads.size() != 2 * r) return unimplemented_error("pads of size {} for rank {}", pads.size(), r);
  std::vector<std::array<uint32_t, 2>> p(r);
  for (size_t d = 0; d < r; ++d) {
    if (pads[d] < 0 || pads[d + r] < 0) return unimplemented_error("negative pads (cropping)");
    p[d] = {static_cast<uint32_t>(pads[d]), static_cast<uint32_t>(pads[d + r])};
  }
  return one(pad(x, p, value));
}

StatusOr<std::vector<Tensor>> Runner::resize() {
  TS_RETURN_IF_ERROR(require_4d(0));
  const std::string mode = a_.s("mode", "nearest");
  const std::string ctm = a_.s("coordinate_transformation_mode", "half_pixel");
  std::vector<float> scales;
  const size_t scales_input = node_.op_type() == "Upsample" ? 1 : 2;
  if (node_.op_type() == "Resize" && has(3)) return unimplemented_error("Resize with sizes");
  if (!has(scales_input) || !in_[scales_input].tensor) return unimplemented_error("no scales input");
  TS_ASSIGN_OR_RETURN(scales, in_[scales_input].tensor->to_vector());
  if (scales.size() != 4 || scales[0] != 1 || scales[1] != 1) return unimplemented_error("scaling N or C");
  UpsampleParams up{.scale_h = scales[2], .scale_w = scales[3]};
  if (mode == "nearest") {
    const std::string nm = a_.s("nearest_mode", "round_prefer_floor");
    if (node_.op_type() == "Resize" && (ctm != "asymmetric" || nm != "floor"))
      return unimplemented_error("nearest with {} / {} (PyTorch's asymmetric / floor is mapped)", ctm, nm);
    up.mode = UpsampleMode::NEAREST;
  } else if (mode == "linear" || mode == "bilinear") {
    up.mode = UpsampleMode::BILINEAR;
    if (node_.op_type() == "Upsample" || ctm == "asymmetric") return unimplemented_error("linear with asymmetric");
    if (ctm == "align_corners") {
      up.align_corners = true;
      for (int i = 2; i < 4; ++i)
        if (std::floor(in_[0].dims[static_cast<size_t>(i)] * scales[static_cast<size_t>(i)]) !=
            in_[0].dims[static_cast<size_t>(i)] * scales[static_cast<size_t>(i)])
          return unimplemented_error("align_corners with a fractional output size (ONNX divides by the unrounded "
                                     "size, PyTorch and Tessera by the rounded one)");
    }
    else if (ctm != "half_pixel" && ctm != "pytorch_half_pixel") return unimplemented_error("linear with {}", ctm);
  } else {
    return unimplemented_error("{} mode", mode);
  }
  TS_ASSIGN_OR_RETURN(Tensor x, dev(0));
  TS_ASSIGN_OR_RETURN(Tensor nhwc, to_nhwc(x));
  TS_ASSIGN_OR_RETURN(Tensor y, upsample(nhwc, up));
  return one(to_nchw(y, y.shape()[0], y.shape()[1], y.shape()[2], y.shape()[3]));
}

StatusOr<std::vector<Tensor>> Runner::run() {
  const std::string& op = node_.op_type();
  const std::map<std::string, UnaryOpType> unaries = {
      {"Relu", UnaryOpType::RELU},   {"Sigmoid", UnaryOpType::SIGMOID},     {"Tanh", UnaryOpType::TANH},
      {"Exp", UnaryOpType::EXP},     {"Sqrt", UnaryOpType::SQRT},           {"HardSwish", UnaryOpType::HARDSWISH},
      {"Mish", UnaryOpType::MISH},   {"Identity", UnaryOpType::IDENTITY}};
  if (auto it = unaries.find(op); it != unaries.end()) return unary({it->second});
  if (op == "LeakyRelu") return unary({UnaryOpType::LEAKY_RELU, a_.f("alpha", 0.01f)});
  if (op == "HardSigmoid") {
    if (std::fabs(a_.f("alpha", 0.2f) - 1.0f / 6) > 1e-7f || a_.f("beta", 0.5f) != 0.5f)
      return unimplemented_error("HardSigmoid alpha/beta other than 1/6, 1/2 (PyTorch's)");
    return unary({UnaryOpType::HARDSIGMOID});
  }
  const std::map<std::string, BinaryOpType> binaries = {
      {"Add", BinaryOpType::ADD}, {"Sub", BinaryOpType::SUB}, {"Mul", BinaryOpType::MUL}, {"Div", BinaryOpType::DIV}};
  if (auto it = binaries.find(op); it != binaries.end()) return binary(it->second);
  if (op == "MatMul") {
    if (rank(0) < 2 || rank(1) < 2) return unimplemented_error("1-D MatMul operands");
    TS_ASSIGN_OR_RETURN(Tensor a, dev(0));
    TS_ASSIGN_OR_RETURN(Tensor b, dev(1));
    return one(matmul(a, b));
  }
  if (op == "Gemm") return gemm();
  if (op == "Conv") return conv();
  if (op == "ConvTranspose") return conv_transpose();
  if (op == "MaxPool") return pool(false);
  if (op == "AveragePool") return pool(true);
  if (op == "GlobalAveragePool") {
    TS_RETURN_IF_ERROR(require_4d(0));
    TS_ASSIGN_OR_RETURN(Tensor x, dev(0));
    TS_ASSIGN_OR_RETURN(Tensor nhwc, to_nhwc(x));
    TS_ASSIGN_OR_RETURN(Tensor y, global_avg_pool2d(nhwc));
    return one(to_nchw(y, y.shape()[0], 1, 1, y.shape()[3]));
  }
  if (op == "Softmax") return softmax_op();
  if (op == "Concat") {
    std::vector<Tensor> xs;
    for (size_t i = 0; i < in_.size(); ++i) {
      TS_ASSIGN_OR_RETURN(Tensor t, dev(i));
      xs.push_back(t);
    }
    return one(concat(xs, static_cast<int>(a_.i("axis", 0))));
  }
  if (op == "Reshape") {
    if (a_.i("allowzero", 0)) return unimplemented_error("allowzero");
    TS_ASSIGN_OR_RETURN(Tensor x, dev(0));
    TS_ASSIGN_OR_RETURN(auto shape, ints(1));
    int64_t known = 1, infer = -1;
    for (size_t i = 0; i < shape.size(); ++i) {
      if (shape[i] == 0) shape[i] = in_[0].dims[i];
      if (shape[i] == -1) infer = static_cast<int64_t>(i);
      else known *= shape[i];
    }
    if (infer >= 0) shape[static_cast<size_t>(infer)] = static_cast<int64_t>(x.shape().volume()) / known;
    return one(reshape(x, to_shape(shape)));
  }
  if (op == "Flatten") {
    TS_ASSIGN_OR_RETURN(Tensor x, dev(0));
    int axis = static_cast<int>(a_.i("axis", 1));
    if (axis < 0) axis += rank(0);
    uint32_t outer = 1, inner = 1;
    for (int d = 0; d < rank(0); ++d) (d < axis ? outer : inner) *= static_cast<uint32_t>(in_[0].dims[static_cast<size_t>(d)]);
    return one(reshape(x, Shape{outer, inner}));
  }
  if (op == "Squeeze" || op == "Unsqueeze") {
    TS_ASSIGN_OR_RETURN(Tensor x, dev(0));
    std::vector<int64_t> axes = a_.ints("axes");
    if (opset_ >= 13 && has(1)) {
      TS_ASSIGN_OR_RETURN(axes, ints(1));
    }
    std::vector<int64_t> dims = in_[0].dims;
    if (op == "Squeeze") {
      const int r = rank(0);
      std::vector<bool> drop(static_cast<size_t>(r), axes.empty());
      for (int64_t a : axes) drop[static_cast<size_t>(a < 0 ? a + r : a)] = true;
      std::vector<int64_t> kept;
      for (int d = 0; d < r; ++d)
        if (!drop[static_cast<size_t>(d)] || dims[static_cast<size_t>(d)] != 1) kept.push_back(dims[static_cast<size_t>(d)]);
      dims = kept;
    } else {
      const int r = rank(0) + static_cast<int>(axes.size());
      std::vector<int64_t> norm;
      for (int64_t a : axes) norm.push_back(a < 0 ? a + r : a);
      std::sort(norm.begin(), norm.end());
      for (int64_t a : norm) dims.insert(dims.begin() + a, 1);
    }
    return one(reshape(x, to_shape(dims)));
  }
  if (op == "Transpose") {
    TS_ASSIGN_OR_RETURN(Tensor x, dev(0));
    std::vector<int64_t> perm = a_.ints("perm");
    std::vector<int> p(static_cast<size_t>(rank(0)));
    for (size_t i = 0; i < p.size(); ++i) p[i] = perm.empty() ? rank(0) - 1 - static_cast<int>(i) : static_cast<int>(perm[i]);
    return one(permute(x, p));
  }
  if (op == "Pad") return pad_op();
  if (op == "Slice") {
    if (opset_ < 10) return unimplemented_error("Slice-1 attributes");
    return slice_op();
  }
  if (op == "BatchNormalization") {
    if (node_.output_size() > 1) return unimplemented_error("training-mode outputs");
    TS_RETURN_IF_ERROR(require_4d(0));
    TS_ASSIGN_OR_RETURN(Tensor x, dev(0));
    TS_ASSIGN_OR_RETURN(Tensor nhwc, to_nhwc(x));
    NormParams p{.epsilon = a_.f("epsilon", 1e-5f)};
    TS_ASSIGN_OR_RETURN(p.weight, dev(1));
    TS_ASSIGN_OR_RETURN(p.bias, dev(2));
    TS_ASSIGN_OR_RETURN(Tensor mean, dev(3));
    TS_ASSIGN_OR_RETURN(Tensor var, dev(4));
    TS_ASSIGN_OR_RETURN(Tensor y, batch_norm(nhwc, mean, var, p));
    const auto& d = in_[0].dims;
    return one(to_nchw(y, static_cast<uint32_t>(d[0]), static_cast<uint32_t>(d[2]), static_cast<uint32_t>(d[3]),
                       static_cast<uint32_t>(d[1])));
  }
  if (op == "LayerNormalization") {
    if (node_.output_size() > 1) return unimplemented_error("Mean / InvStdDev outputs");
    TS_ASSIGN_OR_RETURN(Tensor x, dev(0));
    int axis = static_cast<int>(a_.i("axis", -1));
    if (axis < 0) axis += rank(0);
    // Normalising dims [axis, rank) = the last dim of a 2D view.
    uint32_t outer = 1, inner = 1;
    for (int d = 0; d < rank(0); ++d) (d < axis ? outer : inner) *= static_cast<uint32_t>(in_[0].dims[static_cast<size_t>(d)]);
    TS_ASSIGN_OR_RETURN(Tensor flat, reshape(x, Shape{outer, inner}));
    NormParams p{.epsilon = a_.f("epsilon", 1e-5f)};
    TS_ASSIGN_OR_RETURN(Tensor w, dev(1));
    TS_ASSIGN_OR_RETURN(p.weight, reshape(w, Shape{inner}));
    if (has(2)) {
      TS_ASSIGN_OR_RETURN(Tensor b, dev(2));
      TS_ASSIGN_OR_RETURN(p.bias, reshape(b, Shape{inner}));
    }
    TS_ASSIGN_OR_RETURN(Tensor y, layer_norm(flat, p));
    return one(reshape(y, x.shape()));
  }
  if (op == "Resize" || op == "Upsample") return resize();
  return unimplemented_error("op {} is not mapped", op);
}

struct Outcome {
  std::string name, status, detail;
};

// Compares within rtol 1e-3, atol 1e-5 (see the file comment).
std::string compare(const Tensor& got, const Value& want) {
  auto g = got.to_vector().value(), w = want.tensor->to_vector().value();
  if (g.size() != w.size()) return fmt::format("{} values, expected {}", g.size(), w.size());
  const Shape ws = to_shape(want.dims);
  if (got.shape() != ws && !want.dims.empty())
    return fmt::format("shape {}, expected {}", got.shape().to_string(), ws.to_string());
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i]) && std::isnan(g[i])) continue;
    if (std::isinf(w[i]) && g[i] == w[i]) continue;
    if (!(std::fabs(double{g[i]} - w[i]) <= 1e-5 + 1e-3 * std::fabs(w[i])))
      return fmt::format("element {}: {} vs {}", i, g[i], w[i]);
  }
  return "";
}

Outcome run_test(Device& dev, const fs::path& dir) {
  Outcome o{dir.filename().string(), "skip", ""};
  auto model = read_proto<onnx::ModelProto>(dir / "model.onnx");
  if (!model.ok()) return {o.name, "fail", model.status().message()};
  const auto& graph = model->graph();
  if (graph.node_size() != 1) {
    o.detail = fmt::format("{} nodes (function-expanded or multi-node graph)", graph.node_size());
    return o;
  }
  int opset = 1;
  for (const auto& imp : model->opset_import())
    if (imp.domain().empty() || imp.domain() == "ai.onnx") opset = static_cast<int>(imp.version());
  const onnx::NodeProto& node = graph.node(0);
  if (!node.domain().empty() && node.domain() != "ai.onnx") {
    o.detail = "domain " + node.domain();
    return o;
  }
  int sets = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!entry.is_directory() || entry.path().filename().string().rfind("test_data_set_", 0) != 0) continue;
    std::vector<Value> inputs;
    // Inputs in graph order: input_<i>.pb is graph input i; empty node
    // inputs (skipped optionals) stay empty.
    std::map<std::string, Value> by_name;
    for (int i = 0; i < graph.input_size(); ++i) {
      auto t = read_proto<onnx::TensorProto>(entry.path() / fmt::format("input_{}.pb", i));
      if (!t.ok()) return {o.name, "fail", t.status().message()};
      auto v = read_tensor(*t);
      if (!v.ok()) return {o.name, "skip", v.status().message()};
      by_name[graph.input(i).name()] = *v;
    }
    for (const auto& name : node.input()) inputs.push_back(name.empty() ? Value{} : by_name[name]);
    Runner runner(dev, node, inputs, opset);
    auto outs = runner.run();
    if (!outs.ok()) {
      if (outs.status().code() == StatusCode::kUnimplemented) return {o.name, "skip", outs.status().message()};
      return {o.name, "fail", outs.status().to_string()};
    }
    for (size_t i = 0; i < outs->size(); ++i) {
      auto t = read_proto<onnx::TensorProto>(entry.path() / fmt::format("output_{}.pb", i));
      if (!t.ok()) return {o.name, "fail", t.status().message()};
      auto want = read_tensor(*t);
      if (!want.ok()) return {o.name, "skip", "output: " + want.status().message()};
      if (std::string err = compare((*outs)[i], *want); !err.empty()) return {o.name, "fail", err};
    }
    ++sets;
  }
  return {o.name, "pass", fmt::format("{} data set(s)", sets)};
}

TEST(OnnxNodeTests, MappedOpsPass) {
  if (!fs::exists(kNodeDir)) GTEST_SKIP() << kNodeDir << " is missing: install libonnx-testdata (scripts/setup.sh)";
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(kNodeDir)) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  std::map<std::string, int> counts;
  std::vector<Outcome> failures;
  for (const auto& d : dirs) {
    Outcome o = run_test(*dev, d);
    ++counts[o.status];
    std::printf("%-60s %-4s %s\n", o.name.c_str(), o.status.c_str(), o.detail.c_str());
    if (o.status == "fail") failures.push_back(o);
  }
  std::printf("\nONNX node tests: %d pass, %d fail, %d skip (not mapped) of %zu\n", counts["pass"], counts["fail"],
              counts["skip"], dirs.size());
  for (const auto& f : failures) ADD_FAILURE() << f.name << ": " << f.detail;
  EXPECT_GT(counts["pass"], 100);
}

}  // namespace
}  // namespace tessera
