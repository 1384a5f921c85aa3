#include "float_math.h"

#include <cmath>

#include "tessera/base/cpu_features.h"

namespace tessera::cpu {

namespace {

void unary_scalar(const UnaryWithParam& act, float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(apply_activation(act, x[i]));
}

void binary_scalar(BinaryOpType op, const float* a, const float* b, float* y, size_t n) {
  switch (op) {
    case BinaryOpType::ADD: for (size_t i = 0; i < n; ++i) y[i] = a[i] + b[i]; break;
    case BinaryOpType::SUB: for (size_t i = 0; i < n; ++i) y[i] = a[i] - b[i]; break;
    case BinaryOpType::MUL: for (size_t i = 0; i < n; ++i) y[i] = a[i] * b[i]; break;
    case BinaryOpType::DIV: for (size_t i = 0; i < n; ++i) y[i] = a[i] / b[i]; break;
    case BinaryOpType::MAX: for (size_t i = 0; i < n; ++i) y[i] = std::isnan(a[i]) || a[i] > b[i] ? a[i] : b[i]; break;
    case BinaryOpType::MIN: for (size_t i = 0; i < n; ++i) y[i] = std::isnan(a[i]) || a[i] < b[i] ? a[i] : b[i]; break;
    case BinaryOpType::GREATER: for (size_t i = 0; i < n; ++i) y[i] = a[i] > b[i]; break;
    case BinaryOpType::GREATER_EQUAL: for (size_t i = 0; i < n; ++i) y[i] = a[i] >= b[i]; break;
    case BinaryOpType::LESS: for (size_t i = 0; i < n; ++i) y[i] = a[i] < b[i]; break;
    case BinaryOpType::LESS_EQUAL: for (size_t i = 0; i < n; ++i) y[i] = a[i] <= b[i]; break;
    case BinaryOpType::EQUAL: for (size_t i = 0; i < n; ++i) y[i] = a[i] == b[i]; break;
  }
}

constexpr FloatMath kScalar{"generic", unary_scalar, binary_scalar, nullptr, nullptr, nullptr, nullptr, nullptr};
constexpr FloatMath kAvx2{"avx2", avx2::unary_f32, avx2::binary_f32, avx2::fused_eltwise, avx2::softmax_row, avx2::layer_norm_row, nullptr, avx2::affine_rows};
constexpr FloatMath kAvx512{"avx512", avx512::unary_f32, avx512::binary_f32, avx512::fused_eltwise, avx512::softmax_row, avx512::layer_norm_row, avx512::arg_extreme, avx512::affine_rows};

}  // namespace

const FloatMath& select_float_math() {
  switch (kernel_isa()) {
    case KernelIsa::kAvx512: return kAvx512;
    case KernelIsa::kAvx2: return kAvx2;
    case KernelIsa::kScalar: break;
  }
  return kScalar;
}

}  // namespace tessera::cpu
