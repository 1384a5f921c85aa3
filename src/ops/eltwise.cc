#include "tessera/ops/eltwise.h"

#include <algorithm>
#include <initializer_list>

#include "cpu/eltwise_kernels.h"
#include "op_common.h"

namespace tessera {

namespace {

using cpu::EltwiseArgs;
using cpu::EltwiseOp;

Status check_float_input(const Tensor& t, std::string_view op, std::string_view name) {
  TS_RETURN_IF_ERROR(ops::require_device_tensor(t, op, name));
  if (!is_floating(t.dtype()))
    return invalid_argument_error(
        "{}: expected {} to have a floating dtype (float32, bfloat16, float16, bfloat8_b, bfloat4_b, bfloat2_b), "
        "found {}",
        op, name, data_type_name(t.dtype()));
  return ok_status();
}

std::string activation_suffix(const UnaryWithParam& act) {
  if (act.is_identity()) return "";
  return "+" + activation_name(act);
}

// The smallest chunk worth a core of its own (see op_common.h).
uint64_t min_chunk_bytes(const UnaryWithParam& act, std::initializer_list<DataType> types) {
  const bool bf16 = std::find(types.begin(), types.end(), DataType::BFLOAT16) != types.end();
  return bf16 || is_transcendental(act.op) ? ops::kMinChunkBytesCompute : ops::kMinChunkBytesStreaming;
}

// Same-shape element-wise op over pages.
// `b_scalar`: b is a single element applied to every element of a.
StatusOr<Tensor> run_eltwise(EltwiseOp op, std::string_view name, const Tensor& a, const Tensor* b, DataType out_type,
                             BinaryOpType bop, const UnaryWithParam& act, uint8_t cq_id, bool b_scalar = false) {
  Device& device = *a.device();
  TensorSpec out_spec = a.spec();
  out_spec.dtype = out_type;
  TS_RETURN_IF_ERROR(out_spec.validate().annotate(name));
  TS_ASSIGN_OR_RETURN(Tensor out, allocate_tensor_on_device(out_spec, device));

  EltwiseArgs args{};
  TS_ASSIGN_OR_RETURN(args.a, make_access(a));
  if (b) {
    TS_ASSIGN_OR_RETURN(args.b, make_access(*b));
  }
  TS_ASSIGN_OR_RETURN(args.out, make_access(out));
  args.a_type = a.dtype();
  args.b_type = b ? b->dtype() : a.dtype();
  args.out_type = out_type;
  args.op = op;
  args.binary_op = bop;
  args.activation = act;
  args.math = cpu::select_float_math();
  args.num_pages = args.a.num_pages();
  args.page_elements = static_cast<uint32_t>(args.a.page_units() * a.spec().unit_elements());
  args.b_scalar = b_scalar;
  args.flat = args.a.is_packed() && args.out.is_packed() && (!b || b_scalar || args.b.is_packed());
  if (args.flat) {
    constexpr uint32_t kFlatPage = 64 * kTileElements;  // 256 KiB of float32
    args.total_elements = args.a.page_units() * args.a.num_pages() * a.spec().unit_elements();
    args.page_elements = kFlatPage;
    args.num_pages = static_cast<uint32_t>((args.total_elements + kFlatPage - 1) / kFlatPage);
  }

  // A unary's name is its activation's: the key (and the profile) names it once.
  const std::string what = op == EltwiseOp::kUnary ? activation_name(act) : std::string(name) + activation_suffix(act);
  std::string key =
      fmt::format("{}:{}{}->{}:{}{}{}", what, a.spec().to_string(), b ? "," + b->spec().to_string() : std::string(),
                  short_dtype_name(out_type), args.math.isa, args.flat ? ":flat" : "", b_scalar ? ":scalar" : "");
  auto compile = [&]() -> StatusOr<Program> {
    Program p;
    p.kernel = cpu::select_eltwise_kernel(args, name, &p.kernel_name);
    p.num_tasks = args.num_pages;
    p.grain =
        ops::default_grain(device, args.num_pages, a.spec().storage_bytes() * (b ? 2 : 1) + out_spec.storage_bytes(),
                           min_chunk_bytes(args.activation, {args.a_type, args.b_type, out_type}));
    return p;
  };
  TS_RETURN_IF_ERROR(ops::launch(device, cq_id, key, compile, args));
  return out;
}

StatusOr<Tensor> run_broadcast(std::string_view name, const Tensor& a, const Tensor& b, const Shape& shape,
                               DataType out_type, BinaryOpType bop, const EltwiseParams& p) {
  if (a.layout() != Layout::ROW_MAJOR || b.layout() != Layout::ROW_MAJOR)
    return unimplemented_error("{}: broadcasting needs ROW_MAJOR operands, found {} and {}; untilize them", name,
                               a.spec().to_string(), b.spec().to_string());
  if (shape.rank() - 1 > cpu::BroadcastArgs::kMaxLead)
    return invalid_argument_error("{}: broadcasting supports rank <= {}, found {}", name,
                                  cpu::BroadcastArgs::kMaxLead + 1, shape.rank());
  MemoryConfig mc = a.shape() == shape ? a.memory_config()
                    : b.shape() == shape
                        ? b.memory_config()
                        : MemoryConfig{TensorMemoryLayout::INTERLEAVED, a.memory_config().buffer_type, std::nullopt};
  if (p.memory_config) {
    if (p.memory_config->is_sharded())
      return unimplemented_error("{}: a broadcast output must be interleaved, found {}", name,
                                 p.memory_config->to_string());
    mc = *p.memory_config;
  }
  Device& device = *a.device();
  TensorSpec out_spec{shape, out_type, Layout::ROW_MAJOR, mc};
  TS_RETURN_IF_ERROR(out_spec.validate().annotate(name));
  TS_ASSIGN_OR_RETURN(Tensor out, allocate_tensor_on_device(out_spec, device));
  cpu::BroadcastArgs args{};
  TS_ASSIGN_OR_RETURN(args.a, make_access(a));
  TS_ASSIGN_OR_RETURN(args.b, make_access(b));
  TS_ASSIGN_OR_RETURN(args.out, make_access(out));
  args.a_type = a.dtype();
  args.b_type = b.dtype();
  args.out_type = out_type;
  args.binary_op = bop;
  args.activation = p.activation.value_or(UnaryWithParam{});
  args.math = cpu::select_float_math();
  args.num_lead = static_cast<uint32_t>(shape.rank() - 1);
  args.cols = shape[-1];
  // Row strides of each operand over the output's leading dims.
  auto strides = [&](const Shape& s, uint32_t* stride) {
    uint32_t acc = 1;
    for (int j = static_cast<int>(args.num_lead) - 1; j >= 0; --j) {
      const int k = j - (shape.rank() - s.rank());  // the operand's dim aligned with output dim j
      const uint32_t dim = k >= 0 ? s[k] : 1;
      stride[j] = dim == 1 ? 0 : acc;
      acc *= dim;
    }
  };
  for (uint32_t j = 0; j < args.num_lead; ++j) args.lead[j] = shape[static_cast<int>(j)];
  strides(a.shape(), args.a_stride);
  strides(b.shape(), args.b_stride);
  args.a_col_broadcast = a.shape()[-1] == 1 && args.cols != 1;
  args.b_col_broadcast = b.shape()[-1] == 1 && args.cols != 1;
  // Rows straight through FloatMath::fused where it can (PP-OCR's
  // per-channel scales, 96 and 24 channels, went through tile-sized float
  // buffers per row at 13-23 GB/s).
  auto float_rows = [](DataType t) { return t == DataType::FLOAT32 || t == DataType::BFLOAT16; };
  if (args.math.fused && !args.a_col_broadcast && !args.b_col_broadcast && float_rows(args.a_type) &&
      float_rows(args.b_type) && float_rows(args.out_type)) {
    const uint64_t sa = args.a.uniform_row_stride(), sb = args.b.uniform_row_stride(),
                   so = args.out.uniform_row_stride();
    if (sa && sb && so) args.a_row_stride = sa, args.b_row_stride = sb, args.out_row_stride = so;
  }
  const uint32_t rows = static_cast<uint32_t>(shape.volume() / args.cols);
  std::string key = fmt::format("{}{}:{},{}->{}:{}", name, activation_suffix(args.activation), a.spec().to_string(),
                                b.spec().to_string(), out_spec.to_string(), args.math.isa);
  auto compile = [&]() -> StatusOr<Program> {
    Program prog;
    prog.kernel = cpu::broadcast_kernel;
    prog.kernel_name = fmt::format("any_{}_broadcast__{}{}", name, args.math.isa, args.out_row_stride ? "_rows" : "");
    prog.num_tasks = rows;
    prog.grain = ops::default_grain(device, rows, out_spec.storage_bytes() * 3,
                                    min_chunk_bytes(args.activation, {args.a_type, args.b_type, out_spec.dtype}));
    return prog;
  };
  TS_RETURN_IF_ERROR(ops::launch(device, p.cq_id, key, compile, args));
  return out;
}

}  // namespace

std::string_view binary_op_name(BinaryOpType op) {
  constexpr std::string_view names[] = {"add", "sub", "mul", "div", "max", "min", "gt", "ge", "lt", "le", "eq"};
  return names[static_cast<int>(op)];
}

StatusOr<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
  const int rank = std::max(a.rank(), b.rank());
  std::array<uint32_t, Shape::kMaxRank> dims{};
  for (int i = 1; i <= rank; ++i) {
    const uint32_t da = i <= a.rank() ? a[-i] : 1, db = i <= b.rank() ? b[-i] : 1;
    if (da != db && da != 1 && db != 1)
      return invalid_argument_error("shapes {} and {} do not broadcast: dim {} from the end is {} and {}",
                                    a.to_string(), b.to_string(), i, da, db);
    dims[static_cast<size_t>(rank - i)] = da == 1 ? db : da;
  }
  return Shape(std::span<const uint32_t>(dims.data(), static_cast<size_t>(rank)));
}

