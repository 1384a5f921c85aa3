#include "tessera/ops/quantized_conv2d.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <tuple>

#include "cpu/float_math.h"
#include "cpu/quantize_kernels.h"
#include "onednn_util.h"
#include "op_common.h"
#include "tessera/base/aligned.h"

namespace tessera {

namespace {

using dnnl::memory;
using md = memory::dim;

// One image's band of output rows [out_row0, out_row0 + out_rows): the input
// rows it reads (halo included), its own primitive (its share of the
// vertical padding), staging and scratch. Shards share nothing but the
// primitives, so the workers run them in parallel; two queues launching the
// same program serialise per shard on `mu`.
struct Shard {
  uint32_t n = 0, out_row0 = 0, out_rows = 0, in_row0 = 0, in_rows = 0;
  size_t primitive = 0;
  dnnl::stream stream;
  memory src_mem, weights_mem, dst_mem, scratch_mem, zp_mem;
  std::shared_ptr<std::byte[]> rows, src_stage, acc, out, scratch;
  int32_t zp = 0;  // the launch's zero point, read by zp_mem
  std::mutex mu;
};

// The primitives and shards of one geometry on one device (its worker
// count), shared by every layer of that geometry: the layers' weights,
// scales and zero points come with each launch.
struct Plan {
  Conv2dParams p;
  bool int8 = true;
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  std::vector<dnnl::convolution_forward::primitive_desc> pds;
  std::vector<dnnl::convolution_forward> prims;
  memory::desc weights_desc;  // every primitive's: the layers pack their weights once
  std::vector<std::unique_ptr<Shard>> shards;
};

struct Args {
  TensorAccess src, dst;
  DataType src_type;
  const std::byte* weights;
  const float* scales;  // input scale x weight scale, per output channel
  const float* bias;    // per output channel (zeros without one)
  float input_scale;
  int32_t zero_point;
  UnaryWithParam activation;
  OutputQuantization output;  // scale 0: none
  Plan* plan;
};

// The int8 kernels saw a NaN as 0: every output whose window holds it
// becomes NaN (all channels), as the float ops of the QDQ model compute it.
void mark_nan_windows(const Conv2dParams& p, const Shard& sh, const float* rows, float* y) {
  const uint32_t w = p.input_width, c = p.in_channels, k = p.out_channels, ow = p.output_width();
  for (uint32_t li = 0; li < sh.in_rows; ++li)
    for (uint32_t ix = 0; ix < w; ++ix) {
      const float* px = rows + (uint64_t{li} * w + ix) * c;
      if (std::none_of(px, px + c, [](float v) { return std::isnan(v); })) continue;
      const int64_t iy = int64_t{sh.in_row0} + li;
      for (uint32_t ky = 0; ky < p.kernel_size[0]; ++ky) {
        const int64_t ty = iy + p.padding[0] - int64_t{ky} * p.dilation[0];
        if (ty < 0 || ty % p.stride[0]) continue;
        const int64_t oy = ty / p.stride[0] - sh.out_row0;
        if (oy < 0 || oy >= sh.out_rows) continue;
        for (uint32_t kx = 0; kx < p.kernel_size[1]; ++kx) {
          const int64_t tx = int64_t{ix} + p.padding[2] - int64_t{kx} * p.dilation[1];
          if (tx < 0 || tx % p.stride[1] || tx / p.stride[1] >= ow) continue;
          float* out = y + (static_cast<uint64_t>(oy) * ow + static_cast<uint64_t>(tx / p.stride[1])) * k;
          std::fill(out, out + k, std::numeric_limits<float>::quiet_NaN());
        }
      }
    }
}

Status run_shard(const Args& a, Shard& sh) {
  std::lock_guard<std::mutex> lock(sh.mu);
  omp_set_num_threads(1);
  const Plan& plan = *a.plan;
  const Conv2dParams& p = plan.p;
  const uint32_t w = p.input_width, c = p.in_channels, k = p.out_channels, oh = p.output_height(),
                 ow = p.output_width();
  const uint64_t pix0 = (uint64_t{sh.n} * p.input_height + sh.in_row0) * w, pixels = uint64_t{sh.in_rows} * w;
  const cpu::QuantizeKernels& qk = cpu::select_quantize_kernels();
  // Dense float32 rows are read where they are, others gathered first.
  const float* rows = reinterpret_cast<const float*>(sh.rows.get());
  if (a.src_type == DataType::FLOAT32 && a.src.uniform_row_stride() == uint64_t{c} * 4)
    rows = reinterpret_cast<const float*>(a.src.base + pix0 * a.src.uniform_row_stride());
  else
    onednn::gather_rows(a.src, a.src_type, pix0, pix0 + pixels, 0, c, sh.rows.get(), DataType::FLOAT32);
  bool nan = false;
  if (plan.int8)
    nan = qk.to_u8(rows, pixels * c, a.input_scale, a.zero_point, reinterpret_cast<uint8_t*>(sh.src_stage.get()));
  else
    qk.centered(rows, pixels * c, a.input_scale, a.zero_point, 0, 255, 1.0f,
                reinterpret_cast<float*>(sh.src_stage.get()));
  TS_RETURN_IF_ERROR(onednn::guard("quantized_conv2d", "running", [&] {
    sh.zp = a.zero_point;
    sh.weights_mem.set_data_handle(const_cast<std::byte*>(a.weights));
    // (The C API's argument array: no allocation per launch, as matmul.cc.)
    const dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, sh.src_mem.get()},
                                     {DNNL_ARG_WEIGHTS, sh.weights_mem.get()},
                                     {DNNL_ARG_DST, sh.dst_mem.get()},
                                     {DNNL_ARG_SCRATCHPAD, sh.scratch_mem.get()},
                                     {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, plan.int8 ? sh.zp_mem.get() : nullptr}};
    dnnl::error::wrap_c_api(
        dnnl_primitive_execute(plan.prims[sh.primitive].get(), sh.stream.get(), plan.int8 ? 5 : 4, args), "execute");
    sh.stream.wait();
  }));
  // The sums scaled and biased (two roundings, as the reference), then the
  // activation, while they are in this core's cache: straight into dense
  // output rows, else through staging.
  const uint64_t out_pixels = uint64_t{sh.out_rows} * ow, row0 = (uint64_t{sh.n} * oh + sh.out_row0) * ow;
  const bool direct = a.dst.uniform_row_stride() == uint64_t{k} * 4;
  auto* y = direct ? reinterpret_cast<float*>(a.dst.base + row0 * a.dst.uniform_row_stride())
                   : reinterpret_cast<float*>(sh.out.get());
  qk.dequantize(sh.acc.get(), !plan.int8, out_pixels, k, a.scales, a.bias, y, k);
  if (nan) mark_nan_windows(p, sh, rows, y);
  if (!a.activation.is_identity()) cpu::select_float_math().unary(a.activation, y, out_pixels * k);
  if (a.output.scale > 0)
    qk.centered(y, out_pixels * k, a.output.scale, a.output.zero_point, a.output.lo, a.output.hi, a.output.scale, y);
  if (!direct)
    onednn::scatter_rows(a.dst, DataType::FLOAT32, row0, row0 + out_pixels, 0, k, sh.out.get(), DataType::FLOAT32);
  return ok_status();
}

