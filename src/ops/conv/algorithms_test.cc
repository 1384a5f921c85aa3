// Every conv algorithm that can run a problem (conv2d_algorithms) computes
// it: each one is forced through Conv2dConfig::algorithm and compared with
// the reference kernel on the device's operands, over shapes chosen to sit
// on both sides of each tuned threshold (tuning.inc), in float32 and
// bfloat16, with and without a fused residual, and transposed. A selection
// by prediction or measurement may choose any of them, so a tuned decline
// must never hide a shape the kernel gets wrong. Tolerances as in
// conv2d_test.cc (test_util.h's expect_conv_close).
#include <fmt/format.h>

#include <cmath>
#include <set>

#include "tessera/base/cpu_features.h"
#include "tessera/ops/conv2d.h"
#include "tessera/ops/conv_transpose2d.h"
#include "tessera/ops/data_movement.h"
#include "tessera/ops/reference.h"
#include "test_util.h"

namespace tessera {
namespace {

struct Case {
  uint32_t n, h, w, cin, cout, k, stride, groups;
  DataType dtype = DataType::FLOAT32;
  MathFidelity fidelity = MathFidelity::HiFi4;
  bool residual = false;
  UnaryOpType act = UnaryOpType::RELU;
};

// Cases around each candidate's thresholds on this CPU's tier.
std::vector<Case> cases() {
  const DataType bf = DataType::BFLOAT16;
  return {
      // depthwise: 3- and 5-wide stride 1 everywhere, others only on small outputs (depthwise_max_pixels).
      {1, 20, 20, 32, 32, 3, 2, 32},
      {1, 12, 12, 48, 48, 5, 1, 48},
      {2, 16, 16, 32, 32, 3, 1, 32, bf},
      // Winograd below HiFi4 from winograd_min_cin input channels (tuned under it).
      {1, 14, 14, 32, 32, 3, 1, 1, DataType::FLOAT32, MathFidelity::HiFi2},
      {1, 10, 10, 64, 64, 3, 1, 1, DataType::FLOAT32, MathFidelity::HiFi2, true},
      // rows3x3: channels and maps outside the measured ranges.
      {1, 12, 12, 32, 32, 3, 1, 1},
      {1, 9, 50, 48, 64, 3, 1, 1},
      {1, 6, 6, 160, 96, 3, 1, 1},
      {2, 8, 8, 288, 64, 3, 1, 1},
      // direct_avx512: small outputs with many weights, and either side of its limits.
      {1, 4, 4, 256, 512, 1, 1, 1},
      {1, 7, 7, 128, 256, 3, 1, 1},
      {1, 30, 30, 64, 128, 1, 1, 1},
      {1, 10, 10, 128, 128, 1, 1, 1, DataType::FLOAT32, MathFidelity::HiFi4, true},
      {1, 9, 9, 64, 64, 5, 2, 1},
      // onednn_padded_cout: 1x1 to channels not a multiple of 16, under and over padded_cout_max.
      {1, 14, 14, 48, 24, 1, 1, 1},
      {2, 9, 9, 40, 72, 1, 1, 1},
      // narrow heads and the general kernel.
      {1, 16, 16, 32, 3, 1, 1, 1},
      {1, 11, 13, 24, 40, 3, 2, 2},
      // bfloat16 rows, with a residual.
      {1, 12, 12, 64, 64, 3, 1, 1, bf, MathFidelity::HiFi4, true, UnaryOpType::SILU},
      {1, 8, 8, 96, 24, 1, 1, 1, bf},
      // Grouped bfloat16 with SiLU then a residual: oneDNN's chain lacks it, and the add is separate.
      {1, 29, 23, 8, 152, 7, 2, 4, bf, MathFidelity::HiFi2, true, UnaryOpType::SILU},
      // AVX2's direct kernel from 16 input channels, 2x2 to 7x7.
      {1, 15, 15, 16, 24, 2, 1, 1},
      {1, 12, 12, 24, 16, 7, 1, 1},
  };
}

Conv2dParams params_of(const Case& c) {
  Conv2dParams p{
      .batch_size = c.n, .input_height = c.h, .input_width = c.w, .in_channels = c.cin, .out_channels = c.cout};
  p.kernel_size = {c.k, c.k};
  p.stride = {c.stride, c.stride};
  p.with_padding(c.k / 2, c.k / 2);
  p.groups = c.groups;
  p.activation = {c.act};
  return p;
}

std::vector<float> values(const Tensor& device_tensor) {
  auto host = device_tensor.cpu();
  EXPECT_TRUE(host.ok()) << host.status().to_string();
  if (!host.ok()) return {};
  auto v = host->to_vector();
  EXPECT_TRUE(v.ok());
  return v.ok() ? *v : std::vector<float>{};
}

void check_conv2d(Device& dev, const Case& c, std::set<std::string>& seen) {
  const Conv2dParams p = params_of(c);
  Conv2dConfig cfg{.weights_dtype = DataType::FLOAT32};
  cfg.compute_config.math_fidelity = c.fidelity;
  SCOPED_TRACE(fmt::format("{} {} {}{}", p.descriptor(), data_type_name(c.dtype), math_fidelity_name(c.fidelity),
                           c.residual ? " +residual" : ""));
  const Tensor x = testing::random_tensor(Shape{c.n, c.h, c.w, c.cin}, c.dtype, Layout::ROW_MAJOR, 1);
  ASSERT_OK_AND_ASSIGN(Tensor dx, to_device(x, dev));
  const Tensor w =
      testing::random_tensor(Shape{c.cout, c.cin / c.groups, c.k, c.k}, DataType::FLOAT32, Layout::ROW_MAJOR, 2);
  ASSERT_OK_AND_ASSIGN(Tensor b,
                       Tensor::from_vector(testing::random_values(c.cout, 3), Shape{c.cout}, DataType::FLOAT32));
  const Shape out_shape{c.n, p.output_height(), p.output_width(), c.cout};
  const Tensor skip = testing::random_tensor(out_shape, c.dtype, Layout::ROW_MAJOR, 4);
  // The reference: the conv on the device's operands, then the residual added.
  ASSERT_OK_AND_ASSIGN(Tensor rw, round_conv2d_weights(w, p, cfg.weights_dtype, c.dtype));
  Conv2dParams ref_p = p;
  if (c.residual) ref_p.activation = {UnaryOpType::IDENTITY};
  ASSERT_OK_AND_ASSIGN(Tensor ref_t, reference::conv2d(x, rw, b, ref_p, DataType::FLOAT32));
  ASSERT_OK_AND_ASSIGN(std::vector<float> ref, ref_t.to_vector());
  if (c.residual) {  // y = act(conv + bias) + skip, as the fused kernel computes it
    ASSERT_OK_AND_ASSIGN(std::vector<float> s, skip.to_vector());
    for (size_t i = 0; i < ref.size(); ++i) {
      double v = ref[i];
      if (c.act == UnaryOpType::RELU) v = std::max(v, 0.0);
      if (c.act == UnaryOpType::SILU) v = v / (1.0 + std::exp(-v));
      ref[i] = static_cast<float>(v + s[i]);
    }
  }
  ASSERT_OK_AND_ASSIGN(Tensor dskip, to_device(skip, dev));
  const Conv2dResidual residual{.tensor = dskip};
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> algs, conv2d_algorithms(dx, p, cfg, c.residual ? &residual : nullptr));
  ASSERT_FALSE(algs.empty());
  ASSERT_OK_AND_ASSIGN(std::string why, explain_conv2d(dx, p, cfg, c.residual ? &residual : nullptr));
  EXPECT_TRUE(why.starts_with(algs[0] + " for "))
      << fmt::format("{}\n", fmt::join(algs, ", ")) << why;  // the selection's choice comes first
  for (const std::string& a : algs) {
    SCOPED_TRACE(a);
    seen.insert(a);
    Conv2dConfig forced = cfg;
    forced.algorithm = a;
    ASSERT_OK_AND_ASSIGN(why, explain_conv2d(dx, p, forced, c.residual ? &residual : nullptr));
    EXPECT_TRUE(why.starts_with(a + " (Conv2dConfig::algorithm) for ")) << why;
    ASSERT_OK_AND_ASSIGN(
        Conv2dResult r, c.residual ? conv2d_with_residual(dx, w, b, p, residual, forced) : conv2d(dx, w, b, p, forced));
    testing::expect_conv_close(values(r.output), ref, c.dtype);
    // The prepared weights serve the forced kernel again, bit for bit.
    ASSERT_OK_AND_ASSIGN(Conv2dResult again, c.residual ? conv2d_with_residual(dx, r.weights, p, residual, forced)
                                                        : conv2d(dx, r.weights, p, forced));
    EXPECT_EQ(values(again.output), values(r.output));
  }
}

TEST(ConvAlgorithms, EveryRunnableAlgorithmMatchesTheReference) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  std::set<std::string> seen;
  for (const Case& c : cases()) check_conv2d(*dev, c, seen);
  // Ranking has something to choose among: more kernels than the general one ran.
  EXPECT_GT(seen.size(), cpu_features().avx2 ? 2u : 0u) << fmt::format("{}", fmt::join(seen, ", "));
  ASSERT_OK(close_device(*dev));
}

