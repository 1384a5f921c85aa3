// AVX-512 float32 activations and arithmetic (the vector activations are in
// avx512_activation.h).
#include <immintrin.h>

#include <type_traits>

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

template <class F>
void with_dtype(bool bf16, F&& f) {
  if (bf16) f(std::true_type{});
  else f(std::false_type{});
}

}  // namespace

void unary_f32(const UnaryWithParam& act, float* x, size_t n) {
  with_activation(act, [&](auto f) {
    for_each_vector(n, [&](size_t i, __mmask16 m) { storeu_ps(x + i, m, f(loadu_ps(x + i, m))); });
  });
}

void binary_f32(BinaryOpType op, const float* a, const float* b, float* y, size_t n) {
  with_binary_op(op, [&](auto f) {
    for_each_vector(n, [&](size_t i, __mmask16 m) { storeu_ps(y + i, m, f(loadu_ps(a + i, m), loadu_ps(b + i, m))); });
  });
}

// Operands of one dtype (the common case) get loops with the dtype fixed at
// compile time; mixed ones test each operand's dtype per vector.
void fused_eltwise(const FusedOperand& a, const FusedOperand* b, const FusedOperand& out, BinaryOpType op,
                   const UnaryWithParam& act, size_t n) {
  with_activation(act, [&](auto f) {
    if (!b) {
      if (a.bf16 == out.bf16) {
        with_dtype(a.bf16, [&](auto bf16) {
          for_each_vector(n, [&](size_t i, __mmask16 m) { store(out.data, bf16, i, m, f(load(a.data, bf16, i, m))); });
        });
      } else {
        for_each_vector(n, [&](size_t i, __mmask16 m) { store(out.data, out.bf16, i, m, f(load(a.data, a.bf16, i, m))); });
      }
      return;
    }
    with_binary_op(op, [&](auto g) {
      if (a.bf16 == b->bf16 && a.bf16 == out.bf16) {
        with_dtype(a.bf16, [&](auto bf16) {
          for_each_vector(n, [&](size_t i, __mmask16 m) {
            store(out.data, bf16, i, m, f(g(load(a.data, bf16, i, m), load(b->data, bf16, i, m))));
          });
        });
      } else {
        for_each_vector(n, [&](size_t i, __mmask16 m) {
          store(out.data, out.bf16, i, m, f(g(load(a.data, a.bf16, i, m), load(b->data, b->bf16, i, m))));
        });
      }
    });
  });
}

}  // namespace tessera::cpu::avx512
