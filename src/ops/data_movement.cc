#include "tessera/ops/data_movement.h"

#include <algorithm>
#include <cstring>

#include "onednn_util.h"
#include "op_common.h"
#include "tessera/base/aligned.h"
#include "tessera/numerics/convert.h"
#include "tessera/numerics/tilize.h"

namespace tessera {

namespace {

// Rows of a ROW_MAJOR tensor against the tile rows of its TILE twin: every
// 2D slice of h rows is padded to hp = align32(h).
struct TileGeometry {
  TensorAccess rm, tiled;
  DataType rm_type, tile_type;
  uint32_t h, hp_tiles, width, tiles_w;
};

TileGeometry geometry(const Tensor& rm, const Tensor& tiled) {
  TileGeometry g{};
  const Shape& s = rm.shape();
  g.h = s.rank() >= 2 ? s[-2] : 1;
  g.hp_tiles = static_cast<uint32_t>(div_up(g.h, kTileHeight));
  g.width = s[-1];
  g.tiles_w = static_cast<uint32_t>(div_up(g.width, kTileWidth));
  g.rm_type = rm.dtype();
  g.tile_type = tiled.dtype();
  return g;
}

// Row r of the ROW_MAJOR side, columns [c0, c0 + n), copied to/from `buf`.
void gather_row(const TensorAccess& a, uint32_t r, uint32_t c0, uint32_t n, std::byte* buf) {
  for (uint32_t c = c0; c < c0 + n;) {
    uint32_t run = 0;
    const std::byte* p = a.unit(r, c, &run);
    run = std::min(run, c0 + n - c);
    std::memcpy(buf + size_t{c - c0} * a.unit_bytes, p, size_t{run} * a.unit_bytes);
    c += run;
  }
}
void scatter_row(const TensorAccess& a, uint32_t r, uint32_t c0, uint32_t n, const std::byte* buf) {
  for (uint32_t c = c0; c < c0 + n;) {
    uint32_t run = 0;
    std::byte* p = a.unit(r, c, &run);
    run = std::min(run, c0 + n - c);
    std::memcpy(p, buf + size_t{c - c0} * a.unit_bytes, size_t{run} * a.unit_bytes);
    c += run;
  }
}

Status tilize_kernel(const void* args, uint32_t begin, uint32_t end) {
  const auto& g = *static_cast<const TileGeometry*>(args);
  const uint32_t es = element_size(g.rm_type);
  alignas(64) std::byte rows_buf[32 * 32 * 4];
  alignas(64) std::byte tile[kTileElements * 4];
  const std::byte* rows[32];
  for (uint32_t t = begin; t < end; ++t) {
    const uint32_t slice = t / g.hp_tiles, lt = t % g.hp_tiles;
    for (uint32_t tc = 0; tc < g.tiles_w; ++tc) {
      const uint32_t valid = std::min(kTileWidth, g.width - tc * kTileWidth);
      for (uint32_t i = 0; i < 32; ++i) {
        const uint32_t lr = lt * 32 + i;
        rows[i] = nullptr;
        if (lr >= g.h) continue;
        gather_row(g.rm, slice * g.h + lr, tc * kTileWidth, valid, rows_buf + i * 32 * es);
        rows[i] = rows_buf + i * 32 * es;
      }
      tilize_tile(rows, valid, tile, es);
      uint32_t run = 0;
      convert_elements(tile, g.rm_type, g.tiled.unit(t, tc, &run), g.tile_type, kTileElements);
    }
  }
  return Status();
}

Status untilize_kernel(const void* args, uint32_t begin, uint32_t end) {
  const auto& g = *static_cast<const TileGeometry*>(args);
  const uint32_t es = element_size(g.rm_type);
  alignas(64) std::byte rows_buf[32 * 32 * 4];
  alignas(64) std::byte tile[kTileElements * 4];
  std::byte* rows[32];
  for (uint32_t i = 0; i < 32; ++i) rows[i] = rows_buf + i * 32 * es;
  for (uint32_t t = begin; t < end; ++t) {
    const uint32_t slice = t / g.hp_tiles, lt = t % g.hp_tiles;
    for (uint32_t tc = 0; tc < g.tiles_w; ++tc) {
      const uint32_t valid = std::min(kTileWidth, g.width - tc * kTileWidth);
      uint32_t run = 0;
      convert_elements(g.tiled.unit(t, tc, &run), g.tile_type, tile, g.rm_type, kTileElements);
      untilize_tile(tile, rows, valid, es);
      for (uint32_t i = 0; i < 32 && lt * 32 + i < g.h; ++i)
        scatter_row(g.rm, slice * g.h + lt * 32 + i, tc * kTileWidth, valid, rows[i]);
    }
  }
  return Status();
}

struct CopyArgs {
  TensorAccess src, dst;
};

Status copy_kernel(const void* args, uint32_t begin, uint32_t end) {
  const auto& a = *static_cast<const CopyArgs*>(args);
  // Rows back to back on both sides: one copy of the range (unit by unit,
  // 64-byte rows of 16 float32 channels copied at 12 GB/s).
  if (const uint64_t row = onednn::dense_row_stride(a.src); row && onednn::dense_row_stride(a.dst) == row) {
    std::memcpy(a.dst.base + begin * row, a.src.base + begin * row, (end - begin) * row);
    return Status();
  }
  copy_units(a.src, a.dst, begin, end);
  return Status();
}

StatusOr<Tensor> tile_convert(const Tensor& input, bool to_tile, const DataMovementParams& p) {
  const char* name = to_tile ? "tilize" : "untilize";
  TS_RETURN_IF_ERROR(ops::require_device_tensor(input, name));
  if (input.layout() != (to_tile ? Layout::ROW_MAJOR : Layout::TILE))
    return invalid_argument_error("{}: expected a {} input, found {}", name, to_tile ? "ROW_MAJOR" : "TILE",
                                  input.spec().to_string());
  DataType out_type = p.dtype.value_or(!to_tile && is_block_float(input.dtype()) ? DataType::BFLOAT16 : input.dtype());
  if (is_floating(out_type) != is_floating(input.dtype()))
    return invalid_argument_error("{}: cannot convert {} to {} while changing layout; use typecast", name,
                                  data_type_name(input.dtype()), data_type_name(out_type));
  TensorSpec spec = input.spec();
  spec.layout = to_tile ? Layout::TILE : Layout::ROW_MAJOR;
  spec.dtype = out_type;
  spec.memory_config = p.memory_config.value_or(input.memory_config());
  Device& device = *input.device();
  TS_ASSIGN_OR_RETURN(Tensor out, allocate_tensor_on_device(spec, device));
  const Tensor& rm = to_tile ? input : out;
  const Tensor& tiled = to_tile ? out : input;
  TileGeometry g = geometry(rm, tiled);
  TS_ASSIGN_OR_RETURN(g.rm, make_access(rm));
  TS_ASSIGN_OR_RETURN(g.tiled, make_access(tiled));
  std::string key = fmt::format("{}:{}->{}", name, input.spec().to_string(), spec.to_string());
  const uint32_t tasks = tiled.spec().unit_rows();
  auto compile = [&]() -> StatusOr<Program> {
    Program prog;
    prog.kernel = to_tile ? tilize_kernel : untilize_kernel;
    prog.kernel_name = fmt::format("{}_{}__generic", short_dtype_name(input.dtype()), name);
    prog.num_tasks = tasks;
    prog.grain = ops::default_grain(device, tasks, input.spec().storage_bytes() + spec.storage_bytes(),
                                    ops::kMinChunkBytesStreaming);
    return prog;
  };
  TS_RETURN_IF_ERROR(ops::launch(device, p.cq_id, key, compile, g));
  return out;
}

Status launch_copy(const Tensor& src, const Tensor& dst, uint8_t cq_id, std::string_view name) {
  CopyArgs args;
  TS_ASSIGN_OR_RETURN(args.src, make_access(src));
  TS_ASSIGN_OR_RETURN(args.dst, make_access(dst));
  Device& device = *src.device();
  std::string key = fmt::format("copy:{}->{}", src.spec().to_string(), dst.spec().memory_config.to_string());
  const uint32_t rows = args.src.rows;
  auto compile = [&]() -> StatusOr<Program> {
    Program prog;
    prog.kernel = copy_kernel;
    prog.kernel_name = "any_copy__generic";
    prog.num_tasks = rows;
    prog.grain = ops::default_grain(device, rows, 2 * src.spec().storage_bytes(), ops::kMinChunkBytesStreaming);
    return prog;
  };
  return ops::launch(device, cq_id, key, compile, args).annotate(name);
}

}  // namespace

StatusOr<Tensor> tilize(const Tensor& input, const DataMovementParams& p) { return tile_convert(input, true, p); }
StatusOr<Tensor> untilize(const Tensor& input, const DataMovementParams& p) { return tile_convert(input, false, p); }

StatusOr<Tensor> to_layout(const Tensor& input, Layout layout, const DataMovementParams& p) {
  if (!input.is_on_device()) {
    TS_ASSIGN_OR_RETURN(Tensor t, host_to_layout(input, layout));
    if (p.dtype && *p.dtype != t.dtype()) return host_typecast(t, *p.dtype);
    return t;
  }
  if (input.layout() == layout && !p.dtype && !p.memory_config) return input;
  if (input.layout() == layout)
    return invalid_argument_error("to_layout: input is already {}; use typecast or to_memory_config",
                                  layout_name(layout));
  return layout == Layout::TILE ? tilize(input, p) : untilize(input, p);
}

StatusOr<Tensor> to_memory_config(const Tensor& input, const MemoryConfig& memory_config, uint8_t cq_id) {
  TS_RETURN_IF_ERROR(ops::require_device_tensor(input, "to_memory_config"));
  if (input.memory_config() == memory_config) return input;
  return reshard(input, memory_config, std::nullopt, cq_id);
}

StatusOr<Tensor> reshard(const Tensor& input, const MemoryConfig& memory_config, std::optional<Tensor> output,
                         uint8_t cq_id) {
  TS_RETURN_IF_ERROR(ops::require_device_tensor(input, "reshard"));
  TensorSpec spec = input.spec();
  spec.memory_config = memory_config;
  if (output) {
    TS_RETURN_IF_ERROR(ops::require_device_tensor(*output, "reshard", "output"));
    if (output->spec() != spec)
      return invalid_argument_error("reshard: output tensor {} does not match the requested {}",
                                    output->spec().to_string(), spec.to_string());
    if (output->device() != input.device())
      return invalid_argument_error("reshard: output is on another device than the input");
    TS_RETURN_IF_ERROR(launch_copy(input, *output, cq_id, "reshard"));
    return *output;
  }
  TS_ASSIGN_OR_RETURN(Tensor out, allocate_tensor_on_device(spec, *input.device()));
  TS_RETURN_IF_ERROR(launch_copy(input, out, cq_id, "reshard"));
  return out;
}

}  // namespace tessera
