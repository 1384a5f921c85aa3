// matmul and linear on a device.
//
// a: (..., M, K), b: (..., K, N) (or (..., N, K) with transpose_b), ROW_MAJOR
// device tensors of one dtype, float32 or bfloat16 (or one of each on CPUs
// whose kernels multiply bfloat16 in float32), any memory config; the
// leading (batch) dims broadcast with numpy rules. Output (..., M, N)
// ROW_MAJOR in the output dtype (default a's), interleaved in a's buffer
// type unless `memory_config` (interleaved) says otherwise.
// linear adds a bias of N values ((N) or (1, 1, 1, N), a's dtype or float32)
// and the fused activation before the single rounding.
//
// Execution: oneDNN matmul (Debian libdnnl), the M rows split into one block
// per worker thread, each a single-threaded primitive with its own staging
// and scratch, as conv2d. Accumulation is float32 (bfloat16 operands are
// exact products); results are within 1e-5 relative of the double
// reference's norm per output row in float32, one bfloat16 ulp plus that in
// bfloat16 (see matmul_test.cc).
//
// compute_kernel_config (compute_config.h; nullopt: HiFi4, exact): at LoFi,
// on CPUs with AMX, float32 operands are rounded to bfloat16 (nearest even)
// as they are staged, and oneDNN's AMX kernels multiply them with float32
// accumulation, output in the asked dtype; operands may then be float32 and
// bfloat16 mixed. The gemv path (few rows against transposed weights, bound
// by reading the weights) keeps float32 operands. Other fidelities and CPUs:
// exact, as at HiFi4.
#pragma once

#include <optional>

#include "tessera/ops/activation.h"
#include "tessera/ops/compute_config.h"
#include "tessera/tensor/tensor.h"

namespace tessera {

struct MatmulParams {
  bool transpose_b = false;
  std::optional<DataType> dtype;                // output dtype
  std::optional<UnaryWithParam> activation;     // fused
  std::optional<MemoryConfig> memory_config;    // interleaved
  std::optional<DeviceComputeKernelConfig> compute_kernel_config;  // nullopt: HiFi4
  uint8_t cq_id = 0;
};

StatusOr<Tensor> matmul(const Tensor& a, const Tensor& b, const MatmulParams& params = {});
StatusOr<Tensor> linear(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
                        const MatmulParams& params = {});

// The dtype in which constant operands (weights) of a matmul with
// `activations` operands are best kept: bfloat16 where the CPU's kernels
// multiply bfloat16 (AVX512_BF16), else float32 holding bfloat16-rounded
// values, converted once instead of on every call (ResNet-50's 2048x1000
// classifier: 1.1 against 0.4 ms per call on an AVX2 CPU).
DataType matmul_weights_dtype(DataType activations);

}  // namespace tessera
