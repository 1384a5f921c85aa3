// conv2d on a device.
//
// Input: a device tensor in NHWC, shaped (N, H, W, C) or flattened
// (1, 1, N*H*W, C): float32 / bfloat16 rows or tiles of any float dtype
// (block-float included), interleaved or sharded in DRAM or L1. The conv2d
// kernel reads them where they are: each shard of its work untilizes (or
// gathers) the rows it reads, halo included. Depthwise-shaped convs and
// conv_transpose2d get interleaved rows first, by launches of their own.
// Output: (1, 1, N*OH*OW, out_channels) in Conv2dConfig's layout, dtype and
// memory config; the kernel tilizes (and block-float packs) its own rows
// into TILE outputs, bit-exact with tilize().
// Accumulation is float32; bias and the fused activation are applied before
// the single rounding to the output dtype.
//
// Weights: a host tensor (out_channels, in_channels/groups, kh, kw) as PyTorch
// stores it, and an optional bias (out_channels) or (1, 1, 1, out_channels).
// They are prepared once: converted to `weights_dtype` (bfloat8_b / bfloat4_b
// round like the original, over 16 output channels of the (kh*kw*cin) x cout
// weight matrix, then compute in bfloat16, which holds them exactly), packed
// for the kernel, and copied to the device. Conv2dResult hands the prepared
// weights back; pass them to later calls to skip preparation, as the
// original's prepared weights are reused.
//
// Execution: the output rows are split into one shard per worker thread of
// the device; each shard is a single-threaded oneDNN primitive (Debian
// libdnnl) with its own halo rows and padding, so a core keeps its rows in
// its own cache and oneDNN's OpenMP team never competes with Tessera's
// threads. Measured: 93-96% of the FP32 FMA peak over the ResNet-50 and UNet
// layer sets on an AVX-512 Zen 5, about 2x that in bfloat16 (bench/RESULTS.md).
#pragma once

#include <optional>
#include <span>
#include <string>

#include "tessera/ops/compute_config.h"
#include "tessera/ops/conv2d_params.h"
#include "tessera/tensor/tensor.h"

namespace tessera {

// How the original splits a conv that does not fit L1 at once (its
// Op2DSliceConfig): DRAM_HEIGHT / DRAM_WIDTH slice the output rows or columns
// with DRAM input and output, L1_FULL runs the whole conv in L1.
// num_slices 0 lets the op choose.
enum class Conv2dSliceType : uint8_t { DRAM_HEIGHT, DRAM_WIDTH, L1_FULL, DRAM_CHANNEL };
std::string_view conv2d_slice_type_name(Conv2dSliceType t);
struct Conv2dSliceConfig {
  Conv2dSliceType slice_type = Conv2dSliceType::DRAM_WIDTH;
  uint32_t num_slices = 0;
};
inline constexpr Conv2dSliceConfig Conv2dL1FullSliceConfig{Conv2dSliceType::L1_FULL, 1};

struct Conv2dConfig {
  DataType weights_dtype = DataType::BFLOAT16;  // the original's default
  // Output dtype; default: the input's (bfloat16 for a block-float input).
  // bfloat8_b / bfloat4_b need a TILE output.
  std::optional<DataType> dtype;
  // NOTE: the original defaults to TILE; Tessera's kernels produce NHWC rows,
  // so ROW_MAJOR is the default and TILE costs one tilize launch.
  Layout output_layout = Layout::ROW_MAJOR;
  // Where the output goes (any config its shape allows); default: the
  // input's memory config when interleaved, DRAM interleaved otherwise.
  std::optional<MemoryConfig> output_memory_config;
  // Free the input once the op is enqueued (the original's knob for L1 room).
  bool deallocate_activation = false;

