// bfloat8_b, bfloat4_b and bfloat2_b: block floating point, bit-exact with
// the original.
//
// A block is 16 consecutive elements along one row of a 16x16 face, so a
// 32x32 tile holds 64 blocks. Each block stores one 8-bit shared exponent
// (bias 127, the fp32 exponent field) equal to the largest fp32 exponent field
// in the block, and per element a sign bit and a W-bit magnitude that holds
// the explicit leading one (W = 7 for bfloat8_b, 3 for bfloat4_b, 1 for
// bfloat2_b, whose elements are 0 or +-2^(E-127)):
//
//   value = (-1)^s * m / 2^(W-1) * 2^(E-127)
//
// Encoding an element with exponent field e: e == 0 (zero, denormal) gives 0;
// otherwise mant = (1<<23 | fraction) >> (E - e) (truncating), then the low
// 24-W bits are rounded away to nearest, ties to even; a magnitude that rounds
// past 2^W - 1 saturates (the exponent is never bumped); a zero magnitude
// drops the sign. Decoding renormalises m and lowers the exponent by the shift
// (clamped at 0, as the original does).
//
// Tile image: 64 exponent bytes (face 0 rows 0..15, then faces 1, 2, 3), then
// the data in the same order: one byte per element for bfloat8_b (1088 B per
// tile), two elements per byte for bfloat4_b with the earlier element in the
// low nibble (576 B per tile), four per byte for bfloat2_b, the earlier
// elements in the lower bit pairs (320 B per tile).
//
// The *_tiles functions take fp32 tiles in TILE order (four 16x16 faces, each
// row-major) and use AVX-512 when available; the *_reference functions are the
// scalar oracle they are tested against.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tessera/numerics/data_type.h"

namespace tessera {

inline constexpr int kBfp8MantissaBits = 7;
inline constexpr int kBfp4MantissaBits = 3;
inline constexpr int kBfp2MantissaBits = 1;
// W of a block-float format (7, 3 or 1).
int bfp_mantissa_bits(DataType format);

// Single-element codec: returns sign << W | magnitude.
uint8_t bfp_encode(uint32_t fp32_bits, uint32_t shared_exponent, int mantissa_bits);
uint32_t bfp_decode(uint8_t value, uint32_t shared_exponent, int mantissa_bits);

// `format` must be BFLOAT8_B, BFLOAT4_B or BFLOAT2_B (the last always on
// the scalar path). `src`/`dst` hold num_tiles tiles.
void pack_bfp_tiles(const float* src, std::byte* dst, size_t num_tiles, DataType format);
void unpack_bfp_tiles(const std::byte* src, float* dst, size_t num_tiles, DataType format);
void pack_bfp_tiles_reference(const float* src, std::byte* dst, size_t num_tiles, DataType format);
void unpack_bfp_tiles_reference(const std::byte* src, float* dst, size_t num_tiles, DataType format);

}  // namespace tessera
