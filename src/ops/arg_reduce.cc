#include "tessera/ops/arg_reduce.h"

#include <cmath>

#include "cpu/float_math.h"
#include "cpu/rows.h"
#include "op_common.h"

namespace tessera {

namespace {

struct ArgArgs {
  TensorAccess in, out;
  DataType in_type;
  uint32_t cols, out_cols;
  bool max, last;
  cpu::FloatMath math;
};

constexpr uint32_t kChunk = kTileElements;

// The index of the extreme of x[0, n) as arg_reduce.h defines it. The hot
// loop compares numbers only; a row holding a NaN (rare) is searched again
// for the NaN that wins.
template <bool kMax, bool kLast>
uint32_t extreme(const float* x, uint32_t n) {
  uint32_t best = 0;
  float b = x[0];
  bool nan = b != b;
  for (uint32_t i = 1; i < n; ++i) {
    const float v = x[i];
    nan |= v != v;
    if (kMax ? (kLast ? v >= b : v > b) : (kLast ? v <= b : v < b)) b = v, best = i;
  }
  if (nan) [[unlikely]] {
    if (kLast) {
      for (uint32_t i = n; i-- > 0;)
        if (std::isnan(x[i])) return i;
    }
    for (uint32_t i = 0; i < n; ++i)
      if (std::isnan(x[i])) return i;
  }
  return best;
}

// Writes indices of flat output positions [r0, r0 + n) (the output's rows
// are out_cols wide).
void write_flat(const ArgArgs& a, uint32_t r0, uint32_t n, const float* v) {
  while (n > 0) {
    const uint32_t row = r0 / a.out_cols, col = r0 % a.out_cols, k = std::min(n, a.out_cols - col);
    cpu::write_row(a.out, DataType::FLOAT32, row, col, k, v);
    r0 += k, n -= k, v += k;
  }
}

// Rows longer than a chunk go chunk by chunk, each chunk's winner against
// the best so far by the same rule.
template <bool kMax, bool kLast>
uint32_t extreme_chunked(const ArgArgs& a, uint32_t r, float* x) {
  uint32_t best = 0;
  float b = 0;
  for (uint32_t c0 = 0; c0 < a.cols; c0 += kChunk) {
    const uint32_t n = std::min(kChunk, a.cols - c0);
    cpu::read_row(a.in, a.in_type, r, c0, n, x);
    const uint32_t k = extreme<kMax, kLast>(x, n);
    const float pair[2] = {b, x[k]};
    if (c0 == 0 || extreme<kMax, kLast>(pair, 2) == 1) b = x[k], best = c0 + k;
  }
  return best;
}

template <bool kMax, bool kLast>
void rows(const ArgArgs& a, uint32_t begin, uint32_t end) {
  alignas(64) float x[kChunk], index[kChunk];
  uint32_t pending = 0;
  for (uint32_t r = begin; r < end; ++r) {
    uint32_t run = 0;
    const std::byte* p = a.in_type == DataType::FLOAT32 ? a.in.unit(r, 0, &run) : nullptr;
    uint32_t best;
    if (run >= a.cols && a.math.arg_extreme)  // float32 in place, in vectors
      best = a.math.arg_extreme(reinterpret_cast<const float*>(p), a.cols, kMax, kLast);
    else if (run >= a.cols)
      best = extreme<kMax, kLast>(reinterpret_cast<const float*>(p), a.cols);
    else
      best = extreme_chunked<kMax, kLast>(a, r, x);
    index[pending++] = static_cast<float>(best);
    if (pending == kChunk || r + 1 == end) {
      write_flat(a, r + 1 - pending, pending, index);
      pending = 0;
    }
  }
}

Status kernel(const void* raw, uint32_t begin, uint32_t end) {
  const auto& a = *static_cast<const ArgArgs*>(raw);
  if (a.max)
    a.last ? rows<true, true>(a, begin, end) : rows<true, false>(a, begin, end);
  else
    a.last ? rows<false, true>(a, begin, end) : rows<false, false>(a, begin, end);
  return ok_status();
}

StatusOr<Tensor> arg_reduce(std::string_view op, bool max, const Tensor& input, const ArgReduceParams& p) {
  TS_RETURN_IF_ERROR(ops::require_device_tensor(input, op));
  if (input.layout() != Layout::ROW_MAJOR)
    return unimplemented_error("{}: expected a ROW_MAJOR input, found {}; untilize it first", op,
                               input.spec().to_string());
  if (input.dtype() != DataType::FLOAT32 && input.dtype() != DataType::BFLOAT16)
    return unimplemented_error("{}: expected a float32 or bfloat16 input, found {}", op, data_type_name(input.dtype()));
  const Shape& s = input.shape();
  const uint32_t cols = s[-1];
  if (cols == 0 || cols > (1u << 24))
    return invalid_argument_error("{}: expected a last dim of 1 to 2^24 values (indices exact in float32), found {}",
                                  op, cols);
  std::vector<uint32_t> dims;  // the input's less its last (a rank-1 input: (1))
  for (int k = 0; k + 1 < s.rank(); ++k) dims.push_back(s[k]);
  if (dims.empty()) dims.push_back(1);
  Device& device = *input.device();
  TS_ASSIGN_OR_RETURN(Tensor out,
                      allocate_tensor_on_device(TensorSpec{Shape(std::span<const uint32_t>(dims)), DataType::FLOAT32,
                                                           Layout::ROW_MAJOR, DRAM_MEMORY_CONFIG},
                                                device));
  ArgArgs args{.in_type = input.dtype(),
               .cols = cols,
               .out_cols = dims.back(),
               .max = max,
               .last = p.select_last_index,
               .math = cpu::select_float_math()};
  TS_ASSIGN_OR_RETURN(args.in, make_access(input));
  TS_ASSIGN_OR_RETURN(args.out, make_access(out));
  const auto rows = static_cast<uint32_t>(s.volume() / cols);
  const char* isa = args.math.arg_extreme ? args.math.isa : "rows";
  const std::string key =
      fmt::format("{}:{}:{}:{}", op, p.select_last_index ? "last" : "first", input.spec().to_string(), isa);
  auto compile = [&]() -> StatusOr<Program> {
    Program prog;
    prog.kernel = kernel;
    prog.kernel_name = fmt::format("{}_{}__{}", short_dtype_name(input.dtype()), op, isa);
    prog.num_tasks = rows;
    prog.grain = ops::default_grain(device, rows, input.spec().storage_bytes(), ops::kMinChunkBytesStreaming);
    return prog;
  };
  TS_RETURN_IF_ERROR(ops::launch(device, p.cq_id, key, compile, args));
  return out;
}

}  // namespace

StatusOr<Tensor> argmax(const Tensor& input, const ArgReduceParams& params) {
  return arg_reduce("argmax", true, input, params);
}
StatusOr<Tensor> argmin(const Tensor& input, const ArgReduceParams& params) {
  return arg_reduce("argmin", false, input, params);
}

}  // namespace tessera
