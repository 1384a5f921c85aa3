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

namespace {

// One output dtype per instantiation, so that the activation can be the one
// accurate to it (with_activation<kBf16Out>). Operands of the output's dtype
// (the common case) and a unary's operand of the other get loops with the
// dtype fixed at compile time; mixed binary operands test each operand's dtype
// per vector. Kept apart per output dtype: one function holding both made
// GCC leave some per-vector lambdas out-of-line calls (a float32 silu ran
// 5-8% slower).
template <bool kBf16Out>
[[gnu::noinline]] void fused_eltwise_to(const FusedOperand& a, const FusedOperand* b, const FusedOperand& out,
                                        BinaryOpType op, const UnaryWithParam& act, size_t n) {
  constexpr std::bool_constant<kBf16Out> same;
  constexpr std::bool_constant<!kBf16Out> other;
  with_activation<kBf16Out>(act, [&](auto f) {
    if (!b) {
      if (a.bf16 == kBf16Out)
        for_each_vector(n, [&](size_t i, __mmask16 m) { store(out.data, same, i, m, f(load(a.data, same, i, m))); });
      else
        for_each_vector(n, [&](size_t i, __mmask16 m) { store(out.data, same, i, m, f(load(a.data, other, i, m))); });
      return;
    }
    with_binary_op(op, [&](auto g) {
      if (a.bf16 == kBf16Out && b->bf16 == kBf16Out) {
        for_each_vector(n, [&](size_t i, __mmask16 m) {
          store(out.data, same, i, m, f(g(load(a.data, same, i, m), load(b->data, same, i, m))));
        });
      } else {
        for_each_vector(n, [&](size_t i, __mmask16 m) {
          store(out.data, same, i, m, f(g(load(a.data, a.bf16, i, m), load(b->data, b->bf16, i, m))));
        });
      }
    });
  });
}

}  // namespace

void fused_eltwise(const FusedOperand& a, const FusedOperand* b, const FusedOperand& out, BinaryOpType op,
                   const UnaryWithParam& act, size_t n) {
  if (out.bf16) fused_eltwise_to<true>(a, b, out, op, act, n);
  else fused_eltwise_to<false>(a, b, out, op, act, n);
}

}  // namespace tessera::cpu::avx512
