// The emulated Wormhole matrix engine (matrix_engine.h). Written by hand:
// no library computes with these truncated multiplies and per-add
// destination rounding. The inner loop (one activation against a row of
// weights) is plain C++ the compiler vectorizes.
#include "tessera/ops/matrix_engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>

#include "matrix_engine_internal.h"
#include "op_common.h"
#include "tessera/base/cpu_features.h"
#include "tessera/numerics/bfloat16.h"
#include "tessera/tensor/access.h"

namespace tessera {

int fidelity_phases(MathFidelity f) {
  switch (f) {
    case MathFidelity::LoFi:
      return 1;
    case MathFidelity::HiFi2:
      return 2;
    case MathFidelity::HiFi3:
      return 3;
    case MathFidelity::HiFi4:
      return 4;
  }
  return 4;
}

namespace {

float masked(float x, uint32_t mask) { return std::bit_cast<float>(std::bit_cast<uint32_t>(x) & mask); }

float to_src(float x, uint32_t keep) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & 0x7f800000u) == 0) return std::bit_cast<float>(u & 0x80000000u);  // zero, denormal: flushed
  if ((u & 0x7f800000u) == 0x7f800000u) return x;                            // inf, NaN
  return masked(x, keep);
}

float part(float x, bool low, uint32_t high_mask) {
  if (!std::isfinite(x)) return low ? 0.0f : x;
  const float hi = masked(x, high_mask);
  return low ? x - hi : hi;
}

constexpr uint32_t kSrcAHigh = 0xfff80000u;  // sign, exponent, hidden bit + 4 mantissa bits
constexpr uint32_t kSrcBHigh = 0xfffe0000u;  // ... + 6 mantissa bits

}  // namespace

float to_srca(float x) { return to_src(x, 0xffffc000u); }
float to_srcb(float x) { return to_src(x, 0xffffe000u); }
float srca_part(float v, bool low) { return part(v, low, kSrcAHigh); }
float srcb_part(float v, bool low) { return part(v, low, kSrcBHigh); }

float matrix_engine_dot(const float* b, const float* a, size_t k, MathFidelity fidelity, bool fp32_dest_acc) {
  const int phases = fidelity_phases(fidelity);
  float dst = 0.0f;
  for (size_t tile = 0; tile < k; tile += 32)
    for (int p = 0; p < phases; ++p)
      for (size_t half = tile; half < std::min(tile + 32, k); half += 16) {
        float partial = 0.0f;
        for (size_t i = half; i < std::min(half + 16, k); ++i)
          partial += srcb_part(to_srcb(b[i]), p & 2) * srca_part(to_srca(a[i]), p & 1);
        dst += partial;
        if (!fp32_dest_acc) dst = round_to_bfloat16(dst);
      }
  return dst;
}

// ---------------------------------------------------------------- the op

struct MatrixEngineOp::Plan {
  // Geometry: convs gather taps from NHWC rows; a matmul reads its row.
  enum class Kind : uint8_t { kConv, kConvTranspose, kMatmul } kind = Kind::kMatmul;
  uint32_t batch = 1, in_h = 1, in_w = 1, in_c = 0, out_h = 1, out_w = 1, out_c = 0, groups = 1;
  uint32_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  uint32_t cin_g = 0, cout_g = 0, taps = 1, k = 0;  // k = taps * cin_g per group
  // Per group: weights as (k, cout_g) SrcA high and low parts.
  std::vector<float> w_hi, w_lo;
  std::vector<float> bias;  // per output channel, in the destination format
  std::optional<UnaryWithParam> activation;
  MatrixEngineConfig config;
  int phases = 4;
  // K cut into halves of 16 (channels of each tap padded to 16) within
  // tiles of 32: [begin, end) of each half, and the index of the first
  // half of each tile (then a sentinel).
  std::vector<std::pair<uint32_t, uint32_t>> halves;
  std::vector<uint32_t> tile_starts;
  std::string key;

  uint32_t in_rows() const { return kind == Kind::kMatmul ? batch : batch * in_h * in_w; }
  uint32_t out_rows() const { return kind == Kind::kMatmul ? batch : batch * out_h * out_w; }
  float dest(float v) const { return config.fp32_dest_acc_en ? v : round_to_bfloat16(v); }

