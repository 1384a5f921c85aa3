// bfloat16 <-> float32 conversion (and float16 -> float32).
//
// float -> bfloat16 rounds to nearest, ties to even; infinities are kept, NaN
// stays NaN (its payload's top bits kept and the quiet bit set), denormals
// are rounded like any other value (no flush). bfloat16 -> float is exact.
// The bulk functions give bit-identical results to the scalar ones and use
// AVX-512 when the CPU has it.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

namespace tessera {

inline uint16_t float_to_bfloat16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float bfloat16_to_float(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

// Rounds a float to the nearest bfloat16 value, returned as float.
inline float round_to_bfloat16(float f) { return bfloat16_to_float(float_to_bfloat16(f)); }


void float_to_bfloat16(const float* src, uint16_t* dst, size_t n);
void bfloat16_to_float(const uint16_t* src, float* dst, size_t n);
// `rows` rows of n values, src_stride / dst_stride values apart (one
// dispatch for the lot: narrow rows cost a call each otherwise).
void float_to_bfloat16_rows(const float* src, size_t src_stride, uint16_t* dst, size_t dst_stride, size_t rows,
                            size_t n);

}  // namespace tessera
