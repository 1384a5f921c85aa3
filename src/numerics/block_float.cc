#include "tessera/numerics/block_float.h"

#include <bit>

#include "convert_internal.h"
#include "tessera/base/cpu_features.h"

namespace tessera {

uint8_t bfp_encode(uint32_t bits, uint32_t shared_exponent, int w) {
  const uint32_t exp = (bits >> 23) & 0xff;
  if (exp == 0) return 0;
  const uint32_t sign = bits >> 31;
  const uint32_t diff = shared_exponent - exp;
  uint32_t mant = diff >= 32 ? 0 : ((1u << 23) | (bits & 0x7fffff)) >> diff;
  const int drop = 24 - w;
  uint32_t m = mant >> drop;
  const uint32_t rem = mant & ((1u << drop) - 1);
  const uint32_t half = 1u << (drop - 1);
  if (rem > half || (rem == half && (m & 1))) ++m;
  const uint32_t max_m = (1u << w) - 1;
  if (m > max_m) m = max_m;
  return static_cast<uint8_t>(m == 0 ? 0 : (sign << w) | m);
}

uint32_t bfp_decode(uint8_t value, uint32_t shared_exponent, int w) {
  const uint32_t sign = (value >> w) & 1;
  uint32_t m = value & ((1u << w) - 1);
  uint32_t exp = 0;
  if (m != 0) {
    int shift = 0;
    while ((m & (1u << (w - 1))) == 0) {
      m <<= 1;
      ++shift;
    }
    m &= (1u << (w - 1)) - 1;  // drop the now-implicit leading one
    exp = shared_exponent < static_cast<uint32_t>(shift) ? 0 : shared_exponent - shift;
  }
  return (sign << 31) | (exp << 23) | (m << (23 - (w - 1)));
}

int bfp_mantissa_bits(DataType f) {
  return f == DataType::BFLOAT8_B   ? kBfp8MantissaBits
         : f == DataType::BFLOAT4_B ? kBfp4MantissaBits
                                    : kBfp2MantissaBits;
}

namespace {
int mantissa_bits(DataType f) { return bfp_mantissa_bits(f); }
// Elements per data byte and their bit width: 1 x 8, 2 x 4 or 4 x 2.
int per_byte(int w) { return 8 / (w + 1); }
}  // namespace

void pack_bfp_tiles_reference(const float* src, std::byte* dst, size_t num_tiles, DataType format) {
  const int w = mantissa_bits(format);
  const size_t tile_bytes = tile_size_bytes(format);
  for (size_t t = 0; t < num_tiles; ++t) {
    const float* s = src + t * kTileElements;
    auto* exps = reinterpret_cast<uint8_t*>(dst + t * tile_bytes);
    uint8_t* data = exps + 64;
    for (int b = 0; b < 64; ++b) {
      uint32_t shared = 0;
      for (int i = 0; i < 16; ++i) {
        uint32_t e = (std::bit_cast<uint32_t>(s[b * 16 + i]) >> 23) & 0xff;
        if (e > shared) shared = e;
      }
      exps[b] = static_cast<uint8_t>(shared);
      for (int i = 0; i < 16; ++i) {
        const int k = b * 16 + i;
        uint8_t v = bfp_encode(std::bit_cast<uint32_t>(s[k]), shared, w);
        const int n = per_byte(w), bits = w + 1;
        if (k % n == 0) data[k / n] = 0;
        data[k / n] = static_cast<uint8_t>(data[k / n] | (v << (bits * (k % n))));
      }
    }
  }
}

void unpack_bfp_tiles_reference(const std::byte* src, float* dst, size_t num_tiles, DataType format) {
  const int w = mantissa_bits(format);
  const size_t tile_bytes = tile_size_bytes(format);
  for (size_t t = 0; t < num_tiles; ++t) {
    const auto* exps = reinterpret_cast<const uint8_t*>(src + t * tile_bytes);
    const uint8_t* data = exps + 64;
    for (int k = 0; k < 1024; ++k) {
      const int n = per_byte(w), bits = w + 1;
      const auto v = static_cast<uint8_t>((data[k / n] >> (bits * (k % n))) & ((1u << bits) - 1));
      dst[t * kTileElements + k] = std::bit_cast<float>(bfp_decode(v, exps[k / 16], w));
    }
  }
}

void pack_bfp_tiles(const float* src, std::byte* dst, size_t num_tiles, DataType format) {
  if (avx512_kernels_enabled() && format != DataType::BFLOAT2_B)
    return avx512::pack_bfp_tiles(src, dst, num_tiles, mantissa_bits(format));
  pack_bfp_tiles_reference(src, dst, num_tiles, format);
}

void unpack_bfp_tiles(const std::byte* src, float* dst, size_t num_tiles, DataType format) {
  if (avx512_kernels_enabled() && format != DataType::BFLOAT2_B)
    return avx512::unpack_bfp_tiles(src, dst, num_tiles, mantissa_bits(format));
  unpack_bfp_tiles_reference(src, dst, num_tiles, format);
}

}  // namespace tessera
