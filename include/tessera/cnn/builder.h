// The TT-CNN builder: a layer is a configuration (what it computes, how it
// is placed on the device) and a layer object made from it, which prepares
// its weights on the first call and reuses them after.
//
// Names, fields, defaults and error messages follow the original's
// models/tt_cnn/tt/builder.py (../shared/reference/tt-cnn-and-ttnn.md §2):
//   Conv2dConfiguration    -> cnn::Conv2d     (conv2d)
//   MaxPool2dConfiguration -> cnn::MaxPool2d  (max_pool2d)
//   UpsampleConfiguration  -> cnn::Upsample   (upsample)
// Configurations are plain structs (designated initializers); validate()
// does what the original's __post_init__ does, and the layers' create()
// calls it, so a bad configuration never becomes a layer.
//
// Differences from the original, on purpose:
// - The input is any NHWC device tensor, (B, H, W, C) or (1, 1, B*H*W, C).
// - Channel slicing of a conv sums the partial convolutions in float32 and
//   applies the bias and the activation once to the sum (the original applies
//   its activation to every partial output).
// - activation_dtype is carried but, as in the original, not used: the conv
//   takes the dtype its input has.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <variant>

#include "tessera/ops/conv2d.h"
#include "tessera/ops/conv2d_l1.h"
#include "tessera/ops/pool2d.h"
#include "tessera/ops/upsample.h"

namespace tessera::cnn {

// ---- Slice strategies ------------------------------------------------------
// Height / width: the conv slices its output through DRAM (num_slices 0: the
// op picks). Channel: the layer slices the input channels itself (the conv
// op cannot) and needs num_slices > 1. L1 full: everything in L1 (without a
// slice strategy, DRAM is assumed).
struct HeightSliceStrategyConfiguration {
  uint32_t num_slices = 0;
};
struct WidthSliceStrategyConfiguration {
  uint32_t num_slices = 0;
};
struct ChannelSliceStrategyConfiguration {
  uint32_t num_slices = 0;
};
struct L1FullSliceStrategyConfiguration {};
using SliceStrategy = std::variant<HeightSliceStrategyConfiguration, WidthSliceStrategyConfiguration,
                                   ChannelSliceStrategyConfiguration, L1FullSliceStrategyConfiguration>;
uint32_t get_num_slices(const SliceStrategy& s);
// nullopt for none; Conv2dL1FullSliceConfig for channel slicing (the layer
// slices, each partial conv runs in L1), as the original's to_slice_config.
std::optional<Conv2dSliceConfig> to_slice_config(const std::optional<SliceStrategy>& s);

// ---- Sharding strategies ---------------------------------------------------
struct AutoShardedStrategyConfiguration {};
struct HeightShardedStrategyConfiguration {
  bool reshard_if_not_optimal = false;
  std::optional<CoreRangeSet> override_core_grid;
  uint32_t act_block_h_override = 0;  // a multiple of 32: larger is faster and needs more L1
};
struct WidthShardedStrategyConfiguration {
  bool reshard_if_not_optimal = false;
  std::optional<CoreRangeSet> override_core_grid;
  uint32_t act_block_w_div = 1;
};
struct BlockShardedStrategyConfiguration {
  bool reshard_if_not_optimal = false;
  std::optional<CoreRangeSet> override_core_grid;
  uint32_t act_block_h_override = 0;
  uint32_t act_block_w_div = 1;
  bool override_output_sharding_config = false;
};
using ShardingStrategy = std::variant<AutoShardedStrategyConfiguration, HeightShardedStrategyConfiguration,
                                      WidthShardedStrategyConfiguration, BlockShardedStrategyConfiguration>;
// nullopt for auto.
std::optional<TensorMemoryLayout> get_tensor_memory_layout(const ShardingStrategy& s);
// The original's ShardedStrategyConfiguration.get_core_grid_from_num_cores:
// full rows of grid_cols cores, then the remainder on the next row.
StatusOr<CoreRangeSet> get_core_grid_from_num_cores(uint32_t num_cores, uint32_t grid_rows, uint32_t grid_cols);

// ---- Conv2d ----------------------------------------------------------------
struct Conv2dConfiguration {
  uint32_t input_height = 0, input_width = 0, in_channels = 0, out_channels = 0, batch_size = 0;
  std::array<uint32_t, 2> kernel_size{0, 0};
  Tensor weight;  // host (out_channels, in_channels / groups, kh, kw)

  std::array<uint32_t, 2> stride{1, 1};
  std::array<uint32_t, 2> padding{0, 0};
  uint32_t groups = 1;
  std::array<uint32_t, 2> dilation{1, 1};
  std::optional<UnaryWithParam> activation;
  std::optional<Tensor> bias;  // host (1, 1, 1, out_channels)

  DataType activation_dtype = DataType::BFLOAT16;
  DataType weights_dtype = DataType::BFLOAT16;
  DataType output_dtype = DataType::BFLOAT16;
  Layout output_layout = Layout::TILE;

  ShardingStrategy sharding_strategy = AutoShardedStrategyConfiguration{};
  std::optional<SliceStrategy> slice_strategy;

  MathFidelity math_fidelity = MathFidelity::LoFi;
  bool fp32_dest_acc_en = false;
  bool packer_l1_acc = false;

