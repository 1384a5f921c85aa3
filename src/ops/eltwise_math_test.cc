// Unary activations and binary arithmetic (with broadcasting and fused
// activations) against the reference kernels, on every kernel set: AVX-512,
// AVX2 and the portable scalar one.
//
// Tolerances, per eltwise.h: the portable path and every exact op
// (arithmetic, relu, relu6, leaky_relu, sqrt) match bit for bit; the AVX-512
// and AVX2 transcendental activations are within 1e-6 + 1e-6 |ref| in
// float32 and within one bfloat16 ulp (2^-7 |ref| + 1e-6) in bfloat16.
#include <bit>
#include <cmath>
#include <limits>

#include "tessera/base/cpu_features.h"
#include "tessera/device/profiler.h"
#include "tessera/numerics/bfloat16.h"
#include "tessera/ops/eltwise.h"
#include "tessera/ops/reference.h"
#include "test_util.h"

namespace tessera {
namespace {

const KernelIsa kIsas[] = {KernelIsa::kAvx512, KernelIsa::kAvx2, KernelIsa::kScalar};

bool exact_op(UnaryOpType op) {
  switch (op) {
    case UnaryOpType::IDENTITY:
    case UnaryOpType::RELU:
    case UnaryOpType::RELU6:
    case UnaryOpType::LEAKY_RELU:
    case UnaryOpType::SQRT:
    case UnaryOpType::NEG:
    case UnaryOpType::ABS:
    case UnaryOpType::RECIPROCAL:
    case UnaryOpType::THRESHOLDED_RELU:
    case UnaryOpType::CLIP:
    case UnaryOpType::FLOOR:
    case UnaryOpType::CEIL:
    case UnaryOpType::ROUND:
    case UnaryOpType::SIGN:
    case UnaryOpType::TO_FLOAT16:
    case UnaryOpType::TO_BFLOAT16:
      return true;
    default:
      return false;
  }
}

void expect_close(const Tensor& got, const Tensor& want, bool exact, DataType dt) {
  if (exact) {
    ASSERT_TRUE(got.spec().same_data_format(want.spec())) << got.spec().to_string();
    ASSERT_EQ(testing::host_bytes(got), testing::host_bytes(want));
    return;
  }
  testing::expect_allclose(got, want, testing::rounding_tolerance(dt, 1e-6), 1e-6);
}

std::vector<UnaryWithParam> all_activations() {
  std::vector<UnaryWithParam> v;
  for (int i = 0; i <= static_cast<int>(kLastUnaryOp); ++i) {
    const auto op = static_cast<UnaryOpType>(i);
    v.push_back({.op = op,
                 .param = op == UnaryOpType::LEAKY_RELU         ? 0.01f
                          : op == UnaryOpType::ELU              ? 1.5f
                          : op == UnaryOpType::POW              ? 2.5f
                          : op == UnaryOpType::CELU             ? 0.7f
                          : op == UnaryOpType::THRESHOLDED_RELU ? 0.5f
                          : op == UnaryOpType::CLIP             ? -1.5f
                                                                : 0.0f,
                 .param2 = op == UnaryOpType::CLIP ? 2.0f : 0.0f});
  }
  return v;
}

TEST(Unary, EveryActivationMatchesReference) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  auto configs = testing::memory_configs_for(128, 64, dev->descriptor().grid.x);
  for (KernelIsa isa : kIsas) {
    set_kernel_isa_limit(isa);
    const bool vector = kernel_isa() != KernelIsa::kScalar;
    for (const UnaryWithParam& act : all_activations())
      for (DataType dt : {DataType::FLOAT32, DataType::BFLOAT16, DataType::BFLOAT8_B})
        for (Layout layout : {Layout::ROW_MAJOR, Layout::TILE}) {
          if (is_block_float(dt) && layout == Layout::ROW_MAJOR) continue;
          // bfloat8_b in, float32 out: the block-float decode is tested, and the
          // output is compared in float32.
          const DataType out = is_block_float(dt) ? DataType::FLOAT32 : dt;
          auto v = testing::random_values(2 * 64 * 64, 7, 3.0f);
          if (act.op == UnaryOpType::SQRT)
            for (float& x : v) x = std::fabs(x);
          v[0] = 0.0f, v[1] = -0.0f, v[2] = 30.0f, v[3] = -30.0f, v[4] = 1e-3f, v[5] = -1e-3f;
          Tensor h = Tensor::from_vector(v, Shape{2, 64, 64}, dt, layout).value();
          ASSERT_OK_AND_ASSIGN(Tensor want, reference::unary(h, act, out));
          for (const auto& c : configs) {
            SCOPED_TRACE(fmt::format("{} {} {} {} isa={}", unary_op_name(act.op), data_type_name(dt),
                                     layout_name(layout), c.name, kernel_isa_name(kernel_isa())));
            ASSERT_OK_AND_ASSIGN(Tensor d, to_device(h, *dev, c.config));
            ASSERT_OK_AND_ASSIGN(Tensor y, unary(d, act, {.dtype = out}));
            EXPECT_EQ(y.memory_config(), c.config);
            ASSERT_OK_AND_ASSIGN(Tensor got, y.cpu());
            expect_close(got, want, !vector || exact_op(act.op), out);
          }
        }
  }
  set_kernel_isa_limit(KernelIsa::kAvx512);
}

// Sigmoid and silu at the edges of their exp's range (the AVX2 path clamps
// -x to [-87.3, 88.3]): infinities, NaN and values past float32's exp range
// give the reference's results (NaN where it is NaN) within the float32
// tolerance.
TEST(Unary, SigmoidFamilyAtExtremes) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {-inf,    -1000.0f,
                          -104.0f, -100.0f,
                          -88.5f,  -88.2f,
                          -87.5f,  -87.2f,
                          -20.0f,  -1e-3f,
                          -0.0f,   0.0f,
                          1e-3f,   20.0f,
                          87.2f,   87.5f,
                          88.2f,   88.5f,
                          100.0f,  1000.0f,
                          inf,     std::numeric_limits<float>::quiet_NaN()};
  v.resize(32, 0.5f);
  for (KernelIsa isa : kIsas) {
    set_kernel_isa_limit(isa);
    for (UnaryOpType op : {UnaryOpType::SIGMOID, UnaryOpType::SILU}) {
      SCOPED_TRACE(fmt::format("{} isa={}", unary_op_name(op), kernel_isa_name(kernel_isa())));
      Tensor h = Tensor::from_vector(v, Shape{1, 32}, DataType::FLOAT32).value();
      ASSERT_OK_AND_ASSIGN(Tensor want, reference::unary(h, {op}, DataType::FLOAT32));
      ASSERT_OK_AND_ASSIGN(Tensor d, to_device(h, *dev));
      ASSERT_OK_AND_ASSIGN(Tensor y, unary(d, {op}));
      ASSERT_OK_AND_ASSIGN(std::vector<float> got, y.cpu().value().to_vector());
      ASSERT_OK_AND_ASSIGN(std::vector<float> ref, want.to_vector());
      for (size_t i = 0; i < v.size(); ++i) {
        if (std::isnan(ref[i])) {
          EXPECT_TRUE(std::isnan(got[i])) << "x = " << v[i] << ": " << got[i];
        } else if (std::isinf(ref[i])) {
          EXPECT_EQ(got[i], ref[i]) << "x = " << v[i];
        } else {
          EXPECT_NEAR(got[i], ref[i], 1e-6 + 1e-6 * std::fabs(ref[i])) << "x = " << v[i];
        }
      }
    }
  }
  set_kernel_isa_limit(KernelIsa::kAvx512);
}