StatusOr<Tensor> unary(const Tensor& input, const UnaryWithParam& act, const EltwiseParams& p) {
  const std::string name(unary_op_name(act.op));
  TS_RETURN_IF_ERROR(check_float_input(input, name, "input"));
  const DataType out = p.dtype.value_or(input.dtype());
  if (!is_floating(out))
    return invalid_argument_error("{}: expected a floating output dtype, found {}", name, data_type_name(out));
  return run_eltwise(EltwiseOp::kUnary, name, input, nullptr, out, BinaryOpType::ADD, act, p.cq_id);
}

StatusOr<Tensor> relu(const Tensor& input, const EltwiseParams& p) { return unary(input, {UnaryOpType::RELU}, p); }

StatusOr<Tensor> binary(const Tensor& a, const Tensor& b, BinaryOpType op, const EltwiseParams& p) {
  const std::string name(binary_op_name(op));
  TS_RETURN_IF_ERROR(check_float_input(a, name, "a"));
  TS_RETURN_IF_ERROR(check_float_input(b, name, "b"));
  if (b.device() != a.device()) return invalid_argument_error("{}: a and b are on different devices", name);
  const DataType out = p.dtype.value_or(a.dtype());
  if (!is_floating(out))
    return invalid_argument_error("{}: expected a floating output dtype, found {}", name, data_type_name(out));
  if (a.shape() == b.shape() && a.layout() == b.layout() && a.memory_config() == b.memory_config() &&
      (!p.memory_config || *p.memory_config == a.memory_config()))
    return run_eltwise(EltwiseOp::kBinary, name, a, &b, out, op, p.activation.value_or(UnaryWithParam{}), p.cq_id);
  if (a.shape() == b.shape() && a.layout() == Layout::TILE)
    return invalid_argument_error(
        "{}: TILE operands must have the same shape, layout and memory config, found {} and {}", name,
        a.spec().to_string(), b.spec().to_string());
  StatusOr<Shape> shape = broadcast_shapes(a.shape(), b.shape());
  if (!shape.ok()) return shape.status().annotate(name);
  // One operand a single row-major element (a scalar scale or shift): the
  // same-shape kernel over the other's pages, not a broadcast row by row.
  auto scalar = [](const Tensor& t) {
    return t.shape().volume() == 1 && t.layout() == Layout::ROW_MAJOR &&
           (t.dtype() == DataType::FLOAT32 || t.dtype() == DataType::BFLOAT16);
  };
  // Operands swapped: the op itself, or its mirror (a > b is b < a).
  const BinaryOpType swapped = op == BinaryOpType::GREATER         ? BinaryOpType::LESS
                               : op == BinaryOpType::LESS          ? BinaryOpType::GREATER
                               : op == BinaryOpType::GREATER_EQUAL ? BinaryOpType::LESS_EQUAL
                               : op == BinaryOpType::LESS_EQUAL    ? BinaryOpType::GREATER_EQUAL
                                                                   : op;
  const bool commutes = op != BinaryOpType::SUB && op != BinaryOpType::DIV;
  const Tensor* full = scalar(b) && a.shape() == *shape               ? &a
                       : commutes && scalar(a) && b.shape() == *shape ? &b
                                                                      : nullptr;
  if (full && full->layout() == Layout::ROW_MAJOR && (!p.memory_config || *p.memory_config == full->memory_config()))
    return run_eltwise(EltwiseOp::kBinary, name, *full, full == &a ? &b : &a, out, full == &a ? op : swapped,
                       p.activation.value_or(UnaryWithParam{}), p.cq_id, /*b_scalar=*/true);
  return run_broadcast(name, a, b, *shape, out, op, p);
}

StatusOr<Tensor> add(const Tensor& a, const Tensor& b, const EltwiseParams& p) {
  return binary(a, b, BinaryOpType::ADD, p);
}
StatusOr<Tensor> sub(const Tensor& a, const Tensor& b, const EltwiseParams& p) {
  return binary(a, b, BinaryOpType::SUB, p);
}
StatusOr<Tensor> mul(const Tensor& a, const Tensor& b, const EltwiseParams& p) {
  return binary(a, b, BinaryOpType::MUL, p);
}
StatusOr<Tensor> div(const Tensor& a, const Tensor& b, const EltwiseParams& p) {
  return binary(a, b, BinaryOpType::DIV, p);
}

StatusOr<Tensor> typecast(const Tensor& input, DataType dtype, uint8_t cq_id) {
  TS_RETURN_IF_ERROR(ops::require_device_tensor(input, "typecast"));
  return run_eltwise(EltwiseOp::kTypecast, "typecast", input, nullptr, dtype, BinaryOpType::ADD, {}, cq_id);
}

}  // namespace tessera
