#include "tessera/ops/conv2d_l1.h"

#include <algorithm>

namespace tessera {

namespace {

constexpr uint32_t kTile = 32;

uint64_t round_up(uint64_t v, uint64_t m) { return (v + m - 1) / m * m; }
uint64_t div_up(uint64_t v, uint64_t m) { return (v + m - 1) / m; }

// The largest divisor of `n` that is at most `limit`.
uint32_t largest_divisor(uint64_t n, uint32_t limit) {
  for (uint32_t d = std::min<uint64_t>(limit, n); d > 1; --d)
    if (n % d == 0) return d;
  return 1;
}

// Bytes of `elements` values in a circular buffer or L1 buffer of dtype `t`.
uint64_t bytes_of(DataType t, uint64_t elements) {
  return is_block_float(t) ? div_up(elements, kTileElements) * tile_size_bytes(t) : elements * element_size(t);
}

// The activation as the conv's readers hold it: float32 stays float32, every
// other dtype is read as bfloat16 rows (block-float cannot be row-major).
DataType act_dtype(DataType input) { return input == DataType::FLOAT32 ? DataType::FLOAT32 : DataType::BFLOAT16; }

std::string core_range_string(const CoreRangeSet& grid) {
  const CoreRange b = grid.bounding_box();
  return fmt::format("[(x={},y={}) - (x={},y={})]", b.start.x, b.start.y, b.end.x, b.end.y);
}

}  // namespace

Conv2dGeometry conv2d_geometry(const Conv2dParams& p, bool has_bias) {
  Conv2dGeometry g;
  g.batch = p.batch_size, g.input_height = p.input_height, g.input_width = p.input_width;
  g.in_channels = p.in_channels, g.out_channels = p.out_channels;
  g.kernel_h = p.kernel_size[0], g.kernel_w = p.kernel_size[1];
  g.stride_h = p.stride[0], g.stride_w = p.stride[1], g.dilation_h = p.dilation[0], g.dilation_w = p.dilation[1];
  g.groups = p.groups;
  g.padded_height = p.input_height + p.padding[0] + p.padding[1];
  g.padded_width = p.input_width + p.padding[2] + p.padding[3];
  g.output_height = p.output_height(), g.output_width = p.output_width();
  g.has_bias = has_bias;
  return g;
}

Conv2dGeometry conv2d_geometry(const ConvTranspose2dParams& p, bool has_bias) {
  Conv2dGeometry g;
  g.batch = p.batch_size, g.input_height = p.input_height, g.input_width = p.input_width;
  g.in_channels = p.in_channels, g.out_channels = p.out_channels;
  g.kernel_h = p.kernel_size[0], g.kernel_w = p.kernel_size[1];
  g.dilation_h = p.dilation[0], g.dilation_w = p.dilation[1], g.groups = p.groups;
  g.output_height = p.output_height(), g.output_width = p.output_width();
  // The direct convolution over the stride-dilated input reads every output
  // row's full kernel span: padded extent = output + span - 1.
  g.padded_height = g.output_height + p.dilation[0] * (p.kernel_size[0] - 1);
  g.padded_width = g.output_width + p.dilation[1] * (p.kernel_size[1] - 1);
  g.has_bias = has_bias;
  return g;
}

StatusOr<Conv2dParallelConfig> determine_conv2d_parallel_config(const Conv2dGeometry& g, TensorMemoryLayout layout,
                                                                Layout output_layout,
                                                                CoreCoord device_grid,
                                                                const std::optional<CoreRangeSet>& core_grid) {
  if (layout == TensorMemoryLayout::INTERLEAVED)
    return invalid_argument_error("conv2d: expected a HEIGHT, WIDTH or BLOCK_SHARDED shard layout, got INTERLEAVED");
  if (core_grid) TS_RETURN_IF_ERROR(core_grid->validate());
  const bool tile = output_layout == Layout::TILE;
  const uint64_t rows = g.output_rows();
  // Units shards are made of: tiles in TILE layout (and for channels that are
  // whole tiles), single rows / channels otherwise.
  const uint32_t row_unit = tile ? kTile : 1;
  const uint64_t row_units = tile ? div_up(rows, kTile) : rows;
  const uint32_t ch_unit = tile || g.out_channels % kTile == 0 ? kTile : 1;
  const uint64_t width = tile ? round_up(g.out_channels, kTile) : g.out_channels;
  const uint64_t ch_units = width / ch_unit;
  const uint32_t grid_cores = core_grid ? core_grid->num_cores() : device_grid.x * device_grid.y;

  Conv2dParallelConfig pc;
  pc.shard_layout = layout;
  std::array<uint32_t, 2> shard{};
  auto take = [&](uint32_t n) -> StatusOr<CoreRangeSet> {
    if (!core_grid) return num_cores_to_corerangeset(n, device_grid);
    if (n != grid_cores)
      return invalid_argument_error(
          "conv2d: the output ({} rows x {} channels, {}) does not split evenly over the {} cores of core_grid {}; "
          "{} of them would",
          rows, g.out_channels, memory_layout_name(layout), grid_cores, core_grid->to_string(), n);
    return *core_grid;
  };
  switch (layout) {
    case TensorMemoryLayout::HEIGHT_SHARDED: {
      pc.cores_nhw = largest_divisor(row_units, grid_cores);
      TS_ASSIGN_OR_RETURN(pc.grid, take(pc.cores_nhw));
      shard = {static_cast<uint32_t>(row_units / pc.cores_nhw * row_unit), static_cast<uint32_t>(width)};
      break;
    }
    case TensorMemoryLayout::WIDTH_SHARDED: {
      pc.cores_c = largest_divisor(ch_units, grid_cores);
      TS_ASSIGN_OR_RETURN(pc.grid, take(pc.cores_c));
      shard = {static_cast<uint32_t>(row_units * row_unit), static_cast<uint32_t>(ch_units / pc.cores_c * ch_unit)};
      break;
    }
    case TensorMemoryLayout::BLOCK_SHARDED: {
      const CoreCoord box = core_grid ? CoreCoord{core_grid->bounding_box().width(), core_grid->bounding_box().height()}
                                      : device_grid;
      if (core_grid && core_grid->num_cores() != box.x * box.y)
        return invalid_argument_error("conv2d: BLOCK_SHARDED needs a rectangular core_grid, got {}",
                                      core_grid->to_string());
      pc.cores_c = largest_divisor(ch_units, box.x);
      pc.cores_nhw = largest_divisor(row_units, box.y);
      if (core_grid && (pc.cores_c != box.x || pc.cores_nhw != box.y))
        return invalid_argument_error(
            "conv2d: the output ({} rows x {} channels) does not split evenly over the {}x{} core_grid {}", rows,
            g.out_channels, box.x, box.y, core_grid->to_string());
      const CoreCoord origin = core_grid ? core_grid->bounding_box().start : CoreCoord{0, 0};
      pc.grid = CoreRangeSet(
          CoreRange(origin, CoreCoord{origin.x + pc.cores_c - 1, origin.y + pc.cores_nhw - 1}));
      shard = {static_cast<uint32_t>(row_units / pc.cores_nhw * row_unit),
               static_cast<uint32_t>(ch_units / pc.cores_c * ch_unit)};
      break;
    }
    default:
      break;
  }
  pc.output_memory_config = MemoryConfig{layout, BufferType::L1, ShardSpec{pc.grid, shard, ShardOrientation::ROW_MAJOR}};
  return pc;
}

StatusOr<Conv2dL1Estimate> estimate_conv2d_l1(const Conv2dGeometry& g, const Conv2dParallelConfig& pc,
                                              const Conv2dConfig& config, DataType input_dtype, DataType output_dtype) {
  if (config.act_block_h_override % kTile != 0)
    return invalid_argument_error("Config Error: act_block_h_override must be a multiple of 32 (tile height).");
  if (config.act_block_w_div == 0) return invalid_argument_error("conv2d: act_block_w_div must be >= 1, got 0");
  Conv2dL1Estimate e;
  e.parallel = pc;
  const auto& shard = pc.output_memory_config.shard_spec->shape;
  const uint64_t rows_per_core = shard[0];
  const uint64_t out_block_w = round_up(g.out_channels, kTile) / pc.cores_c;

  // act_block_h: the override when it divides the core's tile rows, else the
  // closest smaller divisor (the original warns and does the same).
  const uint64_t rows_t = div_up(rows_per_core, kTile);
  uint64_t block_t = rows_t;
  if (config.act_block_h_override > 0) {
    const uint32_t want = config.act_block_h_override / kTile;
    block_t = rows_t % want == 0 ? want : largest_divisor(rows_t, want);
  }
  e.act_block_h = static_cast<uint32_t>(block_t * kTile);

  const uint64_t kh = g.kernel_h, kw = g.kernel_w;
  uint64_t cin_per_core = 0;
  switch (pc.shard_layout) {
    case TensorMemoryLayout::HEIGHT_SHARDED:
      cin_per_core = round_up(g.in_channels, 16);
      e.act_block_w = static_cast<uint32_t>(round_up(cin_per_core * kw, kTile));
      break;
    case TensorMemoryLayout::BLOCK_SHARDED:
      cin_per_core = round_up(g.in_channels, uint64_t{kTile} * pc.cores_c) / pc.cores_c;
      e.act_block_w = static_cast<uint32_t>(round_up(cin_per_core * kw, kTile));
      break;
    case TensorMemoryLayout::WIDTH_SHARDED: {
      const uint64_t padded = round_up(g.in_channels, uint64_t{kTile} * pc.cores_c);
      if (padded % (uint64_t{kTile} * pc.cores_c * config.act_block_w_div) != 0)
        return invalid_argument_error("Padded In Channels = {}, num_cores = {}, act_block_w_div = {}", padded,
                                      pc.cores_c, config.act_block_w_div);
      cin_per_core = padded / pc.cores_c;
      e.act_block_w = static_cast<uint32_t>(padded * kh * kw / (pc.cores_c * config.act_block_w_div));
      break;
    }
    default:
      return invalid_argument_error("conv2d: expected a sharded parallel config");
  }
  const DataType act = act_dtype(input_dtype);
  const DataType wdt = config.weights_dtype == DataType::FLOAT32 && act == DataType::FLOAT32 ? DataType::FLOAT32
                       : is_block_float(config.weights_dtype)                                ? config.weights_dtype
                                                                                              : DataType::BFLOAT16;
  e.activation_cb = bytes_of(act, uint64_t{e.act_block_h} * e.act_block_w) * (config.enable_act_double_buffer ? 2 : 1);
  e.weights_cb = bytes_of(wdt, uint64_t{e.act_block_w} * out_block_w) * (config.enable_weights_double_buffer ? 2 : 1);
  const bool wide = config.compute_config.fp32_dest_acc_en || config.compute_config.packer_l1_acc;
  e.partials_cb = uint64_t{e.act_block_h} * out_block_w * (wide ? 4 : 2);
  e.bias_cb = g.has_bias ? uint64_t{kTile} * out_block_w * 2 : 0;
  // The rows of the padded input a core reads: its share plus the halo.
  const uint64_t in_rows = div_up(uint64_t{g.batch} * g.padded_height * g.padded_width, pc.cores_nhw) +
                           uint64_t{g.dilation_h} * (kh - 1) * g.padded_width + uint64_t{g.dilation_w} * (kw - 1);
  e.halo_buffer = bytes_of(act, in_rows * cin_per_core);
  e.output_buffer = bytes_of(output_dtype, rows_per_core * out_block_w);
  return e;
}

StatusOr<Conv2dL1Estimate> auto_shard_conv2d(const Conv2dGeometry& g, const Conv2dConfig& config, DataType input_dtype,
                                             DataType output_dtype, CoreCoord device_grid) {
  std::optional<Conv2dL1Estimate> best;
  Status first_error = ok_status();
  for (TensorMemoryLayout l : {TensorMemoryLayout::HEIGHT_SHARDED, TensorMemoryLayout::BLOCK_SHARDED,
                               TensorMemoryLayout::WIDTH_SHARDED}) {
    StatusOr<Conv2dParallelConfig> pc =
        determine_conv2d_parallel_config(g, l, config.output_layout, device_grid, std::nullopt);
    StatusOr<Conv2dL1Estimate> e =
        pc.ok() ? estimate_conv2d_l1(g, *pc, config, input_dtype, output_dtype) : StatusOr<Conv2dL1Estimate>(pc.status());
    if (!e.ok()) {
      if (first_error.ok()) first_error = e.status();
      continue;
    }
    if (!best || e->total() < best->total()) best = *e;
  }
  if (!best) return first_error;
  return *best;
}

Status check_conv2d_l1(const Conv2dL1Estimate& e, const Device& device, uint64_t freed_bytes) {
  const uint64_t max_l1 = device.descriptor().l1_size_per_core;
  const std::string range = core_range_string(e.parallel.grid);
  const uint64_t cbs = e.circular_buffers();
  if (cbs > max_l1)
    return resource_exhausted_error(
        "Statically allocated circular buffers on core range {} grow to {} B which is beyond max L1 size of {} B "
        "({})",
        range, cbs, max_l1, e.to_string());
  const MemoryRegionStats l1 = device.memory_stats(BufferType::L1);
  const uint64_t held = l1.allocated_bytes - std::min(l1.allocated_bytes, freed_bytes);
  const uint64_t need = cbs + e.halo_buffer + e.output_buffer + held;
  if (need > l1.bank_size)
    return resource_exhausted_error(
        "Statically allocated circular buffers on core range {} clash with L1 buffers: {} B of circular buffers, "
        "{} B halo, {} B output and {} B of L1 buffers already allocated need {} B of the {} B of L1 per core "
        "(outside L1_SMALL) ({})",
        range, cbs, e.halo_buffer, e.output_buffer, held, need, l1.bank_size, e.to_string());
  return ok_status();
}

std::string Conv2dL1Estimate::to_string() const {
  return fmt::format(
      "{} on {} cores, act_block {}x{}, CBs act {} + weights {} + partials {} + bias {} B, halo {} B, output {} B",
      memory_layout_name(parallel.shard_layout), parallel.grid.num_cores(), act_block_h, act_block_w, activation_cb,
      weights_cb, partials_cb, bias_cb, halo_buffer, output_buffer);
}

}  // namespace tessera
