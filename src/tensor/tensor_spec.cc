#include "tessera/tensor/tensor_spec.h"

#include "tessera/base/aligned.h"
#include "tessera/tensor/access.h"

namespace tessera {

std::string_view short_dtype_name(DataType t) {
  switch (t) {
    case DataType::BFLOAT16: return "bf16";
    case DataType::FLOAT32: return "f32";
    case DataType::UINT32: return "u32";
    case DataType::BFLOAT8_B: return "bfp8";
    case DataType::BFLOAT4_B: return "bfp4";
    case DataType::BFLOAT2_B: return "bfp2";
    case DataType::FLOAT16: return "f16";
    case DataType::UINT8: return "u8";
    case DataType::UINT16: return "u16";
    case DataType::INT32: return "i32";
  }
  return "?";
}

uint32_t TensorSpec::physical_height() const {
  if (shape.rank() == 0) return layout == Layout::TILE ? kTileHeight : 1;
  if (layout == Layout::ROW_MAJOR) return static_cast<uint32_t>(shape.volume() / shape[-1]);
  uint64_t outer = 1;
  for (int i = 0; i + 2 < shape.rank(); ++i) outer *= shape[i];
  uint32_t h = shape.rank() >= 2 ? shape[-2] : 1;
  return static_cast<uint32_t>(outer * align_up(h, kTileHeight));
}

uint32_t TensorSpec::physical_width() const {
  uint32_t w = shape.rank() ? shape[-1] : 1;
  return layout == Layout::TILE ? static_cast<uint32_t>(align_up(w, kTileWidth)) : w;
}

uint32_t TensorSpec::unit_rows() const {
  return layout == Layout::TILE ? physical_height() / kTileHeight : physical_height();
}
uint32_t TensorSpec::unit_cols() const {
  return layout == Layout::TILE ? physical_width() / kTileWidth : physical_width();
}
uint32_t TensorSpec::unit_bytes() const {
  return layout == Layout::TILE ? tile_size_bytes(dtype) : element_size(dtype);
}

Status TensorSpec::validate() const {
  if (shape.rank() == 0) return invalid_argument_error("tensor spec: expected a shape of rank >= 1, found rank 0");
  uint64_t volume = 1;
  for (uint32_t d : shape.dims()) {
    if (d == 0) return invalid_argument_error("tensor spec: expected non-empty dims, found shape {}", shape.to_string());
    if (__builtin_mul_overflow(volume, uint64_t{d}, &volume) || volume > (uint64_t{1} << 40))
      return invalid_argument_error("tensor spec: shape {} has more elements than Tessera supports (2^40)",
                                    shape.to_string());
  }
  if (is_block_float(dtype) && layout != Layout::TILE)
    return invalid_argument_error("tensor spec: {} requires TILE layout, found ROW_MAJOR (block-float tensors are "
                                  "stored as 32x32 tiles)",
                                  data_type_name(dtype));
  uint64_t rows = 1;  // the 2D height in 64 bits, before anything narrows it
  for (int i = 0; i + 1 < shape.rank(); ++i) rows *= shape[i];
  if (layout == Layout::TILE && shape.rank() >= 2) rows = rows / shape[-2] * align_up(shape[-2], kTileHeight);
  if (rows > (uint64_t{1} << 31) || shape[-1] > (uint32_t{1} << 31))
    return invalid_argument_error("tensor spec: shape {} has a 2D view of {} x {}, more than Tessera supports "
                                  "(2^31 rows or columns)",
                                  shape.to_string(), rows, shape[-1]);
  if (storage_bytes() > (uint64_t{1} << 40))
    return invalid_argument_error("tensor spec: {} needs {} B, more than Tessera supports", shape.to_string(),
                                  storage_bytes());
  return ok_status();
}

Status TensorSpec::validate_for_device(const DeviceDescriptor& desc) const {
  TS_RETURN_IF_ERROR(validate());
  const MemoryConfig& mc = memory_config;
  const char* where = "memory config";
  if (mc.buffer_type != BufferType::DRAM && mc.buffer_type != BufferType::L1)
    return invalid_argument_error("{}: tensors live in DRAM or L1, found {}", where, buffer_type_name(mc.buffer_type));
  if (!mc.is_sharded()) {
    if (mc.shard_spec)
      return invalid_argument_error("{}: INTERLEAVED must not carry a shard spec, found {}", where, mc.to_string());
    return ok_status();
  }
  if (!mc.shard_spec)
    return invalid_argument_error("{}: {} needs a shard spec, found none", where, memory_layout_name(mc.memory_layout));
  const ShardSpec& ss = *mc.shard_spec;
  TS_RETURN_IF_ERROR(ss.grid.validate());
  const bool dram = mc.buffer_type == BufferType::DRAM;
  for (CoreCoord c : ss.grid.cores()) {
    bool ok = dram ? (c.y == 0 && c.x < desc.num_dram_banks) : desc.is_usable(c);
    if (!ok)
      return invalid_argument_error("{}: shard core {} is outside the {} grid of {} ({})", where, c.to_string(),
                                    dram ? "DRAM bank" : "compute", desc.name,
                                    dram ? fmt::format("{}x1", desc.num_dram_banks)
                                         : fmt::format("{}x{}", desc.grid.x, desc.grid.y));
  }
  const uint32_t n = ss.grid.num_cores();
  if (n > uint32_t{TensorAccess::kMaxShards})
    return invalid_argument_error("{}: at most {} shards are supported, found {}", where, uint32_t{TensorAccess::kMaxShards}, n);
  const uint32_t sh = ss.shape[0], sw = ss.shape[1], H = physical_height(), W = physical_width();
  if (sh == 0 || sw == 0) return invalid_argument_error("{}: shard shape {}x{} has a zero dim", where, sh, sw);
  if (layout == Layout::TILE && (sh % kTileHeight || sw % kTileWidth))
    return invalid_argument_error("{}: TILE shards must be multiples of 32x32, found shard shape {}x{}", where, sh, sw);
  if (layout == Layout::ROW_MAJOR && (uint64_t{sw} * element_size(dtype)) % 4)
    return invalid_argument_error("{}: ROW_MAJOR shard rows must be a multiple of 4 bytes, found {} x {} B", where, sw,
                                  element_size(dtype));
  uint32_t gh = 1, gw = 1;  // shard grid in (rows of shards, columns of shards)
  switch (mc.memory_layout) {
    case TensorMemoryLayout::HEIGHT_SHARDED: gh = n; break;
    case TensorMemoryLayout::WIDTH_SHARDED: gw = n; break;
    default: {
      if (ss.grid.ranges().size() != 1)
        return invalid_argument_error("{}: BLOCK_SHARDED needs a single rectangular core range, found {}", where,
                                      ss.grid.to_string());
      CoreRange r = ss.grid.ranges()[0];
      bool rm = ss.orientation == ShardOrientation::ROW_MAJOR;
      gh = rm ? r.height() : r.width();
      gw = rm ? r.width() : r.height();
    }
  }
  if (uint64_t{sh} * gh != H || uint64_t{sw} * gw != W)
    return invalid_argument_error(
        "{}: {} shards of {}x{} on a {}x{} shard grid cover {}x{}, but the tensor {} is {}x{} (shards must cover the "
        "tensor evenly)",
        where, memory_layout_name(mc.memory_layout), sh, sw, gh, gw, uint64_t{sh} * gh, uint64_t{sw} * gw,
        shape.to_string(), H, W);
  return ok_status();
}

uint64_t TensorSpec::device_bytes_per_bank(const DeviceDescriptor& desc, uint32_t alignment) const {
  const MemoryConfig& mc = memory_config;
  if (mc.is_sharded()) {
    const auto& ss = *mc.shard_spec;
    uint64_t units = layout == Layout::TILE ? uint64_t{ss.shape[0] / 32} * (ss.shape[1] / 32)
                                            : uint64_t{ss.shape[0]} * ss.shape[1];
    return align_up(units * unit_bytes(), alignment);
  }
  const uint32_t banks = mc.buffer_type == BufferType::DRAM ? desc.num_dram_banks : desc.num_cores();
  const uint64_t pages = layout == Layout::TILE ? uint64_t{unit_rows()} * unit_cols() : unit_rows();
  const uint64_t page_bytes = layout == Layout::TILE ? unit_bytes() : uint64_t{unit_cols()} * unit_bytes();
  return div_up(pages, banks) * align_up(page_bytes, alignment);
}

std::string TensorSpec::to_string() const {
  return fmt::format("{}{}:{}:{}", short_dtype_name(dtype), shape.to_string(),
                     layout == Layout::TILE ? "TILE" : "RM", memory_config.to_string());
}

}  // namespace tessera
