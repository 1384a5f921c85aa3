// matmul / linear against the double-accumulation reference over shapes
// (batched, broadcast, transposed, M = 1), dtypes, memory configs and fused
// activations, with b as given and packed once (pack_matmul_weights). Tolerance: float32 accumulation of K products of N(0, 16)
// operands, |err| <= 1e-6 * 16 * K absolute, plus one bfloat16 ulp (2^-7
// relative) when the output is bfloat16.
#include "tessera/ops/reference.h"
#include "tessera/ops/matmul.h"

#include "tessera/base/cpu_features.h"
#include "tessera/device/profiler.h"

#include "test_util.h"

namespace tessera {
namespace {

struct Case {
  Shape a, b;
  bool transpose_b = false;
  bool bias = false;
};

TEST(Matmul, MatchesReference) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  const Case cases[] = {
      {Shape{1, 1, 64, 96}, Shape{96, 80}},         {Shape{3, 17, 33}, Shape{33, 19}},
      {Shape{2, 1, 5, 7}, Shape{1, 3, 7, 4}},       {Shape{1, 2048}, Shape{2048, 1000}, false, true},
      {Shape{4, 64}, Shape{32, 64}, true, true},    {Shape{1, 1, 1, 1280}, Shape{1, 1, 1280, 10}, false, true},
      {Shape{5, 3}, Shape{2, 3, 1}},           {Shape{1, 64}, Shape{300, 64}, true, true},  // column blocks, transposed
      {Shape{2, 1, 40}, Shape{40, 200}},       // column blocks per batch
  };
  for (const Case& c : cases)
    for (DataType dt : {DataType::FLOAT32, DataType::BFLOAT16})
      for (DataType out : {DataType::FLOAT32, DataType::BFLOAT16})
        for (UnaryWithParam act : {UnaryWithParam{}, UnaryWithParam{UnaryOpType::RELU},
                                   UnaryWithParam{UnaryOpType::HARDSIGMOID}}) {
          SCOPED_TRACE(fmt::format("{} x {}{} {} -> {} {}", c.a.to_string(), c.b.to_string(), c.transpose_b ? "^T" : "",
                                   data_type_name(dt), data_type_name(out), unary_op_name(act.op)));
          Tensor ha = testing::random_tensor(c.a, dt, Layout::ROW_MAJOR, 1);
          Tensor hb = testing::random_tensor(c.b, dt, Layout::ROW_MAJOR, 2);
          const uint32_t n = c.transpose_b ? c.b[-2] : c.b[-1], k = c.a[-1];
          std::optional<Tensor> hbias;
          if (c.bias) hbias = testing::random_tensor(Shape{n}, DataType::FLOAT32, Layout::ROW_MAJOR, 3);
          const MatmulParams params{.transpose_b = c.transpose_b, .dtype = out, .activation = act};
          ASSERT_OK_AND_ASSIGN(Tensor want, reference::matmul(ha, hb, hbias, params, out));
          for (const MemoryConfig& mc : {DRAM_MEMORY_CONFIG, L1_MEMORY_CONFIG}) {
            if (mc == L1_MEMORY_CONFIG && c.b.volume() > 100000) continue;  // does not fit the cpu's L1
            ASSERT_OK_AND_ASSIGN(Tensor a, to_device(ha, *dev, mc));
            ASSERT_OK_AND_ASSIGN(Tensor b, to_device(hb, *dev, mc));
            std::optional<Tensor> bias;
            if (c.bias) {
              ASSERT_OK_AND_ASSIGN(bias, to_device(*hbias, *dev, mc));
            }
            // b as given, then packed once (where the kernel packs) and used twice.
            ASSERT_OK_AND_ASSIGN(auto packed, pack_matmul_weights(a, b, bias, params));
            for (int run = 0; run < (packed ? 3 : 1); ++run) {
              SCOPED_TRACE(fmt::format("{} {}", run ? "packed b" : "b as given", mc == L1_MEMORY_CONFIG ? "L1" : "DRAM"));
              MatmulParams p = params;
              if (run) p.packed_b = packed.get();
              StatusOr<Tensor> y = c.bias ? linear(a, b, bias, p) : matmul(a, b, p);
              ASSERT_TRUE(y.ok()) << y.status().to_string();
              EXPECT_EQ(y->shape(), want.shape());
              testing::expect_allclose(y->cpu().value(), want, testing::rounding_tolerance(out, 0), 16e-6 * k);
            }
          }
        }
}

// NaN, infinities, -0.0 and denormals in either operand reach the output
// as the reference's (IEEE sums: a NaN or Inf * 0 makes its row or column
// NaN), through oneDNN's kernels and Tessera's gemv, with a fused activation.
TEST(Matmul, SpecialValuesAsTheReference) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  const Case cases[] = {{Shape{1, 1, 64, 96}, Shape{96, 80}},
                        {Shape{3, 17, 33}, Shape{33, 19}},
                        {Shape{2, 2048}, Shape{1000, 2048}, true, true}};  // gemv
  for (const Case& c : cases)
    for (KernelIsa isa : {KernelIsa::kAvx512, KernelIsa::kAvx2})
      for (UnaryWithParam act : {UnaryWithParam{}, UnaryWithParam{UnaryOpType::RELU}}) {
        set_kernel_isa_limit(isa);
        SCOPED_TRACE(fmt::format("{} x {} {} {}", c.a.to_string(), c.b.to_string(), unary_op_name(act.op),
                                 kernel_isa_name(kernel_isa())));
        std::vector<float> av = testing::random_values(c.a.volume(), 1, 1.0f), bv = testing::random_values(c.b.volume(), 2, 1.0f);
        testing::add_special_values(av, 7, 1301);
        testing::add_special_values(bv, 11, 2003);
        Tensor ha = Tensor::from_vector(av, c.a, DataType::FLOAT32).value();
        Tensor hb = Tensor::from_vector(bv, c.b, DataType::FLOAT32).value();
        const uint32_t n = c.transpose_b ? c.b[-2] : c.b[-1], k = c.a[-1];
        std::optional<Tensor> hbias;
        if (c.bias) hbias = testing::random_tensor(Shape{n}, DataType::FLOAT32, Layout::ROW_MAJOR, 3);
        const MatmulParams params{.transpose_b = c.transpose_b, .activation = act};
        ASSERT_OK_AND_ASSIGN(Tensor want, reference::matmul(ha, hb, hbias, params, DataType::FLOAT32));
        ASSERT_OK_AND_ASSIGN(Tensor a, to_device(ha, *dev));
        ASSERT_OK_AND_ASSIGN(Tensor b, to_device(hb, *dev));
        StatusOr<Tensor> y = [&]() -> StatusOr<Tensor> {
          if (!c.bias) return matmul(a, b, params);
          TS_ASSIGN_OR_RETURN(Tensor bias, to_device(*hbias, *dev));
          return linear(a, b, bias, params);
        }();
        ASSERT_TRUE(y.ok()) << y.status().to_string();
        testing::expect_allclose(y->cpu().value(), want, 0, 16e-6 * k);
      }
  set_kernel_isa_limit(KernelIsa::kAvx512);
}

