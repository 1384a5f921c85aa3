#include "tessera/ops/matmul.h"

#include <omp.h>

#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <utility>

#include "cpu/gemv_kernels.h"
#include "cpu/rows.h"
#include "onednn_util.h"
#include "op_common.h"
#include "tessera/base/aligned.h"
#include "tessera/base/cpu_features.h"
#include "tessera/ops/eltwise.h"

namespace tessera {

struct PackedMatmulWeights::Impl {
  std::shared_ptr<void> plan;  // the program's plan it was packed for
  // Device memory (one DRAM shard: contiguous), so that launches still
  // queued when it goes write and read the device's memory, as any tensor's.
  Tensor bytes;
};

namespace {

using dnnl::memory;

constexpr int kMaxBatchDims = 6;

// One block of rows of every batch's output, run by one worker thread with
// its own primitive arguments, scratch and staging (see conv/onednn_run.cc).
struct MatmulBlock {
  uint32_t row0 = 0, rows = 0;
  uint32_t col0 = 0, cols = 0;  // a block of output columns (few rows, as a classifier's 1 x K)
  size_t primitive = 0;
  uint64_t b_offset = 0;  // with packed b: its packed columns' place in PackedMatmulWeights' bytes
  dnnl::stream stream;
  memory a_mem, b_mem, bias_mem, dst_mem, scratch_mem;
  std::shared_ptr<std::byte[]> scratch, a_stage, b_stage, bias_stage, dst_stage;
  std::mutex mu;
};

// The problem's sizes and the batch broadcast (operand batch index = sum of
// output batch coordinates times the operand's stride, 0 where it broadcasts).
struct MatmulGeometry {
  DataType out_type = DataType::FLOAT32;
  uint32_t m = 0, k = 0, n = 0, b_rows = 0;  // b_rows: K, or N when transposed
  uint32_t num_batch_dims = 0, batches = 1;
  uint32_t batch_dims[kMaxBatchDims] = {}, a_stride[kMaxBatchDims] = {}, b_stride[kMaxBatchDims] = {};
  // LoFi on an AMX CPU (lofi_lowers): oneDNN's path computes on bfloat16
  // operands, staged from float32 ones; the gemv path stays exact.
  bool lofi = false;
};

// Whether `params` let float32 operands compute in bfloat16 (matmul.h): LoFi,
// a CPU with AMX and oneDNN's bfloat16 kernels, and a float32 operand.
bool lofi_lowers(const MatmulParams& params, DataType a, DataType b) {
  return params.compute_kernel_config && onednn::lofi_computes_in_bf16(params.compute_kernel_config->math_fidelity) &&
         (a == DataType::FLOAT32 || b == DataType::FLOAT32);
}

struct MatmulPlan : MatmulGeometry {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  std::vector<dnnl::matmul::primitive_desc> pds;
  std::vector<dnnl::matmul> prims;
  std::vector<std::unique_ptr<MatmulBlock>> blocks;
  bool stage_a = false, stage_b = false, stage_bias = false, stage_dst = false;
  // Leading dimensions (elements between rows) of a, b and dst as read in
  // place: padded row pages are read with their padding skipped, not copied.
  uint64_t lda = 0, ldb = 0, ldd = 0;
  bool transpose_b = false;
  // The operands' dtype and the one the kernel computes on
  // (onednn::kernel_type): staging converts when they differ.
  DataType in_type = DataType::FLOAT32, b_type = DataType::FLOAT32, kernel_in = DataType::FLOAT32;
  DataType bias_type = DataType::FLOAT32, kernel_bias = DataType::FLOAT32;
  uint32_t bias_bytes = 4;  // bytes per bias value in the kernel
  // oneDNN 2.6 has no float32 -> bfloat16 matmul: it writes float32 into the
  // staging buffer, and scattering converts (also when an activation runs
  // after the primitive).
  DataType kernel_out = DataType::FLOAT32;
  std::optional<UnaryWithParam> post_activation;
  // Few rows against transposed float32 weights: Tessera's gemv kernel
  // instead of oneDNN (cpu/gemv_kernels.h), over blocks of gemv_cols columns.
  bool gemv = false;
  uint32_t gemv_cols = 0;
  // b packed once (pack_matmul_weights): each block reads its primitive's
  // weights layout at b_offset of packed_bytes.
  bool packed_b = false;
  uint64_t packed_bytes = 0;
  std::vector<size_t> pack_regions;  // a block per packed copy
};

struct MatmulArgs {
  TensorAccess a, b, bias, dst;
  const std::byte* b_packed;  // with plan->packed_b
  bool has_bias;
  MatmulPlan* plan;
};

std::byte* row_ptr(const TensorAccess& t, uint64_t row) { return t.base + row * t.uniform_row_stride(); }

Status run_block(const MatmulArgs& g, MatmulBlock& blk) {
  const MatmulPlan& p = *g.plan;
  std::lock_guard<std::mutex> lock(blk.mu);
  omp_set_num_threads(1);
  std::byte* bias = nullptr;
  if (g.has_bias) {
    bias = p.stage_bias ? blk.bias_stage.get() : g.bias.base;
    if (p.stage_bias) onednn::gather_rows(g.bias, p.bias_type, 0, g.bias.rows, 0, g.bias.cols, bias, p.kernel_bias);
  }
  // The operand rows last staged: a broadcast operand (the UNet's upconv
  // rows, once per kernel row; weights shared by every batch) is staged once
  // per run of batches that read it.
  uint64_t staged_a = UINT64_MAX, staged_b = UINT64_MAX;
  for (uint32_t i = 0; i < p.batches; ++i) {
    uint32_t ia = 0, ib = 0;
    ops::broadcast_indices(i, p.num_batch_dims, p.batch_dims, p.a_stride, p.b_stride, &ia, &ib);
    const uint64_t a0 = uint64_t{ia} * p.m + blk.row0, b0 = uint64_t{ib} * p.b_rows,
                   d0 = uint64_t{i} * p.m + blk.row0;
    std::byte* a = p.stage_a ? blk.a_stage.get() : row_ptr(g.a, a0);
    std::byte* b = p.stage_b ? blk.b_stage.get() : row_ptr(g.b, b0);
    std::byte* d = p.stage_dst ? blk.dst_stage.get() : row_ptr(g.dst, d0) + uint64_t{blk.col0} * g.dst.unit_bytes;
    if (p.stage_a && std::exchange(staged_a, a0) != a0)
      onednn::gather_rows(g.a, p.in_type, a0, a0 + blk.rows, 0, g.a.cols, a, p.kernel_in);
    if (p.stage_b && std::exchange(staged_b, b0) != b0)
      onednn::gather_rows(g.b, p.b_type, b0, b0 + p.b_rows, 0, g.b.cols, b, p.kernel_in);
    // The block's first column of b: a column offset, or that many stored rows down when transposed.
    b += uint64_t{blk.col0} * (p.transpose_b ? p.ldb : 1) * element_size(p.kernel_in);
    if (p.packed_b) b = const_cast<std::byte*>(g.b_packed) + blk.b_offset;
    TS_RETURN_IF_ERROR(onednn::guard("matmul", "running", [&] {
      blk.a_mem.set_data_handle(a);
      blk.b_mem.set_data_handle(b);
      blk.dst_mem.set_data_handle(d);
      dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, blk.a_mem.get()},
                                 {DNNL_ARG_WEIGHTS, blk.b_mem.get()},
                                 {DNNL_ARG_DST, blk.dst_mem.get()},
                                 {DNNL_ARG_SCRATCHPAD, blk.scratch_mem.get()},
                                 {DNNL_ARG_BIAS, nullptr}};
      if (bias) {
        blk.bias_mem.set_data_handle(bias + uint64_t{blk.col0} * p.bias_bytes);
        args[4].memory = blk.bias_mem.get();
      }
      dnnl::error::wrap_c_api(
          dnnl_primitive_execute(p.prims[blk.primitive].get(), blk.stream.get(), bias ? 5 : 4, args), "execute");
      blk.stream.wait();
    }));
    // Staged results are dense (rows x cols); direct ones have the row stride N.
    const uint64_t ld = p.stage_dst ? blk.cols : p.ldd;
    if (p.post_activation)
      for (uint32_t r = 0; r < blk.rows; ++r)
        onednn::apply_activation_in_place(*p.post_activation, p.kernel_out,
                                          d + r * ld * element_size(p.kernel_out), blk.cols);
    if (p.kernel_out != p.out_type) {
      const auto* f = reinterpret_cast<const float*>(d);
      for (uint32_t r = 0; r < blk.rows; ++r)
        cpu::write_row(g.dst, p.out_type, static_cast<uint32_t>(d0 + r), blk.col0, blk.cols, f + r * ld);
    } else if (p.stage_dst) {
      const uint64_t row_bytes = uint64_t{blk.cols} * g.dst.unit_bytes;
      for (uint32_t r = 0; r < blk.rows; ++r)
        for (uint32_t done = 0, run = 0; done < blk.cols; done += run) {
          std::byte* q = g.dst.unit(static_cast<uint32_t>(d0 + r), blk.col0 + done, &run);
          run = std::min(run, blk.cols - done);
          std::memcpy(q, d + r * row_bytes + uint64_t{done} * g.dst.unit_bytes, uint64_t{run} * g.dst.unit_bytes);
        }
    }
  }
  return ok_status();
}

