// Unary activations that ops apply on their own or fuse into their output
// (conv2d, add, ...). Names follow the original's UnaryOpType.
//
// apply_activation is the scalar definition every kernel is tested against:
//   relu        max(x, 0)                 relu6      min(max(x, 0), 6)
//   silu        x * sigmoid(x)            sigmoid    1 / (1 + e^-x)
//   gelu        x/2 * (1 + erf(x/sqrt 2)) (exact form, as torch's default)
//   tanh        tanh(x)                   leaky_relu x >= 0 ? x : param * x
//   hardswish   x * min(max(x + 3, 0), 6) / 6
//   hardsigmoid min(max(x / 6 + 1/2, 0), 1)
//   mish        x * tanh(softplus(x))     exp, sqrt
//   elu         x < 0 ? param * (e^x - 1) : x (ONNX's alpha; -0 stays -0)
//   erf, neg, abs, reciprocal (1 / x)
//   gelu_tanh   x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))) (torch's approximate='tanh')
//   log         ln x (0 gives -inf, negatives NaN)
//   pow         x^param, C's pow at every edge (a negative x gives NaN
//               unless param is an integer; +-0 and +-inf give 0 or inf;
//               pow(x, 0) is 1, NaN included). The vector kernels compute
//               e^(param ln|x|) in float32: relative error within
//               (|param ln|x|| + 4) 2^-23.
//   softplus    ln(1 + e^x), as max(x, 0) + log1p(e^-|x|) (no overflow)
//   softsign    x / (1 + |x|) (+-inf gives NaN, as ONNX Runtime and PyTorch)
//   celu        max(x, 0) + min(param (e^(x/param) - 1), 0) (NaN kept)
//   thresholded_relu  x > param ? x : 0 (NaN kept, as PyTorch's threshold)
//   clip        min(max(x, param), param2) (NaN kept; +-inf for no bound)
//   floor, ceil, round (half to even)
//   sign        -1, 0 or 1 (NaN kept, as numpy; -0 gives +0)
// then, with an affine, y * scale + shift in the same pass (a learnable
// affine after the activation, as PP-LCNet's).
//
// Also the binary arithmetic kinds (BinaryOpType). This header holds the
// element-wise op kinds and their scalar math only, no device op, so the
// CPU kernels (src/ops/cpu/) include it rather than the ops' front ends.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tessera {

// MAX and MIN keep NaN (numpy's maximum / minimum, ONNX Max / Min). The
// comparisons give 1 where they hold and 0 where not (a NaN operand: 0), the
// booleans Tessera keeps in float slots (ONNX Greater, GreaterOrEqual, Less,
// LessOrEqual, Equal).
enum class BinaryOpType : uint8_t { ADD, SUB, MUL, DIV, MAX, MIN, GREATER, GREATER_EQUAL, LESS, LESS_EQUAL, EQUAL };
// "add", "sub", "mul", "div", "max", "min", "gt", "ge", "lt", "le", "eq"
std::string_view binary_op_name(BinaryOpType op);

enum class UnaryOpType : uint8_t {
  IDENTITY,
  RELU,
  RELU6,
  SILU,
  GELU,
  SIGMOID,
  TANH,
  LEAKY_RELU,
  HARDSWISH,
  HARDSIGMOID,
  MISH,
  EXP,
  SQRT,
  ELU,
  ERF,
  NEG,
  ABS,
  RECIPROCAL,
  GELU_TANH,
  LOG,
  POW,
  SOFTPLUS,
  SOFTSIGN,
  CELU,
  THRESHOLDED_RELU,
  CLIP,
  FLOOR,
  CEIL,
  ROUND,
  SIGN,
  TO_FLOAT16,   // rounded to the nearest float16 (ONNX Cast to FLOAT16 and back), NaN kept
  TO_BFLOAT16,  // rounded to the nearest bfloat16 (Cast to BFLOAT16), NaN kept
  // (the last: tests iterate up to it; new kinds go last)
};
inline constexpr UnaryOpType kLastUnaryOp = UnaryOpType::TO_BFLOAT16;

struct UnaryWithParam {
  UnaryOpType op = UnaryOpType::IDENTITY;
  float param = 0.0f;                // leaky_relu slope (torch default 0.01 when built by name), elu / celu alpha,
                                     // pow exponent, thresholded_relu threshold, clip's lower bound
  float scale = 1.0f, shift = 0.0f;  // then y * scale + shift
  float param2 = 0.0f;               // clip's upper bound

  bool has_affine() const { return scale != 1.0f || shift != 0.0f; }
  // Nothing to apply: the identity with no affine.
  bool is_identity() const { return op == UnaryOpType::IDENTITY && !has_affine(); }
  UnaryWithParam without_affine() const { return {op, param, 1.0f, 0.0f, param2}; }
};

std::string_view unary_op_name(UnaryOpType op);  // "relu", "leaky_relu", ...
// What keys kernels and programs: "relu", "leaky_relu(0.1)", "hardswish*1.5+0.25".
std::string activation_name(const UnaryWithParam& a);
std::optional<UnaryOpType> parse_unary_op(std::string_view name);

double apply_activation(const UnaryWithParam& a, double x);

// Whether the vector kernels evaluate `op` with a polynomial (exp, tanh,
// erf, log: silu, gelu, sigmoid, tanh, mish, exp, elu, erf, log, pow, softplus, celu), which costs them more than
// the element's memory traffic.
bool is_transcendental(UnaryOpType op);

}  // namespace tessera