  // Where the op works, with the original's knobs (conv2d_l1.h has the plan
  // and the L1 estimate). The output memory config is, in order:
  //   output_memory_config when given;
  //   L1, sharded by shard_layout (or like a sharded L1 input, or the layout
  //     with the smallest L1 estimate), when shard_layout is set, the slice
  //     config is L1_FULL, or the input is sharded in L1 - and the conv's L1
  //     estimate must then fit the device's per-core L1;
  //   DRAM interleaved for a DRAM_* slice config, each of num_slices slices
  //     (0: the fewest that fit) planned in L1 and checked;
  //   otherwise the input's memory config when interleaved, DRAM when not.
  // The CPU kernel streams rows from any memory, so these knobs decide where
  // the output lives and what must fit, not how fast the kernel runs.
  std::optional<TensorMemoryLayout> shard_layout;
  std::optional<CoreRangeSet> core_grid;
  bool override_sharding_config = false;  // shard over core_grid (needs core_grid and shard_layout)
  bool reshard_if_not_optimal = false;    // re-plan even when the input is sharded already
  uint32_t act_block_h_override = 0;      // multiple of 32; 0: all rows of a core at once
  uint32_t act_block_w_div = 1;           // WIDTH_SHARDED only
  bool enable_act_double_buffer = false;
  bool enable_weights_double_buffer = false;
  bool reallocate_halo_output = true;   // kept for the original's configs; no effect on the CPU
  bool config_tensors_in_dram = false;  // kept for the original's configs; no effect on the CPU
  std::optional<Conv2dSliceConfig> slice_config;
  DeviceComputeKernelConfig compute_config;  // see compute_config.h
  // The kernel to run, by name (conv2d_algorithms lists the ones that can
  // run a problem); empty: conv2d's selection chooses (src/ops/conv/select.h,
  // an ordered candidate list with measured thresholds). A Tessera knob the
  // original lacks: the compiler's --select measured|predicted sets it per
  // conv. conv2d fails with INVALID_ARGUMENT when the named kernel cannot
  // run the problem.
  std::string algorithm;

