// conv2d against the reference kernel run on the operands the device uses
// (inputs as stored, weights rounded by round_conv2d_weights).
// Tolerances: float32 compute: |d| <= 1e-4 * max(1, max|ref|) (accumulation
// order differs from the double reference); bfloat16 output: |d| <= 2^-7 *
// |ref| + 2^-9 * max|ref| (one bfloat16 rounding of the output, float32
// accumulation). Every case also needs PCC >= 0.9999.
#include "tessera/ops/conv2d.h"

#include <cmath>

#include "tessera/base/cpu_features.h"
#include "tessera/device/device.h"
#include "tessera/device/profiler.h"
#include "tessera/numerics/bfloat16.h"
#include "tessera/numerics/float16.h"
#include "tessera/ops/data_movement.h"
#include "tessera/ops/manipulation.h"
#include "tessera/ops/reference.h"
#include "test_util.h"

namespace tessera {
namespace {

struct Case {
  uint32_t n, h, w, c, k, kh, kw, stride, dilation, groups;
  std::array<uint32_t, 4> pad;
  UnaryOpType act = UnaryOpType::IDENTITY;
  float scale = 1.0f, shift = 0.0f;  // the activation's affine
};

Conv2dParams to_params(const Case& c) {
  Conv2dParams p;
  p.batch_size = c.n;
  p.input_height = c.h;
  p.input_width = c.w;
  p.in_channels = c.c;
  p.out_channels = c.k;
  p.kernel_size = {c.kh, c.kw};
  p.stride = {c.stride, c.stride};
  p.dilation = {c.dilation, c.dilation};
  p.padding = c.pad;
  p.groups = c.groups;
  p.activation = {c.act, 0.1f, c.scale, c.shift};
  return p;
}

void check_case(Device& dev, const Case& cs, DataType in_type, DataType w_type, const MemoryConfig& mc) {
  const Conv2dParams p = to_params(cs);
  SCOPED_TRACE(
      fmt::format("{} in={} w={} {}", p.descriptor(), data_type_name(in_type), data_type_name(w_type), mc.to_string()));
  Tensor x = testing::random_tensor(Shape{cs.n, cs.h, cs.w, cs.c}, in_type, Layout::ROW_MAJOR, 1);
  auto wv = testing::random_values(uint64_t{cs.k} * (cs.c / cs.groups) * cs.kh * cs.kw, 2, 0.2f);
  ASSERT_OK_AND_ASSIGN(Tensor w,
                       Tensor::from_vector(wv, Shape{cs.k, cs.c / cs.groups, cs.kh, cs.kw}, DataType::FLOAT32));
  ASSERT_OK_AND_ASSIGN(Tensor b, Tensor::from_vector(testing::random_values(cs.k, 3), Shape{cs.k}, DataType::FLOAT32));
  ASSERT_OK_AND_ASSIGN(Tensor dx, to_device(x, dev, mc));
  ASSERT_OK_AND_ASSIGN(Conv2dResult r, conv2d(dx, w, b, p, {.weights_dtype = w_type}));
  EXPECT_EQ(r.output_height, p.output_height());
  EXPECT_EQ(r.output_width, p.output_width());
  ASSERT_OK_AND_ASSIGN(Tensor got_t, r.output.cpu());
  ASSERT_OK_AND_ASSIGN(std::vector<float> got, got_t.to_vector());
  ASSERT_OK_AND_ASSIGN(Tensor rw, round_conv2d_weights(w, p, w_type, in_type));
  ASSERT_OK_AND_ASSIGN(Tensor ref_t, reference::conv2d(x, rw, b, p, DataType::FLOAT32));
  ASSERT_OK_AND_ASSIGN(std::vector<float> ref, ref_t.to_vector());
  testing::expect_conv_close(got, ref, in_type);
  // Prepared weights are reused bit for bit.
  ASSERT_OK_AND_ASSIGN(Conv2dResult again, conv2d(dx, r.weights, p, {.weights_dtype = w_type}));
  ASSERT_OK_AND_ASSIGN(Tensor again_t, again.output.cpu());
  EXPECT_EQ(testing::host_bytes(again_t), testing::host_bytes(got_t));
}

// The reference of a float32 conv at LoFi on AMX: the input and weights
// (`wt`, as prepared) rounded to bfloat16, float32 accumulation and output.
StatusOr<Tensor> lofi_reference(const Tensor& x, const Tensor& w, const std::optional<Tensor>& b, const Conv2dParams& p,
                                DataType wt = DataType::FLOAT32) {
  TS_ASSIGN_OR_RETURN(std::vector<float> xv, x.to_vector());
  TS_ASSIGN_OR_RETURN(Tensor xb, Tensor::from_vector(xv, x.shape(), DataType::BFLOAT16));
  TS_ASSIGN_OR_RETURN(Tensor rw, round_conv2d_weights(w, p, wt, DataType::BFLOAT16));
  return reference::conv2d(xb, rw, b, p, DataType::FLOAT32);
}

// The kernel of the first conv2d launch in the device's profile, or "" (reading the profile clears it).
std::string conv_kernel_run(Device& dev) {
  auto prof = read_profile(dev);
  if (prof.ok())
    for (const OpTiming& t : prof->ops)
      if (t.kernel_name.starts_with("f32_conv2d") || t.kernel_name.starts_with("bf16_conv2d")) return t.kernel_name;
  return "";
}

// check_case with the profiler on, then the kernel it ran.
void expect_conv_kernel(Device& dev, const Case& c, DataType in, DataType w, const MemoryConfig& mc,
                        std::string_view kernel) {
  ASSERT_OK(enable_profiler(dev));
  check_case(dev, c, in, w, mc);
  EXPECT_EQ(conv_kernel_run(dev), kernel);
}

// A conv with a fused residual (`post` after the add) against the reference
// conv, then the reference add, on float32 rows; `kernel` gets the kernel it
// ran.
void check_residual_case(Device& dev, const Case& cs, UnaryOpType post, std::string& kernel) {
  const Conv2dParams p = to_params(cs);
  Tensor x = testing::random_tensor(Shape{cs.n, cs.h, cs.w, cs.c}, DataType::FLOAT32, Layout::ROW_MAJOR, 4);
  ASSERT_OK_AND_ASSIGN(Tensor w,
                       Tensor::from_vector(testing::random_values(uint64_t{cs.k} * cs.c * cs.kh * cs.kw, 5, 0.2f),
                                           Shape{cs.k, cs.c, cs.kh, cs.kw}, DataType::FLOAT32));
  ASSERT_OK_AND_ASSIGN(Tensor b, Tensor::from_vector(testing::random_values(cs.k, 6), Shape{cs.k}, DataType::FLOAT32));
  const Shape out{cs.n, cs.h, cs.w, cs.k};
  Tensor res = testing::random_tensor(out, DataType::FLOAT32, Layout::ROW_MAJOR, 7);
  ASSERT_OK_AND_ASSIGN(Tensor dx, to_device(x, dev));
  ASSERT_OK_AND_ASSIGN(Tensor dres, to_device(res, dev));
  ASSERT_OK(enable_profiler(dev));
  ASSERT_OK_AND_ASSIGN(Conv2dResult r, conv2d_with_residual(dx, w, b, p, Conv2dResidual{dres, {post}},
                                                            {.weights_dtype = DataType::FLOAT32}));
  kernel = conv_kernel_run(dev);
  ASSERT_OK_AND_ASSIGN(Tensor got_t, r.output.cpu());
  ASSERT_OK_AND_ASSIGN(std::vector<float> got, got_t.to_vector());
  ASSERT_OK_AND_ASSIGN(Tensor conv_t, reference::conv2d(x, w, b, p, DataType::FLOAT32));
  ASSERT_OK_AND_ASSIGN(Tensor conv_r, conv_t.view(out));
  ASSERT_OK_AND_ASSIGN(Tensor ref_t, reference::binary(conv_r, res, BinaryOpType::ADD, {post}, DataType::FLOAT32));
  ASSERT_OK_AND_ASSIGN(std::vector<float> ref, ref_t.to_vector());
  testing::expect_conv_close(got, ref, DataType::FLOAT32);
}

const Case kCases[] = {
    {1, 9, 11, 8, 16, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::RELU},
    {1, 14, 14, 64, 32, 1, 1, 1, 1, 1, {0, 0, 0, 0}},                          // pointwise
    {2, 13, 7, 5, 7, 3, 3, 2, 1, 1, {1, 1, 1, 1}, UnaryOpType::SILU},          // batch, stride 2, odd/prime
    {1, 17, 19, 16, 16, 3, 3, 1, 2, 1, {2, 2, 2, 2}, UnaryOpType::GELU},       // dilation
    {1, 12, 12, 32, 32, 3, 3, 1, 1, 32, {1, 1, 1, 1}, UnaryOpType::RELU6},     // depthwise
    {1, 10, 10, 16, 32, 3, 3, 2, 1, 4, {0, 1, 0, 1}, UnaryOpType::HARDSWISH},  // groups, asymmetric pad
    {1, 8, 8, 3, 32, 7, 7, 2, 1, 1, {3, 3, 3, 3}, UnaryOpType::LEAKY_RELU},    // stem-like
    {1, 6, 6, 8, 8, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::HARDSIGMOID},    // activation applied after
    {1, 6, 6, 8, 8, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::SIGMOID},
    {1, 6, 6, 8, 8, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::MISH},
    // Kernels shorter than their stride, split by rows: each shard also reads its unused rows.
    {1, 16, 16, 32, 48, 1, 1, 2, 1, 1, {0, 0, 0, 0}},
    {1, 17, 15, 24, 32, 1, 1, 2, 1, 1, {0, 0, 0, 0}, UnaryOpType::RELU},
    {2, 26, 25, 8, 16, 2, 2, 3, 1, 1, {0, 0, 0, 0}},
};

TEST(Conv2d, MatchesReferenceFloat32AndBfloat16) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  for (const Case& c : kCases) {
    check_case(*dev, c, DataType::FLOAT32, DataType::FLOAT32, DRAM_MEMORY_CONFIG);
    check_case(*dev, c, DataType::BFLOAT16, DataType::BFLOAT16, DRAM_MEMORY_CONFIG);
  }
}

// An affine after the activation (y * scale + shift, PP-LCNet's learnable
// affine blocks) on every kernel family, on each ISA set: oneDNN (its
// eltwise_linear post-op), the depthwise kernels, the direct kernels, the
// narrow kernel, Winograd and the activations oneDNN lacks (applied after);
// with a residual added after it. Against the reference kernel, whose
// activation applies the same affine in double.
TEST(Conv2d, ActivationAffineOnEveryKernel) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  const Case cases[] = {
      {1, 9, 11, 8, 16, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::HARDSWISH, 1.5f, 0.25f},
      {1, 12, 12, 32, 32, 3, 3, 1, 1, 32, {1, 1, 1, 1}, UnaryOpType::HARDSWISH, -0.75f, 0.5f},  // depthwise
      {1, 13, 13, 48, 48, 3, 3, 2, 1, 48, {1, 1, 1, 1}, UnaryOpType::RELU6, 0.5f, 0.0f},        // depthwise s2
      {1, 20, 22, 96, 96, 5, 5, 1, 1, 96, {2, 2, 2, 2}, UnaryOpType::HARDSWISH, 1.25f, -0.5f},  // depthwise 5x5
      {1, 4, 4, 1024, 512, 1, 1, 1, 1, 1, {0, 0, 0, 0}, UnaryOpType::RELU, 2.0f, -1.0f},        // direct (AVX-512)
      {1, 20, 24, 32, 1, 1, 1, 1, 1, 1, {0, 0, 0, 0}, UnaryOpType::SIGMOID, 0.5f, 0.125f},      // narrow
      {1, 14, 14, 32, 32, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::RELU, 1.0f, 0.75f},         // direct (AVX2)
      {1, 6, 6, 8, 8, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::HARDSIGMOID, 3.0f, -1.0f},      // applied after
  };
  for (KernelIsa isa : {KernelIsa::kAvx512, KernelIsa::kAvx2, KernelIsa::kScalar}) {
    set_kernel_isa_limit(isa);
    SCOPED_TRACE(kernel_isa_name(kernel_isa()));
    for (const Case& c : cases) {
      check_case(*dev, c, DataType::FLOAT32, DataType::FLOAT32, DRAM_MEMORY_CONFIG);
      check_case(*dev, c, DataType::BFLOAT16, DataType::BFLOAT16, DRAM_MEMORY_CONFIG);
    }
  }
  set_kernel_isa_limit(KernelIsa::kAvx512);
  // Winograd (HiFi2) with the affine: a case of WinogradBelowHiFi4.
  const Conv2dParams wp = to_params({1, 16, 16, 32, 32, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::SILU, 0.5f, 1.0f});
  // The affine is part of the program key: the same conv without it is another program.
  Conv2dParams plain = wp;
  plain.activation = plain.activation.without_affine();
  EXPECT_NE(plain.descriptor(), wp.descriptor());
  EXPECT_THAT(wp.descriptor(), ::testing::EndsWith(":silu*0.5+1"));
}

// bfloat16 results that are float32 denormals: the AVX-512 depthwise kernel
// rounds with vcvtneps2bf16, which flushes those to zero, and redoes such
// output rows with the exact rounding. Its results match the reference
// kernel's within one bfloat16 ulp, denormals kept (one ulp of a bfloat16
// denormal is 2^-133; a flushed output would be off by up to 2^-126):
// bfloat16 compute on a 7x7 map, and float32 compute with a bfloat16 output
// on a 14x14 one, both on Tessera's kernel.
TEST(Conv2d, DepthwiseBfloat16KeepsDenormals) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  struct DenormalCase {
    Case c;
    DataType in, weights;
  };
  const DenormalCase cases[] = {
      {{1, 7, 7, 96, 96, 3, 3, 1, 1, 96, {1, 1, 1, 1}, UnaryOpType::RELU6}, DataType::BFLOAT16, DataType::BFLOAT16},
      {{1, 14, 14, 40, 40, 3, 3, 1, 1, 40, {1, 1, 1, 1}, UnaryOpType::IDENTITY}, DataType::FLOAT32, DataType::FLOAT32},
  };
  for (const DenormalCase& dc : cases) {
    const Conv2dParams p = to_params(dc.c);
    SCOPED_TRACE(p.descriptor());
    const uint32_t c = dc.c.c;
    // Inputs around 1e-38 (float32's smallest normal is 1.2e-38) and
    // weights up to 0.2 (bfloat16 values, so that the reference sees the
    // weights the kernel does): most outputs are denormal.
    std::vector<float> xv = testing::random_values(uint64_t{dc.c.h} * dc.c.w * c, 21, 1.0f);
    for (float& v : xv) v *= 1e-38f;
    std::vector<float> wv = testing::random_values(uint64_t{c} * 9, 22, 0.2f);
    for (float& v : wv) v = round_to_bfloat16(v);
    ASSERT_OK_AND_ASSIGN(Tensor x, Tensor::from_vector(xv, Shape{1, dc.c.h, dc.c.w, c}, dc.in));
    ASSERT_OK_AND_ASSIGN(Tensor w, Tensor::from_vector(wv, Shape{c, 1, 3, 3}, DataType::FLOAT32));
    ASSERT_OK_AND_ASSIGN(Tensor dx, to_device(x, *dev));
    ASSERT_OK(enable_profiler(*dev));
    ASSERT_OK_AND_ASSIGN(Conv2dResult r,
                         conv2d(dx, w, std::nullopt, p, {.weights_dtype = dc.weights, .dtype = DataType::BFLOAT16}));
    ASSERT_OK_AND_ASSIGN(DeviceProfile prof, read_profile(*dev));
    ASSERT_OK(disable_profiler(*dev));
    ASSERT_FALSE(prof.ops.empty());
    // Tessera's kernel of the tier this CPU runs (bfloat16 rows out take it on AVX2 too).
    EXPECT_EQ(prof.ops.back().kernel_name,
              fmt::format("{}_depthwise2d__{}", short_dtype_name(dc.in), kernel_isa_name(kernel_isa())));
    ASSERT_OK_AND_ASSIGN(std::vector<float> got, r.output.cpu().value().to_vector());
    ASSERT_OK_AND_ASSIGN(Tensor ref_t, reference::conv2d(x, w, std::nullopt, p, DataType::BFLOAT16));
    ASSERT_OK_AND_ASSIGN(std::vector<float> ref, ref_t.to_vector());
    ASSERT_EQ(got.size(), ref.size());
    const auto denormals =
        std::count_if(ref.begin(), ref.end(), [](float f) { return std::fpclassify(f) == FP_SUBNORMAL; });
    EXPECT_GT(denormals, static_cast<long>(ref.size() / 4));
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_LE(std::fabs(got[i] - ref[i]), std::ldexp(1.0f, -133) + std::ldexp(std::fabs(ref[i]), -7))
          << "output " << i << ": " << got[i] << " against " << ref[i];
  }
}

