#include "problem.h"

#include <fmt/format.h>

#include "../onednn_util.h"
#include "../op_common.h"

namespace tessera::conv {

Geometry geometry(const Conv2dParams& p) {
  return {false,          p.batch_size,     p.input_height,   p.input_width,     p.in_channels,
          p.out_channels, p.kernel_size[0], p.kernel_size[1], p.stride[0],       p.stride[1],
          p.dilation[0],  p.dilation[1],    p.groups,         p.output_height(), p.output_width(),
          p.padding[0],   p.padding[1],     p.padding[2],     p.padding[3],      p.activation,
          p.descriptor()};
}

// oneDNN sizes a deconvolution's output as (in - 1) * s - pad_l - pad_r +
// d * (k - 1) + 1, so output padding shrinks the right padding.
Geometry geometry(const ConvTranspose2dParams& p) {
  return {true,
          p.batch_size,
          p.input_height,
          p.input_width,
          p.in_channels,
          p.out_channels,
          p.kernel_size[0],
          p.kernel_size[1],
          p.stride[0],
          p.stride[1],
          p.dilation[0],
          p.dilation[1],
          p.groups,
          p.output_height(),
          p.output_width(),
          p.padding[0],
          int64_t{p.padding[0]} - p.output_padding[0],
          p.padding[1],
          int64_t{p.padding[1]} - p.output_padding[1],
          p.activation,
          p.descriptor()};
}

// Float32 convs at math fidelity LoFi on CPUs with AMX compute on bfloat16
// operands (rounded to nearest even) with float32 accumulation and float32
// output rows: oneDNN's AMX kernels, the input rows converted as each shard
// reads them. The original's LoFi multiplies 5-bit by 7-bit significands
// (one phase of its matrix engine: ../shared/reference/pybuda-predictor-smi.md);
// bfloat16's 8 by 8 bits are at least as exact, as compute_config.h promises
// for every fidelity. HiFi2 and HiFi3 keep float32 operands (and Winograd,
// see allows_winograd), HiFi4 is exact. Transposed convs only where their
// kernel is their stride (patch_shape): they run as an AMX 1x1 conv and a
// permute (amx_patch_fits; the 1x1 conv lowers in turn) or as
// the batched matmul (launch_patches), which lowers at LoFi as well
// (matmul.h). Not grouped convs (their bfloat16 paths read
// bfloat16 rows), nor fewer than 16 output channels (the narrow kernel's
// heads, bound by reading their input), nor fewer than 16 input channels
// with fewer than 64 products per output: the UNet's RGB stem (3x3, 3 -> 32,
// 480x640) took 7.7 ms on oneDNN's AMX jit kernel against 3.7 in float32.
// Larger RGB stems gain: ResNet-50's 7x7 0.86-1.43 -> 0.21-0.43 ms, YOLO's
// 6x6 2.87-4.18 -> 2.27-2.42 ms (launches in the model, alternated builds).
bool lowers_to_bf16(const Geometry& g, DataType input, const Conv2dConfig& config) {
  return input == DataType::FLOAT32 && onednn::lofi_computes_in_bf16(config.compute_config.math_fidelity) &&
         (!g.transposed || patch_shape(g)) && g.groups == 1 && g.cout >= 16 &&
         (g.cin >= 16 || uint64_t{g.kh} * g.kw * g.cin >= 64);
}

std::string weights_key_rows(DataType dst) { return fmt::format("->{}:", short_dtype_name(dst)); }

namespace {

template <class Params>
StatusOr<Problem> problem(const Tensor& input_tensor, const Params& p, const Conv2dConfig& config,
                          const Conv2dResidual* residual, const TensorSpec* whole, ConvSelection* selection,
                          bool concat) {
  const Geometry g = geometry(p);
  const std::string_view op = g.transposed ? "conv_transpose2d" : "conv2d";
  TS_RETURN_IF_ERROR(p.validate());
  TS_RETURN_IF_ERROR(ops::require_device_tensor(input_tensor, op));
  const TensorSpec& input = whole ? *whole : input_tensor.spec();
  Device& device = *input_tensor.device();
  TS_RETURN_IF_ERROR(p.check_input_shape(input.shape.dims()));
  // Rows of float32 / bfloat16, or tiles of any float dtype (the kernel
  // untilizes the rows each shard reads).
  if (!is_floating(input.dtype) || (input.layout != Layout::TILE && is_block_float(input.dtype)))
    return unimplemented_error("{}: expected float32 or bfloat16 rows or float tiles, found {} {}", op,
                               data_type_name(input.dtype), layout_name(input.layout));
  // Tiles are read as (1, 1, N*H*W, C): an (N, H, W, C) tensor's tiles pad
  // each (n, y) slice of W rows to whole tiles, which are other rows.
  auto flat_tiles = [](const TensorSpec& t) {
    const auto& d = t.shape.dims();
    uint64_t outer = 1;
    for (size_t i = 0; i + 2 < d.size(); ++i) outer *= d[i];
    return t.layout != Layout::TILE || outer == 1 || d[d.size() - 2] % kTileHeight == 0;  // outer > 1: rank > 2
  };
  const TensorSpec res_spec = residual ? residual->tensor.spec() : TensorSpec{};
  for (const TensorSpec* t : {&input, residual ? &res_spec : nullptr})
    if (t && !flat_tiles(*t))
      return invalid_argument_error(
          "{}: expected tiles of (1, 1, N*H*W, C) rows or a width that is a multiple of {}, found tiles of {} (each "
          "row of {} pixels is padded to whole tiles); reshape the rows to (1, 1, N*H*W, C) before tilizing",
          op, kTileHeight, t->shape.to_string(), t->shape[-2]);
  const DataType out = config.dtype.value_or(input.dtype);
  const bool tiled = config.output_layout == Layout::TILE;  // the kernel tilizes its own rows
  if (!is_floating(out) || (!tiled && is_block_float(out)))
    return unimplemented_error("{}: output dtype must be float32 or bfloat16 (or block-float tiles), found {}", op,
                               data_type_name(out));
  Problem pr;
  pr.g = g;
  pr.input = input;
  // (N, H, W, C) and (1, 1, N*H*W, C) are the same rows: one program, one key.
  pr.input.shape = Shape{1, 1, g.n * g.h * g.w, g.cin};
  pr.output = TensorSpec{Shape{1, 1, g.n * g.oh * g.ow, g.cout}, out, config.output_layout,
                         config.output_memory_config.value_or(input.memory_config)};
  pr.compute = input.dtype == DataType::FLOAT32 ? DataType::FLOAT32 : DataType::BFLOAT16;
  const bool lowered = lowers_to_bf16(g, input.dtype, config);
  if (lowered) pr.compute = DataType::BFLOAT16;
  // Block-float tiles are packed from rows of the input's precision.
  pr.kernel = onednn::kernel_type(pr.compute);
  pr.dst_precision = out == DataType::FLOAT32 || (is_block_float(out) && input.dtype == DataType::FLOAT32)
                         ? DataType::FLOAT32
                         : DataType::BFLOAT16;
  // oneDNN 2.6 has no grouped convolution from float32 rows to bfloat16
  // ones, nor one from 3-channel float32 rows ("could not create a primitive
  // descriptor"): float32 convs write float32 rows that the staging rounds.
  pr.dst_dtype = pr.compute == DataType::FLOAT32 ? DataType::FLOAT32 : onednn::kernel_type(pr.dst_precision);
  pr.key = fmt::format("{}:{}->{}:w{}", g.descriptor, pr.input.to_string(), pr.output.to_string(),
                       short_dtype_name(config.weights_dtype));
  pr.weights_key = fmt::format("{}:{}{}w{}", g.descriptor, short_dtype_name(pr.compute), weights_key_rows(pr.dst_dtype),
                               short_dtype_name(config.weights_dtype));
  if (pr.kernel != pr.compute) pr.weights_key += fmt::format(":{}kernel", short_dtype_name(pr.kernel));
  if (lowered) pr.key += ":lofi";  // the same tensors at HiFi4 are another program
  if (concat) {                    // conv2d_concat's launch: its own program (ConcatConvArgs)
    pr.concat = true;
    pr.key += ":cat";
  }
  pr.fidelity = config.compute_config.math_fidelity;
  pr.residual = residual;
  ConvSelection chosen;
  if (config.algorithm.empty()) {
    chosen = select_conv_algorithm(pr, device, /*explain=*/selection != nullptr);
  } else {
    TS_ASSIGN_OR_RETURN(chosen, select_named_conv_algorithm(pr, device, config.algorithm));
  }
  pr.algorithm = chosen.algorithm;
  if (selection) {
    *selection = chosen;
    selection->runnable = runnable_conv_algorithms(pr, device);
  }
  // The keys name the algorithm: programs and packed weights serve only it.
  if (pr.winograd()) {
    pr.key += ":wino";
    pr.weights_key += ":wino";
  }
  if (residual) {
    pr.key += fmt::format(":+{}:{}", residual->tensor.spec().to_string(), activation_name(residual->activation));
    pr.weights_key += ":+residual";  // oneDNN may pick another kernel, and packing, with the sum post-op
  }
  std::string suffix;
  switch (pr.algorithm) {
    case ConvAlgorithm::kWinogradAvx2:
    case ConvAlgorithm::kDirectAvx2:
    case ConvAlgorithm::kPatchAvx2:
      suffix = ":direct";
      break;
    case ConvAlgorithm::kNarrowAvx512:
      suffix = ":narrow";
      break;
    case ConvAlgorithm::kDirectAvx512:
    case ConvAlgorithm::kPatchAvx512:
      suffix = ":direct512";
      break;
    case ConvAlgorithm::kRows3x3Avx512:
      suffix = ":rows3x3";
      break;
    case ConvAlgorithm::kAmxPatch1x1:
      suffix = ":amx1x1";
      break;
    case ConvAlgorithm::kOnednnPaddedCout:
      pr.cout_padded = (g.cout + 15) / 16 * 16;
      suffix = fmt::format(":pad{}", pr.cout_padded);
      break;
    case ConvAlgorithm::kOnednnF32Rows:
      // The kernel writes float32 rows, which Tessera's SiLU and fused add
      // round once as they store (silu_before_own_residual).
      pr.dst_dtype = DataType::FLOAT32;
      suffix = ":f32rows";
      break;
    default:
      break;
  }
  // A named algorithm may be one the selection never picks for this
  // problem: its keys name it whatever the suffix above says.
  if (chosen.forced) suffix += fmt::format(":as_{}", conv_algorithm_name(pr.algorithm));
  pr.key += suffix;
  pr.weights_key += suffix;
  return pr;
}

}  // namespace

StatusOr<Problem> make_problem(const Tensor& input, const Conv2dParams& p, const Conv2dConfig& config,
                               const Conv2dResidual* residual, const TensorSpec* whole, ConvSelection* selection) {
  return problem(input, p, config, residual, whole, selection, whole != nullptr);
}

StatusOr<Problem> make_problem(const Tensor& input, const ConvTranspose2dParams& p, const Conv2dConfig& config,
                               const Conv2dResidual* residual, const TensorSpec* whole, ConvSelection* selection) {
  return problem(input, p, config, residual, whole, selection, whole != nullptr);
}

TensorSpec as_rows(const Tensor& input) {
  TensorSpec rows = input.spec();
  rows.layout = Layout::ROW_MAJOR;
  rows.dtype = input.dtype() == DataType::FLOAT32 ? DataType::FLOAT32 : DataType::BFLOAT16;
  return rows;
}

StatusOr<ConvAlgorithm> algorithm_for_rows(const Tensor& input, const Conv2dParams& p, const Conv2dConfig& config,
                                           const Conv2dResidual* residual) {
  const TensorSpec rows = as_rows(input);
  TS_ASSIGN_OR_RETURN(const Problem pr, problem(input, p, config, residual, &rows, nullptr, false));
  return pr.algorithm;
}

StatusOr<ConvAlgorithm> algorithm_for_rows(const Tensor& input, const ConvTranspose2dParams& p,
                                           const Conv2dConfig& config, const Conv2dResidual* residual) {
  const TensorSpec rows = as_rows(input);
  TS_ASSIGN_OR_RETURN(const Problem pr, problem(input, p, config, residual, &rows, nullptr, false));
  return pr.algorithm;
}

}  // namespace tessera::conv
