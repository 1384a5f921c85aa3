// Float32 array math that element-wise kernels run between dtype conversions
// (internal): an activation in place, and binary arithmetic. One table per
// ISA, chosen at program compile time.
//
// The portable table computes each activation in double and rounds once (the
// reference kernel's definition, bit for bit). The AVX-512 and AVX2 tables
// compute in float32: exact for the piecewise-linear activations, sqrt and
// arithmetic; within 8 ulp + 1e-6 absolute for the transcendental ones (see
// eltwise.h).
#pragma once

#include <cstddef>

#include "tessera/ops/activation.h"

namespace tessera::cpu {

// An operand of the fused pass: float32 or bfloat16 values.
struct FusedOperand {
  void* data;
  bool bf16;
};

struct FloatMath {
  const char* isa;
  void (*unary)(const UnaryWithParam& act, float* x, size_t n);
  void (*binary)(BinaryOpType op, const float* a, const float* b, float* y, size_t n);
  // One pass over float32 / bfloat16 arrays: load, `a op b` (or just a when b
  // is null), activation, round and store, in registers. The same results as
  // unary/binary between conversions. Null for the portable table.
  void (*fused)(const FusedOperand& a, const FusedOperand* b, const FusedOperand& out, BinaryOpType op,
                const UnaryWithParam& act, size_t n);
  // A softmax row in place, in registers: x - max, exp, the sum of the exps
  // in double, then exp / sum (log: x - max - ln(sum)); a NaN anywhere makes
  // the row NaN. `x` holds n values and room for n rounded up to 16 (the
  // tail is scratch). Null for the portable table.
  void (*softmax_row)(float* x, size_t n, bool log);
  // A layer norm row in place: mean and variance in double (summed in
  // another order than the portable loop's, equal to double rounding), then
  // (x - mean) * rstd * w + b in float32, rounded after each operation as
  // the portable loop rounds. `w` and `b` hold n values each (ones and zeros
  // for an absent weight or bias). Null for the portable table.
  void (*layer_norm_row)(float* x, size_t n, const float* w, const float* b, float eps);
  // The index of the largest (`max`) or smallest of x[0, n), n >= 1, as
  // arg_reduce.h defines it: the first of equal values (the last with
  // `last`), a NaN before every number. Null for the portable and AVX2
  // tables (arg_reduce.cc's scalar loop).
  uint32_t (*arg_extreme)(const float* x, size_t n, bool max, bool last);
  // Rows of a per-channel affine and activation in one pass, in registers:
  // out row r [i] = act(fma(x row r [i], scale[i], shift[i])) for i < n (one
  // rounding for the fma, then the activation, then the store's rounding),
  // `rows` rows `x_stride` and `out_stride` bytes apart, float32 or bfloat16
  // each. Null for the portable table (concat_affine's scalar loop).
  void (*affine_rows)(const FusedOperand& x, size_t x_stride, const FusedOperand& out, size_t out_stride, size_t rows,
                      size_t n, const float* scale, const float* shift, const UnaryWithParam& act);
};

const FloatMath& select_float_math();  // by kernel_isa()

#define TESSERA_FLOAT_MATH_ISA(ns)                                                                        \
  namespace ns {                                                                                          \
  void unary_f32(const UnaryWithParam& act, float* x, size_t n);                                          \
  void binary_f32(BinaryOpType op, const float* a, const float* b, float* y, size_t n);                   \
  void fused_eltwise(const FusedOperand& a, const FusedOperand* b, const FusedOperand& out, BinaryOpType op, \
                     const UnaryWithParam& act, size_t n);                                                \
  void softmax_row(float* x, size_t n, bool log);                                                         \
  void layer_norm_row(float* x, size_t n, const float* w, const float* b, float eps);                     \
  uint32_t arg_extreme(const float* x, size_t n, bool max, bool last);                                    \
  void affine_rows(const FusedOperand& x, size_t x_stride, const FusedOperand& out, size_t out_stride,       \
                   size_t rows, size_t n, const float* scale, const float* shift, const UnaryWithParam& act); \
  }
TESSERA_FLOAT_MATH_ISA(avx512)
TESSERA_FLOAT_MATH_ISA(avx2)
#undef TESSERA_FLOAT_MATH_ISA

}  // namespace tessera::cpu