// With float32 compute and the AVX-512 set, 3x3 depthwise convolutions of
// stride 1, and 3x3 ones of stride 2 up to 14x14 outputs, run Tessera's
// direct AVX-512 path, other shapes up to 14x14 outputs its staged path
// (the portable loop past 7x7), the others oneDNN's; with bfloat16 compute
// the same shapes; on AVX2-only CPUs every one
// with bfloat16 rows in or out runs Tessera's AVX2 kernel; below AVX2,
// oneDNN's. Each ISA set in turn, over: strides, dilation, asymmetric
// padding, odd and > 1024 channel counts (with bfloat16 rows: groups of 32
// channels in pairs order, then a partial group or 16 or fewer in order, or
// those alone), batches, every activation class,
// both dtypes and block-float weights, rows whose last block of eight
// pixels is partial, rows of blocks of seven (widths 7 divides and 8 does
// not), blocks inside the map at both strides, a 5x3 kernel,
// a 7x7 kernel (the largest the staged path blocks) and a 9x9 one (its
// portable fallback), and 5-wide kernels on the direct path (3- and 5-wide
// stride-1 kernels take it on every map).
TEST(Conv2d, DepthwiseOwnKernel) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  const Case cases[] = {
      {1, 14, 14, 37, 37, 3, 3, 1, 1, 37, {1, 1, 1, 1}, UnaryOpType::RELU6},
      {2, 11, 9, 16, 16, 3, 3, 2, 1, 16, {1, 1, 1, 1}, UnaryOpType::SILU},
      {1, 7, 7, 1100, 1100, 3, 3, 1, 1, 1100, {1, 1, 1, 1}, UnaryOpType::IDENTITY},
      {1, 13, 12, 24, 24, 5, 5, 2, 2, 24, {4, 3, 4, 3}, UnaryOpType::HARDSWISH},
      {1, 10, 10, 32, 32, 3, 3, 1, 1, 32, {0, 1, 0, 1}, UnaryOpType::HARDSIGMOID},
      {1, 30, 30, 16, 16, 3, 3, 1, 1, 16, {1, 1, 1, 1}, UnaryOpType::RELU6},  // larger map: oneDNN's kernel
      {1, 14, 13, 20, 20, 7, 7, 1, 1, 20, {3, 3, 3, 3}, UnaryOpType::RELU},
      {2, 23, 21, 8, 8, 9, 9, 2, 1, 8, {4, 4, 4, 4}, UnaryOpType::SILU},
      {1, 27, 25, 48, 48, 3, 3, 2, 2, 48, {2, 1, 2, 1}, UnaryOpType::GELU},
      {2, 5, 37, 19, 19, 3, 3, 2, 1, 19, {1, 1, 1, 1}, UnaryOpType::RELU6},  // stride 2, blocks inside
      {2, 9, 29, 40, 40, 3, 3, 1, 1, 40, {0, 0, 1, 1}, UnaryOpType::LEAKY_RELU},
      {1, 16, 20, 24, 24, 5, 3, 1, 1, 24, {2, 2, 1, 1}, UnaryOpType::MISH},
      {2, 28, 28, 40, 40, 3, 3, 2, 1, 40, {1, 1, 1, 1}, UnaryOpType::RELU6},  // stride 2, 7-pixel blocks (14 wide)
      {1, 9, 21, 33, 33, 3, 3, 1, 1, 33, {1, 1, 1, 1}, UnaryOpType::SILU},    // 7-pixel blocks, three per row
      {1, 11, 19, 56, 56, 3, 3, 1, 1, 56, {1, 1, 1, 1}, UnaryOpType::RELU6},  // 32 channels, then a partial pair
      {1, 12, 12, 56, 56, 3, 3, 2, 1, 56, {1, 1, 1, 1}, UnaryOpType::RELU6},
      // 5-wide kernels on the direct path: stride 1 in row pairs (an odd
      // row count leaves one alone), blocks inside and at both edges, a
      // partial last block, asymmetric padding, stride 2, 5x3 taps and 7x5,
      // a larger map (past depthwise_max_pixels: stride 1 stays direct),
      // channels in pairs and a partial group.
      {2, 13, 29, 40, 40, 5, 5, 1, 1, 40, {2, 2, 2, 2}, UnaryOpType::RELU},
      {1, 21, 37, 56, 56, 5, 5, 2, 1, 56, {2, 2, 2, 2}, UnaryOpType::HARDSWISH},
      {1, 14, 14, 72, 72, 5, 5, 2, 1, 72, {1, 2, 2, 1}, UnaryOpType::RELU6},
      {1, 9, 17, 24, 24, 3, 5, 1, 1, 24, {1, 2, 1, 2}, UnaryOpType::SILU},
      {2, 12, 11, 33, 33, 7, 5, 2, 1, 33, {3, 2, 3, 2}, UnaryOpType::IDENTITY},
      {1, 40, 44, 120, 120, 5, 5, 1, 1, 120, {2, 2, 2, 2}, UnaryOpType::RELU},
  };
  for (KernelIsa isa : {KernelIsa::kAvx512, KernelIsa::kAvx2, KernelIsa::kScalar}) {
    set_kernel_isa_limit(isa);
    SCOPED_TRACE(kernel_isa_name(kernel_isa()));
    for (const Case& c : cases)
      for (DataType in : {DataType::FLOAT32, DataType::BFLOAT16})
        check_case(*dev, c, in, in == DataType::FLOAT32 ? DataType::FLOAT32 : DataType::BFLOAT8_B, DRAM_MEMORY_CONFIG);
    if (kernel_isa() == KernelIsa::kAvx512) {
      // bfloat16 compute: Tessera's kernel on the shapes float32 takes it
      // (7x7x1100, 14x14x37), oneDNN's on stride 2 past 14x14 outputs.
      const Case stride2{1, 30, 30, 16, 16, 3, 3, 2, 1, 16, {1, 1, 1, 1}, UnaryOpType::RELU6};
      for (const auto& [c, own] : {std::pair{cases[2], true}, std::pair{cases[0], true}, std::pair{stride2, false}}) {
        ASSERT_OK(enable_profiler(*dev));
        check_case(*dev, c, DataType::BFLOAT16, DataType::BFLOAT16, DRAM_MEMORY_CONFIG);
        ASSERT_OK_AND_ASSIGN(DeviceProfile prof, read_profile(*dev));
        ASSERT_OK(disable_profiler(*dev));
        ASSERT_FALSE(prof.ops.empty());
        EXPECT_EQ(prof.ops.back().kernel_name == "bf16_depthwise2d__avx512", own) << prof.ops.back().kernel_name;
      }
      // 5-wide stride 1 on a map past depthwise_max_pixels: the direct path, not oneDNN's.
      ASSERT_OK(enable_profiler(*dev));
      check_case(*dev, cases[std::size(cases) - 1], DataType::FLOAT32, DataType::FLOAT32, DRAM_MEMORY_CONFIG);
      ASSERT_OK_AND_ASSIGN(DeviceProfile prof, read_profile(*dev));
      ASSERT_OK(disable_profiler(*dev));
      ASSERT_FALSE(prof.ops.empty());
      EXPECT_EQ(prof.ops.back().kernel_name, "f32_depthwise2d__avx512");
    }
    // Input and output rows spread over the L1 banks (no uniform row
    // stride: Tessera's kernels find each pixel's address per unit).
    check_case(*dev, cases[0], DataType::FLOAT32, DataType::FLOAT32, L1_MEMORY_CONFIG);
    check_case(*dev, cases[1], DataType::BFLOAT16, DataType::BFLOAT16, L1_MEMORY_CONFIG);
    // Float32 input, bfloat16 output: the kernel rounds as it stores.
    const Conv2dParams p = to_params(cases[0]);
    Tensor x = testing::random_tensor(Shape{1, 14, 14, 37}, DataType::FLOAT32, Layout::ROW_MAJOR, 11);
    ASSERT_OK_AND_ASSIGN(
        Tensor w, Tensor::from_vector(testing::random_values(37 * 9, 12, 0.2f), Shape{37, 1, 3, 3}, DataType::FLOAT32));
    ASSERT_OK_AND_ASSIGN(Tensor dx, to_device(x, *dev));
    ASSERT_OK_AND_ASSIGN(Conv2dResult r, conv2d(dx, w, std::nullopt, p,
                                                {.weights_dtype = DataType::FLOAT32, .dtype = DataType::BFLOAT16}));
    EXPECT_EQ(r.output.dtype(), DataType::BFLOAT16);
    ASSERT_OK_AND_ASSIGN(Tensor got_t, r.output.cpu());
    ASSERT_OK_AND_ASSIGN(std::vector<float> got, got_t.to_vector());
    ASSERT_OK_AND_ASSIGN(Tensor ref_t, reference::conv2d(x, w, std::nullopt, p, DataType::FLOAT32));
    ASSERT_OK_AND_ASSIGN(std::vector<float> ref, ref_t.to_vector());
    testing::expect_conv_close(got, ref, DataType::BFLOAT16);
    // bfloat16 input, float32 output (the unpacked 16-channel blocks put
    // their halves back in channel order as they store); a bfloat16 input
    // computes with bfloat16-rounded weights, hence its tolerance.
    const Conv2dParams q = to_params(cases[8]);
    Tensor xb = testing::random_tensor(Shape{1, 27, 25, 48}, DataType::BFLOAT16, Layout::ROW_MAJOR, 13);
    ASSERT_OK_AND_ASSIGN(Tensor wb, Tensor::from_vector(testing::random_values(48 * 9, 14, 0.2f), Shape{48, 1, 3, 3},
                                                        DataType::FLOAT32));
    ASSERT_OK_AND_ASSIGN(Tensor dxb, to_device(xb, *dev));
    ASSERT_OK_AND_ASSIGN(Conv2dResult rb, conv2d(dxb, wb, std::nullopt, q,
                                                 {.weights_dtype = DataType::FLOAT32, .dtype = DataType::FLOAT32}));
    EXPECT_EQ(rb.output.dtype(), DataType::FLOAT32);
    ASSERT_OK_AND_ASSIGN(Tensor got_b, rb.output.cpu());
    ASSERT_OK_AND_ASSIGN(Tensor ref_b, reference::conv2d(xb, wb, std::nullopt, q, DataType::FLOAT32));
    testing::expect_conv_close(got_b.to_vector().value(), ref_b.to_vector().value(), DataType::BFLOAT16);
  }
  set_kernel_isa_limit(KernelIsa::kAvx512);
}

TEST(Conv2d, BlockFloatWeights) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  for (const Case& c : {kCases[0], kCases[1], kCases[5]}) {
    for (DataType w : {DataType::BFLOAT8_B, DataType::BFLOAT4_B, DataType::BFLOAT2_B, DataType::FLOAT16}) {
      check_case(*dev, c, DataType::BFLOAT16, w, DRAM_MEMORY_CONFIG);
      check_case(*dev, c, DataType::FLOAT32, w, DRAM_MEMORY_CONFIG);
    }
  }
  // float16 weights are rounded to nearest even half precision, no more.
  const Conv2dParams p = to_params(kCases[0]);
  const std::vector<float> wv = testing::random_values(16 * 8 * 9, 5, 3.0f);
  ASSERT_OK_AND_ASSIGN(Tensor w, Tensor::from_vector(wv, Shape{16, 8, 3, 3}, DataType::FLOAT32));
  ASSERT_OK_AND_ASSIGN(Tensor r, round_conv2d_weights(w, p, DataType::FLOAT16, DataType::FLOAT32));
  ASSERT_OK_AND_ASSIGN(std::vector<float> rv, r.to_vector());
  size_t moved = 0;
  for (size_t i = 0; i < wv.size(); ++i) {
    EXPECT_EQ(rv[i], round_to_float16(wv[i])) << i;
    moved += rv[i] != wv[i];
  }
  EXPECT_GT(moved, wv.size() / 2);
}

// NaN and infinities in the input reach the output as the reference's
// (and ONNX's, PyTorch's) do: an output whose window holds a NaN is NaN
// after every activation, a ReLU of +Inf is +Inf. On every kind of kernel
// (oneDNN's, Tessera's direct, depthwise and narrow ones), at each tier,
// with and without a fused residual and its activation.
TEST(Conv2d, NanAndInfinityPropagateThroughEveryActivation) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.worker_threads = 2}));
  const Case shapes[] = {
      {1, 20, 20, 16, 32, 3, 3, 1, 1, 1, {1, 1, 1, 1}},   // oneDNN (rows3x3 / direct on some tiers)
      {1, 14, 14, 64, 64, 1, 1, 1, 1, 1, {0, 0, 0, 0}},   // 1x1
      {1, 12, 12, 32, 32, 3, 3, 1, 1, 32, {1, 1, 1, 1}},  // depthwise
      {1, 13, 11, 48, 48, 5, 5, 2, 1, 48, {2, 2, 2, 2}},  // depthwise, 5 wide
      {1, 20, 24, 32, 1, 1, 1, 1, 1, 1, {0, 0, 0, 0}},    // narrow head
      {1, 4, 4, 1024, 512, 1, 1, 1, 1, 1, {0, 0, 0, 0}},  // direct (AVX-512)
  };
  const UnaryOpType acts[] = {UnaryOpType::IDENTITY,   UnaryOpType::RELU,      UnaryOpType::RELU6,
                              UnaryOpType::SILU,       UnaryOpType::SIGMOID,   UnaryOpType::TANH,
                              UnaryOpType::GELU,       UnaryOpType::HARDSWISH, UnaryOpType::HARDSIGMOID,
                              UnaryOpType::LEAKY_RELU, UnaryOpType::MISH,      UnaryOpType::ELU,
                              UnaryOpType::ERF,        UnaryOpType::NEG,       UnaryOpType::ABS,
                              UnaryOpType::RECIPROCAL, UnaryOpType::GELU_TANH};
  const KernelIsa native = kernel_isa();
  for (KernelIsa isa : {KernelIsa::kAvx512, KernelIsa::kAvx2}) {
    set_kernel_isa_limit(isa);
    if (kernel_isa() != isa) continue;
    for (const Case& base : shapes)
      for (UnaryOpType act : acts)
        for (bool residual : {false, true}) {
          if (residual && base.groups > 1) continue;
          Case cs = base;
          cs.act = act;
          Conv2dParams p = to_params(cs);
          if (act == UnaryOpType::LEAKY_RELU) p.activation.param = 0.01f;
          if (act == UnaryOpType::ELU) p.activation.param = 1.0f;
          SCOPED_TRACE(fmt::format("{} {} residual {}", kernel_isa_name(isa), p.descriptor(), residual));
          std::vector<float> xv = testing::random_values(uint64_t{cs.h} * cs.w * cs.c, 1, 1.0f);
          xv[5 * cs.c + 3] = NAN;
          xv[(cs.h * cs.w / 2) * cs.c + 1] = INFINITY;
          xv[(cs.h * cs.w - 3) * cs.c] = -INFINITY;
          ASSERT_OK_AND_ASSIGN(Tensor x, Tensor::from_vector(xv, Shape{1, cs.h, cs.w, cs.c}, DataType::FLOAT32));
          // Non-negative weights and bias: infinities keep their sign through the sums.
          std::vector<float> wv = testing::random_values(uint64_t{cs.k} * (cs.c / cs.groups) * cs.kh * cs.kw, 2, 0.2f);
          for (float& v : wv) v = std::fabs(v) + 0.01f;
          ASSERT_OK_AND_ASSIGN(Tensor w,
                               Tensor::from_vector(wv, Shape{cs.k, cs.c / cs.groups, cs.kh, cs.kw}, DataType::FLOAT32));
          ASSERT_OK_AND_ASSIGN(Tensor dx, to_device(x, *dev));
          const uint32_t rows = cs.h * cs.w;
          std::vector<float> rv = testing::random_values(uint64_t{rows} * cs.k, 7, 1.0f);
          rv[2] = NAN;
          ASSERT_OK_AND_ASSIGN(Tensor res, Tensor::from_vector(rv, Shape{1, 1, rows, cs.k}, DataType::FLOAT32));
          ASSERT_OK_AND_ASSIGN(Tensor dres, to_device(res, *dev));
          Conv2dResult r;
          if (residual) {
            ASSERT_OK_AND_ASSIGN(
                r, conv2d_with_residual(dx, w, std::nullopt, p, Conv2dResidual{dres, p.activation, false}));
          } else {
            ASSERT_OK_AND_ASSIGN(r, conv2d(dx, w, std::nullopt, p));
          }
          ASSERT_OK_AND_ASSIGN(std::vector<float> got, r.output.cpu().value().to_vector());
          ASSERT_OK_AND_ASSIGN(Tensor ref_t, reference::conv2d(x, w, std::nullopt, p, DataType::FLOAT32));
          ASSERT_OK_AND_ASSIGN(std::vector<float> ref, ref_t.to_vector());
          if (residual)
            for (size_t i = 0; i < ref.size(); ++i)
              ref[i] = static_cast<float>(apply_activation(p.activation, double{ref[i]} + rv[i]));
          ASSERT_EQ(got.size(), ref.size());
          int bad = 0;
          for (size_t i = 0; i < ref.size() && bad < 3; ++i) {
            const bool same = std::isnan(ref[i])   ? std::isnan(got[i])
                              : std::isinf(ref[i]) ? got[i] == ref[i]
                                                   : std::isfinite(got[i]);
            if (!same) {
              ++bad;
              ADD_FAILURE() << unary_op_name(act) << " output " << i << ": " << got[i] << ", reference " << ref[i];
            }
          }
        }
  }
  set_kernel_isa_limit(native);
}

// The conv launch's kernel in a profile (the conversions around it are other ops).
std::string conv_kernel_name(const DeviceProfile& prof) {
  for (const OpTiming& op : prof.ops)
    if (op.kernel_name.find("conv") != std::string::npos || op.kernel_name.find("depthwise") != std::string::npos)
      return op.kernel_name;
  return "";
}

