// conv_transpose2d against the double reference run on the operands the
// device uses (weights rounded by round_conv_transpose2d_weights), with the
// convolution tolerances of test_util.h and PCC >= 0.9999; shards over the
// output rows must agree with one shard; prepared weights are reused.
#include "tessera/ops/reference.h"
#include "tessera/ops/conv_transpose2d.h"

#include "tessera/base/cpu_features.h"
#include "tessera/device/profiler.h"

#include "test_util.h"

namespace tessera {
namespace {

ConvTranspose2dParams params(uint32_t n, uint32_t h, uint32_t w, uint32_t cin, uint32_t cout, uint32_t k, uint32_t s,
                             uint32_t pad, uint32_t op = 0, uint32_t d = 1, uint32_t groups = 1,
                             UnaryOpType act = UnaryOpType::IDENTITY) {
  ConvTranspose2dParams p;
  p.batch_size = n;
  p.input_height = h;
  p.input_width = w;
  p.in_channels = cin;
  p.out_channels = cout;
  p.kernel_size = {k, k};
  p.stride = {s, s};
  p.padding = {pad, pad};
  p.output_padding = {op, op};
  p.dilation = {d, d};
  p.groups = groups;
  p.activation = {act, 0.1f};
  return p;
}

void check(Device& dev, const ConvTranspose2dParams& p, DataType in_type, DataType w_type) {
  SCOPED_TRACE(fmt::format("{} in={} w={} workers={}", p.descriptor(), data_type_name(in_type), data_type_name(w_type),
                           dev.workers().num_threads()));
  Tensor x = testing::random_tensor(Shape{p.batch_size, p.input_height, p.input_width, p.in_channels}, in_type,
                                    Layout::ROW_MAJOR, 1);
  const Shape ws{p.in_channels, p.out_channels / p.groups, p.kernel_size[0], p.kernel_size[1]};
  ASSERT_OK_AND_ASSIGN(Tensor w, Tensor::from_vector(testing::random_values(ws.volume(), 2, 0.2f), ws, DataType::FLOAT32));
  ASSERT_OK_AND_ASSIGN(Tensor b, Tensor::from_vector(testing::random_values(p.out_channels, 3), Shape{p.out_channels},
                                                     DataType::FLOAT32));
  ASSERT_OK_AND_ASSIGN(Tensor dx, to_device(x, dev));
  ASSERT_OK_AND_ASSIGN(Conv2dResult r, conv_transpose2d(dx, w, b, p, {.weights_dtype = w_type}));
  EXPECT_EQ(r.output_height, p.output_height());
  EXPECT_EQ(r.output_width, p.output_width());
  ASSERT_OK_AND_ASSIGN(Tensor got_t, r.output.cpu());
  ASSERT_OK_AND_ASSIGN(std::vector<float> got, got_t.to_vector());
  ASSERT_OK_AND_ASSIGN(Tensor rw, round_conv_transpose2d_weights(w, p, w_type, in_type));
  ASSERT_OK_AND_ASSIGN(Tensor ref_t, reference::conv_transpose2d(x, rw, b, p, DataType::FLOAT32));
  ASSERT_OK_AND_ASSIGN(std::vector<float> ref, ref_t.to_vector());
  testing::expect_conv_close(got, ref, in_type);
  ASSERT_OK_AND_ASSIGN(Conv2dResult again, conv_transpose2d(dx, r.weights, p, {.weights_dtype = w_type}));
  EXPECT_EQ(testing::host_bytes(again.output.cpu().value()), testing::host_bytes(got_t));
}

const ConvTranspose2dParams kCases[] = {
    params(1, 8, 10, 64, 32, 2, 2, 0),                                  // the UNet's upconv
    params(2, 5, 7, 6, 10, 3, 2, 1, 1, 1, 1, UnaryOpType::RELU),        // decoder 3x3 s2 with output padding
    params(1, 6, 6, 8, 8, 4, 2, 1),                                     // 4x4 s2 p1 (DCGAN-style)
    params(1, 9, 11, 8, 12, 3, 1, 1, 0, 1, 1, UnaryOpType::SILU),       // stride 1 (same size)
    params(1, 7, 5, 8, 8, 3, 2, 0, 1),                                  // output padding beyond the padding
    params(1, 6, 7, 8, 12, 3, 1, 2, 0, 2, 2, UnaryOpType::HARDSIGMOID), // dilation, groups, post activation
    params(1, 3, 3, 4, 4, 1, 3, 0),                                     // stride larger than the kernel
    params(1, 13, 1, 5, 3, 3, 2, 1),
};

TEST(ConvTranspose2d, MatchesReference) {
  for (int workers : {1, 2, 5}) {
    ASSERT_OK_AND_ASSIGN(auto dev, open_device({.worker_threads = workers}));
    for (const auto& p : kCases)
      for (DataType in : {DataType::FLOAT32, DataType::BFLOAT16}) check(*dev, p, in, in);
  }
}

// NaN and infinities in the input reach the output as the reference's
// (non-negative weights keep infinities' signs through the sums), with and
// without a fused activation, on both tiers and each kernel kind the cases
// reach (patches, one matmul for kernel = stride, the generic scatter).
TEST(ConvTranspose2d, SpecialValuesAsTheReference) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  const KernelIsa native = kernel_isa();
  for (KernelIsa isa : {KernelIsa::kAvx512, KernelIsa::kAvx2})
    for (const ConvTranspose2dParams& p : {params(1, 8, 10, 16, 8, 2, 2, 0), params(2, 5, 7, 6, 10, 3, 2, 1, 1, 1, 1, UnaryOpType::RELU),
                                           params(1, 6, 6, 8, 8, 4, 2, 1)}) {
      set_kernel_isa_limit(isa);
      if (kernel_isa() != isa) continue;
      SCOPED_TRACE(fmt::format("{} {}", p.descriptor(), kernel_isa_name(isa)));
      const Shape xs{p.batch_size, p.input_height, p.input_width, p.in_channels};
      std::vector<float> xv = testing::random_values(xs.volume(), 1, 1.0f);
      testing::add_special_values(xv, 4, 53);
      ASSERT_OK_AND_ASSIGN(Tensor x, Tensor::from_vector(xv, xs, DataType::FLOAT32));
      const Shape ws{p.in_channels, p.out_channels / p.groups, p.kernel_size[0], p.kernel_size[1]};
      std::vector<float> wv = testing::random_values(ws.volume(), 2, 0.2f);
      for (float& v : wv) v = std::fabs(v) + 0.01f;
      ASSERT_OK_AND_ASSIGN(Tensor w, Tensor::from_vector(wv, ws, DataType::FLOAT32));
      ASSERT_OK_AND_ASSIGN(Tensor dx, to_device(x, *dev));
      ASSERT_OK_AND_ASSIGN(Conv2dResult r, conv_transpose2d(dx, w, std::nullopt, p, {}));
      ASSERT_OK_AND_ASSIGN(std::vector<float> got, r.output.cpu().value().to_vector());
      ASSERT_OK_AND_ASSIGN(Tensor ref_t, reference::conv_transpose2d(x, w, std::nullopt, p, DataType::FLOAT32));
      ASSERT_OK_AND_ASSIGN(std::vector<float> ref, ref_t.to_vector());
      ASSERT_EQ(got.size(), ref.size());
      int bad = 0;
      for (size_t i = 0; i < ref.size() && bad < 3; ++i) {
        const bool same = std::isnan(ref[i]) ? std::isnan(got[i]) : std::isinf(ref[i]) ? got[i] == ref[i] : std::isfinite(got[i]);
        if (!same && ++bad) ADD_FAILURE() << "output " << i << ": " << got[i] << ", reference " << ref[i];
      }
    }
  set_kernel_isa_limit(native);
}

TEST(ConvTranspose2d, KernelEqualsStrideAsOneMatmul) {
  // The UNet's upconvs take the matmul path (the patch kernel on AVX2-only
  // CPUs, where the same rows are staged); on wormhole_b0 (12 DRAM banks)
  // its result cannot be a view and is copied into place.
  ASSERT_OK_AND_ASSIGN(auto wh, open_device({.descriptor = "wormhole_b0"}));
  for (const auto& p : {params(1, 8, 10, 64, 32, 2, 2, 0, 0, 1, 1, UnaryOpType::RELU), params(2, 3, 5, 16, 8, 3, 3, 0),
                        params(1, 4, 6, 24, 40, 2, 2, 0)})
    for (DataType in : {DataType::FLOAT32, DataType::BFLOAT16}) check(*wh, p, in, in);
}

// On CPUs with AVX2 but not AVX-512 (here: the kernel set capped at AVX2),
// float32 and bfloat16 transposed convs whose kernel equals their stride
// run Tessera's patch kernel: row bands over two workers, 1 to 6-pixel
// blocks, output channels not a multiple of 16 (blocks of 16 columns
// straddling taps; one output channel: PP-OCR's last upconv), odd input
// channels, a 3x3 stride-3 kernel, batches, activations.
TEST(ConvTranspose2d, PatchKernelOnAvx2) {
  if (!cpu_features().avx2 || !cpu_features().fma) GTEST_SKIP() << "no AVX2";
  const KernelIsa native = kernel_isa();
  set_kernel_isa_limit(KernelIsa::kAvx2);
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.worker_threads = 2}));
  for (const auto& p : {params(1, 30, 40, 64, 32, 2, 2, 0), params(2, 9, 17, 13, 40, 2, 2, 0, 0, 1, 1, UnaryOpType::RELU),
                        params(1, 5, 7, 24, 16, 3, 3, 0, 0, 1, 1, UnaryOpType::SILU),
                        params(1, 6, 9, 24, 1, 2, 2, 0, 0, 1, 1, UnaryOpType::SIGMOID),
                        params(2, 7, 8, 24, 24, 2, 2, 0)}) {
    for (DataType in : {DataType::FLOAT32, DataType::BFLOAT16}) {
      ASSERT_OK(enable_profiler(*dev));
      check(*dev, p, in, DataType::FLOAT32);
      ASSERT_OK_AND_ASSIGN(DeviceProfile prof, read_profile(*dev));
      bool patches = false;
      for (const OpTiming& t : prof.ops) patches |= t.kernel_name.find("patches_avx2") != std::string::npos;
      EXPECT_TRUE(patches) << p.descriptor();
      ASSERT_OK(disable_profiler(*dev));
    }
  }
  set_kernel_isa_limit(native);
}

