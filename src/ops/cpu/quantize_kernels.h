// The element-wise passes of quantized_conv2d (internal): QuantizeLinear to
// uint8 of a row of floats, and the scale-and-bias of the conv's int32 sums,
// per ISA tier (portable C++ in quantize_kernels.cc, AVX-512 and AVX2 in
// quantize_avx512.cc / quantize_avx2.cc), selected by kernel_isa(). Every
// tier computes the same values bit for bit (quantized_conv2d_test.cc runs
// them all): x / scale is a true division (ONNX's, not a product with the
// reciprocal), rounding is to nearest even, and the epilogue's product and
// sum are two roundings, no FMA.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera::cpu {

struct QuantizeKernels {
  const char* isa;
  // q[i] = clamp(round(x[i] / scale) + zp, 0, 255); a NaN gives 0. Returns
  // whether any x[i] / scale was NaN.
  bool (*to_u8)(const float* x, size_t n, float scale, int32_t zp, uint8_t* q);
  // y[i] = (clamp(round(x[i] / scale) + zp, lo, hi) - zp) * out_scale, the
  // product rounded once; a NaN stays NaN (y may be x). out_scale 1: the
  // centered integers (the float32 kernels' input); scale: QuantizeLinear
  // then DequantizeLinear.
  void (*centered)(const float* x, size_t n, float scale, int32_t zp, int32_t lo, int32_t hi, float out_scale,
                   float* y);
  // y[p * ldy + c] = s[c] * float(acc[p * k + c]) + b[c] over `pixels` rows
  // of k channels (acc float32 sums when `float_acc`).
  void (*dequantize)(const void* acc, bool float_acc, size_t pixels, uint32_t k, const float* s, const float* b,
                     float* y, size_t ldy);
};

const QuantizeKernels& select_quantize_kernels();  // by kernel_isa()

#define TESSERA_QUANTIZE_ISA(ns)                                                                                     \
  namespace ns {                                                                                                     \
  bool quantize_to_u8(const float* x, size_t n, float scale, int32_t zp, uint8_t* q);                                \
  void quantize_centered(const float* x, size_t n, float scale, int32_t zp, int32_t lo, int32_t hi, float out_scale, \
                         float* y);                                                                                  \
  void dequantize_sums(const void* acc, bool float_acc, size_t pixels, uint32_t k, const float* s, const float* b,   \
                       float* y, size_t ldy);                                                                        \
  }
TESSERA_QUANTIZE_ISA(avx512)
TESSERA_QUANTIZE_ISA(avx2)
#undef TESSERA_QUANTIZE_ISA

}  // namespace tessera::cpu