// conv2d converts tiles in and out around a kernel of Tessera's own (which
// reads and writes rows) and leaves them to oneDNN's (which reads tiles and
// tilizes itself): it asks the selection which runs the rows. Whatever the
// layout, the same kernel runs and the output tiles hold the rows' values.
TEST(Conv2d, TilesInAndOutRunTheRowsKernel) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.worker_threads = 2}));
  const Case cases[] = {
      {1, 12, 12, 32, 32, 3, 3, 1, 1, 32, {1, 1, 1, 1}, UnaryOpType::RELU},    // depthwise
      {1, 14, 14, 32, 32, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::RELU},     // direct / rows3x3 / oneDNN
      {1, 20, 24, 32, 2, 1, 1, 1, 1, 1, {0, 0, 0, 0}, UnaryOpType::IDENTITY},  // narrow
      {2, 7, 9, 144, 24, 1, 1, 1, 1, 1, {0, 0, 0, 0}, UnaryOpType::RELU6},     // padded output channels
  };
  const KernelIsa native = kernel_isa();
  for (KernelIsa isa : {KernelIsa::kAvx512, KernelIsa::kAvx2}) {
    set_kernel_isa_limit(isa);
    if (kernel_isa() != isa) continue;
    SCOPED_TRACE(kernel_isa_name(isa));
    for (const Case& c : cases)
      for (DataType dt : {DataType::FLOAT32, DataType::BFLOAT16}) {
        SCOPED_TRACE(fmt::format("{}x{} {} -> {} groups {} {}", c.kh, c.kw, c.c, c.k, c.groups, data_type_name(dt)));
        const Conv2dParams p = to_params(c);
        const uint32_t rows = c.n * c.h * c.w;
        Tensor x = testing::random_tensor(Shape{1, 1, rows, c.c}, dt, Layout::ROW_MAJOR, 1);
        ASSERT_OK_AND_ASSIGN(
            Tensor w, Tensor::from_vector(testing::random_values(uint64_t{c.k} * c.c / c.groups * c.kh * c.kw, 2, 0.1f),
                                          Shape{c.k, c.c / c.groups, c.kh, c.kw}, DataType::FLOAT32));
        ASSERT_OK_AND_ASSIGN(Tensor dx, to_device(x, *dev));
        ASSERT_OK(enable_profiler(*dev));
        ASSERT_OK_AND_ASSIGN(Conv2dResult base, conv2d(dx, w, std::nullopt, p));
        ASSERT_OK_AND_ASSIGN(DeviceProfile rows_prof, read_profile(*dev));
        const std::string kernel = conv_kernel_name(rows_prof);
        ASSERT_FALSE(kernel.empty());
        ASSERT_OK_AND_ASSIGN(Tensor want, to_layout(base.output, Layout::TILE));
        ASSERT_OK_AND_ASSIGN(Tensor tiled, to_layout(dx, Layout::TILE));
        ASSERT_OK(read_profile(*dev).status());
        ASSERT_OK_AND_ASSIGN(Conv2dResult r, conv2d(tiled, base.weights, p, {.output_layout = Layout::TILE}));
        ASSERT_OK_AND_ASSIGN(DeviceProfile tiles_prof, read_profile(*dev));
        EXPECT_EQ(conv_kernel_name(tiles_prof), kernel);
        EXPECT_EQ(r.output.layout(), Layout::TILE);
        EXPECT_EQ(testing::host_bytes(r.output.cpu().value()), testing::host_bytes(want.cpu().value()));
        ASSERT_OK(disable_profiler(*dev));
      }
  }
  set_kernel_isa_limit(native);
}

// Float32 1x1 convs with output channels not a multiple of 16 (under 64)
// compute them padded to one on AVX-512 (zero weights, in pixel chunks) and
// keep the real ones: every way in and out gives the reference's values, and
// the plain rows' bytes where the dtype is the same.
TEST(Conv2d, NarrowOutputsMatchEveryWayInAndOut) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.worker_threads = 2}));
  for (uint32_t cout : {24u, 8u, 40u}) {
    SCOPED_TRACE(fmt::format("cout {}", cout));
    const Case c{2, 23, 19, 144, cout, 1, 1, 1, 1, 1, {0, 0, 0, 0}, UnaryOpType::RELU6};
    const Conv2dParams p = to_params(c);
    ASSERT_OK(enable_profiler(*dev));
    check_case(*dev, c, DataType::FLOAT32, DataType::FLOAT32, DRAM_MEMORY_CONFIG);
    ASSERT_OK_AND_ASSIGN(DeviceProfile prof, read_profile(*dev));
    ASSERT_FALSE(prof.ops.empty());
    if (kernel_isa() == KernelIsa::kAvx512) {
      EXPECT_TRUE(prof.ops.back().kernel_name.ends_with("_chunked"));
    }
    const uint32_t rows = c.n * c.h * c.w;
    Tensor x = testing::random_tensor(Shape{1, 1, rows, c.c}, DataType::FLOAT32, Layout::ROW_MAJOR, 1);
    ASSERT_OK_AND_ASSIGN(Tensor w, Tensor::from_vector(testing::random_values(uint64_t{cout} * c.c, 2, 0.1f),
                                                       Shape{cout, c.c, 1, 1}, DataType::FLOAT32));
    ASSERT_OK_AND_ASSIGN(Tensor b,
                         Tensor::from_vector(testing::random_values(cout, 3), Shape{cout}, DataType::FLOAT32));
    ASSERT_OK_AND_ASSIGN(Tensor dx, to_device(x, *dev));
    ASSERT_OK_AND_ASSIGN(Conv2dResult base, conv2d(dx, w, b, p));
    ASSERT_OK_AND_ASSIGN(Tensor base_host, base.output.cpu());
    const auto want = testing::host_bytes(base_host);
    // Tiles in; height-sharded rows out (staged and scattered); tiles out.
    ASSERT_OK_AND_ASSIGN(Tensor tiled, to_layout(dx, Layout::TILE));
    ASSERT_OK_AND_ASSIGN(Conv2dResult from_tiles, conv2d(tiled, base.weights, p));
    EXPECT_EQ(testing::host_bytes(from_tiles.output.cpu().value()), want);
    const MemoryConfig hs = testing::sharded(TensorMemoryLayout::HEIGHT_SHARDED, BufferType::L1,
                                             CoreRange({0, 0}, {1, 0}), (rows + 1) / 2, cout);
    ASSERT_OK_AND_ASSIGN(Conv2dResult to_shards, conv2d(dx, base.weights, p, {.output_memory_config = hs}));
    EXPECT_EQ(to_shards.output.memory_config(), hs);
    EXPECT_EQ(testing::host_bytes(to_shards.output.cpu().value()), want);
    ASSERT_OK_AND_ASSIGN(Conv2dResult to_tiles, conv2d(dx, base.weights, p, {.output_layout = Layout::TILE}));
    ASSERT_OK_AND_ASSIGN(Tensor want_tiles, to_layout(base.output, Layout::TILE));
    EXPECT_EQ(testing::host_bytes(to_tiles.output.cpu().value()), testing::host_bytes(want_tiles.cpu().value()));
    // A residual of float32 (added in place) and of bfloat16 (converted first).
    for (DataType rt : {DataType::FLOAT32, DataType::BFLOAT16}) {
      SCOPED_TRACE(data_type_name(rt));
      Tensor res = testing::random_tensor(Shape{1, 1, rows, cout}, rt, Layout::ROW_MAJOR, 4);
      ASSERT_OK_AND_ASSIGN(Tensor dres, to_device(res, *dev));
      ASSERT_OK_AND_ASSIGN(Conv2dResult r,
                           conv2d_with_residual(dx, w, b, p, Conv2dResidual{dres, {UnaryOpType::RELU}, true}));
      ASSERT_OK_AND_ASSIGN(std::vector<float> got, r.output.cpu().value().to_vector());
      ASSERT_OK_AND_ASSIGN(std::vector<float> res_values, res.to_vector());
      ASSERT_OK_AND_ASSIGN(Tensor res_f32, Tensor::from_vector(res_values, res.shape(), DataType::FLOAT32));
      ASSERT_OK_AND_ASSIGN(Tensor ref_t, reference::binary(base_host, res_f32, BinaryOpType::ADD, {UnaryOpType::RELU},
                                                           DataType::FLOAT32));
      ASSERT_OK_AND_ASSIGN(std::vector<float> ref, ref_t.to_vector());
      ASSERT_EQ(got.size(), ref.size());
      for (size_t i = 0; i < ref.size(); ++i) ASSERT_EQ(got[i], ref[i]) << i;
    }
  }
}

// Rows spread over banks (L1 on the cpu device, DRAM on wormhole_b0) are
// staged into one contiguous buffer for the kernel and scattered back.
TEST(Conv2d, InterleavedOverSeveralBanks) {
  ASSERT_OK_AND_ASSIGN(auto cpu, open_device({}));
  check_case(*cpu, kCases[0], DataType::BFLOAT16, DataType::BFLOAT16, L1_MEMORY_CONFIG);
  ASSERT_OK_AND_ASSIGN(auto wh, open_device({.descriptor = "wormhole_b0"}));
  check_case(*wh, kCases[2], DataType::FLOAT32, DataType::FLOAT32, DRAM_MEMORY_CONFIG);
  check_case(*wh, kCases[0], DataType::BFLOAT16, DataType::BFLOAT8_B, L1_MEMORY_CONFIG);
}

TEST(Conv2d, TracedReplayEqualsEager) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.trace_region_size = 1 << 16}));
  const Conv2dParams p = to_params(kCases[0]);
  Tensor x = testing::random_tensor(Shape{1, 9, 11, 8}, DataType::BFLOAT16, Layout::ROW_MAJOR, 1);
  ASSERT_OK_AND_ASSIGN(
      Tensor w, Tensor::from_vector(testing::random_values(16 * 8 * 9, 2), Shape{16, 8, 3, 3}, DataType::FLOAT32));
  ASSERT_OK_AND_ASSIGN(Tensor dx, to_device(x, *dev));
  ASSERT_OK_AND_ASSIGN(Conv2dResult eager, conv2d(dx, w, std::nullopt, p));
  ASSERT_OK_AND_ASSIGN(Tensor expected, eager.output.cpu());
  ASSERT_OK_AND_ASSIGN(TraceId tid, begin_trace_capture(*dev, 0));
  ASSERT_OK_AND_ASSIGN(Conv2dResult traced, conv2d(dx, eager.weights, p));
  ASSERT_OK(end_trace_capture(*dev, tid, 0));
  ASSERT_OK(execute_trace(*dev, tid, 0, true));
  ASSERT_OK_AND_ASSIGN(Tensor got, traced.output.cpu());
  EXPECT_EQ(testing::host_bytes(got), testing::host_bytes(expected));
}

// TILE, block-float and sharded activations in; TILE, block-float and
// sharded outputs out: the same values as the ROW_MAJOR path, bit for bit.
// Both ways two workers split a single image: by rows (16x16 -> 32) and by
// output channels (8x8 -> 96, whose shards cannot tilize their own rows).
void check_tile_sharded_block_float(uint32_t side, uint32_t cout) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.worker_threads = 2}));
  SCOPED_TRACE(fmt::format("{}x{} -> {}", side, side, cout));
  const uint32_t rows = side * side, half = rows / 2;
  Conv2dParams p = to_params({1, side, side, 32, cout, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::RELU});
  Tensor x = testing::random_tensor(Shape{1, 1, rows, 32}, DataType::BFLOAT16, Layout::ROW_MAJOR, 1);
  ASSERT_OK_AND_ASSIGN(Tensor w, Tensor::from_vector(testing::random_values(uint64_t{cout} * 32 * 9, 2, 0.1f),
                                                     Shape{cout, 32, 3, 3}, DataType::FLOAT32));
  ASSERT_OK_AND_ASSIGN(Tensor dx, to_device(x, *dev));
  ASSERT_OK_AND_ASSIGN(Conv2dResult base, conv2d(dx, w, std::nullopt, p));
  const auto want = testing::host_bytes(base.output.cpu().value());
  // TILE bfloat16 and height-sharded rows in.
  ASSERT_OK_AND_ASSIGN(Tensor tiled, to_layout(dx, Layout::TILE));
  ASSERT_OK_AND_ASSIGN(Conv2dResult from_tiles, conv2d(tiled, base.weights, p));
  EXPECT_EQ(testing::host_bytes(from_tiles.output.cpu().value()), want);
  EXPECT_EQ(from_tiles.output.memory_config(), DRAM_MEMORY_CONFIG);
  const MemoryConfig hs =
      testing::sharded(TensorMemoryLayout::HEIGHT_SHARDED, BufferType::L1, CoreRange({0, 0}, {1, 0}), half, 32);
  ASSERT_OK_AND_ASSIGN(Tensor sharded, to_device(x, *dev, hs));
  ASSERT_OK_AND_ASSIGN(Conv2dResult from_shards, conv2d(sharded, base.weights, p));
  EXPECT_EQ(testing::host_bytes(from_shards.output.cpu().value()), want);
  // bfloat8_b tiles in: the same as bfloat16 rows holding the decoded values.
  ASSERT_OK_AND_ASSIGN(Tensor bfp8, tilize(dx, {.dtype = DataType::BFLOAT8_B}));
  ASSERT_OK_AND_ASSIGN(Tensor decoded, untilize(bfp8, {.dtype = DataType::BFLOAT16}));
  ASSERT_OK_AND_ASSIGN(Conv2dResult from_decoded, conv2d(decoded, base.weights, p));
  ASSERT_OK_AND_ASSIGN(Conv2dResult from_bfp8, conv2d(bfp8, base.weights, p));
  EXPECT_EQ(testing::host_bytes(from_bfp8.output.cpu().value()),
            testing::host_bytes(from_decoded.output.cpu().value()));
  // bfloat8_b tiles out, height sharded: the bfloat16 result packed.
  const MemoryConfig out_hs =
      testing::sharded(TensorMemoryLayout::HEIGHT_SHARDED, BufferType::L1, CoreRange({0, 0}, {1, 0}), half, cout);
  ASSERT_OK_AND_ASSIGN(
      Conv2dResult packed,
      conv2d(dx, base.weights, p,
             {.dtype = DataType::BFLOAT8_B, .output_layout = Layout::TILE, .output_memory_config = out_hs}));
  EXPECT_EQ(packed.output.dtype(), DataType::BFLOAT8_B);
  EXPECT_EQ(packed.output.layout(), Layout::TILE);
  EXPECT_EQ(packed.output.memory_config(), out_hs);
  ASSERT_OK_AND_ASSIGN(Tensor want_packed, tilize(base.output, {.dtype = DataType::BFLOAT8_B}));
  EXPECT_EQ(testing::host_bytes(packed.output.cpu().value()), testing::host_bytes(want_packed.cpu().value()));
}

TEST(Conv2d, TileShardedAndBlockFloatActivations) {
  check_tile_sharded_block_float(8, 96);
  check_tile_sharded_block_float(16, 32);
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  Conv2dParams p = to_params({1, 16, 16, 32, 32, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::RELU});
  Tensor x = testing::random_tensor(Shape{1, 1, 256, 32}, DataType::BFLOAT16, Layout::ROW_MAJOR, 1);
  ASSERT_OK_AND_ASSIGN(Tensor w, Tensor::from_vector(testing::random_values(32 * 32 * 9, 2, 0.1f), Shape{32, 32, 3, 3},
                                                     DataType::FLOAT32));
  ASSERT_OK_AND_ASSIGN(Tensor dx, to_device(x, *dev));
  ASSERT_OK_AND_ASSIGN(Conv2dResult base, conv2d(dx, w, std::nullopt, p));
  // deallocate_activation frees the input.
  ASSERT_OK_AND_ASSIGN(Tensor victim, to_device(x, *dev));
  ASSERT_OK(conv2d(victim, base.weights, p, {.deallocate_activation = true}).status());
  EXPECT_FALSE(victim.is_allocated());
}

TEST(Conv2d, Errors) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  const Conv2dParams p = to_params(kCases[0]);
  Tensor x = testing::random_tensor(Shape{1, 9, 11, 8}, DataType::BFLOAT16, Layout::ROW_MAJOR, 1);
  ASSERT_OK_AND_ASSIGN(Tensor w,
                       Tensor::from_vector(std::vector<float>(16 * 8 * 9), Shape{16, 8, 3, 3}, DataType::FLOAT32));
  ASSERT_OK_AND_ASSIGN(Tensor bad_w,
                       Tensor::from_vector(std::vector<float>(16 * 8 * 9), Shape{16, 8, 9, 1}, DataType::FLOAT32));
  EXPECT_ERROR(conv2d(x, w, std::nullopt, p), StatusCode::kInvalidArgument, "must be a device tensor");
  ASSERT_OK_AND_ASSIGN(Tensor dx, to_device(x, *dev));
  EXPECT_ERROR(conv2d(dx, bad_w, std::nullopt, p), StatusCode::kInvalidArgument, "expected weight shape [16,8,3,3]");
  auto wrong = p;
  wrong.in_channels = 4;
  EXPECT_ERROR(conv2d(dx, w, std::nullopt, wrong), StatusCode::kInvalidArgument, "expected input (1,9,11,4)");
  EXPECT_ERROR(conv2d(dx, w, std::nullopt, p, {.dtype = DataType::BFLOAT8_B}), StatusCode::kInvalidArgument,
               "conv2d: a bfloat8_b output needs output_layout TILE");
  ASSERT_OK_AND_ASSIGN(Conv2dResult r, conv2d(dx, w, std::nullopt, p));
  auto other = p;
  other.activation = {UnaryOpType::SILU};
  EXPECT_ERROR(conv2d(dx, r.weights, other), StatusCode::kInvalidArgument, "the prepared weights are for");
  // Tiles of (N, H, W, C) whose W pads to whole tiles are not the pixels' rows.
  ASSERT_OK_AND_ASSIGN(Tensor tiles, to_layout(dx, Layout::TILE));
  EXPECT_ERROR(conv2d(tiles, w, std::nullopt, p), StatusCode::kInvalidArgument,
               "conv2d: expected tiles of (1, 1, N*H*W, C) rows or a width that is a multiple of 32, found tiles of "
               "[1,9,11,8] (each row of 11 pixels is padded to whole tiles)");
  ASSERT_OK_AND_ASSIGN(Tensor flat, dx.view(Shape{1, 1, 99, 8}));
  ASSERT_OK_AND_ASSIGN(Tensor flat_tiles, to_layout(flat, Layout::TILE));
  ASSERT_OK(conv2d(flat_tiles, w, std::nullopt, p).status());
  // float16 activations (float16 weights are taken: BlockFloatWeights).
  ASSERT_OK_AND_ASSIGN(Tensor half, typecast(dx, DataType::FLOAT16));
  EXPECT_ERROR(conv2d(half, w, std::nullopt, p), StatusCode::kUnimplemented,
               "conv2d: float16 activations (in float16, out float16)");
  EXPECT_ERROR(conv2d(dx, w, std::nullopt, p, {.dtype = DataType::FLOAT16}), StatusCode::kUnimplemented,
               "typecast to one of them");
}