  bool enable_act_double_buffer = false;
  bool enable_weights_double_buffer = true;  // the builder's default (conv2d's own is false)

  bool deallocate_activation = false;
  bool reallocate_halo_output = true;
  bool config_tensors_in_dram = false;

  // The original's checks, with its messages:
  //   "Weight shape [a, b, c, d] doesn't match expected shape (o, i, kh, kw) for configuration parameters"
  //   "Bias shape [..] doesn't match expected shape (1, 1, 1, o) for out_channels=o"
  //   "Channel slicing requires num_slices > 1"
  // plus the geometry (Conv2dParams::validate) and the conv knobs.
  Status validate() const;

  // Weights N(0, 1) rounded through bfloat16 (as torch.randn(..., bfloat16)),
  // bias (1, 1, 1, out); `seed` makes them reproducible. Other fields keep
  // their defaults: set them on the result.
  static Conv2dConfiguration with_random_weights(uint32_t input_height, uint32_t input_width, uint32_t in_channels,
                                                 uint32_t out_channels, uint32_t batch_size,
                                                 std::array<uint32_t, 2> kernel_size, uint32_t groups = 1,
                                                 uint32_t seed = 0);

  Conv2dParams params() const;        // the geometry and activation
  Conv2dConfig conv2d_config() const;  // the original's to_conv2d_config + compute and slice configs
};

// Output of a layer call with its spatial size (the original's
// return_output_dim=True).
struct LayerOutput {
  Tensor output;
  uint32_t output_height = 0, output_width = 0;
};

class Conv2d {
 public:
  // INVALID_ARGUMENT when the configuration does not validate.
  static StatusOr<Conv2d> create(Conv2dConfiguration configuration, std::shared_ptr<Device> device);
  StatusOr<Tensor> operator()(const Tensor& input);
  StatusOr<LayerOutput> forward(const Tensor& input);
  const Conv2dConfiguration& configuration() const { return config_; }

 private:
  Conv2d(Conv2dConfiguration c, std::shared_ptr<Device> d) : config_(std::move(c)), device_(std::move(d)) {}
  StatusOr<LayerOutput> forward_channel_sliced(const Tensor& input);

  Conv2dConfiguration config_;
  std::shared_ptr<Device> device_;
  std::optional<PreparedConv2dWeights> prepared_;
  std::vector<Tensor> weight_slices_;                       // host, channel slicing
  std::vector<std::optional<PreparedConv2dWeights>> prepared_slices_;
  std::optional<Tensor> device_bias_;                       // channel slicing
};

// ---- MaxPool2d -------------------------------------------------------------
struct MaxPool2dConfiguration {
  uint32_t input_height = 0, input_width = 0, channels = 0, batch_size = 0;
  std::array<uint32_t, 2> kernel_size{0, 0};
  std::array<uint32_t, 2> stride{1, 1};
  std::array<uint32_t, 2> padding{0, 0};
  std::array<uint32_t, 2> dilation{1, 1};
  bool ceil_mode = false;

  bool in_place = false;  // stored, not used (as in the original)
  bool deallocate_input = false;
  bool reallocate_halo_output = true;

  DataType dtype = DataType::BFLOAT16;
  Layout output_layout = Layout::ROW_MAJOR;
  std::optional<SliceStrategy> slice_strategy;

  // "Height and Width slicing are not supported for MaxPool2d. Only channel
  // slicing is supported." / "Number of channels (c) must be divisible by
  // number of slices (n)", plus the pool geometry.
  Status validate() const;
  Pool2dParams params() const;
};

class MaxPool2d {
 public:
  static StatusOr<MaxPool2d> create(MaxPool2dConfiguration configuration, std::shared_ptr<Device> device);
  // Input (1, 1, B*H*W, C) or (B, H, W, C); output (1, 1, B*OH*OW, C).
  StatusOr<Tensor> operator()(const Tensor& input);
  const MaxPool2dConfiguration& configuration() const { return config_; }

 private:
  MaxPool2d(MaxPool2dConfiguration c, std::shared_ptr<Device> d) : config_(std::move(c)), device_(std::move(d)) {}
  MaxPool2dConfiguration config_;
  std::shared_ptr<Device> device_;
};

// ---- Upsample --------------------------------------------------------------
struct UpsampleConfiguration {
  uint32_t input_height = 0, input_width = 0, channels = 0, batch_size = 0;
  std::array<uint32_t, 2> scale_factor{2, 2};
  std::string mode = "nearest";
  std::optional<SliceStrategy> slice_strategy;

  // "Mode must be one of {'nearest', 'bilinear'}, got 'x'", and the slicing
  // messages of MaxPool2dConfiguration with "Upsample".
  Status validate() const;
};

class Upsample {
 public:
  static StatusOr<Upsample> create(UpsampleConfiguration configuration, std::shared_ptr<Device> device);
  // Input (B, H, W, C) or (1, 1, B*H*W, C); output (B, H*sh, W*sw, C).
  StatusOr<Tensor> operator()(const Tensor& input);
  const UpsampleConfiguration& configuration() const { return config_; }

 private:
  Upsample(UpsampleConfiguration c, std::shared_ptr<Device> d) : config_(std::move(c)), device_(std::move(d)) {}
  UpsampleConfiguration config_;
  std::shared_ptr<Device> device_;
};

}  // namespace tessera::cnn
