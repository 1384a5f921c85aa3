// How each family of conv algorithms packs its weights and launches
// (internal to src/ops). conv2d.cc's front end checks the call, builds the
// Problem (make_problem: select_conv_algorithm chooses the algorithm) and
// hands it to the family the algorithm belongs to:
//
//   onednn_plan.cc, onednn_run.cc  kOnednn, kOnednnWinograd, kOnednnPaddedCout,
//                                  kOnednnF32Rows: a plan of oneDNN primitives
//                                  per shard (how the work splits over the
//                                  workers), weights in oneDNN's layout
//   direct.cc     kDirectAvx2, kWinogradAvx2, kNarrowAvx512, kDirectAvx512,
//                 kRows3x3Avx512, kPatchAvx2, kPatchAvx512: Tessera's kernels
//                 in src/ops/cpu (their tasks and weight layouts)
//   depthwise.cc  kDepthwise
//   patches.cc    kPatchMatmul, kAmxPatch1x1, and the patch kernels' weights
//
// Each family offers `*_with_weights` (host weights: round, pack, upload,
// then launch; the result carries the prepared weights) and `launch_*`
// (weights prepared by an earlier call, checked by the front end against
// the problem's weights key). Adding an algorithm: a candidate in select.cc,
// its file here, and one branch in conv2d.cc's dispatch (see README.md).
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "problem.h"
#include "tessera/device/device.h"
#include "tessera/ops/conv2d_l1.h"
#include "tessera/tensor/access.h"
#include "tessera/tensor/tensor.h"

