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

#include <memory>
#include <optional>

#include "tessera/ops/activation.h"
#include "tessera/ops/compute_config.h"
#include "tessera/tensor/tensor.h"

namespace tessera {

class PackedMatmulWeights;

struct MatmulParams {
  bool transpose_b = false;
  std::optional<DataType> dtype;                // output dtype
  std::optional<UnaryWithParam> activation;     // fused
  std::optional<MemoryConfig> memory_config;    // interleaved
  std::optional<DeviceComputeKernelConfig> compute_kernel_config;  // nullopt: HiFi4
  uint8_t cq_id = 0;
  // b as pack_matmul_weights packed it for this call's operands: the
  // kernels read the packed copy instead of re-packing b on every call.
  const PackedMatmulWeights* packed_b = nullptr;
};

StatusOr<Tensor> matmul(const Tensor& a, const Tensor& b, const MatmulParams& params = {});
StatusOr<Tensor> linear(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
                        const MatmulParams& params = {});

// b (a weight: the same values at every call) packed once into the layout
// oneDNN's kernels read for matmuls of these operands and params. oneDNN's
// matmul given plain rows of b packs them again on every call: ViT-B/16's
// 768 x 3072 weight, 99 rows per worker, 5.8 against 2.9 ms (Intel Xeon,
// AVX-512). nullptr where the call's kernel reads b in place (the gemv
// path, batched b, staged or LoFi operands). Packing is a launch on
// params.cq_id, after what that queue did to b, into device memory (as a
// tensor's: released early, launches still queued read stale values, never
// unmapped memory). It serves calls with operands of the same specs and
// params (cq_id aside) and b's values; any other call is
// FAILED_PRECONDITION.
class PackedMatmulWeights {
 public:
  struct Impl;
  explicit PackedMatmulWeights(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  const Impl& impl() const { return *impl_; }

 private:
  std::shared_ptr<Impl> impl_;
};
StatusOr<std::shared_ptr<const PackedMatmulWeights>> pack_matmul_weights(const Tensor& a, const Tensor& b,
                                                                         const std::optional<Tensor>& bias,
                                                                         const MatmulParams& params = {});

// The dtype in which constant operands (weights) of a matmul with
// `activations` operands are best kept: bfloat16 where the CPU's kernels
// multiply bfloat16 (AVX512_BF16), else float32 holding bfloat16-rounded
// values, converted once instead of on every call (ResNet-50's 2048x1000
// classifier: 1.1 against 0.4 ms per call on an AVX2 CPU).
DataType matmul_weights_dtype(DataType activations);

}  // namespace tessera