// log and pow (by exponents of every kind: odd, even and negative integers,
// fractions, 0) on C's special values and edges: zeros of both signs,
// infinities, NaN, denormals, 1, negatives, and results past float32's
// range; NaN where C's pow / log give NaN, the same infinities and zeros
// (signs included), else within (|p ln|x|| + 4) 2^-23 of the reference.
TEST(Unary, LogAndPowAtTheEdges) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {0.0f,       -0.0f,      inf,      -inf,    std::numeric_limits<float>::quiet_NaN(),
                          1.0f,       -1.0f,      1e-40f,   -3e-39f, 1.17e-38f,
                          2.0f,       -2.0f,      0.5f,     -0.5f,   3.0f,
                          -3.0f,      1e20f,      -1e20f,   1e-20f,  -1e-20f,
                          1.0000001f, 0.9999999f, 123.456f, 7e-5f};
  for (int i = 0; i < 40; ++i)
    v.push_back(std::ldexp(1.0f + 0.37f * static_cast<float>(i % 7), i - 20) * (i % 3 ? 1 : -1));
  const size_t n = v.size();
  for (KernelIsa isa : kIsas) {
    set_kernel_isa_limit(isa);
    for (UnaryWithParam act : {UnaryWithParam{UnaryOpType::LOG}, UnaryWithParam{UnaryOpType::POW, 3.0f},
                               UnaryWithParam{UnaryOpType::POW, 6.0f}, UnaryWithParam{UnaryOpType::POW, -3.0f},
                               UnaryWithParam{UnaryOpType::POW, 1.5f}, UnaryWithParam{UnaryOpType::POW, -0.25f},
                               UnaryWithParam{UnaryOpType::POW, 1.0f / 3}, UnaryWithParam{UnaryOpType::POW, 0.0f},
                               UnaryWithParam{UnaryOpType::POW, 7.5f}, UnaryWithParam{UnaryOpType::POW, -5.0f}}) {
      SCOPED_TRACE(fmt::format("{} isa={}", activation_name(act), kernel_isa_name(kernel_isa())));
      Tensor h = Tensor::from_vector(v, Shape{1, static_cast<uint32_t>(n)}, DataType::FLOAT32).value();
      ASSERT_OK_AND_ASSIGN(Tensor d, to_device(h, *dev));
      ASSERT_OK_AND_ASSIGN(Tensor y, unary(d, act));
      ASSERT_OK_AND_ASSIGN(std::vector<float> got, y.cpu().value().to_vector());
      for (size_t i = 0; i < n; ++i) {
        const double x = v[i];
        const double want = act.op == UnaryOpType::LOG ? std::log(x) : std::pow(x, double{act.param});
        const float w = static_cast<float>(want);
        if (std::isnan(w)) {
          EXPECT_TRUE(std::isnan(got[i])) << "x = " << v[i] << ": " << got[i];
        } else if (std::isinf(w) || w == 0.0f) {
          EXPECT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(w)) << "x = " << v[i] << ": " << got[i];
        } else {
          const double lnx = std::fabs(std::log(std::fabs(x)));
          const double bound = act.op == UnaryOpType::LOG ? 2e-7 * std::fabs(want) + 1e-7 * (lnx == 0 ? 1 : 0)
                               : act.param == 0           ? 0
                                                : (std::fabs(act.param) * lnx + 4) * 0x1p-23 * std::fabs(want);
          // (A denormal result keeps fewer bits: one ulp of the smallest normal.)
          EXPECT_NEAR(got[i], want, bound + 0x1p-149 * 2) << "x = " << v[i];
        }
      }
    }
  }
  set_kernel_isa_limit(KernelIsa::kAvx512);
}

