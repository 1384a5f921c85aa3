#include "tessera/numerics/tilize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "tessera/numerics/convert.h"

namespace tessera {
namespace {

TEST(Tilize, FaceOrderOfOneTile) {
  std::vector<uint32_t> m(32 * 32);
  for (uint32_t i = 0; i < m.size(); ++i) m[i] = i;
  std::vector<uint32_t> t(1024);
  tilize(reinterpret_cast<std::byte*>(m.data()), 32 * 4, 32, 32, reinterpret_cast<std::byte*>(t.data()), 4);
  EXPECT_EQ(t[0], 0u);           // face 0 row 0
  EXPECT_EQ(t[16], 32u);         // face 0 row 1
  EXPECT_EQ(t[256], 16u);        // face 1 row 0 = matrix (0, 16)
  EXPECT_EQ(t[512], 16u * 32);   // face 2 row 0 = matrix (16, 0)
  EXPECT_EQ(t[768], 16u * 32 + 16);
  for (uint32_t r = 0; r < 32; ++r)
    for (uint32_t c = 0; c < 32; ++c) ASSERT_EQ(t[tile_offset(r, c)], r * 32 + c);
}

TEST(Tilize, RoundTripWithPaddingForOddShapes) {
  for (uint32_t es : {1u, 2u, 4u}) {
    for (auto [rows, cols] : {std::pair{1u, 1u}, {31u, 33u}, {32u, 32u}, {37u, 64u}, {97u, 5u}, {64u, 127u}}) {
      std::vector<std::byte> m(size_t{rows} * cols * es);
      for (size_t i = 0; i < m.size(); ++i) m[i] = static_cast<std::byte>(i * 7 + 1);
      uint32_t tr = (rows + 31) / 32, tc = (cols + 31) / 32;
      std::vector<std::byte> t(size_t{tr} * tc * 1024 * es, std::byte{0xff});
      tilize(m.data(), cols * es, rows, cols, t.data(), es);
      // Padding is zero.
      size_t nonzero_pad = 0;
      for (uint32_t r = 0; r < tr * 32; ++r)
        for (uint32_t c = 0; c < tc * 32; ++c) {
          if (r < rows && c < cols) continue;
          size_t off = ((size_t{r / 32} * tc + c / 32) * 1024 + tile_offset(r % 32, c % 32)) * es;
          for (uint32_t b = 0; b < es; ++b) nonzero_pad += t[off + b] != std::byte{0};
        }
      EXPECT_EQ(nonzero_pad, 0u);
      std::vector<std::byte> back(m.size());
      untilize(t.data(), rows, cols, back.data(), cols * es, es);
      ASSERT_EQ(m, back) << rows << "x" << cols << " es=" << es;
    }
  }
}

TEST(Convert, IntegerRules) {
  EXPECT_EQ(float_to_integer(-3.7f, DataType::INT32), -3);
  EXPECT_EQ(float_to_integer(3.7f, DataType::UINT8), 3);
  EXPECT_EQ(float_to_integer(300.0f, DataType::UINT8), 255);
  EXPECT_EQ(float_to_integer(-1.0f, DataType::UINT16), 0);
  EXPECT_EQ(float_to_integer(NAN, DataType::INT32), 0);
  EXPECT_EQ(float_to_integer(1e20f, DataType::INT32), 2147483647);
  uint32_t big = 4000000001u;
  int32_t out = 0;
  convert_elements(reinterpret_cast<std::byte*>(&big), DataType::UINT32, reinterpret_cast<std::byte*>(&out),
                   DataType::INT32, 1);
  EXPECT_EQ(out, 2147483647);
  uint32_t exact = 16777217u, back = 0;
  convert_elements(reinterpret_cast<std::byte*>(&exact), DataType::UINT32, reinterpret_cast<std::byte*>(&back),
                   DataType::UINT32, 1);
  EXPECT_EQ(back, exact);
}

}  // namespace
}  // namespace tessera