  void cut_k() {
    const uint32_t cpad = kind == Kind::kMatmul ? cin_g : (cin_g + 15) / 16 * 16;
    uint32_t last_tile = UINT32_MAX;
    for (uint32_t t = 0; t < taps; ++t)
      for (uint32_t c = 0; c < cin_g; c += 16) {
        const uint32_t pos = t * cpad + c, tile = pos / 32;
        if (tile != last_tile) tile_starts.push_back(static_cast<uint32_t>(halves.size())), last_tile = tile;
        halves.emplace_back(t * cin_g + c, t * cin_g + std::min(c + 16, cin_g));
      }
    tile_starts.push_back(static_cast<uint32_t>(halves.size()));
  }
  void split_weights(const std::vector<float>& w_gkn) {  // (group, k, cout_g) values
    w_hi.resize(w_gkn.size());
    w_lo.resize(w_gkn.size());
    for (size_t i = 0; i < w_gkn.size(); ++i) {
      const float s = to_srca(w_gkn[i]);
      w_hi[i] = srca_part(s, false), w_lo[i] = srca_part(s, true);
    }
  }
};

namespace {

struct Args {
  const MatrixEngineOp::Plan* plan;
  TensorAccess in, out, res;
  bool has_residual;
  UnaryWithParam res_act;
};

const float* row_of(const TensorAccess& a, uint32_t r, std::vector<float>& copy) {
  uint32_t run = 0;
  const std::byte* p = a.unit(r, 0, &run);
  if (run >= a.cols) return reinterpret_cast<const float*>(p);
  copy.resize(a.cols);
  for (uint32_t c = 0; c < a.cols;) {
    p = a.unit(r, c, &run);
    run = std::min(run, a.cols - c);
    std::memcpy(copy.data() + c, p, size_t{run} * 4);
    c += run;
  }
  return copy.data();
}

void write_row(const TensorAccess& a, uint32_t r, const float* v) {
  for (uint32_t c = 0; c < a.cols;) {
    uint32_t run = 0;
    std::byte* p = a.unit(r, c, &run);
    run = std::min(run, a.cols - c);
    std::memcpy(p, v + c, size_t{run} * 4);
    c += run;
  }
}

// partial[j] += b[k] * w[k * N + j] over a half of K: the ISA's loop
// (matrix_engine_internal.h), or this one.
void accumulate(const float* b, const float* w, uint32_t k0, uint32_t k1, uint32_t n, float* partial) {
  if (avx512_kernels_enabled()) return avx512::engine_accumulate(b, w, k0, k1, n, partial);
  if (kernel_isa() == KernelIsa::kAvx2) return avx2::engine_accumulate(b, w, k0, k1, n, partial);
  for (uint32_t k = k0; k < k1; ++k) {
    const float bk = b[k];
    const float* wk = w + size_t{k} * n;
    for (uint32_t j = 0; j < n; ++j) partial[j] += bk * wk[j];
  }
}

// One output row: every group's K gathered into SrcB parts, then the
// engine's phases over the tiles of K, then the epilogue.
void compute_row(const Args& args, uint32_t r, std::vector<float>& scratch) {
  const MatrixEngineOp::Plan& p = *args.plan;
  using Kind = MatrixEngineOp::Plan::Kind;
  const uint32_t K = p.k, N = p.cout_g;
  scratch.resize(size_t{2} * K + 2 * size_t{N} + size_t{p.out_c});
  float *b_hi = scratch.data(), *b_lo = b_hi + K, *partial = b_lo + K, *dst = partial + N, *out = dst + N;
  thread_local std::vector<float> tmp;  // a row that spans pages
  const uint32_t n = r / (p.out_h * p.out_w), oy = (r / p.out_w) % p.out_h, ox = r % p.out_w;
  for (uint32_t g = 0; g < p.groups; ++g) {
    std::fill(b_hi, b_hi + K, 0.0f);
    std::fill(b_lo, b_lo + K, 0.0f);
    for (uint32_t t = 0; t < p.taps; ++t) {
      uint32_t ty = t / p.kw, tx = t % p.kw;
      int64_t iy = 0, ix = 0;
      if (p.kind == Kind::kMatmul) {
        iy = ix = 0;
      } else if (p.kind == Kind::kConv) {
        iy = int64_t{oy} * p.sh - p.ph + int64_t{ty} * p.dh;
        ix = int64_t{ox} * p.sw - p.pw + int64_t{tx} * p.dw;
      } else {  // the equivalent conv's tap (ty, tx) is the kernel's (kh-1-ty, kw-1-tx)
        const int64_t y = int64_t{oy} + p.ph - int64_t{p.kh - 1 - ty} * p.dh;
        const int64_t x = int64_t{ox} + p.pw - int64_t{p.kw - 1 - tx} * p.dw;
        if (y < 0 || x < 0 || y % p.sh || x % p.sw) continue;
        iy = y / p.sh, ix = x / p.sw;
      }
      if (iy < 0 || ix < 0 || iy >= p.in_h || ix >= p.in_w) continue;
      const uint32_t in_row =
          p.kind == Kind::kMatmul ? r : (n * p.in_h + static_cast<uint32_t>(iy)) * p.in_w + static_cast<uint32_t>(ix);
      const float* x = row_of(args.in, in_row, tmp);
      for (uint32_t c = 0; c < p.cin_g; ++c) {
        const float s = to_srcb(x[g * p.cin_g + c]);
        b_hi[t * p.cin_g + c] = srcb_part(s, false), b_lo[t * p.cin_g + c] = srcb_part(s, true);
      }
    }
    const float* w_hi = p.w_hi.data() + size_t{g} * K * N;
    const float* w_lo = p.w_lo.data() + size_t{g} * K * N;
    std::fill(dst, dst + N, 0.0f);
    for (size_t ti = 0; ti + 1 < p.tile_starts.size(); ++ti)
      for (int ph = 0; ph < p.phases; ++ph) {
        const float* b = (ph & 2) ? b_lo : b_hi;
        const float* w = (ph & 1) ? w_lo : w_hi;
        for (uint32_t h = p.tile_starts[ti]; h < p.tile_starts[ti + 1]; ++h) {
          std::fill(partial, partial + N, 0.0f);
          accumulate(b, w, p.halves[h].first, p.halves[h].second, N, partial);
          if (p.config.fp32_dest_acc_en)
            for (uint32_t j = 0; j < N; ++j) dst[j] += partial[j];
          else
            for (uint32_t j = 0; j < N; ++j) dst[j] = round_to_bfloat16(dst[j] + partial[j]);
        }
      }
    for (uint32_t j = 0; j < N; ++j) {
      const uint32_t co = g * N + j;
      float v = p.dest(dst[j] + p.bias[co]);
      if (p.activation) v = p.dest(static_cast<float>(apply_activation(*p.activation, v)));
      out[co] = v;
    }
  }
  if (args.has_residual) {
    const float* res = row_of(args.res, r, tmp);
    for (uint32_t co = 0; co < p.out_c; ++co)
      out[co] = static_cast<float>(apply_activation(args.res_act, static_cast<double>(out[co] + res[co])));
  }
  write_row(args.out, r, out);
}

Status engine_kernel(const void* raw, uint32_t begin, uint32_t end) {
  const Args& args = *static_cast<const Args*>(raw);
  thread_local std::vector<float> scratch;
  for (uint32_t r = begin; r < end; ++r) compute_row(args, r, scratch);
  return ok_status();
}

// What every factory ends with: the weights, (group, k, cout_g), split into
// their SrcA parts, the bias in the destination format, the epilogue, K cut
// into halves and tiles, and a program key of its own.
std::shared_ptr<const MatrixEngineOp> finish(std::shared_ptr<MatrixEngineOp::Plan> plan,
                                             const std::vector<float>& w_gkn, const std::vector<float>& bias,
                                             std::optional<UnaryWithParam> activation, const MatrixEngineConfig& config,
                                             std::string_view op) {
  static std::atomic<uint64_t> next_id{1};
  MatrixEngineOp::Plan& e = *plan;
  e.config = config, e.phases = fidelity_phases(config.math_fidelity);
  e.split_weights(w_gkn);
  e.bias.assign(e.out_c, 0.0f);
  for (uint32_t i = 0; i < e.out_c && i < bias.size(); ++i) e.bias[i] = e.dest(bias[i]);
  if (activation && !activation->is_identity()) e.activation = activation;
  e.cut_k();
  e.key = fmt::format("matrix_engine_{}#{}:{}:{}", op, next_id++, math_fidelity_name(config.math_fidelity),
                      config.fp32_dest_acc_en ? "fp32dest" : "bf16dest");
  return std::make_shared<const MatrixEngineOp>(std::move(plan));
}

}  // namespace