// Few rows against transposed weights (a classifier's head) run Tessera's
// gemv kernel on every vector kernel set (oneDNN's below): 1 to 8 rows
// (blocks of 4 or 2 and the rows left), K with and without a vector tail, N
// with and without a tail of fewer than four columns and over several column
// blocks, bias or none, activations; float32 and bfloat16 operands (the
// bias and output follow the activations, weights alike or float32 beside
// bfloat16 activations where matmul takes those); same tolerances as above.
TEST(Matmul, GemvKernel) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.worker_threads = 2}));
  const KernelIsa native = kernel_isa();
  struct G {
    uint32_t m, k, n;
    bool bias;
    UnaryOpType act;
  };
  const G cases[] = {{1, 2048, 1000, true, UnaryOpType::IDENTITY}, {2, 100, 37, false, UnaryOpType::RELU},
                     {3, 7, 3, true, UnaryOpType::SIGMOID},        {4, 1280, 130, true, UnaryOpType::HARDSIGMOID},
                     {1, 16, 1, false, UnaryOpType::IDENTITY},     {1, 1, 5, true, UnaryOpType::GELU},
                     {8, 1280, 1000, true, UnaryOpType::IDENTITY}, {5, 33, 19, true, UnaryOpType::RELU},
                     {7, 64, 6, false, UnaryOpType::IDENTITY},     {6, 2048, 17, true, UnaryOpType::IDENTITY}};
  struct Types {
    DataType a, b;
  };
  const Types types[] = {{DataType::FLOAT32, DataType::FLOAT32},
                         {DataType::BFLOAT16, DataType::BFLOAT16},
                         {DataType::BFLOAT16, DataType::FLOAT32}};
  ASSERT_OK(enable_profiler(*dev));
  for (KernelIsa isa : {KernelIsa::kAvx512, KernelIsa::kAvx2, KernelIsa::kScalar}) {
    if (isa > native) continue;
    set_kernel_isa_limit(isa);
    for (const Types& ty : types)
      for (const G& c : cases) {
        if (ty.a != ty.b && matmul_weights_dtype(ty.a) != ty.b) continue;  // mixed only where the CPU takes it
        SCOPED_TRACE(fmt::format("{} x {} x {} bias={} {} {} {}x{}", c.m, c.k, c.n, c.bias, unary_op_name(c.act),
                                 kernel_isa_name(isa), data_type_name(ty.a), data_type_name(ty.b)));
        Tensor ha = testing::random_tensor(Shape{c.m, c.k}, ty.a, Layout::ROW_MAJOR, 1);
        Tensor hb = testing::random_tensor(Shape{c.n, c.k}, ty.b, Layout::ROW_MAJOR, 2);
        std::optional<Tensor> hbias;
        if (c.bias) hbias = testing::random_tensor(Shape{c.n}, ty.a, Layout::ROW_MAJOR, 3);
        const MatmulParams params{.transpose_b = true, .activation = UnaryWithParam{c.act}};
        ASSERT_OK_AND_ASSIGN(Tensor want, reference::matmul(ha, hb, hbias, params, ty.a));
        ASSERT_OK_AND_ASSIGN(Tensor a, to_device(ha, *dev));
        ASSERT_OK_AND_ASSIGN(Tensor b, to_device(hb, *dev));
        std::optional<Tensor> bias;
        if (c.bias) {
          ASSERT_OK_AND_ASSIGN(bias, to_device(*hbias, *dev));
        }
        ASSERT_OK(read_profile(*dev).status());
        ASSERT_OK_AND_ASSIGN(Tensor y, linear(a, b, bias, params));
        EXPECT_EQ(y.dtype(), ty.a);
        testing::expect_allclose(y.cpu().value(), want, testing::rounding_tolerance(ty.a, 0), 16e-6 * c.k);
        ASSERT_OK_AND_ASSIGN(DeviceProfile prof, read_profile(*dev));
        ASSERT_FALSE(prof.ops.empty());
        EXPECT_EQ(prof.ops.back().kernel_name.find("gemv") != std::string::npos, isa != KernelIsa::kScalar)
            << prof.ops.back().kernel_name;
      }
  }
  set_kernel_isa_limit(native);
  ASSERT_OK(disable_profiler(*dev));
}

