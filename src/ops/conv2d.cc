#include "tessera/ops/conv2d.h"

#include <dnnl.hpp>
#include <omp.h>

#include <map>

#include <cstring>
#include <mutex>

#include "onednn_util.h"
#include "op_common.h"
#include "tessera/base/aligned.h"
#include "tessera/numerics/bfloat16.h"
#include "tessera/numerics/convert.h"

namespace tessera {

namespace {

using dnnl::memory;
using onednn::dense_row_stride;
using onednn::dnnl_type;
using onednn::gather_rows;
using onednn::scatter_rows;

template <class F>
Status guard(std::string_view what, F f) {
  return onednn::guard("conv2d", what, f);
}

// One shard of the output rows of every image: its own single-threaded
// oneDNN primitive (with the halo rows it reads and the padding it owns),
// run by one worker thread. Shards own their memory objects, scratchpad and
// staging buffers, so they run in parallel without sharing anything; two
// queues launching the same program serialise per shard on `mu`.
struct ConvShard {
  uint32_t out_row0 = 0, out_rows = 0;  // output rows of each image
  uint32_t in_row0 = 0, in_rows = 0;    // input rows it reads, halo included
  size_t primitive = 0;                 // index into ConvPlan::prims
  dnnl::stream stream;
  memory src_mem, dst_mem, weights_mem, bias_mem, scratch_mem;
  std::shared_ptr<std::byte[]> scratch, src_stage, dst_stage;
  std::mutex mu;
};

// Everything compiled for one conv problem.
struct ConvPlan {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  std::vector<dnnl::convolution_forward::primitive_desc> pds;
  std::vector<dnnl::convolution_forward> prims;
  std::vector<std::unique_ptr<ConvShard>> shards;
  bool stage_src = false, stage_dst = false;  // rows not dense in the tensor: copy through
  std::optional<UnaryWithParam> post_activation;  // when oneDNN lacks it
  DataType out_type = DataType::FLOAT32;
  uint32_t batch = 1, in_h = 0, in_w = 0, out_h = 0, out_w = 0;
};

struct ConvArgs {
  TensorAccess src, dst;
  const std::byte* weights;
  const std::byte* bias;
  ConvPlan* plan;
};

Status run_shard(const ConvArgs& a, ConvShard& sh) {
  const ConvPlan& plan = *a.plan;
  std::lock_guard<std::mutex> lock(sh.mu);
  omp_set_num_threads(1);  // this worker is the shard's only thread
  const uint64_t src_row = uint64_t{a.src.cols} * a.src.unit_bytes, dst_row = uint64_t{a.dst.cols} * a.dst.unit_bytes;
  for (uint32_t n = 0; n < plan.batch; ++n) {
    const uint64_t s0 = (uint64_t{n} * plan.in_h + sh.in_row0) * plan.in_w, s1 = s0 + uint64_t{sh.in_rows} * plan.in_w;
    const uint64_t d0 = (uint64_t{n} * plan.out_h + sh.out_row0) * plan.out_w,
                   d1 = d0 + uint64_t{sh.out_rows} * plan.out_w;
    std::byte* src = plan.stage_src ? sh.src_stage.get() : a.src.base + s0 * src_row;
    std::byte* dst = plan.stage_dst ? sh.dst_stage.get() : a.dst.base + d0 * dst_row;
    if (plan.stage_src) gather_rows(a.src, s0, s1, src);
    TS_RETURN_IF_ERROR(guard("running the convolution", [&] {
      sh.src_mem.set_data_handle(src);
      sh.dst_mem.set_data_handle(dst);
      sh.weights_mem.set_data_handle(const_cast<std::byte*>(a.weights));
      sh.bias_mem.set_data_handle(const_cast<std::byte*>(a.bias));
      dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, sh.src_mem.get()},
                                {DNNL_ARG_WEIGHTS, sh.weights_mem.get()},
                                {DNNL_ARG_BIAS, sh.bias_mem.get()},
                                {DNNL_ARG_DST, sh.dst_mem.get()},
                                {DNNL_ARG_SCRATCHPAD, sh.scratch_mem.get()}};
      dnnl::error::wrap_c_api(dnnl_primitive_execute(plan.prims[sh.primitive].get(), sh.stream.get(), 5, args),
                              "execute");
      sh.stream.wait();
    }));
    if (plan.post_activation)
      onednn::apply_activation_in_place(*plan.post_activation, plan.out_type, dst, (d1 - d0) * a.dst.cols);
    if (plan.stage_dst) scatter_rows(a.dst, d0, d1, dst);
  }
  return ok_status();
}

