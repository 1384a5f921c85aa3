#include "tessera/cnn/builder.h"

#include <random>

#include "tessera/numerics/bfloat16.h"
#include "tessera/ops/data_movement.h"
#include "tessera/ops/eltwise.h"
#include "tessera/ops/manipulation.h"
#include "tessera/ops/reference.h"

namespace tessera::cnn {

namespace {

std::string tuple_string(std::span<const uint32_t> v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + ")";
}

// "Height and Width slicing are not supported for <op>. ..." and the channel
// divisibility rule, shared by pools and upsample.
Status check_channel_only_slicing(const std::optional<SliceStrategy>& s, uint32_t channels, std::string_view op) {
  if (!s) return ok_status();
  if (std::holds_alternative<HeightSliceStrategyConfiguration>(*s) ||
      std::holds_alternative<WidthSliceStrategyConfiguration>(*s))
    return invalid_argument_error(
        "Height and Width slicing are not supported for {}. Only channel slicing is supported.", op);
  if (const auto* c = std::get_if<ChannelSliceStrategyConfiguration>(&*s)) {
    if (c->num_slices <= 1) return invalid_argument_error("Channel slicing requires num_slices > 1");
    if (channels % c->num_slices != 0)
      return invalid_argument_error("Number of channels ({}) must be divisible by number of slices ({})", channels,
                                    c->num_slices);
  }
  return ok_status();
}

uint32_t channel_slices(const std::optional<SliceStrategy>& s) {
  const auto* c = s ? std::get_if<ChannelSliceStrategyConfiguration>(&*s) : nullptr;
  return c ? c->num_slices : 0;
}

// Channels [begin, end) of an NHWC activation (ROW_MAJOR, any memory).
StatusOr<Tensor> channel_slice(const Tensor& x, uint32_t begin, uint32_t end) {
  const Shape& s = x.shape();
  return slice(x, {.begin = {0, 0, 0, begin}, .end = {s[0], s[1], s[2], end}},
               {.memory_config = DRAM_MEMORY_CONFIG});
}

StatusOr<Tensor> row_major(const Tensor& x) {
  if (x.layout() == Layout::ROW_MAJOR) return x;
  const DataType dt = x.dtype() == DataType::FLOAT32 ? DataType::FLOAT32 : DataType::BFLOAT16;
  return untilize(x, {.memory_config = DRAM_MEMORY_CONFIG, .dtype = dt});
}

// Applies `op` to each of `slices` channel slices and concatenates the results
// on channels in DRAM, as the original's pool and upsample channel slicing.
template <class Op>
StatusOr<Tensor> over_channel_slices(const Tensor& input, uint32_t channels, uint32_t slices, Op op) {
  TS_ASSIGN_OR_RETURN(Tensor x, row_major(input));
  std::vector<Tensor> parts;
  const uint32_t step = channels / slices;
  for (uint32_t i = 0; i < slices; ++i) {
    TS_ASSIGN_OR_RETURN(Tensor part, channel_slice(x, i * step, (i + 1) * step));
    TS_ASSIGN_OR_RETURN(Tensor out, op(part));
    parts.push_back(std::move(out));
  }
  TS_ASSIGN_OR_RETURN(Tensor joined, concat(parts, 3, {.memory_config = DRAM_MEMORY_CONFIG}));
  for (Tensor& p : parts) deallocate(p, true);
  return joined;
}

// Gives a ROW_MAJOR result the configured dtype and layout.
StatusOr<Tensor> finish(Tensor y, DataType dtype, Layout layout) {
  if (layout == Layout::TILE) return tilize(y, {.dtype = dtype});
  if (is_block_float(dtype))
    return invalid_argument_error("{} outputs need TILE layout (block-float tensors are tiles)", data_type_name(dtype));
  if (y.dtype() != dtype) return typecast(y, dtype);
  return y;
}

}  // namespace

uint32_t get_num_slices(const SliceStrategy& s) {
  return std::visit(
      [](const auto& v) -> uint32_t {
        if constexpr (std::is_same_v<std::decay_t<decltype(v)>, L1FullSliceStrategyConfiguration>) {
          return 0;
        } else {
          return v.num_slices;
        }
      },
      s);
}

std::optional<Conv2dSliceConfig> to_slice_config(const std::optional<SliceStrategy>& s) {
  if (!s) return std::nullopt;
  if (std::holds_alternative<ChannelSliceStrategyConfiguration>(*s) ||
      std::holds_alternative<L1FullSliceStrategyConfiguration>(*s))
    return Conv2dL1FullSliceConfig;
  const Conv2dSliceType t = std::holds_alternative<HeightSliceStrategyConfiguration>(*s) ? Conv2dSliceType::DRAM_HEIGHT
                                                                                         : Conv2dSliceType::DRAM_WIDTH;
  return Conv2dSliceConfig{t, get_num_slices(*s)};
}

std::optional<TensorMemoryLayout> get_tensor_memory_layout(const ShardingStrategy& s) {
  switch (s.index()) {
    case 1: return TensorMemoryLayout::HEIGHT_SHARDED;
    case 2: return TensorMemoryLayout::WIDTH_SHARDED;
    case 3: return TensorMemoryLayout::BLOCK_SHARDED;
    default: return std::nullopt;
  }
}

StatusOr<CoreRangeSet> get_core_grid_from_num_cores(uint32_t num_cores, uint32_t grid_rows, uint32_t grid_cols) {
  // The original mixes rows and columns here, which is right for square
  // grids only; Tessera lays full rows of grid_cols cores (x) along y.
  if (num_cores == 0 || num_cores > grid_rows * grid_cols)
    return invalid_argument_error("get_core_grid_from_num_cores: expected 1..{} cores, got {}", grid_rows * grid_cols,
                                  num_cores);
  return num_cores_to_corerangeset(num_cores, CoreCoord{grid_cols, grid_rows});
}

// ---- Conv2dConfiguration ---------------------------------------------------

Conv2dParams Conv2dConfiguration::params() const {
  Conv2dParams p;
  p.batch_size = batch_size, p.input_height = input_height, p.input_width = input_width;
  p.in_channels = in_channels, p.out_channels = out_channels;
  p.kernel_size = kernel_size, p.stride = stride, p.dilation = dilation, p.groups = groups;
  p.with_padding(padding[0], padding[1]);
  if (activation) p.activation = *activation;
  return p;
}

Conv2dConfig Conv2dConfiguration::conv2d_config() const {
  Conv2dConfig c;
  c.weights_dtype = weights_dtype;
  c.dtype = output_dtype;
  c.output_layout = output_layout;
  c.deallocate_activation = deallocate_activation;
  c.reallocate_halo_output = reallocate_halo_output;
  c.config_tensors_in_dram = config_tensors_in_dram;
  c.enable_act_double_buffer = enable_act_double_buffer;
  c.enable_weights_double_buffer = enable_weights_double_buffer;
  c.shard_layout = get_tensor_memory_layout(sharding_strategy);
  std::visit(
      [&](const auto& s) {
        using S = std::decay_t<decltype(s)>;
        if constexpr (!std::is_same_v<S, AutoShardedStrategyConfiguration>) {
          c.reshard_if_not_optimal = s.reshard_if_not_optimal;
          c.core_grid = s.override_core_grid;
          c.override_sharding_config = s.override_core_grid.has_value();
        }
        if constexpr (std::is_same_v<S, HeightShardedStrategyConfiguration> ||
                      std::is_same_v<S, BlockShardedStrategyConfiguration>)
          c.act_block_h_override = s.act_block_h_override;
        if constexpr (std::is_same_v<S, WidthShardedStrategyConfiguration> ||
                      std::is_same_v<S, BlockShardedStrategyConfiguration>)
          c.act_block_w_div = s.act_block_w_div;
      },
      sharding_strategy);
  c.slice_config = to_slice_config(slice_strategy);
  c.compute_config = {.math_fidelity = math_fidelity, .fp32_dest_acc_en = fp32_dest_acc_en,
                      .packer_l1_acc = packer_l1_acc};
  return c;
}

Status Conv2dConfiguration::validate() const {
  const uint32_t g = groups ? groups : 1;
  const std::array<uint32_t, 4> want{out_channels, in_channels / g, kernel_size[0], kernel_size[1]};
  if (weight.shape().rank() != 4 || !std::equal(want.begin(), want.end(), weight.shape().dims().begin()))
    return invalid_argument_error("Weight shape {} doesn't match expected shape {} for configuration parameters",
                                  weight.shape().to_string(), tuple_string(want));
  if (bias && !(bias->shape() == Shape{1, 1, 1, out_channels}))
    return invalid_argument_error("Bias shape {} doesn't match expected shape (1, 1, 1, {}) for out_channels={}",
                                  bias->shape().to_string(), out_channels, out_channels);
  if (slice_strategy) {
    if (const auto* c = std::get_if<ChannelSliceStrategyConfiguration>(&*slice_strategy)) {
      if (c->num_slices <= 1) return invalid_argument_error("Channel slicing requires num_slices > 1");
      if (in_channels % c->num_slices != 0)
        return invalid_argument_error("Number of input channels ({}) must be divisible by number of slices ({})",
                                      in_channels, c->num_slices);
      if (groups != 1) return invalid_argument_error("Channel slicing needs groups == 1, got groups={}", groups);
    }
  }
  TS_RETURN_IF_ERROR(params().validate());
  return conv2d_config().validate();
}

Conv2dConfiguration Conv2dConfiguration::with_random_weights(uint32_t input_height, uint32_t input_width,
                                                             uint32_t in_channels, uint32_t out_channels,
                                                             uint32_t batch_size, std::array<uint32_t, 2> kernel_size,
                                                             uint32_t groups, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto randn = [&](uint64_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = bfloat16_to_float(float_to_bfloat16(normal(rng)));
    return v;
  };
  const uint32_t g = groups ? groups : 1;
  Conv2dConfiguration c;
  c.input_height = input_height, c.input_width = input_width;
  c.in_channels = in_channels, c.out_channels = out_channels, c.batch_size = batch_size;
  c.kernel_size = kernel_size, c.groups = groups;
  const Shape ws{out_channels, in_channels / g, kernel_size[0], kernel_size[1]};
  c.weight = Tensor::from_vector(randn(ws.volume()), ws, DataType::FLOAT32).value();
  c.bias = Tensor::from_vector(randn(out_channels), Shape{1, 1, 1, out_channels}, DataType::FLOAT32).value();
  return c;
}

// ---- Conv2d ----------------------------------------------------------------

StatusOr<Conv2d> Conv2d::create(Conv2dConfiguration configuration, std::shared_ptr<Device> device) {
  if (!device) return invalid_argument_error("Conv2d: expected a device, got none");
  if (configuration.weight.is_on_device() || (configuration.bias && configuration.bias->is_on_device()))
    return invalid_argument_error("Conv2d: expected host weight and bias tensors (they are prepared on first call)");
  TS_RETURN_IF_ERROR(configuration.validate());
  Conv2d layer(std::move(configuration), std::move(device));
  if (const uint32_t n = channel_slices(layer.config_.slice_strategy)) {
    // Split the weights along in_channels once, on the host.
    const Conv2dConfiguration& c = layer.config_;
    const uint32_t step = c.in_channels / n;
    for (uint32_t i = 0; i < n; ++i) {
      TS_ASSIGN_OR_RETURN(Tensor w, reference::slice(c.weight, {.begin = {0, i * step, 0, 0},
                                                                .end = {c.out_channels, (i + 1) * step,
                                                                        c.kernel_size[0], c.kernel_size[1]}}));
      layer.weight_slices_.push_back(std::move(w));
    }
    layer.prepared_slices_.resize(n);
  }
  return layer;
}

StatusOr<Tensor> Conv2d::operator()(const Tensor& input) {
  TS_ASSIGN_OR_RETURN(LayerOutput out, forward(input));
  return out.output;
}

StatusOr<LayerOutput> Conv2d::forward(const Tensor& input) {
  if (!weight_slices_.empty()) return forward_channel_sliced(input);
  const Conv2dParams p = config_.params();
  const Conv2dConfig cc = config_.conv2d_config();
  StatusOr<Conv2dResult> r =
      prepared_ ? conv2d(input, *prepared_, p, cc) : conv2d(input, config_.weight, config_.bias, p, cc);
  TS_RETURN_IF_ERROR(r.status());
  if (!prepared_) prepared_ = r->weights;
  return LayerOutput{r->output, r->output_height, r->output_width};
}

StatusOr<LayerOutput> Conv2d::forward_channel_sliced(const Tensor& input) {
  const uint32_t n = static_cast<uint32_t>(weight_slices_.size());
  const uint32_t step = config_.in_channels / n;
  Conv2dParams p = config_.params();
  p.in_channels = step;
  p.activation = {};
  Conv2dConfig cc = config_.conv2d_config();
  cc.dtype = DataType::FLOAT32;  // partial sums stay float32 until the bias
  cc.output_layout = Layout::ROW_MAJOR;
  cc.output_memory_config = DRAM_MEMORY_CONFIG;
  cc.deallocate_activation = false;
  TS_ASSIGN_OR_RETURN(Tensor x, row_major(input));
  std::optional<Tensor> acc;
  uint32_t oh = 0, ow = 0;
  for (uint32_t i = 0; i < n; ++i) {
    TS_ASSIGN_OR_RETURN(Tensor part_in, channel_slice(x, i * step, (i + 1) * step));
    StatusOr<Conv2dResult> r = prepared_slices_[i] ? conv2d(part_in, *prepared_slices_[i], p, cc)
                                                   : conv2d(part_in, weight_slices_[i], std::nullopt, p, cc);
    TS_RETURN_IF_ERROR(r.status());
    if (!prepared_slices_[i]) prepared_slices_[i] = r->weights;
    oh = r->output_height, ow = r->output_width;
    if (!acc) {
      acc = r->output;
    } else {
      TS_ASSIGN_OR_RETURN(Tensor sum, add(*acc, r->output));
      deallocate(*acc, true);
      acc = std::move(sum);
    }
  }
  if (!device_bias_) {
    const Shape s{1, 1, 1, config_.out_channels};
    TS_ASSIGN_OR_RETURN(Tensor b, config_.bias ? StatusOr<Tensor>(*config_.bias)
                                               : Tensor::from_vector(std::vector<float>(config_.out_channels, 0.0f), s,
                                                                     DataType::FLOAT32));
    TS_ASSIGN_OR_RETURN(device_bias_, to_device(b, *device_, DRAM_MEMORY_CONFIG));
  }
  const DataType out_dt = config_.output_dtype;
  TS_ASSIGN_OR_RETURN(Tensor y, add(*acc, *device_bias_,
                                    {.dtype = is_block_float(out_dt) ? DataType::FLOAT32 : out_dt,
                                     .activation = config_.activation}));
  deallocate(*acc, true);
  TS_ASSIGN_OR_RETURN(y, finish(std::move(y), out_dt, config_.output_layout));
  if (config_.deallocate_activation) {
    Tensor in = input;
    deallocate(in, true);
  }
  return LayerOutput{std::move(y), oh, ow};
}

// ---- MaxPool2d -------------------------------------------------------------

Pool2dParams MaxPool2dConfiguration::params() const {
  Pool2dParams p;
  p.batch_size = batch_size, p.input_height = input_height, p.input_width = input_width, p.channels = channels;
  p.kernel_size = kernel_size, p.stride = stride, p.padding = padding, p.dilation = dilation;
  p.ceil_mode = ceil_mode;
  return p;
}

Status MaxPool2dConfiguration::validate() const {
  TS_RETURN_IF_ERROR(check_channel_only_slicing(slice_strategy, channels, "MaxPool2d"));
  if (slice_strategy && std::holds_alternative<L1FullSliceStrategyConfiguration>(*slice_strategy))
    return invalid_argument_error(
        "Height and Width slicing are not supported for MaxPool2d. Only channel slicing is supported.");
  if (dtype != DataType::FLOAT32 && dtype != DataType::BFLOAT16 && output_layout != Layout::TILE)
    return invalid_argument_error("MaxPool2d: a {} output needs output_layout TILE", data_type_name(dtype));
  return params().validate("max_pool2d");
}

StatusOr<MaxPool2d> MaxPool2d::create(MaxPool2dConfiguration configuration, std::shared_ptr<Device> device) {
  if (!device) return invalid_argument_error("MaxPool2d: expected a device, got none");
  TS_RETURN_IF_ERROR(configuration.validate());
  return MaxPool2d(std::move(configuration), std::move(device));
}

StatusOr<Tensor> MaxPool2d::operator()(const Tensor& input) {
  const Pool2dParams p = config_.params();
  auto pool = [&](const Tensor& x) -> StatusOr<Tensor> {
    Pool2dParams q = p;
    q.channels = x.shape()[3];
    TS_ASSIGN_OR_RETURN(Tensor rm, row_major(x));
    return max_pool2d(rm, q);
  };
  const uint32_t n = channel_slices(config_.slice_strategy);
  TS_ASSIGN_OR_RETURN(Tensor y, n ? over_channel_slices(input, config_.channels, n, pool) : pool(input));
  if (config_.deallocate_input) {
    Tensor in = input;
    deallocate(in, true);
  }
  return finish(std::move(y), config_.dtype, config_.output_layout);
}

// ---- Upsample --------------------------------------------------------------

Status UpsampleConfiguration::validate() const {
  TS_RETURN_IF_ERROR(check_channel_only_slicing(slice_strategy, channels, "Upsample"));
  if (mode != "nearest" && mode != "bilinear")
    return invalid_argument_error("Mode must be one of {{'nearest', 'bilinear'}}, got '{}'", mode);
  if (!input_height || !input_width || !channels || !batch_size || !scale_factor[0] || !scale_factor[1])
    return invalid_argument_error("Upsample: sizes and scale factors must be > 0, got {}x{}x{}x{} scale {}x{}",
                                  batch_size, input_height, input_width, channels, scale_factor[0], scale_factor[1]);
  return ok_status();
}

StatusOr<Upsample> Upsample::create(UpsampleConfiguration configuration, std::shared_ptr<Device> device) {
  if (!device) return invalid_argument_error("Upsample: expected a device, got none");
  TS_RETURN_IF_ERROR(configuration.validate());
  return Upsample(std::move(configuration), std::move(device));
}

StatusOr<Tensor> Upsample::operator()(const Tensor& input) {
  const UpsampleConfiguration& c = config_;
  UpsampleParams up{.scale_h = static_cast<float>(c.scale_factor[0]),
                    .scale_w = static_cast<float>(c.scale_factor[1]),
                    .mode = c.mode == "bilinear" ? UpsampleMode::BILINEAR : UpsampleMode::NEAREST};
  auto run = [&](const Tensor& x) -> StatusOr<Tensor> {
    TS_ASSIGN_OR_RETURN(Tensor rm, row_major(x));
    TS_ASSIGN_OR_RETURN(Tensor nhwc, rm.view(Shape{c.batch_size, c.input_height, c.input_width, rm.shape()[3]}));
    return upsample(nhwc, up);
  };
  const uint32_t n = channel_slices(c.slice_strategy);
  return n ? over_channel_slices(input, c.channels, n, run) : run(input);
}

}  // namespace tessera::cnn