// The residual form against reference conv + add + activation on the host,
// for fused shapes (plain, strided, bfloat16, 3x3 Winograd at HiFi2) and the
// separate-add ones (depthwise, hardsigmoid, a bfloat16 residual for a
// float32 output); with the CPU's own kernels, then capped at AVX2 (where
// Tessera's direct and Winograd kernels add the residual).
TEST(Conv2d, ResidualMatchesConvThenAdd) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  struct R {
    Case c;
    UnaryOpType post;
    DataType in, res;
    bool hifi2 = false;
  };
  const R cases[] = {
      {{1, 14, 14, 32, 64, 1, 1, 1, 1, 1, {0, 0, 0, 0}}, UnaryOpType::RELU, DataType::FLOAT32, DataType::FLOAT32},
      {{2, 9, 11, 16, 24, 3, 3, 2, 1, 1, {1, 1, 1, 1}, UnaryOpType::SILU},
       UnaryOpType::IDENTITY,
       DataType::FLOAT32,
       DataType::FLOAT32},
      {{1, 20, 20, 16, 16, 3, 3, 1, 1, 1, {1, 1, 1, 1}}, UnaryOpType::RELU, DataType::BFLOAT16, DataType::BFLOAT16},
      // bfloat16 rows through the AVX2 direct kernel: strided, an activation before the add, 40 channels.
      {{2, 9, 11, 16, 40, 3, 3, 2, 1, 1, {1, 1, 1, 1}, UnaryOpType::SILU},
       UnaryOpType::RELU,
       DataType::BFLOAT16,
       DataType::BFLOAT16},
      {{1, 12, 12, 32, 32, 3, 3, 1, 1, 32, {1, 1, 1, 1}}, UnaryOpType::RELU, DataType::FLOAT32, DataType::FLOAT32},
      {{1, 6, 6, 8, 8, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::HARDSIGMOID},
       UnaryOpType::RELU,
       DataType::FLOAT32,
       DataType::FLOAT32},
      {{1, 6, 6, 8, 8, 1, 1, 1, 1, 1, {0, 0, 0, 0}}, UnaryOpType::RELU6, DataType::FLOAT32, DataType::BFLOAT16},
      {{1, 7, 7, 64, 256, 1, 1, 1, 1, 1, {0, 0, 0, 0}}, UnaryOpType::RELU, DataType::FLOAT32, DataType::FLOAT32},
      // relu6 after the add, in the AVX-512 direct kernel's registers (1x1 and 3x3 on a 7x7 map).
      {{1, 7, 9, 512, 520, 1, 1, 1, 1, 1, {0, 0, 0, 0}}, UnaryOpType::RELU6, DataType::FLOAT32, DataType::FLOAT32},
      {{1, 7, 7, 256, 272, 3, 3, 1, 1, 1, {1, 1, 1, 1}}, UnaryOpType::RELU6, DataType::FLOAT32, DataType::FLOAT32},
      // ... and an activation before the add there (through the float math table).
      {{1, 6, 5, 272, 1024, 1, 1, 1, 1, 1, {0, 0, 0, 0}, UnaryOpType::SILU},
       UnaryOpType::IDENTITY,
       DataType::FLOAT32,
       DataType::FLOAT32},
      // ... over weights in chunks (2048 input channels: partial sums between two chunks).
      {{1, 7, 7, 2048, 528, 1, 1, 1, 1, 1, {0, 0, 0, 0}, UnaryOpType::SILU},
       UnaryOpType::RELU,
       DataType::FLOAT32,
       DataType::FLOAT32},
      // An activation with an affine before the add: oneDNN's post-ops, then the AVX-512 direct kernel's
      // float math table (the affine keeps relu out of its registers).
      {{1, 14, 14, 32, 64, 1, 1, 1, 1, 1, {0, 0, 0, 0}, UnaryOpType::HARDSWISH, 1.5f, -0.25f},
       UnaryOpType::RELU,
       DataType::FLOAT32,
       DataType::FLOAT32},
      {{1, 7, 9, 512, 520, 1, 1, 1, 1, 1, {0, 0, 0, 0}, UnaryOpType::RELU, 0.5f, 0.25f},
       UnaryOpType::RELU6,
       DataType::FLOAT32,
       DataType::FLOAT32},
      // A strided 1x1 downsample with the block's residual, split by rows (ResNet's stage entries).
      {{1, 18, 17, 32, 64, 1, 1, 2, 1, 1, {0, 0, 0, 0}}, UnaryOpType::RELU, DataType::FLOAT32, DataType::FLOAT32},
      // YOLO's bottlenecks: 3x3 stride 1 with an activation before the add, at HiFi2 (Winograd).
      {{1, 15, 13, 24, 40, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::SILU},
       UnaryOpType::IDENTITY,
       DataType::FLOAT32,
       DataType::FLOAT32,
       true},
      {{2, 16, 16, 32, 32, 3, 3, 1, 1, 1, {1, 1, 1, 1}}, UnaryOpType::RELU, DataType::FLOAT32, DataType::FLOAT32, true},
      // SiLU before the add on oneDNN's float32 kernels, by row shards and by images (their post-ops;
      // LoFiSiluThenResidualOnAmx has float32 rows on the bfloat16 kernels, Tessera's SiLU and add after).
      {{1, 40, 40, 32, 32, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::SILU},
       UnaryOpType::IDENTITY,
       DataType::FLOAT32,
       DataType::FLOAT32},
      {{2, 24, 20, 16, 48, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::SILU},
       UnaryOpType::RELU,
       DataType::FLOAT32,
       DataType::FLOAT32},
      // ... and bfloat16 rows there: oneDNN's bfloat16 kernels write float32 rows, which Tessera's SiLU and
      // fused add round as they store, with a bfloat16 or float32 residual.
      {{1, 40, 40, 32, 32, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::SILU},
       UnaryOpType::IDENTITY,
       DataType::BFLOAT16,
       DataType::BFLOAT16},
      {{1, 40, 40, 32, 32, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::SILU},
       UnaryOpType::IDENTITY,
       DataType::BFLOAT16,
       DataType::FLOAT32},
      {{2, 5, 7, 32, 48, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::SILU},
       UnaryOpType::RELU,
       DataType::BFLOAT16,
       DataType::BFLOAT16},
      // A float32 residual on bfloat16 rows adds unrounded: oneDNN's kernels write float32 rows there.
      {{1, 40, 40, 32, 32, 3, 3, 1, 1, 1, {1, 1, 1, 1}}, UnaryOpType::RELU6, DataType::BFLOAT16, DataType::FLOAT32},
      {{1, 40, 40, 32, 32, 3, 3, 1, 1, 1, {1, 1, 1, 1}}, UnaryOpType::RELU6, DataType::BFLOAT16, DataType::BFLOAT16},
      {{1, 14, 14, 64, 48, 1, 1, 1, 1, 1, {0, 0, 0, 0}}, UnaryOpType::RELU, DataType::BFLOAT16, DataType::FLOAT32},
      {{2, 9, 11, 16, 40, 3, 3, 2, 1, 1, {1, 1, 1, 1}, UnaryOpType::SILU},
       UnaryOpType::RELU6,
       DataType::BFLOAT16,
       DataType::FLOAT32},
      // An activation before the add on a 1x1: a separate add on AVX2-only CPUs.
      {{1, 10, 10, 32, 48, 1, 1, 1, 1, 1, {0, 0, 0, 0}, UnaryOpType::SILU},
       UnaryOpType::IDENTITY,
       DataType::FLOAT32,
       DataType::FLOAT32},
      // 1x1 convs with over 4 MiB of output rows per image add the residual in
      // Tessera's own pass on AVX-512 (pixel chunks with a shorter tail): by
      // image, and by rows with an activation before the add.
      {{2, 64, 67, 24, 256, 1, 1, 1, 1, 1, {0, 0, 0, 0}}, UnaryOpType::RELU, DataType::FLOAT32, DataType::FLOAT32},
      {{1, 58, 75, 16, 272, 1, 1, 1, 1, 1, {0, 0, 0, 0}, UnaryOpType::SILU},
       UnaryOpType::RELU6,
       DataType::FLOAT32,
       DataType::FLOAT32},
      {{3, 58, 75, 16, 272, 1, 1, 1, 1, 1, {0, 0, 0, 0}}, UnaryOpType::IDENTITY, DataType::FLOAT32, DataType::FLOAT32},
      // And those with under 4 MiB per image but over 8 MiB over the batch.
      {{6, 28, 29, 16, 528, 1, 1, 1, 1, 1, {0, 0, 0, 0}}, UnaryOpType::RELU, DataType::FLOAT32, DataType::FLOAT32},
      // Strided 1x1s gather their input pixels into chunks there: two chunks per image.
      {{2, 25, 22, 24, 512, 1, 1, 2, 1, 1, {0, 0, 0, 0}}, UnaryOpType::RELU, DataType::FLOAT32, DataType::FLOAT32},
      // Over 512 pixels (546) with a residual: the AVX-512 direct kernel up to 256
      // input channels, oneDNN above.
      {{3, 13, 14, 160, 1640, 1, 1, 1, 1, 1, {0, 0, 0, 0}}, UnaryOpType::RELU, DataType::FLOAT32, DataType::FLOAT32},
      {{3, 13, 14, 264, 1000, 1, 1, 1, 1, 1, {0, 0, 0, 0}}, UnaryOpType::RELU, DataType::FLOAT32, DataType::FLOAT32},
      // One and two output channels: the narrow kernel on AVX-512.
      {{2, 9, 13, 24, 1, 1, 1, 1, 1, 1, {0, 0, 0, 0}, UnaryOpType::SIGMOID},
       UnaryOpType::RELU,
       DataType::BFLOAT16,
       DataType::BFLOAT16},
      {{1, 17, 6, 40, 2, 1, 1, 1, 1, 1, {0, 0, 0, 0}}, UnaryOpType::IDENTITY, DataType::FLOAT32, DataType::BFLOAT16},
  };
  const KernelIsa native = kernel_isa();
  std::vector<KernelIsa> isas{native};
  if (native == KernelIsa::kAvx512) isas.push_back(KernelIsa::kAvx2);
  ASSERT_OK(enable_profiler(*dev));
  for (KernelIsa isa : isas) {
    set_kernel_isa_limit(isa);
    for (const R& rc : cases) {
      const Conv2dParams p = to_params(rc.c);
      SCOPED_TRACE(fmt::format("{} post={} in={} res={} hifi2={} isa={}", p.descriptor(), unary_op_name(rc.post),
                               data_type_name(rc.in), data_type_name(rc.res), rc.hifi2, static_cast<int>(isa)));
      const Case& cs = rc.c;
      Tensor x = testing::random_tensor(Shape{cs.n, cs.h, cs.w, cs.c}, rc.in, Layout::ROW_MAJOR, 4);
      auto wv = testing::random_values(uint64_t{cs.k} * (cs.c / cs.groups) * cs.kh * cs.kw, 5, 0.2f);
      ASSERT_OK_AND_ASSIGN(Tensor w,
                           Tensor::from_vector(wv, Shape{cs.k, cs.c / cs.groups, cs.kh, cs.kw}, DataType::FLOAT32));
      ASSERT_OK_AND_ASSIGN(Tensor b,
                           Tensor::from_vector(testing::random_values(cs.k, 6), Shape{cs.k}, DataType::FLOAT32));
      const Shape out{cs.n, p.output_height(), p.output_width(), cs.k};
      Tensor res = testing::random_tensor(out, rc.res, Layout::ROW_MAJOR, 7);
      ASSERT_OK_AND_ASSIGN(Tensor dx, to_device(x, *dev));
      ASSERT_OK_AND_ASSIGN(Tensor dres, to_device(res, *dev));
      const DataType wt = rc.in == DataType::FLOAT32 ? DataType::FLOAT32 : DataType::BFLOAT16;
      Conv2dConfig cfg{.weights_dtype = wt};
      if (rc.hifi2) cfg.compute_config.math_fidelity = MathFidelity::HiFi2;
      ASSERT_OK(read_profile(*dev).status());
      ASSERT_OK_AND_ASSIGN(Conv2dResult r, conv2d_with_residual(dx, w, b, p, Conv2dResidual{dres, {rc.post}}, cfg));
      ASSERT_OK_AND_ASSIGN(Tensor got_t, r.output.cpu());
      ASSERT_OK_AND_ASSIGN(std::vector<float> got, got_t.to_vector());
      ASSERT_OK_AND_ASSIGN(Tensor rw, round_conv2d_weights(w, p, wt, rc.in));
      ASSERT_OK_AND_ASSIGN(Tensor conv_t, reference::conv2d(x, rw, b, p, DataType::FLOAT32));
      ASSERT_OK_AND_ASSIGN(Tensor conv_r, conv_t.view(out));
      ASSERT_OK_AND_ASSIGN(Tensor ref_t,
                           reference::binary(conv_r, res, BinaryOpType::ADD, {rc.post}, DataType::FLOAT32));
      ASSERT_OK_AND_ASSIGN(std::vector<float> ref, ref_t.to_vector());
      if (rc.hifi2) {  // Winograd's tolerance (WinogradBelowHiFi4)
        float mx = 1;
        for (float v : ref) mx = std::max(mx, std::fabs(v));
        for (size_t i = 0; i < ref.size(); ++i) ASSERT_LE(std::fabs(got[i] - ref[i]), 1e-3f * mx) << i;
      } else {
        testing::expect_conv_close(got, ref, rc.in);
      }
      if (isa == KernelIsa::kAvx2 && (rc.in == DataType::FLOAT32 || !rc.hifi2) && cs.groups == 1 && cs.kh > 1 &&
          cs.c >= 16) {
        ASSERT_OK_AND_ASSIGN(DeviceProfile prof, read_profile(*dev));
        bool ran = false;
        for (const OpTiming& t : prof.ops)
          ran |= t.kernel_name.find(rc.hifi2 ? "winograd_f2_avx2" : "direct_avx2") != std::string::npos;
        EXPECT_TRUE(ran);
      }
      // On AVX-512, float32 convs of at most 512 output pixels (1x1s over at
      // most 256 input channels: 1600) and 256 Ki weights or more run
      // Tessera's direct kernel (1x1s, and larger kernels on maps of at most
      // 64 pixels), and no others; larger strided or large 1x1s, pixel chunks.
      const uint64_t image_bytes = uint64_t{p.output_height()} * p.output_width() * cs.k * 4;
      const bool large = image_bytes >= (4u << 20) || image_bytes * cs.n >= (8u << 20);
      const uint64_t map = uint64_t{p.output_height()} * p.output_width();
      const bool pointwise = cs.kh * cs.kw == 1;
      const bool direct512 = cs.groups == 1 && !rc.hifi2 && cs.n * map <= (pointwise && cs.c <= 256 ? 1600u : 512u) &&
                             uint64_t{cs.c} * cs.k * cs.kh * cs.kw >= 256 * 1024 && (pointwise || map <= 64);
      if (kernel_isa() == KernelIsa::kAvx512 && rc.in == DataType::FLOAT32 && rc.res == DataType::FLOAT32) {
        ASSERT_OK_AND_ASSIGN(DeviceProfile prof, read_profile(*dev));
        bool ran = false, ran_direct = false;
        for (const OpTiming& t : prof.ops) {
          ran_direct |= t.kernel_name == "f32_conv2d__direct_avx512";
          ran |= direct512 ? t.kernel_name == "f32_conv2d__direct_avx512" : t.kernel_name.ends_with("_chunked");
        }
        if (direct512 || (pointwise && (cs.stride > 1 || large))) {
          EXPECT_TRUE(ran);
        }
        EXPECT_EQ(ran_direct, direct512);
      }
      // The prepared weights take the same residual.
      ASSERT_OK_AND_ASSIGN(Conv2dResult again,
                           conv2d_with_residual(dx, r.weights, p, Conv2dResidual{dres, {rc.post}}, cfg));
      ASSERT_OK_AND_ASSIGN(Tensor again_t, again.output.cpu());
      EXPECT_EQ(testing::host_bytes(again_t), testing::host_bytes(got_t));
      // Weights prepared by a plain conv (for bfloat16 rows) take a float32
      // residual too: the add then follows the conv's bfloat16 rows.
      if (rc.in == DataType::BFLOAT16 && rc.res == DataType::FLOAT32) {
        ASSERT_OK_AND_ASSIGN(Conv2dResult conv_only, conv2d(dx, w, b, p, cfg));
        ASSERT_OK_AND_ASSIGN(Conv2dResult narrow,
                             conv2d_with_residual(dx, conv_only.weights, p, Conv2dResidual{dres, {rc.post}}, cfg));
        ASSERT_OK_AND_ASSIGN(Tensor narrow_t, narrow.output.cpu());
        ASSERT_OK_AND_ASSIGN(std::vector<float> narrow_v, narrow_t.to_vector());
        EXPECT_GE(testing::pcc(narrow_v, ref), 0.999);
      }
      // Given up (in_place), the residual's buffer takes the output where the
      // kernel adds it (not for depthwise, hardsigmoid or another dtype), with
      // the same bytes.
      ASSERT_OK_AND_ASSIGN(Tensor spare, to_device(res, *dev));
      ASSERT_OK_AND_ASSIGN(Conv2dResult in_place,
                           conv2d_with_residual(dx, r.weights, p, Conv2dResidual{spare, {rc.post}, true}, cfg));
      const bool own = cs.groups == 1 && cs.kh * cs.kw > 1 && cs.c >= 16;  // the direct kernel (float32 or bfloat16)
      const bool fused = cs.groups == 1 && cs.act != UnaryOpType::HARDSIGMOID && rc.res == rc.in &&
                         (isa != KernelIsa::kAvx2 || cs.act == UnaryOpType::IDENTITY || own);
      EXPECT_EQ(in_place.output.buffer() == spare.buffer(), fused);
      ASSERT_OK_AND_ASSIGN(Tensor in_place_t, in_place.output.cpu());
      EXPECT_EQ(testing::host_bytes(in_place_t), testing::host_bytes(got_t));
    }
  }
  set_kernel_isa_limit(native);
  ASSERT_OK(disable_profiler(*dev));
  // The input as its own residual is never overwritten while the conv reads it.
  {
    const Conv2dParams p = to_params(kCases[1]);  // 1x1, 64 -> 32 channels
    Tensor x = testing::random_tensor(Shape{1, 14, 14, 64}, DataType::FLOAT32, Layout::ROW_MAJOR, 8);
    ASSERT_OK_AND_ASSIGN(Tensor w, Tensor::from_vector(testing::random_values(64 * 64, 9, 0.2f), Shape{64, 64, 1, 1},
                                                       DataType::FLOAT32));
    Conv2dParams sq = p;
    sq.out_channels = 64;
    ASSERT_OK_AND_ASSIGN(Tensor dx, to_device(x, *dev));
    ASSERT_OK_AND_ASSIGN(Conv2dResult r, conv2d_with_residual(dx, w, std::nullopt, sq, Conv2dResidual{dx, {}, true},
                                                              {.weights_dtype = DataType::FLOAT32}));
    EXPECT_NE(r.output.buffer(), dx.buffer());
    ASSERT_OK_AND_ASSIGN(Tensor x_after, dx.cpu());
    EXPECT_EQ(testing::host_bytes(x_after), testing::host_bytes(x));
  }
  // A residual of the wrong shape.
  const Conv2dParams p = to_params(cases[0].c);
  ASSERT_OK_AND_ASSIGN(
      Tensor dx,
      to_device(testing::random_tensor(Shape{1, 14, 14, 32}, DataType::FLOAT32, Layout::ROW_MAJOR, 1), *dev));
  ASSERT_OK_AND_ASSIGN(
      Tensor bad,
      to_device(testing::random_tensor(Shape{1, 14, 14, 32}, DataType::FLOAT32, Layout::ROW_MAJOR, 1), *dev));
  ASSERT_OK_AND_ASSIGN(Tensor w,
                       Tensor::from_vector(std::vector<float>(64 * 32, 0.1f), Shape{64, 32, 1, 1}, DataType::FLOAT32));
  EXPECT_ERROR(
      conv2d_with_residual(dx, w, std::nullopt, p, Conv2dResidual{bad, {}}, {.weights_dtype = DataType::FLOAT32}),
      StatusCode::kInvalidArgument, "the residual has shape [1,14,14,32]");
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// Blocks run over 16 output channels of one (ky, kx, ci) row: a small weight
// next to a large one in the same block loses its low bits; the same value in
// a block of its own keeps them.
TEST(Conv2d, BlockFloatWeightRoundingFollowsOutputChannelBlocks) {
  Conv2dParams p;
  p.batch_size = 1;
  p.input_height = p.input_width = 4;
  p.in_channels = 2;
  p.out_channels = 16;
  p.kernel_size = {1, 1};
  // W[oc][ci]: ci 0 holds 1.0 for oc 0 and 0.3 elsewhere; ci 1 holds 0.3 everywhere.
  std::vector<float> w(32, 0.3f);
  w[0] = 1.0f;
  ASSERT_OK_AND_ASSIGN(Tensor wt, Tensor::from_vector(w, Shape{16, 2, 1, 1}, DataType::FLOAT32));
  ASSERT_OK_AND_ASSIGN(Tensor r4, round_conv2d_weights(wt, p, DataType::BFLOAT4_B, DataType::FLOAT32));
  ASSERT_OK_AND_ASSIGN(auto v, r4.to_vector());
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[2], 0.25f);    // oc 1, ci 0: shares 2^0 with 1.0 -> 3-bit magnitude step 0.25
  EXPECT_EQ(v[3], 0.3125f);  // oc 1, ci 1: its own block, exponent of 0.3 -> step 2^-4 (0.3 -> 5/16)
  ASSERT_OK_AND_ASSIGN(Tensor r16, round_conv2d_weights(wt, p, DataType::FLOAT32, DataType::BFLOAT16));
  ASSERT_OK_AND_ASSIGN(auto b, r16.to_vector());
  EXPECT_EQ(b[3], round_to_bfloat16(0.3f));
  ASSERT_OK_AND_ASSIGN(Tensor r32, round_conv2d_weights(wt, p, DataType::FLOAT32, DataType::FLOAT32));
  EXPECT_EQ(r32.to_vector().value(), w);
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// On two workers, a single image whose weights outweigh its input splits by
// output channels: each shard computes a block-aligned slice of the channels
// from the whole input, through its slice of the packed weights and bias.
// Channel counts that are not multiples of the block, strides, 1x1 and 3x3,
// activations oneDNN lacks (applied per shard), residuals, both dtypes.
TEST(Conv2d, OutputChannelSplitMatchesReference) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.worker_threads = 2}));
  const Case cases[] = {
      {1, 7, 7, 64, 200, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::RELU},
      {1, 5, 5, 96, 160, 1, 1, 1, 1, 1, {0, 0, 0, 0}},
      {1, 9, 9, 32, 96, 3, 3, 2, 1, 1, {1, 1, 1, 1}, UnaryOpType::SILU},
      {1, 4, 6, 48, 130, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::HARDSIGMOID},
  };
  ASSERT_OK(enable_profiler(*dev));
  for (const Case& c : cases) {
    check_case(*dev, c, DataType::FLOAT32, DataType::FLOAT32, DRAM_MEMORY_CONFIG);
    check_case(*dev, c, DataType::BFLOAT16, DataType::BFLOAT16, DRAM_MEMORY_CONFIG);
  }
  ASSERT_OK_AND_ASSIGN(DeviceProfile prof, read_profile(*dev));
  int split = 0;
  for (const OpTiming& t : prof.ops)
    split += t.kernel_name.starts_with("f32_conv2d") && t.kernel_name.ends_with("_x2oc");
  EXPECT_GE(split, 4) << "float32 channel-split launches";
  // With a residual added by the kernel, gathered per shard.
  const Case rc{1, 7, 7, 64, 200, 1, 1, 1, 1, 1, {0, 0, 0, 0}};
  const Conv2dParams p = to_params(rc);
  Tensor x = testing::random_tensor(Shape{1, 7, 7, 64}, DataType::FLOAT32, Layout::ROW_MAJOR, 4);
  Tensor res = testing::random_tensor(Shape{1, 7, 7, 200}, DataType::FLOAT32, Layout::ROW_MAJOR, 7);
  ASSERT_OK_AND_ASSIGN(Tensor w, Tensor::from_vector(testing::random_values(200 * 64, 5, 0.2f), Shape{200, 64, 1, 1},
                                                     DataType::FLOAT32));
  ASSERT_OK_AND_ASSIGN(Tensor dx, to_device(x, *dev));
  ASSERT_OK_AND_ASSIGN(Tensor dres, to_device(res, *dev));
  ASSERT_OK_AND_ASSIGN(Conv2dResult r,
                       conv2d_with_residual(dx, w, std::nullopt, p, Conv2dResidual{dres, {UnaryOpType::RELU}},
                                            {.weights_dtype = DataType::FLOAT32}));
  ASSERT_OK_AND_ASSIGN(Tensor got_t, r.output.cpu());
  ASSERT_OK_AND_ASSIGN(std::vector<float> got, got_t.to_vector());
  ASSERT_OK_AND_ASSIGN(Tensor conv_t, reference::conv2d(x, w, std::nullopt, p, DataType::FLOAT32));
  ASSERT_OK_AND_ASSIGN(Tensor conv_r, conv_t.view(Shape{1, 7, 7, 200}));
  ASSERT_OK_AND_ASSIGN(Tensor ref_t,
                       reference::binary(conv_r, res, BinaryOpType::ADD, {UnaryOpType::RELU}, DataType::FLOAT32));
  ASSERT_OK_AND_ASSIGN(std::vector<float> ref, ref_t.to_vector());
  testing::expect_conv_close(got, ref, DataType::FLOAT32);
  ASSERT_OK_AND_ASSIGN(DeviceProfile rprof, read_profile(*dev));
  ASSERT_EQ(rprof.ops.size(), 1u);
  EXPECT_TRUE(rprof.ops[0].kernel_name.ends_with("_x2oc")) << rprof.ops[0].kernel_name;
}

