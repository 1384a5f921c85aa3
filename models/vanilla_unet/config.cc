#include "vanilla_unet/config.h"

#include <cmath>
#include <random>

namespace tessera::models {

namespace {

// One row of the original's table (tt/config.py).
struct Row {
  const char* block;   // "encoder1", "bottleneck", "decoder4", ...
  const char* prefix;  // "enc1", "bottleneck", "dec4", ...
  int index;           // 1 or 2 within the block
  uint32_t level;      // spatial level: 0 = full size, 4 = bottleneck
  uint32_t in, out;
  uint32_t act_block_h;  // 0: AutoSharded
  bool double_buffer = false;
  bool bfp8_output = false;
  bool fp32_acc = true;
  bool deallocate_activation = true;
};

constexpr uint32_t kF = 32;
const Row kRows[] = {
    {"encoder1", "enc1", 1, 0, 3, kF, 15 * 32, true},
    {"encoder1", "enc1", 2, 0, kF, kF, 6 * 32, true, true},
    {"encoder2", "enc2", 1, 1, kF, 2 * kF, 2 * 32, true},
    {"encoder2", "enc2", 2, 1, 2 * kF, 2 * kF, 2 * 32, true, false, true, false},
    {"encoder3", "enc3", 1, 2, 2 * kF, 4 * kF, 64, true},
    {"encoder3", "enc3", 2, 2, 4 * kF, 4 * kF, 64, true},
    {"encoder4", "enc4", 1, 3, 4 * kF, 8 * kF, 96, true},
    {"encoder4", "enc4", 2, 3, 8 * kF, 8 * kF, 96, true},
    {"bottleneck", "bottleneck", 1, 4, 8 * kF, 16 * kF, 32},
    {"bottleneck", "bottleneck", 2, 4, 16 * kF, 16 * kF, 32},
    {"decoder4", "dec4", 1, 3, 16 * kF, 8 * kF, 0, false, true},
    {"decoder4", "dec4", 2, 3, 8 * kF, 8 * kF, 96, false, true},
    {"decoder3", "dec3", 1, 2, 8 * kF, 4 * kF, 96},
    {"decoder3", "dec3", 2, 2, 4 * kF, 4 * kF, 160},
    {"decoder2", "dec2", 1, 1, 4 * kF, 2 * kF, 64},
    {"decoder2", "dec2", 2, 1, 2 * kF, 2 * kF, 64, false, true},
    {"decoder1", "dec1", 1, 0, 2 * kF, kF, 320, false, true, false},
    {"decoder1", "dec1", 2, 0, kF, kF, 320, false, true, false},
};

StatusOr<Tensor> get(const cnn::WeightMap& sd, const std::string& name) {
  const auto it = sd.find(name);
  if (it == sd.end()) return not_found_error("Vanilla UNet: the state dict has no '{}'", name);
  return it->second;
}

void apply_precision(cnn::Conv2dConfiguration& c, UNetPrecision p) {
  if (p == UNetPrecision::FLOAT32) {
    c.weights_dtype = c.output_dtype = c.activation_dtype = DataType::FLOAT32;
    c.math_fidelity = MathFidelity::HiFi4;
    c.fp32_dest_acc_en = true;
  } else if (p == UNetPrecision::BFLOAT16) {
    c.weights_dtype = c.output_dtype = c.activation_dtype = DataType::BFLOAT16;
  }
}

}  // namespace

StatusOr<std::vector<UNetConvLayer>> unet_conv_configurations(const cnn::WeightMap& sd, const UNetConfigOptions& o) {
  if (o.height % 16 || o.width % 16 || !o.height || !o.width || !o.batch)
    return invalid_argument_error("Vanilla UNet: expected a batch >= 1 and height and width multiples of 16, got "
                                  "{}x{}x{}",
                                  o.batch, o.height, o.width);
  std::vector<UNetConvLayer> layers;
  for (const Row& r : kRows) {
    const std::string module = fmt::format("{}.{}conv{}", r.block, r.prefix, r.index);
    const std::string norm = fmt::format("{}.{}norm{}", r.block, r.prefix, r.index);
    TS_ASSIGN_OR_RETURN(Tensor w, get(sd, module + ".weight"));
    cnn::BatchNorm2dParameters bn;
    TS_ASSIGN_OR_RETURN(bn.running_mean, get(sd, norm + ".running_mean"));
    TS_ASSIGN_OR_RETURN(bn.running_var, get(sd, norm + ".running_var"));
    TS_ASSIGN_OR_RETURN(bn.weight, get(sd, norm + ".weight"));
    TS_ASSIGN_OR_RETURN(bn.bias, get(sd, norm + ".bias"));
    TS_ASSIGN_OR_RETURN(cnn::FoldedConv2d f, cnn::fold_batch_norm_into_conv2d(w, std::nullopt, bn));
    cnn::Conv2dConfiguration c{.input_height = o.height >> r.level,
                               .input_width = o.width >> r.level,
                               .in_channels = r.in,
                               .out_channels = r.out,
                               .batch_size = o.batch,
                               .kernel_size = {3, 3},
                               .weight = f.weight,
                               .padding = {1, 1},
                               .activation = UnaryWithParam{UnaryOpType::RELU},
                               .bias = f.bias,
                               .weights_dtype = DataType::BFLOAT8_B,
                               .output_dtype = r.bfp8_output ? DataType::BFLOAT8_B : DataType::BFLOAT16,
                               .math_fidelity = MathFidelity::LoFi,
                               .fp32_dest_acc_en = r.fp32_acc,
                               .packer_l1_acc = r.fp32_acc,
                               .enable_act_double_buffer = r.double_buffer,
                               .enable_weights_double_buffer = r.double_buffer,
                               .deallocate_activation = r.deallocate_activation};
    if (r.bfp8_output) c.activation_dtype = DataType::BFLOAT8_B;
    if (o.sharded) {
      if (r.act_block_h) c.sharding_strategy = cnn::HeightShardedStrategyConfiguration{.act_block_h_override = r.act_block_h};
      c.slice_strategy = cnn::L1FullSliceStrategyConfiguration{};
    } else {
      c.output_layout = Layout::ROW_MAJOR;
      if (r.bfp8_output) c.output_dtype = DataType::BFLOAT16;  // block-float needs TILE; rows stay bfloat16
    }
    apply_precision(c, o.precision);
    layers.push_back({module, std::move(c)});
  }
  // The final 1x1 conv: bfloat16 weights, HiFi2, no activation, its own bias.
  TS_ASSIGN_OR_RETURN(Tensor fw, get(sd, "conv.weight"));
  TS_ASSIGN_OR_RETURN(Tensor fb, get(sd, "conv.bias"));
  TS_ASSIGN_OR_RETURN(Tensor fb4, fb.view(Shape{1, 1, 1, fb.shape().volume() > 0 ? fb.shape()[0] : 0}));
  cnn::Conv2dConfiguration c{.input_height = o.height,
                             .input_width = o.width,
                             .in_channels = kF,
                             .out_channels = fw.shape()[0],
                             .batch_size = o.batch,
                             .kernel_size = {1, 1},
                             .weight = fw,
                             .bias = fb4,
                             .weights_dtype = DataType::BFLOAT16,
                             .math_fidelity = MathFidelity::HiFi2,
                             .fp32_dest_acc_en = true,
                             .packer_l1_acc = true,
                             .enable_weights_double_buffer = false,
                             .deallocate_activation = true};
  if (o.sharded) {
    c.sharding_strategy = cnn::HeightShardedStrategyConfiguration{.act_block_h_override = 192};
    c.slice_strategy = cnn::L1FullSliceStrategyConfiguration{};
  } else {
    c.output_layout = Layout::ROW_MAJOR;
  }
  apply_precision(c, o.precision);
  layers.push_back({"conv", std::move(c)});
  for (const UNetConvLayer& l : layers) {
    Status s = l.configuration.validate();
    if (!s.ok()) return Status(s.code(), fmt::format("Vanilla UNet layer '{}': {}", l.name, s.message()));
  }
  return layers;
}

cnn::WeightMap unet_random_state_dict(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(0.5f, 1.5f);
  cnn::WeightMap sd;
  auto put = [&](const std::string& name, Shape s, auto gen) {
    std::vector<float> v(s.volume());
    for (float& x : v) x = gen();
    sd.emplace(name, Tensor::from_vector(v, s, DataType::FLOAT32).value());
  };
  auto conv = [&](const std::string& name, uint32_t out, uint32_t in, uint32_t k) {
    const float std = std::sqrt(2.0f / static_cast<float>(in * k * k));
    put(name + ".weight", Shape{out, in, k, k}, [&] { return normal(rng) * std; });
  };
  for (const Row& r : kRows) {
    conv(fmt::format("{}.{}conv{}", r.block, r.prefix, r.index), r.out, r.in, 3);
    const std::string norm = fmt::format("{}.{}norm{}", r.block, r.prefix, r.index);
    put(norm + ".weight", Shape{r.out}, [&] { return uniform(rng); });
    put(norm + ".bias", Shape{r.out}, [&] { return 0.1f * normal(rng); });
    put(norm + ".running_mean", Shape{r.out}, [&] { return 0.1f * normal(rng); });
    put(norm + ".running_var", Shape{r.out}, [&] { return uniform(rng); });
  }
  for (int i = 4; i >= 1; --i) {
    const uint32_t in = kF << i, out = kF << (i - 1);
    const float std = std::sqrt(2.0f / static_cast<float>(in));
    put(fmt::format("upconv{}.weight", i), Shape{in, out, 2, 2}, [&] { return normal(rng) * std; });
    put(fmt::format("upconv{}.bias", i), Shape{out}, [&] { return 0.1f * normal(rng); });
  }
  conv("conv", 1, kF, 1);
  put("conv.bias", Shape{1}, [&] { return 0.1f * normal(rng); });
  return sd;
}

}  // namespace tessera::models