namespace tessera::conv {

// conv2d_concat's inputs: the conv reads their channel concatenation, which
// each oneDNN shard gathers as it stages its rows instead of the input.
constexpr uint32_t kMaxConcatParts = 4;
struct ConcatParts {
  TensorAccess part[kMaxConcatParts];
  uint32_t cols[kMaxConcatParts] = {};
  uint32_t count = 0;
};

// --- Shared by the families (launch.cc) ---

// The bias as `g.cout` float32 values (zeros without one). InvalidArgument
// for a device bias or one of another size.
StatusOr<std::vector<float>> bias_values(const std::optional<Tensor>& bias, const Geometry& g);
// Prepared weights: the two host tensors copied to DRAM under `key`.
StatusOr<PreparedConv2dWeights> upload_weights(const std::string& key, const Tensor& weight, const Tensor& bias,
                                               Device& device, uint8_t cq_id);
// The output's buffer: the residual's when the caller gave it up (see
// Conv2dResidual::in_place), else a new one. Every kernel reads the residual
// rows (or columns) it writes, and no others, before writing them.
StatusOr<Tensor> output_tensor(const Tensor& input, const Problem& pr);
// Where conv2d stages activations it must convert anyway (tiles, multi-shard
// tensors): `dense` rows as one DRAM shard, else interleaved DRAM.
MemoryConfig staging(uint32_t rows, uint32_t cols, DataType dtype, bool dense);
// A patch transpose's result, whose bytes are the (N, OH, OW, Cout) output,
// as the (1, 1, N * OH * OW, Cout) rows conv_transpose2d returns: a view, or
// a copy where its rows are spread over banks.
StatusOr<Tensor> as_output_rows(const Tensor& t, const Geometry& g, uint8_t cq_id);

// --- oneDNN (onednn_plan.cc, onednn_run.cc) ---

// `rounded`: the user's weights rounded to the compute dtype; `bias`: g.cout
// values. `cat`: conv2d_concat's parts, for a problem built with `whole`.
StatusOr<Conv2dResult> onednn_with_weights(const Tensor& input, const Tensor& rounded, std::span<const float> bias,
                                           const Problem& pr, uint8_t cq_id, const ConcatParts* cat);
StatusOr<Conv2dResult> launch_onednn(const Tensor& input, const PreparedConv2dWeights& w, const Problem& pr,
                                     uint8_t cq_id, const ConcatParts* cat);
// Whether a plain conv on `threads` workers splits its output channels over
// them (each shard then writes a column slice of every row, so it cannot
// tilize rows: the front end tilizes after).
bool splits_channels(const Conv2dGeometry& g, bool transposed, uint32_t threads, bool residual);

// --- Tessera's direct kernels (direct.cc) ---

// The float32 values the direct family's packed weights and bias hold for
// `pr` (the packers size them with it; launch_direct checks prepared weights
// against it, so that weights from elsewhere, an image, cannot be short).
struct DirectPackedSize {
  uint64_t weight = 0, bias = 0;
};
DirectPackedSize direct_packed_size(const Problem& pr);

StatusOr<Conv2dResult> direct_with_weights(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
                                           const Conv2dParams& p, const Problem& pr, DataType weights_dtype,
                                           uint8_t cq_id);
StatusOr<Conv2dResult> winograd_with_weights(const Tensor& input, const Tensor& weight,
                                             const std::optional<Tensor>& bias, const Conv2dParams& p,
                                             const Problem& pr, DataType weights_dtype, uint8_t cq_id);
// Weights packed by direct_with_weights, winograd_with_weights or (patch
// kernels) patches_with_weights.
StatusOr<Conv2dResult> launch_direct(const Tensor& input, const PreparedConv2dWeights& w, const Problem& pr,
                                     uint8_t cq_id);

// --- Depthwise (depthwise.cc) ---

StatusOr<Conv2dResult> depthwise_with_weights(const Tensor& input, const Tensor& weight,
                                              const std::optional<Tensor>& bias, const Conv2dParams& p,
                                              const Problem& pr, DataType weights_dtype, uint8_t cq_id);
StatusOr<Conv2dResult> launch_depthwise(const Tensor& input, const PreparedConv2dWeights& w, const Problem& pr,
                                        uint8_t cq_id);

// --- Transposed convs whose kernel is their stride (patches.cc) ---

StatusOr<Conv2dResult> patches_with_weights(const Tensor& input, const Tensor& weight,
                                            const std::optional<Tensor>& bias, const ConvTranspose2dParams& p,
                                            const Problem& pr, DataType weights_dtype, uint8_t cq_id);
StatusOr<Conv2dResult> launch_patches(const Tensor& input, const PreparedConv2dWeights& w,
                                      const ConvTranspose2dParams& p, const Problem& pr, uint8_t cq_id);
StatusOr<Conv2dResult> amx_patches_with_weights(const Tensor& input, const Tensor& weight,
                                                const std::optional<Tensor>& bias, const ConvTranspose2dParams& p,
                                                const Conv2dConfig& config, const Problem& pr, uint8_t cq_id);
StatusOr<Conv2dResult> launch_amx_patches(const Tensor& input, const PreparedConv2dWeights& w,
                                          const ConvTranspose2dParams& p, const Conv2dConfig& config, const Problem& pr,
                                          uint8_t cq_id);

// --- The front end's dispatch (conv2d.cc) ---

// A conv on the kernel's input rows and config (after conv2d's input and
// output conversions): make_problem, then the algorithm's family. The AMX
// patch transpose runs its 1x1 conv through these.
StatusOr<Conv2dResult> conv_with_weights(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
                                         const Conv2dParams& p, const Conv2dConfig& config, uint8_t cq_id,
                                         const Conv2dResidual* residual = nullptr, const ConcatParts* cat = nullptr,
                                         const TensorSpec* whole = nullptr);
StatusOr<Conv2dResult> conv_with_prepared(const Tensor& input, const PreparedConv2dWeights& w, const Conv2dParams& p,
                                          const Conv2dConfig& config, uint8_t cq_id,
                                          const Conv2dResidual* residual = nullptr, const ConcatParts* cat = nullptr,
                                          const TensorSpec* whole = nullptr);

}  // namespace tessera::conv
