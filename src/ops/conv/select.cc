#include "select.h"

#include <fmt/format.h>

#include "../cpu/direct_conv_kernels.h"
#include "../cpu/float_math.h"
#include "problem.h"
#include "tessera/base/cpu_features.h"
#include "tuning.h"

namespace tessera::conv {

namespace {

// Why a candidate declines a problem, or nothing when it applies. A limit
// is what the kernel cannot run; a tuned decline is a measured preference
// (a threshold of tuning.inc): the kernel can run the problem, and a
// selection that ranks by prediction or measurement may still choose it.
struct Reason {
  const char* text = nullptr;
  bool tuned = false;
  explicit operator bool() const { return text != nullptr; }
};
constexpr Reason kApplies{};
constexpr Reason limit(const char* why) { return {why, false}; }
constexpr Reason tuned(const char* why) { return {why, true}; }

bool is_1x1_unpadded(const Geometry& g) {
  return g.kh == 1 && g.kw == 1 && g.pad_t == 0 && g.pad_b == 0 && g.pad_l == 0 && g.pad_r == 0;
}
uint64_t weight_count(const Geometry& g) { return uint64_t{g.cin} * g.cout * g.kh * g.kw; }

// The shapes and dtypes Tessera's AVX2 direct kernel runs.
bool direct_avx2_shape(bool transposed, uint32_t groups, uint32_t kh, uint32_t kw, uint32_t cin, DataType in,
                       DataType out) {
  return kernel_isa() == KernelIsa::kAvx2 && !transposed && groups == 1 && kh * kw > 1 && kh <= 7 && kw <= 7 &&
         cin >= 16 && is_row_dtype(in) && is_row_dtype(out);
}

// Depthwise convolutions (multiplier 1) on Tessera's own kernels. On AVX-512
// CPUs: 3- and 5-wide stride-1 kernels on every map (the direct path; 5-wide
// on an Intel Xeon, batch 1: 28x28x120 173 against brdgmm's 115 GFLOP/s,
// 14x14x480 203 against the staged path's 90), other shapes on small
// outputs (3x3 stride 2 on 56x56 and larger inputs lost to oneDNN's brdgmm
// on a Zen 5). On AVX2-only
// CPUs every map with bfloat16 rows in or out: oneDNN's jit:avx2 stages
// those through float32 copies (Tessera's took 1.0-2.4x less time on
// MobileNetV2's layers); float32 stays on oneDNN's, 1.2-2x faster there.
Reason depthwise(const Problem& pr, const Device&, const ConvTuning& t) {
  const Geometry& g = pr.g;
  if (g.transposed) return limit("transposed");
  if (g.groups != g.cin || g.cout != g.cin || g.groups < 2)
    return limit("not depthwise (groups == in == out channels)");
  if (kernel_isa() == KernelIsa::kAvx2) {
    if (!is_row_dtype(pr.input.dtype) || !is_row_dtype(pr.output.dtype)) return limit("rows not float32 / bfloat16");
    if (pr.input.dtype != DataType::BFLOAT16 && pr.output.dtype != DataType::BFLOAT16)
      return tuned("float32 rows on AVX2 (oneDNN's kernel is faster)");
    return kApplies;
  }
  if (kernel_isa() != KernelIsa::kAvx512) return limit("needs AVX2 or AVX-512 kernels");
  if (pr.compute != DataType::FLOAT32 && pr.compute != DataType::BFLOAT16)
    return limit("computes in neither float32 nor bfloat16");
  const bool direct_width = g.kw == 3 || (g.kw == 5 && pr.input.dtype == pr.output.dtype);  // (direct3::applies)
  const bool direct_stride1 = direct_width && g.kh <= 7 && g.dw == 1 && g.dh == 1 && g.sw == 1;
  if (!direct_stride1 && g.oh * g.ow > t.depthwise_max_pixels)
    return tuned("not 3 or 5 wide with stride 1, and the output is over depthwise_max_pixels");
  return kApplies;
}

// Winograd does a 3x3 stride-1 conv in about half the multiplies (1.6-1.9x
// faster on ResNet-50's 3x3 layers) at the cost of a transform's rounding
// (relative error ~1e-5 instead of ~1e-7): only below math fidelity HiFi4,
// the original's knob for trading exactness for speed. With a residual only
// on AVX2 (Tessera's kernel adds it; oneDNN's Winograd has no sum post-op),
// and there also for bfloat16 rows (these CPUs compute them in float32).
Reason winograd(const Problem& pr, const ConvTuning& t) {
  const Geometry& g = pr.g;
  if (pr.fidelity == MathFidelity::HiFi4) return limit("math fidelity HiFi4 (Winograd rounds)");
  if (g.cin < t.winograd_min_cin) return tuned("fewer input channels than winograd_min_cin");
  if (pr.compute != DataType::FLOAT32 && !(pr.compute == DataType::BFLOAT16 && kernel_isa() == KernelIsa::kAvx2))
    return limit("computes in bfloat16");
  if (g.transposed || g.groups != 1 || g.kh != 3 || g.kw != 3 || g.sh != 1 || g.sw != 1 || g.dh != 1 || g.dw != 1)
    return limit("not a 3x3 stride-1 conv without groups or dilation");
  if (pr.residual && kernel_isa() != KernelIsa::kAvx2)
    return limit("a fused residual (oneDNN's Winograd has no sum post-op)");
  return kApplies;
}

// Tessera's AVX2 direct kernel on CPUs with AVX2 but not AVX-512: float32 or
// bfloat16 (computed in float32) in and out, 2x2 to 7x7 kernels over 16 or
// more input channels, no groups, with or without a fused residual. 1x1
// convs stay on oneDNN's jit_1x1 (130-170 GFLOP/s there). Against oneDNN's
// jit:avx2: the UNet's 3x3 set 1.38x, ResNet-50's 3x3 set 101-138 against
// 51-125 GFLOP/s per layer.
Reason direct_avx2(const Problem& pr, const Device&, const ConvTuning&) {
  const Geometry& g = pr.g;
  if (kernel_isa() != KernelIsa::kAvx2) return limit("for AVX2-only CPUs");
  if (pr.output.layout != Layout::ROW_MAJOR) return limit("a tile output");
  if (!direct_avx2_shape(g.transposed, g.groups, g.kh, g.kw, g.cin, pr.compute, pr.output.dtype))
    return limit(
        "transposed, grouped, 1x1 (oneDNN's jit_1x1 is faster), over 7x7, under 16 input channels, or not "
        "float32 / bfloat16 rows");
  return kApplies;
}

Reason winograd_avx2(const Problem& pr, const Device& d, const ConvTuning& t) {
  const Reason w = winograd(pr, t), direct = direct_avx2(pr, d, t);
  if (direct && !direct.tuned) return direct;  // a limit outranks a tuned decline
  return w ? w : direct;
}

// Upconvs whose kernel equals their stride on AVX2: oneDNN's gemm ran their
// batched matmul rows at 50-85 GFLOP/s on the UNet's maps.
Reason patch_avx2(const Problem& pr, const Device&, const ConvTuning&) {
  if (kernel_isa() != KernelIsa::kAvx2) return limit("for AVX2-only CPUs");
  if (pr.output.layout != Layout::ROW_MAJOR) return limit("a tile output");
  if (pr.residual) return limit("a fused residual");
  if (!patch_shape(pr.g)) return limit("not a transposed conv with kernel == stride");
  if (!is_row_dtype(pr.compute) || !is_row_dtype(pr.output.dtype)) return limit("rows not float32 / bfloat16");
  return kApplies;
}

// 1x1 stride-1 convs to at most cpu::avx512::kNarrowMaxCout channels (a
// segmentation head's scores): the blocked kernels compute 16 channels at
// least; the UNet's 32 -> 1 head took 4.0 ms on oneDNN's brgconv_1x1.
Reason narrow_avx512(const Problem& pr, const Device&, const ConvTuning&) {
  const Geometry& g = pr.g;
  if (kernel_isa() != KernelIsa::kAvx512) return limit("needs AVX-512 kernels");
  if (pr.output.layout != Layout::ROW_MAJOR) return limit("a tile output");
  if (g.transposed || g.groups != 1) return limit("transposed or grouped");
  if (!is_1x1_unpadded(g) || g.sh != 1 || g.sw != 1) return limit("not a 1x1 stride-1 conv without padding");
  if (g.cout > cpu::avx512::kNarrowMaxCout) return limit("more output channels than kNarrowMaxCout");
  if (!is_row_dtype(pr.compute) || !is_row_dtype(pr.output.dtype) ||
      (pr.residual && !is_row_dtype(pr.residual->tensor.dtype())))
    return limit("rows not float32 / bfloat16");
  return kApplies;
}

Reason onednn_winograd(const Problem& pr, const Device&, const ConvTuning& t) { return winograd(pr, t); }

// Float32 convs without groups whose whole output is small and whose weights
// outgrow a worker's L2 (a classifier's late layers at small batches): 1x1
// convs without padding, and kernels up to 7x7 on the smallest maps. There
// oneDNN's brgconv_1x1 ran at 250-300 GFLOP/s inside ResNet-50 at batch 1:
// its channel shards stage their output columns and it reads cold weights
// slowly; Tessera's kernel writes any column range in place and prefetches
// the weights. 1x1 convs with a residual over few input channels take it on
// larger outputs (each output costs few FMAs beside its residual read).
Reason direct_avx512(const Problem& pr, const Device&, const ConvTuning& t) {
  const Geometry& g = pr.g;
  if (kernel_isa() != KernelIsa::kAvx512) return limit("needs AVX-512 kernels");
  if (pr.output.layout != Layout::ROW_MAJOR) return limit("a tile output");
  if (g.transposed || g.groups != 1) return limit("transposed or grouped");
  if (g.kh > 7 || g.kw > 7) return limit("a kernel over 7x7");
  if (pr.compute != DataType::FLOAT32 || pr.output.dtype != DataType::FLOAT32 ||
      (pr.residual && pr.residual->tensor.dtype() != DataType::FLOAT32))
    return limit("not float32");
  if (!is_1x1_unpadded(g) && uint64_t{g.oh} * g.ow > t.direct512_max_map_pixels)
    return tuned("not 1x1 unpadded, and the map is over direct512_max_map_pixels");
  const bool residual_1x1 = pr.residual && g.kh == 1 && g.kw == 1 && g.cin <= t.direct512_residual_max_cin;
  if (uint64_t{g.n} * g.oh * g.ow > (residual_1x1 ? t.direct512_max_residual_pixels : t.direct512_max_pixels))
    return tuned("the output is over direct512_max_pixels (direct512_max_residual_pixels with a 1x1 residual)");
  if (weight_count(g) < t.direct512_min_weights) return tuned("fewer weights than direct512_min_weights (they fit L2)");
  return kApplies;
}

// Upconvs whose kernel equals their stride, float32, whose output channels
// fill 16-channel blocks and whose weights are many: the UNet's upconv4
// 2.54-2.75 against 3.70-3.74 ms on oneDNN's batched matmul.
Reason patch_avx512(const Problem& pr, const Device&, const ConvTuning& t) {
  const Geometry& g = pr.g;
  if (kernel_isa() != KernelIsa::kAvx512) return limit("needs AVX-512 kernels");
  if (pr.output.layout != Layout::ROW_MAJOR) return limit("a tile output");
  if (!patch_shape(g)) return limit("not a transposed conv with kernel == stride");
  if (g.cout % 16 != 0) return limit("output channels not a multiple of 16");
  if (pr.compute != DataType::FLOAT32 || pr.output.dtype != DataType::FLOAT32) return limit("not float32");
  if (pr.residual) return limit("a fused residual");
  if (weight_count(g) < t.direct512_min_weights) return tuned("fewer weights than direct512_min_weights");
  return kApplies;
}

// Float32 3x3 stride-1 pad-1 convs without groups or a residual, on the
// shapes where the row kernel beat oneDNN's brgconv (brgconv computes a row
// in tiles of six pixels; rows of 6k + 1 or 6k + 2 end in a tile that
// streams all the weights for one or two). The ranges are the tuning
// table's rows3x3_* entries; each was measured layer by layer, alternated.
Reason rows3x3_avx512(const Problem& pr, const Device&, const ConvTuning& t) {
  const Geometry& g = pr.g;
  if (kernel_isa() != KernelIsa::kAvx512) return limit("needs AVX-512 kernels");
  if (pr.output.layout != Layout::ROW_MAJOR) return limit("a tile output");
  if (g.transposed || g.groups != 1) return limit("transposed or grouped");
  if (pr.residual) return limit("a fused residual");
  if (pr.compute != DataType::FLOAT32 || pr.input.dtype != DataType::FLOAT32 || pr.output.dtype != DataType::FLOAT32)
    return limit("not float32");
  if (g.kh != 3 || g.kw != 3 || g.sh != 1 || g.sw != 1 || g.dh != 1 || g.dw != 1 || g.pad_t != 1 || g.pad_b != 1 ||
      g.pad_l != 1 || g.pad_r != 1)
    return limit("not a 3x3 stride-1 pad-1 conv");
  if (g.cout % 32 != 0) return limit("output channels not a multiple of 32");
  const uint64_t pixels = uint64_t{g.oh} * g.ow;
  const uint32_t group = cpu::avx512::rows3x3_group_channels(g.cin, g.cout);
  const bool wide_cin = g.cin >= t.rows3x3_wide_min_cin && g.cin <= t.rows3x3_wide_max_cin;
  const bool quads =
      group == 64 && ((g.ow >= t.rows3x3_min_width &&
                       ((g.cin <= t.rows3x3_max_cin && pixels <= t.rows3x3_max_pixels) ||
                        (wide_cin && g.cout <= t.rows3x3_wide_max_cout && pixels <= t.rows3x3_wide_max_pixels))) ||
                      (g.cin > t.rows3x3_max_cin && g.cin <= t.rows3x3_mid_max_cin && pixels <= t.rows3x3_max_pixels) ||
                      (wide_cin && pixels >= t.rows3x3_mid_min_pixels && pixels <= t.rows3x3_mid_max_pixels));
  const bool pairs =
      group == 32 && ((g.cin > 32 && g.cin <= t.rows3x3_max_cin && pixels >= t.rows3x3_pairs_min_pixels) ||
                      (g.cin >= t.rows3x3_deep_min_cin && g.cin <= t.rows3x3_deep_max_cin &&
                       pixels >= t.rows3x3_deep_min_pixels && pixels <= t.rows3x3_deep_max_pixels));
  if (!quads && !pairs) return tuned("channels and map outside the rows3x3_* ranges where it was measured faster");
  return kApplies;
}

// Upconvs whose kernel equals their stride, computed in bfloat16 on AMX: a
// 1x1 conv to kh * kw * Cout channels (oneDNN's AMX brgconv_1x1, weights
// packed once) and a permute. The batched matmul repacks the weights into
// AMX tiles on every call (the UNet's upconvs at 350-800 GFLOP/s). The
// permute reads the conv's output as a view: one DRAM bank, rows a multiple
// of its alignment.
Reason amx_patch_1x1(const Problem& pr, const Device& device, const ConvTuning& t) {
  const Geometry& g = pr.g;
  if (!on_amx(pr.kernel)) return limit("not a bfloat16 kernel on AMX");
  if (!patch_shape(g)) return limit("not a transposed conv with kernel == stride");
  if (g.w > t.amx_patch_max_width) return tuned("input wider than amx_patch_max_width");
  if (pr.residual || pr.output.layout != Layout::ROW_MAJOR) return limit("a fused residual or a tile output");
  const uint64_t row_bytes = uint64_t{g.kw} * g.cout * element_size(pr.output.dtype);
  if (device.descriptor().num_dram_banks != 1 || row_bytes % device.alignment(BufferType::DRAM) != 0)
    return limit("the device's DRAM rows are not dense (banks, alignment)");
  return kApplies;
}

// Upconvs whose kernel equals their stride as a matmul per input row and
// kernel row: oneDNN's deconvolution ran these at 2-45% of peak.
Reason patch_matmul(const Problem& pr, const Device&, const ConvTuning&) {
  if (!patch_shape(pr.g)) return limit("not a transposed conv with kernel == stride");
  return kApplies;
}

// Float32 1x1 stride-1 convs whose output channels are not a multiple of 16
// (and few): oneDNN's brgconv_1x1 blocks output channels by 16, and
// MobileNetV2's 144 -> 24 ran at 120-150 GFLOP/s; computing them padded to
// a block with zero weights in pixel chunks took 0.60 against 0.99 ms
// (batch 8, standalone; in the model 1.63-1.77 -> 1.28-1.39 ms).
Reason onednn_padded_cout(const Problem& pr, const Device&, const ConvTuning& t) {
  const Geometry& g = pr.g;
  if (kernel_isa() != KernelIsa::kAvx512 || cpu::select_float_math().fused == nullptr)
    return limit("needs AVX-512 kernels");
  if (g.transposed || g.groups != 1) return limit("transposed or grouped");
  if (!is_1x1_unpadded(g) || g.sh != 1 || g.sw != 1) return limit("not a 1x1 stride-1 conv without padding");
  if (pr.kernel != DataType::FLOAT32 || pr.dst_dtype != DataType::FLOAT32) return limit("not float32");
  if (g.cout % 16 == 0) return limit("output channels a multiple of 16 (nothing to pad)");
  if (g.cout >= t.padded_cout_max) return tuned("padded_cout_max output channels or more");
  return kApplies;
}

// bfloat16 rows out of SiLU and a residual on oneDNN's bfloat16 kernels: the
// kernel writes float32 rows, which Tessera's SiLU and fused add round once
// as they store, as oneDNN's post-ops did (its swish-then-sum chain is slow
// on AMX).
Reason onednn_f32_rows(const Problem& pr, const Device&, const ConvTuning&) {
  if (!pr.residual || !is_plain_silu(pr.g.activation)) return limit("no SiLU with a fused residual");
  if (kernel_isa() != KernelIsa::kAvx512) return limit("needs AVX-512 kernels");
  if (pr.kernel != DataType::BFLOAT16 || pr.dst_dtype != DataType::BFLOAT16 || pr.output.dtype != DataType::BFLOAT16 ||
      pr.output.layout != Layout::ROW_MAJOR || !is_row_dtype(pr.residual->tensor.dtype()))
    return limit("not bfloat16 rows on a bfloat16 kernel");
  return kApplies;
}

Reason onednn(const Problem&, const Device&, const ConvTuning&) { return kApplies; }

// Tessera's direct kernels read and write rows with one stride: in place,
// or staged through one dense DRAM shard (launch_direct). Rows spread over
// several DRAM banks have no one stride, and rows under 4 bytes cannot be
// staged densely (a 32 -> 1 bfloat16 segmentation head on wormhole_b0).
Reason rows_with_one_stride(const Problem& pr, const Device& device) {
  if (device.descriptor().num_dram_banks == 1) return kApplies;
  const Geometry& g = pr.g;
  const bool in = stages_densely(
      uint64_t{g.cin} * element_size(pr.input.dtype == DataType::FLOAT32 ? DataType::FLOAT32 : DataType::BFLOAT16));
  const bool out = stages_densely(uint64_t{g.cout} * element_size(pr.output.dtype));
  const bool res = !pr.residual || stages_densely(uint64_t{g.cout} * element_size(pr.residual->tensor.dtype()));
  if (in && out && res) return kApplies;
  return limit("rows under 4 bytes spread over DRAM banks (they cannot be staged densely)");
}

struct Candidate {
  ConvAlgorithm algorithm;
  Reason (*applies)(const Problem&, const Device&, const ConvTuning&);
};

// In order of preference; the general kernel last. Own kernels come before
// oneDNN where their measured ranges apply; Winograd before the direct
// AVX-512 kernels (it is the user's choice of fidelity).
constexpr Candidate kCandidates[] = {
    {ConvAlgorithm::kDepthwise, depthwise},           {ConvAlgorithm::kWinogradAvx2, winograd_avx2},
    {ConvAlgorithm::kDirectAvx2, direct_avx2},        {ConvAlgorithm::kPatchAvx2, patch_avx2},
    {ConvAlgorithm::kNarrowAvx512, narrow_avx512},    {ConvAlgorithm::kOnednnWinograd, onednn_winograd},
    {ConvAlgorithm::kDirectAvx512, direct_avx512},    {ConvAlgorithm::kPatchAvx512, patch_avx512},
    {ConvAlgorithm::kRows3x3Avx512, rows3x3_avx512},  {ConvAlgorithm::kAmxPatch1x1, amx_patch_1x1},
    {ConvAlgorithm::kPatchMatmul, patch_matmul},      {ConvAlgorithm::kOnednnPaddedCout, onednn_padded_cout},
    {ConvAlgorithm::kOnednnF32Rows, onednn_f32_rows}, {ConvAlgorithm::kOnednn, onednn},
};

constexpr bool candidates_in_enum_order() {
  for (size_t i = 0; i < std::size(kCandidates); ++i)
    if (kCandidates[i].algorithm != static_cast<ConvAlgorithm>(i)) return false;
  return true;
}
static_assert(candidates_in_enum_order(), "kCandidates lists the algorithms in TS_CONV_ALGORITHMS' order");

constexpr std::string_view kNames[] = {
#define TS_CONV_NAME(e, name, what) name,
    TS_CONV_ALGORITHMS(TS_CONV_NAME)
#undef TS_CONV_NAME
};
constexpr std::string_view kDescriptions[] = {
#define TS_CONV_WHAT(e, name, what) what,
    TS_CONV_ALGORITHMS(TS_CONV_WHAT)
#undef TS_CONV_WHAT
};

}  // namespace

bool patch_shape(const Geometry& g) {
  return g.transposed && g.kh == g.sh && g.kw == g.sw && g.dh == 1 && g.dw == 1 && g.groups == 1 && g.pad_t == 0 &&
         g.pad_b == 0 && g.pad_l == 0 && g.pad_r == 0 && g.oh == g.h * g.sh && g.ow == g.w * g.sw;
}

bool on_amx(DataType kernel) {
  return kernel == DataType::BFLOAT16 && kernel_isa() == KernelIsa::kAvx512 && cpu_features().amx_bf16;
}

std::string_view conv_algorithm_name(ConvAlgorithm a) { return kNames[static_cast<size_t>(a)]; }
std::string_view conv_algorithm_description(ConvAlgorithm a) { return kDescriptions[static_cast<size_t>(a)]; }

bool is_winograd(ConvAlgorithm a) { return a == ConvAlgorithm::kWinogradAvx2 || a == ConvAlgorithm::kOnednnWinograd; }

bool runs_own_direct_kernel(ConvAlgorithm a) {
  switch (a) {
    case ConvAlgorithm::kWinogradAvx2:
    case ConvAlgorithm::kDirectAvx2:
    case ConvAlgorithm::kPatchAvx2:
    case ConvAlgorithm::kNarrowAvx512:
    case ConvAlgorithm::kDirectAvx512:
    case ConvAlgorithm::kPatchAvx512:
    case ConvAlgorithm::kRows3x3Avx512:
      return true;
    default:
      return false;
  }
}

bool is_onednn(ConvAlgorithm a) {
  return a == ConvAlgorithm::kOnednn || a == ConvAlgorithm::kOnednnWinograd || a == ConvAlgorithm::kOnednnPaddedCout ||
         a == ConvAlgorithm::kOnednnF32Rows;
}

namespace {
Reason verdict(const Candidate& c, const Problem& problem, const Device& device, const ConvTuning& t) {
  const Reason r = c.applies(problem, device, t);
  if (r && !r.tuned) return r;
  if (runs_own_direct_kernel(c.algorithm))
    if (const Reason stride = rows_with_one_stride(problem, device)) return stride;
  return r;
}
}  // namespace

ConvSelection select_conv_algorithm(const Problem& problem, const Device& device, bool explain) {
  const ConvTuning& t = conv_tuning(kernel_isa());
  ConvSelection s;
  for (const Candidate& c : kCandidates) {
    const Reason r = verdict(c, problem, device, t);
    if (!r) {
      s.algorithm = c.algorithm;
      return s;
    }
    if (explain) s.declined.push_back({c.algorithm, r.text, r.tuned});
  }
  return s;  // unreachable: the last candidate always applies
}

std::vector<ConvAlgorithm> runnable_conv_algorithms(const Problem& problem, const Device& device) {
  const ConvTuning& t = conv_tuning(kernel_isa());
  std::vector<ConvAlgorithm> out{select_conv_algorithm(problem, device).algorithm};
  for (const Candidate& c : kCandidates) {
    const Reason r = verdict(c, problem, device, t);
    if ((!r || r.tuned) && c.algorithm != out.front()) out.push_back(c.algorithm);
  }
  return out;
}

StatusOr<ConvSelection> select_named_conv_algorithm(const Problem& problem, const Device& device,
                                                    std::string_view name) {
  const std::optional<ConvAlgorithm> a = parse_conv_algorithm(name);
  if (!a) {
    std::string names;
    for (std::string_view n : kNames) names += fmt::format("{}{}", names.empty() ? "" : ", ", n);
    return invalid_argument_error("{}: unknown conv algorithm '{}'; expected one of: {}", problem.g.descriptor, name,
                                  names);
  }
  const Candidate& c = kCandidates[static_cast<size_t>(*a)];
  const Reason r = verdict(c, problem, device, conv_tuning(kernel_isa()));
  if (r && !r.tuned) {
    std::string runnable;
    for (ConvAlgorithm x : runnable_conv_algorithms(problem, device))
      runnable += fmt::format("{}{}", runnable.empty() ? "" : ", ", conv_algorithm_name(x));
    return invalid_argument_error("{}: conv algorithm '{}' cannot run this conv ({}); the ones that can: {}",
                                  problem.g.descriptor, name, r.text, runnable);
  }
  ConvSelection s;
  s.algorithm = *a;
  s.forced = true;
  return s;
}

std::optional<ConvAlgorithm> parse_conv_algorithm(std::string_view name) {
  for (size_t i = 0; i < std::size(kNames); ++i)
    if (kNames[i] == name) return static_cast<ConvAlgorithm>(i);
  return std::nullopt;
}

std::string explain(const ConvSelection& s) {
  std::string out(conv_algorithm_name(s.algorithm));
  if (s.forced) out += " (Conv2dConfig::algorithm)";
  for (const ConvDecline& d : s.declined)
    out += fmt::format("\n  declined {}: {}{}", conv_algorithm_name(d.algorithm), d.reason, d.tuned ? " (tuned)" : "");
  return out;
}

}  // namespace tessera::conv
