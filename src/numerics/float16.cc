#include "tessera/numerics/float16.h"

#include <bit>

namespace tessera {

uint16_t float_to_float16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t exp = (u >> 23) & 0xffu, mant = u & 0x7fffffu;
  if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0u));
  // The value as an unbiased exponent and a 24-bit significand.
  const int e = static_cast<int>(exp) - 127;
  if (e > 15) return static_cast<uint16_t>(sign | 0x7c00u);  // past 65504 rounds up: infinity
  uint32_t sig = exp ? (mant | 0x800000u) : mant;
  // Bits to drop from the 24-bit significand: 13 for normal halves, more for subnormal ones.
  int drop = e >= -14 ? 13 : 13 + (-14 - e);
  if (!exp) drop = 24 + 13;    // float subnormals are far below the smallest half
  if (drop > 25) return sign;  // rounds to zero (under half the smallest subnormal)
  const uint32_t keep = sig >> drop, rem = sig & ((1u << drop) - 1), half = 1u << (drop - 1);
  uint32_t r = keep + (rem > half || (rem == half && (keep & 1u)) ? 1u : 0u);
  if (e >= -14) {
    // Normal: r holds the hidden bit at bit 10; a carry past bit 11 bumps the exponent.
    uint32_t he = static_cast<uint32_t>(e + 15);
    if (r & 0x800u) r >>= 1, ++he;
    if (he >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
    return static_cast<uint16_t>(sign | (he << 10) | (r & 0x3ffu));
  }
  // Subnormal: r is the mantissa; rounding up to 0x400 makes the smallest normal, as it should.
  return static_cast<uint16_t>(sign | r);
}

float float16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  if (exp) return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
  if (!mant) return std::bit_cast<float>(sign);
  // Subnormal: normalise.
  int shift = 0;
  uint32_t m = mant;
  while (!(m & 0x400u)) m <<= 1, ++shift;
  return std::bit_cast<float>(sign | (static_cast<uint32_t>(113 - shift) << 23) | ((m & 0x3ffu) << 13));
}

void float_to_float16(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = float_to_float16(src[i]);
}
void float16_to_float(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = float16_to_float(src[i]);
}

}  // namespace tessera
