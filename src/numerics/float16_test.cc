// float16 (float16.h) bit for bit against GCC's _Float16 conversions: every
// half to float, and floats of every kind (normal, subnormal halves, ties,
// the overflow edge, NaN) to half.
#include "tessera/numerics/float16.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>

namespace tessera {
namespace {

uint16_t gcc_half(float f) { return std::bit_cast<uint16_t>(static_cast<_Float16>(f)); }

TEST(Float16, EveryHalfConvertsExactlyAndBack) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const auto bits = static_cast<uint16_t>(h);
    const float f = float16_to_float(bits);
    const float want = static_cast<float>(std::bit_cast<_Float16>(bits));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << h;
      ASSERT_EQ(std::signbit(f), std::signbit(want)) << h;
      ASSERT_TRUE(std::isnan(float16_to_float(float_to_float16(f))));
      continue;
    }
    ASSERT_EQ(std::bit_cast<uint32_t>(f), std::bit_cast<uint32_t>(want)) << h;
    ASSERT_EQ(float_to_float16(f), bits) << h;  // exact values come back
  }
}

TEST(Float16, RoundsToNearestEvenAsGcc) {
  const float cases[] = {0.0f,
                         -0.0f,
                         1.0f,
                         65504.0f,
                         65519.99f,
                         65520.0f,
                         1e6f,
                         -1e6f,
                         std::numeric_limits<float>::infinity(),
                         -std::numeric_limits<float>::infinity(),
                         0x1p-24f,
                         0x1p-25f,
                         0x1.8p-25f,
                         0x1p-26f,
                         0x1.0000p-14f,
                         0x1.ffcp-15f,
                         0x1.ffep-15f,
                         1.0f + 0x1p-11f,
                         1.0f + 0x3p-11f,
                         1.0f + 0x1p-11f + 0x1p-20f,
                         1e-45f,
                         3.14159265f};
  for (float f : cases) EXPECT_EQ(float_to_float16(f), gcc_half(f)) << f;
  std::mt19937 rng(7);
  for (int i = 0; i < 2000000; ++i) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(float16_to_float(float_to_float16(f))));
      continue;
    }
    ASSERT_EQ(float_to_float16(f), gcc_half(f)) << std::hexfloat << f;
  }
  // Values near the half range, densely.
  for (int i = 0; i < 200000; ++i) {
    const float f = std::ldexp(static_cast<float>(rng() % 100000) / 50000.0f - 1.0f, static_cast<int>(rng() % 46) - 30);
    ASSERT_EQ(float_to_float16(f), gcc_half(f)) << std::hexfloat << f;
  }
  EXPECT_EQ(round_to_float16(0.1f), static_cast<float>(static_cast<_Float16>(0.1f)));
}

}  // namespace
}  // namespace tessera
