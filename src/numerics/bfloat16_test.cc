#include "tessera/numerics/bfloat16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "tessera/base/cpu_features.h"

namespace tessera {
namespace {

TEST(Bfloat16, RoundsToNearestEven) {
  EXPECT_EQ(float_to_bfloat16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly half way between 1 and 1 + 2^-7: ties to even (down).
  EXPECT_EQ(float_to_bfloat16(std::bit_cast<float>(0x3f808000u)), 0x3f80);
  // 1 + 3*2^-8 is half way between 1+2^-7 (odd) and 1+2^-6: ties to even (up).
  EXPECT_EQ(float_to_bfloat16(std::bit_cast<float>(0x3f818000u)), 0x3f82);
  EXPECT_EQ(float_to_bfloat16(std::bit_cast<float>(0x3f808001u)), 0x3f81);
  EXPECT_EQ(float_to_bfloat16(-2.5f), 0xc020);
}

TEST(Bfloat16, KeepsSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(float_to_bfloat16(inf), 0x7f80);
  EXPECT_EQ(float_to_bfloat16(-inf), 0xff80);
  EXPECT_EQ(float_to_bfloat16(0.0f), 0x0000);
  EXPECT_EQ(float_to_bfloat16(-0.0f), 0x8000);
  // A NaN whose payload is only in the low bits must not round to infinity.
  uint16_t n = float_to_bfloat16(std::bit_cast<float>(0x7f800001u));
  EXPECT_TRUE(std::isnan(bfloat16_to_float(n)));
  EXPECT_TRUE(std::isnan(bfloat16_to_float(float_to_bfloat16(std::bit_cast<float>(0xffffffffu)))));
  // The largest finite float rounds up to infinity, like any overflow.
  EXPECT_EQ(float_to_bfloat16(std::numeric_limits<float>::max()), 0x7f80);
  // Denormals are rounded, not flushed.
  EXPECT_EQ(float_to_bfloat16(std::bit_cast<float>(0x00018000u)), 0x0002);
}

TEST(Bfloat16, BulkMatchesScalarForEveryIsaPath) {
  std::mt19937 rng(7);
  std::vector<float> src(1003);
  for (auto& v : src) v = std::bit_cast<float>(static_cast<uint32_t>(rng()));
  // Scalar, AVX2 (the kernel set capped there) and AVX-512, as far as the CPU goes.
  for (KernelIsa isa : {KernelIsa::kScalar, KernelIsa::kAvx2, KernelIsa::kAvx512}) {
    set_kernel_isa_limit(isa);
    set_avx512_kernels_enabled(isa == KernelIsa::kAvx512);
    std::vector<uint16_t> out(src.size());
    float_to_bfloat16(src.data(), out.data(), src.size());
    std::vector<float> back(src.size());
    bfloat16_to_float(out.data(), back.data(), out.size());
    for (size_t i = 0; i < src.size(); ++i) {
      ASSERT_EQ(out[i], float_to_bfloat16(src[i])) << "i=" << i << " isa=" << kernel_isa_name(kernel_isa());
      ASSERT_EQ(std::bit_cast<uint32_t>(back[i]), uint32_t{out[i]} << 16);
    }
    // Strided rows (7 rows of 37 values, 41 apart, into rows 50 apart): the
    // same bits, and the gaps untouched.
    std::vector<uint16_t> rows(7 * 50, 0xAAAA);
    float_to_bfloat16_rows(src.data(), 41, rows.data(), 50, 7, 37);
    for (size_t r = 0; r < 7; ++r)
      for (size_t c = 0; c < 50; ++c)
        ASSERT_EQ(rows[r * 50 + c], c < 37 ? float_to_bfloat16(src[r * 41 + c]) : uint16_t{0xAAAA})
            << "r=" << r << " c=" << c << " isa=" << kernel_isa_name(kernel_isa());
  }
  set_kernel_isa_limit(KernelIsa::kAvx512);
  set_avx512_kernels_enabled(true);
}

}  // namespace
}  // namespace tessera
