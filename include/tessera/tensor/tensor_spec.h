// TensorSpec: shape, dtype, layout and memory config, and the geometry that
// follows from them.
//
// Storage is described as a grid of units: in ROW_MAJOR a unit is an element
// and the grid is physical_height x width; in TILE a unit is a 32x32 tile
// and the grid is (physical_height/32) x (physical_width/32). Host storage
// holds the units row-major. On a device:
//   INTERLEAVED  pages go round-robin over the region's banks; a page is one
//                row of elements (ROW_MAJOR) or one tile (TILE), each page
//                padded to the region's alignment;
//   *_SHARDED    shard i of the grid lives on the i-th core (or DRAM bank) of
//                the shard grid in its orientation order; a shard holds its
//                units row-major.
#pragma once

#include <string>

#include "tessera/base/status.h"
#include "tessera/device/descriptor.h"
#include "tessera/tensor/types.h"

namespace tessera {

struct TensorSpec {
  Shape shape;
  DataType dtype = DataType::BFLOAT16;
  Layout layout = Layout::ROW_MAJOR;
  MemoryConfig memory_config = DRAM_MEMORY_CONFIG;

  bool operator==(const TensorSpec&) const = default;
  // Same shape, dtype and layout (what host<->device copies require).
  bool same_data_format(const TensorSpec& o) const {
    return shape == o.shape && dtype == o.dtype && layout == o.layout;
  }

  uint32_t physical_height() const;  // rows of the 2D view, TILE-padded
  uint32_t physical_width() const;
  uint32_t unit_rows() const;  // storage grid (see above)
  uint32_t unit_cols() const;
  uint32_t unit_bytes() const;
  uint32_t unit_elements() const { return layout == Layout::TILE ? kTileElements : 1; }
  uint64_t storage_bytes() const { return uint64_t{unit_rows()} * unit_cols() * unit_bytes(); }

  // Checks dtype/layout and, for a device, the memory config against the
  // descriptor (grid, banks, even and aligned shards).
  Status validate() const;
  Status validate_for_device(const DeviceDescriptor& desc) const;

  // Bytes per bank a device buffer of this spec needs (validated spec only).
  uint64_t device_bytes_per_bank(const DeviceDescriptor& desc, uint32_t alignment) const;

  // Descriptor string: "bf16[1,1,64,64]:TILE:L1/HEIGHT_SHARDED{...}".
  std::string to_string() const;
};

std::string_view short_dtype_name(DataType t);  // "f32", "bf16", "bfp8", ...

}  // namespace tessera