TEST(Matmul, HeightShardedActivation) {
  ASSERT_OK_AND_ASSIGN(auto wh, open_device({.descriptor = "wormhole_b0"}));
  Tensor ha = testing::random_tensor(Shape{1, 1, 128, 64}, DataType::BFLOAT16, Layout::ROW_MAJOR, 1);
  Tensor hb = testing::random_tensor(Shape{64, 48}, DataType::BFLOAT16, Layout::ROW_MAJOR, 2);
  MemoryConfig hs = testing::sharded(TensorMemoryLayout::HEIGHT_SHARDED, BufferType::L1, CoreRange({0, 0}, {3, 0}), 32,
                                     64);
  ASSERT_OK_AND_ASSIGN(Tensor a, to_device(ha, *wh, hs));
  ASSERT_OK_AND_ASSIGN(Tensor b, to_device(hb, *wh));
  ASSERT_OK_AND_ASSIGN(Tensor y, matmul(a, b, {.dtype = DataType::FLOAT32}));
  ASSERT_OK_AND_ASSIGN(Tensor want, reference::matmul(ha, hb, std::nullopt, {}, DataType::FLOAT32));
  testing::expect_allclose(y.cpu().value(), want, 0, 16e-6 * 64);
}

// Where the CPU multiplies bfloat16 in float32, bfloat16 activations may meet
// float32 weights (compiled models keep constant weights so, rounded to
// bfloat16, see matmul_weights_dtype): the same results as bfloat16 weights.
TEST(Matmul, Bfloat16ActivationsWithFloat32Weights) {
  if (matmul_weights_dtype(DataType::BFLOAT16) != DataType::FLOAT32) GTEST_SKIP() << "bfloat16 kernels: one dtype";
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  Tensor ha = testing::random_tensor(Shape{3, 96}, DataType::BFLOAT16, Layout::ROW_MAJOR, 1);
  Tensor hw16 = testing::random_tensor(Shape{40, 96}, DataType::BFLOAT16, Layout::ROW_MAJOR, 2);
  ASSERT_OK_AND_ASSIGN(std::vector<float> wv, hw16.to_vector());
  ASSERT_OK_AND_ASSIGN(Tensor hw32, Tensor::from_vector(wv, Shape{40, 96}, DataType::FLOAT32));
  Tensor hbias = testing::random_tensor(Shape{40}, DataType::FLOAT32, Layout::ROW_MAJOR, 3);
  ASSERT_OK_AND_ASSIGN(Tensor a, to_device(ha, *dev));
  ASSERT_OK_AND_ASSIGN(Tensor w16, to_device(hw16, *dev));
  ASSERT_OK_AND_ASSIGN(Tensor w32, to_device(hw32, *dev));
  ASSERT_OK_AND_ASSIGN(Tensor bias, to_device(hbias, *dev));
  const MatmulParams p{.transpose_b = true, .activation = UnaryWithParam{UnaryOpType::RELU}};
  ASSERT_OK_AND_ASSIGN(Tensor mixed, linear(a, w32, bias, p));
  ASSERT_OK_AND_ASSIGN(Tensor same, linear(a, w16, bias, p));
  EXPECT_EQ(mixed.dtype(), DataType::BFLOAT16);
  EXPECT_EQ(testing::host_bytes(mixed.cpu().value()), testing::host_bytes(same.cpu().value()));
  ASSERT_OK_AND_ASSIGN(Tensor fwd, matmul(w32, a, {.transpose_b = true}));  // float32 a, bfloat16 b
  ASSERT_OK_AND_ASSIGN(Tensor want,
                       reference::matmul(hw32, ha, std::nullopt, {.transpose_b = true}, DataType::FLOAT32));
  testing::expect_allclose(fwd.cpu().value(), want, 0, 16e-6 * 96);
}

