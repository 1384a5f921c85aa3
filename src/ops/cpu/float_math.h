// Float32 array math that element-wise kernels run between dtype conversions
// (internal): an activation in place, and binary arithmetic. One table per
// ISA, chosen at program compile time.
//
// The portable table computes each activation in double and rounds once (the
// reference kernel's definition, bit for bit). The AVX-512 table computes in
// float32: exact for the piecewise-linear activations, sqrt and arithmetic;
// within 8 ulp + 1e-6 absolute for the transcendental ones (see eltwise.h).
#pragma once

#include <cstddef>

#include "tessera/ops/activation.h"
#include "tessera/ops/eltwise.h"

namespace tessera::cpu {

struct FloatMath {
  const char* isa;
  void (*unary)(const UnaryWithParam& act, float* x, size_t n);
  void (*binary)(BinaryOpType op, const float* a, const float* b, float* y, size_t n);
};

const FloatMath& select_float_math();  // by avx512_kernels_enabled()

namespace avx512 {
void unary_f32(const UnaryWithParam& act, float* x, size_t n);
void binary_f32(BinaryOpType op, const float* a, const float* b, float* y, size_t n);

// One pass over float32 / bfloat16 arrays: load, `a op b` (or just a),
// activation, round and store, in registers. Same results as the three
// passes above (float32 math, one rounding at the store).
struct FusedOperand {
  void* data;
  bool bf16;
};
void fused_eltwise(const FusedOperand& a, const FusedOperand* b, const FusedOperand& out, BinaryOpType op,
                   const UnaryWithParam& act, size_t n);
}  // namespace avx512

}  // namespace tessera::cpu
