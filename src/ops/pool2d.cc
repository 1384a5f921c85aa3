#include <limits>

#include "cpu/pool_kernels.h"
#include "op_common.h"
#include "tessera/base/aligned.h"
#include "tessera/base/cpu_features.h"
#include "tessera/numerics/convert.h"
#include "tessera/ops/pool2d.h"

namespace tessera {

namespace {

struct PoolArgs {
  TensorAccess in, out;
  cpu::MaxAccumulateFn accumulate;  // max, or sum for avg
  DataType dtype;
  bool average;
  uint32_t c, oh, ow;
  cpu::PoolWindow win;
  void (*pool_rows)(const cpu::PoolRowsArgs&, uint32_t, uint32_t);  // run it over `rows` instead when set
  cpu::PoolRowsArgs rows;
};

// One task = one output row (n, oy); channels go in chunks of 1024 through a
// float accumulator on the stack.
Status pool_kernel(const void* raw, uint32_t begin, uint32_t end) {
  const auto& a = *static_cast<const PoolArgs*>(raw);
  if (a.pool_rows) return a.pool_rows(a.rows, begin, end), Status();
  const uint32_t es = element_size(a.dtype);
  const float init = a.average ? 0.0f : -std::numeric_limits<float>::infinity();
  alignas(64) float acc[kTileElements];
  for (uint32_t t = begin; t < end; ++t) {
    const uint32_t n = t / a.oh, oy = t % a.oh;
    for (uint32_t ox = 0; ox < a.ow; ++ox) {
      uint32_t run = 0;
      std::byte* dst = a.out.unit((n * a.oh + oy) * a.ow + ox, 0, &run);
      for (uint32_t c0 = 0; c0 < a.c; c0 += kTileElements) {
        const uint32_t cn = std::min(kTileElements, a.c - c0);
        std::fill_n(acc, cn, init);
        const uint32_t count = a.win.visit(oy, ox, [&](uint32_t iy, uint32_t ix) {
          const auto pixel = static_cast<uint32_t>((uint64_t{n} * a.win.h + iy) * a.win.w + ix);
          a.accumulate(acc, a.in.unit(pixel, c0, &run), cn);
        });
        if (a.average)
          for (uint32_t i = 0; i < cn; ++i) acc[i] /= static_cast<float>(count);
        convert_from_float(acc, dst + uint64_t{c0} * es, a.dtype, cn);
      }
    }
  }
  return Status();
}

Status check_pool_input(const Tensor& input, std::string_view op) {
  TS_RETURN_IF_ERROR(ops::require_device_tensor(input, op));
  if (input.layout() != Layout::ROW_MAJOR)
    return unimplemented_error("{}: the input must be ROW_MAJOR (NHWC rows) for now, found TILE", op);
  if (input.dtype() != DataType::FLOAT32 && input.dtype() != DataType::BFLOAT16)
    return unimplemented_error("{}: expected a float32 or bfloat16 input, found {}", op,
                               data_type_name(input.dtype()));
  const auto ml = input.memory_config().memory_layout;
  if (ml == TensorMemoryLayout::WIDTH_SHARDED || ml == TensorMemoryLayout::BLOCK_SHARDED)
    return unimplemented_error("{}: a pixel's channels must be contiguous (interleaved or HEIGHT_SHARDED), found {}",
                               op, input.memory_config().to_string());
  return ok_status();
}

StatusOr<Tensor> pool2d(const Tensor& input, const Pool2dParams& p, bool average, uint8_t cq_id) {
  const std::string_view op = average ? "avg_pool2d" : "max_pool2d";
  if (average && (p.dilation[0] != 1 || p.dilation[1] != 1))
    return invalid_argument_error("avg_pool2d: dilation must be 1x1 (as PyTorch's), found {}x{}", p.dilation[0],
                                  p.dilation[1]);
  TS_RETURN_IF_ERROR(p.validate(op));
  TS_RETURN_IF_ERROR(check_pool_input(input, op));
  TS_RETURN_IF_ERROR(p.check_input_shape(input.shape().dims(), op));
  Device& device = *input.device();
  const uint32_t oh = p.output_height(), ow = p.output_width();
  TensorSpec out_spec{Shape{1, 1, p.batch_size * oh * ow, p.channels}, input.dtype(), Layout::ROW_MAJOR,
                      input.memory_config()};
  if (input.memory_config().is_sharded()) out_spec.memory_config = DRAM_MEMORY_CONFIG;  // output rows differ
  TS_ASSIGN_OR_RETURN(Tensor out, allocate_tensor_on_device(out_spec, device));
  PoolArgs args{};
  TS_ASSIGN_OR_RETURN(args.in, make_access(input));
  TS_ASSIGN_OR_RETURN(args.out, make_access(out));
  const char* kernel_name = nullptr;
  const bool bf16 = input.dtype() == DataType::BFLOAT16;
  args.accumulate = average ? cpu::select_sum_accumulate(bf16, &kernel_name)
                            : cpu::select_max_accumulate(bf16, &kernel_name);
  args.dtype = input.dtype();
  args.average = average;
  args.c = p.channels, args.oh = oh, args.ow = ow;
  args.win = {p.input_height, p.input_width, p.kernel_size[0], p.kernel_size[1], p.stride[0], p.stride[1],
              p.padding[0],   p.padding[1],  p.dilation[0],    p.dilation[1],    p.count_include_pad};
  // Evenly spaced pixel rows (packed, or one bank of padded pages) on a CPU
  // with AVX2 or AVX-512: the register kernel, reading and writing rows in place.
  const uint64_t in_stride = args.in.uniform_row_stride(), out_stride = args.out.uniform_row_stride();
  if (kernel_isa() != KernelIsa::kScalar && in_stride && out_stride &&
      uint64_t{args.win.kh} * args.win.kw <= cpu::kPoolRowsMaxTaps) {
    const bool avx512 = kernel_isa() == KernelIsa::kAvx512;
    args.pool_rows = avx512 ? cpu::avx512::pool_rows : cpu::avx2::pool_rows;
    // Prefetching pays where each worker's share of the input outgrows its
    // cache (see kPoolPrefetchBytes).
    const uint64_t threads = static_cast<uint64_t>(device.workers().num_threads());
    const bool prefetch = input.spec().storage_bytes() / threads > device.descriptor().l1_size_per_core;
    args.rows = {args.in.base, args.out.base, in_stride, out_stride, bf16, average, args.c, oh, ow, args.win, prefetch};
    static const char* const names[2][2][2] = {
        {{"f32_max_pool2d__avx2_rows", "bf16_max_pool2d__avx2_rows"},
         {"f32_avg_pool2d__avx2_rows", "bf16_avg_pool2d__avx2_rows"}},
        {{"f32_max_pool2d__avx512_rows", "bf16_max_pool2d__avx512_rows"},
         {"f32_avg_pool2d__avx512_rows", "bf16_avg_pool2d__avx512_rows"}}};
    kernel_name = names[avx512][average][bf16];
  }
  const uint32_t tasks = p.batch_size * oh;
  std::string key = fmt::format("{}:{}->{}:{}", p.descriptor(op), input.spec().to_string(), out_spec.to_string(),
                                kernel_name);
  auto compile = [&]() -> StatusOr<Program> {
    Program prog;
    prog.kernel = pool_kernel;
    prog.kernel_name = kernel_name;
    prog.num_tasks = tasks;
    // One chunk of output rows per worker. In the models, per-launch sums
    // over alternated builds against four chunks per worker (the streaming
    // default): ResNet-50's stem pool 0.059-0.097 -> 0.047-0.095 ms at batch
    // 1 (medians 0.068 -> 0.050), 0.61-0.69 -> 0.48-0.59 ms at batch 8;
    // YOLO's three 5x5 pools on 20x20 maps 0.161-0.166 -> 0.097-0.103 ms;
    // the UNet's four pools mixed (1.91-2.07 against 1.74-2.17 ms).
    prog.grain = static_cast<uint32_t>(div_up(tasks, static_cast<uint32_t>(device.workers().num_threads())));
    return prog;
  };
  TS_RETURN_IF_ERROR(ops::launch(device, cq_id, key, compile, args));
  return out;
}

struct GlobalPoolArgs {
  TensorAccess in, out;
  cpu::SumAccumulateFn accumulate;
  bool rows_in_registers;  // AVX-512 and evenly spaced pixel rows: cpu::avx512::sum_rows
  DataType dtype;
  uint32_t hw, c, width, chunks;  // chunks of `width` (<= kGlobalPoolWidth) channels per image
};

// Channels per task at most: the float accumulator on the worker's stack.
constexpr uint32_t kGlobalPoolWidth = 4096;

// One task = one image's chunk of `width` channels, summed over H*W pixels.
Status global_pool_kernel(const void* raw, uint32_t begin, uint32_t end) {
  const auto& a = *static_cast<const GlobalPoolArgs*>(raw);
  alignas(64) float acc[kGlobalPoolWidth];
  for (uint32_t t = begin; t < end; ++t) {
    const uint32_t n = t / a.chunks, c0 = (t % a.chunks) * a.width, cn = std::min(a.width, a.c - c0);
    uint32_t run = 0;
    if (a.rows_in_registers) {
      const uint64_t stride = a.in.uniform_row_stride();
      const bool bf16 = a.dtype == DataType::BFLOAT16;
      const std::byte* first = a.in.base + uint64_t{n} * a.hw * stride + uint64_t{c0} * (bf16 ? 2 : 4);
      cpu::avx512::sum_rows(acc, first, stride, a.hw, cn, bf16);
    } else {
      std::fill_n(acc, cn, 0.0f);
      for (uint32_t i = 0; i < a.hw; ++i) a.accumulate(acc, a.in.unit(n * a.hw + i, c0, &run), cn);
    }
    for (uint32_t i = 0; i < cn; ++i) acc[i] /= static_cast<float>(a.hw);
    convert_from_float(acc, a.out.unit(n, c0, &run), a.dtype, cn);
  }
  return Status();
}

}  // namespace

StatusOr<Tensor> max_pool2d(const Tensor& input, const Pool2dParams& p, uint8_t cq_id) {
  return pool2d(input, p, false, cq_id);
}

StatusOr<Tensor> avg_pool2d(const Tensor& input, const Pool2dParams& p, uint8_t cq_id) {
  return pool2d(input, p, true, cq_id);
}

StatusOr<Tensor> global_avg_pool2d(const Tensor& input, uint8_t cq_id) {
  TS_RETURN_IF_ERROR(check_pool_input(input, "global_avg_pool2d"));
  const Shape& s = input.shape();
  if (s.rank() != 4)
    return invalid_argument_error("global_avg_pool2d: expected an (N, H, W, C) input, found {}", s.to_string());
  Device& device = *input.device();
  TensorSpec out_spec{Shape{s[0], 1, 1, s[3]}, input.dtype(), Layout::ROW_MAJOR,
                      MemoryConfig{TensorMemoryLayout::INTERLEAVED, input.memory_config().buffer_type, std::nullopt}};
  TS_ASSIGN_OR_RETURN(Tensor out, allocate_tensor_on_device(out_spec, device));
  GlobalPoolArgs args{};
  TS_ASSIGN_OR_RETURN(args.in, make_access(input));
  TS_ASSIGN_OR_RETURN(args.out, make_access(out));
  const char* kernel_name = nullptr;
  args.accumulate = cpu::select_sum_accumulate(input.dtype() == DataType::BFLOAT16, &kernel_name);
  // The register path: each vector of 16 channels summed over the pixels in
  // a register, where the accumulate path loads, adds and stores a stack
  // buffer per pixel.
  args.rows_in_registers = kernel_isa() == KernelIsa::kAvx512 && args.in.uniform_row_stride() != 0 &&
                           (input.dtype() == DataType::FLOAT32 || input.dtype() == DataType::BFLOAT16);
  args.dtype = input.dtype();
  args.hw = s[1] * s[2];
  args.c = s[3];
  // A task reads whole pixels of one image, which lie in one run of memory
  // (chunks of each pixel, a page apart, each started a new prefetch stream:
  // ResNet-50 batch 8 took 0.25-0.33 ms for a 3.2 MB read, ONNX Runtime
  // 0.08), up to kGlobalPoolWidth channels. With fewer images than workers,
  // as many even chunks of whole vectors as there are workers (MobileNetV2's
  // 1280 channels in 1024 + 256 left one worker 80% of the work: 12 us for a
  // 250 KB read, where ResNet-50's 2048 took 9).
  const uint32_t workers = static_cast<uint32_t>(device.workers().num_threads());
  auto up = [](uint32_t x, uint32_t a) { return static_cast<uint32_t>(div_up(x, a)); };
  uint32_t chunks = up(s[3], kGlobalPoolWidth);
  if (s[0] < workers) chunks = std::max(chunks, std::min(up(workers, s[0]), up(s[3], 64)));
  args.width = static_cast<uint32_t>(align_up(up(s[3], chunks), 16));
  args.chunks = up(s[3], args.width);
  const uint32_t tasks = s[0] * args.chunks;
  std::string key = fmt::format("global_avg_pool2d:{}:{}", input.spec().to_string(), kernel_name);
  auto compile = [&]() -> StatusOr<Program> {
    Program prog;
    prog.kernel = global_pool_kernel;
    prog.kernel_name = fmt::format("{}_global", kernel_name);
    prog.num_tasks = tasks;
    prog.grain = 1;
    return prog;
  };
  TS_RETURN_IF_ERROR(ops::launch(device, cq_id, key, compile, args));
  return out;
}

}  // namespace tessera
