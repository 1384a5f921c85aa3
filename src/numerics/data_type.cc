#include "tessera/numerics/data_type.h"

namespace tessera {

std::string_view data_type_name(DataType t) {
  switch (t) {
    case DataType::BFLOAT16: return "bfloat16";
    case DataType::FLOAT32: return "float32";
    case DataType::UINT32: return "uint32";
    case DataType::BFLOAT8_B: return "bfloat8_b";
    case DataType::BFLOAT4_B: return "bfloat4_b";
    case DataType::UINT8: return "uint8";
    case DataType::UINT16: return "uint16";
    case DataType::INT32: return "int32";
    case DataType::BFLOAT2_B: return "bfloat2_b";
    case DataType::FLOAT16: return "float16";
  }
  return "invalid";
}

std::optional<DataType> parse_data_type(std::string_view name) {
  for (int i = 0; i <= 9; ++i) {
    auto t = static_cast<DataType>(i);
    if (data_type_name(t) == name) return t;
  }
  return std::nullopt;
}

}  // namespace tessera