// On a map large enough to split by rows, channels split only when the
// weights are too many for every worker to keep (64 Ki of them): a 28x28
// 96->576 1x1 conv (55 Ki weights) splits rows, a 256->1024 one (256 Ki)
// channels; both match the reference. (28x28: over the 512 output pixels
// that Tessera's AVX-512 direct kernel takes.)
// On CPUs with AVX2 but not AVX-512 (here: the kernel set capped at AVX2),
// float32 kxk convs (2x2..7x7, >= 16 input channels) on large enough maps
// run Tessera's direct kernel: 1 to 6-pixel blocks, output channels not a
// multiple of 16, odd input channels, strides, dilation, asymmetric padding,
// batches, several row bands (the 200-row map) and channel groups, every
// activation class, bf16-rounded weights; inputs and outputs in L1 (spread
// over banks: copied through dense rows) and a bfloat8_b tile output. Same
// tolerance as every float32 conv (expect_conv_close). Small maps with many
// channels stay on oneDNN.
TEST(Conv2d, DirectAvx2Kernel) {
  if (!cpu_features().avx2 || !cpu_features().fma) GTEST_SKIP() << "no AVX2";
  set_kernel_isa_limit(KernelIsa::kAvx2);
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.worker_threads = 2}));
  const Case cases[] = {
      {1, 30, 29, 32, 40, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::RELU},
      {2, 61, 57, 16, 16, 3, 3, 2, 1, 1, {1, 1, 1, 1}, UnaryOpType::SILU},
      {1, 33, 31, 17, 24, 5, 5, 1, 2, 1, {4, 3, 4, 3}, UnaryOpType::HARDSIGMOID},
      {1, 29, 28, 16, 48, 7, 7, 1, 1, 1, {3, 3, 3, 3}},
      {1, 60, 61, 24, 8, 2, 2, 2, 1, 1, {0, 0, 0, 0}, UnaryOpType::GELU},
      {1, 200, 40, 64, 32, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::RELU6},
      {1, 60, 80, 144, 16, 3, 3, 1, 1, 1, {1, 1, 1, 1}},                   // many channels on a large map
      {1, 14, 14, 256, 32, 3, 3, 1, 1, 1, {1, 1, 1, 1}},                   // input-channel chunks on a small map
      {1, 9, 7, 100, 20, 3, 3, 2, 1, 1, {1, 1, 1, 1}, UnaryOpType::RELU},  // uneven chunks, strided
      {2, 23, 19, 40, 33, 5, 5, 1, 1, 1, {2, 2, 2, 2}},                    // 5x5: three chunks of at most 16
      {1, 150, 37, 96, 16, 3, 3, 1, 1, 1, {1, 1, 1, 1}},                   // bands balanced over the workers
  };
  // float32 rows, and bfloat16 rows (widened per band, outputs rounded as they are stored).
  for (DataType dt : {DataType::FLOAT32, DataType::BFLOAT16})
    for (const Case& c : cases) {
      ASSERT_OK(enable_profiler(*dev));
      check_case(*dev, c, dt, dt, DRAM_MEMORY_CONFIG);
      ASSERT_OK_AND_ASSIGN(DeviceProfile prof, read_profile(*dev));
      ASSERT_FALSE(prof.ops.empty());
      EXPECT_EQ(prof.ops.back().kernel_name, "f32_conv2d__direct_avx2");
    }
  // One dtype in, the other out.
  for (const auto& [in, out] :
       {std::pair{DataType::BFLOAT16, DataType::FLOAT32}, std::pair{DataType::FLOAT32, DataType::BFLOAT16}}) {
    const Case& c = cases[2];
    SCOPED_TRACE(fmt::format("{} -> {}", data_type_name(in), data_type_name(out)));
    const Conv2dParams p = to_params(c);
    Tensor x = testing::random_tensor(Shape{c.n, c.h, c.w, c.c}, in, Layout::ROW_MAJOR, 8);
    ASSERT_OK_AND_ASSIGN(Tensor w,
                         Tensor::from_vector(testing::random_values(uint64_t{c.k} * c.c * c.kh * c.kw, 9, 0.2f),
                                             Shape{c.k, c.c, c.kh, c.kw}, DataType::FLOAT32));
    ASSERT_OK_AND_ASSIGN(Tensor dx, to_device(x, *dev));
    ASSERT_OK(enable_profiler(*dev));
    ASSERT_OK_AND_ASSIGN(Conv2dResult r,
                         conv2d(dx, w, std::nullopt, p, {.weights_dtype = DataType::BFLOAT16, .dtype = out}));
    ASSERT_OK_AND_ASSIGN(DeviceProfile prof, read_profile(*dev));
    ASSERT_FALSE(prof.ops.empty());
    EXPECT_EQ(prof.ops.back().kernel_name, "f32_conv2d__direct_avx2");
    EXPECT_EQ(r.output.dtype(), out);
    ASSERT_OK_AND_ASSIGN(Tensor rw, round_conv2d_weights(w, p, DataType::BFLOAT16, in));
    ASSERT_OK_AND_ASSIGN(Tensor ref_t, reference::conv2d(x, rw, std::nullopt, p, DataType::FLOAT32));
    ASSERT_OK_AND_ASSIGN(std::vector<float> ref, ref_t.to_vector());
    ASSERT_OK_AND_ASSIGN(std::vector<float> got, r.output.cpu().value().to_vector());
    testing::expect_conv_close(got, ref, DataType::BFLOAT16);
  }
  check_case(*dev, cases[0], DataType::FLOAT32, DataType::BFLOAT16, DRAM_MEMORY_CONFIG);
  check_case(*dev, cases[1], DataType::FLOAT32, DataType::FLOAT32, L1_MEMORY_CONFIG);
  // Fewer than 16 input channels: oneDNN's kernel.
  ASSERT_OK(enable_profiler(*dev));
  check_case(*dev, {1, 30, 31, 8, 32, 3, 3, 1, 1, 1, {1, 1, 1, 1}}, DataType::FLOAT32, DataType::FLOAT32,
             DRAM_MEMORY_CONFIG);
  ASSERT_OK_AND_ASSIGN(DeviceProfile prof, read_profile(*dev));
  ASSERT_FALSE(prof.ops.empty());
  EXPECT_NE(prof.ops.back().kernel_name, "f32_conv2d__direct_avx2");
  // A bfloat8_b tile output: the kernel's rows, then tilize.
  const Conv2dParams p = to_params(cases[0]);
  Tensor x = testing::random_tensor(Shape{1, 30, 29, 32}, DataType::FLOAT32, Layout::ROW_MAJOR, 5);
  ASSERT_OK_AND_ASSIGN(Tensor w, Tensor::from_vector(testing::random_values(40 * 32 * 9, 6, 0.2f), Shape{40, 32, 3, 3},
                                                     DataType::FLOAT32));
  ASSERT_OK_AND_ASSIGN(Tensor dx, to_device(x, *dev));
  ASSERT_OK_AND_ASSIGN(Conv2dResult rows, conv2d(dx, w, std::nullopt, p, {.weights_dtype = DataType::FLOAT32}));
  ASSERT_OK_AND_ASSIGN(
      Conv2dResult tiles,
      conv2d(dx, w, std::nullopt, p,
             {.weights_dtype = DataType::FLOAT32, .dtype = DataType::BFLOAT8_B, .output_layout = Layout::TILE}));
  ASSERT_OK_AND_ASSIGN(Tensor want, tilize(rows.output, {.dtype = DataType::BFLOAT8_B}));
  EXPECT_EQ(testing::host_bytes(tiles.output.cpu().value()), testing::host_bytes(want.cpu().value()));
  set_kernel_isa_limit(KernelIsa::kAvx512);
}