// The activations with ONNX's names (softplus, softsign, celu, selu as elu
// with a scale, thresholded_relu, clip with and without bounds, HardSigmoid's
// clip + affine, floor, ceil, round, sign) on special values: NaN stays NaN,
// infinities and zeros as the reference gives them (softsign's +-inf / inf
// is NaN there too), denormals, halves for round; else within 2^-22
// relative (1e-7 absolute near 0; elu's and celu's e^x - 1 within 2.5e-7
// alpha absolute, as elu is documented).
TEST(Unary, OnnxActivationsAtSpecialValues) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {0.0f,  -0.0f,  inf,   -inf,   NAN,   1e-40f, -1e-40f, 0.5f,   -0.5f, 1.5f,
                          2.5f,  -2.5f,  0.49f, 1.0f,   -1.0f, 3e-8f,  -3e-8f,  -20.0f, 20.0f, -90.0f,
                          90.0f, -104.f, 1e30f, -1e30f, 0.7f,  -0.7f,  7.0f,    -7.0f,  1e-6f, -17.0f};
  for (int i = 0; i < 34; ++i)
    v.push_back(std::ldexp(1.0f + 0.29f * static_cast<float>(i % 5), i - 17) * (i % 2 ? 1 : -1));
  const auto n = static_cast<uint32_t>(v.size());
  for (KernelIsa isa : kIsas) {
    set_kernel_isa_limit(isa);
    for (UnaryWithParam act :
         {UnaryWithParam{UnaryOpType::SOFTPLUS}, UnaryWithParam{UnaryOpType::SOFTSIGN},
          UnaryWithParam{UnaryOpType::CELU, 1.0f}, UnaryWithParam{UnaryOpType::CELU, 0.3f},
          UnaryWithParam{UnaryOpType::ELU, 1.6732632f, 1.0507010f}, UnaryWithParam{UnaryOpType::THRESHOLDED_RELU, 1.0f},
          UnaryWithParam{.op = UnaryOpType::CLIP, .param = -1.0f, .param2 = 1.0f},
          UnaryWithParam{.op = UnaryOpType::CLIP, .param = -inf, .param2 = 0.5f},
          UnaryWithParam{.op = UnaryOpType::CLIP, .param = 0.2f, .param2 = inf},
          UnaryWithParam{.op = UnaryOpType::CLIP, .param = -2.5f, .scale = 0.2f, .shift = 0.5f, .param2 = 2.5f},
          UnaryWithParam{UnaryOpType::FLOOR}, UnaryWithParam{UnaryOpType::CEIL}, UnaryWithParam{UnaryOpType::ROUND},
          UnaryWithParam{UnaryOpType::SIGN}}) {
      SCOPED_TRACE(fmt::format("{} isa={}", activation_name(act), kernel_isa_name(kernel_isa())));
      Tensor h = Tensor::from_vector(v, Shape{1, n}, DataType::FLOAT32).value();
      ASSERT_OK_AND_ASSIGN(Tensor d, to_device(h, *dev));
      ASSERT_OK_AND_ASSIGN(Tensor y, unary(d, act));
      ASSERT_OK_AND_ASSIGN(std::vector<float> got, y.cpu().value().to_vector());
      // (elu and celu compute e^x - 1 as exp minus 1: exp's absolute error near 0, times alpha.)
      const double expm1_abs = act.op == UnaryOpType::ELU || act.op == UnaryOpType::CELU
                                   ? 2.5e-7 * std::fabs(double{act.param} * act.scale)
                                   : 0.0;
      for (size_t i = 0; i < n; ++i) {
        const auto w = static_cast<float>(apply_activation(act, v[i]));
        if (std::isnan(w))
          EXPECT_TRUE(std::isnan(got[i])) << "x = " << v[i] << ": " << got[i];
        else if (std::isinf(w) || w == 0.0f)
          EXPECT_EQ(got[i], w) << "x = " << v[i];
        else
          EXPECT_NEAR(got[i], w, 0x1p-22 * std::fabs(w) + expm1_abs + (std::fabs(w) < 1e-3f ? 1e-7 : 0.0))
              << "x = " << v[i];
      }
    }
  }
  set_kernel_isa_limit(KernelIsa::kAvx512);
}

