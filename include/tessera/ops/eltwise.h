// Element-wise device ops: unary activations, binary arithmetic with
// broadcasting and a fused activation, typecast.
//
// Inputs must be allocated device tensors with floating dtypes (typecast
// also takes integers). Arithmetic is float32: operands are widened to
// float32, `a op b` is rounded to float32, the activation (activation.h) is
// applied, and the result is rounded once to the output dtype with the rules
// of numerics/convert.h. The output dtype defaults to the first input's.
//
// Shapes:
//   same shape   any layout and memory config; both operands must share it,
//                and the output takes it too;
//   broadcasting numpy rules (trailing dims aligned, size-1 dims stretch);
//                ROW_MAJOR operands only, any memory config each; the output
//                takes the memory config of the operand whose shape it has
//                (a first), else `a`'s buffer type, interleaved. A
//                `memory_config` in the params overrides (interleaved only).
//
// Accuracy against the reference kernels (double precision activations):
// relu, relu6, leaky_relu, hardsigmoid, sqrt and the arithmetic are exact
// (bit for bit); the transcendental activations (silu, gelu, sigmoid, tanh,
// mish, exp, hardswish) on the AVX-512 and AVX2 paths are within 8 float32 ulp plus
// 1e-6 absolute where the result is float32, and within one bfloat16 ulp where
// it is bfloat16 (the AVX-512 path then computes on an exp accurate to
// bfloat16, not float32).
//
// Each call compiles (once per descriptor, cached on the device) and enqueues
// one program on `cq_id`; during trace capture it is recorded instead.
#pragma once

#include <optional>

#include "tessera/ops/activation.h"
#include "tessera/tensor/tensor.h"

namespace tessera {

struct EltwiseParams {
  std::optional<DataType> dtype;                 // output dtype
  std::optional<UnaryWithParam> activation;      // fused into binary ops
  std::optional<MemoryConfig> memory_config;     // broadcasting binary ops only
  uint8_t cq_id = 0;
};

// y = activation(x).
StatusOr<Tensor> unary(const Tensor& input, const UnaryWithParam& activation, const EltwiseParams& params = {});
StatusOr<Tensor> relu(const Tensor& input, const EltwiseParams& params = {});

// y = activation(a op b).
StatusOr<Tensor> binary(const Tensor& a, const Tensor& b, BinaryOpType op, const EltwiseParams& params = {});
StatusOr<Tensor> add(const Tensor& a, const Tensor& b, const EltwiseParams& params = {});
StatusOr<Tensor> sub(const Tensor& a, const Tensor& b, const EltwiseParams& params = {});
StatusOr<Tensor> mul(const Tensor& a, const Tensor& b, const EltwiseParams& params = {});
StatusOr<Tensor> div(const Tensor& a, const Tensor& b, const EltwiseParams& params = {});

// Float -> float, float <-> integer and integer -> integer conversion.
StatusOr<Tensor> typecast(const Tensor& input, DataType dtype, uint8_t cq_id = 0);

// The broadcast shape of `a` and `b` (numpy rules), or INVALID_ARGUMENT
// naming both shapes.
StatusOr<Shape> broadcast_shapes(const Shape& a, const Shape& b);

}  // namespace tessera