Status matmul_kernel(const void* raw, uint32_t begin, uint32_t end) {
  const auto& g = *static_cast<const MatmulArgs*>(raw);
  for (uint32_t t = begin; t < end; ++t) TS_RETURN_IF_ERROR(run_block(g, *g.plan->blocks[t]));
  return ok_status();
}

Status check_operand(const Tensor& t, std::string_view name) {
  TS_RETURN_IF_ERROR(ops::require_device_tensor(t, "matmul", name));
  if (t.layout() != Layout::ROW_MAJOR)
    return unimplemented_error("matmul: {} must be ROW_MAJOR, found {}; untilize it", name, t.spec().to_string());
  if (t.dtype() != DataType::FLOAT32 && t.dtype() != DataType::BFLOAT16)
    return unimplemented_error("matmul: {} must be float32 or bfloat16, found {}", name, data_type_name(t.dtype()));
  if (t.shape().rank() < 2 || t.shape().rank() > kMaxBatchDims + 2)
    return invalid_argument_error("matmul: {} must have rank 2..{}, found {}", name, kMaxBatchDims + 2,
                                  t.shape().to_string());
  return ok_status();
}

StatusOr<Program> compile(const Device& device, const MatmulGeometry& geometry, const Tensor& a, const Tensor& b,
                          const Tensor* bias, const Tensor& out, const MatmulParams& params, bool packed) {
  auto plan = std::make_shared<MatmulPlan>();
  static_cast<MatmulGeometry&>(*plan) = geometry;
  TS_ASSIGN_OR_RETURN(TensorAccess aa, make_access(a));
  TS_ASSIGN_OR_RETURN(TensorAccess ba, make_access(b));
  TS_ASSIGN_OR_RETURN(TensorAccess da, make_access(out));
  plan->in_type = a.dtype();
  plan->b_type = b.dtype();
  // b's too (run_matmul); LoFi's float32 operands are staged to bfloat16
  // (the gemv path, below, reads them in place and ignores this).
  plan->kernel_in = plan->lofi ? DataType::BFLOAT16 : onednn::kernel_type(a.dtype());
  plan->stage_a = aa.uniform_row_stride() == 0 || plan->kernel_in != plan->in_type;
  plan->stage_b = ba.uniform_row_stride() == 0 || plan->kernel_in != plan->b_type;
  plan->lda = plan->stage_a ? plan->k : aa.uniform_row_stride() / aa.unit_bytes;
  plan->ldb = plan->stage_b ? ba.cols : ba.uniform_row_stride() / ba.unit_bytes;
  plan->ldd = da.uniform_row_stride() / da.unit_bytes;
  // An activation oneDNN lacks runs on float32 too, before the one rounding.
  dnnl::post_ops probe;
  const bool post = !onednn::append_activation(probe, params.activation.value_or(UnaryWithParam{}));
  plan->kernel_out = plan->kernel_in == DataType::FLOAT32 || post ? DataType::FLOAT32 : plan->out_type;
  plan->stage_dst = da.uniform_row_stride() == 0 || plan->kernel_out != plan->out_type;
  if (bias) {
    TS_ASSIGN_OR_RETURN(TensorAccess bia, make_access(*bias));
    plan->bias_type = bias->dtype();
    plan->kernel_bias = onednn::kernel_type(bias->dtype());
    plan->stage_bias = onednn::dense_row_stride(bia) == 0 || bia.rows != 1 || plan->kernel_bias != plan->bias_type;
  }
  plan->transpose_b = params.transpose_b;
  if (bias) plan->bias_bytes = element_size(plan->kernel_bias);
  const uint32_t threads = static_cast<uint32_t>(device.workers().num_threads());
  // A classifier's head: rows read in place, float32 or bfloat16, one batch.
  auto rows = [](DataType t) { return t == DataType::FLOAT32 || t == DataType::BFLOAT16; };
  bool dense_bias = true;
  if (bias) {
    TS_ASSIGN_OR_RETURN(TensorAccess bia, make_access(*bias));
    dense_bias = onednn::dense_row_stride(bia) != 0 && bia.rows == 1 && rows(bias->dtype());
  }
  if (kernel_isa() != KernelIsa::kScalar && plan->m <= cpu::kGemvMaxRows && plan->transpose_b &&
      plan->batches == 1 && rows(plan->in_type) && rows(plan->b_type) && rows(plan->out_type) &&
      aa.uniform_row_stride() != 0 && ba.uniform_row_stride() != 0 && da.uniform_row_stride() != 0 && dense_bias) {
    plan->gemv = true;
    plan->lda = aa.uniform_row_stride() / aa.unit_bytes;
    plan->ldb = ba.uniform_row_stride() / ba.unit_bytes;
    plan->ldd = da.uniform_row_stride() / da.unit_bytes;
    // Four blocks per worker, so that a stalled vCPU's blocks go to the other.
    plan->gemv_cols = std::max<uint32_t>(16, (plan->n + 4 * threads - 1) / (4 * threads) + 15) / 16 * 16;
    Program prog;
    prog.kernel = kernel_isa() == KernelIsa::kAvx512 ? cpu::avx512::gemv_kernel : cpu::avx2::gemv_kernel;
    prog.kernel_name = fmt::format("{}_matmul__gemv_{}", short_dtype_name(plan->b_type), kernel_isa_name(kernel_isa()));
    prog.num_tasks = (plan->n + plan->gemv_cols - 1) / plan->gemv_cols;
    prog.grain = 1;
    prog.plan = plan;
    return prog;
  }
  // Blocks of rows, one per worker; with fewer rows than workers (a
  // classifier's 1 x K input), blocks of columns of at least 64 instead, so
  // both cores read half the weights.
  plan->packed_b = packed;  // (b_packable held: see run_matmul)
  const bool split_cols = plan->m < threads && plan->n >= 128;
  const uint32_t row_parts = split_cols ? 1 : std::max<uint32_t>(1, std::min(threads, plan->m));
  const uint32_t col_step = split_cols ? std::max<uint32_t>(64, (plan->n / threads + 15) / 16 * 16) : plan->n;
  auto d = [](uint64_t v) { return static_cast<memory::dim>(v); };
  const DataType ct = plan->kernel_in;
  TS_RETURN_IF_ERROR(onednn::guard("matmul", "compiling", [&] {
    dnnl::post_ops po;
    if (!onednn::append_activation(po, params.activation.value_or(UnaryWithParam{})))
      plan->post_activation = params.activation;
    dnnl::primitive_attr attr;
    attr.set_post_ops(po);
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    std::map<std::pair<uint32_t, uint32_t>, size_t> by_shape;
    std::map<std::pair<size_t, uint32_t>, uint64_t> packed_at;
    const uint32_t base = plan->m / row_parts, extra = plan->m % row_parts;
    for (uint32_t i = 0, r0 = 0; i < row_parts; ++i) {
      const uint32_t rows = base + (i < extra ? 1 : 0);
      for (uint32_t c0 = 0; c0 < plan->n; c0 += col_step) {
        auto blk = std::make_unique<MatmulBlock>();
        blk->row0 = r0;
        blk->rows = rows;
        blk->col0 = c0;
        blk->cols = std::min(col_step, plan->n - c0);
        const memory::dim cols = d(blk->cols);
        const memory::desc a_md({d(rows), d(plan->k)}, onednn::dnnl_type(ct), {d(plan->lda), 1});
        const memory::desc b_md =
            plan->packed_b   ? memory::desc({d(plan->k), cols}, onednn::dnnl_type(ct), memory::format_tag::any)
            : params.transpose_b ? memory::desc({d(plan->k), cols}, onednn::dnnl_type(ct), {1, d(plan->ldb)})
                                 : memory::desc({d(plan->k), cols}, onednn::dnnl_type(ct), {d(plan->ldb), 1});
        const memory::desc dst_md({d(rows), cols}, onednn::dnnl_type(plan->kernel_out),
                                  {plan->stage_dst ? cols : d(plan->ldd), 1});
        memory::desc bias_md;
        if (bias) bias_md = memory::desc({1, cols}, onednn::dnnl_type(plan->kernel_bias), memory::format_tag::ab);
        auto [it, fresh] = by_shape.try_emplace({rows, blk->cols}, plan->prims.size());
        if (fresh) {
          dnnl::matmul::desc md = bias ? dnnl::matmul::desc(a_md, b_md, bias_md, dst_md)
                                       : dnnl::matmul::desc(a_md, b_md, dst_md);
          plan->pds.emplace_back(md, attr, plan->engine);
          plan->prims.emplace_back(plan->pds.back());
        }
        blk->primitive = it->second;
        const auto& pd = plan->pds[blk->primitive];
        blk->stream = dnnl::stream(plan->engine);
        blk->scratch = make_aligned_bytes(std::max<size_t>(pd.scratchpad_desc().get_size(), 64));
        blk->a_mem = memory(a_md, plan->engine, DNNL_MEMORY_NONE);
        blk->b_mem = memory(plan->packed_b ? pd.weights_desc() : b_md, plan->engine, DNNL_MEMORY_NONE);
        if (plan->packed_b) {  // one packed copy per primitive and first column
          auto [at, added] = packed_at.try_emplace({blk->primitive, blk->col0}, plan->packed_bytes);
          if (added) {
            plan->packed_bytes += (pd.weights_desc().get_size() + 63) / 64 * 64;
            plan->pack_regions.push_back(plan->blocks.size());
          }
          blk->b_offset = at->second;
        }
        blk->dst_mem = memory(dst_md, plan->engine, DNNL_MEMORY_NONE);
        if (bias) blk->bias_mem = memory(bias_md, plan->engine, DNNL_MEMORY_NONE);
        blk->scratch_mem = memory(pd.scratchpad_desc(), plan->engine, blk->scratch.get());
        const uint32_t es = element_size(ct);
        if (plan->stage_a) blk->a_stage = make_aligned_bytes(uint64_t{rows} * plan->k * es);
        if (plan->stage_b) blk->b_stage = make_aligned_bytes(uint64_t{plan->k} * plan->n * es);
        if (plan->stage_dst)
          blk->dst_stage = make_aligned_bytes(uint64_t{rows} * blk->cols * element_size(plan->kernel_out));
        if (plan->stage_bias) blk->bias_stage = make_aligned_bytes(uint64_t{plan->n} * plan->bias_bytes);
        plan->blocks.push_back(std::move(blk));
      }
      r0 += rows;
    }
  }));
  Program prog;
  prog.kernel = matmul_kernel;
  prog.kernel_name = fmt::format("{}_matmul__onednn_{}_x{}", short_dtype_name(ct), plan->pds[0].impl_info_str(),
                                 plan->blocks.size());
  prog.num_tasks = static_cast<uint32_t>(plan->blocks.size());
  prog.grain = 1;
  prog.plan = plan;
  return prog;
}

