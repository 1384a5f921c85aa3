#include "tessera/ops/select.h"

#include <array>

#include "cpu/rows.h"
#include "op_common.h"
#include "tessera/ops/eltwise.h"

namespace tessera {

namespace {

constexpr int kMaxRank = Shape::kMaxRank;
constexpr uint32_t kChunk = kTileElements;

// One operand as the output's rows read it: its row for each output row
// (the output's leading coordinates times `row_stride`, 0 along the dims it
// broadcasts) and whether it repeats one value along the last dim.
struct Operand {
  TensorAccess access;
  DataType dtype;
  std::array<uint64_t, kMaxRank> row_stride{};
  bool one_col = false;
};

struct WhereArgs {
  std::array<Operand, 3> in;  // cond, a, b
  TensorAccess out;
  DataType out_dtype;
  int lead = 0;  // the output's leading dims (its rank - 1)
  std::array<uint32_t, kMaxRank> dims{};
  uint32_t cols = 0;
};

Operand operand(const Tensor& t, const Shape& out) {
  Operand o{.dtype = t.dtype()};
  const int r = out.rank(), tr = t.shape().rank();
  o.one_col = t.shape()[-1] == 1 && out[-1] != 1;
  uint64_t stride = 1;  // in the operand's rows
  for (int d = r - 2; d >= 0; --d) {
    const int td = d - (r - tr);  // the operand's dim aligned with output dim d
    if (td < 0) break;
    const uint32_t n = t.shape()[td];
    o.row_stride[static_cast<size_t>(d)] = n == 1 ? 0 : stride;
    stride *= n;
  }
  return o;
}

// Operand `o`'s values for columns [c0, c0 + n) of its row `row`.
void read(const Operand& o, uint64_t row, uint32_t c0, uint32_t n, float* dst) {
  if (!o.one_col) return cpu::read_row(o.access, o.dtype, static_cast<uint32_t>(row), c0, n, dst);
  cpu::read_row(o.access, o.dtype, static_cast<uint32_t>(row), 0, 1, dst);
  std::fill(dst + 1, dst + n, dst[0]);
}

Status kernel(const void* raw, uint32_t begin, uint32_t end) {
  const auto& a = *static_cast<const WhereArgs*>(raw);
  alignas(64) float c[kChunk], x[kChunk], y[kChunk];
  for (uint32_t r = begin; r < end; ++r) {
    std::array<uint64_t, 3> rows{};
    for (uint64_t rest = r, d = static_cast<uint64_t>(a.lead); d-- > 0;) {
      const uint64_t coord = rest % a.dims[d];
      rest /= a.dims[d];
      for (size_t k = 0; k < 3; ++k) rows[k] += coord * a.in[k].row_stride[d];
    }
    for (uint32_t c0 = 0; c0 < a.cols; c0 += kChunk) {
      const uint32_t n = std::min(kChunk, a.cols - c0);
      read(a.in[0], rows[0], c0, n, c);
      read(a.in[1], rows[1], c0, n, x);
      read(a.in[2], rows[2], c0, n, y);
      for (uint32_t i = 0; i < n; ++i) y[i] = c[i] != 0.0f ? x[i] : y[i];  // (NaN != 0: true)
      cpu::write_row(a.out, a.out_dtype, r, c0, n, y);
    }
  }
  return ok_status();
}

}  // namespace

StatusOr<Tensor> where(const Tensor& cond, const Tensor& a, const Tensor& b, const WhereParams& p) {
  const std::array<Tensor, 3> ins = {cond, a, b};
  for (const Tensor& t : ins) {
    TS_RETURN_IF_ERROR(ops::require_device_tensor(t, "where"));
    if (t.device() != cond.device()) return invalid_argument_error("where: the operands are on different devices");
    if (t.layout() != Layout::ROW_MAJOR || (t.dtype() != DataType::FLOAT32 && t.dtype() != DataType::BFLOAT16))
      return unimplemented_error("where: expected float32 or bfloat16 ROW_MAJOR operands, found {}",
                                 t.spec().to_string());
  }
  if (p.dtype != DataType::FLOAT32 && p.dtype != DataType::BFLOAT16)
    return unimplemented_error("where: expected a float32 or bfloat16 output, found {}", data_type_name(p.dtype));
  TS_ASSIGN_OR_RETURN(Shape ab, broadcast_shapes(a.shape(), b.shape()));
  TS_ASSIGN_OR_RETURN(Shape shape, broadcast_shapes(cond.shape(), ab));
  Device& device = *cond.device();
  TS_ASSIGN_OR_RETURN(
      Tensor out, allocate_tensor_on_device(TensorSpec{shape, p.dtype, Layout::ROW_MAJOR, DRAM_MEMORY_CONFIG}, device));
  if (shape.volume() > 0) {
    WhereArgs args{.out_dtype = p.dtype, .lead = shape.rank() - 1, .cols = shape[-1]};
    for (int d = 0; d < shape.rank(); ++d) args.dims[static_cast<size_t>(d)] = shape[d];
    for (size_t k = 0; k < 3; ++k) {
      args.in[k] = operand(ins[k], shape);
      TS_ASSIGN_OR_RETURN(args.in[k].access, make_access(ins[k]));
    }
    TS_ASSIGN_OR_RETURN(args.out, make_access(out));
    const auto rows = static_cast<uint32_t>(shape.volume() / shape[-1]);
    const std::string key = fmt::format("where:{}:{}:{}:{}", ins[0].spec().to_string(), ins[1].spec().to_string(),
                                        ins[2].spec().to_string(), data_type_name(p.dtype));
    auto compile = [&]() -> StatusOr<Program> {
      Program prog;
      prog.kernel = kernel;
      prog.kernel_name = fmt::format("{}_where__rows", short_dtype_name(p.dtype));
      prog.num_tasks = rows;
      prog.grain = ops::default_grain(device, rows, out.spec().storage_bytes(), ops::kMinChunkBytesStreaming);
      return prog;
    };
    TS_RETURN_IF_ERROR(ops::launch(device, p.cq_id, key, compile, args));
  }
  return out;
}

}  // namespace tessera