// Max and min keep a NaN from either operand (numpy's maximum / minimum).
TEST(Binary, MaxAndMinKeepNan) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> a = {NAN,  1.0f, NAN,  -inf,  inf,  2.0f, -1.0f, 0.0f, 1e-40f,
                                3.0f, NAN,  5.0f, -2.0f, 4.0f, 0.5f, 7.0f,  1.0f};
  const std::vector<float> b = {1.0f, NAN,  NAN, 0.0f,  1.0f, 3.0f,  -2.0f, -0.5f, 0.0f,
                                3.0f, 2.0f, NAN, -3.0f, 8.0f, 0.25f, -7.0f, NAN};
  const auto n = static_cast<uint32_t>(a.size());
  for (KernelIsa isa : kIsas) {
    set_kernel_isa_limit(isa);
    for (BinaryOpType op : {BinaryOpType::MAX, BinaryOpType::MIN}) {
      SCOPED_TRACE(fmt::format("{} isa={}", binary_op_name(op), kernel_isa_name(kernel_isa())));
      ASSERT_OK_AND_ASSIGN(Tensor da, to_device(Tensor::from_vector(a, Shape{1, n}, DataType::FLOAT32).value(), *dev));
      ASSERT_OK_AND_ASSIGN(Tensor db, to_device(Tensor::from_vector(b, Shape{1, n}, DataType::FLOAT32).value(), *dev));
      ASSERT_OK_AND_ASSIGN(Tensor y, binary(da, db, op));
      ASSERT_OK_AND_ASSIGN(std::vector<float> got, y.cpu().value().to_vector());
      for (size_t i = 0; i < n; ++i) {
        if (std::isnan(a[i]) || std::isnan(b[i]))
          EXPECT_TRUE(std::isnan(got[i])) << a[i] << ", " << b[i];
        else
          EXPECT_EQ(got[i], op == BinaryOpType::MAX ? std::max(a[i], b[i]) : std::min(a[i], b[i]))
              << a[i] << ", " << b[i];
      }
    }
  }
  set_kernel_isa_limit(KernelIsa::kAvx512);
}

// Comparisons give 1 or 0; a NaN on either side compares false (0), -0
// equals +0, infinities compare as numbers; the same on every ISA tier, in
// float32 and bfloat16 out.
TEST(Binary, ComparisonsGiveOneOrZeroAndNanComparesFalse) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> a = {NAN,  1.0f, NAN, -inf, inf, 2.0f, -0.0f, 0.0f, 1e-40f, 3.0f, inf,  5.0f, -2.0f,
                                4.0f, 0.5f, 7.0f, 1.0f, 2.0f, -1e-40f};
  const std::vector<float> b = {1.0f, NAN,  NAN, 0.0f, inf, 3.0f, 0.0f,  -0.0f, 0.0f, 3.0f,  -inf, 5.0f, -3.0f,
                                8.0f, 0.25f, -7.0f, 1.0f, 2.0f, 0.0f};
  const auto n = static_cast<uint32_t>(a.size());
  const std::pair<BinaryOpType, bool (*)(float, float)> ops[] = {
      {BinaryOpType::GREATER, [](float x, float y) { return x > y; }},
      {BinaryOpType::GREATER_EQUAL, [](float x, float y) { return x >= y; }},
      {BinaryOpType::LESS, [](float x, float y) { return x < y; }},
      {BinaryOpType::LESS_EQUAL, [](float x, float y) { return x <= y; }},
      {BinaryOpType::EQUAL, [](float x, float y) { return x == y; }}};
  for (KernelIsa isa : kIsas) {
    set_kernel_isa_limit(isa);
    for (const auto& [op, holds] : ops)
      for (DataType out : {DataType::FLOAT32, DataType::BFLOAT16}) {
        SCOPED_TRACE(fmt::format("{} isa={} {}", binary_op_name(op), kernel_isa_name(kernel_isa()), data_type_name(out)));
        ASSERT_OK_AND_ASSIGN(Tensor da, to_device(Tensor::from_vector(a, Shape{1, n}, DataType::FLOAT32).value(), *dev));
        ASSERT_OK_AND_ASSIGN(Tensor db, to_device(Tensor::from_vector(b, Shape{1, n}, DataType::FLOAT32).value(), *dev));
        ASSERT_OK_AND_ASSIGN(Tensor y, binary(da, db, op, {.dtype = out}));
        ASSERT_OK_AND_ASSIGN(std::vector<float> got, y.cpu().value().to_vector());
        for (size_t i = 0; i < n; ++i) EXPECT_EQ(got[i], holds(a[i], b[i]) ? 1.0f : 0.0f) << a[i] << ", " << b[i];
      }
  }
  set_kernel_isa_limit(KernelIsa::kAvx512);
}