// Packing b, a launch on b's queue (so it reads b after whatever wrote it):
// task t reorders the columns of the plan's t-th packed copy.
struct PackArgs {
  const MatmulPlan* plan;
  TensorAccess b;
  std::byte* bytes;
};

Status pack_kernel(const void* raw, uint32_t begin, uint32_t end) {
  const auto& a = *static_cast<const PackArgs*>(raw);
  const MatmulPlan& p = *a.plan;
  omp_set_num_threads(1);
  return onednn::guard("matmul", "packing b", [&] {
    dnnl::stream stream(p.engine);
    for (uint32_t t = begin; t < end; ++t) {
      const MatmulBlock& blk = *p.blocks[p.pack_regions[t]];
      const auto k = static_cast<memory::dim>(p.k), cols = static_cast<memory::dim>(blk.cols),
                 ld = static_cast<memory::dim>(p.ldb);
      const memory::desc src_md = p.transpose_b ? memory::desc({k, cols}, onednn::dnnl_type(p.kernel_in), {1, ld})
                                                : memory::desc({k, cols}, onednn::dnnl_type(p.kernel_in), {ld, 1});
      std::byte* src = a.b.base + uint64_t{blk.col0} * (p.transpose_b ? p.ldb : 1) * element_size(p.kernel_in);
      memory from(src_md, p.engine, src), to(p.pds[blk.primitive].weights_desc(), p.engine, a.bytes + blk.b_offset);
      dnnl::reorder(from, to).execute(stream, from, to);
      stream.wait();
    }
  });
}