StatusOr<std::shared_ptr<const MatrixEngineOp>> MatrixEngineOp::conv2d(const Conv2dParams& p,
                                                                       const std::vector<float>& weights,
                                                                       const std::vector<float>& bias,
                                                                       const MatrixEngineConfig& config) {
  TS_RETURN_IF_ERROR(p.validate());
  auto plan = std::make_shared<Plan>();
  Plan& e = *plan;
  e.kind = Plan::Kind::kConv;
  e.batch = p.batch_size, e.in_h = p.input_height, e.in_w = p.input_width, e.in_c = p.in_channels;
  e.out_h = p.output_height(), e.out_w = p.output_width(), e.out_c = p.out_channels, e.groups = p.groups;
  e.kh = p.kernel_size[0], e.kw = p.kernel_size[1], e.sh = p.stride[0], e.sw = p.stride[1];
  e.ph = p.padding[0], e.pw = p.padding[2], e.dh = p.dilation[0], e.dw = p.dilation[1];
  e.cin_g = e.in_c / e.groups, e.cout_g = e.out_c / e.groups, e.taps = e.kh * e.kw, e.k = e.taps * e.cin_g;
  if (weights.size() != size_t{e.out_c} * e.cin_g * e.taps)
    return invalid_argument_error("matrix engine conv: expected {} weights, found {}",
                                  size_t{e.out_c} * e.cin_g * e.taps, weights.size());
  std::vector<float> w(weights.size());
  for (uint32_t g = 0; g < e.groups; ++g)
    for (uint32_t j = 0; j < e.cout_g; ++j)
      for (uint32_t c = 0; c < e.cin_g; ++c)
        for (uint32_t t = 0; t < e.taps; ++t)
          w[(size_t{g} * e.k + t * e.cin_g + c) * e.cout_g + j] =
              weights[((size_t{g} * e.cout_g + j) * e.cin_g + c) * e.taps + t];
  return finish(std::move(plan), w, bias, p.activation, config, "conv2d");
}

