// Conv algorithm selection: the candidate list, the tuning table, and the
// choice explain_conv2d reports, which must be the kernel conv2d runs (the
// profiler's kernel name), on every ISA tier this CPU offers.
#include "select.h"

#include <set>

#include "problem.h"
#include "tessera/base/cpu_features.h"
#include "tessera/device/profiler.h"
#include "tessera/ops/conv2d.h"
#include "tessera/ops/conv_transpose2d.h"
#include "test_util.h"
#include "tuning.h"

namespace tessera::conv {
namespace {

TEST(ConvTuning, EveryEntryHasAProvenanceAndTheTableMatchesIt) {
  std::set<std::string_view> names;
  for (const ConvTuningEntry& e : conv_tuning_entries()) {
    EXPECT_TRUE(names.insert(e.name).second) << e.name << " listed twice";
    EXPECT_GT(e.provenance.size(), 20u) << e.name << ": say where it was measured";
  }
  EXPECT_EQ(conv_tuning_entries().size(), sizeof(ConvTuning) / sizeof(uint64_t));
  // The struct's fields are the entries' values, in order.
  const auto* avx2 = reinterpret_cast<const uint64_t*>(&conv_tuning(KernelIsa::kAvx2));
  const auto* avx512 = reinterpret_cast<const uint64_t*>(&conv_tuning(KernelIsa::kAvx512));
  for (size_t i = 0; i < conv_tuning_entries().size(); ++i) {
    EXPECT_EQ(avx2[i], conv_tuning_entries()[i].avx2) << conv_tuning_entries()[i].name;
    EXPECT_EQ(avx512[i], conv_tuning_entries()[i].avx512) << conv_tuning_entries()[i].name;
  }
  EXPECT_EQ(conv_tuning(KernelIsa::kAvx512).winograd_min_cin, 64u);
  EXPECT_EQ(&conv_tuning(KernelIsa::kScalar), &conv_tuning(KernelIsa::kAvx2));
}

TEST(ConvSelect, NamesAreUniqueAndOnednnAppliesToAnything) {
  std::set<std::string_view> names;
  for (int a = 0; a <= static_cast<int>(ConvAlgorithm::kOnednn); ++a) {
    const auto alg = static_cast<ConvAlgorithm>(a);
    EXPECT_TRUE(names.insert(conv_algorithm_name(alg)).second) << conv_algorithm_name(alg);
    EXPECT_FALSE(conv_algorithm_description(alg).empty());
  }
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  Problem pr;  // a problem no other candidate takes: a 5x5 grouped conv
  pr.g = {.n = 1, .h = 8, .w = 8, .cin = 8, .cout = 8, .kh = 5, .kw = 5, .groups = 2, .oh = 4, .ow = 4};
  pr.input = pr.output = TensorSpec{Shape{1, 1, 64, 8}, DataType::FLOAT32, Layout::ROW_MAJOR, DRAM_MEMORY_CONFIG};
  pr.compute = pr.kernel = pr.dst_precision = pr.dst_dtype = DataType::FLOAT32;
  EXPECT_TRUE(select_conv_algorithm(pr, *dev).declined.empty());  // unexplained: no declines kept
  const ConvSelection s = select_conv_algorithm(pr, *dev, /*explain=*/true);
  EXPECT_EQ(s.algorithm, ConvAlgorithm::kOnednn);
  // Every other candidate declined, in order, each with a reason.
  ASSERT_EQ(s.declined.size(), static_cast<size_t>(ConvAlgorithm::kOnednn));
  for (const ConvDecline& d : s.declined) {
    ASSERT_NE(d.reason, nullptr);
    EXPECT_GT(std::string_view(d.reason).size(), 5u) << conv_algorithm_name(d.algorithm);
  }
  const std::string text = explain(s);
  EXPECT_TRUE(text.starts_with("onednn\n  declined depthwise: ")) << text;
}

struct Expected {
  KernelIsa isa;
  uint32_t h, w, c, k, r, groups;
  DataType in;
  MathFidelity fidelity;
  std::string_view algorithm, kernel;  // the kernel name the profiler reports contains `kernel`
};

// The choice explain_conv2d reports is the kernel conv2d runs.
TEST(ConvSelect, ExplainNamesTheKernelThatRuns) {
  const Expected cases[] = {
      {KernelIsa::kAvx2, 20, 20, 32, 32, 3, 1, DataType::FLOAT32, MathFidelity::HiFi4, "direct_avx2", "direct_avx2"},
      {KernelIsa::kAvx2, 20, 20, 32, 32, 3, 1, DataType::FLOAT32, MathFidelity::HiFi2, "winograd_avx2", "winograd"},
      {KernelIsa::kAvx2, 20, 20, 8, 32, 3, 1, DataType::FLOAT32, MathFidelity::HiFi4, "onednn", "onednn"},
      {KernelIsa::kAvx2, 20, 20, 32, 32, 3, 32, DataType::BFLOAT16, MathFidelity::HiFi4, "depthwise", "depthwise2d"},
      {KernelIsa::kAvx2, 20, 20, 32, 32, 3, 32, DataType::FLOAT32, MathFidelity::HiFi4, "onednn", "onednn"},
      {KernelIsa::kAvx512, 56, 56, 64, 64, 3, 1, DataType::FLOAT32, MathFidelity::HiFi4, "rows3x3_avx512", "rows3x3"},
      {KernelIsa::kAvx512, 56, 56, 64, 64, 3, 1, DataType::FLOAT32, MathFidelity::HiFi2, "onednn_winograd", "wino"},
      {KernelIsa::kAvx512, 7, 7, 512, 2048, 1, 1, DataType::FLOAT32, MathFidelity::HiFi4, "direct_avx512",
       "direct_avx512"},
      {KernelIsa::kAvx512, 40, 40, 32, 1, 1, 1, DataType::FLOAT32, MathFidelity::HiFi4, "narrow_avx512", "narrow"},
      {KernelIsa::kAvx512, 28, 28, 144, 24, 1, 1, DataType::FLOAT32, MathFidelity::HiFi4, "onednn_padded_cout",
       "_chunked"},
      {KernelIsa::kAvx512, 28, 28, 96, 96, 3, 96, DataType::FLOAT32, MathFidelity::HiFi4, "depthwise", "depthwise2d"},
  };
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  for (const Expected& e : cases) {
    if (e.isa == KernelIsa::kAvx512 ? !cpu_features().has_avx512_kernels() : !cpu_features().avx2) continue;
    set_kernel_isa_limit(e.isa);
    Conv2dParams p{.input_height = e.h, .input_width = e.w, .in_channels = e.c, .out_channels = e.k};
    p.kernel_size = {e.r, e.r};
    p.with_padding(e.r / 2, e.r / 2);
    p.groups = e.groups;
    SCOPED_TRACE(fmt::format("{} {} {}", kernel_isa_name(e.isa), p.descriptor(), math_fidelity_name(e.fidelity)));
    Conv2dConfig cfg{.weights_dtype = DataType::FLOAT32};
    cfg.compute_config.math_fidelity = e.fidelity;
    Tensor x = testing::random_tensor(Shape{1, e.h, e.w, e.c}, e.in, Layout::ROW_MAJOR, 1);
    ASSERT_OK_AND_ASSIGN(Tensor dx, to_device(x, *dev));
    const Tensor w =
        testing::random_tensor(Shape{e.k, e.c / e.groups, e.r, e.r}, DataType::FLOAT32, Layout::ROW_MAJOR, 2);
    ASSERT_OK_AND_ASSIGN(std::string why, explain_conv2d(dx, p, cfg));
    EXPECT_TRUE(why.starts_with(std::string(e.algorithm) + " for conv2d:")) << why;
    ASSERT_OK(enable_profiler(*dev));
    ASSERT_OK(conv2d(dx, w, std::nullopt, p, cfg).status());
    ASSERT_OK_AND_ASSIGN(DeviceProfile prof, read_profile(*dev));
    ASSERT_OK(disable_profiler(*dev));
    bool ran = false;
    for (const OpTiming& t : prof.ops) ran |= t.kernel_name.find(e.kernel) != std::string::npos;
    EXPECT_TRUE(ran) << "expected a kernel containing '" << e.kernel << "', ran " << prof.ops.back().kernel_name;
  }
  set_kernel_isa_limit(KernelIsa::kAvx512);
  ASSERT_OK(close_device(*dev));
}

TEST(ConvSelect, ExplainsTransposedAndConcatConvsAndRefusesWhatConv2dRefuses) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  Tensor x = testing::random_tensor(Shape{1, 8, 8, 16}, DataType::FLOAT32, Layout::ROW_MAJOR, 1);
  ASSERT_OK_AND_ASSIGN(Tensor dx, to_device(x, *dev));
  ConvTranspose2dParams t{.input_height = 8, .input_width = 8, .in_channels = 16, .out_channels = 8};
  ASSERT_OK_AND_ASSIGN(std::string why, explain_conv_transpose2d(dx, t));
  EXPECT_NE(why.find(" for conv_transpose2d:n1h8w8c16k8"), std::string::npos) << why;
  EXPECT_NE(why.find("declined depthwise: transposed"), std::string::npos) << why;
  Conv2dParams p{.input_height = 8, .input_width = 8, .in_channels = 32, .out_channels = 16};
  p.with_padding(1, 1);
  const Tensor parts[] = {dx, dx};
  ASSERT_OK_AND_ASSIGN(why, explain_conv2d_concat(parts, p));
  EXPECT_NE(why.find(" for conv2d:n1h8w8c32k16"), std::string::npos) << why;
  // The error conv2d gives for the same arguments.
  p.in_channels = 24;
  EXPECT_ERROR(explain_conv2d(dx, p), StatusCode::kInvalidArgument, "");
  EXPECT_ERROR(explain_conv2d_concat(parts, p), StatusCode::kInvalidArgument, "channels sum to 32");
  EXPECT_ERROR(explain_conv2d(x, p), StatusCode::kInvalidArgument, "");
  ASSERT_OK(close_device(*dev));
}

}  // namespace
}  // namespace tessera::conv
