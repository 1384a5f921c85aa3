// Tessera's direct kernels (cpu/direct_conv_kernels.h): how each splits a
// conv into tasks, and the weight layouts they read. kDirectAvx2,
// kWinogradAvx2, kNarrowAvx512, kDirectAvx512, kRows3x3Avx512, and the
// patch kernels (kPatchAvx2 / kPatchAvx512, weights packed in patches.cc).
#include <algorithm>

#include "../cpu/direct_conv_kernels.h"
#include "../cpu/float_math.h"
#include "../op_common.h"
#include "launch.h"
#include "tessera/base/cpu_features.h"
#include "tessera/ops/data_movement.h"
#include "tuning.h"

namespace tessera::conv {

namespace {
const ConvTuning& tuning() { return conv_tuning(kernel_isa()); }
uint32_t tasks_per_worker() { return static_cast<uint32_t>(tuning().direct_tasks_per_worker); }

// The tuning entries these kernels' tasks read (tuning.inc):
// direct_band_bytes: output rows per band of the direct kernel are as many
// as keep the padded input rows a band reads within it (the worker's L2
// holds them beside one 16-channel block of weights).
// direct_tasks_per_worker: what the direct, Winograd and patch kernels aim
// for on small maps (see launch_direct).
// winograd_*segment_bytes: the transformed patches and products of one
// segment of tiles. Each segment reads every weight once, so weights beyond
// what the L3 keeps (the UNet's 512 -> 512 bottleneck: 16.8 MB) come from
// DRAM per segment, and there larger segments pay. Measured with
// bench_conv_f32 --hifi2 (HiFi4 / HiFi2 time, 2 threads) at 384 KiB, 768 KiB
// and 1.5 MiB: bottleneck 512->512 1.12x, 1.40x, 1.71x; dec4 512->256
// (8.4 MB of weights) 1.92x, 1.80x, 1.71x; enc2 64->64 1.67x, 1.72x, 1.74x.

// Padded input bytes one output row band of the direct kernel reads per row.
uint64_t direct_row_bytes(const Geometry& g) {
  return (uint64_t{g.ow - 1} * g.sw + uint64_t{g.kw - 1} * g.dw + 1) * g.cin * sizeof(float);
}

// Input channels per chunk of the direct kernel. Only maps whose whole
// padded input fits one band (one band per image) take chunks: there each
// block's weights serve few pixels, and without chunks they came from L2
// (ResNet-50's 7x7x512 ran at half oneDNN's speed). On larger maps the
// weights are reused over a band's many pixels from L2, and the partial
// sums cost more than they save (the UNet's 120x160x256 -> 128: 134-140
// GFLOP/s chunked against 149-152 without, alternating runs).
uint32_t direct_cin_block(const Geometry& g) {
  const uint64_t rows = uint64_t{g.oh - 1} * g.sh + uint64_t{g.kh - 1} * g.dh + 1;
  return rows * direct_row_bytes(g) <= tuning().direct_band_bytes ? cpu::direct_cin_block(g.kh, g.kw, g.cin) : g.cin;
}
// The problem's: Winograd, patch, AVX-512 direct, narrow and 3x3 row kernels take no chunks.
uint32_t direct_cin_block(const Problem& pr) {
  return pr.winograd() || pr.direct_avx512() || pr.narrow() || pr.rows3x3() || pr.g.transposed ? pr.g.cin
                                                                                               : direct_cin_block(pr.g);
}

// The AVX-512 direct kernel's bands: pixels of the whole batch per band, as many
// as keep a band's input rows within direct512_band_bytes (the L2 keeps them
// while four blocks of weights stream past), in equal bands,
// and at least direct512_min_band_pixels: every band re-reads its group's weights
// (ResNet-50's 7x7 2048 -> 512 at batch 8, 32-pixel bands: 13 bands over 392
// pixels). Per-launch sums, three alternated rounds: its two launches
// 3.68-3.78 -> 3.38-3.46 ms at batch 8 (64-pixel bands), 0.51 -> 0.49 ms at
// batch 1; 128-pixel bands for 1024 input channels lost at batch 1.

// The AVX-512 direct kernel's tasks (launch_direct): bands of
// the batch's pixels (direct512_band_bytes of input rows at most), groups of
// 16-channel blocks (whole tiles' worth but the last) until the workers have
// direct_tasks_per_worker tasks each; where the groups do not divide evenly
// over the workers, more bands of at least one tile of pixels (channel groups
// alone left a 64-channel output to one task and a 320-channel one to five,
// three on one worker). A task runs its group's weights past its band; every
// band reads all of them, so bands are few where groups divide evenly.
void direct_avx512_tasks(const Problem& pr, uint32_t threads, cpu::DirectConvArgs& args) {
  const Geometry& g = pr.g;
  // Patches: input pixels, and blocks of kh * kw * cout columns.
  const uint64_t pixels = g.transposed ? uint64_t{g.n} * g.h * g.w : uint64_t{g.n} * g.oh * g.ow;
  const uint32_t cols = g.transposed ? g.kh * g.kw * g.cout : g.cout;
  const uint32_t tile_rows = cpu::avx512::kDirectTileRows, tile_blocks = cpu::avx512::kDirectTileBlocks;
  const uint64_t fit =
      std::min(pixels, std::max<uint64_t>(tuning().direct512_band_bytes / (uint64_t{g.cin} * sizeof(float)),
                                          tuning().direct512_min_band_pixels));
  const uint32_t want = threads * tasks_per_worker(), blocks = (cols + 15) / 16;
  const uint32_t tiles = (blocks + tile_blocks - 1) / tile_blocks;
  uint64_t bands = (pixels + fit - 1) / fit;
  const uint32_t groups = std::min<uint32_t>(tiles, std::max<uint64_t>(1, (want + bands - 1) / bands));
  args.group_blocks = (tiles + groups - 1) / groups * tile_blocks;
  args.groups = (blocks + args.group_blocks - 1) / args.group_blocks;
  if (args.groups % threads != 0)
    bands = std::clamp<uint64_t>((want + args.groups - 1) / args.groups, bands, (pixels + tile_rows - 1) / tile_rows);
  args.band_rows = static_cast<uint32_t>((pixels + bands - 1) / bands);
  args.bands = static_cast<uint32_t>((pixels + args.band_rows - 1) / args.band_rows);
}

// The 3x3 row kernel's tasks: one output row of one image per task, for
// each group of output channels, group slowest: the pool's runs then give
// each worker whole groups where there are several, whose weights (up to
// 590 KB each) stay in its own L2, where alternating groups row by row
// streamed them from the L3 again on every row (the UNet's dec3, 256 ->
// 128, each layer alone, four alternated rounds: 512-516 -> 514-518
// GFLOP/s). A task costs one claim in the pool, under a microsecond against
// 15 us or more of FMAs, and the runs keep each worker on contiguous rows;
// so no coarser bands are needed for locality, and one-row tasks let the
// workers finish together.
//
// A task's working set is its three input rows and its group's weights,
// which every tile streams again. Where that spills from the core's private
// cache (`l2_bytes`: the descriptor's L1, the CPU's L2), the kernel
// prefetches each tap's input a tap ahead. Alternated runs, two workers,
// six rounds, medians, GFLOP/s without -> with: the UNet's dec3 (120x160
// 256 -> 128, 1.08 MB against a 1 MB L2) 501 -> 527; its dec4 (60x80
// 512 -> 256, 1.08 MB) 520 -> 522. Where the set fits, prefetching (forced)
// only costs instructions: the UNet's dec1 (480x640 64 -> 32) 517 -> 507,
// its bottleneck (30x40 512 -> 512) 548 -> 541.
void rows3x3_tasks(const Problem& pr, uint64_t l2_bytes, cpu::DirectConvArgs& args) {
  const Geometry& g = pr.g;
  args.band_rows = 1;
  args.bands = g.oh;
  const uint32_t group = cpu::avx512::rows3x3_group_channels(g.cin, g.cout);
  args.groups = g.cout / group;
  args.group_blocks = group / 16;
  const uint64_t working_set = (3 * uint64_t{g.w} * g.cin + 9 * uint64_t{g.cin} * group) * sizeof(float);
  args.rows_prefetch = working_set > l2_bytes;
}

// The narrow kernel's tasks: bands of the batch's pixels, direct_tasks_per_worker
// per worker, of at least narrow_min_band_pixels.
void narrow_tasks(const Problem& pr, uint32_t threads, cpu::DirectConvArgs& args) {
  const Geometry& g = pr.g;
  const uint64_t pixels = uint64_t{g.n} * g.oh * g.ow;
  const uint64_t band = std::max(tuning().narrow_min_band_pixels,
                                 (pixels + threads * tasks_per_worker() - 1) / (threads * tasks_per_worker()));
  args.band_rows = static_cast<uint32_t>(std::min(pixels, band));
  args.bands = static_cast<uint32_t>((pixels + args.band_rows - 1) / args.band_rows);
  args.groups = 1;
  args.group_blocks = (g.cout + 15) / 16;
}

// The AVX2 kernels' tasks (launch_direct): bands of output rows per image
// (Winograd: of tile rows; patches: of input rows), then groups of
// 16-channel blocks.
void direct_avx2_tasks(const Problem& pr, uint32_t threads, cpu::DirectConvArgs& args) {
  // Bands of rows sized for the cache, as equal as rows allow, and a multiple
  // of the workers when there are few (two bands of 33 and 23 rows left one
  // worker idle for 30% of a 56x56 conv); then more bands of at least 4 rows
  // (below), and only then groups of output-channel blocks, until every
  // worker has its tasks. Maps of fewer than 8 rows keep one band, where each
  // worker streams only its own blocks' weights. Winograd bands count rows of
  // 2x2 output tiles, each reading two more input rows.
  const Geometry& g = pr.g;
  const bool wino = pr.winograd(), patches = g.transposed;
  const uint32_t units = wino ? (g.oh + 1) / 2 : patches ? g.h : g.oh;
  uint32_t fit_rows;
  if (patches) {  // input rows read in place, half the budget
    const uint64_t fit = tuning().direct_band_bytes / 2 / (uint64_t{g.w} * g.cin * sizeof(float));
    fit_rows = static_cast<uint32_t>(std::clamp<uint64_t>(fit, 1, units));
  } else if (wino) {
    const uint64_t tile_row_bytes = 2 * (uint64_t{(g.ow + 1) / 2} * 2 + 2) * g.cin * sizeof(float);
    const uint64_t fit = tuning().direct_band_bytes / tile_row_bytes;
    fit_rows = static_cast<uint32_t>(std::clamp<uint64_t>(fit > 1 ? fit - 1 : 1, 1, units));
  } else {
    const uint64_t span = uint64_t{g.kh - 1} * g.dh + 1, fit = tuning().direct_band_bytes / direct_row_bytes(g);
    fit_rows = static_cast<uint32_t>(std::clamp<uint64_t>(fit > span ? (fit - span) / g.sh + 1 : 1, 1, g.oh));
  }
  uint32_t bands = (units + fit_rows - 1) / fit_rows;
  if (bands > 1 && g.n * bands < 8 * threads) {
    const uint32_t tasks = (g.n * bands + threads - 1) / threads * threads;
    bands = std::min(units, (tasks + g.n - 1) / g.n);
  }
  // The tasks the workers want come first as more bands of at least 4 rows
  // (Winograd: tile rows), then as groups of output channels: a group reads
  // its band's whole input (and builds its tap table, or pads and transforms
  // it) for its share of the blocks, where another band rereads only a halo
  // and the weights. bench_conv_f32, in-process alternation: ResNet-50's 56x56
  // 128 -> 128 stride-2 conv 2.83 / 2.69 -> 1.64 / 1.60 ms, its 56x56x64 3x3
  // 1.08x (Winograd 2.18x), 28x28x128 1.81-1.84x, 14x14x256 1.05-1.24x;
  // YOLO's 40x40x128 Winograd 1.38x; the UNet's layers (many bands already)
  // and 7x7 maps (one band of 7 rows) unchanged.
  if (!patches && g.n * bands < threads * tasks_per_worker())
    bands = std::max(bands, std::min(units / 4, (threads * tasks_per_worker() + g.n - 1) / g.n));
  args.band_rows = (units + bands - 1) / bands;
  args.bands = (units + args.band_rows - 1) / args.band_rows;
  const uint32_t blocks = ((patches ? g.kh * g.kw : 1) * g.cout + 15) / 16;  // patches: blocks of columns
  // Up to direct_tasks_per_worker tasks per worker, so that a worker whose
  // vCPU stalls hands its remaining blocks to the other: with one task per
  // worker, ResNet-50 at HiFi2 batch 1 ran 64-93 ms device-only against
  // 57-75 with four (three alternated pairs); each task pads or transforms
  // its own input copy.
  const uint32_t want = threads * tasks_per_worker();
  const uint32_t per_image = g.n * args.bands >= want ? 1 : (want + g.n * args.bands - 1) / (g.n * args.bands);
  args.group_blocks = (blocks + std::min(blocks, per_image) - 1) / std::min(blocks, per_image);
  args.groups = (blocks + args.group_blocks - 1) / args.group_blocks;
  if (wino) {
    // Tiles per segment: its transformed patches (16 x cin floats each) and
    // one block's products (16 x 16) stay in the L2, unless the weights
    // (read once per segment) are too large to stay in the L3 (see
    // winograd_segment_bytes).
    const uint64_t tiles = uint64_t{args.band_rows} * ((g.ow + 1) / 2);
    const uint64_t weight_bytes = uint64_t{16} * g.cin * g.cout * sizeof(float);
    const uint64_t budget = weight_bytes > tuning().winograd_cached_weight_bytes
                                ? tuning().winograd_streamed_segment_bytes
                                : tuning().winograd_segment_bytes;
    uint64_t seg = budget / (16 * sizeof(float) * (g.cin + 16));
    if (seg >= 6) seg = seg / 6 * 6;
    args.segment_tiles = static_cast<uint32_t>(std::clamp<uint64_t>(seg, 1, tiles));
  }
}

}  // namespace

DirectPackedSize direct_packed_size(const Problem& pr) {
  const Geometry& g = pr.g;
  const uint64_t blocks = (g.cout + 15) / 16, taps = uint64_t{g.kh} * g.kw;
  if (g.transposed) {  // patch columns n = (ky * kw + kx) * cout + co, [n / 16][cin][16]
    const uint64_t col_blocks = (taps * g.cout + 15) / 16;
    return {col_blocks * g.cin * 16, col_blocks * 16};
  }
  if (pr.narrow()) return {uint64_t{g.cout} * g.cin * taps, blocks * 16};    // (cout, cin) rows
  if (pr.winograd()) return {blocks * 16 * g.cin * 16, blocks * 16};           // [16 positions][cin][16]
  return {blocks * taps * g.cin * 16, blocks * 16};                            // [taps][cin][16] per block
}

StatusOr<Conv2dResult> launch_direct(const Tensor& input, const PreparedConv2dWeights& w, const Problem& pr,
                                     uint8_t cq_id) {
  const Geometry& g = pr.g;
  const DirectPackedSize size = direct_packed_size(pr);
  if (w.weight.shape().volume() != size.weight || w.weight.dtype() != DataType::FLOAT32 ||
      w.bias.shape().volume() != size.bias || w.bias.dtype() != DataType::FLOAT32)
    return failed_precondition_error(
        "{}: the prepared weights hold {} and {}; the kernel for '{}' reads {} and {} float32 values",
        g.transposed ? "conv_transpose2d" : "conv2d", w.weight.spec().to_string(), w.bias.spec().to_string(), pr.key,
        size.weight, size.bias);
  Device& device = *input.device();
  // Rows spread over banks (L1, or DRAM on wormhole_b0) go through one dense
  // DRAM shard each way.
  // (Tiles untilize to float32; bfloat16 rows stay bfloat16.)
  auto dense_rows = [&](uint32_t rows, uint32_t cols, DataType t) { return staging(rows, cols, t, true); };
  const MemoryConfig dense_in = dense_rows(g.n * g.h * g.w, g.cin,
                                           input.layout() == Layout::TILE ? DataType::FLOAT32 : input.dtype()),
                     dense_out = dense_rows(g.n * g.oh * g.ow, g.cout, pr.output.dtype);
  Tensor x = input;
  cpu::DirectConvArgs args{};
  TS_ASSIGN_OR_RETURN(args.src, make_access(x));
  if (x.layout() != Layout::ROW_MAJOR || args.src.uniform_row_stride() == 0) {
    if (x.layout() == Layout::TILE) {
      TS_ASSIGN_OR_RETURN(x, untilize(x, {.memory_config = dense_in, .dtype = DataType::FLOAT32, .cq_id = cq_id}));
    } else {
      TS_ASSIGN_OR_RETURN(x, to_memory_config(x, dense_in, cq_id));
    }
    TS_ASSIGN_OR_RETURN(args.src, make_access(x));
  }
  TensorSpec out_spec = pr.output;
  // With a residual: its buffer when the caller gives it up (output_tensor),
  // and its rows read densely (staged like the input where spread over banks).
  TS_ASSIGN_OR_RETURN(Tensor output, output_tensor(input, pr));
  TS_ASSIGN_OR_RETURN(args.dst, make_access(output));
  std::optional<Tensor> res;
  if (pr.residual) {
    res = pr.residual->tensor;
    TS_ASSIGN_OR_RETURN(args.res, make_access(*res));
    if (res->layout() == Layout::TILE) {
      TS_ASSIGN_OR_RETURN(res,
                          untilize(*res, {.memory_config = dense_rows(g.n * g.oh * g.ow, g.cout, DataType::FLOAT32),
                                          .dtype = DataType::FLOAT32,
                                          .cq_id = cq_id}));
      TS_ASSIGN_OR_RETURN(args.res, make_access(*res));
    } else if (args.res.uniform_row_stride() == 0) {
      TS_ASSIGN_OR_RETURN(res, to_memory_config(*res, dense_out, cq_id));
      TS_ASSIGN_OR_RETURN(args.res, make_access(*res));
    }
    args.res_activation = pr.residual->activation;
  }
  const bool copy_out = args.dst.uniform_row_stride() == 0;
  if (copy_out) {
    out_spec.memory_config = dense_out;
    TS_ASSIGN_OR_RETURN(output, allocate_tensor_on_device(out_spec, device));
    TS_ASSIGN_OR_RETURN(args.dst, make_access(output));
  }
  if (args.src.uniform_row_stride() == 0 || args.dst.uniform_row_stride() == 0 ||
      (res && args.res.uniform_row_stride() == 0))
    return internal_error("conv2d: the direct kernel's staging rows have no uniform stride ({} -> {})",
                          x.spec().to_string(), output.spec().to_string());
  args.src_bf16 = x.dtype() == DataType::BFLOAT16;
  args.dst_bf16 = output.dtype() == DataType::BFLOAT16;
  args.res_bf16 = res && res->dtype() == DataType::BFLOAT16;
  TS_ASSIGN_OR_RETURN(TensorAccess wa, make_access(w.weight));
  TS_ASSIGN_OR_RETURN(TensorAccess ba, make_access(w.bias));
  args.weights = reinterpret_cast<const float*>(wa.page(0));
  args.bias = reinterpret_cast<const float*>(ba.page(0));
  args.math = cpu::select_float_math();
  args.activation = g.activation;
  args.cin_block = direct_cin_block(pr);
  args.n = g.n, args.h = g.h, args.w = g.w, args.cin = g.cin, args.cout = g.cout, args.oh = g.oh, args.ow = g.ow;
  args.kh = g.kh, args.kw = g.kw, args.sh = g.sh, args.sw = g.sw, args.dh = g.dh, args.dw = g.dw;
  args.pad_t = static_cast<uint32_t>(g.pad_t), args.pad_l = static_cast<uint32_t>(g.pad_l);
  const uint32_t threads = static_cast<uint32_t>(device.workers().num_threads());
  if (pr.narrow())
    narrow_tasks(pr, threads, args);
  else if (pr.rows3x3())
    rows3x3_tasks(pr, device.descriptor().l1_size_per_core, args);
  else if (pr.direct_avx512())
    direct_avx512_tasks(pr, threads, args);
  else
    direct_avx2_tasks(pr, threads, args);
  const bool wino = pr.winograd(), patches = g.transposed;
  auto compile = [&]() -> StatusOr<Program> {
    Program prog;
    prog.kernel = pr.narrow()    ? cpu::avx512::narrow_conv_kernel
                  : pr.rows3x3() ? cpu::avx512::conv3x3_rows_kernel
                  : pr.direct_avx512()
                      ? (patches ? cpu::avx512::patch_transpose_kernel : cpu::avx512::direct_conv_kernel)
                  : patches ? cpu::avx2::patch_transpose_kernel
                  : wino    ? cpu::avx2::winograd_f2_kernel
                            : cpu::avx2::direct_conv_kernel;
    prog.kernel_name = pr.narrow()    ? (args.src_bf16 ? "bf16_conv2d__narrow_avx512" : "f32_conv2d__narrow_avx512")
                       : pr.rows3x3() ? "f32_conv2d__rows3x3_avx512"
                       : pr.direct_avx512()
                           ? (patches ? "f32_conv_transpose2d__patches_avx512" : "f32_conv2d__direct_avx512")
                       : patches ? "f32_conv_transpose2d__patches_avx2"
                       : wino    ? "f32_conv2d__winograd_f2_avx2"
                                 : "f32_conv2d__direct_avx2";
    // The AVX-512 direct and narrow kernels' bands span the batch; the AVX2
    // and 3x3 row kernels' are per image.
    prog.num_tasks = (pr.direct_avx512() || pr.narrow() ? 1 : g.n) * args.bands * args.groups;
    prog.grain = 1;
    return prog;
  };
  TS_RETURN_IF_ERROR(ops::launch(device, cq_id, pr.key, compile, args));
  if (copy_out) {
    TS_ASSIGN_OR_RETURN(output, to_memory_config(output, pr.output.memory_config, cq_id));
  }
  return Conv2dResult{std::move(output), g.oh, g.ow, w};
}

// The direct kernel's weights: per 16-channel block and chunk of input
// channels, [kh][kw][chunk channels][16] (cpu::DirectConvArgs; the 3x3 row
// kernel's per group of output channels, [kh][kw][cin][group channels]),
// and the bias padded to whole blocks, float32 (zeros past cout).
StatusOr<Conv2dResult> direct_with_weights(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
                                           const Conv2dParams& p, const Problem& pr, DataType weights_dtype,
                                           uint8_t cq_id) {
  const Geometry& g = pr.g;
  TS_ASSIGN_OR_RETURN(Tensor rounded, round_conv2d_weights(weight, p, weights_dtype, input.dtype()));
  TS_ASSIGN_OR_RETURN(std::vector<float> b, bias_values(bias, g));
  TS_ASSIGN_OR_RETURN(const std::vector<float> v, rounded.to_vector());  // (cout, cin, kh, kw)
  const uint32_t taps = g.kh * g.kw, cb = direct_cin_block(pr);
  const DirectPackedSize size = direct_packed_size(pr);
  std::vector<float> m(size.weight, 0.0f);
  if (pr.narrow()) m.assign(v.begin(), v.end());  // (cout, cin): the narrow kernel's rows
  const uint32_t group = cpu::avx512::rows3x3_group_channels(g.cin, g.cout);
  for (uint32_t o = 0; o < g.cout && pr.rows3x3(); ++o)  // [cout / group][taps][cin][group]
    for (uint32_t c = 0; c < g.cin; ++c)
      for (uint32_t t = 0; t < taps; ++t)
        m[((uint64_t{o / group} * taps + t) * g.cin + c) * group + o % group] = v[(uint64_t{o} * g.cin + c) * taps + t];
  for (uint32_t o = 0; o < g.cout && !pr.narrow() && !pr.rows3x3(); ++o)
    for (uint32_t c = 0; c < g.cin; ++c) {
      const uint32_t c0 = c / cb * cb, cbk = std::min(cb, g.cin - c0);
      float* chunk = m.data() + (uint64_t{o / 16} * g.cin + c0) * taps * 16;
      for (uint32_t t = 0; t < taps; ++t)
        chunk[(uint64_t{t} * cbk + c - c0) * 16 + o % 16] = v[(uint64_t{o} * g.cin + c) * taps + t];
    }
  b.resize(size.bias, 0.0f);
  TS_ASSIGN_OR_RETURN(Tensor mh, Tensor::from_vector(m, Shape{static_cast<uint32_t>(m.size())}, DataType::FLOAT32));
  TS_ASSIGN_OR_RETURN(Tensor bh, Tensor::from_vector(b, Shape{static_cast<uint32_t>(b.size())}, DataType::FLOAT32));
  TS_ASSIGN_OR_RETURN(PreparedConv2dWeights w, upload_weights(pr.weights_key, mh, bh, *input.device(), cq_id));
  return launch_direct(input, w, pr, cq_id);
}

// The AVX2 Winograd kernel's weights: U = G g G^T per output and input
// channel (F(2x2, 3x3)), packed per 16-channel block as [16 positions][cin][16],
// and the bias padded to whole blocks, float32 (zeros past cout). The
// transform runs in double on the rounded weights.
StatusOr<Conv2dResult> winograd_with_weights(const Tensor& input, const Tensor& weight,
                                             const std::optional<Tensor>& bias, const Conv2dParams& p,
                                             const Problem& pr, DataType weights_dtype, uint8_t cq_id) {
  const Geometry& g = pr.g;
  TS_ASSIGN_OR_RETURN(Tensor rounded, round_conv2d_weights(weight, p, weights_dtype, input.dtype()));
  TS_ASSIGN_OR_RETURN(std::vector<float> b, bias_values(bias, g));
  TS_ASSIGN_OR_RETURN(const std::vector<float> v, rounded.to_vector());  // (cout, cin, 3, 3)
  const DirectPackedSize size = direct_packed_size(pr);
  std::vector<float> m(size.weight, 0.0f);
  for (uint32_t o = 0; o < g.cout; ++o)
    for (uint32_t c = 0; c < g.cin; ++c) {
      const float* k = v.data() + (uint64_t{o} * g.cin + c) * 9;
      double gg[4][3];  // G g
      for (int j = 0; j < 3; ++j) {
        gg[0][j] = k[j], gg[3][j] = k[6 + j];
        gg[1][j] = 0.5 * (double{k[j]} + k[3 + j] + k[6 + j]);
        gg[2][j] = 0.5 * (double{k[j]} - k[3 + j] + k[6 + j]);
      }
      for (int i = 0; i < 4; ++i) {
        const double u[4] = {gg[i][0], 0.5 * (gg[i][0] + gg[i][1] + gg[i][2]), 0.5 * (gg[i][0] - gg[i][1] + gg[i][2]),
                             gg[i][2]};
        for (int j = 0; j < 4; ++j)
          m[((uint64_t{o / 16} * 16 + i * 4 + j) * g.cin + c) * 16 + o % 16] = static_cast<float>(u[j]);
      }
    }
  b.resize(size.bias, 0.0f);
  TS_ASSIGN_OR_RETURN(Tensor mh, Tensor::from_vector(m, Shape{static_cast<uint32_t>(m.size())}, DataType::FLOAT32));
  TS_ASSIGN_OR_RETURN(Tensor bh, Tensor::from_vector(b, Shape{static_cast<uint32_t>(b.size())}, DataType::FLOAT32));
  TS_ASSIGN_OR_RETURN(PreparedConv2dWeights w, upload_weights(pr.weights_key, mh, bh, *input.device(), cq_id));
  return launch_direct(input, w, pr, cq_id);
}

}  // namespace tessera::conv
