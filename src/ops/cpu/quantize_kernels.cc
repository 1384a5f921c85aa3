#include "quantize_kernels.h"

#include <algorithm>
#include <cmath>

#include "tessera/base/cpu_features.h"

namespace tessera::cpu {

namespace {

// The quantized value of x before the zero point: x / scale clamped to
// +-1024 (past any 8-bit result; a NaN to the low end, flagged in `nan`),
// rounded to nearest even.
inline int32_t quantized(float x, float scale, bool& nan) {
  float v = x / scale;
  nan = v != v;
  v = v >= -1024.0f ? v : -1024.0f;
  v = v <= 1024.0f ? v : 1024.0f;
  return static_cast<int32_t>(std::nearbyint(v));
}

bool to_u8_scalar(const float* x, size_t n, float scale, int32_t zp, uint8_t* q) {
  bool any = false;
  for (size_t i = 0; i < n; ++i) {
    bool nan = false;
    q[i] = static_cast<uint8_t>(std::clamp(quantized(x[i], scale, nan) + zp, 0, 255));
    any = any || nan;
  }
  return any;
}

void centered_scalar(const float* x, size_t n, float scale, int32_t zp, int32_t lo, int32_t hi, float out_scale,
                     float* y) {
  for (size_t i = 0; i < n; ++i) {
    bool nan = false;
    const int32_t q = std::clamp(quantized(x[i], scale, nan) + zp, lo, hi) - zp;
    y[i] = nan ? x[i] : static_cast<float>(q) * out_scale;
  }
}

void dequantize_scalar(const void* acc, bool float_acc, size_t pixels, uint32_t k, const float* s, const float* b,
                       float* y, size_t ldy) {
  for (size_t p = 0; p < pixels; ++p)
    for (uint32_t c = 0; c < k; ++c) {
      const size_t i = p * k + c;
      const float a =
          float_acc ? static_cast<const float*>(acc)[i] : static_cast<float>(static_cast<const int32_t*>(acc)[i]);
      const float scaled = s[c] * a;  // (two roundings: no fused multiply-add)
      y[p * ldy + c] = scaled + b[c];
    }
}

constexpr QuantizeKernels kScalar{"generic", to_u8_scalar, centered_scalar, dequantize_scalar};
constexpr QuantizeKernels kAvx2{"avx2", avx2::quantize_to_u8, avx2::quantize_centered, avx2::dequantize_sums};
constexpr QuantizeKernels kAvx512{"avx512", avx512::quantize_to_u8, avx512::quantize_centered, avx512::dequantize_sums};

}  // namespace

const QuantizeKernels& select_quantize_kernels() {
  switch (kernel_isa()) {
    case KernelIsa::kAvx512:
      return kAvx512;
    case KernelIsa::kAvx2:
      return kAvx2;
    case KernelIsa::kScalar:
      break;
  }
  return kScalar;
}

}  // namespace tessera::cpu
