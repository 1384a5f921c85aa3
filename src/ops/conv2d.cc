#include "tessera/ops/conv2d.h"

#include <dnnl.hpp>

#include <cstring>
#include <mutex>

#include "op_common.h"
#include "tessera/base/aligned.h"
#include "tessera/numerics/bfloat16.h"
#include "tessera/numerics/convert.h"

namespace tessera {

namespace {

using dnnl::memory;

// Errors from oneDNN become Status at this boundary.
template <class F>
Status guard(std::string_view what, F f) {
  try {
    f();
    return ok_status();
  } catch (const dnnl::error& e) {
    return internal_error("conv2d: oneDNN failed while {}: {} (status {})", what, e.what(),
                          static_cast<int>(e.status));
  }
}

memory::data_type dnnl_type(DataType t) {
  return t == DataType::BFLOAT16 ? memory::data_type::bf16 : memory::data_type::f32;
}

// Row stride in bytes when the rows (pixels) of `a` are packed densely one
// after the other; 0 when they must be staged: spread over banks, or padded to
// the page alignment (C = 3 in float32 is 12 B of every 64 B page), which
// sends oneDNN to its reference implementation (1 GFLOP/s, measured).
uint64_t dense_row_stride(const TensorAccess& a) {
  const uint64_t row = uint64_t{a.cols} * a.unit_bytes;
  switch (a.kind) {
    case TensorAccess::Kind::kContiguous: return row;
    case TensorAccess::Kind::kInterleavedRows: return a.num_banks == 1 && a.page_stride == row ? row : 0;
    case TensorAccess::Kind::kSharded: return a.num_pages() == 1 ? row : 0;
    case TensorAccess::Kind::kInterleavedTiles: return 0;
  }
  return 0;
}

// The fused activation as a oneDNN post-op, when it has one.
bool append_activation(dnnl::post_ops& po, const UnaryWithParam& a) {
  using A = dnnl::algorithm;
  switch (a.op) {
    case UnaryOpType::IDENTITY: return true;
    case UnaryOpType::RELU: po.append_eltwise(1.f, A::eltwise_relu, 0.f, 0.f); return true;
    case UnaryOpType::LEAKY_RELU: po.append_eltwise(1.f, A::eltwise_relu, a.param, 0.f); return true;
    case UnaryOpType::RELU6: po.append_eltwise(1.f, A::eltwise_clip, 0.f, 6.f); return true;
    case UnaryOpType::SILU: po.append_eltwise(1.f, A::eltwise_swish, 1.f, 0.f); return true;
    case UnaryOpType::GELU: po.append_eltwise(1.f, A::eltwise_gelu_erf, 0.f, 0.f); return true;
    case UnaryOpType::SIGMOID: po.append_eltwise(1.f, A::eltwise_logistic, 0.f, 0.f); return true;
    case UnaryOpType::TANH: po.append_eltwise(1.f, A::eltwise_tanh, 0.f, 0.f); return true;
    case UnaryOpType::HARDSWISH: po.append_eltwise(1.f, A::eltwise_hardswish, 0.f, 0.f); return true;
    case UnaryOpType::MISH: po.append_eltwise(1.f, A::eltwise_mish, 0.f, 0.f); return true;
    case UnaryOpType::EXP: po.append_eltwise(1.f, A::eltwise_exp, 0.f, 0.f); return true;
    case UnaryOpType::SQRT: po.append_eltwise(1.f, A::eltwise_sqrt, 0.f, 0.f); return true;
    case UnaryOpType::HARDSIGMOID: return false;  // not in oneDNN 2.6: applied after the primitive
  }
  return false;
}

// Everything compiled for one conv problem. Launches of the same program
// from two queues serialise on `mu` (they share the staging buffers).
struct ConvPlan {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  dnnl::convolution_forward::primitive_desc pd;
  dnnl::convolution_forward prim;
  memory src_mem, dst_mem, weights_mem, bias_mem, scratch_mem;
  std::shared_ptr<std::byte[]> scratch, src_stage, dst_stage;
  bool stage_src = false, stage_dst = false;
  std::optional<UnaryWithParam> post_activation;  // when oneDNN lacks it
  DataType out_type = DataType::FLOAT32;
  std::mutex mu;
};

struct ConvArgs {
  TensorAccess src, dst;
  const std::byte* weights;
  const std::byte* bias;
  ConvPlan* plan;
};

TensorAccess staged(const TensorAccess& like, std::byte* data) {
  TensorAccess a;
  a.rows = like.rows;
  a.cols = like.cols;
  a.unit_bytes = like.unit_bytes;
  a.base = data;
  return a;
}

void apply_post_activation(const ConvPlan& plan, std::byte* dst, uint64_t rows, uint64_t stride, uint32_t cols) {
  float buf[kTileElements];
  for (uint64_t r = 0; r < rows; ++r) {
    std::byte* row = dst + r * stride;
    for (uint32_t c = 0; c < cols; c += kTileElements) {
      uint32_t n = std::min(kTileElements, cols - c);
      std::byte* p = row + uint64_t{c} * element_size(plan.out_type);
      convert_to_float(p, plan.out_type, buf, n);
      for (uint32_t i = 0; i < n; ++i) buf[i] = static_cast<float>(apply_activation(*plan.post_activation, buf[i]));
      convert_from_float(buf, p, plan.out_type, n);
    }
  }
}

Status conv_kernel(const void* raw, uint32_t, uint32_t) {
  const auto& a = *static_cast<const ConvArgs*>(raw);
  ConvPlan& plan = *a.plan;
  std::lock_guard<std::mutex> lock(plan.mu);
  std::byte* src = plan.stage_src ? plan.src_stage.get() : [&] { uint32_t run; return a.src.unit(0, 0, &run); }();
  std::byte* dst = plan.stage_dst ? plan.dst_stage.get() : [&] { uint32_t run; return a.dst.unit(0, 0, &run); }();
  if (plan.stage_src) copy_units(a.src, staged(a.src, src), 0, a.src.rows);
  Status s = guard("running the convolution", [&] {
    plan.src_mem.set_data_handle(src);
    plan.dst_mem.set_data_handle(dst);
    plan.weights_mem.set_data_handle(const_cast<std::byte*>(a.weights));
    plan.bias_mem.set_data_handle(const_cast<std::byte*>(a.bias));
    dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, plan.src_mem.get()},
                              {DNNL_ARG_WEIGHTS, plan.weights_mem.get()},
                              {DNNL_ARG_BIAS, plan.bias_mem.get()},
                              {DNNL_ARG_DST, plan.dst_mem.get()},
                              {DNNL_ARG_SCRATCHPAD, plan.scratch_mem.get()}};
    dnnl::error::wrap_c_api(dnnl_primitive_execute(plan.prim.get(), plan.stream.get(), 5, args), "execute");
    plan.stream.wait();
  });
  TS_RETURN_IF_ERROR(s);
  const uint64_t dst_stride = plan.stage_dst ? uint64_t{a.dst.cols} * a.dst.unit_bytes : dense_row_stride(a.dst);
  if (plan.post_activation) apply_post_activation(plan, dst, a.dst.rows, dst_stride, a.dst.cols);
  if (plan.stage_dst) copy_units(staged(a.dst, dst), a.dst, 0, a.dst.rows);
  return ok_status();
}

