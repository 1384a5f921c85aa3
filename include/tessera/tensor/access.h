// TensorAccess: where each storage unit of a tensor lives in host memory, as
// a trivially copyable struct of resolved addresses. Kernels receive these in
// their argument blobs, so a trace replays with the addresses fixed at capture.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tessera/base/status.h"

namespace tessera {

class Tensor;

struct TensorAccess {
  static constexpr uint32_t kMaxShards = 128;
  enum class Kind : uint8_t { kContiguous, kInterleavedRows, kInterleavedTiles, kSharded };

  Kind kind = Kind::kContiguous;
  uint32_t rows = 0, cols = 0;  // storage grid in units
  uint32_t unit_bytes = 0;
  std::byte* base = nullptr;    // bank 0 at the buffer address (or host data)
  uint64_t bank_stride = 0;
  uint64_t page_stride = 0;     // interleaved: bytes between pages in a bank
  uint32_t num_banks = 1;       // interleaved
  uint32_t shard_rows = 0, shard_cols = 0, shard_grid_cols = 1;  // sharded, in units
  uint16_t shard_bank[kMaxShards] = {};

  // Pages: the contiguous pieces storage is made of (a shard, a row page or a
  // tile page; the whole tensor when contiguous).
  uint32_t num_pages() const;
  uint64_t page_units() const;
  std::byte* page(uint32_t p) const;

  // True when every unit lies back to back from `base` in row-major unit
  // order (host storage, one bank with unpadded pages, or a single shard).
  bool is_packed() const;
  // Bytes from one row of units to the next when every row is contiguous and
  // rows are evenly spaced (packed, or one bank of padded row pages); 0
  // otherwise. Kernels that take a leading dimension read such rows in place.
  uint64_t uniform_row_stride() const;

  // Address of unit (r, c); `run` receives how many units from c on are
  // contiguous in the same row.
  std::byte* unit(uint32_t r, uint32_t c, uint32_t* run) const;
};

// Resolves a host tensor or an allocated device tensor.
StatusOr<TensorAccess> make_access(const Tensor& t);

// Copies every unit of `src` to the same unit of `dst` (same grid and unit
// size), rows [row_begin, row_end).
void copy_units(const TensorAccess& src, const TensorAccess& dst, uint32_t row_begin, uint32_t row_end);

}  // namespace tessera
