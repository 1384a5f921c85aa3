#include "tessera/tensor/types.h"

#include <algorithm>

#include "tessera/base/status.h"

namespace tessera {

std::string_view layout_name(Layout l) { return l == Layout::TILE ? "TILE" : "ROW_MAJOR"; }

std::string_view memory_layout_name(TensorMemoryLayout l) {
  switch (l) {
    case TensorMemoryLayout::INTERLEAVED: return "INTERLEAVED";
    case TensorMemoryLayout::HEIGHT_SHARDED: return "HEIGHT_SHARDED";
    case TensorMemoryLayout::WIDTH_SHARDED: return "WIDTH_SHARDED";
    case TensorMemoryLayout::BLOCK_SHARDED: return "BLOCK_SHARDED";
  }
  return "?";
}

Shape::Shape(std::initializer_list<uint32_t> dims) : Shape(std::span<const uint32_t>(dims.begin(), dims.size())) {}

Shape::Shape(std::span<const uint32_t> dims) {
  rank_ = static_cast<int>(std::min<size_t>(dims.size(), kMaxRank));
  std::copy_n(dims.begin(), rank_, dims_.begin());
}

uint64_t Shape::volume() const {
  uint64_t v = 1;
  for (int i = 0; i < rank_; ++i) v *= dims_[static_cast<size_t>(i)];
  return v;
}

bool Shape::operator==(const Shape& o) const {
  return rank_ == o.rank_ && std::equal(dims_.begin(), dims_.begin() + rank_, o.dims_.begin());
}

std::string Shape::to_string() const {
  std::string s = "[";
  for (int i = 0; i < rank_; ++i) s += (i ? "," : "") + std::to_string(dims_[static_cast<size_t>(i)]);
  return s + "]";
}

std::string MemoryConfig::to_string() const {
  std::string s = fmt::format("{}/{}", buffer_type_name(buffer_type), memory_layout_name(memory_layout));
  if (shard_spec)
    s += fmt::format("{{{}:{}x{}:{}}}", shard_spec->grid.to_string(), shard_spec->shape[0], shard_spec->shape[1],
                     shard_spec->orientation == ShardOrientation::ROW_MAJOR ? "RM" : "CM");
  return s;
}

}  // namespace tessera