struct Problem {
  Conv2dParams params;
  TensorSpec input, output;
  DataType compute;
  std::string key;
};

StatusOr<Problem> make_problem(const Tensor& input, const Conv2dParams& p, const Conv2dConfig& config) {
  TS_RETURN_IF_ERROR(p.validate());
  TS_RETURN_IF_ERROR(ops::require_device_tensor(input, "conv2d"));
  TS_RETURN_IF_ERROR(p.check_input_shape(input.shape().dims()));
  if (input.layout() != Layout::ROW_MAJOR)
    return unimplemented_error("conv2d: the input must be ROW_MAJOR (NHWC rows) for now, found TILE; untilize it");
  if (input.dtype() != DataType::FLOAT32 && input.dtype() != DataType::BFLOAT16)
    return unimplemented_error("conv2d: expected a float32 or bfloat16 input, found {}", data_type_name(input.dtype()));
  const DataType out = config.dtype.value_or(input.dtype());
  if (out != DataType::FLOAT32 && out != DataType::BFLOAT16)
    return unimplemented_error("conv2d: output dtype must be float32 or bfloat16 for now, found {}",
                               data_type_name(out));
  if (input.memory_config().is_sharded())
    return unimplemented_error("conv2d: sharded inputs are not supported yet, found {}; move the input to an "
                               "interleaved memory config with to_memory_config",
                               input.memory_config().to_string());
  Problem pr;
  pr.params = p;
  pr.input = input.spec();
  pr.output = TensorSpec{Shape{1, 1, p.batch_size * p.output_height() * p.output_width(), p.out_channels}, out,
                         Layout::ROW_MAJOR, input.memory_config()};
  pr.compute = input.dtype();
  pr.key = fmt::format("{}:{}->{}:w{}", p.descriptor(), pr.input.to_string(), short_dtype_name(out),
                       short_dtype_name(config.weights_dtype));
  return pr;
}

