// Transposed convs whose kernel equals their stride (no padding, dilation or
// groups), like the UNet's upconvs: each input pixel maps onto its own
// kh x kw output patch. Three ways to run them: a batched matmul
// (kPatchMatmul), Tessera's patch kernels (kPatchAvx2 / kPatchAvx512, which
// run in direct.cc on the weights packed here), and on AMX a 1x1 conv and a
// permute (kAmxPatch1x1).
#include "launch.h"
#include "tessera/ops/conv_transpose2d.h"
#include "tessera/ops/data_movement.h"
#include "tessera/ops/manipulation.h"
#include "tessera/ops/matmul.h"

namespace tessera::conv {

// A transposed conv whose kernel equals its stride (no padding, dilation or
// groups), like the UNet's upconvs, is one batched matmul: output row
// y * s + ky of image n is input row y times the weight slice of ky,
// (W, Cin) x (Cin, kw * Cout), and the (N * H, kh, W, kw * Cout) result is
// byte for byte the (N, OH, OW, Cout) output. oneDNN's deconvolution runs
// these at 2-45% of peak (bench/RESULTS.md); the matmul does not
// (conv::ConvAlgorithm::kPatchMatmul and the patch kernels).

StatusOr<Conv2dResult> launch_patches(const Tensor& input, const PreparedConv2dWeights& w,
                                      const ConvTranspose2dParams& p, const Problem& pr, uint8_t cq_id) {
  if (pr.direct()) return launch_direct(input, w, pr, cq_id);
  const Geometry& g = pr.g;
  TS_ASSIGN_OR_RETURN(Tensor a, input.view(Shape{g.n * g.h, 1, g.w, g.cin}));
  // Float32 rows computed in bfloat16 (lowers_to_bf16): the matmul at LoFi,
  // against the bfloat16 weights prepared for it.
  std::optional<DeviceComputeKernelConfig> compute;
  if (pr.compute == DataType::BFLOAT16 && pr.input.dtype == DataType::FLOAT32)
    compute = DeviceComputeKernelConfig{.math_fidelity = MathFidelity::LoFi};
  TS_ASSIGN_OR_RETURN(Tensor y, linear(a, w.weight, w.bias,
                                       {.dtype = pr.output.dtype,
                                        .activation = p.activation,
                                        .memory_config = pr.output.memory_config,
                                        .compute_kernel_config = compute,
                                        .cq_id = cq_id}));
  Conv2dResult r;
  TS_ASSIGN_OR_RETURN(r.output, as_output_rows(y, g, cq_id));
  r.output_height = g.oh;
  r.output_width = g.ow;
  r.weights = w;
  return r;
}

StatusOr<Conv2dResult> patches_with_weights(const Tensor& input, const Tensor& weight,
                                            const std::optional<Tensor>& bias, const ConvTranspose2dParams& p,
                                            const Problem& pr, DataType weights_dtype, uint8_t cq_id) {
  const Geometry& g = pr.g;
  TS_ASSIGN_OR_RETURN(Tensor rounded, round_conv_transpose2d_weights(weight, p, weights_dtype, input.dtype()));
  TS_ASSIGN_OR_RETURN(const std::vector<float> bv, bias_values(bias, g));
  TS_ASSIGN_OR_RETURN(std::vector<float> v, rounded.to_vector());
  if (pr.direct()) {  // AVX2 kernel: (Cin, Cout, kh, kw) -> columns n = (ky * kw + kx) * Cout + co, [n / 16][Cin][16]
    const uint32_t cols = g.kh * g.kw * g.cout;
    const DirectPackedSize size = direct_packed_size(pr);
    std::vector<float> m(size.weight, 0.0f), b(size.bias, 0.0f);
    for (uint32_t n = 0; n < cols; ++n) {
      const uint32_t k = n / g.cout, co = n % g.cout;
      b[n] = bv[co];
      for (uint32_t ci = 0; ci < g.cin; ++ci)
        m[(uint64_t{n / 16} * g.cin + ci) * 16 + n % 16] = v[(uint64_t{ci} * g.cout + co) * g.kh * g.kw + k];
    }
    TS_ASSIGN_OR_RETURN(Tensor mh, Tensor::from_vector(m, Shape{static_cast<uint32_t>(m.size())}, DataType::FLOAT32));
    TS_ASSIGN_OR_RETURN(Tensor bh, Tensor::from_vector(b, Shape{static_cast<uint32_t>(b.size())}, DataType::FLOAT32));
    TS_ASSIGN_OR_RETURN(PreparedConv2dWeights w, upload_weights(pr.weights_key, mh, bh, *input.device(), cq_id));
    return launch_direct(input, w, pr, cq_id);
  }
  // (Cin, Cout, kh, kw) -> (1, kh, Cin, kw * Cout).
  const uint32_t row = g.kw * g.cout;
  std::vector<float> m(v.size());
  for (uint32_t ci = 0; ci < g.cin; ++ci)
    for (uint32_t co = 0; co < g.cout; ++co)
      for (uint32_t ky = 0; ky < g.kh; ++ky)
        for (uint32_t kx = 0; kx < g.kw; ++kx)
          m[(uint64_t{ky} * g.cin + ci) * row + kx * g.cout + co] =
              v[((uint64_t{ci} * g.cout + co) * g.kh + ky) * g.kw + kx];
  std::vector<float> b(row);
  for (uint32_t i = 0; i < row; ++i) b[i] = bv[i % g.cout];
  TS_ASSIGN_OR_RETURN(Tensor mh, Tensor::from_vector(m, Shape{1, g.kh, g.cin, row}, pr.compute));
  TS_ASSIGN_OR_RETURN(Tensor bh, Tensor::from_vector(b, Shape{row}, DataType::FLOAT32));
  TS_ASSIGN_OR_RETURN(PreparedConv2dWeights w, upload_weights(pr.weights_key, mh, bh, *input.device(), cq_id));
  return launch_patches(input, w, p, pr, cq_id);
}

namespace {

// The 1x1 convolution an AMX patch transpose runs (is_amx_patch): output
// channel (ky * kw + kx) * Cout + co of pixel (y, x) is output pixel
// (y * kh + ky, x * kw + kx), channel co. Its weights arrive rounded to the
// transposed conv's weights dtype, so it keeps them at the compute dtype
// (exact); its output is dense DRAM rows for the permute to read.
struct AmxPatchConv {
  Conv2dParams params;
  Conv2dConfig config;
};
AmxPatchConv amx_patch_conv(const ConvTranspose2dParams& p, const Conv2dConfig& config, DataType compute) {
  AmxPatchConv c;
  c.params.batch_size = p.batch_size;
  c.params.input_height = p.input_height;
  c.params.input_width = p.input_width;
  c.params.in_channels = p.in_channels;
  c.params.out_channels = p.kernel_size[0] * p.kernel_size[1] * p.out_channels;
  c.params.kernel_size = {1, 1};
  c.params.activation = p.activation;
  c.config = config;
  c.config.weights_dtype = compute;
  c.config.output_layout = Layout::ROW_MAJOR;
  c.config.output_memory_config = DRAM_MEMORY_CONFIG;
  c.config.shard_layout.reset();
  c.config.slice_config.reset();
  c.config.deallocate_activation = false;
  return c;
}

// The 1x1 conv's (N * H, W, kh, kw * Cout) result permuted to (N * H, kh, W,
// kw * Cout): byte for byte the (N, OH, OW, Cout) output, in the problem's
// output memory config.
StatusOr<Conv2dResult> place_patches(Conv2dResult r, const Problem& pr, uint8_t cq_id) {
  const Geometry& g = pr.g;
  TS_ASSIGN_OR_RETURN(Tensor grid, r.output.view(Shape{g.n * g.h, g.w, g.kh, g.kw * g.cout}));
  const int perm[] = {0, 2, 1, 3};
  TS_ASSIGN_OR_RETURN(Tensor placed, permute(grid, perm, {.memory_config = pr.output.memory_config, .cq_id = cq_id}));
  TS_ASSIGN_OR_RETURN(r.output, as_output_rows(placed, g, cq_id));
  r.output_height = g.oh;
  r.output_width = g.ow;
  return r;
}

}  // namespace

StatusOr<Conv2dResult> amx_patches_with_weights(const Tensor& input, const Tensor& weight,
                                                const std::optional<Tensor>& bias, const ConvTranspose2dParams& p,
                                                const Conv2dConfig& config, const Problem& pr, uint8_t cq_id) {
  const Geometry& g = pr.g;
  TS_ASSIGN_OR_RETURN(Tensor rounded, round_conv_transpose2d_weights(weight, p, config.weights_dtype, pr.compute));
  TS_ASSIGN_OR_RETURN(const std::vector<float> bv, bias_values(bias, g));
  TS_ASSIGN_OR_RETURN(const std::vector<float> v, rounded.to_vector());
  // (Cin, Cout, kh, kw) -> (kh * kw * Cout, Cin, 1, 1).
  const uint32_t taps = g.kh * g.kw, cols = taps * g.cout;
  std::vector<float> m(uint64_t{cols} * g.cin), b(cols);
  for (uint32_t ci = 0; ci < g.cin; ++ci)
    for (uint32_t co = 0; co < g.cout; ++co)
      for (uint32_t k = 0; k < taps; ++k)
        m[(uint64_t{k} * g.cout + co) * g.cin + ci] = v[(uint64_t{ci} * g.cout + co) * taps + k];
  for (uint32_t n = 0; n < cols; ++n) b[n] = bv[n % g.cout];
  TS_ASSIGN_OR_RETURN(Tensor mh, Tensor::from_vector(m, Shape{cols, g.cin, 1, 1}, DataType::FLOAT32));
  TS_ASSIGN_OR_RETURN(Tensor bh, Tensor::from_vector(b, Shape{cols}, DataType::FLOAT32));
  const AmxPatchConv c = amx_patch_conv(p, config, pr.compute);
  TS_ASSIGN_OR_RETURN(Conv2dResult r, conv_with_weights(input, mh, bh, c.params, c.config, cq_id));
  r.weights.key = pr.weights_key;  // the transposed conv's: conv_transpose2d takes them back
  return place_patches(std::move(r), pr, cq_id);
}

StatusOr<Conv2dResult> launch_amx_patches(const Tensor& input, const PreparedConv2dWeights& w,
                                          const ConvTranspose2dParams& p, const Conv2dConfig& config, const Problem& pr,
                                          uint8_t cq_id) {
  const AmxPatchConv c = amx_patch_conv(p, config, pr.compute);
  TS_ASSIGN_OR_RETURN(const Problem inner, make_problem(input, c.params, c.config));
  PreparedConv2dWeights wi = w;
  wi.key = inner.weights_key;
  TS_ASSIGN_OR_RETURN(Conv2dResult r, conv_with_prepared(input, wi, c.params, c.config, cq_id));
  r.weights = w;
  return place_patches(std::move(r), pr, cq_id);
}

}  // namespace tessera::conv
