#include "tessera/ops/concat_affine.h"

#include <algorithm>
#include <cmath>

#include "cpu/float_math.h"
#include "op_common.h"
#include "tessera/numerics/bfloat16.h"
#include "tessera/ops/data_movement.h"

namespace tessera {

namespace {

// Where each row of a ROW_MAJOR tensor starts: row r at base + (r % banks) *
// bank_stride + (r / banks) * row_stride (one bank: evenly spaced rows).
struct RowAddress {
  std::byte* base = nullptr;
  uint64_t bank_stride = 0, row_stride = 0;
  uint32_t banks = 1;
  std::byte* row(uint32_t r) const { return base + (r % banks) * bank_stride + uint64_t{r / banks} * row_stride; }
};

std::optional<RowAddress> row_address(const TensorAccess& a) {
  if (a.kind == TensorAccess::Kind::kInterleavedRows)
    return RowAddress{a.base, a.bank_stride, a.page_stride, std::max(a.num_banks, 1u)};
  if (const uint64_t stride = a.uniform_row_stride()) return RowAddress{a.base, 0, stride, 1};
  return std::nullopt;  // several shards, tiles
}

// Sources one launch reads; more are concatenated in groups first.
constexpr uint32_t kMaxSources = 64;

struct Source {
  RowAddress rows;
  uint32_t width = 0, col = 0;  // its columns land at [col, col + width) of the output's rows
};

struct ConcatAffineArgs {
  Source src[kMaxSources];
  uint32_t num_src = 0;
  RowAddress out;
  uint32_t out_unit = 4;
  bool in_bf16 = false, out_bf16 = false;
  const float* scale = nullptr;
  const float* shift = nullptr;
  UnaryWithParam act;
  cpu::FloatMath math;
};

// Rows in blocks, each source's part of a block in one call, so that the
// output's rows are whole in cache before the next block starts.
constexpr uint32_t kRowBlock = 16;

void scalar_rows(const ConcatAffineArgs& a, const Source& s, uint32_t r0, uint32_t rows) {
  for (uint32_t r = r0; r < r0 + rows; ++r) {
    const std::byte* in = s.rows.row(r);
    std::byte* o = a.out.row(r) + uint64_t{s.col} * a.out_unit;
    for (uint32_t i = 0; i < s.width; ++i) {
      const float x = a.in_bf16 ? bfloat16_to_float(reinterpret_cast<const uint16_t*>(in)[i])
                                : reinterpret_cast<const float*>(in)[i];
      const auto y = static_cast<float>(apply_activation(a.act, std::fma(x, a.scale[s.col + i], a.shift[s.col + i])));
      if (a.out_bf16)
        reinterpret_cast<uint16_t*>(o)[i] = float_to_bfloat16(y);
      else
        reinterpret_cast<float*>(o)[i] = y;
    }
  }
}

Status concat_affine_kernel(const void* raw, uint32_t begin, uint32_t end) {
  const auto& a = *static_cast<const ConcatAffineArgs*>(raw);
  const bool one_bank =
      a.out.banks == 1 && std::all_of(a.src, a.src + a.num_src, [](const Source& s) { return s.rows.banks == 1; });
  for (uint32_t r0 = begin; r0 < end;) {
    const uint32_t rows = one_bank ? std::min(kRowBlock, end - r0) : 1;
    for (uint32_t k = 0; k < a.num_src; ++k) {
      const Source& s = a.src[k];
      if (!a.math.affine_rows) {
        scalar_rows(a, s, r0, rows);
        continue;
      }
      a.math.affine_rows({s.rows.row(r0), a.in_bf16}, s.rows.row_stride,
                         {a.out.row(r0) + uint64_t{s.col} * a.out_unit, a.out_bf16}, a.out.row_stride, rows, s.width,
                         a.scale + s.col, a.shift + s.col, a.act);
    }
    r0 += rows;
  }
  return ok_status();
}

StatusOr<const float*> packed_floats(const Tensor& t, uint32_t c, std::string_view name) {
  TS_RETURN_IF_ERROR(ops::require_device_tensor(t, "concat_affine", name));
  if (t.dtype() != DataType::FLOAT32 || t.layout() != Layout::ROW_MAJOR || t.shape().volume() != c ||
      t.shape()[-1] != c)
    return invalid_argument_error(
        "concat_affine: expected {} as a ROW_MAJOR float32 tensor of {} values ((C) or "
        "(1, 1, 1, C)), found {}",
        name, c, t.spec().to_string());
  TS_ASSIGN_OR_RETURN(const TensorAccess a, make_access(t));
  uint32_t run = 0;
  const std::byte* p = a.kind == TensorAccess::Kind::kInterleavedTiles ? nullptr : a.unit(0, 0, &run);
  if (!p || run < c)  // (a row-major row is one page; shards may split it)
    return invalid_argument_error("concat_affine: expected {}'s {} values in one row page, found {}", name, c,
                                  t.spec().to_string());
  return reinterpret_cast<const float*>(p);
}

}  // namespace

StatusOr<Tensor> concat_affine(std::span<const Tensor> inputs, const Tensor& scale, const Tensor& shift,
                               const UnaryWithParam& activation, DataType dtype, const ManipulationParams& p) {
  if (inputs.empty()) return invalid_argument_error("concat_affine: expected at least one input");
  if (dtype != DataType::FLOAT32 && dtype != DataType::BFLOAT16)
    return invalid_argument_error("concat_affine: expected a float32 or bfloat16 output, found {}",
                                  data_type_name(dtype));
  const Tensor& first = inputs[0];
  const Shape& s0 = first.shape();
  uint64_t channels = 0;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& t = inputs[k];
    TS_RETURN_IF_ERROR(ops::require_device_tensor(t, "concat_affine"));
    if (t.layout() != Layout::ROW_MAJOR || (t.dtype() != DataType::FLOAT32 && t.dtype() != DataType::BFLOAT16))
      return invalid_argument_error("concat_affine: expected ROW_MAJOR float32 or bfloat16 inputs, found {} (input {})",
                                    t.spec().to_string(), k);
    if (t.dtype() != first.dtype())
      return invalid_argument_error("concat_affine: input {} is {}, expected {} like input 0", k,
                                    data_type_name(t.dtype()), data_type_name(first.dtype()));
    if (t.device() != first.device()) return invalid_argument_error("concat_affine: input {} is on another device", k);
    bool same = t.shape().rank() == s0.rank();
    for (int i = 0; same && i + 1 < s0.rank(); ++i) same = t.shape()[i] == s0[i];
    if (!same)
      return invalid_argument_error(
          "concat_affine: input {} has shape {}, which differs from input 0's {} outside the last dim", k,
          t.shape().to_string(), s0.to_string());
    channels += t.shape()[-1];
  }
  if (channels > UINT32_MAX) return invalid_argument_error("concat_affine: {} channels", channels);
  const auto c = static_cast<uint32_t>(channels);
  TS_ASSIGN_OR_RETURN(const float* sc, packed_floats(scale, c, "scale"));
  TS_ASSIGN_OR_RETURN(const float* sh, packed_floats(shift, c, "shift"));
  if (inputs.size() > kMaxSources) {
    // In steps: each group of kMaxSources concatenated plainly into DRAM,
    // then the parts with the affine.
    std::vector<Tensor> parts;
    for (size_t k = 0; k < inputs.size(); k += kMaxSources) {
      const auto group = inputs.subspan(k, std::min<size_t>(kMaxSources, inputs.size() - k));
      TS_ASSIGN_OR_RETURN(Tensor part, concat(group, -1, {.memory_config = DRAM_MEMORY_CONFIG, .cq_id = p.cq_id}));
      parts.push_back(std::move(part));
    }
    return concat_affine(parts, scale, shift, activation, dtype, p);
  }

