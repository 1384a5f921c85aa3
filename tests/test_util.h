// Helpers shared by tests: random host tensors and the memory configs every
// transfer and op is tested over.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gmock/gmock.h>

#include "tessera/tensor/tensor.h"
#include "test_macros.h"

namespace tessera::testing {

inline std::vector<float> random_values(size_t n, uint32_t seed, float scale = 4.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// A host tensor of random values; integer dtypes get small non-negative integers.
inline Tensor random_tensor(const Shape& shape, DataType dtype, Layout layout, uint32_t seed) {
  auto v = random_values(shape.volume(), seed);
  if (!is_floating(dtype))
    for (auto& x : v) x = std::fabs(std::round(x * 10));
  return Tensor::from_vector(v, shape, dtype, layout).value();
}

inline std::vector<std::byte> host_bytes(const Tensor& t) {
  return {t.host_data(), t.host_data() + t.spec().storage_bytes()};
}

// Element-wise |got - want| <= abs + rel * |want| over the logical values
// (NaN matches NaN, infinities must be equal); reports the first mismatches.
inline void expect_allclose(const Tensor& got, const Tensor& want, double rel, double abs) {
  ASSERT_TRUE(got.spec().same_data_format(want.spec())) << got.spec().to_string() << " vs " << want.spec().to_string();
  auto g = got.to_vector().value(), w = want.to_vector().value();
  int bad = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i]) && std::isnan(g[i])) continue;
    if (std::isinf(w[i]) && g[i] == w[i]) continue;
    if (!(std::fabs(double{g[i]} - w[i]) <= abs + rel * std::fabs(w[i])) && bad++ < 5)
      ADD_FAILURE() << "element " << i << ": got " << g[i] << ", reference " << w[i];
  }
  EXPECT_EQ(bad, 0);
}

// Overwrites a spread of `v`'s elements with NaN, +-Inf, -0.0 and
// (negative) denormals, every `stride` elements from `first`, cycling
// through the six: the special-value tests' inputs (compare with
// expect_allclose, which wants NaN where the reference is NaN and equal
// infinities).
inline void add_special_values(std::vector<float>& v, size_t first = 3, size_t stride = 97) {
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), -0.0f, 1e-40f, -3e-39f};
  for (size_t i = first, k = 0; i < v.size(); i += stride, ++k) v[i] = specials[k % std::size(specials)];
}

// The relative tolerance of a result rounded to `dt` after float32 math
// accurate to `f32_rel`: one ulp of bfloat16 (2^-7) for bfloat16.
inline double rounding_tolerance(DataType dt, double f32_rel) {
  return dt == DataType::BFLOAT16 ? std::ldexp(1.0, -7) : f32_rel;
}

// Pearson correlation of two equally long vectors (1 when both are constant).
inline double pcc(const std::vector<float>& a, const std::vector<float>& b) {
  double ma = 0, mb = 0;
  for (size_t i = 0; i < a.size(); ++i) ma += a[i], mb += b[i];
  ma /= static_cast<double>(a.size());
  mb /= static_cast<double>(b.size());
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    sab += (a[i] - ma) * (b[i] - mb);
    saa += (a[i] - ma) * (a[i] - ma);
    sbb += (b[i] - mb) * (b[i] - mb);
  }
  if (saa == 0 && sbb == 0) return 1.0;
  return sab / std::sqrt(saa * sbb);
}

// Convolution tolerance against the double reference on the device's
// operands: float32 compute 1e-4 * max(1, max|ref|) (accumulation order);
// bfloat16 2^-7 |ref| + 2^-9 max|ref| (one output rounding, float32 sums).
inline float conv_tolerance(DataType compute, float ref, float max_abs_ref) {
  return compute == DataType::FLOAT32 ? 1e-4f * std::max(1.0f, max_abs_ref)
                                      : std::ldexp(std::fabs(ref), -7) + std::ldexp(max_abs_ref, -9);
}

