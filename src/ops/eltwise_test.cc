// relu, add and typecast against their reference kernels: every dtype, every
// memory config they accept, odd and tile-edge shapes, both ISA paths.
// Tolerance: none. These ops round once from float32, exactly like the
// reference, so results must match bit for bit.
#include "tessera/ops/eltwise.h"

#include <cmath>
#include <cstring>

#include "tessera/base/cpu_features.h"
#include "tessera/ops/data_movement.h"
#include "tessera/ops/reference.h"
#include "test_util.h"

namespace tessera {
namespace {

const DataType kFloatTypes[] = {DataType::FLOAT32,   DataType::BFLOAT16,  DataType::FLOAT16,
                                DataType::BFLOAT8_B, DataType::BFLOAT4_B, DataType::BFLOAT2_B};

struct OpCase {
  std::string name;
  std::function<StatusOr<Tensor>(const Tensor&, const Tensor&)> device_op;
  std::function<StatusOr<Tensor>(const Tensor&, const Tensor&)> reference_op;
};

void check_against_reference(Device& dev, const std::vector<testing::NamedConfig>& configs, const Shape& shape,
                             DataType a_type, DataType b_type, Layout layout, const OpCase& op) {
  Tensor ha = testing::random_tensor(shape, a_type, layout, 1);
  Tensor hb = testing::random_tensor(shape, b_type, layout, 2);
  ASSERT_OK_AND_ASSIGN(Tensor expected, op.reference_op(ha, hb));
  for (const auto& c : configs) {
    SCOPED_TRACE(
        fmt::format("{} {} {} {} {}", op.name, shape.to_string(), data_type_name(a_type), layout_name(layout), c.name));
    auto da = to_device(ha, dev, c.config);
    ASSERT_TRUE(da.ok()) << da.status().to_string();
    ASSERT_OK_AND_ASSIGN(Tensor db, to_device(hb, dev, c.config));
    ASSERT_OK_AND_ASSIGN(Tensor out, op.device_op(*da, db));
    EXPECT_EQ(out.memory_config(), c.config);
    ASSERT_OK_AND_ASSIGN(Tensor got, out.cpu());
    ASSERT_EQ(got.spec().same_data_format(expected.spec()), true) << got.spec().to_string();
    ASSERT_EQ(testing::host_bytes(got), testing::host_bytes(expected));
  }
}

std::vector<OpCase> op_cases(DataType out) {
  return {
      {"relu", [=](const Tensor& a, const Tensor&) { return relu(a, {.dtype = out}); },
       [=](const Tensor& a, const Tensor&) { return reference::relu(a, out); }},
      {"add", [=](const Tensor& a, const Tensor& b) { return add(a, b, {.dtype = out}); },
       [=](const Tensor& a, const Tensor& b) { return reference::add(a, b, out); }},
      {"typecast", [=](const Tensor& a, const Tensor&) { return typecast(a, out); },
       [=](const Tensor& a, const Tensor&) { return reference::typecast(a, out); }},
  };
}

TEST(Eltwise, MatchesReferenceOnEveryMemoryConfig) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  auto configs = testing::memory_configs_for(128, 64, dev->descriptor().grid.x);
  for (bool avx512 : {true, false}) {
    set_avx512_kernels_enabled(avx512);
    for (DataType in : kFloatTypes)
      for (DataType out : kFloatTypes)
        for (Layout layout : {Layout::ROW_MAJOR, Layout::TILE}) {
          if ((is_block_float(in) || is_block_float(out)) && layout == Layout::ROW_MAJOR) continue;
          for (const auto& op : op_cases(out))
            check_against_reference(*dev, configs, Shape{2, 64, 64}, in,
                                    in == DataType::FLOAT32 ? DataType::BFLOAT16 : in, layout, op);
        }
  }
  set_avx512_kernels_enabled(true);
}

TEST(Eltwise, OddAndPrimeShapes) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.descriptor = "wormhole_b0"}));
  std::vector<testing::NamedConfig> interleaved = {{"dram", DRAM_MEMORY_CONFIG}, {"l1", L1_MEMORY_CONFIG}};
  for (Shape s : {Shape{1}, Shape{7}, Shape{31, 33}, Shape{3, 1, 97}, Shape{2, 5, 37, 41}, Shape{1, 1, 32, 1024}})
    for (DataType dt : kFloatTypes)
      for (Layout layout : {Layout::ROW_MAJOR, Layout::TILE}) {
        if (is_block_float(dt) && layout == Layout::ROW_MAJOR) continue;
        for (const auto& op : op_cases(dt)) check_against_reference(*dev, interleaved, s, dt, dt, layout, op);
      }
}

TEST(Eltwise, WormholeShardings) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.descriptor = "wormhole_b0"}));
  auto configs = testing::wormhole_memory_configs_for(192, 192);
  for (DataType dt : kFloatTypes)
    for (const auto& op : op_cases(dt))
      check_against_reference(*dev, configs, Shape{1, 3, 64, 192}, dt, dt, Layout::TILE, op);
}