  // INVALID_ARGUMENT with the original's messages for contradictory knobs.
  Status validate() const;
};

struct PreparedConv2dWeights {
  std::string key;  // the problem they were prepared for (checked on use)
  Tensor weight;    // packed for the kernel: opaque bytes in DRAM
  Tensor bias;      // float32 (1, 1, 1, out_channels) in DRAM (zeros without bias)
};

struct Conv2dResult {
  Tensor output;
  uint32_t output_height = 0;
  uint32_t output_width = 0;
  PreparedConv2dWeights weights;
};

StatusOr<Conv2dResult> conv2d(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
                              const Conv2dParams& params, const Conv2dConfig& config = {}, uint8_t cq_id = 0);
StatusOr<Conv2dResult> conv2d(const Tensor& input, const PreparedConv2dWeights& weights, const Conv2dParams& params,
                              const Conv2dConfig& config = {}, uint8_t cq_id = 0);

// conv2d over the channel concatenation of `inputs`, as
// conv2d(concat(inputs, last dim), ...) computes it: a UNet decoder's
// upsampled map beside its skip connection, YOLO's C2f blocks. Inputs:
// device tensors on one device whose shapes differ only in the last dim
// (channels), summing to params.in_channels. Where oneDNN's kernel runs on
// bfloat16 rows (bfloat16 inputs with bfloat16 or block-float weights, and
// float32 ones at math fidelity LoFi on CPUs with AMX; ROW_MAJOR inputs of
// one dtype in any memory config, at most four, the output rows
// interleaved), each shard gathers its rows' channels from every input into
// the rows it stages, converting float32 ones, and the concatenation is
// never written; otherwise the inputs are concatenated first. Prepared
// weights serve either path (and conv2d).
StatusOr<Conv2dResult> conv2d_concat(std::span<const Tensor> inputs, const Tensor& weight,
                                     const std::optional<Tensor>& bias, const Conv2dParams& params,
                                     const Conv2dConfig& config = {}, uint8_t cq_id = 0);
StatusOr<Conv2dResult> conv2d_concat(std::span<const Tensor> inputs, const PreparedConv2dWeights& weights,
                                     const Conv2dParams& params, const Conv2dConfig& config = {}, uint8_t cq_id = 0);

// Whether conv2d computes a float32 input as its bfloat16-rounded values
// (math fidelity LoFi on CPUs with AMX, on the shapes that take oneDNN's AMX
// kernel): the input rounded to bfloat16 beforehand then gives the same
// output. The compiler keeps such convs' inputs in bfloat16 at LoFi.
bool conv2d_rounds_input_to_bfloat16(const Conv2dParams& params, const Conv2dConfig& config);
// Whether any conv under `config` computes float32 inputs as bfloat16 on
// this machine (the config's fidelity and the CPU; the shape then decides,
// see conv2d_rounds_input_to_bfloat16).
bool conv2d_may_round_input_to_bfloat16(const Conv2dConfig& config);

// A skip connection added by the conv:
//   y = residual.activation(params.activation(conv(x) + bias) + residual.tensor)
// The residual has the output's shape ((N, OH, OW, Cout) or flattened) in
// the output's dtype, ROW_MAJOR, interleaved (any other residual is accepted
// and added by a separate add). Each shard copies its residual rows into
// its output rows and the oneDNN kernel adds the conv to them (a sum
// post-op), one pass over the output fewer than conv then add (ResNet's and
// YOLO's residual blocks). Depthwise shapes, tile
// or sharded outputs and hardsigmoid activations take the separate add.
// A float32 residual on bfloat16 rows is added to the conv's float32 rows
// and the sum rounded once (the returned weights are prepared for those
// rows); with weights prepared for bfloat16 rows, to the rounded rows.
//
// `in_place`: the caller gives the residual's buffer up, and the fused
// kernel writes the output over it when the residual has the output's spec
// (after a reshape) and is not the input's buffer; each shard then adds the
// conv to its rows where they lie, with no copy (a ResNet-50 stage-1 add
// copied 3.2 MB per image). Otherwise the output is a new buffer as usual.
struct Conv2dResidual {
  Tensor tensor;
  UnaryWithParam activation;
  bool in_place = false;
};
StatusOr<Conv2dResult> conv2d_with_residual(const Tensor& input, const Tensor& weight,
                                            const std::optional<Tensor>& bias, const Conv2dParams& params,
                                            const Conv2dResidual& residual, const Conv2dConfig& config = {},
                                            uint8_t cq_id = 0);
StatusOr<Conv2dResult> conv2d_with_residual(const Tensor& input, const PreparedConv2dWeights& weights,
                                            const Conv2dParams& params, const Conv2dResidual& residual,
                                            const Conv2dConfig& config = {}, uint8_t cq_id = 0);

// How conv2d chooses its kernel for this call: the algorithm it runs for
// the problem, then why each candidate before it declined, a line each
// (src/ops/conv/README.md):
//   rows3x3_avx512 for conv2d:n1h56w56c64k64:r3x3s1x1p1x1x1x1d1x1g1:relu:f32->f32
//     declined depthwise: not depthwise (groups == in == out channels)
//     ...
// `tessera run --explain` prints it per conv. With a residual, the choice
// for the fused kernel. Errors: conv2d's for the same arguments.
StatusOr<std::string> explain_conv2d(const Tensor& input, const Conv2dParams& params, const Conv2dConfig& config = {},
                                     const Conv2dResidual* residual = nullptr);
StatusOr<std::string> explain_conv2d_concat(std::span<const Tensor> inputs, const Conv2dParams& params,
                                            const Conv2dConfig& config = {});

// The kernels that can run this call (the names Conv2dConfig::algorithm
// takes): the one conv2d's selection chooses first, then the others the
// selection declined only by a measured threshold, in its candidate order.
// A named config.algorithm is ignored here. Errors: conv2d's for the same
// arguments.
StatusOr<std::vector<std::string>> conv2d_algorithms(const Tensor& input, const Conv2dParams& params,
                                                     const Conv2dConfig& config = {},
                                                     const Conv2dResidual* residual = nullptr);
StatusOr<std::vector<std::string>> conv2d_concat_algorithms(std::span<const Tensor> inputs,
                                                            const Conv2dParams& params,
                                                            const Conv2dConfig& config = {});

// The weights as the device computes with them: `weight` rounded to
// `weights_dtype` the way preparation rounds it (and to bfloat16 when the
// input is bfloat16), as float32 OIHW on the host. The reference kernel run
// on these operands is what conv2d is tested against.
StatusOr<Tensor> round_conv2d_weights(const Tensor& weight, const Conv2dParams& params, DataType weights_dtype,
                                      DataType input_dtype);

}  // namespace tessera