StatusOr<std::shared_ptr<const MatrixEngineOp>> MatrixEngineOp::conv_transpose2d(
    uint32_t batch, uint32_t in_h, uint32_t in_w, uint32_t in_c, uint32_t out_h, uint32_t out_w, uint32_t out_c,
    uint32_t groups, std::array<uint32_t, 2> kernel, std::array<uint32_t, 2> stride, std::array<uint32_t, 2> pad,
    std::array<uint32_t, 2> dilation, const std::vector<float>& weights, const std::vector<float>& bias,
    std::optional<UnaryWithParam> activation, const MatrixEngineConfig& config) {
  if (!groups || in_c % groups || out_c % groups || !stride[0] || !stride[1] || !dilation[0] || !dilation[1])
    return invalid_argument_error("matrix engine conv_transpose2d: channels {} / {}, groups {}, stride, dilation", in_c,
                                  out_c, groups);
  auto plan = std::make_shared<Plan>();
  Plan& e = *plan;
  e.kind = Plan::Kind::kConvTranspose;
  e.batch = batch, e.in_h = in_h, e.in_w = in_w, e.in_c = in_c, e.out_h = out_h, e.out_w = out_w, e.out_c = out_c;
  e.groups = groups, e.kh = kernel[0], e.kw = kernel[1], e.sh = stride[0], e.sw = stride[1];
  e.ph = pad[0], e.pw = pad[1], e.dh = dilation[0], e.dw = dilation[1];
  e.cin_g = in_c / groups, e.cout_g = out_c / groups, e.taps = e.kh * e.kw, e.k = e.taps * e.cin_g;
  if (weights.size() != size_t{in_c} * e.cout_g * e.taps)
    return invalid_argument_error("matrix engine conv_transpose2d: expected {} weights, found {}",
                                  size_t{in_c} * e.cout_g * e.taps, weights.size());
  std::vector<float> w(weights.size());
  for (uint32_t g = 0; g < groups; ++g)
    for (uint32_t c = 0; c < e.cin_g; ++c)
      for (uint32_t j = 0; j < e.cout_g; ++j)
        for (uint32_t t = 0; t < e.taps; ++t) {
          const uint32_t ky = e.kh - 1 - t / e.kw, kx = e.kw - 1 - t % e.kw;  // the equivalent conv's tap t
          w[(size_t{g} * e.k + t * e.cin_g + c) * e.cout_g + j] =
              weights[((size_t{g} * e.cin_g + c) * e.cout_g + j) * e.taps + ky * e.kw + kx];
        }
  return finish(std::move(plan), w, bias, activation, config, "conv_transpose2d");
}