TEST(Eltwise, SpecialValues) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  std::vector<float> v = {-1.0f, -0.0f, 0.0f, 2.5f, NAN, -NAN, INFINITY, -INFINITY, 1e-40f, -1e-40f, 3.0e38f, -7.0f};
  for (DataType dt : {DataType::FLOAT32, DataType::BFLOAT16, DataType::FLOAT16}) {
    ASSERT_OK_AND_ASSIGN(Tensor h, Tensor::from_vector(v, Shape{12}, dt));
    ASSERT_OK_AND_ASSIGN(Tensor d, to_device(h, *dev));
    ASSERT_OK_AND_ASSIGN(Tensor r, relu(d));
    ASSERT_OK_AND_ASSIGN(Tensor s, add(d, d));
    ASSERT_OK_AND_ASSIGN(Tensor rh, r.cpu());
    ASSERT_OK_AND_ASSIGN(Tensor sh, s.cpu());
    ASSERT_OK_AND_ASSIGN(Tensor er, reference::relu(h, dt));
    ASSERT_OK_AND_ASSIGN(Tensor es, reference::add(h, h, dt));
    EXPECT_EQ(testing::host_bytes(rh), testing::host_bytes(er));
    EXPECT_EQ(testing::host_bytes(sh), testing::host_bytes(es));
    ASSERT_OK_AND_ASSIGN(auto out, rh.to_vector());
    EXPECT_EQ(out[0], 0.0f);
    EXPECT_TRUE(std::signbit(out[1]));  // -0 passes through
    EXPECT_TRUE(std::isnan(out[4]) && std::isnan(out[5]));
    EXPECT_EQ(out[6], INFINITY);
    EXPECT_EQ(out[7], 0.0f);
  }
}

// float32 -> bfloat16 rounding in the fast kernels (a hardware conversion,
// with an exact path for vectors holding denormals, which it would flush)
// against the reference's: ties to even, the largest finite values rounding
// to infinity, NaN payloads quieted, denormals kept or rounded up to the
// smallest normal. The odd values sit among ordinary ones, so whole vectors
// take each path.
TEST(Eltwise, RoundsToBfloat16LikeTheReference) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  const uint32_t odd[] = {0x3f808000, 0x3f818000, 0xbf808000, 0x3f80c000, 0x7f7fffff, 0xff7fffff,
                          0x7f7f7fff, 0x7f800001, 0xff800001, 0x7fc00001, 0x7fbfffff, 0x00000001,
                          0x807fffff, 0x007fffff, 0x00008000, 0x00018000, 0x80000000, 0x7f800000};
  std::vector<float> v(100);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37f * static_cast<float>(i)) * 300.0f;
  for (size_t k = 0; k < std::size(odd); ++k) std::memcpy(&v[(k * 37) % 64], &odd[k], sizeof(float));
  ASSERT_OK_AND_ASSIGN(Tensor h, Tensor::from_vector(v, Shape{100}, DataType::FLOAT32));
  ASSERT_OK_AND_ASSIGN(Tensor zero, Tensor::from_vector(std::vector<float>(100, 0.0f), Shape{100}, DataType::FLOAT32));
  ASSERT_OK_AND_ASSIGN(Tensor d, to_device(h, *dev));
  ASSERT_OK_AND_ASSIGN(Tensor dz, to_device(zero, *dev));
  ASSERT_OK_AND_ASSIGN(Tensor cast, typecast(d, DataType::BFLOAT16));
  ASSERT_OK_AND_ASSIGN(Tensor sum, add(d, dz, {.dtype = DataType::BFLOAT16}));
  ASSERT_OK_AND_ASSIGN(Tensor expected_cast, reference::typecast(h, DataType::BFLOAT16));
  ASSERT_OK_AND_ASSIGN(Tensor expected_sum, reference::add(h, zero, DataType::BFLOAT16));
  ASSERT_OK_AND_ASSIGN(Tensor cast_h, cast.cpu());
  ASSERT_OK_AND_ASSIGN(Tensor sum_h, sum.cpu());
  EXPECT_EQ(testing::host_bytes(cast_h), testing::host_bytes(expected_cast));
  EXPECT_EQ(testing::host_bytes(sum_h), testing::host_bytes(expected_sum));
}

