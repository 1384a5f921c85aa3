// Conv algorithm selection: the one place that decides which kernel runs a
// conv problem (internal to src/ops).
//
// The candidates form an ordered list (select.cc, kCandidates), oneDNN's
// general kernel last, as oneDNN orders its implementation list. Each
// candidate's `applies` returns nullptr when it can run the problem and
// should, or the reason it declines; the first that applies is chosen. The
// thresholds the candidates compare against are data (tuning.inc, one table
// per ISA tier, each value with its provenance), read through conv_tuning().
//
// Everything that needs the choice asks this function through the Problem
// (problem.cc's make_problem): execution, weight packing and the program and
// weights keys. `tessera run --explain` prints each conv's selection.
//
// A decline is a limit (the kernel cannot run the problem) or tuned (a
// threshold says another kernel was measured faster): runnable_conv_algorithms
// lists the ones a ranking selection (conv2d.h's Conv2dConfig::algorithm,
// set by the compiler's --select predicted|measured) may choose among.
//
// To add an algorithm: one TS_CONV_ALGORITHMS line here, one candidate entry
// in select.cc at its place in the order, and its kernel in a file of its
// own (src/ops/conv/README.md walks through one).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/base/status.h"
#include "tessera/device/device.h"
#include "tessera/numerics/data_type.h"

namespace tessera::conv {

// X(enumerator, name, what it runs)
#define TS_CONV_ALGORITHMS(X)                                                                                \
  X(kDepthwise, "depthwise", "Tessera's depthwise kernel (cpu/depthwise_kernels.h)")                         \
  X(kWinogradAvx2, "winograd_avx2", "Tessera's F(2x2,3x3) Winograd kernel on AVX2")                          \
  X(kDirectAvx2, "direct_avx2", "Tessera's AVX2 direct kernel")                                              \
  X(kPatchAvx2, "patch_transpose_avx2", "Tessera's AVX2 patch kernel for kernel == stride upconvs")          \
  X(kNarrowAvx512, "narrow_avx512", "Tessera's AVX-512 kernel for 1x1 convs to a few channels")              \
  X(kOnednnWinograd, "onednn_winograd", "oneDNN's Winograd kernel (its direct one where it has none)")       \
  X(kDirectAvx512, "direct_avx512", "Tessera's AVX-512 direct kernel for small maps with many weights")      \
  X(kPatchAvx512, "patch_transpose_avx512", "Tessera's AVX-512 patch kernel for kernel == stride upconvs")   \
  X(kRows3x3Avx512, "rows3x3_avx512", "Tessera's AVX-512 3x3 row kernel")                                    \
  X(kAmxPatch1x1, "amx_patch_1x1", "an upconv as oneDNN's AMX 1x1 conv and a permute")                       \
  X(kPatchMatmul, "patch_transpose_matmul", "an upconv as a batched matmul (oneDNN)")                        \
  X(kOnednnPaddedCout, "onednn_padded_cout", "oneDNN with output channels padded to 16, in pixel chunks")    \
  X(kOnednnF32Rows, "onednn_f32_rows", "oneDNN bfloat16 writing float32 rows for Tessera's SiLU + residual") \
  X(kOnednn, "onednn", "oneDNN's convolution / deconvolution, split over the workers")

enum class ConvAlgorithm : uint8_t {
#define TS_CONV_ENUM(e, name, what) e,
  TS_CONV_ALGORITHMS(TS_CONV_ENUM)
#undef TS_CONV_ENUM
};

std::string_view conv_algorithm_name(ConvAlgorithm a);
std::string_view conv_algorithm_description(ConvAlgorithm a);
bool is_winograd(ConvAlgorithm a);
// Tessera's own direct kernels (launch_direct), Winograd on AVX2 included.
bool runs_own_direct_kernel(ConvAlgorithm a);
// oneDNN's convolutions: they read tiles and sharded rows themselves and
// tilize their own output. Every other algorithm reads and writes rows.
bool is_onednn(ConvAlgorithm a);

struct Problem;

struct ConvDecline {
  ConvAlgorithm algorithm;
  const char* reason;
  bool tuned;  // a measured preference (tuning.inc), not a limit of the kernel
};
struct ConvSelection {
  ConvAlgorithm algorithm = ConvAlgorithm::kOnednn;
  std::vector<ConvDecline> declined;  // the candidates before it, in order (when explained)
  bool forced = false;                // named by Conv2dConfig::algorithm
  // runnable_conv_algorithms of the problem (when explained: make_problem
  // fills it before the chosen algorithm changes the problem's rows).
  std::vector<ConvAlgorithm> runnable;
};

// `problem`: everything but algorithm and cout_padded filled in. With
// `explain`, the declines are kept too (an eager conv2d call asks without:
// no allocation).
ConvSelection select_conv_algorithm(const Problem& problem, const Device& device, bool explain = false);
// The algorithms that can run `problem`: the selection's choice first, then
// every later candidate declined only by a tuned threshold, in candidate
// order. A selection by prediction or measurement ranks these.
std::vector<ConvAlgorithm> runnable_conv_algorithms(const Problem& problem, const Device& device);
// The algorithm named `name` (Conv2dConfig::algorithm). INVALID_ARGUMENT for
// an unknown name (the names listed) or one that cannot run the problem
// (its reason, and the ones that can).
StatusOr<ConvSelection> select_named_conv_algorithm(const Problem& problem, const Device& device,
                                                    std::string_view name);
std::optional<ConvAlgorithm> parse_conv_algorithm(std::string_view name);

// The algorithm, then one line per candidate before it:
//   rows3x3_avx512
//     declined depthwise: not depthwise (groups == in == out channels)
//     ...
std::string explain(const ConvSelection& s);

}  // namespace tessera::conv