// compute_kernel_config at LoFi on CPUs with AMX: float32 operands (one or
// both; the other bfloat16) computed on their bfloat16 roundings, so the
// result is the reference on the rounded operands, within the float32
// tolerance above, and the kernel is one of oneDNN's bfloat16 ones (AMX, or
// AVX512_BF16 for the smallest shapes). Batched
// with a broadcast a (staged once per run of batches that read it) and a
// broadcast b, transposed b, bias, float32 and bfloat16 output. HiFi4 and no
// config stay exact; few rows against transposed weights (the gemv path)
// stay exact at LoFi.
TEST(Matmul, LoFiComputesInBfloat16OnAmx) {
  if (kernel_isa() != KernelIsa::kAvx512 || !cpu_features().amx_bf16) GTEST_SKIP() << "no AMX";
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.worker_threads = 2}));
  const DeviceComputeKernelConfig lofi{.math_fidelity = MathFidelity::LoFi};
  auto rounded = [](const Tensor& t) {
    return Tensor::from_vector(t.to_vector().value(), t.shape(), DataType::BFLOAT16).value();
  };
  // The last launch's kernel name.
  auto kernel = [&]() {
    const DeviceProfile prof = read_profile(*dev).value();
    return prof.ops.empty() ? std::string() : prof.ops.back().kernel_name;
  };
  const Case cases[] = {
      {Shape{1, 1, 64, 96}, Shape{96, 80}, false, true},  {Shape{3, 1, 40, 32}, Shape{1, 2, 32, 48}},
      {Shape{2, 17, 33}, Shape{19, 33}, true, true},      {Shape{1, 1, 320, 64}, Shape{1, 2, 64, 64}, false, true},
  };
  ASSERT_OK(enable_profiler(*dev));
  for (const Case& c : cases)
    for (DataType bt : {DataType::FLOAT32, DataType::BFLOAT16})
      for (DataType out : {DataType::FLOAT32, DataType::BFLOAT16}) {
        SCOPED_TRACE(fmt::format("{} x {}{} f32 x {} -> {}", c.a.to_string(), c.b.to_string(), c.transpose_b ? "^T" : "",
                                 data_type_name(bt), data_type_name(out)));
        Tensor ha = testing::random_tensor(c.a, DataType::FLOAT32, Layout::ROW_MAJOR, 1);
        Tensor hb = testing::random_tensor(c.b, bt, Layout::ROW_MAJOR, 2);
        const uint32_t n = c.transpose_b ? c.b[-2] : c.b[-1], k = c.a[-1];
        std::optional<Tensor> hbias;
        if (c.bias) hbias = testing::random_tensor(Shape{n}, DataType::FLOAT32, Layout::ROW_MAJOR, 3);
        const MatmulParams p{.transpose_b = c.transpose_b, .dtype = out, .activation = UnaryWithParam{UnaryOpType::RELU},
                             .compute_kernel_config = lofi};
        ASSERT_OK_AND_ASSIGN(Tensor want, reference::matmul(rounded(ha), rounded(hb), hbias, p, out));
        ASSERT_OK_AND_ASSIGN(Tensor a, to_device(ha, *dev));
        ASSERT_OK_AND_ASSIGN(Tensor b, to_device(hb, *dev));
        std::optional<Tensor> bias;
        if (c.bias) {
          ASSERT_OK_AND_ASSIGN(bias, to_device(*hbias, *dev));
        }
        ASSERT_OK(read_profile(*dev).status());
        ASSERT_OK_AND_ASSIGN(Tensor y, linear(a, b, bias, p));
        EXPECT_EQ(y.dtype(), out);
        testing::expect_allclose(y.cpu().value(), want, testing::rounding_tolerance(out, 0), 16e-6 * k);
        const std::string name = kernel();
        EXPECT_NE(name.find("bf16_matmul"), std::string::npos) << name;
        if (bt == DataType::BFLOAT16) continue;  // mixed operands: LoFi only
        // HiFi4, and no config: float32 operands, exact.
        ASSERT_OK_AND_ASSIGN(Tensor exact, reference::matmul(ha, hb, hbias, p, out));
        for (auto cfg : {std::optional<DeviceComputeKernelConfig>(), std::optional(DeviceComputeKernelConfig{})}) {
          MatmulParams hp = p;
          hp.compute_kernel_config = cfg;
          ASSERT_OK_AND_ASSIGN(Tensor yh, linear(a, b, bias, hp));
          testing::expect_allclose(yh.cpu().value(), exact, testing::rounding_tolerance(out, 0), 16e-6 * k);
          EXPECT_EQ(kernel().find("bf16"), std::string::npos) << kernel();
        }
      }
  // The gemv path (4 rows, transposed weights) stays exact at LoFi.
  Tensor ha = testing::random_tensor(Shape{4, 256}, DataType::FLOAT32, Layout::ROW_MAJOR, 4);
  Tensor hb = testing::random_tensor(Shape{100, 256}, DataType::FLOAT32, Layout::ROW_MAJOR, 5);
  const MatmulParams gp{.transpose_b = true, .compute_kernel_config = lofi};
  ASSERT_OK_AND_ASSIGN(Tensor want, reference::matmul(ha, hb, std::nullopt, gp, DataType::FLOAT32));
  ASSERT_OK_AND_ASSIGN(Tensor y, matmul(to_device(ha, *dev).value(), to_device(hb, *dev).value(), gp));
  testing::expect_allclose(y.cpu().value(), want, 0, 16e-6 * 256);
  EXPECT_NE(kernel().find("gemv"), std::string::npos) << kernel();
  ASSERT_OK(disable_profiler(*dev));
}