TEST(Typecast, IntegerConversions) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  const DataType all[] = {DataType::FLOAT32, DataType::BFLOAT16, DataType::UINT8,
                          DataType::UINT16,  DataType::UINT32,   DataType::INT32};
  std::vector<int64_t> ints = {0, 1, 255, 256, 65535, 65536, 16777217, 2147483647, 7, 300, 42, 1000};
  std::vector<float> floats = {-3.7f, 3.7f, 255.5f, 300.0f, -1.0f, 65536.0f, 1e10f, NAN, 0.5f, -0.5f, 7.0f, 2.0f};
  for (DataType from : all) {
    Tensor h = is_floating(from) ? Tensor::from_vector(floats, Shape{3, 4}, from).value()
                                 : Tensor::from_integers(ints, Shape{3, 4}, from).value();
    for (DataType to : all) {
      for (Layout layout : {Layout::ROW_MAJOR, Layout::TILE}) {
        SCOPED_TRACE(fmt::format("{} -> {} {}", data_type_name(from), data_type_name(to), layout_name(layout)));
        ASSERT_OK_AND_ASSIGN(Tensor hl, host_to_layout(h, layout));
        ASSERT_OK_AND_ASSIGN(Tensor d, to_device(hl, *dev));
        ASSERT_OK_AND_ASSIGN(Tensor out, typecast(d, to));
        ASSERT_OK_AND_ASSIGN(Tensor got, out.cpu());
        ASSERT_OK_AND_ASSIGN(Tensor expected, reference::typecast(hl, to));
        ASSERT_EQ(testing::host_bytes(got), testing::host_bytes(expected));
      }
    }
  }
}

TEST(Eltwise, Errors) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  Tensor h = testing::random_tensor(Shape{32, 32}, DataType::FLOAT32, Layout::TILE, 1);
  EXPECT_ERROR(relu(h), StatusCode::kInvalidArgument, "must be a device tensor, found a host tensor");
  ASSERT_OK_AND_ASSIGN(Tensor a, to_device(h, *dev));
  ASSERT_OK_AND_ASSIGN(Tensor b,
                       to_device(testing::random_tensor(Shape{32, 64}, DataType::FLOAT32, Layout::TILE, 1), *dev));
  EXPECT_ERROR(add(a, b), StatusCode::kInvalidArgument, "add: shapes [32,32] and [32,64] do not broadcast");
  ASSERT_OK_AND_ASSIGN(Tensor row,
                       to_device(testing::random_tensor(Shape{1, 32}, DataType::FLOAT32, Layout::TILE, 1), *dev));
  EXPECT_ERROR(add(a, row), StatusCode::kUnimplemented, "broadcasting needs ROW_MAJOR operands");
  ASSERT_OK_AND_ASSIGN(Tensor i,
                       to_device(testing::random_tensor(Shape{32, 32}, DataType::INT32, Layout::TILE, 1), *dev));
  EXPECT_ERROR(relu(i), StatusCode::kInvalidArgument, "expected input to have a floating dtype");
  ASSERT_OK_AND_ASSIGN(Tensor rm,
                       to_device(testing::random_tensor(Shape{4, 4}, DataType::FLOAT32, Layout::ROW_MAJOR, 1), *dev));
  EXPECT_ERROR(typecast(rm, DataType::BFLOAT8_B), StatusCode::kInvalidArgument, "requires TILE layout");
  deallocate(a, true);
  EXPECT_ERROR(relu(a), StatusCode::kFailedPrecondition, "has been deallocated");
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// Tensors big enough that launches are split into chunks over the worker
// threads (>= 256 KiB per chunk): the split must not change a bit.
TEST(Eltwise, LargeTensorsSplitOverWorkers) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.worker_threads = 3}));
  const Shape shape{1, 3, 320, 1024};
  for (DataType dt : {DataType::FLOAT32, DataType::BFLOAT8_B}) {
    Tensor ha = testing::random_tensor(shape, dt, Layout::TILE, 1);
    Tensor hb = testing::random_tensor(shape, dt, Layout::TILE, 2);
    ASSERT_OK_AND_ASSIGN(Tensor a, to_device(ha, *dev));
    ASSERT_OK_AND_ASSIGN(Tensor b, to_device(hb, *dev));
    ASSERT_OK_AND_ASSIGN(Tensor s, add(a, b));
    ASSERT_OK_AND_ASSIGN(Tensor r, relu(s));
    ASSERT_OK_AND_ASSIGN(Tensor got, r.cpu());
    ASSERT_OK_AND_ASSIGN(Tensor es, reference::add(ha, hb, dt));
    ASSERT_OK_AND_ASSIGN(Tensor er, reference::relu(es, dt));
    EXPECT_EQ(testing::host_bytes(got), testing::host_bytes(er)) << data_type_name(dt);
  }
  Tensor rm = testing::random_tensor(shape, DataType::FLOAT32, Layout::ROW_MAJOR, 3);
  ASSERT_OK_AND_ASSIGN(Tensor d, to_device(rm, *dev));
  ASSERT_OK_AND_ASSIGN(Tensor t, tilize(d, {.dtype = DataType::BFLOAT16}));
  ASSERT_OK_AND_ASSIGN(Tensor got, t.cpu());
  ASSERT_OK_AND_ASSIGN(Tensor expected, reference::tilize(rm, DataType::BFLOAT16));
  EXPECT_EQ(testing::host_bytes(got), testing::host_bytes(expected));
}

}  // namespace
}  // namespace tessera
