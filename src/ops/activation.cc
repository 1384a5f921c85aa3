#include "tessera/ops/activation.h"

#include <fmt/format.h>

#include <cmath>

#include "tessera/numerics/bfloat16.h"
#include "tessera/numerics/float16.h"

namespace tessera {

namespace {
constexpr std::string_view kNames[] = {"identity",   "relu",       "relu6",      "silu",      "gelu",
                                       "sigmoid",    "tanh",       "leaky_relu", "hardswish", "hardsigmoid",
                                       "mish",       "exp",        "sqrt",       "elu",       "erf",
                                       "neg",        "abs",        "reciprocal", "gelu_tanh", "log",
                                       "pow",        "softplus",   "softsign",   "celu",      "thresholded_relu",
                                       "clip",       "floor",      "ceil",       "round",     "sign",
                                       "to_float16", "to_bfloat16"};
static_assert(std::size(kNames) == static_cast<size_t>(kLastUnaryOp) + 1);
}  // namespace

std::string_view unary_op_name(UnaryOpType op) { return kNames[static_cast<int>(op)]; }

std::optional<UnaryOpType> parse_unary_op(std::string_view name) {
  for (size_t i = 0; i < std::size(kNames); ++i)
    if (kNames[i] == name) return static_cast<UnaryOpType>(i);
  return std::nullopt;
}

bool is_transcendental(UnaryOpType op) {
  switch (op) {
    case UnaryOpType::SILU:
    case UnaryOpType::GELU:
    case UnaryOpType::SIGMOID:
    case UnaryOpType::TANH:
    case UnaryOpType::MISH:
    case UnaryOpType::EXP:
    case UnaryOpType::ELU:
    case UnaryOpType::ERF:
    case UnaryOpType::GELU_TANH:
    case UnaryOpType::LOG:
    case UnaryOpType::POW:
    case UnaryOpType::SOFTPLUS:
    case UnaryOpType::CELU:
      return true;
    default:
      return false;
  }
}

std::string activation_name(const UnaryWithParam& a) {
  std::string s(unary_op_name(a.op));
  if (a.op == UnaryOpType::LEAKY_RELU || a.op == UnaryOpType::ELU || a.op == UnaryOpType::POW ||
      a.op == UnaryOpType::CELU || a.op == UnaryOpType::THRESHOLDED_RELU)
    s += fmt::format("({})", a.param);
  if (a.op == UnaryOpType::CLIP) s += fmt::format("({},{})", a.param, a.param2);
  if (a.has_affine()) s += fmt::format("*{}+{}", a.scale, a.shift);
  return s;
}

namespace {

double apply_plain(const UnaryWithParam& a, double x) {
  switch (a.op) {
    case UnaryOpType::IDENTITY:
      return x;
    case UnaryOpType::RELU:
      return x < 0 ? 0 : x;
    case UnaryOpType::RELU6:
      return x < 0 ? 0 : x > 6 ? 6 : x;
    case UnaryOpType::SILU:
      return x / (1 + std::exp(-x));
    case UnaryOpType::GELU:
      return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case UnaryOpType::SIGMOID:
      return 1 / (1 + std::exp(-x));
    case UnaryOpType::TANH:
      return std::tanh(x);
    case UnaryOpType::LEAKY_RELU:
      return x >= 0 ? x : a.param * x;
    case UnaryOpType::HARDSWISH:
      return x * std::fmin(std::fmax(x + 3, 0.0), 6.0) / 6;
    // fmin / fmax drop a NaN operand; ONNX and PyTorch keep it.
    case UnaryOpType::HARDSIGMOID:
      return std::isnan(x) ? x : std::fmin(std::fmax(x / 6 + 0.5, 0.0), 1.0);
    case UnaryOpType::MISH:
      return x * std::tanh(std::log1p(std::exp(x)));
    case UnaryOpType::EXP:
      return std::exp(x);
    case UnaryOpType::SQRT:
      return std::sqrt(x);
    case UnaryOpType::ELU:
      return x < 0 ? a.param * std::expm1(x) : x;
    case UnaryOpType::ERF:
      return std::erf(x);
    case UnaryOpType::NEG:
      return -x;
    case UnaryOpType::ABS:
      return std::fabs(x);
    case UnaryOpType::RECIPROCAL:
      return 1 / x;
    case UnaryOpType::GELU_TANH:
      return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case UnaryOpType::LOG:
      return std::log(x);
    case UnaryOpType::POW:
      return std::pow(x, double{a.param});
    case UnaryOpType::SOFTPLUS:
      return std::isnan(x) ? x : std::fmax(x, 0.0) + std::log1p(std::exp(-std::fabs(x)));
    case UnaryOpType::SOFTSIGN:
      return x / (1 + std::fabs(x));
    case UnaryOpType::CELU:
      return std::isnan(x) ? x : std::fmax(x, 0.0) + std::fmin(a.param * std::expm1(x / a.param), 0.0);
    case UnaryOpType::THRESHOLDED_RELU:
      return std::isnan(x) || x > a.param ? x : 0.0;
    case UnaryOpType::CLIP:
      return std::isnan(x) ? x : std::fmin(std::fmax(x, double{a.param}), double{a.param2});
    case UnaryOpType::FLOOR:
      return std::floor(x);
    case UnaryOpType::CEIL:
      return std::ceil(x);
    case UnaryOpType::ROUND:
      return std::nearbyint(x);  // (the default rounding mode: half to even)
    case UnaryOpType::SIGN:
      return std::isnan(x) ? x : double((x > 0) - (x < 0));
    case UnaryOpType::TO_FLOAT16:
      return round_to_float16(static_cast<float>(x));
    case UnaryOpType::TO_BFLOAT16:
      return round_to_bfloat16(static_cast<float>(x));
  }
  return x;
}

}  // namespace

double apply_activation(const UnaryWithParam& a, double x) {
  const double y = apply_plain(a, x);
  return a.has_affine() ? y * a.scale + a.shift : y;
}

}  // namespace tessera