  Device& device = *first.device();
  auto args = std::make_unique<ConcatAffineArgs>();
  std::string key = fmt::format("concat_affine:{}:{}:", unary_op_name(activation.op), short_dtype_name(dtype));
  // Inputs moved to DRAM, alive until the launch is enqueued: a buffer freed
  // earlier could hold the next input's copy before this launch reads it.
  std::vector<Tensor> moved;
  for (uint32_t k = 0, col = 0; k < inputs.size(); ++k) {
    Tensor t = inputs[k];
    TS_ASSIGN_OR_RETURN(TensorAccess a, make_access(t));
    std::optional<RowAddress> rows = row_address(a);
    if (!rows) {  // (shards of rows: interleaved first)
      TS_ASSIGN_OR_RETURN(t, to_memory_config(t, DRAM_MEMORY_CONFIG, p.cq_id));
      moved.push_back(t);
      TS_ASSIGN_OR_RETURN(a, make_access(t));
      rows = row_address(a);
      if (!rows) return internal_error("concat_affine: no row addresses for {}", t.spec().to_string());
    }
    args->src[k] = {*rows, t.shape()[-1], col};
    col += t.shape()[-1];
    key += t.spec().to_string() + ",";
  }
  args->num_src = static_cast<uint32_t>(inputs.size());
  std::array<uint32_t, Shape::kMaxRank> dims{};
  for (int i = 0; i < s0.rank(); ++i) dims[static_cast<size_t>(i)] = i + 1 == s0.rank() ? c : s0[i];
  const Shape out_shape(std::span<const uint32_t>(dims.data(), static_cast<size_t>(s0.rank())));
  TensorSpec out_spec{
      out_shape, dtype, Layout::ROW_MAJOR,
      MemoryConfig{TensorMemoryLayout::INTERLEAVED,
                   p.memory_config ? p.memory_config->buffer_type : first.memory_config().buffer_type, std::nullopt}};
  TS_RETURN_IF_ERROR(out_spec.validate_for_device(device.descriptor()).annotate("concat_affine"));
  TS_ASSIGN_OR_RETURN(Tensor out, allocate_tensor_on_device(out_spec, device));
  TS_ASSIGN_OR_RETURN(const TensorAccess oa, make_access(out));
  const std::optional<RowAddress> orows = row_address(oa);
  if (!orows) return internal_error("concat_affine: no row addresses for {}", out_spec.to_string());
  args->out = *orows;
  args->out_unit = dtype == DataType::BFLOAT16 ? 2 : 4;
  args->in_bf16 = first.dtype() == DataType::BFLOAT16;
  args->out_bf16 = dtype == DataType::BFLOAT16;
  args->scale = sc, args->shift = sh;
  args->act = activation;
  args->math = cpu::select_float_math();
  key += fmt::format("->{}:{}:{}:{}:{}:{}", out_spec.to_string(), args->math.isa, activation.param, activation.param2,
                     activation.scale, activation.shift);
  const auto num_rows = static_cast<uint32_t>(out_shape.volume() / c);
  auto compile = [&]() -> StatusOr<Program> {
    Program prog;
    prog.kernel = concat_affine_kernel;
    prog.kernel_name = fmt::format("{}_concat_affine__{}", short_dtype_name(first.dtype()), args->math.isa);
    prog.num_tasks = num_rows;
    prog.grain = ops::default_grain(device, num_rows, out_spec.storage_bytes() * 2, ops::kMinChunkBytesStreaming);
    return prog;
  };
  TS_RETURN_IF_ERROR(ops::launch(device, p.cq_id, key, compile, *args));
  return out;
}

}  // namespace tessera
