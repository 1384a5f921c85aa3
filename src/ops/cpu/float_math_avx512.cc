// AVX-512 float32 activations and arithmetic (the vector activations are in
// avx512_activation.h).
#include <immintrin.h>

#include "avx512_activation.h"
#include "avx512_util.h"
#include "float_math.h"

namespace tessera::cpu::avx512 {

namespace {

template <class F>
void with_binary_op(BinaryOpType op, F&& f) {
  switch (op) {
    case BinaryOpType::ADD: return f([](__m512 u, __m512 v) { return _mm512_add_ps(u, v); });
    case BinaryOpType::SUB: return f([](__m512 u, __m512 v) { return _mm512_sub_ps(u, v); });
    case BinaryOpType::MUL: return f([](__m512 u, __m512 v) { return _mm512_mul_ps(u, v); });
    case BinaryOpType::DIV: return f([](__m512 u, __m512 v) { return _mm512_div_ps(u, v); });
  }
}

}  // namespace

void unary_f32(const UnaryWithParam& act, float* x, size_t n) {
  with_activation(act, [&](auto f) {
    for (size_t i = 0; i < n; i += 16) {
      const __mmask16 m = tail_mask(n - i);
      _mm512_mask_storeu_ps(x + i, m, f(_mm512_maskz_loadu_ps(m, x + i)));
    }
  });
}

void binary_f32(BinaryOpType op, const float* a, const float* b, float* y, size_t n) {
  with_binary_op(op, [&](auto f) {
    for (size_t i = 0; i < n; i += 16) {
      const __mmask16 m = tail_mask(n - i);
      _mm512_mask_storeu_ps(y + i, m, f(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i)));
    }
  });
}

void fused_eltwise(const FusedOperand& a, const FusedOperand* b, const FusedOperand& out, BinaryOpType op,
                   const UnaryWithParam& act, size_t n) {
  with_activation(act, [&](auto f) {
    if (!b) {
      for (size_t i = 0; i < n; i += 16) {
        const __mmask16 m = tail_mask(n - i);
        store(out.data, out.bf16, i, m, f(load(a.data, a.bf16, i, m)));
      }
      return;
    }
    with_binary_op(op, [&](auto g) {
      for (size_t i = 0; i < n; i += 16) {
        const __mmask16 m = tail_mask(n - i);
        store(out.data, out.bf16, i, m, f(g(load(a.data, a.bf16, i, m), load(b->data, b->bf16, i, m))));
      }
    });
  });
}

}  // namespace tessera::cpu::avx512