// On AVX-512 CPUs, float32 transposed convs whose kernel equals their stride,
// with output channels in whole 16-channel blocks and 256 Ki weights or more,
// run Tessera's AVX-512 patch kernel: tiles of 1 to 4 blocks within one
// tap's columns (cout 32: two per tap; 48: three; 240: 4, 4, 4, 3), odd
// input channels, weights in chunks (more than 1024 input channels), a 3x3
// stride-3 kernel, batches, activations in registers and through the float
// math table, block-float weights, one to five workers. bfloat16 rows and a
// smaller conv take the matmul.
TEST(ConvTranspose2d, PatchKernelOnAvx512) {
  if (kernel_isa() != KernelIsa::kAvx512) GTEST_SKIP() << "no AVX-512";
  auto ran_patches = [](Device& dev) {
    bool ran = false;
    const DeviceProfile prof = read_profile(dev).value();
    for (const OpTiming& t : prof.ops) ran |= t.kernel_name == "f32_conv_transpose2d__patches_avx512";
    return ran;
  };
  for (int workers : {2, 1, 5}) {
    ASSERT_OK_AND_ASSIGN(auto dev, open_device({.worker_threads = workers}));
    for (const auto& p : {params(1, 6, 8, 512, 256, 2, 2, 0), params(2, 5, 7, 257, 256, 2, 2, 0, 0, 1, 1, UnaryOpType::RELU),
                          params(1, 4, 5, 128, 240, 3, 3, 0, 0, 1, 1, UnaryOpType::SILU),
                          params(1, 3, 4, 1400, 48, 2, 2, 0, 0, 1, 1, UnaryOpType::RELU6),
                          params(1, 10, 12, 2048, 32, 2, 2, 0)}) {
      ASSERT_OK(enable_profiler(*dev));
      check(*dev, p, DataType::FLOAT32, DataType::FLOAT32);
      EXPECT_TRUE(ran_patches(*dev)) << p.descriptor();
      if (workers == 2) {
        check(*dev, p, DataType::FLOAT32, DataType::BFLOAT8_B);
        EXPECT_TRUE(ran_patches(*dev)) << p.descriptor();
        check(*dev, p, DataType::BFLOAT16, DataType::BFLOAT16);
        EXPECT_FALSE(ran_patches(*dev)) << p.descriptor();
      }
      ASSERT_OK(disable_profiler(*dev));
    }
  }
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.worker_threads = 2}));
  ASSERT_OK(enable_profiler(*dev));
  check(*dev, params(1, 8, 10, 256, 128, 2, 2, 0), DataType::FLOAT32, DataType::FLOAT32);  // 128 Ki weights
  EXPECT_FALSE(ran_patches(*dev));
  ASSERT_OK(disable_profiler(*dev));
}