// Every bfloat16 value, infinities and NaN included, through each
// transcendental activation with a bfloat16 result: the AVX-512 path computes
// these on an exp accurate to bfloat16, not float32. Each result is within one
// bfloat16 ulp (2^-7 |ref| + 1e-6) of the reference's, NaN where it is NaN,
// and an infinity only where the reference's is one, or where the reference
// is within an ulp of bfloat16's largest value.
TEST(Unary, EveryBfloat16ValueThroughEachTranscendental) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  std::vector<float> v(65536);
  for (uint32_t b = 0; b < v.size(); ++b) v[b] = bfloat16_to_float(static_cast<uint16_t>(b));
  Tensor h = Tensor::from_vector(v, Shape{256, 256}, DataType::BFLOAT16).value();
  const float max_bf16 = bfloat16_to_float(0x7f7f);
  for (KernelIsa isa : {KernelIsa::kAvx512, KernelIsa::kAvx2}) {
    set_kernel_isa_limit(isa);
    for (UnaryOpType op : {UnaryOpType::SILU, UnaryOpType::SIGMOID, UnaryOpType::GELU, UnaryOpType::TANH,
                           UnaryOpType::MISH, UnaryOpType::EXP, UnaryOpType::ERF, UnaryOpType::GELU_TANH}) {
      SCOPED_TRACE(fmt::format("{} isa={}", unary_op_name(op), kernel_isa_name(kernel_isa())));
      ASSERT_OK_AND_ASSIGN(Tensor want, reference::unary(h, {op}, DataType::BFLOAT16));
      ASSERT_OK_AND_ASSIGN(Tensor d, to_device(h, *dev));
      ASSERT_OK_AND_ASSIGN(Tensor y, unary(d, {op}));
      ASSERT_OK_AND_ASSIGN(std::vector<float> got, y.cpu().value().to_vector());
      ASSERT_OK_AND_ASSIGN(std::vector<float> ref, want.to_vector());
      int failures = 0;
      for (size_t i = 0; i < v.size() && failures < 10; ++i) {
        bool ok;
        if (std::isnan(ref[i]))
          ok = std::isnan(got[i]);
        else if (std::isinf(ref[i]) || std::isinf(got[i]))
          ok = got[i] == ref[i] || std::fabs(std::isinf(got[i]) ? ref[i] : got[i]) >= max_bf16;
        else
          ok = std::fabs(got[i] - ref[i]) <= 1e-6 + std::ldexp(std::fabs(ref[i]), -7);
        if (!ok) ++failures;
        EXPECT_TRUE(ok) << "x = " << v[i] << ": " << got[i] << " against " << ref[i];
      }
    }
  }
  set_kernel_isa_limit(KernelIsa::kAvx512);
}

// bfloat16 in and out, a denormal result among normal ones: the AVX-512
// loop computes 32 values at a time as even and odd halves, and a pair of
// halves holding a float32 denormal rounds exactly; every value must land
// back in its own place (95 values: a partial last pair too).
TEST(Unary, Bfloat16PairsKeepTheirOrder) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  std::vector<float> v(95);
  for (size_t i = 0; i < v.size(); ++i) v[i] = i % 7 == 3 ? 1e-39f : (static_cast<float>(i) - 40.0f) * 0.37f;
  Tensor h = Tensor::from_vector(v, Shape{1, 95}, DataType::BFLOAT16).value();
  for (UnaryOpType op : {UnaryOpType::SILU, UnaryOpType::SIGMOID, UnaryOpType::RELU}) {
    SCOPED_TRACE(unary_op_name(op));
    ASSERT_OK_AND_ASSIGN(Tensor d, to_device(h, *dev));
    ASSERT_OK_AND_ASSIGN(Tensor y, unary(d, {op}));
    ASSERT_OK_AND_ASSIGN(std::vector<float> got, y.cpu().value().to_vector());
    ASSERT_OK_AND_ASSIGN(std::vector<float> ref, reference::unary(h, {op}, DataType::BFLOAT16).value().to_vector());
    for (size_t i = 0; i < v.size(); ++i) {
      EXPECT_NEAR(got[i], ref[i], std::ldexp(std::fabs(ref[i]), -7)) << i;
      if (i % 7 == 3 && op != UnaryOpType::SIGMOID) {
        EXPECT_NE(got[i], 0.0f) << i << ": a denormal result kept";
      }
    }
  }
}

// Odd sizes reach every vector path's tail handling.
TEST(Unary, OddSizesOnEveryKernelSet) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  for (KernelIsa isa : kIsas) {
    set_kernel_isa_limit(isa);
    for (const Shape& shape : {Shape{1}, Shape{7}, Shape{3, 37}, Shape{5, 101}})
      for (DataType dt : {DataType::FLOAT32, DataType::BFLOAT16})
        for (UnaryWithParam act : {UnaryWithParam{UnaryOpType::SILU}, UnaryWithParam{UnaryOpType::RELU6}}) {
          SCOPED_TRACE(fmt::format("{} {} {} isa={}", shape.to_string(), data_type_name(dt), unary_op_name(act.op),
                                   kernel_isa_name(kernel_isa())));
          Tensor ha = testing::random_tensor(shape, dt, Layout::ROW_MAJOR, 11);
          Tensor hb = testing::random_tensor(shape, dt, Layout::ROW_MAJOR, 12);
          ASSERT_OK_AND_ASSIGN(Tensor a, to_device(ha, *dev));
          ASSERT_OK_AND_ASSIGN(Tensor b, to_device(hb, *dev));
          const bool exact = kernel_isa() == KernelIsa::kScalar || exact_op(act.op);
          ASSERT_OK_AND_ASSIGN(Tensor u, unary(a, act));
          expect_close(u.cpu().value(), reference::unary(ha, act, dt).value(), exact, dt);
          ASSERT_OK_AND_ASSIGN(Tensor m, mul(a, b, {.activation = act}));
          expect_close(m.cpu().value(), reference::binary(ha, hb, BinaryOpType::MUL, act, dt).value(), exact, dt);
        }
  }
  set_kernel_isa_limit(KernelIsa::kAvx512);
}