// A convolution's output against its double reference on the same operands:
// every element within conv_tolerance and PCC >= 0.9999.
inline void expect_conv_close(const std::vector<float>& got, const std::vector<float>& ref, DataType compute) {
  ASSERT_EQ(got.size(), ref.size());
  float mx = 0;
  for (float v : ref) mx = std::max(mx, std::fabs(v));
  size_t bad = 0;
  for (size_t i = 0; i < ref.size(); ++i)
    if (!(std::fabs(got[i] - ref[i]) <= conv_tolerance(compute, ref[i], mx)) && bad++ < 3)
      ADD_FAILURE() << "i=" << i << " got " << got[i] << " ref " << ref[i];
  EXPECT_EQ(bad, 0u);
  EXPECT_GE(pcc(got, ref), 0.9999);
}

inline MemoryConfig sharded(TensorMemoryLayout ml, BufferType bt, CoreRangeSet grid, uint32_t sh, uint32_t sw,
                            ShardOrientation o = ShardOrientation::ROW_MAJOR) {
  return MemoryConfig{ml, bt, ShardSpec{std::move(grid), {sh, sw}, o}};
}

struct NamedConfig {
  std::string name;
  MemoryConfig config;
};

// Memory configs of the native cpu device (a 1 x n grid, n >= 1, using at
// most 2 cores) for a tensor whose 2D view is `h` x `w`.
inline std::vector<NamedConfig> memory_configs_for(uint32_t h, uint32_t w, uint32_t grid_x) {
  const uint32_t n = grid_x >= 2 ? 2 : 1;
  const CoreRange cores({0, 0}, {n - 1, 0});
  using ML = TensorMemoryLayout;
  return {
      {"dram_interleaved", DRAM_MEMORY_CONFIG},
      {"l1_interleaved", L1_MEMORY_CONFIG},
      {"l1_height", sharded(ML::HEIGHT_SHARDED, BufferType::L1, cores, h / n, w)},
      {"l1_width", sharded(ML::WIDTH_SHARDED, BufferType::L1, cores, h, w / n)},
      {"l1_block", sharded(ML::BLOCK_SHARDED, BufferType::L1, cores, h, w / n)},
      {"l1_block_col", sharded(ML::BLOCK_SHARDED, BufferType::L1, cores, h / n, w, ShardOrientation::COL_MAJOR)},
      {"dram_height", sharded(ML::HEIGHT_SHARDED, BufferType::DRAM, CoreRange({0, 0}, {0, 0}), h, w)},
      {"dram_width", sharded(ML::WIDTH_SHARDED, BufferType::DRAM, CoreRange({0, 0}, {0, 0}), h, w)},
  };
}

// Wider shard grids for the 8x8 wormhole_b0 descriptor and its 12 DRAM banks.
inline std::vector<NamedConfig> wormhole_memory_configs_for(uint32_t h, uint32_t w) {
  using ML = TensorMemoryLayout;
  return {
      {"dram_interleaved", DRAM_MEMORY_CONFIG},
      {"l1_interleaved", L1_MEMORY_CONFIG},
      {"l1_height_two_ranges",
       sharded(ML::HEIGHT_SHARDED, BufferType::L1, CoreRangeSet({CoreRange({0, 0}, {1, 0}), CoreRange({5, 5})}), h / 3,
               w)},
      {"l1_width", sharded(ML::WIDTH_SHARDED, BufferType::L1, CoreRange({0, 0}, {2, 0}), h, w / 3)},
      {"l1_block", sharded(ML::BLOCK_SHARDED, BufferType::L1, CoreRange({1, 1}, {3, 2}), h / 2, w / 3)},
      {"l1_block_col", sharded(ML::BLOCK_SHARDED, BufferType::L1, CoreRange({0, 0}, {2, 1}), h / 3, w / 2,
                               ShardOrientation::COL_MAJOR)},
      {"dram_height", sharded(ML::HEIGHT_SHARDED, BufferType::DRAM, CoreRange({0, 0}, {2, 0}), h / 3, w)},
      {"dram_width", sharded(ML::WIDTH_SHARDED, BufferType::DRAM, CoreRange({0, 0}, {2, 0}), h, w / 3)},
  };
}

}  // namespace tessera::testing