// On CPUs with AMX, bfloat16 transposed convs whose kernel equals their
// stride run as a 1x1 conv to kh * kw * Cout channels (oneDNN's AMX kernel)
// and a permute into place: the UNet's upconvs, a batch, a 3x3 stride-3
// kernel, activations, block-float weights, prepared weights reused (check),
// one to five workers, a float32 result and a height-sharded one, and float32
// rows at LoFi (bfloat16 operands). Float32 rows at HiFi4, inputs wider than
// 128 pixels (at LoFi on bfloat16 operands too), and devices whose DRAM rows
// are not dense (wormhole_b0's 12 banks: the permute could not read the
// conv's result as a view), take the matmul.
TEST(ConvTranspose2d, PatchesAsOneByOneConvOnAmx) {
  if (kernel_isa() != KernelIsa::kAvx512 || !cpu_features().amx_bf16) GTEST_SKIP() << "no AMX";
  // Whether one check's launches ran the permute (the 1x1 path) and no matmul.
  auto as_conv = [](Device& dev, const ConvTranspose2dParams& p, DataType in, DataType wt) {
    EXPECT_OK(enable_profiler(dev));
    check(dev, p, in, wt);
    bool permute = false, matmul = false;
    const DeviceProfile prof = read_profile(dev).value();
    for (const OpTiming& t : prof.ops) {
      permute |= t.kernel_name.find("permute") != std::string::npos;
      matmul |= t.kernel_name.find("matmul") != std::string::npos;
    }
    EXPECT_OK(disable_profiler(dev));
    return permute && !matmul;
  };
  for (int workers : {2, 1, 5}) {
    ASSERT_OK_AND_ASSIGN(auto dev, open_device({.worker_threads = workers}));
    for (const auto& p : {params(1, 6, 8, 512, 256, 2, 2, 0), params(2, 5, 7, 24, 16, 2, 2, 0, 0, 1, 1, UnaryOpType::RELU),
                          params(1, 4, 5, 40, 32, 3, 3, 0, 0, 1, 1, UnaryOpType::SILU),
                          params(1, 9, 11, 64, 32, 2, 2, 0, 0, 1, 1, UnaryOpType::SIGMOID)}) {
      EXPECT_TRUE(as_conv(*dev, p, DataType::BFLOAT16, DataType::BFLOAT16)) << p.descriptor();
      if (workers == 2) {
        EXPECT_TRUE(as_conv(*dev, p, DataType::BFLOAT16, DataType::BFLOAT8_B)) << p.descriptor();
        EXPECT_FALSE(as_conv(*dev, p, DataType::FLOAT32, DataType::FLOAT32)) << p.descriptor();
      }
    }
  }
  ASSERT_OK_AND_ASSIGN(auto wh, open_device({.descriptor = "wormhole_b0"}));
  EXPECT_FALSE(as_conv(*wh, params(1, 8, 10, 64, 32, 2, 2, 0), DataType::BFLOAT16, DataType::BFLOAT16));
  // A float32 result, and height shards of the output rows: the same values
  // as dense bfloat16 rows through the matmul's reference.
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.worker_threads = 2}));
  EXPECT_FALSE(as_conv(*dev, params(1, 3, 130, 32, 16, 2, 2, 0), DataType::BFLOAT16, DataType::BFLOAT16));
  const auto p = params(1, 8, 10, 64, 32, 2, 2, 0, 0, 1, 1, UnaryOpType::RELU);
  Tensor x = testing::random_tensor(Shape{1, 8, 10, 64}, DataType::BFLOAT16, Layout::ROW_MAJOR, 1);
  ASSERT_OK_AND_ASSIGN(Tensor w, Tensor::from_vector(testing::random_values(64 * 32 * 4, 2, 0.2f), Shape{64, 32, 2, 2},
                                                     DataType::FLOAT32));
  ASSERT_OK_AND_ASSIGN(Tensor dx, to_device(x, *dev));
  ASSERT_OK_AND_ASSIGN(Tensor rw, round_conv_transpose2d_weights(w, p, DataType::BFLOAT16, DataType::BFLOAT16));
  ASSERT_OK_AND_ASSIGN(Tensor ref_t, reference::conv_transpose2d(x, rw, std::nullopt, p, DataType::FLOAT32));
  ASSERT_OK_AND_ASSIGN(std::vector<float> ref, ref_t.to_vector());
  ASSERT_OK_AND_ASSIGN(Conv2dResult f32, conv_transpose2d(dx, w, std::nullopt, p, {.dtype = DataType::FLOAT32}));
  EXPECT_EQ(f32.output.dtype(), DataType::FLOAT32);
  testing::expect_conv_close(f32.output.cpu().value().to_vector().value(), ref, DataType::BFLOAT16);
  const MemoryConfig sharded =
      testing::sharded(TensorMemoryLayout::HEIGHT_SHARDED, BufferType::L1, CoreRange({0, 0}, {1, 0}), 160, 32);
  ASSERT_OK_AND_ASSIGN(Conv2dResult sh,
                       conv_transpose2d(dx, w, std::nullopt, p, {.output_memory_config = sharded}));
  EXPECT_EQ(sh.output.memory_config(), sharded);
  testing::expect_conv_close(sh.output.cpu().value().to_vector().value(), ref, DataType::BFLOAT16);
  // float32 rows at LoFi: bfloat16-rounded operands, float32 out (against
  // the reference on the rounded input), prepared weights reused; `kernels`
  // gets the first call's launches. Up to 128 pixels wide the same 1x1 path,
  // wider the batched matmul, lowered as well (bfloat16 weights, float32
  // rows rounded as staged); at HiFi4 float32 operands.
  Conv2dConfig lofi{.weights_dtype = DataType::FLOAT32};
  lofi.compute_config.math_fidelity = MathFidelity::LoFi;
  ASSERT_OK(enable_profiler(*dev));
  auto check_lofi = [&](const ConvTranspose2dParams& q, const Shape& shape, uint32_t seed, std::string& kernels) {
    Tensor xq = testing::random_tensor(shape, DataType::FLOAT32, Layout::ROW_MAJOR, seed);
    ASSERT_OK_AND_ASSIGN(Tensor dq, to_device(xq, *dev));
    ASSERT_OK(read_profile(*dev).status());  // clears it
    ASSERT_OK_AND_ASSIGN(Conv2dResult r, conv_transpose2d(dq, w, std::nullopt, q, lofi));
    ASSERT_OK_AND_ASSIGN(const DeviceProfile prof, read_profile(*dev));
    for (const OpTiming& t : prof.ops) kernels += t.kernel_name + " ";
    EXPECT_EQ(r.output.dtype(), DataType::FLOAT32);
    ASSERT_OK_AND_ASSIGN(Tensor xb, Tensor::from_vector(xq.to_vector().value(), xq.shape(), DataType::BFLOAT16));
    ASSERT_OK_AND_ASSIGN(Tensor want, reference::conv_transpose2d(xb, rw, std::nullopt, q, DataType::FLOAT32));
    testing::expect_conv_close(r.output.cpu().value().to_vector().value(), want.to_vector().value(),
                               DataType::FLOAT32);
    ASSERT_OK_AND_ASSIGN(Conv2dResult again, conv_transpose2d(dq, r.weights, q, lofi));
    EXPECT_EQ(testing::host_bytes(again.output.cpu().value()), testing::host_bytes(r.output.cpu().value()));
  };
  std::string narrow, wide;
  check_lofi(p, Shape{1, 8, 10, 64}, 3, narrow);
  EXPECT_TRUE(narrow.find("amx") != std::string::npos && narrow.find("permute") != std::string::npos) << narrow;
  check_lofi(params(1, 3, 130, 64, 32, 2, 2, 0, 0, 1, 1, UnaryOpType::RELU), Shape{1, 3, 130, 64}, 4, wide);
  EXPECT_TRUE(wide.find("bf16_matmul") != std::string::npos && wide.find("permute") == std::string::npos) << wide;
  EXPECT_FALSE(as_conv(*dev, params(1, 3, 130, 32, 16, 2, 2, 0), DataType::FLOAT32, DataType::FLOAT32));
  ASSERT_OK(disable_profiler(*dev));
}