// Whether b can be packed for the kernels: one b for every batch, its rows
// dense in the dtype oneDNN computes on (not staged), no LoFi staging.
StatusOr<bool> b_packable(const MatmulGeometry& g, const Tensor& a, const Tensor& b) {
  if (g.lofi || g.batches != 1 || onednn::kernel_type(a.dtype()) != b.dtype()) return false;
  TS_ASSIGN_OR_RETURN(TensorAccess ba, make_access(b));
  return ba.uniform_row_stride() != 0;
}

// With `pack`: packs b for these operands into *pack (nullptr where the
// kernel reads b in place) instead of launching.
StatusOr<Tensor> run_matmul(const Tensor& a, const Tensor& b, const Tensor* bias, const MatmulParams& params,
                            std::shared_ptr<const PackedMatmulWeights>* pack = nullptr) {
  const std::string_view op = bias ? "linear" : "matmul";
  TS_RETURN_IF_ERROR(check_operand(a, "a"));
  TS_RETURN_IF_ERROR(check_operand(b, "b"));
  if (a.device() != b.device()) return invalid_argument_error("{}: a and b are on different devices", op);
  MatmulGeometry plan;
  plan.lofi = lofi_lowers(params, a.dtype(), b.dtype());
  if (!plan.lofi && onednn::kernel_type(a.dtype()) != onednn::kernel_type(b.dtype()))
    return invalid_argument_error("{}: a and b must share a dtype, found {} and {}; typecast one", op,
                                  data_type_name(a.dtype()), data_type_name(b.dtype()));
  const Shape &sa = a.shape(), &sb = b.shape();
  plan.m = sa[-2];
  plan.k = sa[-1];
  const uint32_t bk = params.transpose_b ? sb[-1] : sb[-2];
  plan.n = params.transpose_b ? sb[-2] : sb[-1];
  plan.b_rows = sb[-2];
  if (bk != plan.k)
    return invalid_argument_error("{}: inner dims differ: a {} has K = {}, b {} has K = {}{}", op, sa.to_string(),
                                  plan.k, sb.to_string(), bk, params.transpose_b ? " (transposed)" : "");
  // Batch dims: numpy broadcasting of everything but the last two.
  const Shape ba(sa.dims().first(static_cast<size_t>(sa.rank() - 2)));
  const Shape bb(sb.dims().first(static_cast<size_t>(sb.rank() - 2)));
  StatusOr<Shape> batch = broadcast_shapes(ba, bb);
  if (!batch.ok())
    return invalid_argument_error("{}: batch dims of {} and {} do not broadcast", op, sa.to_string(), sb.to_string());
  // b shared by every batch (a weight) and a's rows one array: a single
  // (batches * M) x K product through a view of a. Per batch, each product
  // would read all of b: a transformer's (L, 1, E) tokens times a weight ran
  // as 197 products of one row each (ViT-B/16: 8 ms per launch against 0.4).
  if (ba.rank() > 0 && bb.volume() == 1 && ba.volume() > 1) {
    StatusOr<Tensor> flat = a.view(Shape{static_cast<uint32_t>(sa.volume() / plan.k), plan.k});
    if (flat.ok()) {
      TS_ASSIGN_OR_RETURN(Tensor y, run_matmul(*flat, b, bias, params, pack));
      if (pack) return y;
      std::vector<uint32_t> dims(batch->dims().begin(), batch->dims().end());
      dims.push_back(plan.m), dims.push_back(plan.n);
      return y.view(Shape(std::span<const uint32_t>(dims)));
    }
  }
  plan.num_batch_dims = static_cast<uint32_t>(batch->rank());
  for (int j = batch->rank() - 1, ja = 1, jb = 1; j >= 0; --j) {
    const int k = j - (batch->rank() - ba.rank()), kb = j - (batch->rank() - bb.rank());
    const uint32_t da = k >= 0 ? ba[k] : 1, db = kb >= 0 ? bb[kb] : 1;
    plan.batch_dims[j] = (*batch)[j];
    plan.a_stride[j] = da == 1 ? 0 : static_cast<uint32_t>(ja);
    plan.b_stride[j] = db == 1 ? 0 : static_cast<uint32_t>(jb);
    ja *= static_cast<int>(da);
    jb *= static_cast<int>(db);
    plan.batches *= (*batch)[j];
  }
  if (bias) {
    TS_RETURN_IF_ERROR(ops::require_device_tensor(*bias, op, "bias"));
    if (bias->shape().volume() != plan.n || bias->shape()[-1] != plan.n || bias->layout() != Layout::ROW_MAJOR ||
        (bias->dtype() != DataType::FLOAT32 && bias->dtype() != a.dtype()))
      return invalid_argument_error("{}: expected a ROW_MAJOR bias of {} values ((N) or (1,1,1,N)) in float32 or {}, "
                                    "found {}",
                                    op, plan.n, data_type_name(a.dtype()), bias->spec().to_string());
  }
  plan.out_type = params.dtype.value_or(a.dtype());
  if (plan.out_type != DataType::FLOAT32 && plan.out_type != DataType::BFLOAT16)
    return unimplemented_error("{}: output dtype must be float32 or bfloat16, found {}", op,
                               data_type_name(plan.out_type));
  MemoryConfig mc{TensorMemoryLayout::INTERLEAVED, a.memory_config().buffer_type, std::nullopt};
  if (params.memory_config) {
    if (params.memory_config->is_sharded())
      return unimplemented_error("{}: the output must be interleaved, found {}", op,
                                 params.memory_config->to_string());
    mc = *params.memory_config;
  }
  std::vector<uint32_t> out_dims(batch->dims().begin(), batch->dims().end());
  out_dims.push_back(plan.m);
  out_dims.push_back(plan.n);
  Device& device = *a.device();
  TensorSpec out_spec{Shape(std::span<const uint32_t>(out_dims)), plan.out_type, Layout::ROW_MAJOR, mc};
  if (pack) {  // (b_packable false: no program compiled for nothing)
    *pack = nullptr;
    TS_ASSIGN_OR_RETURN(const bool packable, b_packable(plan, a, b));
    if (!packable) return Tensor();
  }
  TS_ASSIGN_OR_RETURN(Tensor out, allocate_tensor_on_device(out_spec, device));
  const UnaryWithParam act = params.activation.value_or(UnaryWithParam{});
  // The kernel set is in the key: the gemv kernel is chosen by it.
  const bool packed = pack || params.packed_b;
  const std::string key = fmt::format("{}:{},{}{}{}->{}:{}:{}{}{}", op, a.spec().to_string(), b.spec().to_string(),
                                      params.transpose_b ? "^T" : "", bias ? "," + bias->spec().to_string() : "",
                                      out_spec.to_string(), activation_name(act), kernel_isa_name(kernel_isa()),
                                      plan.lofi ? ":lofi" : "", packed ? ":packed" : "");
  // Packed b is read by the program it was packed for (never a new one).
  const Program* prog = params.packed_b ? device.program_cache().find(key) : nullptr;
  if (params.packed_b && (!prog || params.packed_b->impl().plan != prog->plan))
    return failed_precondition_error("{}: b was packed for other operands or params than {}", op, key);
  if (!prog) {
    TS_ASSIGN_OR_RETURN(prog, device.program_cache().get_or_compile(key, device.may_compile_programs(params.cq_id), [&] {
      return compile(device, plan, a, b, bias, out, params, packed);
    }));
  }
  const auto* plan_of = static_cast<const MatmulPlan*>(prog->plan.get());
  if (pack) {
    if (!plan_of->gemv) {  // (a gemv plan reads b in place)
      TS_ASSIGN_OR_RETURN(const Program* packer,
                          device.program_cache().get_or_compile(
                              key + ":pack", device.may_compile_programs(params.cq_id), [&]() -> StatusOr<Program> {
                                Program pp;
                                pp.kernel = pack_kernel;
                                pp.kernel_name = fmt::format("{}_matmul_pack__onednn", short_dtype_name(b.dtype()));
                                pp.num_tasks = static_cast<uint32_t>(plan_of->pack_regions.size());
                                pp.grain = 1;
                                pp.plan = prog->plan;
                                return pp;
                              }));
      const auto rows = static_cast<uint32_t>(std::max<uint64_t>(plan_of->packed_bytes, 64) / 64);
      const MemoryConfig one_shard{
          TensorMemoryLayout::HEIGHT_SHARDED, BufferType::DRAM,
          ShardSpec{CoreRangeSet(CoreRange({0, 0}, {0, 0})), {rows, 64}, ShardOrientation::ROW_MAJOR}};
      TS_ASSIGN_OR_RETURN(Tensor bytes, allocate_tensor_on_device(
                                            TensorSpec{Shape{rows, 64}, DataType::UINT8, Layout::ROW_MAJOR, one_shard},
                                            device));
      TS_ASSIGN_OR_RETURN(TensorAccess to, make_access(bytes));
      if (to.uniform_row_stride() != 64 || reinterpret_cast<uintptr_t>(to.base) % 64 != 0)
        return internal_error("{}: the packed weights' device memory is not one aligned run", op);
      PackArgs pa{.plan = plan_of, .bytes = to.base};
      TS_ASSIGN_OR_RETURN(pa.b, make_access(b));
      TS_RETURN_IF_ERROR(device.enqueue_program(params.cq_id, *packer, &pa, sizeof(pa)));
      *pack = std::make_shared<const PackedMatmulWeights>(
          std::make_shared<PackedMatmulWeights::Impl>(PackedMatmulWeights::Impl{prog->plan, std::move(bytes)}));
    }
    return out;
  }
  if (plan_of->gemv) {
    TS_ASSIGN_OR_RETURN(TensorAccess aa, make_access(a));
    TS_ASSIGN_OR_RETURN(TensorAccess ba, make_access(b));
    TS_ASSIGN_OR_RETURN(TensorAccess ya, make_access(out));
    cpu::GemvArgs g{};
    g.a = aa.base;
    g.b = ba.base;
    if (bias) {
      TS_ASSIGN_OR_RETURN(TensorAccess bias_a, make_access(*bias));
      g.bias = bias_a.base;
      g.bias_bf16 = bias->dtype() == DataType::BFLOAT16;
    }
    g.y = ya.base;
    g.a_bf16 = a.dtype() == DataType::BFLOAT16;
    g.b_bf16 = b.dtype() == DataType::BFLOAT16;
    g.y_bf16 = out.dtype() == DataType::BFLOAT16;
    g.m = plan_of->m, g.k = plan_of->k, g.n = plan_of->n, g.cols_per_task = plan_of->gemv_cols;
    g.lda = plan_of->lda, g.ldb = plan_of->ldb, g.ldy = plan_of->ldd;
    g.math = cpu::select_float_math();
    g.activation = act;
    TS_RETURN_IF_ERROR(device.enqueue_program(params.cq_id, *prog, &g, sizeof(g)));
    return out;
  }
  MatmulArgs args{};
  TS_ASSIGN_OR_RETURN(args.a, make_access(a));
  TS_ASSIGN_OR_RETURN(args.b, make_access(b));
  TS_ASSIGN_OR_RETURN(args.dst, make_access(out));
  if (bias) {
    TS_ASSIGN_OR_RETURN(args.bias, make_access(*bias));
  }
  args.has_bias = bias != nullptr;
  args.plan = static_cast<MatmulPlan*>(prog->plan.get());
  if (params.packed_b) {
    TS_ASSIGN_OR_RETURN(TensorAccess packed, make_access(params.packed_b->impl().bytes));
    args.b_packed = packed.base;
  }
  TS_RETURN_IF_ERROR(device.enqueue_program(params.cq_id, *prog, &args, sizeof(args)));
  return out;
}

}  // namespace

DataType matmul_weights_dtype(DataType activations) {
  return activations == DataType::BFLOAT16 && onednn::kernel_type(DataType::BFLOAT16) == DataType::FLOAT32
             ? DataType::FLOAT32
             : activations;
}

StatusOr<std::shared_ptr<const PackedMatmulWeights>> pack_matmul_weights(const Tensor& a, const Tensor& b,
                                                                         const std::optional<Tensor>& bias,
                                                                         const MatmulParams& params) {
  MatmulParams p = params;
  p.packed_b = nullptr;
  std::shared_ptr<const PackedMatmulWeights> packed;
  TS_RETURN_IF_ERROR(run_matmul(a, b, bias ? &*bias : nullptr, p, &packed).status());
  return packed;
}

StatusOr<Tensor> matmul(const Tensor& a, const Tensor& b, const MatmulParams& params) {
  return run_matmul(a, b, nullptr, params);
}

StatusOr<Tensor> linear(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
                        const MatmulParams& params) {
  return run_matmul(input, weight, bias ? &*bias : nullptr, params);
}

}  // namespace tessera
