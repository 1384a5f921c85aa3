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

enum class BinaryOpType : uint8_t { ADD, SUB, MUL, DIV };
std::string_view binary_op_name(BinaryOpType op);  // "add", "sub", "mul", "div"

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
  POW,  // the last: tests iterate up to it (new kinds go last: images store these values)
};

struct UnaryWithParam {
  UnaryOpType op = UnaryOpType::IDENTITY;
  float param = 0.0f;  // leaky_relu slope (torch default 0.01 when built by name), elu alpha, pow exponent
  float scale = 1.0f, shift = 0.0f;  // then y * scale + shift

  bool has_affine() const { return scale != 1.0f || shift != 0.0f; }
  // Nothing to apply: the identity with no affine.
  bool is_identity() const { return op == UnaryOpType::IDENTITY && !has_affine(); }
  UnaryWithParam without_affine() const { return {op, param}; }
};

std::string_view unary_op_name(UnaryOpType op);  // "relu", "leaky_relu", ...
// What keys kernels and programs: "relu", "leaky_relu(0.1)", "hardswish*1.5+0.25".
std::string activation_name(const UnaryWithParam& a);
std::optional<UnaryOpType> parse_unary_op(std::string_view name);

double apply_activation(const UnaryWithParam& a, double x);

// Whether the vector kernels evaluate `op` with a polynomial (exp, tanh,
// erf, log: silu, gelu, sigmoid, tanh, mish, exp, elu, erf, log, pow), which costs them more than
// the element's memory traffic.
bool is_transcendental(UnaryOpType op);

}  // namespace tessera
