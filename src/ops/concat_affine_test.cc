// concat_affine against its reference kernel: every ISA tier, float32 and
// bfloat16 in and out, input counts past one launch's, row counts off the
// kernel's row blocks, memory configs (interleaved over several banks,
// height-sharded), special values, and the errors.
#include "tessera/ops/concat_affine.h"

#include "tessera/base/cpu_features.h"
#include "tessera/ops/reference.h"
#include "test_util.h"

namespace tessera {
namespace {

struct Case {
  uint32_t rows;
  std::vector<uint32_t> widths;
  UnaryWithParam act;
};

// Exact activations match the reference bit for bit; the transcendental
// ones within the vector kernels' accuracy (eltwise.h).
bool exact(UnaryOpType op) {
  return op == UnaryOpType::IDENTITY || op == UnaryOpType::RELU || op == UnaryOpType::RELU6 ||
         op == UnaryOpType::LEAKY_RELU || op == UnaryOpType::CLIP;
}

void check_case(Device& dev, const Case& c, DataType in_type, DataType out_type, const MemoryConfig& mc, bool specials,
                uint32_t seed) {
  SCOPED_TRACE(fmt::format("{} rows, {} inputs, {}, {} -> {}", c.rows, c.widths.size(), unary_op_name(c.act.op),
                           data_type_name(in_type), data_type_name(out_type)));
  std::vector<Tensor> host, dev_in;
  uint32_t channels = 0;
  for (uint32_t w : c.widths) {
    std::vector<float> v = testing::random_values(size_t{c.rows} * w, seed++);
    if (specials) testing::add_special_values(v, channels % 7, 53);
    ASSERT_OK_AND_ASSIGN(Tensor h, Tensor::from_vector(v, Shape{1, 1, c.rows, w}, in_type));
    ASSERT_OK_AND_ASSIGN(Tensor d, to_device(h, dev, mc));
    host.push_back(h), dev_in.push_back(d);
    channels += w;
  }
  std::vector<float> scale = testing::random_values(channels, seed + 100, 1.5f),
                     shift = testing::random_values(channels, seed + 200, 1.0f);
  if (specials) scale[0] = -0.0f, shift[channels - 1] = std::numeric_limits<float>::infinity();
  ASSERT_OK_AND_ASSIGN(Tensor hs, Tensor::from_vector(scale, Shape{channels}, DataType::FLOAT32));
  ASSERT_OK_AND_ASSIGN(Tensor ht, Tensor::from_vector(shift, Shape{channels}, DataType::FLOAT32));
  ASSERT_OK_AND_ASSIGN(Tensor ds, to_device(hs, dev));
  ASSERT_OK_AND_ASSIGN(Tensor dt, to_device(ht, dev));
  ASSERT_OK_AND_ASSIGN(Tensor y, concat_affine(dev_in, ds, dt, c.act, out_type));
  ASSERT_OK_AND_ASSIGN(Tensor got, y.cpu());
  ASSERT_OK_AND_ASSIGN(Tensor want, reference::concat_affine(host, hs, ht, c.act, out_type));
  ASSERT_EQ(got.shape(), (Shape{1, 1, c.rows, channels}));
  if (exact(c.act.op))
    EXPECT_EQ(testing::host_bytes(got), testing::host_bytes(want));
  else
    testing::expect_allclose(got, want, testing::rounding_tolerance(out_type, 8 * 0x1p-23), 1e-6);
}

const Case kCases[] = {
    {37, {32, 32, 32}, {UnaryOpType::RELU}},    // a dense block's 32-channel layers, rows off the blocks
    {16, {64}, {UnaryOpType::IDENTITY}},        // one input: a batch norm alone
    {5, {3, 17, 1, 40}, {UnaryOpType::RELU6}},  // widths off the vectors
    {50, {16, 8, 24}, {UnaryOpType::LEAKY_RELU, 0.1f}},
    {9, {20, 12}, {UnaryOpType::SILU}},
    {12, {33, 15}, {UnaryOpType::GELU}},
    {7, {8, 8}, {UnaryOpType::CLIP, -1.0f, 0.5f, 2.0f, 0.25f}},  // clip, then an affine after it
    {3, std::vector<uint32_t>(70, 4), {UnaryOpType::RELU}},      // more inputs than one launch reads
};

TEST(ConcatAffine, MatchesReferenceOnEveryIsa) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  const DataType kTypes[] = {DataType::FLOAT32, DataType::BFLOAT16};
  for (KernelIsa isa : {KernelIsa::kAvx512, KernelIsa::kAvx2, KernelIsa::kScalar}) {
    set_kernel_isa_limit(isa);
    SCOPED_TRACE(kernel_isa_name(kernel_isa()));
    uint32_t seed = 1;
    for (const Case& c : kCases)
      for (DataType in : kTypes)
        for (DataType out : kTypes) check_case(*dev, c, in, out, DRAM_MEMORY_CONFIG, false, seed += 7);
  }
  set_kernel_isa_limit(KernelIsa::kAvx512);
}

TEST(ConcatAffine, KeepsSpecialValues) {
  // NaN stays NaN through the fma and relu (max(0, NaN) is NaN), +-Inf and
  // -0.0 follow IEEE arithmetic, denormals are kept, as the reference.
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  for (KernelIsa isa : {KernelIsa::kAvx512, KernelIsa::kAvx2, KernelIsa::kScalar}) {
    set_kernel_isa_limit(isa);
    SCOPED_TRACE(kernel_isa_name(kernel_isa()));
    for (UnaryOpType op : {UnaryOpType::IDENTITY, UnaryOpType::RELU, UnaryOpType::SIGMOID})
      for (DataType dt : {DataType::FLOAT32, DataType::BFLOAT16})
        check_case(*dev, {41, {32, 19, 64}, {op}}, dt, dt, DRAM_MEMORY_CONFIG, true, 5);
  }
  set_kernel_isa_limit(KernelIsa::kAvx512);
}

TEST(ConcatAffine, RowsInAnyMemoryConfig) {
  // wormhole_b0's DRAM interleaves rows over 12 banks (not evenly spaced);
  // height-sharded inputs are moved to DRAM first; L1 interleaved.
  ASSERT_OK_AND_ASSIGN(auto wh, open_device({.descriptor = "wormhole_b0"}));
  using ML = TensorMemoryLayout;
  const Case c{64, {32, 32}, {UnaryOpType::RELU}};
  check_case(*wh, c, DataType::FLOAT32, DataType::FLOAT32, DRAM_MEMORY_CONFIG, false, 3);
  check_case(*wh, c, DataType::BFLOAT16, DataType::FLOAT32, L1_MEMORY_CONFIG, false, 4);
  check_case(*wh, c, DataType::BFLOAT16, DataType::BFLOAT16,
             testing::sharded(ML::HEIGHT_SHARDED, BufferType::L1, CoreRange({0, 0}, {7, 0}), 8, 32), false, 5);
}

TEST(ConcatAffine, Errors) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  auto device_tensor = [&](Shape s, DataType dt, Layout layout = Layout::ROW_MAJOR) {
    return to_device(testing::random_tensor(s, dt, layout, 1), *dev).value();
  };
  const Tensor a = device_tensor(Shape{1, 1, 8, 16}, DataType::FLOAT32);
  const Tensor b = device_tensor(Shape{1, 1, 8, 16}, DataType::BFLOAT16);
  const Tensor taller = device_tensor(Shape{1, 1, 9, 16}, DataType::FLOAT32);
  const Tensor s32 = device_tensor(Shape{32}, DataType::FLOAT32), s16 = device_tensor(Shape{16}, DataType::FLOAT32);
  const UnaryWithParam relu{UnaryOpType::RELU};
  const Tensor two[] = {a, a}, mixed[] = {a, b}, uneven[] = {a, taller};
  EXPECT_OK(concat_affine(two, s32, s32, relu, DataType::FLOAT32).status());
  EXPECT_ERROR(concat_affine(std::span<const Tensor>{}, s32, s32, relu, DataType::FLOAT32),
               StatusCode::kInvalidArgument, "at least one input");
  EXPECT_ERROR(concat_affine(mixed, s32, s32, relu, DataType::FLOAT32), StatusCode::kInvalidArgument,
               "input 1 is bfloat16, expected float32 like input 0");
  EXPECT_ERROR(concat_affine(uneven, s32, s32, relu, DataType::FLOAT32), StatusCode::kInvalidArgument,
               "input 1 has shape [1,1,9,16], which differs from input 0's [1,1,8,16] outside the last dim");
  EXPECT_ERROR(concat_affine(two, s16, s32, relu, DataType::FLOAT32), StatusCode::kInvalidArgument,
               "expected scale as a ROW_MAJOR float32 tensor of 32 values");
  EXPECT_ERROR(concat_affine(two, s32, s32, relu, DataType::UINT32), StatusCode::kInvalidArgument,
               "expected a float32 or bfloat16 output, found uint32");
  const Tensor tiled[] = {device_tensor(Shape{32, 32}, DataType::FLOAT32, Layout::TILE)};
  EXPECT_ERROR(concat_affine(tiled, s32, s32, relu, DataType::FLOAT32), StatusCode::kInvalidArgument,
               "expected ROW_MAJOR float32 or bfloat16 inputs");
}

}  // namespace
}  // namespace tessera
