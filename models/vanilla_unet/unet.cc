#include "vanilla_unet/unet.h"

#include "tessera/cnn/pipeline.h"
#include "tessera/ops/data_movement.h"
#include "tessera/ops/manipulation.h"

namespace tessera::models {

namespace {

constexpr uint32_t kF = 32;
// act_block_h of upconv4 .. upconv1 in the original's table.
constexpr uint32_t kUpActBlockH[4] = {96, 160, 64, 160};

Status in_layer(const Status& s, const std::string& layer) {
  if (s.ok()) return s;
  return Status(s.code(), fmt::format("Vanilla UNet layer '{}': {}", layer, s.message()));
}

DataType activation_dtype(UNetPrecision p) {
  return p == UNetPrecision::FLOAT32 ? DataType::FLOAT32 : DataType::BFLOAT16;
}

StatusOr<Tensor> rows(const Tensor& x) {
  if (x.layout() == Layout::ROW_MAJOR) return x;
  const DataType dt = x.dtype() == DataType::FLOAT32 ? DataType::FLOAT32 : DataType::BFLOAT16;
  return untilize(x, {.memory_config = DRAM_MEMORY_CONFIG, .dtype = dt});
}

}  // namespace

StatusOr<std::unique_ptr<VanillaUNet>> VanillaUNet::create(const UNetOptions& options, std::shared_ptr<Device> device) {
  if (!device) return invalid_argument_error("VanillaUNet: expected a device, got none");
  std::unique_ptr<VanillaUNet> m(new VanillaUNet(options));
  const cnn::WeightMap sd = options.state_dict ? *options.state_dict : unet_random_state_dict(options.seed);
  TS_ASSIGN_OR_RETURN(std::vector<UNetConvLayer> layers,
                      unet_conv_configurations(sd, {.batch = options.batch, .height = options.height,
                                                    .width = options.width, .precision = options.precision,
                                                    .sharded = options.sharded}));
  // The model never frees its caller's input: the first conv keeps its
  // input (the original frees convert_to_hwc's output; forward does that).
  layers.front().configuration.deallocate_activation = false;
  for (UNetConvLayer& l : layers) {
    StatusOr<cnn::Conv2d> conv = cnn::Conv2d::create(std::move(l.configuration), device);
    TS_RETURN_IF_ERROR(in_layer(conv.status(), l.name));
    m->names_.push_back(l.name);
    m->convs_.push_back(std::move(*conv));
  }
  for (int i = 4; i >= 1; --i) {
    const std::string name = fmt::format("upconv{}", i);
    const auto w = sd.find(name + ".weight"), b = sd.find(name + ".bias");
    if (w == sd.end() || b == sd.end()) return not_found_error("Vanilla UNet: the state dict has no '{}' weights", name);
    ConvTranspose2dParams p;
    p.batch_size = options.batch;
    p.input_height = options.height >> i;
    p.input_width = options.width >> i;
    p.in_channels = kF << i;
    p.out_channels = kF << (i - 1);
    Conv2dConfig c{.weights_dtype = options.precision == UNetPrecision::FLOAT32 ? DataType::FLOAT32
                                    : options.precision == UNetPrecision::BFLOAT16 ? DataType::BFLOAT16
                                                                                   : DataType::BFLOAT8_B,
                   .dtype = activation_dtype(options.precision)};
    if (options.sharded) {
      // Height-sharded rows: the concat that follows reads rows (the
      // original writes tiles here and its concat converts them to rows).
      c.output_layout = Layout::ROW_MAJOR;
      c.shard_layout = TensorMemoryLayout::HEIGHT_SHARDED;
      c.act_block_h_override = kUpActBlockH[4 - i];
      c.deallocate_activation = true;
      const bool wide = i != 1;  // upconv1 turns fp32 accumulation off
      c.compute_config = {.math_fidelity = MathFidelity::LoFi, .fp32_dest_acc_en = wide, .packer_l1_acc = wide};
    }
    m->up_flops_.push_back(p.flops());
    m->up_.emplace_back(p, w->second, b->second, c);
  }
  for (uint32_t i = 0; i < 4; ++i) {
    cnn::MaxPool2dConfiguration pc{.input_height = options.height >> i,
                                   .input_width = options.width >> i,
                                   .channels = kF << i,
                                   .batch_size = options.batch,
                                   .kernel_size = {2, 2},
                                   .stride = {2, 2},
                                   .dtype = activation_dtype(options.precision)};
    StatusOr<cnn::MaxPool2d> pool = cnn::MaxPool2d::create(pc, device);
    TS_RETURN_IF_ERROR(in_layer(pool.status(), fmt::format("pool{}", i + 1)));
    m->pools_.push_back(std::move(*pool));
  }
  return m;
}

StatusOr<Tensor> VanillaUNet::operator()(const Tensor& input) { return forward(input); }

StatusOr<Tensor> VanillaUNet::forward(const Tensor& input) {
  const UNetOptions& o = options_;
  const bool chw = input.shape() == chw_input_shape();
  Tensor x = input;
  if (chw) {
    StatusOr<Tensor> hwc = convert_to_hwc(input);
    TS_RETURN_IF_ERROR(in_layer(hwc.status(), "convert_to_hwc"));
    x = *hwc;
  }
  size_t conv = 0;
  auto run_conv = [&](const Tensor& in) -> StatusOr<Tensor> {
    const size_t i = conv++;
    StatusOr<Tensor> y = convs_[i](in);
    TS_RETURN_IF_ERROR(in_layer(y.status(), names_[i]));
    return *y;
  };
  Tensor skips[4];
  for (int i = 0; i < 4; ++i) {
    Tensor in = x;
    TS_ASSIGN_OR_RETURN(x, run_conv(x));
    if (i == 0 && chw) deallocate(in, true);  // convert_to_hwc's output
    TS_ASSIGN_OR_RETURN(x, run_conv(x));
    // The skip waits in DRAM while the encoder goes on (the original's
    // to_memory_config), as rows: the pool and, later, the concat read rows,
    // so one untilize here replaces the original's copy plus the two
    // conversions its pool and concat make.
    if (x.memory_config().buffer_type != BufferType::DRAM || x.layout() != Layout::ROW_MAJOR) {
      StatusOr<Tensor> s = x.layout() == Layout::TILE
                               ? untilize(x, {.memory_config = DRAM_MEMORY_CONFIG,
                                              .dtype = activation_dtype(o.precision)})
                               : to_memory_config(x, DRAM_MEMORY_CONFIG);
      TS_RETURN_IF_ERROR(in_layer(s.status(), fmt::format("encoder{} skip", i + 1)));
      deallocate(x, true);
      x = *s;
    }
    skips[i] = x;
    StatusOr<Tensor> pooled = pools_[i](x);
    TS_RETURN_IF_ERROR(in_layer(pooled.status(), fmt::format("pool{}", i + 1)));
    x = *pooled;
  }
  TS_ASSIGN_OR_RETURN(x, run_conv(x));
  TS_ASSIGN_OR_RETURN(x, run_conv(x));
  for (int i = 3; i >= 0; --i) {
    const std::string up_name = fmt::format("upconv{}", i + 1);
    StatusOr<Tensor> up = up_[3 - i](x);
    TS_RETURN_IF_ERROR(in_layer(up.status(), up_name));
    // cat(upsampled, skip) on channels: in the upsampled tensor's
    // height-sharded L1 layout when it has one, as the original.
    // Row-major shards must cover the rows exactly; the tiled result takes
    // the upsampled tensor's (tile-padded) shards.
    const MemoryConfig& umc = up->memory_config();
    MemoryConfig rm_mc = DRAM_MEMORY_CONFIG, tile_mc = DRAM_MEMORY_CONFIG;
    if (umc.memory_layout == TensorMemoryLayout::HEIGHT_SHARDED) {
      const uint32_t width = up->shape()[3] + skips[i].shape()[3];
      const uint32_t rows = up->shape()[0] * up->shape()[1] * up->shape()[2];
      rm_mc = umc;
      rm_mc.shard_spec->shape[1] = width;
      // Tiles need whole 32-row shards: the tile rows over as many of the
      // grid's cores as divide them.
      const uint32_t tiles = (rows + 31) / 32;
      uint32_t cores = std::min(tiles, up->device()->descriptor().num_cores());
      while (tiles % cores) --cores;
      TS_ASSIGN_OR_RETURN(CoreRangeSet grid, num_cores_to_corerangeset(cores, up->device()->descriptor().grid));
      tile_mc = MemoryConfig{TensorMemoryLayout::HEIGHT_SHARDED, BufferType::L1,
                             ShardSpec{grid, {tiles / cores * 32, width}, ShardOrientation::ROW_MAJOR}};
    }
    TS_ASSIGN_OR_RETURN(Tensor ur, rows(*up));
    TS_ASSIGN_OR_RETURN(Tensor sr, rows(skips[i]));
    const Tensor pair[] = {ur, sr};
    StatusOr<Tensor> cat = concat(pair, 3, {.memory_config = rm_mc});
    TS_RETURN_IF_ERROR(in_layer(cat.status(), fmt::format("concat{}", i + 1)));
    Tensor u = *up;
    deallocate(u, true);
    deallocate(skips[i], true);
    x = *cat;
    if (o.sharded && o.precision == UNetPrecision::ORIGINAL_BFLOAT8_B) {
      StatusOr<Tensor> t = tilize(x, {.memory_config = tile_mc, .dtype = DataType::BFLOAT8_B});
      TS_RETURN_IF_ERROR(in_layer(t.status(), fmt::format("concat{}", i + 1)));
      deallocate(x, true);
      x = *t;
    }
    TS_ASSIGN_OR_RETURN(x, run_conv(x));
    TS_ASSIGN_OR_RETURN(x, run_conv(x));
  }
  TS_ASSIGN_OR_RETURN(x, run_conv(x));  // the final 1x1 conv
  if (!chw && x.layout() == Layout::ROW_MAJOR && x.memory_config().buffer_type == BufferType::DRAM) return x;
  TS_ASSIGN_OR_RETURN(Tensor y, rows(x));
  if (y.memory_config() != DRAM_MEMORY_CONFIG) {
    TS_ASSIGN_OR_RETURN(y, to_memory_config(y, DRAM_MEMORY_CONFIG));
  }
  if (!chw) return y;
  StatusOr<Tensor> out = convert_to_chw(y, activation_dtype(o.precision));
  TS_RETURN_IF_ERROR(in_layer(out.status(), "convert_to_chw"));
  return *out;
}

StatusOr<MemoryConfig> VanillaUNet::l1_input_memory_config(const Device& device) const {
  const CoreCoord grid = device.descriptor().grid;
  const uint32_t pixels = options_.batch * options_.height * options_.width;
  uint32_t cores = std::min(64u, grid.x * grid.y);
  while (cores > 1 && pixels % cores) --cores;
  TS_ASSIGN_OR_RETURN(CoreRangeSet set, num_cores_to_corerangeset(cores, grid));
  return MemoryConfig{TensorMemoryLayout::WIDTH_SHARDED, BufferType::L1,
                      ShardSpec{set, {3, pixels / cores}, ShardOrientation::ROW_MAJOR}};
}

StatusOr<MemoryConfig> VanillaUNet::dram_input_memory_config(const Device& device) const {
  return cnn::get_memory_config_for_persistent_dram_tensor(chw_input_shape(), TensorMemoryLayout::WIDTH_SHARDED,
                                                           CoreCoord{device.descriptor().num_dram_banks, 1});
}

uint64_t VanillaUNet::flops() const {
  uint64_t f = 0;
  for (const cnn::Conv2d& c : convs_) f += c.configuration().params().flops();
  for (uint64_t u : up_flops_) f += u;
  return f;
}

}  // namespace tessera::models
