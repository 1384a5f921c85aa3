// The Wormhole matrix engine's numerics, emulated exactly on a CPU: convs
// and matmuls computed as the original's FPU computes them, so that a
// model's accuracy under its math fidelities and accumulation formats can
// be studied with no Tenstorrent hardware (CompileOptions::numerics,
// `--numerics tt`). A study mode: the fast kernels stay the default.
//
// What is emulated (Tenstorrent's ISA documentation of MVMUL / ELWMUL):
//   - Operands enter the source registers as TF32 (1, 8, 10 bits; float32
//     truncated, bfloat16 and block-float exactly), denormals flushed to
//     zero. Activations go to SrcB, weights to SrcA ("Input 0 * Input 1 ->
//     SrcB * SrcA"), whose mantissa's least significant bit is ignored.
//   - The multipliers take 5 bits of SrcA (the hidden bit and 4 mantissa
//     bits, or the next 5 bits) and 7 of SrcB (the hidden bit and 6, or the
//     next 4). Fidelity phase p multiplies SrcA's high part (p even) or low
//     part (p odd) by SrcB's high part (p < 2) or low part (p >= 2):
//     LoFi runs phase 0, HiFi2 phases 0-1, HiFi3 0-2, HiFi4 0-3. Each
//     product is exact in float32.
//   - Per phase, 16 products along K are summed in float32 in order and
//     added to the destination register, which is rounded to bfloat16
//     (nearest even) after every add unless fp32_dest_acc_en (float32).
//   - K order: a conv's K runs over its kernel taps (row-major), and within
//     a tap over its input channels padded with zeros to a multiple of 16;
//     K is cut into tiles of 32, and each tile is added phase by phase
//     (the fidelity loop outside), its two 16-wide halves in order.
//   - The epilogue in the destination format: the bias added, the fused
//     activation (SFPU, float32 then rounded), a fused residual added; the
//     packer's rounding to the output format is the caller's typecast.
// Non-finite operands keep their value in the high part (the hardware does
// not follow IEEE 754 there; NaN and infinity still propagate).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "tessera/ops/activation.h"
#include "tessera/ops/compute_config.h"
#include "tessera/ops/conv2d_params.h"
#include "tessera/tensor/tensor.h"

namespace tessera {

// The fidelity phases a fidelity runs (LoFi 1 .. HiFi4 4).
int fidelity_phases(MathFidelity f);
// An operand as its source register holds it (TF32, denormals flushed; SrcA
// also drops the TF32 mantissa's last bit).
float to_srca(float x);
float to_srcb(float x);
// The part of a source value that phase-part `low` multiplies (high: the
// hidden bit and the first 4 (SrcA) / 6 (SrcB) mantissa bits; low: the next
// 5 / 4); high + low == the source value.
float srca_part(float src_value, bool low);
float srcb_part(float src_value, bool low);
// One output of the engine: sum over k of b[k] * a[k], b activations
// (SrcB), a weights (SrcA), both as given (not yet in source format), with
// K cut into tiles and halves as a matmul's (16-wide halves of 32-wide
// tiles). The scalar oracle the kernels are tested against.
float matrix_engine_dot(const float* b, const float* a, size_t k, MathFidelity fidelity, bool fp32_dest_acc);

struct MatrixEngineConfig {
  MathFidelity math_fidelity = MathFidelity::HiFi4;
  bool fp32_dest_acc_en = false;
};

// A conv, transposed conv or matmul with constant weights, prepared for the
// emulated engine (weights split into their SrcA parts). Inputs and outputs
// are float32 ROW_MAJOR device tensors: a conv's NHWC, viewed as
// [N*H*W, C]; a matmul's [M, K] (leading dims flattened).
class MatrixEngineOp {
 public:
  // A conv: weights (out, in/groups, kh, kw) float32 host values (already
  // rounded to their format), bias per output channel.
  static StatusOr<std::shared_ptr<const MatrixEngineOp>> conv2d(const Conv2dParams& params,
                                                                const std::vector<float>& weights,
                                                                const std::vector<float>& bias,
                                                                const MatrixEngineConfig& config);
  // A transposed conv: weights (in, out/groups, kh, kw), computed as the
  // equivalent conv over the zero-stuffed input (taps that land on inserted
  // zeros skipped: they add nothing); padding (top, left) only, the output
  // size given.
  static StatusOr<std::shared_ptr<const MatrixEngineOp>> conv_transpose2d(
      uint32_t batch, uint32_t in_h, uint32_t in_w, uint32_t in_c, uint32_t out_h, uint32_t out_w, uint32_t out_c,
      uint32_t groups, std::array<uint32_t, 2> kernel, std::array<uint32_t, 2> stride, std::array<uint32_t, 2> pad,
      std::array<uint32_t, 2> dilation, const std::vector<float>& weights, const std::vector<float>& bias,
      std::optional<UnaryWithParam> activation, const MatrixEngineConfig& config);
  // A matmul [M, K] x [K, N] (weights row-major K x N), bias per column.
  static StatusOr<std::shared_ptr<const MatrixEngineOp>> matmul(uint32_t m, uint32_t k, uint32_t n,
                                                                const std::vector<float>& weights,
                                                                const std::vector<float>& bias,
                                                                std::optional<UnaryWithParam> activation,
                                                                const MatrixEngineConfig& config);

  // Runs on `input` (float32, rows x in-columns), adding `residual` (float32,
  // the output's shape; then residual_activation) when given. One device
  // launch; the output is float32 DRAM.
  StatusOr<Tensor> operator()(const Tensor& input, const std::optional<Tensor>& residual,
                              const UnaryWithParam& residual_activation, uint8_t cq_id) const;

  struct Plan;
  explicit MatrixEngineOp(std::shared_ptr<Plan> plan) : plan_(std::move(plan)) {}

 private:
  std::shared_ptr<Plan> plan_;
};

}  // namespace tessera