// On AVX-512 CPUs, float32 convs without groups whose output is at most 512
// pixels and whose weights are 256 Ki or more run Tessera's AVX-512 direct
// kernel: 1x1s without padding, and 2x2 to 7x7 kernels on maps of at most 64
// pixels (padding, strides, dilation, asymmetric padding). Tiles of 1 to 6
// pixels by 1 to 4 blocks of 16 channels, output channels not a multiple of
// 16 (masked stores), odd input channels, batches, several bands (512 input
// channels at batch 8: 128 pixels per band; channel groups that do not
// divide over the two workers, and a single group: more bands), weights in chunks with
// partial sums between them (more than 1024 taps x input channels: the 3x3
// 512 -> 512, the 2048-channel 1x1s), activations in registers
// (relu, relu6) and through the float math table (silu, gelu), block-float
// weights, rows in L1 (staged); 529 pixels, 128 Ki weights or a 3x3 on a
// 14x14 map go to oneDNN. Residuals: see ResidualMatchesConvThenAdd. Same
// tolerance as every float32 conv.
TEST(Conv2d, DirectAvx512Kernel) {
  if (kernel_isa() != KernelIsa::kAvx512) GTEST_SKIP() << "no AVX-512";
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.worker_threads = 2}));
  const Case cases[] = {
      {1, 7, 7, 512, 512, 1, 1, 1, 1, 1, {0, 0, 0, 0}},
      {1, 14, 14, 256, 1040, 1, 1, 1, 1, 1, {0, 0, 0, 0}, UnaryOpType::RELU},
      {2, 5, 3, 517, 513, 1, 1, 1, 1, 1, {0, 0, 0, 0}, UnaryOpType::SILU},
      {1, 13, 11, 264, 1000, 1, 1, 1, 1, 1, {0, 0, 0, 0}, UnaryOpType::GELU},
      {3, 9, 9, 512, 520, 1, 1, 2, 1, 1, {0, 0, 0, 0}, UnaryOpType::RELU6},
      {1, 28, 18, 1024, 272, 1, 1, 2, 1, 1, {0, 0, 0, 0}, UnaryOpType::RELU},
      {1, 1, 1, 2048, 144, 1, 1, 1, 1, 1, {0, 0, 0, 0}},
      {8, 7, 7, 512, 512, 1, 1, 1, 1, 1, {0, 0, 0, 0}, UnaryOpType::RELU},
      {1, 8, 8, 4096, 64, 1, 1, 1, 1, 1, {0, 0, 0, 0}},
      {4, 3, 3, 2048, 128, 1, 1, 1, 1, 1, {0, 0, 0, 0}},
      {1, 7, 7, 512, 512, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::RELU},
      {2, 13, 13, 128, 260, 3, 3, 2, 1, 1, {1, 1, 1, 1}},
      {1, 9, 8, 64, 520, 5, 5, 1, 2, 1, {4, 3, 4, 3}, UnaryOpType::SILU},
  };
  for (const Case& c : cases)
    expect_conv_kernel(*dev, c, DataType::FLOAT32, DataType::FLOAT32, DRAM_MEMORY_CONFIG, "f32_conv2d__direct_avx512");
  expect_conv_kernel(*dev, cases[1], DataType::FLOAT32, DataType::BFLOAT8_B, DRAM_MEMORY_CONFIG,
                     "f32_conv2d__direct_avx512");
  expect_conv_kernel(*dev, cases[2], DataType::FLOAT32, DataType::FLOAT32, L1_MEMORY_CONFIG,
                     "f32_conv2d__direct_avx512");
  // 529 pixels, 128 Ki weights, a 3x3 on a 14x14 map: oneDNN's.
  const Case others[] = {
      {1, 23, 23, 512, 512, 1, 1, 1, 1, 1, {0, 0, 0, 0}},
      {1, 7, 7, 256, 512, 1, 1, 1, 1, 1, {0, 0, 0, 0}},
      {1, 14, 14, 256, 256, 3, 3, 1, 1, 1, {1, 1, 1, 1}},
  };
  for (const Case& c : others) {
    ASSERT_OK(enable_profiler(*dev));
    check_case(*dev, c, DataType::FLOAT32, DataType::FLOAT32, DRAM_MEMORY_CONFIG);
    EXPECT_NE(conv_kernel_run(*dev), "f32_conv2d__direct_avx512");
  }
  ASSERT_OK(disable_profiler(*dev));
}

// On AVX-512 CPUs, float32 3x3 convs of stride 1 and padding 1 run Tessera's
// 3x3 row kernel: whole 64-channel output groups on rows of at least 48
// pixels, from at most 64 input channels on maps of at most 80x80
// (ResNet-50's 56x56 64 -> 64) or from 129-256 into at most 128 on maps of
// at most 120x160; on rows of any width, from 65-128 input channels on maps
// of at most 80x80 and from 129-256 on maps of 20x20 to 40x40 pixels;
// 32-channel groups from 33-64 input channels into 32
// more than a multiple of 64 on maps of at least 240x320, and from 257-512
// input channels on maps of 14x14 to 60x80 pixels. Odd and prime widths
// (tiles of 5 and 6 pixels, 53 = 8 x 6 + 5; of 8 to 12) and input channels
// (1, 3, 17, 33, 200, 257, 300), two and three groups, batches, one-row and
// two-row maps (both vertical taps in the padding), activations in
// registers (relu, relu6) and through the float math table (silu, gelu, an
// affine), block-float weights, rows in L1 (staged), and tasks whose three
// input rows and weights spill from a 2 MB L2 (the kernel then prefetches
// the next tap's input: 1300 x 136 into 64, 76801 x 40 into 96). 513 input
// channels into 64, 256 -> 192 on 300 pixels and 200 -> 192 on 399, 129 ->
// 192 on 1640, 96 output channels on a small map, 32 -> 32 on a large one,
// 47-pixel rows from 64 channels, maps just over or under the bounds (81x80,
// 13x15, 61x80, 65 channels on 6401 pixels), a stride, a dilation, asymmetric padding or
// a residual go elsewhere. Same tolerance as every float32 conv.
TEST(Conv2d, Rows3x3Kernel) {
  if (kernel_isa() != KernelIsa::kAvx512) GTEST_SKIP() << "no AVX-512";
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.worker_threads = 2}));
  const Case cases[] = {
      {1, 56, 56, 64, 64, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::RELU},
      {2, 7, 53, 17, 128, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::SILU},
      {1, 5, 49, 3, 64, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::RELU6},
      {3, 1, 48, 64, 192, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::GELU},
      {1, 2, 61, 1, 64, 3, 3, 1, 1, 1, {1, 1, 1, 1}},
      {1, 4, 50, 32, 64, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::RELU, 0.5f, 0.25f},
      {1, 240, 320, 33, 32, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::RELU},
      {1, 1, 76801, 40, 96, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::GELU},
      {2, 7, 49, 200, 128, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::SILU},
      {1, 3, 60, 256, 64, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::RELU},
      {1, 15, 17, 300, 96, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::RELU},
      {2, 14, 14, 512, 64, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::SILU},
      {1, 60, 80, 257, 32, 3, 3, 1, 1, 1, {1, 1, 1, 1}},
      {1, 2, 1300, 136, 64, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::RELU},
      {1, 6, 50, 65, 64, 3, 3, 1, 1, 1, {1, 1, 1, 1}},
      {2, 14, 13, 128, 128, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::SILU},
      {1, 20, 21, 144, 192, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::RELU},
      {1, 31, 40, 256, 128, 3, 3, 1, 1, 1, {1, 1, 1, 1}},
  };
  for (const Case& c : cases)
    expect_conv_kernel(*dev, c, DataType::FLOAT32, DataType::FLOAT32, DRAM_MEMORY_CONFIG, "f32_conv2d__rows3x3_avx512");
  expect_conv_kernel(*dev, cases[1], DataType::FLOAT32, DataType::BFLOAT8_B, DRAM_MEMORY_CONFIG,
                     "f32_conv2d__rows3x3_avx512");
  expect_conv_kernel(*dev, cases[2], DataType::FLOAT32, DataType::FLOAT32, L1_MEMORY_CONFIG,
                     "f32_conv2d__rows3x3_avx512");
  expect_conv_kernel(*dev, cases[6], DataType::FLOAT32, DataType::BFLOAT4_B, DRAM_MEMORY_CONFIG,
                     "f32_conv2d__rows3x3_avx512");
  const Case others[] = {
      {1, 240, 320, 32, 32, 3, 3, 1, 1, 1, {1, 1, 1, 1}}, {1, 6, 50, 256, 192, 3, 3, 1, 1, 1, {1, 1, 1, 1}},
      {1, 19, 21, 200, 192, 3, 3, 1, 1, 1, {1, 1, 1, 1}}, {1, 41, 40, 129, 192, 3, 3, 1, 1, 1, {1, 1, 1, 1}},
      {1, 13, 15, 512, 64, 3, 3, 1, 1, 1, {1, 1, 1, 1}},  {1, 61, 80, 300, 32, 3, 3, 1, 1, 1, {1, 1, 1, 1}},
      {1, 14, 14, 513, 64, 3, 3, 1, 1, 1, {1, 1, 1, 1}},  {1, 6, 50, 64, 96, 3, 3, 1, 1, 1, {1, 1, 1, 1}},
      {1, 6, 47, 64, 64, 3, 3, 1, 1, 1, {1, 1, 1, 1}},    {1, 81, 80, 16, 64, 3, 3, 1, 1, 1, {1, 1, 1, 1}},
      {1, 1, 6401, 65, 64, 3, 3, 1, 1, 1, {1, 1, 1, 1}},  {1, 6, 100, 64, 64, 3, 3, 2, 1, 1, {1, 1, 1, 1}},
      {1, 6, 52, 64, 64, 3, 3, 1, 2, 1, {2, 2, 2, 2}},    {1, 6, 50, 64, 64, 3, 3, 1, 1, 1, {1, 1, 1, 0}},
  };
  for (const Case& c : others) {
    ASSERT_OK(enable_profiler(*dev));
    check_case(*dev, c, DataType::FLOAT32, DataType::FLOAT32, DRAM_MEMORY_CONFIG);
    EXPECT_NE(conv_kernel_run(*dev), "f32_conv2d__rows3x3_avx512");
  }
  // With a residual after its ReLU: oneDNN would lose a NaN in that ReLU
  // (onednn::runs_activation), so the conv runs alone, on the row kernel,
  // and an add follows: the same values as the conv then the add.
  std::string kernel;
  check_residual_case(*dev, cases[0], UnaryOpType::IDENTITY, kernel);
  EXPECT_EQ(kernel, "f32_conv2d__rows3x3_avx512");
  ASSERT_OK(disable_profiler(*dev));
}

// The narrow kernel (1x1 stride-1 float32 convs with one or two output
// channels, on AVX-512): input channels under, at and over a vector, with a
// masked tail; maps whose pixels end mid-chunk and mid-group (16 values),
// several bands, batches; activations in the float math table; block-float
// weights, rows in L1 (staged), bfloat16 rows, a residual with an
// activation after the add. Three output channels, a stride or padding go
// elsewhere. Same tolerances as every conv of the dtype.
TEST(Conv2d, NarrowKernel) {
  if (kernel_isa() != KernelIsa::kAvx512) GTEST_SKIP() << "no AVX-512";
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.worker_threads = 2}));
  const Case cases[] = {
      {1, 7, 9, 1, 1, 1, 1, 1, 1, 1, {0, 0, 0, 0}},
      {1, 11, 13, 3, 2, 1, 1, 1, 1, 1, {0, 0, 0, 0}, UnaryOpType::RELU},
      {1, 33, 47, 16, 1, 1, 1, 1, 1, 1, {0, 0, 0, 0}, UnaryOpType::SIGMOID},
      {2, 23, 19, 17, 2, 1, 1, 1, 1, 1, {0, 0, 0, 0}, UnaryOpType::SILU},
      {1, 60, 80, 32, 1, 1, 1, 1, 1, 1, {0, 0, 0, 0}, UnaryOpType::SIGMOID},
      {3, 5, 7, 100, 2, 1, 1, 1, 1, 1, {0, 0, 0, 0}, UnaryOpType::GELU},
      {1, 1, 1, 64, 1, 1, 1, 1, 1, 1, {0, 0, 0, 0}},
  };
  for (const Case& c : cases)
    expect_conv_kernel(*dev, c, DataType::FLOAT32, DataType::FLOAT32, DRAM_MEMORY_CONFIG, "f32_conv2d__narrow_avx512");
  expect_conv_kernel(*dev, cases[3], DataType::FLOAT32, DataType::BFLOAT8_B, DRAM_MEMORY_CONFIG,
                     "f32_conv2d__narrow_avx512");
  expect_conv_kernel(*dev, cases[1], DataType::FLOAT32, DataType::FLOAT32, L1_MEMORY_CONFIG,
                     "f32_conv2d__narrow_avx512");
  for (const Case& c : {cases[2], cases[3], cases[5]})
    for (DataType w : {DataType::BFLOAT16, DataType::BFLOAT8_B})
      expect_conv_kernel(*dev, c, DataType::BFLOAT16, w, DRAM_MEMORY_CONFIG, "bf16_conv2d__narrow_avx512");
  // A residual, and an activation after the add.
  std::string kernel;
  check_residual_case(*dev, cases[3], UnaryOpType::RELU6, kernel);
  EXPECT_EQ(kernel, "f32_conv2d__narrow_avx512");
  // Three channels, a stride, padding: other kernels.
  const std::pair<Case, DataType> others[] = {
      {{1, 11, 13, 8, 3, 1, 1, 1, 1, 1, {0, 0, 0, 0}}, DataType::FLOAT32},
      {{1, 11, 13, 8, 1, 1, 1, 2, 1, 1, {0, 0, 0, 0}}, DataType::FLOAT32},
      {{1, 11, 13, 8, 1, 1, 1, 1, 1, 1, {1, 1, 1, 1}}, DataType::FLOAT32},
      {{1, 11, 13, 8, 3, 1, 1, 1, 1, 1, {0, 0, 0, 0}}, DataType::BFLOAT16},
  };
  for (const auto& [c, in] : others) {
    ASSERT_OK(enable_profiler(*dev));
    check_case(*dev, c, in, in == DataType::FLOAT32 ? DataType::FLOAT32 : DataType::BFLOAT16, DRAM_MEMORY_CONFIG);
    const std::string k = conv_kernel_run(*dev);  // reading the profile clears it
    EXPECT_EQ(k.find("narrow"), std::string::npos) << k;
    EXPECT_FALSE(k.empty());
  }
  ASSERT_OK(disable_profiler(*dev));
}

TEST(Conv2d, ChannelSplitOnlyForManyWeights) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.worker_threads = 2}));
  const Case few{1, 28, 28, 96, 576, 1, 1, 1, 1, 1, {0, 0, 0, 0}, UnaryOpType::RELU6};
  const Case many{1, 28, 28, 256, 1024, 1, 1, 1, 1, 1, {0, 0, 0, 0}, UnaryOpType::RELU};
  for (const Case* c : {&few, &many}) {
    ASSERT_OK(enable_profiler(*dev));
    check_case(*dev, *c, DataType::FLOAT32, DataType::FLOAT32, DRAM_MEMORY_CONFIG);
    ASSERT_OK_AND_ASSIGN(DeviceProfile prof, read_profile(*dev));
    ASSERT_FALSE(prof.ops.empty());
    const std::string& kernel = prof.ops.back().kernel_name;
    EXPECT_EQ(kernel.ends_with("_x2oc"), c == &many) << kernel;
    EXPECT_TRUE(kernel.ends_with("_x2") || kernel.ends_with("_x2oc")) << kernel;
  }
  // A 3x3 stride-2 conv to 20x20 with many weights: channels in float32;
  // rows in bfloat16 on AMX (amx_strided_rows), channels again at 10x10.
  const Case strided{1, 40, 40, 256, 512, 3, 3, 2, 1, 1, {1, 1, 1, 1}, UnaryOpType::SILU};
  const Case small{1, 20, 20, 256, 512, 3, 3, 2, 1, 1, {1, 1, 1, 1}, UnaryOpType::SILU};
  const bool amx = cpu_features().amx_bf16 && kernel_isa() == KernelIsa::kAvx512;
  for (const Case* c : {&strided, &small})
    for (DataType dt : {DataType::FLOAT32, DataType::BFLOAT16}) {
      ASSERT_OK(enable_profiler(*dev));
      check_case(*dev, *c, dt, dt, DRAM_MEMORY_CONFIG);
      ASSERT_OK_AND_ASSIGN(DeviceProfile prof, read_profile(*dev));
      ASSERT_FALSE(prof.ops.empty());
      const std::string& kernel = prof.ops.back().kernel_name;
      if (kernel.find("onednn") == std::string::npos) continue;  // AVX2-only CPUs: Tessera's direct kernel
      const bool rows = amx && dt == DataType::BFLOAT16 && c == &strided;
      EXPECT_EQ(kernel.ends_with("_x2oc"), !rows) << kernel;
      EXPECT_TRUE(kernel.ends_with("_x2") || kernel.ends_with("_x2oc")) << kernel;
    }
  ASSERT_OK(disable_profiler(*dev));
}

// oneDNN's row shards: one per worker on small maps, up to four per worker
// of at least 1024 output pixels on large ones (uneven rows: two shard
// shapes), each matching the reference.
TEST(Conv2d, LargeMapsTakeSeveralRowShardsPerWorker) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.worker_threads = 2}));
  const std::pair<Case, const char*> cases[] = {
      {{1, 40, 40, 32, 24, 1, 1, 1, 1, 1, {0, 0, 0, 0}, UnaryOpType::SILU}, "_x2"},  // 1600 pixels
      {{1, 64, 67, 24, 40, 1, 1, 1, 1, 1, {0, 0, 0, 0}, UnaryOpType::RELU}, "_x4"},  // 4288 pixels
      {{1, 101, 99, 16, 8, 1, 1, 1, 1, 1, {0, 0, 0, 0}}, "_x8"},                     // 9999 pixels, 101 rows
  };
  for (const auto& [c, suffix] : cases) {
    ASSERT_OK(enable_profiler(*dev));
    check_case(*dev, c, DataType::FLOAT32, DataType::FLOAT32, DRAM_MEMORY_CONFIG);
    ASSERT_OK_AND_ASSIGN(DeviceProfile prof, read_profile(*dev));
    ASSERT_FALSE(prof.ops.empty());
    const std::string& kernel = prof.ops.back().kernel_name;
    // (Narrow outputs run in pixel chunks on AVX-512: "_chunked" follows.)
    EXPECT_TRUE(kernel.starts_with("f32_conv2d__onednn") &&
                (kernel.ends_with(suffix) || kernel.ends_with(std::string(suffix) + "_chunked")))
        << kernel << " " << suffix;
  }
}

