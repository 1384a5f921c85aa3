// A conv problem as conv2d's kernels see it (internal to src/ops): its
// geometry, the tensors' specs, the precisions, the program and weights
// keys, and the algorithm select_conv_algorithm chose for it.
#pragma once

#include <cstdint>
#include <string>

#include "select.h"
#include "tessera/base/status.h"
#include "tessera/ops/compute_config.h"
#include "tessera/ops/conv2d.h"
#include "tessera/ops/conv_transpose2d.h"
#include "tessera/tensor/tensor_spec.h"

namespace tessera::conv {

// A convolution or a transposed convolution.
struct Geometry {
  bool transposed = false;
  uint32_t n = 1, h = 0, w = 0, cin = 0, cout = 0, kh = 0, kw = 0, sh = 1, sw = 1, dh = 1, dw = 1, groups = 1;
  uint32_t oh = 0, ow = 0;
  int64_t pad_t = 0, pad_b = 0, pad_l = 0, pad_r = 0;  // oneDNN's padding of the whole problem
  UnaryWithParam activation;
  std::string descriptor;
};

struct Problem {
  Geometry g;
  TensorSpec input, output;
  DataType compute;        // the operands' precision: weights are rounded to it
  DataType kernel;         // what oneDNN computes on (onednn::kernel_type(compute))
  DataType dst_precision;  // the output rows' precision (float32 or bfloat16)
  DataType dst_dtype;      // the rows the kernel writes (onednn::kernel_type(dst_precision))
  MathFidelity fidelity = MathFidelity::HiFi4;
  std::string key;          // the program: geometry, dtypes and memory configs
  std::string weights_key;  // the prepared weights: geometry and dtypes only
  const Conv2dResidual* residual = nullptr;
  bool concat = false;  // conv2d_concat's gathering launch (ConvPlan::concat)
  ConvAlgorithm algorithm = ConvAlgorithm::kOnednn;
  uint32_t cout_padded = 0;  // kOnednnPaddedCout: the kernel's output channels, else 0

  // What the algorithm implies, for the code that runs it.
  bool winograd() const { return is_winograd(algorithm); }
  bool direct() const { return runs_own_direct_kernel(algorithm); }
  bool narrow() const { return algorithm == ConvAlgorithm::kNarrowAvx512; }
  bool rows3x3() const { return algorithm == ConvAlgorithm::kRows3x3Avx512; }
  bool direct_avx512() const {
    return algorithm == ConvAlgorithm::kDirectAvx512 || algorithm == ConvAlgorithm::kPatchAvx512;
  }
  bool amx_patches() const { return algorithm == ConvAlgorithm::kAmxPatch1x1; }
  bool depthwise() const { return algorithm == ConvAlgorithm::kDepthwise; }
  bool patches() const {
    return algorithm == ConvAlgorithm::kPatchAvx2 || algorithm == ConvAlgorithm::kPatchAvx512 ||
           algorithm == ConvAlgorithm::kPatchMatmul;
  }
};

// The dtypes of the rows Tessera's kernels and staging read and write.
inline bool is_row_dtype(DataType t) { return t == DataType::FLOAT32 || t == DataType::BFLOAT16; }
// Whether rows of `row_bytes` can be staged as one dense DRAM shard (staging
// in launch.h); narrower rows stay interleaved.
inline bool stages_densely(uint64_t row_bytes) { return row_bytes % 4 == 0; }
inline bool is_plain_silu(const UnaryWithParam& act) { return act.op == UnaryOpType::SILU && !act.has_affine(); }
// A transposed conv whose kernel equals its stride, without padding,
// dilation or groups: each input pixel maps onto its own kh x kw output patch.
bool patch_shape(const Geometry& g);
// Whether oneDNN runs a conv whose kernel dtype is `kernel` on AMX.
bool on_amx(DataType kernel);

// The geometry of a conv or transposed conv (problem.cc). A transposed
// conv's right and bottom padding shrink by its output padding, as oneDNN
// sizes a deconvolution.
Geometry geometry(const Conv2dParams& p);
Geometry geometry(const ConvTranspose2dParams& p);
// Whether a conv of `input` rows computes on bfloat16 operands although the
// rows are float32: math fidelity LoFi where oneDNN has bfloat16 kernels
// (see problem.cc for the shapes that keep float32). The compiler asks this
// to round the values such a conv reads (conv2d_rounds_input_to_bfloat16).
bool lowers_to_bf16(const Geometry& g, DataType input, const Conv2dConfig& config);
// The part of a prepared-weights key naming the rows the kernel writes
// ("->f32:"): packed weights serve only kernels writing those rows.
std::string weights_key_rows(DataType dst);

// The problem conv2d / conv_transpose2d solve for `input` under `config`,
// its algorithm chosen by select_conv_algorithm (the declines kept in
// `selection` when given). `residual`: the one the kernel adds (already
// checked to fuse). `whole`: the spec of the rows the conv reads when
// `input` is only the first of conv2d_concat's parts. Errors: the params'
// and the input's checks (InvalidArgument, Unimplemented dtypes or layouts).
StatusOr<Problem> make_problem(const Tensor& input, const Conv2dParams& p, const Conv2dConfig& config,
                               const Conv2dResidual* residual = nullptr, const TensorSpec* whole = nullptr,
                               ConvSelection* selection = nullptr);
StatusOr<Problem> make_problem(const Tensor& input, const ConvTranspose2dParams& p, const Conv2dConfig& config,
                               const Conv2dResidual* residual = nullptr, const TensorSpec* whole = nullptr,
                               ConvSelection* selection = nullptr);
// The input's shape and memory config as the float32 / bfloat16 rows conv2d
// converts tiles and block floats to (as_rows), and the algorithm
// make_problem chooses when the conv reads them. conv2d asks before it
// converts anything: only oneDNN's kernels (is_onednn) read tiles and
// sharded rows themselves and tilize their own output.
TensorSpec as_rows(const Tensor& input);
StatusOr<ConvAlgorithm> algorithm_for_rows(const Tensor& input, const Conv2dParams& p, const Conv2dConfig& config,
                                           const Conv2dResidual* residual = nullptr);
StatusOr<ConvAlgorithm> algorithm_for_rows(const Tensor& input, const ConvTranspose2dParams& p,
                                           const Conv2dConfig& config, const Conv2dResidual* residual = nullptr);

}  // namespace tessera::conv
