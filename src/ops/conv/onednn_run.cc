#include <omp.h>

#include <cstring>

#include "../cpu/float_math.h"
#include "../op_common.h"
#include "onednn_plan.h"
#include "tessera/base/aligned.h"
#include "tessera/numerics/bfloat16.h"
#include "tessera/numerics/convert.h"

namespace tessera::conv {

using onednn::dense_row_stride;
using onednn::gather_rows;
using onednn::scatter_rows;

namespace {

// Runs primitive `prim` of the shard on its memory objects (pointed at the
// rows by the caller).
Status execute(const ConvArgs& a, ConvShard& sh, size_t prim, memory& src_mem, memory& dst_mem,
               const memory& scratch_mem) {
  const ConvPlan& plan = *a.plan;
  return guard("running the convolution", [&] {
    if (plan.winograd) sh.to_wino.execute(sh.stream, src_mem, sh.wino_src_mem);
    const memory& conv_src = plan.winograd ? sh.wino_src_mem : src_mem;
    const memory& conv_dst = plan.winograd ? sh.wino_dst_mem : dst_mem;
    sh.weights_mem.set_data_handle(const_cast<std::byte*>(a.weights) + sh.weights_offset);
    sh.bias_mem.set_data_handle(const_cast<std::byte*>(a.bias) + uint64_t{sh.oc0} * sizeof(float));
    dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, conv_src.get()},
                              {DNNL_ARG_WEIGHTS, sh.weights_mem.get()},
                              {DNNL_ARG_BIAS, sh.bias_mem.get()},
                              {DNNL_ARG_DST, conv_dst.get()},
                              {DNNL_ARG_SCRATCHPAD, scratch_mem.get()}};
    dnnl::error::wrap_c_api(dnnl_primitive_execute(plan.prims[prim].get(), sh.stream.get(), 5, args), "execute");
    if (plan.winograd) sh.from_wino.execute(sh.stream, sh.wino_dst_mem, dst_mem);
    sh.stream.wait();
  });
}

// Input pixels [s0, s1) as the kernel reads them: in place, or untilized or
// converted into the shard's buffer.
std::byte* source_rows(const ConvArgs& a, ConvShard& sh, uint64_t s0, uint64_t s1) {
  const ConvPlan& plan = *a.plan;
  if (plan.tile_src) {
    onednn::tiles_to_rows(a.src, plan.src_type, s0, s1, plan.cin, sh.src_stage.get(), plan.in_type);
  } else if (plan.concat) {
    const ConcatParts& cat = static_cast<const ConcatConvArgs&>(a).cat;
    const uint64_t es = element_size(plan.in_type);
    for (uint32_t i = 0, c0 = 0; i < cat.count; c0 += cat.cols[i++])
      gather_rows(cat.part[i], plan.src_type, s0, s1, 0, cat.cols[i], sh.src_stage.get() + c0 * es, plan.in_type,
                  plan.cin);
  } else if (plan.stage_src) {
    gather_rows(a.src, plan.src_type, s0, s1, 0, plan.cin, sh.src_stage.get(), plan.in_type);
  } else {
    return a.src.base + s0 * a.src.cols * a.src.unit_bytes;
  }
  return sh.src_stage.get();
}

// ConvPlan::cout_padded: output pixels [p, p + pixels), computed with
// cout_padded channels into `dst_stage`, keep their first `cout` channels
// (compacted in place), then get the activation oneDNN lacked, the residual
// and its activation, and go to the output's rows or tiles.
void keep_channels(const ConvArgs& a, ConvShard& sh, uint64_t p, uint64_t pixels) {
  const ConvPlan& plan = *a.plan;
  const cpu::FloatMath& math = cpu::select_float_math();
  auto* rows = reinterpret_cast<float*>(sh.dst_stage.get());
  const uint64_t c = plan.cout, n = pixels * c;
  for (uint64_t i = 1; i < pixels; ++i) std::memmove(rows + i * c, rows + i * plan.cout_padded, c * sizeof(float));
  if (plan.post_activation)
    onednn::apply_activation_in_place(*plan.post_activation, DataType::FLOAT32, sh.dst_stage.get(), n);
  const bool dense_out = !plan.tile_dst && !plan.stage_dst;
  std::byte* out = dense_out ? a.dst.base + p * c * sizeof(float) : sh.dst_stage.get();
  const cpu::FusedOperand kept{rows, false};
  if (plan.residual) {
    std::byte* res = a.res.base + p * c * sizeof(float);
    if (plan.stage_res) {
      res = sh.res_stage.get();
      gather_rows(a.res, plan.res_type, p, p + pixels, 0, plan.cout, res, DataType::FLOAT32);
    }
    const cpu::FusedOperand r{res, false};
    math.fused(kept, &r, {out, false}, BinaryOpType::ADD, plan.res_activation, n);
  } else if (dense_out) {
    std::memcpy(out, rows, n * sizeof(float));
  }
  if (plan.tile_dst) {
    onednn::rows_to_tiles(a.dst, plan.tile_type, sh.dst_stage.get(), DataType::FLOAT32, p, p + pixels, plan.cout,
                          uint64_t{plan.batch} * plan.out_h * plan.out_w);
  } else if (plan.stage_dst) {
    scatter_rows(a.dst, plan.dst_type, p, p + pixels, 0, plan.cout, sh.dst_stage.get(), DataType::FLOAT32);
  }
}