// A bfloat16 1x1 conv whose row shards' oneDNN kernel takes another weight
// layout than the whole problem's (MobileNetV2's 14x14 96 -> 576) still
// splits its rows over the workers: its weights are packed in the shards'
// layout (conv/onednn_plan.cc, compile_onednn's shard_layout retry). A batch split by images keeps
// the whole problem's layout. Both match the reference, the prepared weights
// reused bit for bit.
TEST(Conv2d, Bfloat16RowShardsPackTheirOwnLayout) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.worker_threads = 2}));
  const Case one{1, 14, 14, 96, 576, 1, 1, 1, 1, 1, {0, 0, 0, 0}, UnaryOpType::RELU6};
  const Case two{2, 14, 14, 96, 576, 1, 1, 1, 1, 1, {0, 0, 0, 0}, UnaryOpType::RELU6};
  for (const Case* c : {&one, &two}) {
    ASSERT_OK(enable_profiler(*dev));
    check_case(*dev, *c, DataType::BFLOAT16, DataType::BFLOAT16, DRAM_MEMORY_CONFIG);
    const std::string kernel = conv_kernel_run(*dev);
    if (cpu_features().has_avx512_kernels() && kernel_isa() == KernelIsa::kAvx512) {
      EXPECT_TRUE(kernel.starts_with("bf16_conv2d__onednn_brgconv_1x1") && kernel.ends_with("_x2")) << kernel;
    }
  }
  ASSERT_OK(disable_profiler(*dev));
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// Below HiFi4, float32 3x3 stride-1 convs may run a Winograd kernel:
// oneDNN's on AVX-512 CPUs (row, channel and image splits over two workers,
// each shard with its own weight layout), Tessera's F(2x2, 3x3) on AVX2 ones
// (odd sizes cut the last tiles, several bands and segments of tiles, input
// channels not a multiple of 8, output channels not a multiple of 16);
// activations, a tiled output. Tolerance: |d| <= 1e-3 * max(1, max|ref|)
// (the transforms round; direct float32 gets 1e-4) and PCC >= 0.99999.
// HiFi4 keeps the direct kernel. Runs with the CPU's own kernel set, then
// capped at AVX2 (Tessera's kernel on AVX-512 CPUs too).
void check_winograd(Device& dev, size_t index, const Case& cs);

TEST(Conv2d, WinogradBelowHiFi4) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.worker_threads = 2}));
  const Case cases[] = {
      {1, 16, 16, 64, 32, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::RELU},              // rows
      {1, 7, 7, 64, 128, 3, 3, 1, 1, 1, {1, 1, 1, 1}},                                  // output channels
      {2, 10, 12, 64, 64, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::RELU},              // images
      {3, 9, 13, 20, 40, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::SILU},               // odd sizes, channel tails
      {1, 20, 30, 128, 64, 3, 3, 1, 1, 1, {1, 1, 1, 1}},                                // segments of tiles
      {1, 23, 17, 16, 24, 3, 3, 1, 1, 1, {2, 0, 0, 1}, UnaryOpType::RELU6},             // asymmetric padding
      {1, 96, 80, 64, 16, 3, 3, 1, 1, 1, {0, 0, 0, 0}},                                 // no padding, several bands
      {1, 16, 16, 32, 32, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::SILU, 0.5f, 1.0f},  // an affine after silu
  };
  for (size_t i = 0; i < std::size(cases); ++i) check_winograd(*dev, i, cases[i]);
  // bfloat16 rows on AVX2-only CPUs: Tessera's Winograd kernel widens them as
  // it pads them and rounds its outputs (and residuals read) as it stores.
  const KernelIsa native = kernel_isa();
  if (native == KernelIsa::kAvx2 || native == KernelIsa::kAvx512) {
    set_kernel_isa_limit(KernelIsa::kAvx2);
    for (const Case& cs : cases) {
      const Conv2dParams p = to_params(cs);
      SCOPED_TRACE(fmt::format("bfloat16 {}", p.descriptor()));
      Tensor x = testing::random_tensor(Shape{cs.n, cs.h, cs.w, cs.c}, DataType::BFLOAT16, Layout::ROW_MAJOR, 4);
      ASSERT_OK_AND_ASSIGN(Tensor w, Tensor::from_vector(testing::random_values(uint64_t{cs.k} * cs.c * 9, 5, 0.2f),
                                                         Shape{cs.k, cs.c, 3, 3}, DataType::FLOAT32));
      const Shape out{cs.n, p.output_height(), p.output_width(), cs.k};
      Tensor res = testing::random_tensor(out, DataType::BFLOAT16, Layout::ROW_MAJOR, 6);
      ASSERT_OK_AND_ASSIGN(Tensor dx, to_device(x, *dev));
      ASSERT_OK_AND_ASSIGN(Tensor dres, to_device(res, *dev));
      Conv2dConfig cfg{.weights_dtype = DataType::BFLOAT16};
      cfg.compute_config.math_fidelity = MathFidelity::HiFi2;
      ASSERT_OK(enable_profiler(*dev));
      ASSERT_OK_AND_ASSIGN(Conv2dResult r, conv2d_with_residual(dx, w, std::nullopt, p, Conv2dResidual{dres, {}}, cfg));
      ASSERT_OK_AND_ASSIGN(DeviceProfile prof, read_profile(*dev));
      ASSERT_FALSE(prof.ops.empty());
      EXPECT_NE(prof.ops.back().kernel_name.find("winograd"), std::string::npos) << prof.ops.back().kernel_name;
      EXPECT_EQ(r.output.dtype(), DataType::BFLOAT16);
      ASSERT_OK_AND_ASSIGN(Tensor rw, round_conv2d_weights(w, p, DataType::BFLOAT16, DataType::BFLOAT16));
      ASSERT_OK_AND_ASSIGN(Tensor conv_t, reference::conv2d(x, rw, std::nullopt, p, DataType::FLOAT32));
      ASSERT_OK_AND_ASSIGN(Tensor conv_r, conv_t.view(out));
      ASSERT_OK_AND_ASSIGN(Tensor ref_t, reference::binary(conv_r, res, BinaryOpType::ADD, {}, DataType::FLOAT32));
      ASSERT_OK_AND_ASSIGN(std::vector<float> ref, ref_t.to_vector());
      ASSERT_OK_AND_ASSIGN(std::vector<float> got, r.output.cpu().value().to_vector());
      testing::expect_conv_close(got, ref, DataType::BFLOAT16);
    }
    set_kernel_isa_limit(native);
  }
  if (kernel_isa() == KernelIsa::kAvx512) {
    set_kernel_isa_limit(KernelIsa::kAvx2);
    for (size_t i = 0; i < std::size(cases); ++i) check_winograd(*dev, i, cases[i]);
    set_kernel_isa_limit(KernelIsa::kAvx512);
    // Under 64 input channels oneDNN's Winograd loses to its direct kernel (an RGB stem: 8x slower).
    Conv2dConfig hifi2{.weights_dtype = DataType::FLOAT32};
    hifi2.compute_config.math_fidelity = MathFidelity::HiFi2;
    for (uint32_t cin : {3u, 32u}) {
      const Case cs{1, 24, 20, cin, 32, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::RELU};
      Tensor x = testing::random_tensor(Shape{1, 24, 20, cin}, DataType::FLOAT32, Layout::ROW_MAJOR, 9);
      ASSERT_OK_AND_ASSIGN(Tensor w, Tensor::from_vector(testing::random_values(32 * cin * 9, 10, 0.2f),
                                                         Shape{32, cin, 3, 3}, DataType::FLOAT32));
      ASSERT_OK_AND_ASSIGN(Tensor dx, to_device(x, *dev));
      ASSERT_OK(enable_profiler(*dev));
      ASSERT_OK(conv2d(dx, w, std::nullopt, to_params(cs), hifi2).status());
      EXPECT_EQ(conv_kernel_run(*dev).find("wino"), std::string::npos) << cin;
      ASSERT_OK(disable_profiler(*dev));
    }
  }
}

// float32 convs at LoFi on AMX CPUs compute on bfloat16-rounded operands
// (lowers_to_bf16 in conv/problem.cc): against the reference kernel run on the
// input and weights rounded to bfloat16, with float32's tolerance (the
// products are exact, the sums float32), float32 output rows. Row, channel
// and image shards, a 7x7 stride-2 kernel, strides, dilation,
// asymmetric padding, channel tails, a residual, block-float weights, tiles
// in and out, height-sharded output and prepared weights reused; HiFi2 and
// HiFi4 keep float32 operands, and LoFi's prepared weights are refused there.
// conv2d_concat equals conv2d over concat(inputs) byte for byte: where
// oneDNN runs on bfloat16 rows (float32 ones at LoFi on AMX CPUs, bfloat16
// ones at any fidelity; two to four inputs) the shards gather the inputs'
// channels as they stage their rows and no concat runs; elsewhere (float32
// at HiFi4, five inputs, a tiled output) the inputs are concatenated first.
// Row and channel shards, images, 3x3 and 1x1, flattened rows, odd channel
// splits, an input in L1 height shards, prepared weights from either path;
// the errors.
TEST(Conv2d, ConcatInputsGatheredAsStaged) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.worker_threads = 2}));
  const bool amx = cpu_features().amx_bf16 && kernel_isa() == KernelIsa::kAvx512;
  struct ConcatCase {
    Case c;
    std::vector<uint32_t> split;  // channels per input
    bool flat = false;            // (1, 1, N*H*W, C) rows
  };
  const ConcatCase cases[] = {
      {{1, 24, 20, 64, 32, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::RELU}, {32, 32}},          // a UNet decoder
      {{2, 9, 11, 40, 24, 1, 1, 1, 1, 1, {0, 0, 0, 0}, UnaryOpType::SILU}, {16, 8, 16}, true},  // C2f, images
      {{1, 7, 7, 256, 256, 3, 3, 1, 1, 1, {1, 1, 1, 1}}, {128, 64, 32, 32}},                    // channel shards
      {{1, 13, 17, 48, 16, 3, 3, 2, 1, 1, {1, 0, 1, 2}, UnaryOpType::GELU}, {24, 24}},          // stride 2, asymmetric
      {{1, 12, 10, 80, 32, 3, 3, 1, 1, 1, {1, 1, 1, 1}}, {16, 16, 16, 16, 16}},                 // five: concatenated
  };
  for (const ConcatCase& cc : cases)
    for (MathFidelity fid : {MathFidelity::LoFi, MathFidelity::HiFi4})
      for (DataType dt : {DataType::FLOAT32, DataType::BFLOAT16}) {
        const Case& cs = cc.c;
        const Conv2dParams p = to_params(cs);
        SCOPED_TRACE(fmt::format("{} {} parts {} {}", p.descriptor(), cc.split.size(), math_fidelity_name(fid),
                                 data_type_name(dt)));
        std::vector<Tensor> parts;
        for (size_t i = 0; i < cc.split.size(); ++i) {
          const Shape shape =
              cc.flat ? Shape{1, 1, cs.n * cs.h * cs.w, cc.split[i]} : Shape{cs.n, cs.h, cs.w, cc.split[i]};
          ASSERT_OK_AND_ASSIGN(
              Tensor t,
              to_device(testing::random_tensor(shape, dt, Layout::ROW_MAJOR, 10 + static_cast<int>(i)), *dev));
          parts.push_back(t);
        }
        ASSERT_OK_AND_ASSIGN(Tensor w,
                             Tensor::from_vector(testing::random_values(uint64_t{cs.k} * cs.c * cs.kh * cs.kw, 2, 0.2f),
                                                 Shape{cs.k, cs.c, cs.kh, cs.kw}, DataType::FLOAT32));
        ASSERT_OK_AND_ASSIGN(Tensor b,
                             Tensor::from_vector(testing::random_values(cs.k, 3), Shape{cs.k}, DataType::FLOAT32));
        Conv2dConfig cfg{.weights_dtype = DataType::FLOAT32};
        cfg.compute_config.math_fidelity = fid;
        ASSERT_OK(enable_profiler(*dev));
        ASSERT_OK_AND_ASSIGN(Conv2dResult got, conv2d_concat(parts, w, b, p, cfg));
        ASSERT_OK_AND_ASSIGN(DeviceProfile prof, read_profile(*dev));
        const bool concat_ran = std::ranges::any_of(
            prof.ops, [](const OpTiming& t) { return t.kernel_name.find("concat") != std::string::npos; });
        // bfloat16 rows gather wherever oneDNN's bfloat16 kernel runs them.
        const bool bf16_onednn = std::ranges::any_of(
            prof.ops, [](const OpTiming& t) { return t.kernel_name.starts_with("bf16_conv2d__onednn"); });
        const bool fused =
            cc.split.size() <= 4 && (dt == DataType::FLOAT32 ? amx && fid == MathFidelity::LoFi : bf16_onednn);
        EXPECT_EQ(concat_ran, !fused);
        ASSERT_OK_AND_ASSIGN(Tensor x, concat(parts, parts[0].shape().rank() - 1));
        ASSERT_OK_AND_ASSIGN(Conv2dResult want, conv2d(x, w, b, p, cfg));
        EXPECT_EQ(got.output.spec(), want.output.spec());
        EXPECT_EQ(testing::host_bytes(got.output.cpu().value()), testing::host_bytes(want.output.cpu().value()));
        // Prepared weights: either path's serve the other.
        ASSERT_OK_AND_ASSIGN(Conv2dResult again, conv2d_concat(parts, want.weights, p, cfg));
        EXPECT_EQ(testing::host_bytes(again.output.cpu().value()), testing::host_bytes(want.output.cpu().value()));
        ASSERT_OK_AND_ASSIGN(Conv2dResult plain, conv2d(x, got.weights, p, cfg));
        EXPECT_EQ(testing::host_bytes(plain.output.cpu().value()), testing::host_bytes(want.output.cpu().value()));
        ASSERT_OK(disable_profiler(*dev));
      }
  // A tiled output: concatenated first, then the same tiles as conv2d's.
  const Conv2dParams p = to_params(cases[0].c);
  std::vector<Tensor> parts;
  for (int i = 0; i < 2; ++i)
    parts.push_back(
        to_device(testing::random_tensor(Shape{1, 24, 20, 32}, DataType::FLOAT32, Layout::ROW_MAJOR, i), *dev).value());
  ASSERT_OK_AND_ASSIGN(Tensor w, Tensor::from_vector(testing::random_values(32 * 64 * 9, 2, 0.2f), Shape{32, 64, 3, 3},
                                                     DataType::FLOAT32));
  Conv2dConfig tiles{.weights_dtype = DataType::FLOAT32, .output_layout = Layout::TILE};
  tiles.compute_config.math_fidelity = MathFidelity::LoFi;
  ASSERT_OK_AND_ASSIGN(Conv2dResult tg, conv2d_concat(parts, w, std::nullopt, p, tiles));
  ASSERT_OK_AND_ASSIGN(Conv2dResult tw, conv2d(concat(parts, 3).value(), w, std::nullopt, p, tiles));
  EXPECT_EQ(tg.output.layout(), Layout::TILE);
  EXPECT_EQ(testing::host_bytes(tg.output.cpu().value()), testing::host_bytes(tw.output.cpu().value()));
  // An input in height shards of L1: gathered as well (no concat at LoFi on AMX).
  Conv2dConfig lofi{.weights_dtype = DataType::FLOAT32};
  lofi.compute_config.math_fidelity = MathFidelity::LoFi;
  const MemoryConfig hs =
      testing::sharded(TensorMemoryLayout::HEIGHT_SHARDED, BufferType::L1, CoreRange({0, 0}, {1, 0}), 240, 32);
  std::vector<Tensor> mixed = {parts[0], to_memory_config(parts[1], hs).value()};
  ASSERT_OK(enable_profiler(*dev));
  ASSERT_OK_AND_ASSIGN(Conv2dResult mg, conv2d_concat(mixed, w, std::nullopt, p, lofi));
  ASSERT_OK_AND_ASSIGN(DeviceProfile mprof, read_profile(*dev));
  ASSERT_OK(disable_profiler(*dev));
  EXPECT_EQ(std::ranges::any_of(mprof.ops,
                                [](const OpTiming& t) { return t.kernel_name.find("concat") != std::string::npos; }),
            !amx);
  ASSERT_OK_AND_ASSIGN(Conv2dResult mw, conv2d(concat(parts, 3).value(), w, std::nullopt, p, lofi));
  EXPECT_EQ(testing::host_bytes(mg.output.cpu().value()), testing::host_bytes(mw.output.cpu().value()));
  // Errors.
  EXPECT_ERROR(conv2d_concat(std::span<const Tensor>(), w, std::nullopt, p), StatusCode::kInvalidArgument,
               "conv2d_concat: expected at least one input, found none");
  std::vector<Tensor> short_parts = {
      parts[0],
      to_device(testing::random_tensor(Shape{1, 24, 20, 16}, DataType::FLOAT32, Layout::ROW_MAJOR, 3), *dev).value()};
  EXPECT_ERROR(conv2d_concat(short_parts, w, std::nullopt, p), StatusCode::kInvalidArgument,
               "the inputs' channels sum to 48, expected in_channels = 64");
  std::vector<Tensor> odd = {
      parts[0],
      to_device(testing::random_tensor(Shape{1, 24, 21, 32}, DataType::FLOAT32, Layout::ROW_MAJOR, 3), *dev).value()};
  EXPECT_ERROR(conv2d_concat(odd, w, std::nullopt, p), StatusCode::kInvalidArgument,
               "expected inputs that differ only in channels (the last dim), found [1,24,20,32] and [1,24,21,32]");
  std::vector<Tensor> host = {parts[0],
                              testing::random_tensor(Shape{1, 24, 20, 32}, DataType::FLOAT32, Layout::ROW_MAJOR, 3)};
  EXPECT_ERROR(conv2d_concat(host, w, std::nullopt, p), StatusCode::kInvalidArgument, "input 1");
}

