// Element conversion between any two DataTypes, through float32.
//
// Rules (shared by the reference and fast kernels):
//   float  -> bfloat16: round to nearest even (bfloat16.h)
//   float  -> bfloat8_b / bfloat4_b: block-float encoding (block_float.h)
//   float  -> integer: truncate toward zero, saturate to the type's range,
//                      NaN -> 0
//   integer -> float: round to nearest float
//   integer -> integer: saturate to the destination range (typecast only)
//
// Block-float buffers hold whole tiles: `n` must then be a multiple of 1024
// and the float side is in TILE order.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tessera/numerics/data_type.h"

namespace tessera {

void convert_to_float(const std::byte* src, DataType src_type, float* dst, size_t n);
void convert_from_float(const float* src, std::byte* dst, DataType dst_type, size_t n);
// Any-to-any; integer pairs convert exactly through int64.
void convert_elements(const std::byte* src, DataType src_type, std::byte* dst, DataType dst_type, size_t n);

// Scalar conversions used by reference kernels.
float integer_to_float(int64_t v);
int64_t float_to_integer(float f, DataType dst_type);  // truncate, saturate, NaN -> 0
int64_t saturate_integer(int64_t v, DataType dst_type);

}  // namespace tessera