// oneDNN 2.6's bfloat16 brgconv crashed on these (input channels one short
// of a multiple of 64, kernels over 3x3; onednn_plan.cc's make_pd takes its
// next implementation there): they run and match the reference.
TEST(ConvAlgorithms, Bfloat16ChannelsOneShortOfABlock) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  const uint32_t shapes[][3] = {{191, 62, 7}, {191, 33, 6}, {127, 62, 7}, {383, 48, 5}, {511, 62, 5}};
  for (const auto& [cin, cout, k] : shapes) {
    Conv2dParams p{.batch_size = 1, .input_height = 16, .input_width = 16, .in_channels = cin, .out_channels = cout};
    p.kernel_size = {k, k};
    SCOPED_TRACE(p.descriptor());
    const Tensor x = testing::random_tensor(Shape{1, 16, 16, cin}, DataType::BFLOAT16, Layout::ROW_MAJOR, 1);
    ASSERT_OK_AND_ASSIGN(Tensor dx, to_device(x, *dev));
    const Tensor w = testing::random_tensor(Shape{cout, cin, k, k}, DataType::FLOAT32, Layout::ROW_MAJOR, 2);
    const Conv2dConfig cfg{.weights_dtype = DataType::BFLOAT16};
    ASSERT_OK_AND_ASSIGN(Conv2dResult r, conv2d(dx, w, std::nullopt, p, cfg));
    ASSERT_OK_AND_ASSIGN(Tensor rw, round_conv2d_weights(w, p, cfg.weights_dtype, DataType::BFLOAT16));
    ASSERT_OK_AND_ASSIGN(Tensor ref_t, reference::conv2d(x, rw, std::nullopt, p, DataType::FLOAT32));
    ASSERT_OK_AND_ASSIGN(std::vector<float> ref, ref_t.to_vector());
    testing::expect_conv_close(values(r.output), ref, DataType::BFLOAT16);
  }
  ASSERT_OK(close_device(*dev));
}

