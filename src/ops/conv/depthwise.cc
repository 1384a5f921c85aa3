// Depthwise convolutions (groups == in == out channels) on Tessera's own
// kernels (cpu/depthwise_kernels.h): kDepthwise.
#include <algorithm>

#include "../cpu/depthwise_kernels.h"
#include "../cpu/float_math.h"
#include "../op_common.h"
#include "launch.h"
#include "tessera/base/aligned.h"
#include "tessera/base/cpu_features.h"
#include "tuning.h"

namespace tessera::conv {

namespace {
const ConvTuning& tuning() { return conv_tuning(kernel_isa()); }

// The depthwise kernel's chunks of output rows, sized by the float32 values
// they read and write (the kernel computes in float32: bfloat16 rows halve
// the bytes, not the FMAs): four per worker from depthwise_many_chunks_bytes;
// under it one per worker at most, each of depthwise_chunk_bytes or more.
// Before, the reordering ops' 256 KB chunks of bytes left MobileNetV2's
// 7x7x960 in bfloat16 (188 KB) to one worker. Smaller chunks split each
// worker's rows: 14x14x384 in seven chunks of two rows took 0.044 ms over
// its four launches in the model, against 0.029 in two of seven (the
// rows a worker's row pairs share stay in its own cache).
uint32_t depthwise_grain(const Geometry& g, uint32_t threads) {
  const uint64_t rows = uint64_t{g.n} * g.oh;
  const uint64_t values = uint64_t{g.n} * (uint64_t{g.h} * g.w + uint64_t{g.oh} * g.ow) * g.cin;
  const uint64_t bytes = values * sizeof(float);
  const uint64_t chunks = bytes >= tuning().depthwise_many_chunks_bytes
                              ? 4 * uint64_t{threads}
                              : std::clamp<uint64_t>(bytes / tuning().depthwise_chunk_bytes, 1, threads);
  return static_cast<uint32_t>(div_up(rows, chunks));
}

}  // namespace

StatusOr<Conv2dResult> launch_depthwise(const Tensor& input, const PreparedConv2dWeights& w, const Problem& pr,
                                        uint8_t cq_id) {
  if (pr.output.layout != Layout::ROW_MAJOR || pr.input.layout != Layout::ROW_MAJOR)
    return internal_error("conv2d: the depthwise kernel reads and writes rows only");
  const Geometry& g = pr.g;
  Device& device = *input.device();
  // Weights from elsewhere (an image) are checked: the kernel reads this many.
  const uint64_t want = cpu::DepthwiseWeightsLayout(g.kh, g.kw, g.cin).size();
  if (w.weight.shape().volume() != want || w.weight.dtype() != DataType::FLOAT32 || w.bias.shape().volume() != g.cout ||
      w.bias.dtype() != DataType::FLOAT32)
    return failed_precondition_error("conv2d: the prepared weights hold {} and {}; the depthwise kernel reads {} and {} "
                                     "float32 values",
                                     w.weight.spec().to_string(), w.bias.spec().to_string(), want, g.cout);
  TS_ASSIGN_OR_RETURN(Tensor output, allocate_tensor_on_device(pr.output, device));
  cpu::DepthwiseArgs args{};
  TS_ASSIGN_OR_RETURN(args.src, make_access(input));
  TS_ASSIGN_OR_RETURN(args.dst, make_access(output));
  TS_ASSIGN_OR_RETURN(TensorAccess wa, make_access(w.weight));
  TS_ASSIGN_OR_RETURN(TensorAccess ba, make_access(w.bias));
  args.weights = reinterpret_cast<const float*>(wa.page(0));
  args.bias = reinterpret_cast<const float*>(ba.page(0));
  const cpu::DepthwiseWeightsLayout layout(g.kh, g.kw, g.cin);
  if (w.weight.shape().volume() == layout.size()) {
    args.weights_pairs = args.weights + layout.weights_pairs();
    args.bias_pairs = args.weights + layout.bias_pairs();
  }
  args.src_type = input.dtype();
  args.dst_type = pr.output.dtype;
  args.math = cpu::select_float_math();
  args.activation = g.activation;
  args.n = g.n, args.h = g.h, args.w = g.w, args.c = g.cin, args.oh = g.oh, args.ow = g.ow;
  args.kh = g.kh, args.kw = g.kw, args.sh = g.sh, args.sw = g.sw, args.dh = g.dh, args.dw = g.dw;
  args.pad_t = static_cast<uint32_t>(g.pad_t), args.pad_l = static_cast<uint32_t>(g.pad_l);
  auto compile = [&]() -> StatusOr<Program> {
    Program prog;
    const bool avx2 = kernel_isa() == KernelIsa::kAvx2;
    prog.kernel = avx2 ? cpu::avx2::depthwise_kernel : cpu::avx512::depthwise_kernel;
    prog.kernel_name = fmt::format("{}_depthwise2d__{}", short_dtype_name(input.dtype()), avx2 ? "avx2" : "avx512");
    prog.num_tasks = g.n * g.oh;
    prog.grain = depthwise_grain(g, device.workers().num_threads());
    return prog;
  };
  const std::string key = pr.key + ":" + std::string(kernel_isa_name(kernel_isa()));
  TS_RETURN_IF_ERROR(ops::launch(device, cq_id, key, compile, args));
  return Conv2dResult{std::move(output), g.oh, g.ow, w};
}

StatusOr<Conv2dResult> depthwise_with_weights(const Tensor& input, const Tensor& weight,
                                              const std::optional<Tensor>& bias, const Conv2dParams& p,
                                              const Problem& pr, DataType weights_dtype, uint8_t cq_id) {
  const Geometry& g = pr.g;
  TS_ASSIGN_OR_RETURN(Tensor rounded, round_conv2d_weights(weight, p, weights_dtype, input.dtype()));
  TS_ASSIGN_OR_RETURN(const std::vector<float> b, bias_values(bias, g));
  TS_ASSIGN_OR_RETURN(std::vector<float> v, rounded.to_vector());  // (C, 1, kh, kw)
  // One row: the kernel reads (kh * kw, C) densely, with no page padding
  // between taps; then the same and the bias in pairs order
  // (cpu::DepthwiseArgs::weights_pairs).
  const cpu::DepthwiseWeightsLayout layout(g.kh, g.kw, g.cin);
  std::vector<float> m(layout.size());
  cpu::pack_depthwise_weights(layout, v.data(), b.data(), m.data());
  TS_ASSIGN_OR_RETURN(Tensor mh, Tensor::from_vector(m, Shape{static_cast<uint32_t>(m.size())}, DataType::FLOAT32));
  TS_ASSIGN_OR_RETURN(Tensor bh, Tensor::from_vector(b, Shape{g.cout}, DataType::FLOAT32));
  TS_ASSIGN_OR_RETURN(PreparedConv2dWeights w, upload_weights(pr.weights_key, mh, bh, *input.device(), cq_id));
  return launch_depthwise(input, w, pr, cq_id);
}

}  // namespace tessera::conv
