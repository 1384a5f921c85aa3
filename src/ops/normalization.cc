#include "tessera/ops/normalization.h"

#include <cmath>

#include "cpu/float_math.h"
#include "cpu/flush_denormals.h"
#include "cpu/rows.h"
#include "op_common.h"

namespace tessera {

namespace {

enum class NormKind : uint8_t { kSoftmax, kLogSoftmax, kLayerNorm, kGroupNorm, kBatchNorm };

struct Param {
  TensorAccess access;
  DataType type = DataType::FLOAT32;
  bool present = false;
};

struct NormArgs {
  TensorAccess in, out;
  DataType in_type, out_type;
  Param weight, bias, mean, var;
  NormKind kind;
  float eps;
  cpu::FloatMath math;
  uint32_t cols;              // last dim
  uint32_t hw, c, groups;     // group norm
};

constexpr uint32_t kChunk = kTileElements;
static_assert(kChunk % 16 == 0);

// Reads param values [c0, c0 + n) or fills `fallback`.
void read_param(const Param& p, uint32_t c0, uint32_t n, float* dst, float fallback) {
  if (p.present)
    cpu::read_row(p.access, p.type, 0, c0, n, dst);
  else
    std::fill_n(dst, n, fallback);
}

// Sums of x[i] and of (x[i] - mean)^2 in double over eight independent
// lanes: one serial sum waits on each add's latency (a 197-wide softmax row
// took 1 ns per element on the Zen 5 VM); the lanes vectorize and overlap.
double sum_of(const float* x, uint32_t n) {
  double s[8] = {};
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (uint32_t j = 0; j < 8; ++j) s[j] += x[i + j];
  for (; i < n; ++i) s[i % 8] += x[i];
  return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}
double sum_of_squares(const float* x, uint32_t n, double mean) {
  double s[8] = {};
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (uint32_t j = 0; j < 8; ++j) s[j] += (x[i + j] - mean) * (x[i + j] - mean);
  for (; i < n; ++i) s[i % 8] += (x[i] - mean) * (x[i] - mean);
  return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

void softmax_row(const NormArgs& a, uint32_t r) {
  alignas(64) float x[kChunk];
  const UnaryWithParam exp{UnaryOpType::EXP};
  if (a.cols <= kChunk) {  // the row stays in x: read once, exp once
    const uint32_t n = a.cols;
    cpu::read_row(a.in, a.in_type, r, 0, n, x);
    if (a.math.softmax_row) {  // (x has room for n rounded up to 16: kChunk is a multiple)
      a.math.softmax_row(x, n, a.kind == NormKind::kLogSoftmax);
      cpu::write_row(a.out, a.out_type, r, 0, n, x);
      return;
    }
    float m = -INFINITY;
    for (uint32_t i = 0; i < n; ++i) m = std::isnan(x[i]) || x[i] > m ? x[i] : m;
    for (uint32_t i = 0; i < n; ++i) x[i] -= m;
    if (a.kind == NormKind::kLogSoftmax) {
      alignas(64) float e[kChunk];
      std::copy_n(x, n, e);
      a.math.unary(exp, e, n);
      const auto log_sum = static_cast<float>(std::log(sum_of(e, n)));
      for (uint32_t i = 0; i < n; ++i) x[i] -= log_sum;
    } else {
      a.math.unary(exp, x, n);
      const auto inv = static_cast<float>(1.0 / sum_of(x, n));
      for (uint32_t i = 0; i < n; ++i) x[i] *= inv;
    }
    cpu::write_row(a.out, a.out_type, r, 0, n, x);
    return;
  }
  float m = -INFINITY;
  for (uint32_t c0 = 0; c0 < a.cols; c0 += kChunk) {
    const uint32_t n = std::min(kChunk, a.cols - c0);
    cpu::read_row(a.in, a.in_type, r, c0, n, x);
    for (uint32_t i = 0; i < n; ++i) m = std::isnan(x[i]) || x[i] > m ? x[i] : m;
  }
  double sum = 0;
  for (uint32_t c0 = 0; c0 < a.cols; c0 += kChunk) {
    const uint32_t n = std::min(kChunk, a.cols - c0);
    cpu::read_row(a.in, a.in_type, r, c0, n, x);
    for (uint32_t i = 0; i < n; ++i) x[i] -= m;
    a.math.unary(exp, x, n);
    sum += sum_of(x, n);
  }
  const float inv = static_cast<float>(1.0 / sum), log_sum = static_cast<float>(std::log(sum));
  for (uint32_t c0 = 0; c0 < a.cols; c0 += kChunk) {
    const uint32_t n = std::min(kChunk, a.cols - c0);
    if (a.kind == NormKind::kLogSoftmax) {
      cpu::read_row(a.in, a.in_type, r, c0, n, x);
      for (uint32_t i = 0; i < n; ++i) x[i] = (x[i] - m) - log_sum;
      cpu::write_row(a.out, a.out_type, r, c0, n, x);
      continue;
    }
    cpu::read_row(a.in, a.in_type, r, c0, n, x);
    for (uint32_t i = 0; i < n; ++i) x[i] -= m;
    a.math.unary(exp, x, n);
    for (uint32_t i = 0; i < n; ++i) x[i] *= inv;
    cpu::write_row(a.out, a.out_type, r, c0, n, x);
  }
}

void layer_norm_row(const NormArgs& a, uint32_t r) {
  alignas(64) float x[kChunk], w[kChunk], b[kChunk];
  double sum = 0, sq = 0;
  for (uint32_t c0 = 0; c0 < a.cols; c0 += kChunk) {
    const uint32_t n = std::min(kChunk, a.cols - c0);
    cpu::read_row(a.in, a.in_type, r, c0, n, x);
    sum += sum_of(x, n);
  }
  const double mean = sum / a.cols;
  for (uint32_t c0 = 0; c0 < a.cols; c0 += kChunk) {
    const uint32_t n = std::min(kChunk, a.cols - c0);
    cpu::read_row(a.in, a.in_type, r, c0, n, x);
    sq += sum_of_squares(x, n, mean);
  }
  const auto rstd = static_cast<float>(1.0 / std::sqrt(sq / a.cols + a.eps));
  const auto fmean = static_cast<float>(mean);
  for (uint32_t c0 = 0; c0 < a.cols; c0 += kChunk) {
    const uint32_t n = std::min(kChunk, a.cols - c0);
    cpu::read_row(a.in, a.in_type, r, c0, n, x);
    read_param(a.weight, c0, n, w, 1.0f);
    read_param(a.bias, c0, n, b, 0.0f);
    for (uint32_t i = 0; i < n; ++i) x[i] = (x[i] - fmean) * rstd * w[i] + b[i];
    cpu::write_row(a.out, a.out_type, r, c0, n, x);
  }
}

Status row_kernel(const void* raw, uint32_t begin, uint32_t end) {
  const auto& a = *static_cast<const NormArgs*>(raw);
  if (a.kind == NormKind::kLayerNorm && a.math.layer_norm_row && a.cols <= kChunk) {  // parameters read once
    alignas(64) float x[kChunk], w[kChunk], b[kChunk];
    read_param(a.weight, 0, a.cols, w, 1.0f);
    read_param(a.bias, 0, a.cols, b, 0.0f);
    for (uint32_t r = begin; r < end; ++r) {
      cpu::read_row(a.in, a.in_type, r, 0, a.cols, x);
      a.math.layer_norm_row(x, a.cols, w, b, a.eps);
      cpu::write_row(a.out, a.out_type, r, 0, a.cols, x);
    }
    return ok_status();
  }
  if (a.kind == NormKind::kLayerNorm) {
    for (uint32_t r = begin; r < end; ++r) layer_norm_row(a, r);
    return ok_status();
  }
  // exp(x - max) below the smallest normal float is 0 (normalization.h):
  // masked attention scores otherwise make denormals, slow on Intel cores.
  const cpu::ScopedFlushDenormals flush;
  for (uint32_t r = begin; r < end; ++r) softmax_row(a, r);
  return ok_status();
}

// One task = one (image, group): C / groups channels of every pixel.
Status group_norm_kernel(const void* raw, uint32_t begin, uint32_t end) {
  const auto& a = *static_cast<const NormArgs*>(raw);
  const uint32_t cg = a.c / a.groups;
  alignas(64) float x[kChunk], w[kChunk], b[kChunk];
  for (uint32_t t = begin; t < end; ++t) {
    const uint32_t img = t / a.groups, c_begin = (t % a.groups) * cg;
    double sum = 0, sq = 0;
    auto for_each_chunk = [&](auto body) {
      for (uint32_t p = 0; p < a.hw; ++p)
        for (uint32_t c0 = 0; c0 < cg; c0 += kChunk) body(img * a.hw + p, c_begin + c0, std::min(kChunk, cg - c0));
    };
    for_each_chunk([&](uint32_t r, uint32_t c0, uint32_t n) {
      cpu::read_row(a.in, a.in_type, r, c0, n, x);
      sum += sum_of(x, n);
    });
    const double count = static_cast<double>(a.hw) * cg, mean = sum / count;
    for_each_chunk([&](uint32_t r, uint32_t c0, uint32_t n) {
      cpu::read_row(a.in, a.in_type, r, c0, n, x);
      sq += sum_of_squares(x, n, mean);
    });
    const auto rstd = static_cast<float>(1.0 / std::sqrt(sq / count + a.eps));
    const auto fmean = static_cast<float>(mean);
    for_each_chunk([&](uint32_t r, uint32_t c0, uint32_t n) {
      cpu::read_row(a.in, a.in_type, r, c0, n, x);
      read_param(a.weight, c0, n, w, 1.0f);
      read_param(a.bias, c0, n, b, 0.0f);
      for (uint32_t i = 0; i < n; ++i) x[i] = (x[i] - fmean) * rstd * w[i] + b[i];
      cpu::write_row(a.out, a.out_type, r, c0, n, x);
    });
  }
  return ok_status();
}

// Channel chunks outer, so the per-channel scale and shift are computed once
// per task and chunk.
Status batch_norm_kernel(const void* raw, uint32_t begin, uint32_t end) {
  const auto& a = *static_cast<const NormArgs*>(raw);
  alignas(64) float x[kChunk], scale[kChunk], shift[kChunk], m[kChunk], v[kChunk];
  for (uint32_t c0 = 0; c0 < a.cols; c0 += kChunk) {
    const uint32_t n = std::min(kChunk, a.cols - c0);
    read_param(a.mean, c0, n, m, 0.0f);
    read_param(a.var, c0, n, v, 1.0f);
    read_param(a.weight, c0, n, scale, 1.0f);
    read_param(a.bias, c0, n, shift, 0.0f);
    for (uint32_t i = 0; i < n; ++i) {
      scale[i] = static_cast<float>(scale[i] / std::sqrt(double{v[i]} + a.eps));
      shift[i] -= m[i] * scale[i];
    }
    for (uint32_t r = begin; r < end; ++r) {
      cpu::read_row(a.in, a.in_type, r, c0, n, x);
      for (uint32_t i = 0; i < n; ++i) x[i] = x[i] * scale[i] + shift[i];
      cpu::write_row(a.out, a.out_type, r, c0, n, x);
    }
  }
  return ok_status();
}

Status check_input(const Tensor& t, std::string_view op) {
  TS_RETURN_IF_ERROR(ops::require_device_tensor(t, op));
  if (t.layout() != Layout::ROW_MAJOR)
    return unimplemented_error("{}: expected a ROW_MAJOR input, found {}; untilize it first", op, t.spec().to_string());
  if (t.dtype() != DataType::FLOAT32 && t.dtype() != DataType::BFLOAT16)
    return unimplemented_error("{}: expected a float32 or bfloat16 input, found {}", op, data_type_name(t.dtype()));
  return ok_status();
}

Status bind_param(const std::optional<Tensor>& t, std::string_view op, std::string_view name, uint32_t c,
                  Param* p) {
  if (!t) return ok_status();
  TS_RETURN_IF_ERROR(ops::require_device_tensor(*t, op, name));
  if (t->layout() != Layout::ROW_MAJOR || t->shape().volume() != c || t->shape()[-1] != c ||
      (t->dtype() != DataType::FLOAT32 && t->dtype() != DataType::BFLOAT16))
    return invalid_argument_error("{}: expected {} to be a ROW_MAJOR float32 or bfloat16 tensor of {} values ((C) or "
                                  "(1,1,1,C)), found {}",
                                  op, name, c, t->spec().to_string());
  TS_ASSIGN_OR_RETURN(p->access, make_access(*t));
  p->type = t->dtype();
  p->present = true;
  return ok_status();
}

StatusOr<Tensor> run_norm(std::string_view op, NormKind kind, const Tensor& input, NormArgs& args, uint32_t tasks,
                          KernelFn kernel, uint8_t cq_id, const std::string& attrs) {
  Device& device = *input.device();
  TS_ASSIGN_OR_RETURN(Tensor out, allocate_tensor_on_device(input.spec(), device));
  TS_ASSIGN_OR_RETURN(args.in, make_access(input));
  TS_ASSIGN_OR_RETURN(args.out, make_access(out));
  args.in_type = args.out_type = input.dtype();
  args.kind = kind;
  args.math = cpu::select_float_math();
  args.cols = input.shape()[-1];
  std::string key = fmt::format("{}:{}:{}:{}{}{}{}{}", op, attrs, input.spec().to_string(), args.math.isa,
                                args.weight.present ? ":w" : "", args.bias.present ? ":b" : "",
                                args.mean.present ? short_dtype_name(args.mean.type) : "",
                                args.var.present ? short_dtype_name(args.var.type) : "");
  auto compile = [&]() -> StatusOr<Program> {
    Program prog;
    prog.kernel = kernel;
    prog.kernel_name = fmt::format("{}_{}__{}", short_dtype_name(input.dtype()), op, args.math.isa);
    prog.num_tasks = tasks;
    prog.grain = kind == NormKind::kGroupNorm ? 1
                                              : ops::default_grain(device, tasks, input.spec().storage_bytes() * 2,
                                                                   ops::kMinChunkBytesStreaming);
    return prog;
  };
  TS_RETURN_IF_ERROR(ops::launch(device, cq_id, key, compile, args));
  return out;
}

uint32_t rows_of(const Tensor& t) { return static_cast<uint32_t>(t.shape().volume() / t.shape()[-1]); }

}  // namespace

StatusOr<Tensor> softmax(const Tensor& input, int dim, uint8_t cq_id) {
  TS_RETURN_IF_ERROR(check_input(input, "softmax"));
  const int rank = input.shape().rank();
  if (dim != -1 && dim != rank - 1)
    return unimplemented_error("softmax: only the last dim is supported, found dim {} of rank {}; permute first", dim,
                               rank);
  NormArgs args{};
  return run_norm("softmax", NormKind::kSoftmax, input, args, rows_of(input), row_kernel, cq_id, "");
}

StatusOr<Tensor> log_softmax(const Tensor& input, int dim, uint8_t cq_id) {
  TS_RETURN_IF_ERROR(check_input(input, "log_softmax"));
  const int rank = input.shape().rank();
  if (dim != -1 && dim != rank - 1)
    return unimplemented_error("log_softmax: only the last dim is supported, found dim {} of rank {}; permute first",
                               dim, rank);
  NormArgs args{};
  return run_norm("log_softmax", NormKind::kLogSoftmax, input, args, rows_of(input), row_kernel, cq_id, "");
}

StatusOr<Tensor> layer_norm(const Tensor& input, const NormParams& p) {
  TS_RETURN_IF_ERROR(check_input(input, "layer_norm"));
  NormArgs args{};
  args.eps = p.epsilon;
  TS_RETURN_IF_ERROR(bind_param(p.weight, "layer_norm", "weight", input.shape()[-1], &args.weight));
  TS_RETURN_IF_ERROR(bind_param(p.bias, "layer_norm", "bias", input.shape()[-1], &args.bias));
  return run_norm("layer_norm", NormKind::kLayerNorm, input, args, rows_of(input), row_kernel, p.cq_id,
                  fmt::format("eps{}", p.epsilon));
}

StatusOr<Tensor> group_norm(const Tensor& input, uint32_t groups, const NormParams& p) {
  TS_RETURN_IF_ERROR(check_input(input, "group_norm"));
  const Shape& s = input.shape();
  if (s.rank() != 4)
    return invalid_argument_error("group_norm: expected an (N, H, W, C) or (N, 1, H*W, C) input, found {}",
                                  s.to_string());
  if (groups == 0 || s[3] % groups != 0)
    return invalid_argument_error("group_norm: {} channels do not split into {} groups", s[3], groups);
  NormArgs args{};
  args.eps = p.epsilon;
  args.hw = s[1] * s[2];
  args.c = s[3];
  args.groups = groups;
  TS_RETURN_IF_ERROR(bind_param(p.weight, "group_norm", "weight", s[3], &args.weight));
  TS_RETURN_IF_ERROR(bind_param(p.bias, "group_norm", "bias", s[3], &args.bias));
  return run_norm("group_norm", NormKind::kGroupNorm, input, args, s[0] * groups, group_norm_kernel, p.cq_id,
                  fmt::format("g{}eps{}", groups, p.epsilon));
}

StatusOr<Tensor> batch_norm(const Tensor& input, const Tensor& mean, const Tensor& var, const NormParams& p) {
  TS_RETURN_IF_ERROR(check_input(input, "batch_norm"));
  const uint32_t c = input.shape()[-1];
  NormArgs args{};
  args.eps = p.epsilon;
  TS_RETURN_IF_ERROR(bind_param(mean, "batch_norm", "running_mean", c, &args.mean));
  TS_RETURN_IF_ERROR(bind_param(var, "batch_norm", "running_var", c, &args.var));
  TS_RETURN_IF_ERROR(bind_param(p.weight, "batch_norm", "weight", c, &args.weight));
  TS_RETURN_IF_ERROR(bind_param(p.bias, "batch_norm", "bias", c, &args.bias));
  return run_norm("batch_norm", NormKind::kBatchNorm, input, args, rows_of(input), batch_norm_kernel, p.cq_id,
                  fmt::format("eps{}", p.epsilon));
}

}  // namespace tessera