TEST(ConvAlgorithms, TransposedKernelEqualsStride) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  for (uint32_t cout : {16u, 24u, 64u}) {
    ConvTranspose2dParams p{
        .batch_size = 1, .input_height = 9, .input_width = 12, .in_channels = 32, .out_channels = cout};
    p.kernel_size = {2, 2};
    p.stride = {2, 2};
    SCOPED_TRACE(p.descriptor());
    const Conv2dConfig cfg{.weights_dtype = DataType::FLOAT32};
    const Tensor x = testing::random_tensor(Shape{1, 9, 12, 32}, DataType::FLOAT32, Layout::ROW_MAJOR, 1);
    ASSERT_OK_AND_ASSIGN(Tensor dx, to_device(x, *dev));
    const Tensor w = testing::random_tensor(Shape{32, cout, 2, 2}, DataType::FLOAT32, Layout::ROW_MAJOR, 2);
    ASSERT_OK_AND_ASSIGN(Tensor rw, round_conv_transpose2d_weights(w, p, cfg.weights_dtype, DataType::FLOAT32));
    ASSERT_OK_AND_ASSIGN(Tensor ref_t, reference::conv_transpose2d(x, rw, std::nullopt, p, DataType::FLOAT32));
    ASSERT_OK_AND_ASSIGN(std::vector<float> ref, ref_t.to_vector());
    ASSERT_OK_AND_ASSIGN(std::vector<std::string> algs, conv_transpose2d_algorithms(dx, p, cfg));
    EXPECT_GE(algs.size(), 2u);  // the patch kernels and oneDNN's deconvolution
    for (const std::string& a : algs) {
      SCOPED_TRACE(a);
      Conv2dConfig forced = cfg;
      forced.algorithm = a;
      ASSERT_OK_AND_ASSIGN(Conv2dResult r, conv_transpose2d(dx, w, std::nullopt, p, forced));
      testing::expect_conv_close(values(r.output), ref, DataType::FLOAT32);
    }
  }
  ASSERT_OK(close_device(*dev));
}

TEST(ConvAlgorithms, NamedAlgorithmErrors) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  const Conv2dParams p = params_of({1, 8, 8, 8, 8, 5, 1, 2});  // only oneDNN runs a 5x5 grouped conv
  const Tensor x = testing::random_tensor(Shape{1, 8, 8, 8}, DataType::FLOAT32, Layout::ROW_MAJOR, 1);
  ASSERT_OK_AND_ASSIGN(Tensor dx, to_device(x, *dev));
  const Tensor w = testing::random_tensor(Shape{8, 4, 5, 5}, DataType::FLOAT32, Layout::ROW_MAJOR, 2);
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> algs, conv2d_algorithms(dx, p));
  EXPECT_EQ(algs, std::vector<std::string>{"onednn"});
  Conv2dConfig cfg;
  cfg.algorithm = "fastest";
  EXPECT_ERROR(conv2d(dx, w, std::nullopt, p, cfg).status(), StatusCode::kInvalidArgument,
               "unknown conv algorithm 'fastest'; expected one of: depthwise, ");
  cfg.algorithm = "depthwise";
  EXPECT_ERROR(conv2d(dx, w, std::nullopt, p, cfg).status(), StatusCode::kInvalidArgument,
               "conv algorithm 'depthwise' cannot run this conv (not depthwise (groups == in == out channels)); the "
               "ones that can: onednn");
  EXPECT_ERROR(explain_conv2d(dx, p, cfg), StatusCode::kInvalidArgument, "cannot run this conv");
  cfg.algorithm = "onednn";
  ASSERT_OK_AND_ASSIGN(Conv2dResult r, conv2d(dx, w, std::nullopt, p, cfg));
  // A named kernel's weights name it: they are not the selection's (which may pack differently).
  EXPECT_NE(r.weights.key.find(":as_onednn"), std::string::npos) << r.weights.key;
  ASSERT_OK(close_device(*dev));
}

}  // namespace
}  // namespace tessera
