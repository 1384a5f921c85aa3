// where against its reference kernel, bit for bit: broadcasting of each
// operand (leading dims, size-1 dims, a last dim of 1, scalars), rows longer
// than a read chunk, float32 and bfloat16 in and out, DRAM and L1, special
// values in the operands (a NaN payload, -0.0, +-Inf, denormals) and in the
// condition (NaN counts as true), and the errors.
#include "tessera/ops/select.h"

#include <cstring>

#include "tessera/ops/reference.h"
#include "test_util.h"

namespace tessera {
namespace {

struct Case {
  Shape cond, a, b;
};

// A condition of 1 / 0 with some other nonzero values and NaNs.
std::vector<float> condition(size_t n, uint32_t seed) {
  std::vector<float> v = testing::random_values(n, seed);
  for (size_t i = 0; i < n; ++i) v[i] = v[i] > 0 ? 1.0f : 0.0f;
  for (size_t i = 3; i < n; i += 11) v[i] = i % 2 ? -0.0f : 2.5f;  // -0.0 is false
  for (size_t i = 5; i < n; i += 17) v[i] = std::numeric_limits<float>::quiet_NaN();
  return v;
}

TEST(Where, MatchesReferenceBitForBit) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  float payload;
  const uint32_t bits = 0x7fc01234u;  // a NaN with a payload
  std::memcpy(&payload, &bits, 4);
  const Case cases[] = {
      {Shape{2, 3, 5}, Shape{2, 3, 5}, Shape{2, 3, 5}},
      {Shape{1, 1, 4, 7}, Shape{2, 3, 4, 7}, Shape{1}},  // a mask over heads; a scalar
      {Shape{2, 1, 7}, Shape{7}, Shape{2, 6, 1}},        // every operand broadcasts
      {Shape{3, 1}, Shape{1, 1500}, Shape{3, 1500}},     // rows past a read chunk
      {Shape{1}, Shape{4, 1, 9}, Shape{1, 5, 9}},
      {Shape{2, 2, 2, 2, 2, 3}, Shape{2, 1, 2, 1, 2, 3}, Shape{3}},
  };
  uint32_t seed = 1;
  for (const Case& c : cases)
    for (DataType in : {DataType::FLOAT32, DataType::BFLOAT16})
      for (DataType out : {DataType::FLOAT32, DataType::BFLOAT16})
        for (const MemoryConfig& mc : {DRAM_MEMORY_CONFIG, L1_MEMORY_CONFIG}) {
          SCOPED_TRACE(fmt::format("{} {} {} {} -> {} {}", c.cond.to_string(), c.a.to_string(), c.b.to_string(),
                                   data_type_name(in), data_type_name(out),
                                   mc.buffer_type == BufferType::L1 ? "L1" : "DRAM"));
          std::vector<float> va = testing::random_values(c.a.volume(), ++seed),
                             vb = testing::random_values(c.b.volume(), ++seed);
          testing::add_special_values(va, 1, 7);
          testing::add_special_values(vb, 2, 5);
          va[0] = payload;
          const Tensor hc = Tensor::from_vector(condition(c.cond.volume(), ++seed), c.cond, in).value();
          const Tensor ha = Tensor::from_vector(va, c.a, in).value(), hb = Tensor::from_vector(vb, c.b, in).value();
          ASSERT_OK_AND_ASSIGN(Tensor dc, to_device(hc, *dev, mc));
          ASSERT_OK_AND_ASSIGN(Tensor da, to_device(ha, *dev, mc));
          ASSERT_OK_AND_ASSIGN(Tensor db, to_device(hb, *dev, mc));
          ASSERT_OK_AND_ASSIGN(Tensor y, where(dc, da, db, {.dtype = out}));
          ASSERT_OK_AND_ASSIGN(Tensor want, reference::where(hc, ha, hb, out));
          ASSERT_OK_AND_ASSIGN(Tensor got, y.cpu());
          EXPECT_EQ(got.shape(), want.shape());
          EXPECT_EQ(got.dtype(), out);
          EXPECT_EQ(testing::host_bytes(got), testing::host_bytes(want));
        }
}

// The chosen value passes unchanged: the NaN payload, -0.0 and Inf of the
// operand the condition picks, NaN conditions picking `a`.
TEST(Where, ChosenValuesPassUnchanged) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  float payload;
  const uint32_t bits = 0xffc0abcdu;
  std::memcpy(&payload, &bits, 4);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> c = {1, 0, nan, -0.0f, 7, 0};
  const std::vector<float> a = {payload, 1, -0.0f, 2, -inf, 3};
  const std::vector<float> b = {4, -0.0f, 5, payload, 6, inf};
  const std::vector<float> want = {payload, -0.0f, -0.0f, payload, -inf, inf};
  auto dev_tensor = [&](const std::vector<float>& v) {
    return to_device(Tensor::from_vector(v, Shape{6}, DataType::FLOAT32).value(), *dev).value();
  };
  ASSERT_OK_AND_ASSIGN(Tensor y, where(dev_tensor(c), dev_tensor(a), dev_tensor(b)));
  const std::vector<float> got = y.cpu().value().to_vector().value();
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0);
}

TEST(Where, Errors) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  auto make = [&](const Shape& s, Layout l = Layout::ROW_MAJOR) {
    return to_device(testing::random_tensor(s, DataType::FLOAT32, l, 3), *dev).value();
  };
  const Tensor x = make(Shape{2, 3}), wide = make(Shape{2, 4});
  const Status shapes = where(x, x, wide).status();
  EXPECT_EQ(shapes.code(), StatusCode::kInvalidArgument) << shapes.to_string();
  const Status tiled = where(x, make(Shape{32, 32}, Layout::TILE), x).status();
  EXPECT_EQ(tiled.code(), StatusCode::kUnimplemented);
  EXPECT_NE(tiled.message().find("ROW_MAJOR"), std::string::npos) << tiled.message();
  const Status host =
      where(testing::random_tensor(Shape{2, 3}, DataType::FLOAT32, Layout::ROW_MAJOR, 1), x, x).status();
  EXPECT_FALSE(host.ok());
  EXPECT_EQ(where(x, x, x, {.dtype = DataType::UINT32}).status().code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace tessera