TEST(Unary, NanPropagatesThroughEveryActivation) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  for (KernelIsa isa : kIsas) {
    set_kernel_isa_limit(isa);
    for (const UnaryWithParam& act : all_activations()) {
      ASSERT_OK_AND_ASSIGN(Tensor d,
                           to_device(Tensor::from_vector({NAN, 1.0f}, Shape{2}, DataType::FLOAT32).value(), *dev));
      ASSERT_OK_AND_ASSIGN(Tensor y, unary(d, act));
      EXPECT_TRUE(std::isnan(y.cpu().value().to_vector().value()[0]))
          << unary_op_name(act.op) << " " << kernel_isa_name(kernel_isa());
    }
  }
  set_kernel_isa_limit(KernelIsa::kAvx512);
}

const BinaryOpType kBinaryOps[] = {BinaryOpType::ADD,     BinaryOpType::SUB,           BinaryOpType::MUL,
                                   BinaryOpType::DIV,     BinaryOpType::MAX,           BinaryOpType::MIN,
                                   BinaryOpType::GREATER, BinaryOpType::GREATER_EQUAL, BinaryOpType::LESS,
                                   BinaryOpType::LESS_EQUAL, BinaryOpType::EQUAL};

TEST(Binary, SameShapeEveryOpDtypeAndConfig) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  auto configs = testing::memory_configs_for(64, 128, dev->descriptor().grid.x);
  for (KernelIsa isa : kIsas) {
    set_kernel_isa_limit(isa);
    const bool vector = kernel_isa() != KernelIsa::kScalar;
    for (BinaryOpType op : kBinaryOps)
      for (UnaryWithParam act :
           {UnaryWithParam{}, UnaryWithParam{UnaryOpType::RELU}, UnaryWithParam{UnaryOpType::SILU}})
        for (DataType dt : {DataType::FLOAT32, DataType::BFLOAT16, DataType::BFLOAT4_B})
          for (Layout layout : {Layout::ROW_MAJOR, Layout::TILE}) {
            if (is_block_float(dt) && layout == Layout::ROW_MAJOR) continue;
            const DataType out = is_block_float(dt) ? DataType::BFLOAT16 : dt;
            Tensor ha = testing::random_tensor(Shape{64, 128}, dt, layout, 1);
            Tensor hb = testing::random_tensor(Shape{64, 128}, DataType::BFLOAT16, layout, 2);
            ASSERT_OK_AND_ASSIGN(Tensor want, reference::binary(ha, hb, op, act, out));
            for (const auto& c : configs) {
              SCOPED_TRACE(fmt::format("{} {} {} {} {} isa={}", binary_op_name(op), unary_op_name(act.op),
                                       data_type_name(dt), layout_name(layout), c.name, kernel_isa_name(kernel_isa())));
              ASSERT_OK_AND_ASSIGN(Tensor a, to_device(ha, *dev, c.config));
              ASSERT_OK_AND_ASSIGN(Tensor b, to_device(hb, *dev, c.config));
              ASSERT_OK_AND_ASSIGN(Tensor y, binary(a, b, op, {.dtype = out, .activation = act}));
              ASSERT_OK_AND_ASSIGN(Tensor got, y.cpu());
              expect_close(got, want, !vector || exact_op(act.op), out);
            }
          }
  }
  set_kernel_isa_limit(KernelIsa::kAvx512);
}