StatusOr<std::shared_ptr<const MatrixEngineOp>> MatrixEngineOp::matmul(uint32_t m, uint32_t k, uint32_t n,
                                                                       const std::vector<float>& weights,
                                                                       const std::vector<float>& bias,
                                                                       std::optional<UnaryWithParam> activation,
                                                                       const MatrixEngineConfig& config) {
  if (weights.size() != size_t{k} * n)
    return invalid_argument_error("matrix engine matmul: expected {}x{} weights, found {} values", k, n,
                                  weights.size());
  auto plan = std::make_shared<Plan>();
  Plan& e = *plan;
  e.kind = Plan::Kind::kMatmul;
  e.batch = m, e.in_c = k, e.out_c = n, e.cin_g = k, e.cout_g = n, e.k = k;
  return finish(std::move(plan), weights, bias, activation, config, "matmul");
}

StatusOr<Tensor> MatrixEngineOp::operator()(const Tensor& input, const std::optional<Tensor>& residual,
                                            const UnaryWithParam& residual_activation, uint8_t cq_id) const {
  const Plan& p = *plan_;
  const uint64_t want_in = uint64_t{p.in_rows()} * p.in_c, want_out = uint64_t{p.out_rows()} * p.out_c;
  if (!input.is_on_device() || input.dtype() != DataType::FLOAT32 || input.layout() != Layout::ROW_MAJOR ||
      input.shape().volume() != want_in)
    return invalid_argument_error(
        "matrix engine: expected a float32 ROW_MAJOR device input of {}x{} values, got {} {} {}", p.in_rows(), p.in_c,
        input.shape().to_string(), data_type_name(input.dtype()), layout_name(input.layout()));
  Device& device = *input.device();
  Args args{};
  args.plan = &p;
  TS_ASSIGN_OR_RETURN(Tensor in2d, input.view(Shape{p.in_rows(), p.in_c}));
  TS_ASSIGN_OR_RETURN(args.in, make_access(in2d));
  if (residual) {
    if (residual->dtype() != DataType::FLOAT32 || residual->shape().volume() != want_out)
      return invalid_argument_error("matrix engine: the residual must be float32 with {} values", want_out);
    TS_ASSIGN_OR_RETURN(Tensor r2d, residual->view(Shape{p.out_rows(), p.out_c}));
    TS_ASSIGN_OR_RETURN(args.res, make_access(r2d));
    args.has_residual = true;
    args.res_act = residual_activation;
  }
  TensorSpec spec{Shape{p.out_rows(), p.out_c}, DataType::FLOAT32, Layout::ROW_MAJOR, DRAM_MEMORY_CONFIG};
  TS_ASSIGN_OR_RETURN(Tensor out, allocate_tensor_on_device(spec, device));
  TS_ASSIGN_OR_RETURN(args.out, make_access(out));
  std::shared_ptr<void> keep = plan_;
  auto compile = [&]() -> StatusOr<Program> {
    Program prog;
    prog.key = p.key;
    prog.kernel_name = "matrix_engine_emulated";
    prog.kernel = engine_kernel;
    prog.num_tasks = p.out_rows();
    prog.grain = std::max<uint32_t>(1, p.out_rows() / 64);
    prog.plan = keep;
    return prog;
  };
  TS_ASSIGN_OR_RETURN(const Program* prog,
                      device.program_cache().get_or_compile(p.key, device.may_compile_programs(cq_id), compile));
  TS_RETURN_IF_ERROR(device.enqueue_program(cq_id, *prog, &args, sizeof(args)));
  return out;
}

}  // namespace tessera