Status kernel(const void* raw, uint32_t begin, uint32_t end) {
  const auto& a = *static_cast<const Args*>(raw);
  for (uint32_t t = begin; t < end; ++t) TS_RETURN_IF_ERROR(run_shard(a, *a.plan->shards[t]));
  return ok_status();
}

// Whether a oneDNN int8 primitive sums exactly: its VNNI (or AMX) kernels.
bool exact_int8(const dnnl::primitive_desc_base& pd) {
  const std::string impl = pd.impl_info_str();
  return impl.find("vnni") != std::string::npos || impl.find("amx") != std::string::npos;
}

// The shards of `p` for `threads` workers and their primitives, in int8 or
// float32 (see quantized_conv2d.h).
Status build(Plan& plan, uint32_t threads, bool int8) {
  const Conv2dParams& p = plan.p;
  plan.int8 = int8;
  plan.pds.clear(), plan.prims.clear(), plan.shards.clear();
  const uint32_t oh = p.output_height(), ow = p.output_width();
  const uint32_t reach = (p.kernel_size[0] - 1) * p.dilation[0] + 1;
  const uint32_t parts = std::min(oh, std::max<uint32_t>(1, (threads + p.batch_size - 1) / p.batch_size));
  const uint32_t band = (oh + parts - 1) / parts;
  const auto src_t = int8 ? memory::data_type::u8 : memory::data_type::f32;
  const auto acc_t = int8 ? memory::data_type::s32 : memory::data_type::f32;
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (int8) attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
  std::map<std::tuple<uint32_t, uint32_t, int64_t, int64_t>, size_t> by_shape;
  return onednn::guard("quantized_conv2d", "compiling", [&] {
    for (uint32_t n = 0; n < p.batch_size; ++n)
      for (uint32_t r0 = 0; r0 < oh; r0 += band) {
        auto sh = std::make_unique<Shard>();
        sh->n = n, sh->out_row0 = r0, sh->out_rows = std::min(band, oh - r0);
        const int64_t lo = int64_t{r0} * p.stride[0] - p.padding[0];
        const int64_t hi = int64_t{r0 + sh->out_rows - 1} * p.stride[0] - p.padding[0] + reach;
        const int64_t pad_t = std::max<int64_t>(0, -lo), pad_b = std::max<int64_t>(0, hi - p.input_height);
        sh->in_row0 = static_cast<uint32_t>(std::max<int64_t>(0, lo));
        sh->in_rows = static_cast<uint32_t>(std::min<int64_t>(p.input_height, hi)) - sh->in_row0;
        const memory::desc src({1, md(p.in_channels), md(sh->in_rows), md(p.input_width)}, src_t,
                               memory::format_tag::nhwc);
        const memory::desc dst({1, md(p.out_channels), md(sh->out_rows), md(ow)}, acc_t, memory::format_tag::nhwc);
        auto [it, fresh] = by_shape.try_emplace({sh->in_rows, sh->out_rows, pad_t, pad_b}, plan.prims.size());
        if (fresh) {
          const memory::desc weights =
              plan.pds.empty()
                  ? memory::desc({md(p.out_channels), md(p.in_channels), md(p.kernel_size[0]), md(p.kernel_size[1])},
                                 int8 ? memory::data_type::s8 : memory::data_type::f32, memory::format_tag::any)
                  : plan.weights_desc;
          const dnnl::convolution_forward::desc d(
              dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src, weights, dst,
              {md(p.stride[0]), md(p.stride[1])}, {md(p.dilation[0] - 1), md(p.dilation[1] - 1)},
              {pad_t, md(p.padding[2])}, {pad_b, md(p.padding[3])});
          plan.pds.emplace_back(d, attr, plan.engine);
          if (plan.pds.size() == 1) plan.weights_desc = plan.pds[0].weights_desc();
          plan.prims.emplace_back(plan.pds.back());
        }
        sh->primitive = it->second;
        const auto& pd = plan.pds[sh->primitive];
        const uint64_t in_values = uint64_t{sh->in_rows} * p.input_width * p.in_channels;
        const uint64_t out_values = uint64_t{sh->out_rows} * ow * p.out_channels;
        sh->rows = make_aligned_bytes(in_values * 4);
        sh->src_stage = make_aligned_bytes(in_values * (int8 ? 1 : 4));
        sh->acc = make_aligned_bytes(out_values * 4);
        sh->out = make_aligned_bytes(out_values * 4);
        sh->scratch = make_aligned_bytes(std::max<size_t>(pd.scratchpad_desc().get_size(), 64));
        sh->stream = dnnl::stream(plan.engine);
        sh->src_mem = memory(pd.src_desc(), plan.engine, sh->src_stage.get());
        sh->weights_mem = memory(plan.weights_desc, plan.engine, DNNL_MEMORY_NONE);
        sh->dst_mem = memory(pd.dst_desc(), plan.engine, sh->acc.get());
        sh->scratch_mem = memory(pd.scratchpad_desc(), plan.engine, sh->scratch.get());
        if (int8) sh->zp_mem = memory({{1}, memory::data_type::s32, memory::format_tag::x}, plan.engine, &sh->zp);
        plan.shards.push_back(std::move(sh));
      }
  });
}

