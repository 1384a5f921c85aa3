#include "onednn_plan.h"

#include <omp.h>

#include <map>

#include "../cpu/float_math.h"
#include "../op_common.h"
#include "tessera/base/aligned.h"
#include "tessera/base/cpu_features.h"
#include "tuning.h"

namespace tessera::conv {

namespace {
const ConvTuning& tuning() { return conv_tuning(kernel_isa()); }
}  // namespace

using onednn::dense_row_stride;
using onednn::dnnl_type;

memory::desc weights_user_desc(const Geometry& g, DataType t) {
  auto d = [](uint32_t v) { return static_cast<memory::dim>(v); };
  const auto o = d(g.cout), i = d(g.cin), kh = d(g.kh), kw = d(g.kw), gr = d(g.groups);
  using tag = memory::format_tag;
  if (g.groups == 1) return memory::desc({o, i, kh, kw}, dnnl_type(t), g.transposed ? tag::iohw : tag::oihw);
  return memory::desc({gr, o / gr, i / gr, kh, kw}, dnnl_type(t), g.transposed ? tag::giohw : tag::goihw);
}

namespace {

// Dense NHWC rows of `mb` image slices: dims (mb, C, h, w).
memory::desc rows_desc(uint32_t mb, uint32_t h, uint32_t w, uint32_t c, DataType t) {
  return memory::desc({static_cast<memory::dim>(mb), static_cast<memory::dim>(c), static_cast<memory::dim>(h),
                       static_cast<memory::dim>(w)},
                      dnnl_type(t), memory::format_tag::nhwc);
}

// Whole images split into `parts` groups: a batch spreads over the threads by
// image, so each primitive call sees whole maps (late layers' 7x7 maps split
// by rows leave GEMMs of 21-28 pixels). A shard calls its primitive on
// `mb` images at a time, as many as keep one call's activations within
// onednn_call_bytes (`image_bytes`: one image's input and output rows): a
// residual's sum post-op rereads the output, and ResNet-50's stage-1 1x1
// conv with its residual ran at 111 GFLOP/s on 4 images per call (12.8 MB of
// output) against 204 on one.
void split_images(ConvPlan& plan, const Geometry& g, uint32_t parts, uint64_t image_bytes) {
  parts = std::max<uint32_t>(1, std::min(parts, g.n));
  const uint32_t base = g.n / parts, extra = g.n % parts;
  for (uint32_t c = 0, n0 = 0; c < parts; ++c) {
    auto sh = std::make_unique<ConvShard>();
    sh->in_row0 = 0;
    sh->in_rows = g.h;
    sh->pad_top = g.pad_t;
    sh->pad_bottom = g.pad_b;
    sh->out_row0 = 0;
    sh->out_rows = g.oh;
    sh->n0 = n0;
    sh->count = base + (c < extra ? 1 : 0);
    sh->mb = sh->count;  // the largest divisor of the count within the budget (one image at least)
    while (sh->mb > 1 && (sh->count % sh->mb != 0 || sh->mb * image_bytes > tuning().onednn_call_bytes)) --sh->mb;
    n0 += sh->count;
    plan.shards.push_back(std::move(sh));
  }
}

// Output rows split into `parts` shards, each with the input rows it reads
// and its own top/bottom padding. Empty when a shard would read no input row
// or (transposed) would need negative top padding: then the caller uses one
// shard.
std::vector<ConvShard*> split_rows(ConvPlan& plan, const Geometry& g, uint32_t parts) {
  parts = std::max<uint32_t>(1, std::min(parts, g.oh));
  const uint32_t base = g.oh / parts, extra = g.oh % parts;
  const int64_t span = int64_t{g.dh} * (g.kh - 1);
  std::vector<ConvShard*> out;
  for (uint32_t c = 0, o0 = 0; c < parts; ++c) {
    const uint32_t rows = base + (c < extra ? 1 : 0);
    auto sh = std::make_unique<ConvShard>();
    if (parts == 1) {  // the whole problem as given
      sh->in_row0 = 0;
      sh->in_rows = g.h;
      sh->pad_top = g.pad_t;
      sh->pad_bottom = g.pad_b;
    } else if (!g.transposed) {
      const int64_t lo = int64_t{o0} * g.sh - g.pad_t, hi = int64_t{o0 + rows - 1} * g.sh - g.pad_t + span + 1;
      const int64_t in0 = std::max<int64_t>(lo, 0);
      int64_t in1 = std::min<int64_t>(hi, g.h);
      // A kernel shorter than its stride (a strided 1x1) leaves the last
      // rows of each stride unread; the shard reads them anyway (negative
      // bottom padding), rows * stride input rows for its output rows, the
      // shape oneDNN's 1x1 kernels take: with 27 rows for 14 outputs at
      // stride 2, oneDNN 2.6 on AVX2 ran ResNet-50's downsample in jit:avx2
      // at 69 GFLOP/s, with 28 in jit_1x1.
      if (span + 1 < g.sh) in1 = std::min<int64_t>(g.h, std::max(in1, lo + int64_t{rows} * g.sh));
      if (in1 <= in0) return {};
      sh->in_row0 = static_cast<uint32_t>(in0);
      sh->in_rows = static_cast<uint32_t>(in1 - in0);
      sh->pad_top = in0 - lo;
      sh->pad_bottom = hi - in1;
    } else {
      // Output row oy gets input rows iy with oy = iy * s - pad + ky * d.
      const int64_t first = int64_t{o0} + g.pad_t - span, last = int64_t{o0} + rows - 1 + g.pad_t;
      const int64_t in0 = std::max<int64_t>(0, first <= 0 ? 0 : (first + g.sh - 1) / g.sh);
      const int64_t in1 = std::min<int64_t>(g.h, last / g.sh + 1);
      if (in1 <= in0) return {};
      sh->in_row0 = static_cast<uint32_t>(in0);
      sh->in_rows = static_cast<uint32_t>(in1 - in0);
      sh->pad_top = int64_t{o0} + g.pad_t - in0 * g.sh;
      sh->pad_bottom = (in1 - in0 - 1) * g.sh - sh->pad_top + span + 1 - rows;
      if (sh->pad_top < 0) return {};
    }
    sh->out_row0 = o0;
    sh->out_rows = rows;
    sh->count = g.n;
    out.push_back(sh.get());
    plan.shards.push_back(std::move(sh));
    o0 += rows;
  }
  return out;
}

// Output channels split into `parts` shards of multiples of 16 channels,
// every shard covering all rows of every image. Empty when there are fewer
// such groups than parts.
std::vector<ConvShard*> split_channels(ConvPlan& plan, const Geometry& g, uint32_t parts) {
  constexpr uint32_t kGroup = 16;
  const uint32_t groups = (g.cout + kGroup - 1) / kGroup;
  if (parts < 2 || groups < parts) return {};
  std::vector<ConvShard*> out;
  for (uint32_t c = 0, g0 = 0; c < parts; ++c) {
    const uint32_t ng = groups / parts + (c < groups % parts ? 1 : 0);
    auto sh = std::make_unique<ConvShard>();
    sh->in_rows = g.h;
    sh->pad_top = g.pad_t;
    sh->pad_bottom = g.pad_b;
    sh->out_rows = g.oh;
    sh->count = g.n;
    sh->oc0 = g0 * kGroup;
    sh->ocs = std::min(g.cout, (g0 + ng) * kGroup) - sh->oc0;
    out.push_back(sh.get());
    plan.shards.push_back(std::move(sh));
    g0 += ng;
  }
  plan.split_channels = true;
  return out;
}

// The primitive descriptor of one shard shape: conv + bias -> activation ->
// (+ residual -> its activation).
dnnl::primitive_desc make_pd(ConvPlan& plan, const Geometry& g, const memory::desc& src_md, const memory::desc& w_md,
                             const memory::desc& b_md, const memory::desc& dst_md, int64_t pad_top,
                             int64_t pad_bottom) {
  auto d = [](int64_t v) { return static_cast<memory::dim>(v); };
  dnnl::post_ops po;
  // SiLU without a residual after it (or with one that Tessera adds on whole
  // shards, silu_before_own_residual) runs as Tessera's vector activation
  // over each shard's output, still in the cache: oneDNN 2.6's swish post-op
  // cost twice Tessera's SiLU (jit:avx2: about 1 ns per element in YOLO's
  // 1x1 convs; AVX-512, 80x80 128 -> 128: 0.321 against 0.273 ms in bfloat16,
  // 0.22 without an activation; YOLO 6% faster in all in bfloat16, 4% in
  // float32). Its sigmoid and tanh post-ops cost about what Tessera's do
  // (0.292 against 0.278 ms and 0.296 against 0.306), so they stay fused.
  const bool own_silu = is_plain_silu(g.activation) && (!plan.residual || (plan.own_residual && !plan.chunked)) &&
                        kernel_isa() != KernelIsa::kScalar;
  // Decided anew for each attempt's primitives: an earlier attempt's (with
  // Tessera's own residual pass) is not this one's.
  plan.post_activation.reset();
  if (own_silu || !onednn::append_activation(po, g.activation)) plan.post_activation = g.activation;
  if (plan.residual && !plan.own_residual) {
    // Tessera applies what oneDNN would run before the sum only on its own
    // pass over the residual (own_residual): conv2d fuses no residual after such an activation.
    if (plan.post_activation) {
      plan.residual_chain_missing = true;
      throw dnnl::error(dnnl_unimplemented, "an activation oneDNN lacks before the residual");
    }
    po.append_sum(1.f);
    plan.post_res_activation.reset();
    if (!onednn::append_activation(po, plan.res_activation)) plan.post_res_activation = plan.res_activation;
  }
  dnnl::primitive_attr attr;
  attr.set_post_ops(po);
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const memory::dims strides{d(g.sh), d(g.sw)}, dil{d(g.dh - 1), d(g.dw - 1)};
  const memory::dims pad_l{d(pad_top), d(g.pad_l)}, pad_r{d(pad_bottom), d(g.pad_r)};
  if (g.transposed) {
    dnnl::deconvolution_forward::desc dd(dnnl::prop_kind::forward_inference, dnnl::algorithm::deconvolution_direct,
                                         src_md, w_md, b_md, dst_md, strides, dil, pad_l, pad_r);
    return dnnl::deconvolution_forward::primitive_desc(dd, attr, plan.engine);
  }
  if (plan.winograd) {  // the kernel's own blocked activations, reordered per shard
    const memory::desc any_src(src_md.dims(), src_md.data_type(), memory::format_tag::any),
        any_dst(dst_md.dims(), dst_md.data_type(), memory::format_tag::any);
    dnnl::convolution_forward::desc wd(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_winograd,
                                       any_src, w_md, b_md, any_dst, strides, dil, pad_l, pad_r);
    return dnnl::convolution_forward::primitive_desc(wd, attr, plan.engine);
  }
  dnnl::convolution_forward::desc cd(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src_md,
                                     w_md, b_md, dst_md, strides, dil, pad_l, pad_r);
  dnnl::convolution_forward::primitive_desc pd(cd, attr, plan.engine);
  // oneDNN 2.6's bfloat16 brgconv reads past its buffers (a segfault) on
  // some kernels over 3x3 with input channels one short of a multiple of
  // 64 (past 64): 127 -> 62 7x7, 191 -> 33..96 6x6 and 7x7, 383 -> any 5x5,
  // 511 -> 62 5x5, on an AVX-512 BF16 Zen 5, not every output count
  // (3x3, and channels one short of 32 or 64 by other amounts, ran).
  // Those take the next implementation oneDNN lists (its jit kernel).
  if (src_md.data_type() == memory::data_type::bf16 && g.cin > 64 && g.cin % 64 == 63 && g.kh * g.kw > 9)
    while (std::string_view(pd.impl_info_str()).starts_with("brg") && pd.next_impl()) {
    }
  return pd;
}

}  // namespace

Geometry kernel_geometry(const Problem& pr) {
  Geometry g = pr.g;
  if (pr.cout_padded) g.cout = pr.cout_padded;
  return g;
}

namespace {

// The whole problem's primitive with oneDNN's choice of weight layout.
dnnl::primitive_desc whole_problem(ConvPlan& plan, const Problem& pr) {
  const Geometry g = kernel_geometry(pr);
  memory::desc w_md = weights_user_desc(g, pr.kernel);
  w_md = memory::desc(w_md.dims(), dnnl_type(pr.kernel), memory::format_tag::any);
  return make_pd(plan, g, rows_desc(g.n, g.h, g.w, g.cin, pr.kernel), w_md,
                 memory::desc({static_cast<memory::dim>(g.cout)}, memory::data_type::f32, memory::format_tag::x),
                 rows_desc(g.n, g.oh, g.ow, g.cout, pr.dst_dtype), g.pad_t, g.pad_b);
}

// The packed weight layout: the one oneDNN picks for the whole problem, so
// the prepared weights depend only on what their key names (geometry, dtypes,
// a residual or not, Winograd or not), not on how a plan splits the work.
// Except for row shards that run only oneDNN's reference kernel on it (see
// compile's attempts): their own layout, the same on every plan of the key
// on a device (the shards follow from the geometry and the worker count).
memory::desc whole_problem_weights(ConvPlan& plan, const Problem& pr) { return whole_problem(plan, pr).weights_desc(); }

// The weight layout oneDNN picks for the first of the plan's shards.
memory::desc first_shard_weights(ConvPlan& plan, const Problem& pr) {
  const Geometry g = kernel_geometry(pr);
  const ConvShard& sh = *plan.shards.at(0);
  const memory::desc any(weights_user_desc(g, pr.kernel).dims(), dnnl_type(pr.kernel), memory::format_tag::any);
  const memory::desc bias({static_cast<memory::dim>(g.cout)}, memory::data_type::f32, memory::format_tag::x);
  return make_pd(plan, g, rows_desc(sh.mb, sh.in_rows, g.w, g.cin, pr.kernel), any, bias,
                 rows_desc(sh.mb, sh.out_rows, g.ow, g.cout, pr.dst_dtype), sh.pad_top, sh.pad_bottom)
      .weights_desc();
}

// ConvPlan::chunked: a chunk's output (and its input) stays in the L2
// beside the weights: onednn_chunk_output_bytes (256 KB) of output rows per chunk. ResNet-50's stage-1
// 64->256 1x1 with its residual, batch 8, two threads, buffers from DRAM,
// alternated: oneDNN's sum post-op 3.7-3.9 ms, chunks of 1 to 8 rows
// 2.9-3.1 ms, 14 rows (800 KB) 3.6.

// The chunk and tail primitives of every shard (1x1 without padding: a
// chunk is any run of output pixels of one image, read from dense input
// rows, the strided ones once gathered).
void build_chunk_primitives(ConvPlan& plan, const Problem& pr) {
  const Geometry g = kernel_geometry(pr);
  Geometry unit = g;  // the chunk's problem: gathered pixels at stride 1
  unit.sh = unit.sw = 1;
  std::map<uint64_t, std::optional<size_t>> by_pixels;
  const memory::desc b_md({static_cast<memory::dim>(g.cout)}, memory::data_type::f32, memory::format_tag::x);
  // The primitive for chunks of `pixels`, unless only oneDNN's reference
  // kernel takes the packed weights at that size.
  auto prim = [&](uint64_t pixels) -> std::optional<size_t> {
    auto [it, fresh] = by_pixels.try_emplace(pixels);
    if (fresh) {
      const auto rows = [&](uint32_t c, DataType t) { return rows_desc(1, 1, static_cast<uint32_t>(pixels), c, t); };
      dnnl::primitive_desc pd =
          make_pd(plan, unit, rows(g.cin, pr.kernel), plan.packing.at(0).desc, b_md, rows(g.cout, pr.dst_dtype), 0, 0);
      if (!std::string_view(pd.impl_info_str()).starts_with("ref")) {
        it->second = plan.prims.size();
        plan.pds.push_back(pd);
        plan.prims.emplace_back(pd);
      }
    }
    return it->second;
  };
  for (auto& sh : plan.shards) {
    sh->ocs = g.cout;
    const uint64_t pixels = uint64_t{sh->out_rows} * g.ow, row_bytes = uint64_t{g.cout} * sizeof(float);
    // The packed weights are the whole problem's (they depend only on the
    // weights' key), and oneDNN picks its weight blocking by problem size:
    // fewer, larger chunks until its kernel takes them (ResNet-50's
    // 512->1024 downsample wants 64 output channels per block on 64 pixels,
    // 32 as a whole and on 196).
    bool found = false;
    for (uint64_t chunks = std::max<uint64_t>(
             1, (pixels * row_bytes + tuning().onednn_chunk_output_bytes - 1) / tuning().onednn_chunk_output_bytes);
         chunks >= 1 && !found; --chunks) {
      const uint64_t chunk = (pixels + chunks - 1) / chunks, tail = pixels - (chunks - 1) * chunk;
      const std::optional<size_t> a = prim(chunk), b = prim(tail);
      if (a && b) {
        found = true;
        sh->chunk = static_cast<uint32_t>(chunk);
        sh->tail = static_cast<uint32_t>(tail);
        sh->primitive = *a;
        sh->tail_primitive = *b;
      }
    }
    if (!found) throw dnnl::error(dnnl_unimplemented, "no pixel chunk runs on the packed weights");
    const auto &pd = plan.pds[sh->primitive], &tail_pd = plan.pds[sh->tail_primitive];
    sh->stream = dnnl::stream(plan.engine);
    sh->scratch = make_aligned_bytes(std::max(pd.scratchpad_desc().get_size(), tail_pd.scratchpad_desc().get_size()));
    sh->src_mem = memory(pd.src_desc(), plan.engine, DNNL_MEMORY_NONE);
    sh->dst_mem = memory(pd.dst_desc(), plan.engine, DNNL_MEMORY_NONE);
    sh->scratch_mem = memory(pd.scratchpad_desc(), plan.engine, sh->scratch.get());
    sh->tail_src_mem = memory(tail_pd.src_desc(), plan.engine, DNNL_MEMORY_NONE);
    sh->tail_dst_mem = memory(tail_pd.dst_desc(), plan.engine, DNNL_MEMORY_NONE);
    sh->tail_scratch_mem = memory(tail_pd.scratchpad_desc(), plan.engine, sh->scratch.get());
    sh->weights_mem = memory(pd.weights_desc(), plan.engine, DNNL_MEMORY_NONE);
    sh->bias_mem = memory(b_md, plan.engine, DNNL_MEMORY_NONE);
    if (plan.stage_src || g.sh > 1 || g.sw > 1)
      sh->src_stage = make_aligned_bytes(uint64_t{sh->chunk} * g.cin * element_size(pr.kernel));
    if (plan.own_residual || plan.cout_padded) sh->dst_stage = make_aligned_bytes(uint64_t{sh->chunk} * row_bytes);
    if (plan.cout_padded && plan.residual && plan.stage_res)
      sh->res_stage = make_aligned_bytes(uint64_t{sh->chunk} * plan.cout * sizeof(float));
  }
}

// Builds one primitive per distinct shard shape. Channel shards and
// Winograd shards (whose weight layout depends on the shard's shape) pick
// their own weight layouts, and `plan.packing` gets one slice per primitive;
// other shards read the one slice already in `plan.packing`.
void build_primitives(ConvPlan& plan, const Problem& pr) {
  const Geometry& g = pr.g;
  const bool own_weights = plan.split_channels || plan.winograd;
  std::map<std::array<int64_t, 7>, size_t> by_shape;
  std::vector<uint64_t> offsets;  // per primitive
  if (plan.chunked) return build_chunk_primitives(plan, pr);
  for (auto& sh : plan.shards) {
    if (sh->ocs == 0) sh->ocs = g.cout;
    const std::array<int64_t, 7> shape{sh->mb,         sh->out_rows, sh->in_rows, sh->pad_top,
                                       sh->pad_bottom, sh->oc0,      sh->ocs};
    auto src_md = rows_desc(sh->mb, sh->in_rows, g.w, g.cin, pr.kernel);
    auto dst_md = rows_desc(sh->mb, sh->out_rows, g.ow, sh->ocs, pr.dst_dtype);
    memory::desc b_md({static_cast<memory::dim>(sh->ocs)}, memory::data_type::f32, memory::format_tag::x);
    memory::desc w_md = own_weights ? memory::desc({static_cast<memory::dim>(sh->ocs), static_cast<memory::dim>(g.cin),
                                                    static_cast<memory::dim>(g.kh), static_cast<memory::dim>(g.kw)},
                                                   dnnl_type(pr.kernel), memory::format_tag::any)
                                    : plan.packing.at(0).desc;
    auto [it, fresh] = by_shape.try_emplace(shape, plan.prims.size());
    if (fresh) {
      plan.pds.push_back(make_pd(plan, g, src_md, w_md, b_md, dst_md, sh->pad_top, sh->pad_bottom));
      plan.prims.emplace_back(plan.pds.back());
      offsets.push_back(plan.packed_bytes);
      if (own_weights) {
        plan.packing.push_back({sh->oc0, sh->ocs, plan.pds.back().weights_desc(), plan.packed_bytes});
        plan.packed_bytes += (plan.pds.back().weights_desc().get_size() + 63) / 64 * 64;
      }
    }
    sh->primitive = it->second;
    const auto& pd = plan.pds[sh->primitive];
    if (own_weights) sh->weights_offset = offsets[sh->primitive];
    sh->stream = dnnl::stream(plan.engine);
    sh->scratch = make_aligned_bytes(pd.scratchpad_desc().get_size());
    sh->src_mem = memory(src_md, plan.engine, DNNL_MEMORY_NONE);
    sh->dst_mem = memory(dst_md, plan.engine, DNNL_MEMORY_NONE);
    sh->weights_mem = memory(pd.weights_desc(), plan.engine, DNNL_MEMORY_NONE);
    sh->bias_mem = memory(b_md, plan.engine, DNNL_MEMORY_NONE);
    sh->scratch_mem = memory(pd.scratchpad_desc(), plan.engine, sh->scratch.get());
    if (plan.winograd) {
      sh->wino_src = make_aligned_bytes(pd.src_desc().get_size());
      sh->wino_dst = make_aligned_bytes(pd.dst_desc().get_size());
      sh->wino_src_mem = memory(pd.src_desc(), plan.engine, sh->wino_src.get());
      sh->wino_dst_mem = memory(pd.dst_desc(), plan.engine, sh->wino_dst.get());
      sh->to_wino = dnnl::reorder(sh->src_mem, sh->wino_src_mem);
      sh->from_wino = dnnl::reorder(sh->wino_dst_mem, sh->dst_mem);
    }
    const uint64_t out_bytes = uint64_t{sh->mb} * sh->out_rows * g.ow * sh->ocs * element_size(pr.dst_dtype);
    if (plan.stage_src)
      sh->src_stage = make_aligned_bytes(uint64_t{sh->mb} * sh->in_rows * g.w * g.cin * element_size(pr.kernel));
    if (plan.stage_dst || plan.split_channels || plan.own_residual) sh->dst_stage = make_aligned_bytes(out_bytes);
  }
}

// onednn_min_pixels_to_split: output maps under this many pixels per image
// run as one shard (see compile_onednn's splits): splitting 7x7 maps into 3- and 4-row shards made oneDNN's brgconv_1x1
// take ~180 ms per call on MobileNetV2's 320->1280 conv (measured here), against well under 1 ms whole.

// Row shards of oneDNN's kernels: one per worker, and on large maps up to
// onednn_row_shards_per_worker per worker of at least onednn_min_pixels_per_row_shard output
// pixels each, so that a worker whose vCPU stalls hands shards to the other.
// YOLO batch 1, device-only, three alternated pairs: 151 / 164 / 155 ms ->
// 119 / 150 / 151 ms (its 1x1 convs run on oneDNN's jit_1x1 on AVX2 CPUs).
// A strided stem (fewer than 16 input channels) keeps one shard per worker:
// per-launch medians at batch 1, seven alternated pairs, ResNet-50's 7x7/2
// stem took 0.80-0.90 ms in 8 shards against 0.73-0.77 in 2, YOLO's 6x6/2
// 2.81-3.14 against 2.71-2.93. The UNet's stride-1 3x3 on its 3-channel
// 480x640 input did no better in 2 (2.78-3.24 against 2.84-3.99 ms), and
// keeps its 8.
uint32_t row_shards(const Geometry& g, uint32_t threads) {
  if (g.cin < tuning().onednn_min_cin_for_row_shards && (g.sh > 1 || g.sw > 1)) return threads;
  const uint64_t fit = uint64_t{g.oh} * g.ow / tuning().onednn_min_pixels_per_row_shard / threads * threads;
  return static_cast<uint32_t>(
      std::clamp<uint64_t>(fit, threads, uint64_t{threads} * tuning().onednn_row_shards_per_worker));
}

}  // namespace

// Whether a conv on a device with `threads` workers splits its output
// channels over them. Each shard then reads the whole input and its slice of
// the weights; a row split reads all the weights and its rows. So channels
// when the weights outweigh an image's input (cout * kh * kw > h * w, the
// late layers with small maps and many channels), the batch is too small to
// split by image, and either the weights are too many to sit in every
// worker's cache (over onednn_min_weights_to_split_channels: 256 KB of
// float32, under which every worker keeps all of them in its own L2, so a
// row split costs no extra weight traffic) or the map too small to split by
// rows (onednn_min_pixels_to_split): a channel shard
// writes a column slice of each output row, which oneDNN cannot write in
// place, so it stages its output and copies it out (9.5% of MobileNetV2's
// conv time at batch 1 when its 14x14 pointwise convs split channels; p50
// 4.0-5.5 -> 3.6-4.7 ms with them split by rows, six alternating runs).
// A stride-1 1x1 conv with a residual splits rows wherever the map allows:
// its channel shards also gather their residual columns into the stage
// before oneDNN adds them. ResNet-50 batch 1, per-launch medians, three
// alternated pairs: the 14x14 256->1024 convs with their residual
// 0.30-0.38 -> 0.27-0.34 ms each, the rest unchanged.
// Plain convolutions only.
bool splits_channels(const Conv2dGeometry& g, bool transposed, uint32_t threads, bool residual) {
  const bool many_weights = uint64_t{g.in_channels} * g.out_channels * g.kernel_h * g.kernel_w >
                            tuning().onednn_min_weights_to_split_channels;
  const bool few_rows = uint64_t{g.output_height} * g.output_width < tuning().onednn_min_pixels_to_split;
  const bool pointwise_residual = residual && g.kernel_h == 1 && g.kernel_w == 1 && g.stride_h == 1 && g.stride_w == 1;
  return threads > 1 && g.batch < threads && !transposed && g.groups == 1 && g.out_channels >= 32 * threads &&
         uint64_t{g.out_channels} * g.kernel_h * g.kernel_w > uint64_t{g.input_height} * g.input_width &&
         (few_rows || (many_weights && !pointwise_residual));
}

namespace {

// On AMX, a bfloat16 3x3 conv of stride 2 with at least
// onednn_amx_strided_row_split_pixels output pixels splits rows. oneDNN's AMX brgconv
// ran YOLO's two 40x40 -> 20x20 convs 9-16% faster on half the rows, all
// output channels, than on all rows, half the channels. Measured with
// standalone SiLU convs, two threads, four alternated rounds: 256 -> 512
// 1.67-1.80 against 1.83-2.09 ms, 256 -> 256 0.83-0.96 against 0.99-1.09.
// At 14x14 outputs and below the channel split kept its lead: ResNet-50's
// 28 -> 14 256 -> 256 conv 0.35-0.37 against 0.36-0.38 ms, its 14 -> 7
// 512 -> 512 conv 0.74-0.80 against 1.43-1.56 in three of four rounds.
// float32 kernels keep the channel split: the 256 -> 512 conv took
// 4.37-5.16 ms on channels against 5.11-5.32 on rows.
bool amx_strided_rows(const Geometry& g, DataType kernel) {
  return on_amx(kernel) && g.kh == 3 && g.kw == 3 && g.sh == 2 && g.sw == 2 &&
         uint64_t{g.oh} * g.ow >= tuning().onednn_amx_strided_row_split_pixels;
}
bool splits_channels(const Geometry& g, uint32_t threads, bool residual, DataType kernel) {
  if (amx_strided_rows(g, kernel)) return false;
  Conv2dGeometry c;
  c.batch = g.n, c.input_height = g.h, c.input_width = g.w, c.in_channels = g.cin, c.out_channels = g.cout;
  c.kernel_h = g.kh, c.kernel_w = g.kw, c.groups = g.groups, c.output_height = g.oh, c.output_width = g.ow;
  c.stride_h = g.sh, c.stride_w = g.sw;
  return conv::splits_channels(c, g.transposed, threads, residual);
}

// Output rows per image from onednn_own_residual_image_bytes on (ResNet-50's
// 56x56x256 maps), or over the whole batch from onednn_own_residual_batch_bytes on, have their
// residual added by Tessera (ConvPlan::own_residual). oneDNN's sum post-op
// reads the residual as it stores each block of output channels, a strided
// walk over rows, slow once the residual is in DRAM; Tessera's pass streams
// it. ResNet-50 batch 8, per-launch medians inside the model, three
// alternated pairs: the stage-1 64->256 1x1 with its residual 3.9-4.0 ->
// 3.0-3.3 ms; the 28x28x512 maps (12.8 MB at batch 8) 2.77-3.39 -> 2.42-2.90
// ms each, six pairs. At batch 1 the same maps (1.6 MB, still in the cache
// from the conv that wrote the residual) lost (0.26 -> 0.28 ms), as did the
// 14x14x1024 maps at either batch size (0.32 -> 0.37 ms at batch 1, mixed
// at batch 8): they stay on the post-op. Since micro-batching runs stage 1
// two images at a time (6.4 MB of 56x56x256 rows, in the L3), its 64->256
// convs are faster on the post-op too (onednn_own_residual_image_bytes 2 -> 4 MB; sums
// of the three launches per batch, alternated builds: batch 8 7.3-7.9 ->
// 7.0-7.8 ms in 4 of 5 rounds, batch 1 0.95-0.97 -> 0.87-0.89 ms in 3 of 4).
// Which 1x1 convs run in pixel chunks (ConvPlan::chunked): strided ones
// over dense rows (ResNet-50's downsamples at batch 8, per-launch medians in
// the model, three alternated pairs: 4.5-4.9 against 4.8-5.1 ms on oneDNN's
// strided kernel; batch 1 unchanged), and those with a residual and large
// maps (above), float32
// rows only (a bfloat16 stage would round the conv's output before the add,
// which oneDNN's post-op does not). Measured on AVX-512 CPUs only. A
// residual in chunks is always added by Tessera's pass.
struct Chunking {
  bool chunked = false, own_residual = false;
};
Chunking chunking(const Problem& pr, const ConvPlan& plan) {
  const Geometry& g = pr.g;
  const bool pointwise = kernel_isa() == KernelIsa::kAvx512 && cpu::select_float_math().fused != nullptr &&
                         !g.transposed && g.groups == 1 && g.kh == 1 && g.kw == 1 && g.pad_t == 0 && g.pad_b == 0 &&
                         g.pad_l == 0 && g.pad_r == 0 && !plan.winograd && !plan.tile_dst && !plan.stage_dst &&
                         pr.kernel == DataType::FLOAT32 && plan.out_type == DataType::FLOAT32 &&
                         (!plan.residual || (!plan.stage_res && plan.res_type == DataType::FLOAT32));
  const bool strided = (g.sh > 1 || g.sw > 1) && !plan.stage_src;
  const uint64_t image_bytes = uint64_t{g.oh} * g.ow * g.cout * sizeof(float);
  const bool large = image_bytes >= tuning().onednn_own_residual_image_bytes ||
                     image_bytes * g.n >= tuning().onednn_own_residual_batch_bytes;
  if (!pointwise || !(strided || (plan.residual && large))) return {};
  return {true, plan.residual};
}

// Whole shards (not chunked, not split by channels) of a conv with SiLU and a
// residual on oneDNN's bfloat16 kernels: the conv writes float32 rows to the
// shard's stage, which stays in the cache, Tessera's SiLU runs on it (see make_pd) and one fused
// pass writes res_activation(stage + residual) to the output. oneDNN 2.6's
// swish post-op before its sum post-op is slow on its AMX kernels: in YOLO at
// LoFi the 160x160 32 -> 32 3x3 conv with its residual took 1.5-1.6 ms
// against 0.74 ms without the residual (a three-conv model, kernel-only);
// with this pass, 0.60-0.92 against 0.99-1.18 ms, three alternated builds.
// The float32 kernels keep their post-ops: YOLO at HiFi4 came out the same
// or a little slower with the pass (the 160x160 conv's launches 1.69-2.41
// against 1.65-2.12 ms, four alternated rounds).
// The output's and the residual's rows may be float32 or bfloat16 (the
// kernel's float32 rows then round as the pass stores them), dense either way.
bool silu_before_own_residual(const Problem& pr, const ConvPlan& plan, const TensorAccess& dst,
                              const TensorAccess* res) {
  return plan.residual && is_plain_silu(pr.g.activation) && kernel_isa() != KernelIsa::kScalar &&
         pr.kernel == DataType::BFLOAT16 && cpu::select_float_math().fused != nullptr && !plan.winograd &&
         !plan.tile_dst && !plan.split_channels && !plan.concat && !pr.cout_padded &&
         plan.out_type == DataType::FLOAT32 && is_row_dtype(plan.dst_type) && dense_row_stride(dst) != 0 && res &&
         dense_row_stride(*res) != 0 && is_row_dtype(plan.res_type);
}

}  // namespace

StatusOr<Program> compile_onednn(const Device& device, const Problem& pr, const TensorAccess& src,
                                 const TensorAccess& dst, const TensorAccess* res) {
  // Primitives are built for the single thread that runs each shard.
  const onednn::OmpSingleThread single_thread;
  auto plan = std::make_shared<ConvPlan>();
  if (pr.residual) {
    plan->residual = true;
    plan->res_activation = pr.residual->activation;
    plan->res_type = pr.residual->tensor.dtype();
    plan->stage_res = res == nullptr || dense_row_stride(*res) == 0 || plan->res_type != pr.dst_dtype;
  }
  const Geometry& g = pr.g;
  plan->out_type = pr.dst_dtype;
  plan->tile_type = pr.output.dtype;
  plan->tile_dst = pr.output.layout == Layout::TILE;
  plan->round_to_bf16 = plan->tile_dst && pr.dst_precision != pr.dst_dtype;
  plan->cout = g.cout;
  plan->batch = g.n;
  plan->in_h = g.h;
  plan->in_w = g.w;
  plan->out_h = g.oh;
  plan->out_w = g.ow;
  plan->tile_src = pr.input.layout == Layout::TILE;
  plan->concat = pr.concat;
  plan->src_type = pr.input.dtype;
  plan->in_type = pr.kernel;
  plan->cin = g.cin;
  plan->dst_type = pr.output.dtype;
  plan->stage_src = plan->tile_src || dense_row_stride(src) == 0 || pr.input.dtype != pr.kernel || pr.concat;
  plan->stage_dst = plan->tile_dst || dense_row_stride(dst) == 0 || pr.output.dtype != pr.dst_dtype;
  // A shard per worker thread, each keeping its part in its own cache: a
  // batch splits by image; otherwise see splits_channels; otherwise rows
  // (several shards per worker on large maps, see row_shards).
  const uint32_t threads = static_cast<uint32_t>(device.workers().num_threads());
  if (pr.winograd()) {  // only where oneDNN has a Winograd kernel for the whole problem
    plan->winograd = true;
    const Status whole = guard("compiling the convolution", [&] {
      if (!std::string_view(whole_problem(*plan, pr).impl_info_str()).starts_with("jit"))
        throw dnnl::error(dnnl_unimplemented, "no Winograd kernel");
    });
    plan->winograd = whole.ok();
  }
  enum class Split { kImages, kChannels, kRows, kWhole };
  std::vector<Split> order;
  if (threads > 1 && g.n >= threads) order.push_back(Split::kImages);
  if (!plan->tile_dst && splits_channels(g, threads, plan->residual, pr.kernel)) order.push_back(Split::kChannels);
  if (threads > 1 && uint64_t{g.oh} * g.ow >= tuning().onednn_min_pixels_to_split) order.push_back(Split::kRows);
  // Channels where the splits above were not chosen or fail (a row shard
  // only oneDNN's reference kernel runs: Inception-v3's 17x17 768 -> 192 1x1
  // convs ran whole, on one worker, 0.36 ms, where 768 -> 128 split its rows
  // in 0.25): any split over the workers beats none.
  if (std::find(order.begin(), order.end(), Split::kChannels) == order.end() && !plan->tile_dst && threads > 1 &&
      g.n < threads && !g.transposed && g.groups == 1 && g.cout >= 32 * threads)
    order.push_back(Split::kChannels);
  order.push_back(Split::kWhole);
  Status built;
  // Each split in pixel chunks where chunking applies, then without (padded
  // output channels only in chunks).
  const Chunking chunks = pr.cout_padded ? Chunking{true, plan->residual} : chunking(pr, *plan);
  plan->stride_h = g.sh;
  plan->stride_w = g.sw;
  plan->cout_padded = pr.cout_padded;
  // A row split whose shards run only oneDNN's reference kernel on the whole
  // problem's weight layout is tried again with the shards' own layout
  // (shard_layout). oneDNN's bfloat16 brgconv_1x1 blocks MobileNetV2's 14x14
  // 96 -> 576 convs by 64 output channels and their 7x14 row shards by 48,
  // and takes neither layout for the other shape: the convs fell back to one
  // shard, on one worker, no faster than float32 on two (three launches
  // 0.133-0.135 -> 0.069-0.071 ms, alternated builds).
  struct Attempt {
    Split split;
    bool chunked, shard_layout;
  };
  std::vector<Attempt> attempts;
  for (Split split : order) {
    if (chunks.chunked && split != Split::kChannels) attempts.push_back({split, true, false});
    if (!pr.cout_padded) attempts.push_back({split, false, false});
    if (!pr.cout_padded && split == Split::kRows && !plan->winograd) attempts.push_back({split, false, true});
  }
  for (auto [split, chunked, shard_layout] : attempts) {
    plan->chunked = false;  // the packing is the whole problem's, with the residual's sum post-op
    plan->own_residual = false;
    plan->shards.clear();
    plan->pds.clear();
    plan->prims.clear();
    plan->packing.clear();
    plan->packed_bytes = 0;
    plan->split_channels = false;
    built = guard("compiling the convolution", [&] {
      bool made = true;
      if (split == Split::kChannels) {
        made = !split_channels(*plan, g, threads).empty();
      } else {
        if (!plan->winograd) {
          const memory::desc w = whole_problem_weights(*plan, pr);
          plan->packing.push_back({0, kernel_geometry(pr).cout, w, 0});
          plan->packed_bytes = w.get_size();
        }
        plan->chunked = chunked;
        plan->own_residual = chunked ? chunks.own_residual : silu_before_own_residual(pr, *plan, dst, res);
        const uint64_t image_bytes = uint64_t{g.h} * g.w * g.cin * element_size(pr.kernel) +
                                     uint64_t{g.oh} * g.ow * g.cout * element_size(pr.dst_dtype);
        if (split == Split::kImages)
          split_images(*plan, g, threads, image_bytes);
        else if (split == Split::kRows)
          made = !split_rows(*plan, g, row_shards(g, threads)).empty();
        else
          split_rows(*plan, g, 1);
        if (made && shard_layout) {
          const memory::desc w = first_shard_weights(*plan, pr);
          plan->packing.at(0).desc = w;
          plan->packed_bytes = w.get_size();
        }
      }
      if (!made) throw dnnl::error(dnnl_unimplemented, "the split leaves a shard without work");
      build_primitives(*plan, pr);
      // A shard shape only oneDNN's reference kernel runs costs more than the split gains.
      if (split != Split::kWhole)
        for (const auto& pd : plan->pds)
          if (std::string_view(pd.impl_info_str()).starts_with("ref"))
            throw dnnl::error(dnnl_unimplemented, "a shard runs on the reference kernel");
    });
    if (built.ok()) break;
  }
  if (!built.ok() && plan->residual_chain_missing)
    return unimplemented_error("{}: oneDNN's kernels cannot add the residual after {} here", pr.g.descriptor,
                               activation_name(pr.g.activation));
  TS_RETURN_IF_ERROR(built);
  Program prog;
  prog.kernel = onednn_conv_kernel;
  // Suffixes: "oc" for channel shards, "_chunked" for pixel chunks
  // (ConvPlan::chunked).
  prog.kernel_name =
      fmt::format("{}_{}__onednn_{}_x{}{}{}", short_dtype_name(pr.kernel), g.transposed ? "conv_transpose2d" : "conv2d",
                  plan->pds[0].impl_info_str(), plan->shards.size(), plan->split_channels ? "oc" : "",
                  plan->chunked ? "_chunked" : "");
  prog.num_tasks = static_cast<uint32_t>(plan->shards.size());
  prog.grain = 1;
  prog.plan = plan;
  return prog;
}

}  // namespace tessera::conv