// Every activation (and one with an affine after it) fused into a binary
// op, at lengths around the 1024-element chunks the vector kernels run an
// op and a rarer activation in, with mixed operand dtypes.
TEST(Binary, EveryFusedActivationAcrossChunks) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  std::vector<UnaryWithParam> acts = all_activations();
  acts.push_back({.op = UnaryOpType::RELU, .scale = 0.5f, .shift = -0.25f});
  acts.push_back({.op = UnaryOpType::SILU, .scale = 2.0f, .shift = 1.0f});
  for (KernelIsa isa : kIsas) {
    set_kernel_isa_limit(isa);
    for (const UnaryWithParam& act : acts)
      for (uint32_t n : {1023u, 1024u, 2500u})
        for (auto [da, db, out] : {std::tuple{DataType::FLOAT32, DataType::FLOAT32, DataType::FLOAT32},
                                   std::tuple{DataType::BFLOAT16, DataType::BFLOAT16, DataType::BFLOAT16},
                                   std::tuple{DataType::FLOAT32, DataType::BFLOAT16, DataType::FLOAT32},
                                   std::tuple{DataType::BFLOAT16, DataType::FLOAT32, DataType::BFLOAT16}}) {
          SCOPED_TRACE(fmt::format("{} scale {} n={} {} {} -> {} isa={}", unary_op_name(act.op), act.scale, n,
                                   data_type_name(da), data_type_name(db), data_type_name(out),
                                   kernel_isa_name(kernel_isa())));
          Tensor ha = testing::random_tensor(Shape{n}, da, Layout::ROW_MAJOR, 21);
          Tensor hb = testing::random_tensor(Shape{n}, db, Layout::ROW_MAJOR, 22);
          if (act.op == UnaryOpType::SQRT || act.op == UnaryOpType::LOG || act.op == UnaryOpType::POW) {
            ha = reference::unary(ha, UnaryWithParam{UnaryOpType::ABS}, da).value();
            hb = reference::unary(hb, UnaryWithParam{UnaryOpType::ABS}, db).value();
          }
          ASSERT_OK_AND_ASSIGN(Tensor a, to_device(ha, *dev));
          ASSERT_OK_AND_ASSIGN(Tensor b, to_device(hb, *dev));
          ASSERT_OK_AND_ASSIGN(Tensor y, add(a, b, {.dtype = out, .activation = act}));
          ASSERT_OK_AND_ASSIGN(Tensor want, reference::binary(ha, hb, BinaryOpType::ADD, act, out));
          const bool exact = kernel_isa() == KernelIsa::kScalar || (exact_op(act.op) && !act.has_affine());
          expect_close(y.cpu().value(), want, exact, out);
        }
  }
  set_kernel_isa_limit(KernelIsa::kAvx512);
}

struct BroadcastCase {
  Shape a, b;
};

TEST(Binary, BroadcastingMatchesReference) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  ASSERT_OK_AND_ASSIGN(auto wh, open_device({.descriptor = "wormhole_b0"}));
  const BroadcastCase cases[] = {
      {Shape{2, 3, 5, 7}, Shape{7}},
      {Shape{2, 3, 5, 7}, Shape{1, 3, 1, 7}},
      {Shape{1, 1, 6, 16}, Shape{1, 1, 1, 16}},
      {Shape{4, 1, 9}, Shape{1, 5, 1}},
      {Shape{2, 3, 5, 7}, Shape{2, 3, 5, 1}},
      {Shape{1}, Shape{3, 4}},
      {Shape{1, 1, 37, 1100}, Shape{1100}},
      {Shape{3, 1}, Shape{1, 1, 2, 3, 4}},
      // A scalar operand (the same-shape kernel over the other's pages).
      {Shape{2, 3, 5, 7}, Shape{1}},
      {Shape{1, 1, 300, 1}, Shape{1, 1, 1, 1}},
      {Shape{1, 1, 300, 300}, Shape{1, 1}},
  };
  for (KernelIsa isa : kIsas) {
    set_kernel_isa_limit(isa);
    for (const auto& bc : cases)
      for (BinaryOpType op : kBinaryOps)
        for (DataType dt : {DataType::FLOAT32, DataType::BFLOAT16}) {
          SCOPED_TRACE(fmt::format("{} {} {} {} isa={}", bc.a.to_string(), bc.b.to_string(), binary_op_name(op),
                                   data_type_name(dt), kernel_isa_name(kernel_isa())));
          Tensor ha = testing::random_tensor(bc.a, dt, Layout::ROW_MAJOR, 3);
          Tensor hb = testing::random_tensor(bc.b, DataType::FLOAT32, Layout::ROW_MAJOR, 4);
          const UnaryWithParam act{UnaryOpType::RELU6};
          ASSERT_OK_AND_ASSIGN(Tensor want, reference::binary(ha, hb, op, act, dt));
          for (Device* d : {dev.get(), wh.get()})
            for (const MemoryConfig& mc : {DRAM_MEMORY_CONFIG, L1_MEMORY_CONFIG}) {
              ASSERT_OK_AND_ASSIGN(Tensor a, to_device(ha, *d, mc));
              ASSERT_OK_AND_ASSIGN(Tensor b, to_device(hb, *d, DRAM_MEMORY_CONFIG));
              ASSERT_OK_AND_ASSIGN(Tensor y, binary(a, b, op, {.activation = act}));
              const bool takes_b = bc.a != want.shape() && bc.b == want.shape();
              EXPECT_EQ(y.memory_config().buffer_type, takes_b ? BufferType::DRAM : mc.buffer_type);
              ASSERT_OK_AND_ASSIGN(Tensor got, y.cpu());
              ASSERT_EQ(testing::host_bytes(got), testing::host_bytes(want)) << d->descriptor().name;
              // Operands swapped: the other side broadcasts.
              ASSERT_OK_AND_ASSIGN(Tensor want_swapped, reference::binary(hb, ha, op, act, DataType::FLOAT32));
              ASSERT_OK_AND_ASSIGN(Tensor ys, binary(b, a, op, {.activation = act}));
              ASSERT_EQ(testing::host_bytes(ys.cpu().value()), testing::host_bytes(want_swapped));
            }
        }
  }
  set_kernel_isa_limit(KernelIsa::kAvx512);
}