TEST(ConvTranspose2d, BlockFloatWeights) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  for (DataType wt : {DataType::BFLOAT8_B, DataType::BFLOAT4_B}) check(*dev, kCases[0], DataType::BFLOAT16, wt);
}

TEST(ConvTranspose2d, Errors) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  auto p = params(1, 4, 4, 8, 4, 2, 2, 0);
  ASSERT_OK_AND_ASSIGN(Tensor x, to_device(testing::random_tensor(Shape{1, 4, 4, 8}, DataType::FLOAT32,
                                                                   Layout::ROW_MAJOR, 1), *dev));
  Tensor w = testing::random_tensor(Shape{4, 8, 2, 2}, DataType::FLOAT32, Layout::ROW_MAJOR, 2);
  EXPECT_ERROR(conv_transpose2d(x, w, std::nullopt, p), StatusCode::kInvalidArgument,
               "expected weight shape [8,4,2,2] (in_channels, out_channels/groups, kh, kw), found [4,8,2,2]");
  auto bad = p;
  bad.output_padding = {2, 2};
  EXPECT_ERROR(conv_transpose2d(x, w, std::nullopt, bad), StatusCode::kInvalidArgument,
               "output_padding 2 must be smaller than stride 2 or dilation 1");
  bad = p;
  bad.groups = 3;
  EXPECT_ERROR(conv_transpose2d(x, w, std::nullopt, bad), StatusCode::kInvalidArgument, "must be divisible by groups 3");
  bad = p;
  bad.in_channels = 7;
  EXPECT_ERROR(conv_transpose2d(x, w, std::nullopt, bad), StatusCode::kInvalidArgument,
               "conv_transpose2d: expected input (1,4,4,7)");
}

}  // namespace
}  // namespace tessera