Status conv_kernel(const void* raw, uint32_t begin, uint32_t end) {
  const auto& a = *static_cast<const ConvArgs*>(raw);
  for (uint32_t t = begin; t < end; ++t) TS_RETURN_IF_ERROR(run_shard(a, *a.plan->shards[t]));
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

// Dense NHWC rows of one image slice: dims (1, C, h, w).
memory::desc rows_desc(uint32_t h, uint32_t w, uint32_t c, DataType t) {
  return memory::desc({1, static_cast<memory::dim>(c), static_cast<memory::dim>(h), static_cast<memory::dim>(w)},
                      dnnl_type(t), memory::format_tag::nhwc);
}

// Output rows split into `parts` shards, each with the input rows (halo
// included) and the top/bottom padding it needs. Empty when a shard would
// read no input row (all of it padding): then the caller uses one shard.
std::vector<ConvShard*> split_rows(ConvPlan& plan, const Conv2dParams& p, uint32_t parts) {
  const uint32_t oh = p.output_height();
  parts = std::max<uint32_t>(1, std::min(parts, oh));
  const uint32_t base = oh / parts, extra = oh % parts;
  const int64_t span = int64_t{p.dilation[0]} * (p.kernel_size[0] - 1) + 1;
  std::vector<ConvShard*> out;
  for (uint32_t c = 0, o0 = 0; c < parts; ++c) {
    const uint32_t rows = base + (c < extra ? 1 : 0);
    const int64_t lo = int64_t{o0} * p.stride[0] - p.padding[0];
    const int64_t hi = int64_t{o0 + rows - 1} * p.stride[0] - p.padding[0] + span;
    const int64_t in0 = std::max<int64_t>(lo, 0), in1 = std::min<int64_t>(hi, p.input_height);
    if (in1 <= in0) return {};
    auto sh = std::make_unique<ConvShard>();
    sh->out_row0 = o0;
    sh->out_rows = rows;
    sh->in_row0 = static_cast<uint32_t>(in0);
    sh->in_rows = static_cast<uint32_t>(in1 - in0);
    out.push_back(sh.get());
    plan.shards.push_back(std::move(sh));
    o0 += rows;
  }
  return out;
}

// Builds one primitive per distinct shard shape; every shard uses the packed
// weight layout of the first, so one prepared weight tensor serves them all.
void build_primitives(ConvPlan& plan, const Problem& pr) {
  const Conv2dParams& p = pr.params;
  auto d = [](int64_t v) { return static_cast<memory::dim>(v); };
  memory::desc b_md({d(p.out_channels)}, memory::data_type::f32, memory::format_tag::x);
  memory::desc w_md = weights_user_desc(p, pr.compute);
  w_md = memory::desc(w_md.dims(), dnnl_type(pr.compute), memory::format_tag::any);
  dnnl::post_ops po;
  if (!onednn::append_activation(po, p.activation)) plan.post_activation = p.activation;
  dnnl::primitive_attr attr;
  attr.set_post_ops(po);
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  std::map<std::array<int64_t, 4>, size_t> by_shape;
  const int64_t span = int64_t{p.dilation[0]} * (p.kernel_size[0] - 1) + 1;
  for (auto& sh : plan.shards) {
    const int64_t lo = int64_t{sh->out_row0} * p.stride[0] - p.padding[0];
    const int64_t hi = int64_t{sh->out_row0 + sh->out_rows - 1} * p.stride[0] - p.padding[0] + span;
    const int64_t pad_top = std::max<int64_t>(0, -lo), pad_bottom = std::max<int64_t>(0, hi - p.input_height);
    const std::array<int64_t, 4> shape{sh->out_rows, sh->in_rows, pad_top, pad_bottom};
    auto src_md = rows_desc(sh->in_rows, p.input_width, p.in_channels, pr.compute);
    auto dst_md = rows_desc(sh->out_rows, p.output_width(), p.out_channels, pr.output.dtype);
    auto [it, fresh] = by_shape.try_emplace(shape, plan.prims.size());
    if (fresh) {
      dnnl::convolution_forward::desc cd(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                         src_md, plan.pds.empty() ? w_md : plan.pds[0].weights_desc(), b_md, dst_md,
                                         {d(p.stride[0]), d(p.stride[1])},
                                         {d(p.dilation[0] - 1), d(p.dilation[1] - 1)}, {d(pad_top), d(p.padding[2])},
                                         {d(pad_bottom), d(p.padding[3])});
      plan.pds.emplace_back(cd, attr, plan.engine);
      plan.prims.emplace_back(plan.pds.back());
    }
    sh->primitive = it->second;
    const auto& pd = plan.pds[sh->primitive];
    sh->stream = dnnl::stream(plan.engine);
    sh->scratch = make_aligned_bytes(pd.scratchpad_desc().get_size());
    sh->src_mem = memory(src_md, plan.engine, DNNL_MEMORY_NONE);
    sh->dst_mem = memory(dst_md, plan.engine, DNNL_MEMORY_NONE);
    sh->weights_mem = memory(pd.weights_desc(), plan.engine, DNNL_MEMORY_NONE);
    sh->bias_mem = memory(b_md, plan.engine, DNNL_MEMORY_NONE);
    sh->scratch_mem = memory(pd.scratchpad_desc(), plan.engine, sh->scratch.get());
    if (plan.stage_src)
      sh->src_stage = make_aligned_bytes(uint64_t{sh->in_rows} * p.input_width * p.in_channels *
                                         element_size(pr.compute));
    if (plan.stage_dst)
      sh->dst_stage = make_aligned_bytes(uint64_t{sh->out_rows} * p.output_width() * p.out_channels *
                                         element_size(pr.output.dtype));
  }
}

StatusOr<Program> compile(const Device& device, const Problem& pr, const TensorAccess& src, const TensorAccess& dst) {
  auto plan = std::make_shared<ConvPlan>();
  const Conv2dParams& p = pr.params;
  plan->out_type = pr.output.dtype;
  plan->batch = p.batch_size;
  plan->in_h = p.input_height;
  plan->in_w = p.input_width;
  plan->out_h = p.output_height();
  plan->out_w = p.output_width();
  plan->stage_src = dense_row_stride(src) == 0;
  plan->stage_dst = dense_row_stride(dst) == 0;
  // One shard per worker thread: each thread keeps its rows in its own cache.
  const uint32_t threads = static_cast<uint32_t>(device.workers().num_threads());
  Status built = guard("compiling the convolution", [&] {
    if (split_rows(*plan, p, threads).empty()) split_rows(*plan, p, 1);
    build_primitives(*plan, pr);
  });
  if (!built.ok() && plan->shards.size() > 1) {  // a shard shape oneDNN refused: run whole
    plan->shards.clear();
    plan->pds.clear();
    plan->prims.clear();
    built = guard("compiling the convolution", [&] {
      split_rows(*plan, p, 1);
      build_primitives(*plan, pr);
    });
  }
  TS_RETURN_IF_ERROR(built);
  Program prog;
  prog.kernel = conv_kernel;
  prog.kernel_name = fmt::format("{}_conv2d__onednn_{}_x{}", short_dtype_name(pr.compute), plan->pds[0].impl_info_str(),
                                 plan->shards.size());
  prog.num_tasks = static_cast<uint32_t>(plan->shards.size());
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
                                               [&] { return compile(device, pr, src, dst); }));
  auto* plan = static_cast<ConvPlan*>(prog->plan.get());
  // Pack on the host, then copy to the device.
  TS_ASSIGN_OR_RETURN(std::vector<float> wv, rounded.to_vector());
  const size_t packed_bytes = plan->pds[0].weights_desc().get_size();
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
    memory to(plan->pds[0].weights_desc(), plan->engine, packed_host.host_data());
    dnnl::stream stream(plan->engine);
    dnnl::reorder(from, to).execute(stream, from, to);
    stream.wait();
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
