// float16: IEEE 754 binary16 (1 sign, 5 exponent, 10 mantissa bits; the
// original's Float16 / "FP16-A"), with subnormals, infinities and NaN.
// float -> float16 rounds to nearest, ties to even; values past the largest
// finite half (65504) round to infinity; a NaN stays a (quiet) NaN with its
// sign. float16 -> float is exact. Written by hand (no Debian library
// converts without F16C, which the baseline ISA lacks); tested bit for bit
// against GCC's _Float16 over every half and many floats.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera {

uint16_t float_to_float16(float f);
float float16_to_float(uint16_t h);
inline float round_to_float16(float f) { return float16_to_float(float_to_float16(f)); }

void float_to_float16(const float* src, uint16_t* dst, size_t n);
void float16_to_float(const uint16_t* src, float* dst, size_t n);

}  // namespace tessera