memory::desc weights_user_desc(const Conv2dParams& p, DataType t) {
  const auto kh = static_cast<memory::dim>(p.kernel_size[0]), kw = static_cast<memory::dim>(p.kernel_size[1]);
  const auto o = static_cast<memory::dim>(p.out_channels), i = static_cast<memory::dim>(p.in_channels / p.groups);
  if (p.groups == 1) return memory::desc({o, i, kh, kw}, dnnl_type(t), memory::format_tag::oihw);
  const auto g = static_cast<memory::dim>(p.groups);
  return memory::desc({g, o / g, i, kh, kw}, dnnl_type(t), memory::format_tag::goihw);
}

memory::desc rows_desc(const Conv2dParams& p, uint32_t h, uint32_t w, uint32_t c, DataType t, uint64_t row_stride) {
  const auto es = element_size(t);
  const memory::dim rs = static_cast<memory::dim>(row_stride / es);
  return memory::desc({static_cast<memory::dim>(p.batch_size), static_cast<memory::dim>(c), static_cast<memory::dim>(h),
                       static_cast<memory::dim>(w)},
                      dnnl_type(t), memory::dims{rs * h * w, 1, rs * w, rs});
}

StatusOr<Program> compile(const Problem& pr, const TensorAccess& src, const TensorAccess& dst) {
  auto plan = std::make_shared<ConvPlan>();
  const Conv2dParams& p = pr.params;
  plan->out_type = pr.output.dtype;
  const uint64_t src_stride = dense_row_stride(src), dst_stride = dense_row_stride(dst);
  plan->stage_src = src_stride == 0;
  plan->stage_dst = dst_stride == 0;
  const uint64_t src_rs = plan->stage_src ? uint64_t{src.cols} * src.unit_bytes : src_stride;
  const uint64_t dst_rs = plan->stage_dst ? uint64_t{dst.cols} * dst.unit_bytes : dst_stride;
  if (plan->stage_src) plan->src_stage = make_aligned_bytes(uint64_t{src.rows} * src_rs);
  if (plan->stage_dst) plan->dst_stage = make_aligned_bytes(uint64_t{dst.rows} * dst_rs);
  TS_RETURN_IF_ERROR(guard("compiling the convolution", [&] {
    auto src_md = rows_desc(p, p.input_height, p.input_width, p.in_channels, pr.compute, src_rs);
    auto dst_md = rows_desc(p, p.output_height(), p.output_width(), p.out_channels, pr.output.dtype, dst_rs);
    memory::desc w_any = weights_user_desc(p, pr.compute);
    w_any = memory::desc(w_any.dims(), dnnl_type(pr.compute), memory::format_tag::any);
    memory::desc b_md({static_cast<memory::dim>(p.out_channels)}, memory::data_type::f32, memory::format_tag::x);
    auto d = [](uint32_t v) { return static_cast<memory::dim>(v); };
    dnnl::convolution_forward::desc cd(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                       src_md, w_any, b_md, dst_md, {d(p.stride[0]), d(p.stride[1])},
                                       {d(p.dilation[0] - 1), d(p.dilation[1] - 1)},
                                       {d(p.padding[0]), d(p.padding[2])}, {d(p.padding[1]), d(p.padding[3])});
    dnnl::post_ops po;
    if (!append_activation(po, p.activation)) plan->post_activation = p.activation;
    dnnl::primitive_attr attr;
    attr.set_post_ops(po);
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    plan->pd = dnnl::convolution_forward::primitive_desc(cd, attr, plan->engine);
    plan->prim = dnnl::convolution_forward(plan->pd);
    plan->scratch = make_aligned_bytes(plan->pd.scratchpad_desc().get_size());
    plan->src_mem = memory(src_md, plan->engine, DNNL_MEMORY_NONE);
    plan->dst_mem = memory(dst_md, plan->engine, DNNL_MEMORY_NONE);
    plan->weights_mem = memory(plan->pd.weights_desc(), plan->engine, DNNL_MEMORY_NONE);
    plan->bias_mem = memory(b_md, plan->engine, DNNL_MEMORY_NONE);
    plan->scratch_mem = memory(plan->pd.scratchpad_desc(), plan->engine, plan->scratch.get());
  }));
  Program prog;
  prog.kernel = conv_kernel;
  prog.kernel_name = fmt::format("{}_conv2d__onednn_{}", short_dtype_name(pr.compute), plan->pd.impl_info_str());
  prog.num_tasks = 1;  // oneDNN parallelises the primitive itself
  prog.grain = 1;
  prog.plan = plan;
  return prog;
}

