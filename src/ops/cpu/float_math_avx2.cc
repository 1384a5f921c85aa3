// AVX2 float32 activations (avx2_activation.h), arithmetic and the fused
// element-wise pass: the portable vector path for CPUs without the AVX-512
// kernel set. Tails run through stack buffers.
#include <immintrin.h>

#include <algorithm>

#include "avx2_activation.h"
#include "float_math.h"
#include "tessera/numerics/bfloat16.h"
#include "tessera/numerics/bfloat16_avx2.h"

namespace tessera::cpu::avx2 {

namespace {

template <class F>
void with_binary_op(BinaryOpType op, F&& f) {
  switch (op) {
    case BinaryOpType::ADD: return f([](__m256 u, __m256 v) { return _mm256_add_ps(u, v); });
    case BinaryOpType::SUB: return f([](__m256 u, __m256 v) { return _mm256_sub_ps(u, v); });
    case BinaryOpType::MUL: return f([](__m256 u, __m256 v) { return _mm256_mul_ps(u, v); });
    case BinaryOpType::DIV: return f([](__m256 u, __m256 v) { return _mm256_div_ps(u, v); });
  }
}

using tessera::avx2::load8;
using tessera::avx2::store8;

// y[i] = body(a[i], b[i]) over n elements (b null: unary, body's second
// argument unused), dtypes fixed at compile time (A, B, O: bfloat16). Two
// vectors per step: each activation is one long dependency chain, and with
// one vector per step the loop ran at its latency (bfloat16 silu 2-3x the
// time of float32 over half the bytes). The last n % 8 go through float32
// stack buffers converted element by element.
template <bool A, bool B, bool O, class Body>
void over_typed(size_t n, const void* a, const void* b, void* y, Body body) {
  const bool binary = b != nullptr;
  auto in_b = [&](size_t i) { return binary ? load8<B>(b, i) : _mm256_setzero_ps(); };
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 r0 = body(load8<A>(a, i), in_b(i)), r1 = body(load8<A>(a, i + 8), in_b(i + 8));
    store8<O>(y, i, r0), store8<O>(y, i + 8, r1);
  }
  for (; i + 8 <= n; i += 8) store8<O>(y, i, body(load8<A>(a, i), in_b(i)));
  if (i == n) return;
  alignas(32) float fa[8] = {}, fb[8] = {}, res[8];
  auto widen = [&](bool bf16, const void* p, float* f) {
    for (size_t j = i; j < n; ++j)
      f[j - i] = bf16 ? bfloat16_to_float(static_cast<const uint16_t*>(p)[j]) : static_cast<const float*>(p)[j];
  };
  widen(A, a, fa);
  if (binary) widen(B, b, fb);
  _mm256_store_ps(res, body(_mm256_load_ps(fa), _mm256_load_ps(fb)));
  for (size_t j = i; j < n; ++j) {
    if constexpr (O)
      static_cast<uint16_t*>(y)[j] = float_to_bfloat16(res[j - i]);
    else
      static_cast<float*>(y)[j] = res[j - i];
  }
}

// m values of x from element i as float32.
constexpr size_t kMixedChunk = 256;
void to_f32(const FusedOperand& x, size_t i, size_t m, float* f) {
  if (!x.bf16) return (void)std::copy_n(static_cast<const float*>(x.data) + i, m, f);
  const auto* h = static_cast<const uint16_t*>(x.data) + i;
  size_t j = 0;
  for (; j + 8 <= m; j += 8) _mm256_storeu_ps(f + j, load8<true>(h, j));
  for (; j < m; ++j) f[j] = bfloat16_to_float(h[j]);
}

// over_typed with the operands' dtypes: all float32 or all bfloat16, and for
// one operand every mix, get their own loop; mixed binary operands convert
// as they go.
template <class Body>
void over(size_t n, const FusedOperand& a, const FusedOperand* b, const FusedOperand& y, Body body) {
  if (!b) {
    if (a.bf16) return y.bf16 ? over_typed<true, false, true>(n, a.data, nullptr, y.data, body)
                              : over_typed<true, false, false>(n, a.data, nullptr, y.data, body);
    return y.bf16 ? over_typed<false, false, true>(n, a.data, nullptr, y.data, body)
                  : over_typed<false, false, false>(n, a.data, nullptr, y.data, body);
  }
  if (!a.bf16 && !b->bf16 && !y.bf16) return over_typed<false, false, false>(n, a.data, b->data, y.data, body);
  if (a.bf16 && b->bf16 && y.bf16) return over_typed<true, true, true>(n, a.data, b->data, y.data, body);
  // Mixed: widen both to float32 8 at a time, then the float32 loop.
  alignas(32) float fa[kMixedChunk], fb[kMixedChunk], fy[kMixedChunk];
  for (size_t i = 0; i < n; i += kMixedChunk) {
    const size_t m = std::min(kMixedChunk, n - i);
    to_f32(a, i, m, fa), to_f32(*b, i, m, fb);
    over_typed<false, false, false>(m, fa, fb, fy, body);
    if (y.bf16) {
      for (size_t j = 0; j < m; ++j) static_cast<uint16_t*>(y.data)[i + j] = float_to_bfloat16(fy[j]);
    } else {
      std::copy_n(fy, m, static_cast<float*>(y.data) + i);
    }
  }
}

}  // namespace

void unary_f32(const UnaryWithParam& act, float* x, size_t n) {
  with_activation(act, [&](auto f) {
    over_typed<false, false, false>(n, x, nullptr, x, [&](__m256 u, __m256) { return f(u); });
  });
}

void binary_f32(BinaryOpType op, const float* a, const float* b, float* y, size_t n) {
  with_binary_op(op, [&](auto g) { over_typed<false, false, false>(n, a, b, y, g); });
}

void fused_eltwise(const FusedOperand& a, const FusedOperand* b, const FusedOperand& out, BinaryOpType op,
                   const UnaryWithParam& act, size_t n) {
  with_activation(act, [&](auto f) {
    if (!b) return over(n, a, nullptr, out, [&](__m256 u, __m256) { return f(u); });
    with_binary_op(op, [&](auto g) { over(n, a, b, out, [&](__m256 u, __m256 v) { return f(g(u, v)); }); });
  });
}

}  // namespace tessera::cpu::avx2
