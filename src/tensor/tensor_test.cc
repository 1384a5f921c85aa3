#include "tessera/tensor/tensor.h"

#include "test_util.h"

namespace tessera {
namespace {

TEST(TensorSpec, Geometry) {
  TensorSpec s{Shape{2, 3, 37, 33}, DataType::BFLOAT16, Layout::TILE};
  EXPECT_EQ(s.physical_height(), 2u * 3 * 64);
  EXPECT_EQ(s.physical_width(), 64u);
  EXPECT_EQ(s.unit_rows(), 12u);
  EXPECT_EQ(s.unit_cols(), 2u);
  EXPECT_EQ(s.storage_bytes(), 24u * 2048);
  TensorSpec r{Shape{2, 3, 37, 33}, DataType::FLOAT32, Layout::ROW_MAJOR};
  EXPECT_EQ(r.physical_height(), 2u * 3 * 37);
  EXPECT_EQ(r.storage_bytes(), 2u * 3 * 37 * 33 * 4);
  EXPECT_EQ(TensorSpec({Shape{1, 1, 64, 64}, DataType::BFLOAT8_B, Layout::TILE}).storage_bytes(), 4u * 1088);
  EXPECT_EQ(r.to_string(), "f32[2,3,37,33]:RM:DRAM/INTERLEAVED");
}

TEST(Tensor, LayoutAndDtypeRoundTripsOnHost) {
  Shape shape{2, 37, 45};
  auto values = testing::random_values(shape.volume(), 9);
  for (DataType dt : {DataType::FLOAT32, DataType::BFLOAT16}) {
    ASSERT_OK_AND_ASSIGN(Tensor rm, Tensor::from_vector(values, shape, dt));
    ASSERT_OK_AND_ASSIGN(Tensor tiled, host_to_layout(rm, Layout::TILE));
    ASSERT_OK_AND_ASSIGN(Tensor back, host_to_layout(tiled, Layout::ROW_MAJOR));
    EXPECT_EQ(testing::host_bytes(back), testing::host_bytes(rm));
    ASSERT_OK_AND_ASSIGN(auto v, tiled.to_vector());
    ASSERT_OK_AND_ASSIGN(auto w, rm.to_vector());
    EXPECT_EQ(v, w);
  }
  ASSERT_OK_AND_ASSIGN(Tensor f, Tensor::from_vector(values, shape, DataType::FLOAT32, Layout::TILE));
  EXPECT_ERROR(host_to_layout(*host_typecast(f, DataType::BFLOAT8_B), Layout::ROW_MAJOR),
               StatusCode::kInvalidArgument, "requires TILE layout");
  EXPECT_ERROR(Tensor::from_vector(values, Shape{3, 3}, DataType::FLOAT32), StatusCode::kInvalidArgument,
               "needs 9 values");
}

TEST(Tensor, DeallocateAndSharing) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  Tensor host = testing::random_tensor(Shape{32, 32}, DataType::FLOAT32, Layout::TILE, 1);
  ASSERT_OK_AND_ASSIGN(Tensor d, to_device(host, *dev, L1_MEMORY_CONFIG));
  ASSERT_OK(synchronize_device(*dev));
  ASSERT_OK_AND_ASSIGN(uint64_t addr, d.buffer_address());
  Tensor copy = d;
  deallocate(d);  // shared: not freed
  EXPECT_TRUE(d.is_allocated());
  deallocate(d, /*force=*/true);
  EXPECT_FALSE(copy.is_allocated());
  EXPECT_ERROR(copy.buffer_address(), StatusCode::kFailedPrecondition, "deallocated");
  EXPECT_ERROR(copy.cpu(), StatusCode::kFailedPrecondition, "has been deallocated");
  ASSERT_OK_AND_ASSIGN(Tensor again, allocate_tensor_on_device(d.spec(), *dev));
  EXPECT_EQ(*again.buffer_address(), addr);
  EXPECT_ERROR(host.buffer_address(), StatusCode::kFailedPrecondition, "on the host");
  EXPECT_TRUE(host.is_allocated());
  EXPECT_EQ(host.storage_type(), StorageType::HOST);
  EXPECT_EQ(again.storage_type(), StorageType::DEVICE);
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

TEST(TensorSpec, HugeDeclaredShapesAreRefused) {
  TensorSpec s{Shape{1u << 20, 1u << 20, 4096, 4096}, DataType::FLOAT32, Layout::TILE};
  EXPECT_ERROR(s.validate(), StatusCode::kInvalidArgument, "than Tessera supports");
  TensorSpec t{Shape{1u << 30, 1u << 12}, DataType::FLOAT32, Layout::ROW_MAJOR};  // 16 TiB
  EXPECT_ERROR(t.validate(), StatusCode::kInvalidArgument, "than Tessera supports");
  EXPECT_ERROR(allocate_tensor_on_device(s, *open_device({}).value()), StatusCode::kInvalidArgument, "supports");
}

}  // namespace
}  // namespace tessera