// Enqueues the launch into the already allocated `output`.
StatusOr<Conv2dResult> launch_conv(const Tensor& input, Tensor output, const PreparedConv2dWeights& w,
                                   const Problem& pr, const Program& prog, uint8_t cq_id) {
  Conv2dResult r;
  r.output = std::move(output);
  r.output_height = pr.params.output_height();
  r.output_width = pr.params.output_width();
  r.weights = w;
  ConvArgs args{};
  TS_ASSIGN_OR_RETURN(args.src, make_access(input));
  TS_ASSIGN_OR_RETURN(args.dst, make_access(r.output));
  TS_ASSIGN_OR_RETURN(TensorAccess wa, make_access(w.weight));
  TS_ASSIGN_OR_RETURN(TensorAccess ba, make_access(w.bias));
  args.weights = wa.page(0);
  args.bias = ba.page(0);
  args.plan = static_cast<ConvPlan*>(prog.plan.get());
  TS_RETURN_IF_ERROR(input.device()->enqueue_program(cq_id, prog, &args, sizeof(args)));
  return r;
}

}  // namespace

StatusOr<Tensor> round_conv2d_weights(const Tensor& weight, const Conv2dParams& p, DataType wt,
                                      DataType input_dtype) {
  if (weight.is_on_device()) return invalid_argument_error("conv2d: expected host weights, found a device tensor");
  const uint32_t cin_g = p.in_channels / (p.groups ? p.groups : 1), kh = p.kernel_size[0], kw = p.kernel_size[1];
  const Shape expected{p.out_channels, cin_g, kh, kw};
  if (weight.shape() != expected)
    return invalid_argument_error("conv2d: expected weight shape {} (out_channels, in_channels/groups, kh, kw), found {}",
                                  expected.to_string(), weight.shape().to_string());
  if (!is_floating(wt))
    return invalid_argument_error("conv2d: weights_dtype must be a float type, found {}", data_type_name(wt));
  TS_ASSIGN_OR_RETURN(std::vector<float> v, weight.to_vector());
  if (wt == DataType::BFLOAT16) {
    for (float& x : v) x = round_to_bfloat16(x);
  } else if (is_block_float(wt)) {
    // Rows (ky, kx, ci), columns oc: blocks run over 16 output channels, as
    // in the original's prepared weight matrix.
    const uint32_t rows = kh * kw * cin_g, cols = p.out_channels;
    std::vector<float> m(uint64_t{rows} * cols);
    auto at = [&](uint32_t oc, uint32_t ci, uint32_t ky, uint32_t kx) {
      return ((uint64_t{oc} * cin_g + ci) * kh + ky) * kw + kx;
    };
    for (uint32_t oc = 0; oc < cols; ++oc)
      for (uint32_t ci = 0; ci < cin_g; ++ci)
        for (uint32_t ky = 0; ky < kh; ++ky)
          for (uint32_t kx = 0; kx < kw; ++kx) m[((ky * kw + kx) * cin_g + ci) * uint64_t{cols} + oc] = v[at(oc, ci, ky, kx)];
    TS_ASSIGN_OR_RETURN(Tensor t, Tensor::from_vector(m, Shape{1, 1, rows, cols}, wt, Layout::TILE));
    TS_ASSIGN_OR_RETURN(m, t.to_vector());
    for (uint32_t oc = 0; oc < cols; ++oc)
      for (uint32_t ci = 0; ci < cin_g; ++ci)
        for (uint32_t ky = 0; ky < kh; ++ky)
          for (uint32_t kx = 0; kx < kw; ++kx) v[at(oc, ci, ky, kx)] = m[((ky * kw + kx) * cin_g + ci) * uint64_t{cols} + oc];
  }
  // A bfloat16 input computes in bfloat16: float32 weights are rounded once more
  // (a no-op for bfloat16 and block-float weights, which bfloat16 holds exactly).
  if (input_dtype == DataType::BFLOAT16)
    for (float& x : v) x = round_to_bfloat16(x);
  return Tensor::from_vector(v, expected, DataType::FLOAT32);
}