// Evenly spaced float rows broadcast through FloatMath::fused row by row;
// a column broadcast (shape [..., 1]) through the per-tile path.
TEST(Binary, BroadcastRowKernel) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  const std::pair<Shape, const char*> cases[] = {{Shape{1, 1, 1, 24}, "any_mul_broadcast__avx512_rows"},
                                                 {Shape{1, 30, 40, 1}, "any_mul_broadcast__avx512"}};
  for (const auto& [bs, name] : cases) {
    ASSERT_OK(enable_profiler(*dev));
    ASSERT_OK_AND_ASSIGN(
        Tensor a,
        to_device(testing::random_tensor(Shape{1, 30, 40, 24}, DataType::FLOAT32, Layout::ROW_MAJOR, 5), *dev));
    ASSERT_OK_AND_ASSIGN(Tensor b,
                         to_device(testing::random_tensor(bs, DataType::FLOAT32, Layout::ROW_MAJOR, 6), *dev));
    ASSERT_OK(mul(a, b).status());
    ASSERT_OK_AND_ASSIGN(DeviceProfile prof, read_profile(*dev));
    ASSERT_EQ(prof.ops.size(), 1u);
    if (kernel_isa() == KernelIsa::kAvx512) {
      EXPECT_EQ(prof.ops[0].kernel_name, name);
    }
  }
  ASSERT_OK(disable_profiler(*dev));
}

TEST(Binary, BroadcastIntoShardedOperand) {
  // A height-sharded activation (NHWC rows) plus a per-channel vector: the
  // output keeps the activation's shard spec.
  ASSERT_OK_AND_ASSIGN(auto wh, open_device({.descriptor = "wormhole_b0"}));
  const Shape act_shape{1, 1, 96, 64};
  Tensor ha = testing::random_tensor(act_shape, DataType::BFLOAT16, Layout::ROW_MAJOR, 5);
  Tensor hb = testing::random_tensor(Shape{1, 1, 1, 64}, DataType::BFLOAT16, Layout::ROW_MAJOR, 6);
  MemoryConfig hs =
      testing::sharded(TensorMemoryLayout::HEIGHT_SHARDED, BufferType::L1, CoreRange({0, 0}, {2, 0}), 32, 64);
  ASSERT_OK_AND_ASSIGN(Tensor a, to_device(ha, *wh, hs));
  ASSERT_OK_AND_ASSIGN(Tensor b, to_device(hb, *wh, L1_MEMORY_CONFIG));
  ASSERT_OK_AND_ASSIGN(Tensor y, mul(a, b));
  EXPECT_EQ(y.memory_config(), hs);
  ASSERT_OK_AND_ASSIGN(Tensor want, reference::binary(ha, hb, BinaryOpType::MUL, {}, DataType::BFLOAT16));
  EXPECT_EQ(testing::host_bytes(y.cpu().value()), testing::host_bytes(want));
}

TEST(Binary, BroadcastShapes) {
  EXPECT_EQ(broadcast_shapes(Shape{2, 1, 4}, Shape{3, 1}).value(), (Shape{2, 3, 4}));
  EXPECT_EQ(broadcast_shapes(Shape{5}, Shape{1}).value(), (Shape{5}));
  EXPECT_ERROR(broadcast_shapes(Shape{2, 3}, Shape{4, 3}), StatusCode::kInvalidArgument,
               "shapes [2,3] and [4,3] do not broadcast: dim 2 from the end is 2 and 4");
}

TEST(Binary, Errors) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  ASSERT_OK_AND_ASSIGN(auto other, open_device({}));
  Tensor h = testing::random_tensor(Shape{4, 8}, DataType::FLOAT32, Layout::ROW_MAJOR, 1);
  ASSERT_OK_AND_ASSIGN(Tensor a, to_device(h, *dev));
  ASSERT_OK_AND_ASSIGN(Tensor b,
                       to_device(testing::random_tensor(Shape{8}, DataType::FLOAT32, Layout::ROW_MAJOR, 1), *dev));
  ASSERT_OK_AND_ASSIGN(Tensor c, to_device(h, *other));
  EXPECT_ERROR(sub(a, c), StatusCode::kInvalidArgument, "sub: a and b are on different devices");
  EXPECT_ERROR(div(a, h), StatusCode::kInvalidArgument, "div: b must be a device tensor");
  MemoryConfig hs =
      testing::sharded(TensorMemoryLayout::HEIGHT_SHARDED, BufferType::L1, CoreRange({0, 0}, {0, 0}), 4, 8);
  EXPECT_ERROR(mul(a, b, {.memory_config = hs}), StatusCode::kUnimplemented,
               "mul: a broadcast output must be interleaved");
  EXPECT_ERROR(add(a, b, {.dtype = DataType::INT32}), StatusCode::kInvalidArgument,
               "add: expected a floating output dtype, found int32");
  EXPECT_ERROR(unary(a, {UnaryOpType::EXP}, {.dtype = DataType::UINT8}), StatusCode::kInvalidArgument,
               "exp: expected a floating output dtype");
}

}  // namespace
}  // namespace tessera