// ConvPlan::chunked: a 1x1 conv without padding over dense float32 rows,
// in runs of output pixels of one image.
Status run_chunks(const ConvArgs& a, ConvShard& sh) {
  const ConvPlan& plan = *a.plan;
  const cpu::FloatMath& math = cpu::select_float_math();
  const uint64_t out_row = uint64_t{plan.cout} * sizeof(float), in_row = uint64_t{plan.cin} * sizeof(float);
  const bool strided = plan.stride_h > 1 || plan.stride_w > 1;
  std::byte* stage = sh.dst_stage.get();
  for (uint32_t n = sh.n0; n < sh.n0 + sh.count; ++n) {
    const uint64_t image = uint64_t{n} * plan.out_h * plan.out_w;
    const uint64_t first = image + uint64_t{sh.out_row0} * plan.out_w, end = first + uint64_t{sh.out_rows} * plan.out_w;
    for (uint64_t p = first; p < end; p += sh.chunk) {
      const bool tail = end - p < sh.chunk;
      const uint64_t pixels = tail ? sh.tail : sh.chunk;
      std::byte* src = nullptr;
      if (strided) {  // input pixel (oy * stride_h, ox * stride_w) of output pixel (oy, ox)
        src = sh.src_stage.get();
        for (uint64_t q = p - image, i = 0; i < pixels; ++q, ++i) {
          const uint64_t oy = q / plan.out_w, ox = q % plan.out_w;
          const uint64_t ip = (uint64_t{n} * plan.in_h + oy * plan.stride_h) * plan.in_w + ox * plan.stride_w;
          std::memcpy(src + i * in_row, a.src.base + ip * in_row, in_row);
        }
      } else {
        src = source_rows(a, sh, p, p + pixels);
      }
      std::byte* dst = plan.own_residual || plan.cout_padded ? stage : a.dst.base + p * out_row;
      memory& src_mem = tail ? sh.tail_src_mem : sh.src_mem;
      memory& dst_mem = tail ? sh.tail_dst_mem : sh.dst_mem;
      src_mem.set_data_handle(src);
      dst_mem.set_data_handle(dst);
      TS_RETURN_IF_ERROR(execute(a, sh, tail ? sh.tail_primitive : sh.primitive, src_mem, dst_mem,
                                 tail ? sh.tail_scratch_mem : sh.scratch_mem));
      if (plan.cout_padded) {
        keep_channels(a, sh, p, pixels);
        continue;
      }
      if (plan.post_activation)
        onednn::apply_activation_in_place(*plan.post_activation, plan.out_type, dst, pixels * plan.cout);
      if (plan.post_res_activation && !plan.own_residual)
        onednn::apply_activation_in_place(*plan.post_res_activation, plan.out_type, dst, pixels * plan.cout);
      if (plan.own_residual) {
        const cpu::FusedOperand conv{stage, false}, res{a.res.base + p * out_row, false},
            out{a.dst.base + p * out_row, false};
        math.fused(conv, &res, out, BinaryOpType::ADD, plan.res_activation, pixels * plan.cout);
      }
    }
  }
  return ok_status();
}

