// Shape, Layout and MemoryConfig: how a tensor is laid out, with the
// original's names and enum values.
//
// Sharded tensors are viewed as 2D: every dim but the last collapses into the
// height (for TILE, each 2D slice is padded to 32 first). HEIGHT_SHARDED
// splits the rows over the cores of the shard grid, WIDTH_SHARDED the
// columns, BLOCK_SHARDED both over a rectangular grid. Shard shapes are in
// elements; in TILE layout they must be multiples of 32, and the shards must
// cover the tensor exactly (one shard per core of the grid).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>

#include "tessera/device/buffer.h"
#include "tessera/device/core_coord.h"
#include "tessera/numerics/data_type.h"

namespace tessera {

enum class Layout : uint8_t { ROW_MAJOR = 0, TILE = 1 };
enum class TensorMemoryLayout : uint8_t { INTERLEAVED = 0, HEIGHT_SHARDED = 2, WIDTH_SHARDED = 3, BLOCK_SHARDED = 4 };
enum class ShardOrientation : uint8_t { ROW_MAJOR = 0, COL_MAJOR = 1 };
enum class StorageType : uint8_t { HOST = 0, DEVICE = 1 };

std::string_view layout_name(Layout l);
std::string_view memory_layout_name(TensorMemoryLayout l);

class Shape {
 public:
  static constexpr int kMaxRank = 8;
  Shape() = default;
  Shape(std::initializer_list<uint32_t> dims);
  explicit Shape(std::span<const uint32_t> dims);

  int rank() const { return rank_; }
  // Negative indices count from the back, as in Python.
  uint32_t operator[](int i) const { return dims_[static_cast<size_t>(i < 0 ? i + rank_ : i)]; }
  uint64_t volume() const;
  std::span<const uint32_t> dims() const { return {dims_.data(), static_cast<size_t>(rank_)}; }
  bool operator==(const Shape& o) const;
  std::string to_string() const;  // "[1,1,64,64]"

 private:
  std::array<uint32_t, kMaxRank> dims_{};
  int rank_ = 0;
};

struct ShardSpec {
  CoreRangeSet grid;
  std::array<uint32_t, 2> shape{0, 0};  // [shard_height, shard_width] in elements
  ShardOrientation orientation = ShardOrientation::ROW_MAJOR;
  bool operator==(const ShardSpec&) const = default;
};

struct MemoryConfig {
  TensorMemoryLayout memory_layout = TensorMemoryLayout::INTERLEAVED;
  BufferType buffer_type = BufferType::DRAM;
  std::optional<ShardSpec> shard_spec;

  bool is_sharded() const { return memory_layout != TensorMemoryLayout::INTERLEAVED; }
  bool operator==(const MemoryConfig&) const = default;
  std::string to_string() const;  // "L1/HEIGHT_SHARDED{[(0,0)-(1,0)]:64x32:RM}"
};

inline const MemoryConfig DRAM_MEMORY_CONFIG{TensorMemoryLayout::INTERLEAVED, BufferType::DRAM, std::nullopt};
inline const MemoryConfig L1_MEMORY_CONFIG{TensorMemoryLayout::INTERLEAVED, BufferType::L1, std::nullopt};

}  // namespace tessera
