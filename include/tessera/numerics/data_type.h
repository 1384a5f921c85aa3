// DataType: the element formats of Tessera tensors, with the original's names
// and enum values, and their storage sizes.
//
// bfloat8_b and bfloat4_b are block-float formats (see block_float.h) and
// exist only in TILE layout: their storage unit is the whole 32x32 tile.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace tessera {

enum class DataType : uint8_t {
  BFLOAT16 = 0,
  FLOAT32 = 1,
  UINT32 = 2,
  BFLOAT8_B = 3,
  BFLOAT4_B = 4,
  UINT8 = 5,
  UINT16 = 6,
  INT32 = 7,
  BFLOAT2_B = 8,  // block float, 1-bit magnitude (block_float.h)
  FLOAT16 = 9,    // IEEE binary16 (float16.h)
};

inline constexpr uint32_t kTileHeight = 32;
inline constexpr uint32_t kTileWidth = 32;
inline constexpr uint32_t kFaceHeight = 16;
inline constexpr uint32_t kFaceWidth = 16;
inline constexpr uint32_t kTileElements = kTileHeight * kTileWidth;

std::string_view data_type_name(DataType t);  // "bfloat16", "bfloat8_b", ...
std::optional<DataType> parse_data_type(std::string_view name);

constexpr bool is_block_float(DataType t) {
  return t == DataType::BFLOAT8_B || t == DataType::BFLOAT4_B || t == DataType::BFLOAT2_B;
}
constexpr bool is_floating(DataType t) {
  return t == DataType::FLOAT32 || t == DataType::BFLOAT16 || t == DataType::FLOAT16 || is_block_float(t);
}

// Bytes per element for the scalar formats; 0 for block-float formats.
constexpr uint32_t element_size(DataType t) {
  switch (t) {
    case DataType::FLOAT32: case DataType::UINT32: case DataType::INT32: return 4;
    case DataType::BFLOAT16: case DataType::UINT16: case DataType::FLOAT16: return 2;
    case DataType::UINT8: return 1;
    case DataType::BFLOAT8_B: case DataType::BFLOAT4_B: case DataType::BFLOAT2_B: return 0;
  }
  return 0;
}

// Bytes of one 32x32 tile: 1088 for bfloat8_b (64 exponents + 1024 data),
// 576 for bfloat4_b (64 + 512), 320 for bfloat2_b (64 + 256),
// element_size * 1024 otherwise.
constexpr uint32_t tile_size_bytes(DataType t) {
  if (t == DataType::BFLOAT8_B) return 64 + 1024;
  if (t == DataType::BFLOAT4_B) return 64 + 512;
  if (t == DataType::BFLOAT2_B) return 64 + 256;
  return element_size(t) * kTileElements;
}

}  // namespace tessera
