#include "tessera/numerics/block_float.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "tessera/base/cpu_features.h"

namespace tessera {
namespace {

float bfp8_roundtrip(float x, uint8_t* encoded) {
  uint32_t bits = std::bit_cast<uint32_t>(x);
  uint32_t shared = (bits >> 23) & 0xff;
  *encoded = bfp_encode(bits, shared, kBfp8MantissaBits);
  return std::bit_cast<float>(bfp_decode(*encoded, shared, kBfp8MantissaBits));
}

// The four rounding cases of the original's own tests: 64 + fraction with the
// element's exponent as the shared exponent.
TEST(BlockFloat, MantissaRoundingMatchesOriginal) {
  struct Case {
    float in;
    uint8_t mant;
    float out;
  };
  for (Case c :
       {Case{64.75f, 0x41, 65.0f}, Case{65.25f, 0x41, 65.0f}, Case{64.5f, 0x40, 64.0f}, Case{65.5f, 0x42, 66.0f}}) {
    uint8_t e;
    EXPECT_EQ(bfp8_roundtrip(c.in, &e), c.out) << c.in;
    EXPECT_EQ(e, c.mant) << c.in;
    EXPECT_EQ(bfp8_roundtrip(-c.in, &e), -c.out) << c.in;
    EXPECT_EQ(e, c.mant | 0x80) << c.in;
  }
}

TEST(BlockFloat, SaturatesZeroesAndAligns) {
  // 127.9 rounds to 128 = m 128 which saturates to 127 without bumping the exponent.
  uint32_t b = std::bit_cast<uint32_t>(127.9f);
  EXPECT_EQ(bfp_encode(b, (b >> 23) & 0xff, 7), 127);
  // Zero and denormals become 0, and a zero magnitude drops the sign.
  EXPECT_EQ(bfp_encode(std::bit_cast<uint32_t>(-0.0f), 130, 7), 0);
  EXPECT_EQ(bfp_encode(0x80000001u, 130, 7), 0);
  // A small element under a large shared exponent is truncated to 0 (no sign).
  EXPECT_EQ(bfp_encode(std::bit_cast<uint32_t>(-1.0f), 127 + 10, 7), 0);
  // 1.0 under shared exponent 2^1 is 0.5 * 2: m = 32 -> decodes to exactly 1.0.
  EXPECT_EQ(bfp_encode(std::bit_cast<uint32_t>(1.0f), 128, 7), 32);
  EXPECT_EQ(std::bit_cast<float>(bfp_decode(32, 128, 7)), 1.0f);
  // bfloat4_b: 3-bit magnitude; 1.75 = 0b111 / 4 * 2 -> m = 7 exactly.
  EXPECT_EQ(bfp_encode(std::bit_cast<uint32_t>(1.75f), 127, 3), 7);
  EXPECT_EQ(bfp_encode(std::bit_cast<uint32_t>(-1.75f), 127, 3), 0xf);
  EXPECT_EQ(std::bit_cast<float>(bfp_decode(0xf, 127, 3)), -1.75f);
}

std::vector<float> random_tiles(size_t tiles, uint32_t seed, bool specials) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(tiles * 1024);
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = normal(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 20) - 10);
    if (specials && rng() % 16 == 0) {
      const float pool[] = {
          0.0f,  -0.0f, INFINITY, -INFINITY, NAN, std::bit_cast<float>(0x00000007u), std::bit_cast<float>(0x7f7fffffu),
          64.5f, 65.5f};
      v[i] = pool[rng() % 9];
    }
  }
  return v;
}

TEST(BlockFloat, TileImageLayout) {
  std::vector<float> tile(1024, 0.0f);
  tile[0] = 1.0f;     // face 0, row 0, block 0
  tile[16] = -2.0f;   // face 0, row 1, block 1
  tile[256] = 4.0f;   // face 1, row 0, block 16
  tile[1023] = 0.5f;  // face 3, row 15, block 63, element 15
  std::vector<std::byte> img(1088);
  pack_bfp_tiles_reference(tile.data(), img.data(), 1, DataType::BFLOAT8_B);
  auto u8 = [&](size_t i) { return static_cast<uint8_t>(img[i]); };
  EXPECT_EQ(u8(0), 127);
  EXPECT_EQ(u8(1), 128);
  EXPECT_EQ(u8(16), 129);
  EXPECT_EQ(u8(63), 126);
  EXPECT_EQ(u8(2), 0);
  EXPECT_EQ(u8(64 + 0), 64);          // 1.0 = 64/64
  EXPECT_EQ(u8(64 + 16), 0x80 | 64);  // -2.0
  EXPECT_EQ(u8(64 + 1023), 64);
  std::vector<std::byte> img4(576);
  pack_bfp_tiles_reference(tile.data(), img4.data(), 1, DataType::BFLOAT4_B);
  EXPECT_EQ(static_cast<uint8_t>(img4[64]), 0x04);        // element 0 low nibble = m 4
  EXPECT_EQ(static_cast<uint8_t>(img4[64 + 8]), 0x0c);    // element 16: sign|4
  EXPECT_EQ(static_cast<uint8_t>(img4[64 + 511]), 0x40);  // element 1023 high nibble
}

class BlockFloatFormats : public ::testing::TestWithParam<DataType> {};

const char* short_dtype_name_for_test(DataType t) {
  return t == DataType::BFLOAT8_B ? "bfp8" : t == DataType::BFLOAT4_B ? "bfp4" : "bfp2";
}