// A SiLU conv with a residual at LoFi on AMX (YOLO's bottlenecks): oneDNN's
// bfloat16 kernel, then Tessera's SiLU and add on each shard's stage. Against
// the reference on bfloat16-rounded operands; in place, the same bytes.
TEST(Conv2d, LoFiSiluThenResidualOnAmx) {
  if (!cpu_features().amx_bf16 || kernel_isa() != KernelIsa::kAvx512) GTEST_SKIP() << "no AMX";
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.worker_threads = 2}));
  const Case cases[] = {
      {1, 40, 40, 32, 32, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::SILU},  // row shards
      {2, 13, 11, 40, 24, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::SILU},  // images, odd sizes, tails
  };
  Conv2dConfig lofi{.weights_dtype = DataType::FLOAT32};
  lofi.compute_config.math_fidelity = MathFidelity::LoFi;
  for (const Case& cs : cases)
    for (UnaryOpType post : {UnaryOpType::IDENTITY, UnaryOpType::RELU}) {
      const Conv2dParams p = to_params(cs);
      SCOPED_TRACE(fmt::format("{} post={}", p.descriptor(), unary_op_name(post)));
      Tensor x = testing::random_tensor(Shape{cs.n, cs.h, cs.w, cs.c}, DataType::FLOAT32, Layout::ROW_MAJOR, 1);
      ASSERT_OK_AND_ASSIGN(Tensor w,
                           Tensor::from_vector(testing::random_values(uint64_t{cs.k} * cs.c * cs.kh * cs.kw, 2, 0.2f),
                                               Shape{cs.k, cs.c, cs.kh, cs.kw}, DataType::FLOAT32));
      ASSERT_OK_AND_ASSIGN(Tensor b,
                           Tensor::from_vector(testing::random_values(cs.k, 3), Shape{cs.k}, DataType::FLOAT32));
      const Shape out{cs.n, p.output_height(), p.output_width(), cs.k};
      Tensor res = testing::random_tensor(out, DataType::FLOAT32, Layout::ROW_MAJOR, 7);
      ASSERT_OK_AND_ASSIGN(Tensor dx, to_device(x, *dev));
      ASSERT_OK_AND_ASSIGN(Tensor dres, to_device(res, *dev));
      ASSERT_OK(enable_profiler(*dev));
      ASSERT_OK_AND_ASSIGN(Conv2dResult r, conv2d_with_residual(dx, w, b, p, Conv2dResidual{dres, {post}}, lofi));
      EXPECT_NE(conv_kernel_run(*dev).find("amx"), std::string::npos);
      ASSERT_OK_AND_ASSIGN(Tensor got_t, r.output.cpu());
      ASSERT_OK_AND_ASSIGN(std::vector<float> got, got_t.to_vector());
      ASSERT_OK_AND_ASSIGN(Tensor conv_t, lofi_reference(x, w, b, p));
      ASSERT_OK_AND_ASSIGN(Tensor conv_r, conv_t.view(out));
      ASSERT_OK_AND_ASSIGN(Tensor ref_t, reference::binary(conv_r, res, BinaryOpType::ADD, {post}, DataType::FLOAT32));
      testing::expect_conv_close(got, ref_t.to_vector().value(), DataType::FLOAT32);
      ASSERT_OK_AND_ASSIGN(Tensor spare, to_device(res, *dev));
      ASSERT_OK_AND_ASSIGN(Conv2dResult in_place,
                           conv2d_with_residual(dx, r.weights, p, Conv2dResidual{spare, {post}, true}, lofi));
      EXPECT_EQ(in_place.output.buffer(), spare.buffer());
      EXPECT_EQ(testing::host_bytes(in_place.output.cpu().value()), testing::host_bytes(got_t));
    }
}

TEST(Conv2d, LoFiFloat32ComputesInBfloat16OnAmx) {
  if (!cpu_features().amx_bf16 || kernel_isa() != KernelIsa::kAvx512) GTEST_SKIP() << "no AMX";
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.worker_threads = 2}));
  const Case cases[] = {
      {1, 56, 56, 64, 64, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::RELU},  // row shards
      {1, 56, 56, 64, 64, 1, 1, 1, 1, 1, {0, 0, 0, 0}, UnaryOpType::RELU},  // pointwise
      {1, 32, 32, 16, 64, 7, 7, 2, 1, 1, {3, 3, 3, 3}, UnaryOpType::RELU},  // 7x7 stride 2
      {1, 7, 7, 256, 256, 3, 3, 1, 1, 1, {1, 1, 1, 1}, UnaryOpType::RELU},  // output channels
      {2, 13, 11, 40, 24, 3, 3, 2, 1, 1, {1, 1, 1, 1}, UnaryOpType::SILU},  // images, odd sizes, tails
      {1, 17, 19, 16, 48, 3, 3, 1, 2, 1, {2, 0, 1, 2}, UnaryOpType::GELU},  // dilation, asymmetric pad
      {1, 28, 28, 64, 128, 1, 1, 2, 1, 1, {0, 0, 0, 0}},                    // strided pointwise
  };
  Conv2dConfig lofi{.weights_dtype = DataType::FLOAT32};
  lofi.compute_config.math_fidelity = MathFidelity::LoFi;
  for (const Case& cs : cases)
    for (DataType wt : {DataType::FLOAT32, DataType::BFLOAT8_B}) {
      const Conv2dParams p = to_params(cs);
      SCOPED_TRACE(fmt::format("{} w={}", p.descriptor(), data_type_name(wt)));
      Tensor x = testing::random_tensor(Shape{cs.n, cs.h, cs.w, cs.c}, DataType::FLOAT32, Layout::ROW_MAJOR, 1);
      ASSERT_OK_AND_ASSIGN(Tensor w,
                           Tensor::from_vector(testing::random_values(uint64_t{cs.k} * cs.c * cs.kh * cs.kw, 2, 0.2f),
                                               Shape{cs.k, cs.c, cs.kh, cs.kw}, DataType::FLOAT32));
      ASSERT_OK_AND_ASSIGN(Tensor b,
                           Tensor::from_vector(testing::random_values(cs.k, 3), Shape{cs.k}, DataType::FLOAT32));
      ASSERT_OK_AND_ASSIGN(Tensor dx, to_device(x, *dev));
      Conv2dConfig cfg = lofi;
      cfg.weights_dtype = wt;
      ASSERT_OK(enable_profiler(*dev));
      ASSERT_OK_AND_ASSIGN(Conv2dResult r, conv2d(dx, w, b, p, cfg));
      EXPECT_NE(conv_kernel_run(*dev).find("amx"), std::string::npos);
      EXPECT_EQ(r.output.dtype(), DataType::FLOAT32);
      ASSERT_OK_AND_ASSIGN(Tensor got_t, r.output.cpu());
      ASSERT_OK_AND_ASSIGN(std::vector<float> got, got_t.to_vector());
      ASSERT_OK_AND_ASSIGN(Tensor ref_t, lofi_reference(x, w, b, p, wt));
      ASSERT_OK_AND_ASSIGN(std::vector<float> ref, ref_t.to_vector());
      testing::expect_conv_close(got, ref, DataType::FLOAT32);
      // The prepared weights again: into height-sharded rows from height-sharded input, and into tiles.
      const uint32_t rows = cs.n * p.output_height() * p.output_width();
      const uint32_t cores = rows % 2 ? 1 : 2;
      const MemoryConfig hs = testing::sharded(TensorMemoryLayout::HEIGHT_SHARDED, BufferType::L1,
                                               CoreRange({0, 0}, {cores - 1, 0}), rows / cores, cs.k);
      ASSERT_OK_AND_ASSIGN(Conv2dResult to_shards, conv2d(dx, r.weights, p, [&] {
                             Conv2dConfig c = cfg;
                             c.output_memory_config = hs;
                             return c;
                           }()));
      EXPECT_EQ(testing::host_bytes(to_shards.output.cpu().value()), testing::host_bytes(got_t));
      ASSERT_OK_AND_ASSIGN(Tensor flat, dx.view(Shape{1, 1, cs.n * cs.h * cs.w, cs.c}));
      ASSERT_OK_AND_ASSIGN(Tensor tiled_in, to_layout(flat, Layout::TILE));
      ASSERT_OK_AND_ASSIGN(Conv2dResult from_tiles, conv2d(tiled_in, r.weights, p, cfg));
      EXPECT_EQ(testing::host_bytes(from_tiles.output.cpu().value()), testing::host_bytes(got_t));
      Conv2dConfig tiles = cfg;
      tiles.output_layout = Layout::TILE;
      ASSERT_OK_AND_ASSIGN(Conv2dResult tiled, conv2d(dx, r.weights, p, tiles));
      ASSERT_OK_AND_ASSIGN(Tensor untiled, untilize(tiled.output));
      EXPECT_EQ(testing::host_bytes(untiled.cpu().value()), testing::host_bytes(got_t));
      // Other fidelities keep float32 operands, and another program's weights.
      for (MathFidelity f : {MathFidelity::HiFi2, MathFidelity::HiFi4}) {
        Conv2dConfig other = cfg;
        other.compute_config.math_fidelity = f;
        ASSERT_OK(read_profile(*dev).status());
        ASSERT_OK(conv2d(dx, w, b, p, other).status());
        EXPECT_EQ(conv_kernel_run(*dev).find("amx"), std::string::npos) << math_fidelity_name(f);
        auto refused = conv2d(dx, r.weights, p, other);
        EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument) << math_fidelity_name(f);
      }
      ASSERT_OK(disable_profiler(*dev));
    }
  // RGB stems (3 input channels): a 3x3 one (27 products per output) stays on
  // float32 operands; a 7x7 one (147) lowers, as ResNet-50's and YOLO's.
  for (uint32_t k : {3u, 7u}) {
    const Case cs{1, 32, 32, 3, 64, k, k, 2, 1, 1, {k / 2, k / 2, k / 2, k / 2}, UnaryOpType::RELU};
    const Conv2dParams p = to_params(cs);
    SCOPED_TRACE(p.descriptor());
    Tensor x = testing::random_tensor(Shape{1, 32, 32, 3}, DataType::FLOAT32, Layout::ROW_MAJOR, 7);
    ASSERT_OK_AND_ASSIGN(Tensor w, Tensor::from_vector(testing::random_values(64 * 3 * k * k, 8, 0.2f),
                                                       Shape{64, 3, k, k}, DataType::FLOAT32));
    ASSERT_OK_AND_ASSIGN(Tensor dx, to_device(x, *dev));
    ASSERT_OK(enable_profiler(*dev));
    ASSERT_OK_AND_ASSIGN(Conv2dResult r, conv2d(dx, w, std::nullopt, p, lofi));
    const bool lowered = k == 7;
    EXPECT_EQ(conv_kernel_run(*dev).find("amx") != std::string::npos, lowered);
    ASSERT_OK(disable_profiler(*dev));
    ASSERT_OK_AND_ASSIGN(Tensor ref_t, lowered ? lofi_reference(x, w, std::nullopt, p)
                                               : reference::conv2d(x, w, std::nullopt, p, DataType::FLOAT32));
    testing::expect_conv_close(r.output.cpu().value().to_vector().value(), ref_t.to_vector().value(),
                               DataType::FLOAT32);
  }
  // A residual, added in float32 to the float32 conv.
  const Case cs{1, 14, 14, 64, 256, 1, 1, 1, 1, 1, {0, 0, 0, 0}};
  const Conv2dParams p = to_params(cs);
  Tensor x = testing::random_tensor(Shape{1, 14, 14, 64}, DataType::FLOAT32, Layout::ROW_MAJOR, 4);
  Tensor res = testing::random_tensor(Shape{1, 14, 14, 256}, DataType::FLOAT32, Layout::ROW_MAJOR, 5);
  ASSERT_OK_AND_ASSIGN(Tensor w, Tensor::from_vector(testing::random_values(256 * 64, 6, 0.2f), Shape{256, 64, 1, 1},
                                                     DataType::FLOAT32));
  ASSERT_OK_AND_ASSIGN(Tensor dx, to_device(x, *dev));
  ASSERT_OK_AND_ASSIGN(Tensor dres, to_device(res, *dev));
  ASSERT_OK_AND_ASSIGN(Conv2dResult r,
                       conv2d_with_residual(dx, w, std::nullopt, p, Conv2dResidual{dres, {UnaryOpType::RELU}}, lofi));
  ASSERT_OK_AND_ASSIGN(Tensor conv_t, lofi_reference(x, w, std::nullopt, p));
  ASSERT_OK_AND_ASSIGN(Tensor conv_r, conv_t.view(res.shape()));
  ASSERT_OK_AND_ASSIGN(Tensor ref_t,
                       reference::binary(conv_r, res, BinaryOpType::ADD, {UnaryOpType::RELU}, DataType::FLOAT32));
  testing::expect_conv_close(r.output.cpu().value().to_vector().value(), ref_t.to_vector().value(), DataType::FLOAT32);
}

void check_winograd(Device& dev, size_t index, const Case& cs) {
  {
    const Conv2dParams p = to_params(cs);
    SCOPED_TRACE(fmt::format("{} isa {}", p.descriptor(), static_cast<int>(kernel_isa())));
    Tensor x = testing::random_tensor(Shape{cs.n, cs.h, cs.w, cs.c}, DataType::FLOAT32, Layout::ROW_MAJOR, 1);
    ASSERT_OK_AND_ASSIGN(Tensor w, Tensor::from_vector(testing::random_values(uint64_t{cs.k} * cs.c * 9, 2, 0.2f),
                                                       Shape{cs.k, cs.c, 3, 3}, DataType::FLOAT32));
    ASSERT_OK_AND_ASSIGN(Tensor b,
                         Tensor::from_vector(testing::random_values(cs.k, 3), Shape{cs.k}, DataType::FLOAT32));
    ASSERT_OK_AND_ASSIGN(Tensor dx, to_device(x, dev));
    Conv2dConfig lofi{.weights_dtype = DataType::FLOAT32};
    lofi.compute_config.math_fidelity = MathFidelity::HiFi2;
    ASSERT_OK(enable_profiler(dev));
    ASSERT_OK_AND_ASSIGN(Conv2dResult r, conv2d(dx, w, b, p, lofi));
    ASSERT_OK_AND_ASSIGN(Tensor got_t, r.output.cpu());
    ASSERT_OK_AND_ASSIGN(DeviceProfile prof, read_profile(dev));
    ASSERT_EQ(prof.ops.size(), 1u);
    // oneDNN 2.6's Winograd kernel (AVX-512) is checked on the first three
    // shapes; the others may fall back to its direct kernel.
    const bool wino = kernel_isa() == KernelIsa::kAvx2 || (kernel_isa() == KernelIsa::kAvx512 && index < 3);
    if (wino || kernel_isa() == KernelIsa::kScalar) {
      EXPECT_EQ(prof.ops[0].kernel_name.find("wino") != std::string::npos, wino) << prof.ops[0].kernel_name;
    }
    ASSERT_OK_AND_ASSIGN(std::vector<float> got, got_t.to_vector());
    ASSERT_OK_AND_ASSIGN(Tensor ref_t, reference::conv2d(x, w, b, p, DataType::FLOAT32));
    ASSERT_OK_AND_ASSIGN(std::vector<float> ref, ref_t.to_vector());
    float mx = 1;
    for (float v : ref) mx = std::max(mx, std::fabs(v));
    size_t bad = 0;
    for (size_t i = 0; i < ref.size(); ++i) bad += !(std::fabs(got[i] - ref[i]) <= 1e-3f * mx);
    EXPECT_EQ(bad, 0u);
    EXPECT_GE(testing::pcc(got, ref), 0.99999);
    // The prepared weights again, and into tiles: the same values.
    ASSERT_OK_AND_ASSIGN(Conv2dResult again, conv2d(dx, r.weights, p, lofi));
    EXPECT_EQ(testing::host_bytes(again.output.cpu().value()), testing::host_bytes(got_t));
    Conv2dConfig tiles = lofi;
    tiles.output_layout = Layout::TILE;
    ASSERT_OK_AND_ASSIGN(Conv2dResult tiled, conv2d(dx, r.weights, p, tiles));
    ASSERT_OK_AND_ASSIGN(Tensor untiled, untilize(tiled.output));
    EXPECT_EQ(testing::host_bytes(untiled.cpu().value()), testing::host_bytes(got_t));
    // HiFi4 (the default): the direct kernel.
    ASSERT_OK(read_profile(dev).status());
    ASSERT_OK(conv2d(dx, w, b, p, {.weights_dtype = DataType::FLOAT32}).status());
    ASSERT_OK_AND_ASSIGN(DeviceProfile exact, read_profile(dev));
    for (const OpTiming& t : exact.ops) EXPECT_EQ(t.kernel_name.find("wino"), std::string::npos) << t.kernel_name;
    ASSERT_OK(disable_profiler(dev));
  }
}

}  // namespace
}  // namespace tessera