Status run_shard(const ConvArgs& a, ConvShard& sh) {
  const ConvPlan& plan = *a.plan;
  std::lock_guard<std::mutex> lock(sh.mu);
  omp_set_num_threads(1);  // this worker is the shard's only thread
  if (plan.chunked) return run_chunks(a, sh);
  const uint64_t dst_row = uint64_t{a.dst.cols} * a.dst.unit_bytes;
  for (uint32_t n = sh.n0; n < sh.n0 + sh.count; n += sh.mb) {
    const uint64_t s0 = (uint64_t{n} * plan.in_h + sh.in_row0) * plan.in_w,
                   s1 = s0 + uint64_t{sh.mb} * sh.in_rows * plan.in_w;
    const uint64_t d0 = (uint64_t{n} * plan.out_h + sh.out_row0) * plan.out_w,
                   d1 = d0 + uint64_t{sh.mb} * sh.out_rows * plan.out_w;
    std::byte* src = source_rows(a, sh, s0, s1);
    std::byte* dst =
        plan.stage_dst || plan.split_channels || plan.own_residual ? sh.dst_stage.get() : a.dst.base + d0 * dst_row;
    if (plan.residual && !plan.own_residual) {
      if (plan.split_channels || plan.stage_res) {
        gather_rows(a.res, plan.res_type, d0, d1, sh.oc0, sh.ocs, dst, plan.out_type);
      } else if (const std::byte* res = a.res.base + d0 * dst_row; res != dst) {
        std::memcpy(dst, res, (d1 - d0) * dst_row);
      }
    }
    sh.src_mem.set_data_handle(src);
    sh.dst_mem.set_data_handle(dst);
    TS_RETURN_IF_ERROR(execute(a, sh, sh.primitive, sh.src_mem, sh.dst_mem, sh.scratch_mem));
    if (plan.post_activation)
      onednn::apply_activation_in_place(*plan.post_activation, plan.out_type, dst, (d1 - d0) * sh.ocs);
    if (plan.post_res_activation && !plan.own_residual)
      onednn::apply_activation_in_place(*plan.post_res_activation, plan.out_type, dst, (d1 - d0) * sh.ocs);
    if (plan.own_residual) {  // see silu_before_own_residual
      const bool res_bf16 = plan.res_type == DataType::BFLOAT16, out_bf16 = plan.dst_type == DataType::BFLOAT16;
      const cpu::FusedOperand conv{dst, false}, res{a.res.base + d0 * plan.cout * (res_bf16 ? 2 : 4), res_bf16},
          out{a.dst.base + d0 * dst_row, out_bf16};
      cpu::select_float_math().fused(conv, &res, out, BinaryOpType::ADD, plan.res_activation, (d1 - d0) * plan.cout);
    } else if (plan.tile_dst) {
      if (plan.round_to_bf16) {
        auto* f = reinterpret_cast<float*>(dst);
        for (uint64_t i = 0, n = (d1 - d0) * plan.cout; i < n; ++i) f[i] = round_to_bfloat16(f[i]);
      }
      onednn::rows_to_tiles(a.dst, plan.tile_type, dst, plan.out_type, d0, d1, plan.cout,
                            uint64_t{plan.batch} * plan.out_h * plan.out_w);
    } else if (plan.split_channels || plan.stage_dst) {
      scatter_rows(a.dst, plan.dst_type, d0, d1, sh.oc0, sh.ocs, dst, plan.out_type);
    }
  }
  return ok_status();
}

}  // namespace

Status onednn_conv_kernel(const void* raw, uint32_t begin, uint32_t end) {
  const auto& a = *static_cast<const ConvArgs*>(raw);
  for (uint32_t t = begin; t < end; ++t) TS_RETURN_IF_ERROR(run_shard(a, *a.plan->shards[t]));
  return ok_status();
}

namespace {

// Enqueues the launch into the already allocated `output`.
StatusOr<Conv2dResult> launch_conv(const Tensor& input, Tensor output, const PreparedConv2dWeights& w,
                                   const Problem& pr, const Program& prog, uint8_t cq_id, const ConcatParts* cat) {
  Conv2dResult r;
  r.output = std::move(output);
  r.output_height = pr.g.oh;
  r.output_width = pr.g.ow;
  r.weights = w;
  ConcatConvArgs args{};
  if (cat) args.cat = *cat;
  TS_ASSIGN_OR_RETURN(args.src, make_access(input));
  TS_ASSIGN_OR_RETURN(args.dst, make_access(r.output));
  if (pr.residual) {
    TS_ASSIGN_OR_RETURN(args.res, make_access(pr.residual->tensor));
  }
  TS_ASSIGN_OR_RETURN(TensorAccess wa, make_access(w.weight));
  TS_ASSIGN_OR_RETURN(TensorAccess ba, make_access(w.bias));
  args.weights = wa.page(0);
  args.bias = ba.page(0);
  args.plan = static_cast<ConvPlan*>(prog.plan.get());
  if (args.plan->concat != (cat != nullptr))
    return internal_error("conv2d: a {} launch of a program compiled {}", cat ? "conv2d_concat" : "conv2d",
                          args.plan->concat ? "for conv2d_concat" : "for conv2d");
  // Without parts, only the ConvArgs (the base) travels.
  TS_RETURN_IF_ERROR(input.device()->enqueue_program(cq_id, prog, &args, cat ? sizeof(args) : sizeof(ConvArgs)));
  return r;
}

// The output's buffer and the program for `pr` on it, compiled now unless a
// trace is being captured (then one compiled before). Programs differ by
// memory configs; packed weights do not (the plan's packing depends only on
// the weights key).
struct Compiled {
  Tensor output;
  const Program* prog;
};
StatusOr<Compiled> compiled(const Tensor& input, const Problem& pr, uint8_t cq_id) {
  Device& device = *input.device();
  Compiled c;
  TS_ASSIGN_OR_RETURN(c.output, output_tensor(input, pr));
  TS_ASSIGN_OR_RETURN(TensorAccess src, make_access(input));
  TS_ASSIGN_OR_RETURN(TensorAccess dst, make_access(c.output));
  std::optional<TensorAccess> res;
  if (pr.residual) {
    TS_ASSIGN_OR_RETURN(res, make_access(pr.residual->tensor));
  }
  TS_ASSIGN_OR_RETURN(c.prog, device.program_cache().get_or_compile(pr.key, device.may_compile_programs(cq_id), [&] {
    return compile_onednn(device, pr, src, dst, res ? &*res : nullptr);
  }));
  return c;
}

}  // namespace