TEST_P(BlockFloatFormats, FastMatchesReferenceBitForBit) {
  DataType f = GetParam();
  const size_t tiles = 9;
  for (bool specials : {false, true}) {
    auto src = random_tiles(tiles, 11 + specials, specials);
    std::vector<std::byte> ref(tiles * tile_size_bytes(f)), fast(ref.size());
    pack_bfp_tiles_reference(src.data(), ref.data(), tiles, f);
    set_avx512_kernels_enabled(true);
    pack_bfp_tiles(src.data(), fast.data(), tiles, f);
    ASSERT_EQ(ref, fast);
    std::vector<float> dref(src.size()), dfast(src.size());
    unpack_bfp_tiles_reference(ref.data(), dref.data(), tiles, f);
    unpack_bfp_tiles(ref.data(), dfast.data(), tiles, f);
    for (size_t i = 0; i < src.size(); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(dref[i]), std::bit_cast<uint32_t>(dfast[i])) << i;
  }
}

TEST_P(BlockFloatFormats, RoundTripErrorIsBoundedByTheBlockMaximum) {
  DataType f = GetParam();
  const int w = bfp_mantissa_bits(f);
  auto src = random_tiles(4, 3, false);
  std::vector<std::byte> img(4 * tile_size_bytes(f));
  pack_bfp_tiles(src.data(), img.data(), 4, f);
  std::vector<float> back(src.size());
  unpack_bfp_tiles(img.data(), back.data(), 4, f);
  for (size_t b = 0; b < src.size() / 16; ++b) {
    float mx = 0;
    for (int i = 0; i < 16; ++i) mx = std::max(mx, std::fabs(src[b * 16 + i]));
    // Exponent of the block maximum; one unit in the last place of a W-bit magnitude.
    float ulp = std::ldexp(1.0f, std::ilogb(mx) - (w - 1));
    for (int i = 0; i < 16; ++i) ASSERT_LE(std::fabs(src[b * 16 + i] - back[b * 16 + i]), ulp) << b;
  }
  // Re-encoding decoded values is exact (idempotent).
  std::vector<std::byte> img2(img.size());
  pack_bfp_tiles(back.data(), img2.data(), 4, f);
  EXPECT_EQ(img, img2);
}

INSTANTIATE_TEST_SUITE_P(Formats, BlockFloatFormats,
                         ::testing::Values(DataType::BFLOAT8_B, DataType::BFLOAT4_B, DataType::BFLOAT2_B),
                         [](const auto& info) { return std::string(short_dtype_name_for_test(info.param)); });

// bfloat2_b: a sign and a 1-bit magnitude, so each element is 0 or +-2^(E-127)
// of its block's shared exponent E; rounding to nearest, ties to even.
TEST(BlockFloat, Bfloat2bRoundsToZeroOrTheBlockScale) {
  auto enc = [](float x, uint32_t shared) { return bfp_encode(std::bit_cast<uint32_t>(x), shared, kBfp2MantissaBits); };
  EXPECT_EQ(enc(1.0f, 127), 1);
  EXPECT_EQ(enc(1.49f, 127), 1);
  EXPECT_EQ(enc(1.99f, 127), 1);  // rounds to 2, saturates at 1 (the exponent is never bumped)
  EXPECT_EQ(enc(-1.0f, 127), 3);  // sign | 1
  EXPECT_EQ(enc(0.75f, 127), 1);  // 0.75 of the scale rounds up
  EXPECT_EQ(enc(0.5f, 127), 0);   // half: ties to even (0)
  EXPECT_EQ(enc(-0.5f, 127), 0);  // a zero magnitude drops the sign
  EXPECT_EQ(enc(0.3f, 127), 0);
  EXPECT_EQ(std::bit_cast<float>(bfp_decode(1, 127, kBfp2MantissaBits)), 1.0f);
  EXPECT_EQ(std::bit_cast<float>(bfp_decode(3, 130, kBfp2MantissaBits)), -8.0f);
  EXPECT_EQ(std::bit_cast<float>(bfp_decode(0, 130, kBfp2MantissaBits)), 0.0f);
  // Tile image: 64 exponent bytes, then four 2-bit elements per byte, the earliest lowest.
  std::vector<float> tile(1024, 0.0f);
  tile[0] = 1.0f, tile[1] = -1.0f, tile[3] = 1.0f, tile[16] = -2.0f, tile[1023] = 0.5f;
  std::vector<std::byte> img(tile_size_bytes(DataType::BFLOAT2_B));
  ASSERT_EQ(img.size(), 320u);
  pack_bfp_tiles(tile.data(), img.data(), 1, DataType::BFLOAT2_B);
  auto u8 = [&](size_t i) { return static_cast<uint8_t>(img[i]); };
  EXPECT_EQ(u8(0), 127);
  EXPECT_EQ(u8(1), 128);
  EXPECT_EQ(u8(64 + 0), 0b01'00'11'01);    // elements 0..3: 1, sign|1, 0, 1
  EXPECT_EQ(u8(64 + 4), 0b11);             // element 16: -2.0
  EXPECT_EQ(u8(64 + 255), 0b01'00'00'00);  // element 1023 in the top pair
  std::vector<float> back(1024);
  unpack_bfp_tiles(img.data(), back.data(), 1, DataType::BFLOAT2_B);
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[1], -1.0f);
  EXPECT_EQ(back[16], -2.0f);
  EXPECT_EQ(back[1023], 0.5f);
}

TEST(BlockFloat, TileSizes) {
  EXPECT_EQ(tile_size_bytes(DataType::BFLOAT8_B), 1088u);
  EXPECT_EQ(tile_size_bytes(DataType::BFLOAT4_B), 576u);
  EXPECT_EQ(tile_size_bytes(DataType::BFLOAT2_B), 320u);
  EXPECT_EQ(tile_size_bytes(DataType::FLOAT16), 2048u);
  EXPECT_EQ(tile_size_bytes(DataType::BFLOAT16), 2048u);
}

}  // namespace
}  // namespace tessera
