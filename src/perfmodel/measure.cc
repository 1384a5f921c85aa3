#include "tessera/perfmodel/measure.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <functional>
#include <random>

#include "tessera/device/profiler.h"
#include "tessera/ops/activation.h"
#include "tessera/ops/conv2d.h"
#include "tessera/ops/conv_transpose2d.h"
#include "tessera/ops/data_movement.h"
#include "tessera/ops/eltwise.h"
#include "tessera/ops/manipulation.h"
#include "tessera/ops/matmul.h"
#include "tessera/ops/normalization.h"
#include "tessera/ops/pool2d.h"
#include "tessera/ops/upsample.h"

namespace tessera::perfmodel {
namespace {

// Fixed-seed uniform values in [-scale, scale).
std::vector<float> random_values(uint64_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

StatusOr<Tensor> device_tensor(Device& device, std::vector<uint32_t> dims, DataType dtype, Layout layout,
                               BufferType buffer, uint32_t seed) {
  Shape shape{std::span<const uint32_t>(dims)};
  TS_ASSIGN_OR_RETURN(Tensor host,
                      Tensor::from_vector(random_values(shape.volume(), seed, 1.0f), shape, dtype, layout));
  return to_device(host, device, buffer == BufferType::L1 ? L1_MEMORY_CONFIG : DRAM_MEMORY_CONFIG);
}

// Host float32 weights of `shape` in [-0.1, 0.1), as prepared weights start.
StatusOr<Tensor> host_weights(const Shape& shape) {
  return Tensor::from_vector(random_values(shape.volume(), 5, 0.1f), shape, DataType::FLOAT32);
}

StatusOr<Tensor> input_tensor(Device& device, const OpQuery& q, size_t i) {
  const TensorQuery& t = q.inputs[i];
  std::vector<uint32_t> dims = t.logical_shape;
  if (find_op(q.op)->spatial) {  // (N, C, H, W) -> NHWC rows, or (1, 1, NHW, C) tiles
    dims = {t.logical_shape[0], t.logical_shape[2], t.logical_shape[3], t.logical_shape[1]};
    if (t.layout == Layout::TILE) dims = {1, 1, dims[0] * dims[1] * dims[2], dims[3]};
  }
  return device_tensor(device, dims, t.dtype, t.layout, t.buffer_type, 17 + static_cast<uint32_t>(i));
}

StatusOr<UnaryWithParam> activation(const std::string& name) {
  auto op = parse_unary_op(name);
  if (!op) return invalid_argument_error("unknown activation '{}'", name);
  // (Each kind's usual parameters: leaky_relu 0.01, elu / celu / thresholded_relu 1, clip [0, 1].)
  switch (*op) {
    case UnaryOpType::LEAKY_RELU:
      return UnaryWithParam{*op, 0.01f};
    case UnaryOpType::ELU:
    case UnaryOpType::CELU:
    case UnaryOpType::THRESHOLDED_RELU:
      return UnaryWithParam{*op, 1.0f};
    case UnaryOpType::CLIP:
      return UnaryWithParam{.op = *op, .param = 0.0f, .param2 = 1.0f};
    default:
      return UnaryWithParam{*op};
  }
}

uint32_t u32(double v) { return static_cast<uint32_t>(v); }

// The op as a call that can be repeated (and traced): what it enqueues is one launch set.
StatusOr<std::function<Status()>> make_call(Device& device, const OpQuery& q) {
  std::vector<Tensor> in;
  for (size_t i = 0; i < q.inputs.size(); ++i) {
    TS_ASSIGN_OR_RETURN(Tensor t, input_tensor(device, q, i));
    in.push_back(std::move(t));
  }
  const auto& s = q.inputs[0].logical_shape;
  auto dtype_arg = [&](std::string_view name) { return parse_dtype_word(q.word(name)).value_or(q.inputs[0].dtype); };
  auto drop = [](auto result) -> Status { return result.status(); };
  auto conv_config = [&] {  // the weights and output dtypes; block-float outputs are tiles
    Conv2dConfig c{.weights_dtype = dtype_arg("weights_dtype"), .dtype = dtype_arg("dtype")};
    if (is_block_float(*c.dtype)) c.output_layout = Layout::TILE;
    if (q.word("algorithm") != "auto") c.algorithm = q.word("algorithm");
    return c;
  };
  auto two = [&](std::string_view arg) { return std::array<uint32_t, 2>{u32(q.num(arg, 0)), u32(q.num(arg, 1))}; };
  const std::string& op = q.op;
  if (op == "conv2d") {
    Conv2dParams p{.batch_size = s[0],
                   .input_height = s[2],
                   .input_width = s[3],
                   .in_channels = s[1],
                   .out_channels = u32(q.num("out_channels")),
                   .kernel_size = two("kernel_size"),
                   .stride = two("stride"),
                   .padding = {u32(q.num("padding", 0)), u32(q.num("padding", 1)), u32(q.num("padding", 2)),
                               u32(q.num("padding", 3))},
                   .dilation = two("dilation"),
                   .groups = u32(q.num("groups"))};
    TS_ASSIGN_OR_RETURN(p.activation, activation(q.word("activation")));
    TS_RETURN_IF_ERROR(p.validate());
    Conv2dConfig config = conv_config();
    config.compute_config.math_fidelity = parse_math_fidelity(q.word("math_fidelity")).value_or(MathFidelity::HiFi4);
    TS_ASSIGN_OR_RETURN(Tensor weight, host_weights(Shape{p.out_channels, p.in_channels / p.groups, p.kernel_size[0],
                                                          p.kernel_size[1]}));
    TS_ASSIGN_OR_RETURN(Tensor bias, Tensor::from_vector(std::vector<float>(p.out_channels, 0.01f),
                                                         Shape{p.out_channels}, DataType::FLOAT32));
    if (q.num("residual") != 0) {  // a skip connection of the output's shape, added by the kernel
      TS_ASSIGN_OR_RETURN(Tensor skip,
                          device_tensor(device, {p.batch_size, p.output_height(), p.output_width(), p.out_channels},
                                        *config.dtype, Layout::ROW_MAJOR, BufferType::DRAM, 6));
      const Conv2dResidual residual{.tensor = skip};
      TS_ASSIGN_OR_RETURN(Conv2dResult first, conv2d_with_residual(in[0], weight, bias, p, residual, config));
      auto prepared = std::make_shared<PreparedConv2dWeights>(first.weights);
      return std::function<Status()>([x = in[0], prepared, p, residual, config] {
        return conv2d_with_residual(x, *prepared, p, residual, config).status();
      });
    }
    TS_ASSIGN_OR_RETURN(Conv2dResult first, conv2d(in[0], weight, bias, p, config));
    auto prepared = std::make_shared<PreparedConv2dWeights>(first.weights);
    return std::function<Status()>(
        [x = in[0], prepared, p, config] { return conv2d(x, *prepared, p, config).status(); });
  }
  if (op == "conv_transpose2d") {
    ConvTranspose2dParams p{.batch_size = s[0],
                            .input_height = s[2],
                            .input_width = s[3],
                            .in_channels = s[1],
                            .out_channels = u32(q.num("out_channels")),
                            .kernel_size = two("kernel_size"),
                            .stride = two("stride"),
                            .padding = two("padding"),
                            .output_padding = two("output_padding"),
                            .dilation = two("dilation"),
                            .groups = u32(q.num("groups"))};
    TS_ASSIGN_OR_RETURN(p.activation, activation(q.word("activation")));
    TS_RETURN_IF_ERROR(p.validate());
    const Conv2dConfig config = conv_config();
    // PyTorch's layout: (in_channels, out_channels / groups, kh, kw).
    TS_ASSIGN_OR_RETURN(Tensor weight, host_weights(Shape{p.in_channels, p.out_channels / p.groups, p.kernel_size[0],
                                                          p.kernel_size[1]}));
    TS_ASSIGN_OR_RETURN(Conv2dResult first, conv_transpose2d(in[0], weight, std::nullopt, p, config));
    auto prepared = std::make_shared<PreparedConv2dWeights>(first.weights);
    return std::function<Status()>(
        [x = in[0], prepared, p, config] { return conv_transpose2d(x, *prepared, p, config).status(); });
  }
  if (op == "linear") {
    const uint32_t k = s.back(), n = u32(q.num("out_features"));
    TS_ASSIGN_OR_RETURN(Tensor w,
                        device_tensor(device, {k, n}, dtype_arg("weights_dtype"),
                                      is_block_float(dtype_arg("weights_dtype")) ? Layout::TILE : Layout::ROW_MAJOR,
                                      BufferType::DRAM, 3));
    std::optional<Tensor> b;
    if (q.num("bias") != 0) {
      TS_ASSIGN_OR_RETURN(
          b, device_tensor(device, {n}, q.inputs[0].dtype == DataType::FLOAT32 ? DataType::FLOAT32 : DataType::BFLOAT16,
                           Layout::ROW_MAJOR, BufferType::DRAM, 4));
    }
    MatmulParams mp{.dtype = dtype_arg("dtype")};
    TS_ASSIGN_OR_RETURN(UnaryWithParam a, activation(q.word("activation")));
    if (!a.is_identity()) mp.activation = a;
    return std::function<Status()>([x = in[0], w, b, mp, drop] { return drop(linear(x, w, b, mp)); });
  }
  if (op == "matmul") {
    MatmulParams mp{.transpose_b = q.num("transpose_b") != 0, .dtype = dtype_arg("dtype")};
    TS_ASSIGN_OR_RETURN(UnaryWithParam a, activation(q.word("activation")));
    if (!a.is_identity()) mp.activation = a;
    return std::function<Status()>([in, mp, drop] { return drop(matmul(in[0], in[1], mp)); });
  }
  const std::string_view family = find_op(op)->family;
  if (family == "eltwise_unary") {
    TS_ASSIGN_OR_RETURN(UnaryWithParam a, activation(op));
    EltwiseParams ep{.dtype = dtype_arg("dtype")};
    return std::function<Status()>([x = in[0], a, ep, drop] { return drop(unary(x, a, ep)); });
  }
  if (family == "eltwise_binary") {
    const BinaryOpType t = op == "add"   ? BinaryOpType::ADD
                           : op == "sub" ? BinaryOpType::SUB
                           : op == "mul" ? BinaryOpType::MUL
                           : op == "max" ? BinaryOpType::MAX
                           : op == "min" ? BinaryOpType::MIN
                           : op == "gt"  ? BinaryOpType::GREATER
                           : op == "ge"  ? BinaryOpType::GREATER_EQUAL
                           : op == "lt"  ? BinaryOpType::LESS
                           : op == "le"  ? BinaryOpType::LESS_EQUAL
                           : op == "eq"  ? BinaryOpType::EQUAL
                                         : BinaryOpType::DIV;
    EltwiseParams ep{.dtype = dtype_arg("dtype")};
    TS_ASSIGN_OR_RETURN(UnaryWithParam a, activation(q.word("activation")));
    if (!a.is_identity()) ep.activation = a;
    return std::function<Status()>([in, t, ep, drop] { return drop(binary(in[0], in[1], t, ep)); });
  }
  if (op == "max_pool2d" || op == "avg_pool2d") {
    Pool2dParams p{.batch_size = s[0],
                   .input_height = s[2],
                   .input_width = s[3],
                   .channels = s[1],
                   .kernel_size = two("kernel_size"),
                   .stride = two("stride"),
                   .padding = two("padding"),
                   .dilation = two("dilation"),
                   .ceil_mode = q.num("ceil_mode") != 0};
    const bool max = op == "max_pool2d";
    return std::function<Status()>(
        [x = in[0], p, max, drop] { return drop(max ? max_pool2d(x, p) : avg_pool2d(x, p)); });
  }
  if (op == "global_avg_pool2d")
    return std::function<Status()>([x = in[0], drop] { return drop(global_avg_pool2d(x)); });
  if (op == "upsample") {
    UpsampleParams p{.scale_h = static_cast<float>(q.num("scale_factor", 0)),
                     .scale_w = static_cast<float>(q.num("scale_factor", 1)),
                     .mode = q.word("mode") == "bilinear" ? UpsampleMode::BILINEAR : UpsampleMode::NEAREST};
    return std::function<Status()>([x = in[0], p, drop] { return drop(upsample(x, p)); });
  }
  if (op == "typecast") {
    const DataType to = dtype_arg("dtype");
    return std::function<Status()>([x = in[0], to, drop] { return drop(typecast(x, to)); });
  }
  if (op == "tilize") {
    DataMovementParams p{.dtype = dtype_arg("dtype")};
    return std::function<Status()>([x = in[0], p, drop] { return drop(tilize(x, p)); });
  }
  if (op == "untilize") return std::function<Status()>([x = in[0], drop] { return drop(untilize(x)); });
  if (op == "permute") {
    std::vector<int> perm;
    for (double d : q.args.find("perm")->second.numbers) perm.push_back(static_cast<int>(d));
    return std::function<Status()>([x = in[0], perm, drop] { return drop(permute(x, perm)); });
  }
  if (op == "concat") {
    const int dim = static_cast<int>(q.num("dim"));
    return std::function<Status()>([in, dim, drop] { return drop(concat(in, dim)); });
  }
  if (op == "softmax") {
    const int dim = static_cast<int>(q.num("dim"));
    return std::function<Status()>([x = in[0], dim, drop] { return drop(softmax(x, dim)); });
  }
  if (op == "layer_norm") return std::function<Status()>([x = in[0], drop] { return drop(layer_norm(x)); });
  return unimplemented_error("measure_op: no runner for op '{}'", op);
}

}  // namespace

StatusOr<Measurement> measure_op(Device& device, const OpQuery& query, uint32_t replays) {
  TS_RETURN_IF_ERROR(validate(query));
  if (replays == 0) return invalid_argument_error("measure_op: replays must be at least 1");
  TS_ASSIGN_OR_RETURN(std::function<Status()> call, make_call(device, query));
  TS_RETURN_IF_ERROR(call());  // compiles its programs
  // Short ops replay more often: at least `replays`, and about 5 ms of replays in all (at most 401).
  TS_RETURN_IF_ERROR(synchronize_device(device));
  const auto t0 = std::chrono::steady_clock::now();
  TS_RETURN_IF_ERROR(call());
  TS_RETURN_IF_ERROR(synchronize_device(device));
  const double once_ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  replays = std::clamp(static_cast<uint32_t>(5e6 / std::max(once_ns, 1.0)), replays, std::max(replays, 401u));
  TS_ASSIGN_OR_RETURN(TracedTimes traced, traced_kernel_times(device, call, replays));
  Measurement m{.replays = replays, .launches = traced.launches, .kernels = std::move(traced.kernels)};
  std::vector<double>& t = traced.ns;
  std::sort(t.begin(), t.end());
  // The 20%-trimmed mean: as robust as the median to a preempted replay, and
  // finer than the clock's tick on launches of a few hundred nanoseconds.
  const size_t cut = t.size() / 5;
  double sum = 0;
  for (size_t i = cut; i < t.size() - cut; ++i) sum += t[i];
  m.time_ns = sum / static_cast<double>(t.size() - 2 * cut);
  m.min_ns = t.front();
  m.max_ns = t.back();
  return m;
}

}  // namespace tessera::perfmodel