StatusOr<Conv2dResult> onednn_with_weights(const Tensor& input, const Tensor& rounded, std::span<const float> bias,
                                           const Problem& pr, uint8_t cq_id, const ConcatParts* cat) {
  const Geometry& g = pr.g;
  Device& device = *input.device();
  // Compile first: the packed weight layout is the chosen kernel's.
  TS_ASSIGN_OR_RETURN(Compiled c, compiled(input, pr, cq_id));
  const ConvPlan* plan = static_cast<const ConvPlan*>(c.prog->plan.get());
  // Pack on the host, then copy to the device. Padded output channels
  // (Problem::cout_padded) get zero weights and bias: (out, in, kh, kw)
  // rows appended.
  TS_ASSIGN_OR_RETURN(std::vector<float> wv, rounded.to_vector());
  const Geometry kg = kernel_geometry(pr);
  wv.resize(wv.size() / g.cout * kg.cout, 0.f);
  std::vector<float> kernel_bias(bias.begin(), bias.end());
  kernel_bias.resize(kg.cout, 0.f);
  const size_t packed_bytes = plan->packed_bytes;
  Tensor packed_host =
      allocate_tensor_on_host({Shape{static_cast<uint32_t>(packed_bytes)}, DataType::UINT8, Layout::ROW_MAJOR});
  std::vector<uint16_t> wb;
  void* user = wv.data();
  if (pr.kernel == DataType::BFLOAT16) {
    wb.resize(wv.size());
    float_to_bfloat16(wv.data(), wb.data(), wv.size());
    user = wb.data();
  }
  TS_RETURN_IF_ERROR(guard("packing the weights", [&] {
    const onednn::OmpSingleThread single_thread;
    const memory::desc user_md = weights_user_desc(kg, pr.kernel);
    dnnl::stream stream(plan->engine);
    for (const ConvPlan::PackedSlice& ps : plan->packing) {
      // A slice of output channels is a contiguous run of (out, in, kh, kw)
      // rows: a dense desc of its own from its first byte (oneDNN's
      // Winograd weight reorder ignores a sub-memory's offset).
      const memory::desc slice = ps.ocs == kg.cout ? user_md
                                                   : memory::desc({static_cast<memory::dim>(ps.ocs), user_md.dims()[1],
                                                                   user_md.dims()[2], user_md.dims()[3]},
                                                                  user_md.data_type(), memory::format_tag::oihw);
      const uint64_t per_oc = user_md.get_size() / kg.cout;
      memory from(slice, plan->engine, static_cast<std::byte*>(user) + uint64_t{ps.oc0} * per_oc);
      memory to(ps.desc, plan->engine, static_cast<std::byte*>(packed_host.host_data()) + ps.offset);
      dnnl::reorder(from, to).execute(stream, from, to);
    }
    stream.wait();
  }));
  TS_ASSIGN_OR_RETURN(Tensor bias_host, Tensor::from_vector(kernel_bias, Shape{1, 1, 1, kg.cout}, DataType::FLOAT32));
  TS_ASSIGN_OR_RETURN(PreparedConv2dWeights w, upload_weights(pr.weights_key, packed_host, bias_host, device, cq_id));
  return launch_conv(input, std::move(c.output), w, pr, *c.prog, cq_id, cat);
}

StatusOr<Conv2dResult> launch_onednn(const Tensor& input, const PreparedConv2dWeights& w, const Problem& pr,
                                     uint8_t cq_id, const ConcatParts* cat) {
  TS_ASSIGN_OR_RETURN(Compiled c, compiled(input, pr, cq_id));
  const uint64_t packed = static_cast<const ConvPlan*>(c.prog->plan.get())->packed_bytes;
  if (packed != w.weight.shape().volume())
    return failed_precondition_error(
        "{}: the prepared weights hold {} B, the kernel for '{}' packs {} B; prepare them again",
        pr.g.transposed ? "conv_transpose2d" : "conv2d", w.weight.shape().volume(), pr.key, packed);
  return launch_conv(input, std::move(c.output), w, pr, *c.prog, cq_id, cat);
}

}  // namespace tessera::conv