StatusOr<Program> compile(const Device& device, const Conv2dParams& p) {
  auto plan = std::make_shared<Plan>();
  plan->p = p;
  plan->p.activation = {};  // (applied by the shards, from the launch)
  const auto threads = static_cast<uint32_t>(device.workers().num_threads());
  // int8 where oneDNN's kernel for it sums exactly, else float32.
  if (Status st = build(*plan, threads, /*int8=*/true); !st.ok() || !exact_int8(plan->pds[0]))
    TS_RETURN_IF_ERROR(build(*plan, threads, /*int8=*/false));
  Program prog;
  prog.kernel = kernel;
  prog.kernel_name = fmt::format("{}_quantized_conv2d__onednn_{}_x{}", plan->int8 ? "u8s8" : "f32",
                                 plan->pds[0].impl_info_str(), plan->shards.size());
  prog.num_tasks = static_cast<uint32_t>(plan->shards.size());
  prog.grain = 1;
  prog.plan = plan;
  return prog;
}

}  // namespace

std::string_view quantized_conv2d_kernel() {
  static const bool int8 = [] {
    try {
      dnnl::engine eng(dnnl::engine::kind::cpu, 0);
      const memory::desc src({1, 16, 4, 4}, memory::data_type::u8, memory::format_tag::nhwc);
      const memory::desc wei({16, 16, 3, 3}, memory::data_type::s8, memory::format_tag::any);
      const memory::desc dst({1, 16, 4, 4}, memory::data_type::s32, memory::format_tag::nhwc);
      dnnl::primitive_attr attr;
      attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
      const dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                              src, wei, dst, {1, 1}, {0, 0}, {1, 1}, {1, 1});
      return exact_int8(dnnl::convolution_forward::primitive_desc(d, attr, eng));
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return int8 ? "int8" : "f32";
}

struct QuantizedConv2d::Impl {
  QuantizedConv2dParams params;
  Device* device = nullptr;
  const Program* program = nullptr;
  std::shared_ptr<std::byte[]> weights;  // packed as the plan's primitives read them
  std::vector<float> scales, bias;
};

QuantizedConv2d::QuantizedConv2d(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
QuantizedConv2d::~QuantizedConv2d() = default;
const QuantizedConv2dParams& QuantizedConv2d::params() const { return impl_->params; }

StatusOr<std::unique_ptr<QuantizedConv2d>> QuantizedConv2d::create(Device& device, const QuantizedConv2dParams& params,
                                                                   const Tensor& weights,
                                                                   std::span<const float> weight_scales,
                                                                   std::span<const float> bias) {
  const Conv2dParams& p = params.conv;
  TS_RETURN_IF_ERROR(p.validate());
  if (p.groups != 1) return unimplemented_error("quantized_conv2d: groups must be 1, found {}", p.groups);
  if (!(params.input_scale > 0) || !std::isfinite(params.input_scale))
    return invalid_argument_error("quantized_conv2d: the input scale must be positive and finite, found {}",
                                  params.input_scale);
  if (const auto& o = params.output; o && (!(o->scale > 0) || !std::isfinite(o->scale) || o->lo > o->hi ||
                                           o->zero_point < o->lo || o->zero_point > o->hi))
    return invalid_argument_error(
        "quantized_conv2d: the output quantization needs a positive finite scale and a zero "
        "point within [lo, hi]");
  if (params.input_zero_point < 0 || params.input_zero_point > 255)
    return invalid_argument_error("quantized_conv2d: the input zero point must be a uint8 (0..255), found {}",
                                  params.input_zero_point);
  if (weights.is_on_device()) return invalid_argument_error("quantized_conv2d: expected host weights");
  const Shape expected{p.out_channels, p.in_channels, p.kernel_size[0], p.kernel_size[1]};
  if (weights.shape() != expected)
    return invalid_argument_error(
        "quantized_conv2d: expected weight shape {} (out_channels, in_channels, kh, kw), "
        "found {}",
        expected.to_string(), weights.shape().to_string());
  if (weight_scales.size() != 1 && weight_scales.size() != p.out_channels)
    return invalid_argument_error("quantized_conv2d: expected 1 or {} weight scales, found {}", p.out_channels,
                                  weight_scales.size());
  for (float s : weight_scales)
    if (!(s > 0) || !std::isfinite(s))
      return invalid_argument_error("quantized_conv2d: weight scales must be positive and finite, found {}", s);
  if (!bias.empty() && bias.size() != p.out_channels)
    return invalid_argument_error("quantized_conv2d: expected no bias or {} values, found {}", p.out_channels,
                                  bias.size());
  TS_ASSIGN_OR_RETURN(std::vector<float> wv, weights.to_vector());
  for (size_t i = 0; i < wv.size(); ++i)
    if (!(wv[i] >= -128 && wv[i] <= 127) || wv[i] != std::nearbyint(wv[i]))
      return invalid_argument_error("quantized_conv2d: weights must be int8 values, found {} at index {}", wv[i], i);
  auto impl = std::make_unique<Impl>();
  impl->params = params;
  impl->device = &device;
  const uint32_t cout = p.out_channels;
  for (uint32_t o = 0; o < cout; ++o) {
    impl->scales.push_back(params.input_scale * weight_scales[weight_scales.size() == 1 ? 0 : o]);
    impl->bias.push_back(bias.empty() ? 0.0f : bias[o]);
  }
  Conv2dParams geometry = p;
  geometry.activation = {};
  const std::string key = fmt::format("quantized_conv2d:{}:x{}", geometry.descriptor(), device.workers().num_threads());
  TS_ASSIGN_OR_RETURN(impl->program, device.program_cache().get_or_compile(key, /*allow_compile=*/true,
                                                                           [&] { return compile(device, geometry); }));
  const auto& plan = *static_cast<const Plan*>(impl->program->plan.get());
  TS_RETURN_IF_ERROR(onednn::guard("quantized_conv2d", "packing the weights", [&] {
    const memory::dims dims{md(cout), md(p.in_channels), md(p.kernel_size[0]), md(p.kernel_size[1])};
    std::vector<int8_t> w8;
    if (plan.int8) w8.assign(wv.begin(), wv.end());  // (checked integers above)
    memory user({dims, plan.int8 ? memory::data_type::s8 : memory::data_type::f32, memory::format_tag::oihw},
                plan.engine, plan.int8 ? static_cast<void*>(w8.data()) : static_cast<void*>(wv.data()));
    impl->weights = make_aligned_bytes(std::max<size_t>(plan.weights_desc.get_size(), 64));
    memory packed(plan.weights_desc, plan.engine, impl->weights.get());
    dnnl::stream stream(plan.engine);
    dnnl::reorder(user, packed).execute(stream, user, packed);
    stream.wait();
  }));
  return std::unique_ptr<QuantizedConv2d>(new QuantizedConv2d(std::move(impl)));
}

StatusOr<Tensor> QuantizedConv2d::operator()(const Tensor& input, uint8_t cq_id) const {
  const Conv2dParams& p = impl_->params.conv;
  TS_RETURN_IF_ERROR(ops::require_device_tensor(input, "quantized_conv2d"));
  if (input.device() != impl_->device)
    return invalid_argument_error("quantized_conv2d: the input is on another device than the layer's weights");
  if (input.layout() != Layout::ROW_MAJOR ||
      (input.dtype() != DataType::FLOAT32 && input.dtype() != DataType::BFLOAT16))
    return unimplemented_error("quantized_conv2d: expected float32 or bfloat16 ROW_MAJOR rows, found {}",
                               input.spec().to_string());
  TS_RETURN_IF_ERROR(p.check_input_shape(input.shape().dims()));
  Device& device = *input.device();
  const TensorSpec out_spec{Shape{1, 1, p.batch_size * p.output_height() * p.output_width(), p.out_channels},
                            DataType::FLOAT32, Layout::ROW_MAJOR, DRAM_MEMORY_CONFIG};
  TS_ASSIGN_OR_RETURN(Tensor out, allocate_tensor_on_device(out_spec, device));
  Args args{};
  TS_ASSIGN_OR_RETURN(args.src, make_access(input));
  TS_ASSIGN_OR_RETURN(args.dst, make_access(out));
  args.src_type = input.dtype();
  args.weights = impl_->weights.get();
  args.scales = impl_->scales.data();
  args.bias = impl_->bias.data();
  args.input_scale = impl_->params.input_scale;
  args.zero_point = impl_->params.input_zero_point;
  args.activation = p.activation;
  if (impl_->params.output) args.output = *impl_->params.output;
  args.plan = static_cast<Plan*>(impl_->program->plan.get());
  TS_RETURN_IF_ERROR(device.enqueue_program(cq_id, *impl_->program, &args, sizeof(args)));
  return out;
}

}  // namespace tessera
