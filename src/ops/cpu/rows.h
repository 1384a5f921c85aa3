// Row access for ROW_MAJOR tensors (internal): the 2D view's row r, columns
// [c, c + n), read into or written from float32 through the dtype's
// conversion, or copied as raw bytes, across whatever runs the memory config
// splits the row into (width and block shards split rows; pages do not).
#pragma once

#include <cstdint>

#include "tessera/numerics/data_type.h"
#include "tessera/tensor/access.h"

namespace tessera::cpu {

void read_row(const TensorAccess& a, DataType t, uint32_t r, uint32_t c, uint32_t n, float* dst);
void write_row(const TensorAccess& a, DataType t, uint32_t r, uint32_t c, uint32_t n, const float* src);
// Copies n units from (sr, sc) of `src` to (dr, dc) of `dst` (same unit size).
void copy_row(const TensorAccess& src, uint32_t sr, uint32_t sc, const TensorAccess& dst, uint32_t dr, uint32_t dc,
              uint32_t n);

}  // namespace tessera::cpu
