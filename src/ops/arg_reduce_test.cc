// argmax / argmin against their reference kernel, exactly: many shapes (rows
// longer than a read chunk included), float32 and bfloat16 (whose rounding
// makes ties), both memory configs, both tie rules, and the special values.
#include "tessera/ops/arg_reduce.h"

#include "tessera/base/cpu_features.h"
#include "tessera/ops/reference.h"
#include "test_util.h"

namespace tessera {
namespace {

std::vector<float> values(const Tensor& t) { return t.cpu().value().to_vector().value(); }

TEST(ArgReduce, MatchesReference) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  for (bool avx512 : {true, false})
    for (const Shape& s :
         {Shape{1, 1}, Shape{3, 7}, Shape{1, 5, 6, 21}, Shape{4, 16}, Shape{2, 33}, Shape{2, 1000}, Shape{2, 2500}})
      for (DataType dt : {DataType::FLOAT32, DataType::BFLOAT16})
        for (bool specials : {false, true}) {
          std::vector<float> v = testing::random_values(s.volume(), 5, 3.0f);
          for (size_t i = 0; i < v.size(); i += 3) v[i] = std::round(v[i]);  // ties
          if (specials) testing::add_special_values(v, 2, 13);
          Tensor h = Tensor::from_vector(v, s, dt).value();
          set_avx512_kernels_enabled(avx512);
          for (const MemoryConfig& mc : {DRAM_MEMORY_CONFIG, L1_MEMORY_CONFIG})
            for (bool max : {true, false})
              for (bool last : {false, true}) {
                SCOPED_TRACE(fmt::format("{} {} specials={} max={} last={} {} avx512={}", s.to_string(),
                                         data_type_name(dt), specials, max, last,
                                         mc.buffer_type == BufferType::L1 ? "L1" : "DRAM", avx512));
                ASSERT_OK_AND_ASSIGN(Tensor d, to_device(h, *dev, mc));
                const ArgReduceParams p{.select_last_index = last};
                ASSERT_OK_AND_ASSIGN(Tensor y, max ? argmax(d, p) : argmin(d, p));
                ASSERT_OK_AND_ASSIGN(Tensor want, reference::arg_reduce(h, max, last));
                EXPECT_EQ(y.shape(), want.shape());
                EXPECT_EQ(y.dtype(), DataType::FLOAT32);
                EXPECT_EQ(values(y), want.to_vector().value());
              }
        }
  set_avx512_kernels_enabled(true);
}

// What the rules mean on hand-made rows: the first of equal values (the
// last with select_last_index), -0.0 equal to 0.0, a NaN anywhere named.
TEST(ArgReduce, TiesAndNaN) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> rows = {1,     3, 3,    0,  //
                                   -0.0f, 0, -inf, -inf, 2, nan, 5, nan, inf, 1, inf, -1};
  ASSERT_OK_AND_ASSIGN(Tensor d, to_device(Tensor::from_vector(rows, Shape{4, 4}, DataType::FLOAT32).value(), *dev));
  EXPECT_EQ(values(argmax(d).value()), (std::vector<float>{1, 0, 1, 0}));
  EXPECT_EQ(values(argmax(d, {.select_last_index = true}).value()), (std::vector<float>{2, 1, 3, 2}));
  EXPECT_EQ(values(argmin(d).value()), (std::vector<float>{3, 2, 1, 3}));
  EXPECT_EQ(values(argmin(d, {.select_last_index = true}).value()), (std::vector<float>{3, 3, 3, 3}));
}

TEST(ArgReduce, Errors) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  Tensor h = testing::random_tensor(Shape{2, 32, 32}, DataType::FLOAT32, Layout::ROW_MAJOR, 1);
  EXPECT_ERROR(argmax(h), StatusCode::kInvalidArgument, "argmax");
  ASSERT_OK_AND_ASSIGN(Tensor tiles, to_device(host_to_layout(h, Layout::TILE).value(), *dev));
  EXPECT_ERROR(argmin(tiles), StatusCode::kUnimplemented, "argmin: expected a ROW_MAJOR input");
  ASSERT_OK_AND_ASSIGN(
      Tensor ints,
      to_device(Tensor::from_vector(std::vector<float>(8, 1), Shape{2, 4}, DataType::UINT32).value(), *dev));
  EXPECT_ERROR(argmax(ints), StatusCode::kUnimplemented, "expected a float32 or bfloat16 input, found uint32");
  // Indices past 2^24 are not exact in float32 (the rows are never read).
  ASSERT_OK_AND_ASSIGN(Tensor wide, allocate_tensor_on_device(TensorSpec{Shape{1, (1u << 24) + 1}, DataType::BFLOAT16,
                                                                         Layout::ROW_MAJOR, DRAM_MEMORY_CONFIG},
                                                              *dev));
  EXPECT_ERROR(argmax(wide), StatusCode::kInvalidArgument, "expected a last dim of 1 to 2^24 values");
}

}  // namespace
}  // namespace tessera