StatusOr<Conv2dResult> conv2d(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
                              const Conv2dParams& p, const Conv2dConfig& config, uint8_t cq_id) {
  TS_ASSIGN_OR_RETURN(Problem pr, make_problem(input, p, config));
  Device& device = *input.device();
  TS_ASSIGN_OR_RETURN(Tensor rounded, round_conv2d_weights(weight, p, config.weights_dtype, input.dtype()));
  if (bias && (bias->is_on_device() || bias->shape().volume() != p.out_channels))
    return invalid_argument_error("conv2d: expected a host bias with {} values, found {}", p.out_channels,
                                  bias->spec().to_string());
  // Compile first: the packed weight layout is the chosen kernel's.
  TS_ASSIGN_OR_RETURN(Tensor output, allocate_tensor_on_device(pr.output, device));
  TS_ASSIGN_OR_RETURN(TensorAccess src, make_access(input));
  TS_ASSIGN_OR_RETURN(TensorAccess dst, make_access(output));
  TS_ASSIGN_OR_RETURN(const Program* prog, device.program_cache().get_or_compile(
                                               pr.key, device.may_compile_programs(cq_id),
                                               [&] { return compile(pr, src, dst); }));
  auto* plan = static_cast<ConvPlan*>(prog->plan.get());
  // Pack on the host, then copy to the device.
  TS_ASSIGN_OR_RETURN(std::vector<float> wv, rounded.to_vector());
  const size_t packed_bytes = plan->pd.weights_desc().get_size();
  Tensor packed_host =
      allocate_tensor_on_host({Shape{static_cast<uint32_t>(packed_bytes)}, DataType::UINT8, Layout::ROW_MAJOR});
  std::vector<uint16_t> wb;
  void* user = wv.data();
  if (pr.compute == DataType::BFLOAT16) {
    wb.resize(wv.size());
    float_to_bfloat16(wv.data(), wb.data(), wv.size());
    user = wb.data();
  }
  TS_RETURN_IF_ERROR(guard("packing the weights", [&] {
    memory from(weights_user_desc(p, pr.compute), plan->engine, user);
    memory to(plan->pd.weights_desc(), plan->engine, packed_host.host_data());
    dnnl::reorder(from, to).execute(plan->stream, from, to);
    plan->stream.wait();
  }));
  std::vector<float> bv(p.out_channels, 0.0f);
  if (bias) {
    TS_ASSIGN_OR_RETURN(bv, bias->to_vector());
  }
  TS_ASSIGN_OR_RETURN(Tensor bias_host, Tensor::from_vector(bv, Shape{1, 1, 1, p.out_channels}, DataType::FLOAT32));
  PreparedConv2dWeights w;
  w.key = pr.key;
  TS_ASSIGN_OR_RETURN(w.weight, to_device(packed_host, device, DRAM_MEMORY_CONFIG, cq_id));
  TS_ASSIGN_OR_RETURN(w.bias, to_device(bias_host, device, DRAM_MEMORY_CONFIG, cq_id));
  return launch_conv(input, std::move(output), w, pr, *prog, cq_id);
}

StatusOr<Conv2dResult> conv2d(const Tensor& input, const PreparedConv2dWeights& w, const Conv2dParams& p,
                              const Conv2dConfig& config, uint8_t cq_id) {
  TS_ASSIGN_OR_RETURN(Problem pr, make_problem(input, p, config));
  if (w.key != pr.key)
    return invalid_argument_error("conv2d: the prepared weights are for '{}', not for '{}'", w.key, pr.key);
  if (w.weight.device() != input.device() || !w.weight.is_allocated() || !w.bias.is_allocated())
    return failed_precondition_error("conv2d: the prepared weights are not allocated on the input's device");
  Device& device = *input.device();
  // The weights were prepared together with the program; it is cached.
  const Program* prog = device.program_cache().find(pr.key);
  if (!prog)
    return failed_precondition_error("conv2d: no program for '{}' on device {}; prepare the weights on this device",
                                     pr.key, device.id());
  TS_ASSIGN_OR_RETURN(Tensor output, allocate_tensor_on_device(pr.output, device));
  return launch_conv(input, std::move(output), w, pr, *prog, cq_id);
}

}  // namespace tessera