TEST(Matmul, Errors) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  auto put = [&](Shape s, DataType dt = DataType::FLOAT32, Layout l = Layout::ROW_MAJOR) {
    return to_device(testing::random_tensor(s, dt, l, 1), *dev).value();
  };
  Tensor a = put(Shape{4, 8});
  EXPECT_ERROR(matmul(a, put(Shape{7, 3})), StatusCode::kInvalidArgument,
               "matmul: inner dims differ: a [4,8] has K = 8, b [7,3] has K = 7");
  // Weights packed for 64 rows do not serve 32.
  const Tensor w = put(Shape{96, 80});
  ASSERT_OK_AND_ASSIGN(auto packed, pack_matmul_weights(put(Shape{64, 96}), w, std::nullopt));
  ASSERT_NE(packed, nullptr);
  EXPECT_ERROR(matmul(put(Shape{32, 96}), w, {.packed_b = packed.get()}), StatusCode::kFailedPrecondition,
               "b was packed for other operands or params");
  if (matmul_weights_dtype(DataType::BFLOAT16) == DataType::BFLOAT16)  // else mixed operands are allowed, below
    EXPECT_ERROR(matmul(a, put(Shape{8, 3}, DataType::BFLOAT16)), StatusCode::kInvalidArgument,
                 "must share a dtype, found float32 and bfloat16");
  EXPECT_ERROR(matmul(a, put(Shape{32, 32}, DataType::FLOAT32, Layout::TILE)), StatusCode::kUnimplemented,
               "b must be ROW_MAJOR");
  EXPECT_ERROR(matmul(put(Shape{2, 4, 8}), put(Shape{3, 8, 2})), StatusCode::kInvalidArgument,
               "batch dims of [2,4,8] and [3,8,2] do not broadcast");
  EXPECT_ERROR(matmul(put(Shape{8}), a), StatusCode::kInvalidArgument, "a must have rank 2..8");
  EXPECT_ERROR(linear(a, put(Shape{8, 3}), put(Shape{4})), StatusCode::kInvalidArgument,
               "linear: expected a ROW_MAJOR bias of 3 values");
}

}  // namespace
}  // namespace tessera
