#include "tessera/tensor/access.h"

#include <algorithm>
#include <cstring>

#include "tessera/base/aligned.h"
#include "tessera/tensor/tensor.h"

namespace tessera {

uint32_t TensorAccess::num_pages() const {
  switch (kind) {
    case Kind::kContiguous: return 1;
    case Kind::kInterleavedRows: return rows;
    case Kind::kInterleavedTiles: return rows * cols;
    case Kind::kSharded: return (rows / shard_rows) * (cols / shard_cols);
  }
  return 0;
}

uint64_t TensorAccess::page_units() const {
  switch (kind) {
    case Kind::kContiguous: return uint64_t{rows} * cols;
    case Kind::kInterleavedRows: return cols;
    case Kind::kInterleavedTiles: return 1;
    case Kind::kSharded: return uint64_t{shard_rows} * shard_cols;
  }
  return 0;
}

std::byte* TensorAccess::page(uint32_t p) const {
  switch (kind) {
    case Kind::kContiguous: return base;
    case Kind::kInterleavedRows:
    case Kind::kInterleavedTiles: return base + (p % num_banks) * bank_stride + (p / num_banks) * page_stride;
    case Kind::kSharded: return base + shard_bank[p] * bank_stride;
  }
  return nullptr;
}

bool TensorAccess::is_packed() const {
  switch (kind) {
    case Kind::kContiguous: return true;
    case Kind::kInterleavedRows: return num_banks == 1 && page_stride == uint64_t{cols} * unit_bytes;
    case Kind::kInterleavedTiles: return num_banks == 1 && page_stride == unit_bytes;
    case Kind::kSharded: return num_pages() == 1;
  }
  return false;
}

uint64_t TensorAccess::uniform_row_stride() const {
  if (kind == Kind::kInterleavedRows && num_banks == 1) return page_stride;
  if (kind != Kind::kInterleavedTiles && is_packed()) return uint64_t{cols} * unit_bytes;
  return 0;
}

std::byte* TensorAccess::unit(uint32_t r, uint32_t c, uint32_t* run) const {
  switch (kind) {
    case Kind::kContiguous:
      *run = cols - c;
      return base + (uint64_t{r} * cols + c) * unit_bytes;
    case Kind::kInterleavedRows:
      *run = cols - c;
      return base + (r % num_banks) * bank_stride + (r / num_banks) * page_stride + uint64_t{c} * unit_bytes;
    case Kind::kInterleavedTiles: {
      *run = 1;
      uint64_t p = uint64_t{r} * cols + c;
      return base + (p % num_banks) * bank_stride + (p / num_banks) * page_stride;
    }
    case Kind::kSharded: {
      uint32_t lr = r % shard_rows, lc = c % shard_cols;
      uint32_t s = (r / shard_rows) * shard_grid_cols + c / shard_cols;
      *run = shard_cols - lc;
      return base + shard_bank[s] * bank_stride + (uint64_t{lr} * shard_cols + lc) * unit_bytes;
    }
  }
  return nullptr;
}

StatusOr<TensorAccess> make_access(const Tensor& t) {
  const TensorSpec& spec = t.spec();
  TensorAccess a;
  a.rows = spec.unit_rows();
  a.cols = spec.unit_cols();
  a.unit_bytes = spec.unit_bytes();
  if (!t.is_on_device()) {
    if (!t.host_data()) return failed_precondition_error("tensor {} has no storage", spec.to_string());
    a.base = t.host_data();
    return a;
  }
  if (!t.is_allocated())
    return failed_precondition_error("tensor {} on device {} has been deallocated", spec.to_string(),
                                     t.device()->id());
  const Buffer& buf = *t.buffer();
  const Device& dev = buf.device();
  const DeviceDescriptor& desc = dev.descriptor();
  const MemoryConfig& mc = spec.memory_config;
  a.base = buf.bank_data(0);
  a.bank_stride = static_cast<uint64_t>(dev.host_address(buf.type(), 1, 0) - dev.host_address(buf.type(), 0, 0));
  const uint32_t align = dev.alignment(buf.type());
  if (!mc.is_sharded()) {
    a.num_banks = mc.buffer_type == BufferType::DRAM ? desc.num_dram_banks : desc.num_cores();
    if (spec.layout == Layout::TILE) {
      a.kind = TensorAccess::Kind::kInterleavedTiles;
      a.page_stride = align_up(a.unit_bytes, align);
    } else {
      a.kind = TensorAccess::Kind::kInterleavedRows;
      a.page_stride = align_up(uint64_t{a.cols} * a.unit_bytes, align);
    }
    return a;
  }
  const ShardSpec& ss = *mc.shard_spec;
  a.kind = TensorAccess::Kind::kSharded;
  const uint32_t tile = spec.layout == Layout::TILE ? kTileHeight : 1;
  a.shard_rows = ss.shape[0] / tile;
  a.shard_cols = ss.shape[1] / tile;
  a.shard_grid_cols = a.cols / a.shard_cols;
  auto cores = ss.grid.cores(ss.orientation == ShardOrientation::ROW_MAJOR);
  for (size_t i = 0; i < cores.size() && i < TensorAccess::kMaxShards; ++i)
    a.shard_bank[i] = static_cast<uint16_t>(mc.buffer_type == BufferType::DRAM ? cores[i].x : desc.core_index(cores[i]));
  return a;
}

void copy_units(const TensorAccess& src, const TensorAccess& dst, uint32_t row_begin, uint32_t row_end) {
  for (uint32_t r = row_begin; r < row_end; ++r) {
    for (uint32_t c = 0; c < src.cols;) {
      uint32_t rs = 0, rd = 0;
      const std::byte* s = src.unit(r, c, &rs);
      std::byte* d = dst.unit(r, c, &rd);
      uint32_t n = std::min(rs, rd);
      std::memcpy(d, s, uint64_t{n} * src.unit_bytes);
      c += n;
    }
  }
}

}  // namespace tessera
