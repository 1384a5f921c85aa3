// AVX2 float32 activations (avx2_activation.h), arithmetic and the fused
// element-wise pass: the portable vector path for CPUs without the AVX-512
// kernel set. Tails run through stack buffers.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "avx2_activation.h"
#include "float_math.h"
#include "tessera/numerics/bfloat16.h"
#include "tessera/numerics/bfloat16_avx2.h"
#include "tessera/numerics/convert.h"

namespace tessera::cpu::avx2 {

namespace {

template <class F>
void with_binary_op(BinaryOpType op, F&& f) {
  switch (op) {
    case BinaryOpType::ADD: return f([](__m256 u, __m256 v) { return _mm256_add_ps(u, v); });
    case BinaryOpType::SUB: return f([](__m256 u, __m256 v) { return _mm256_sub_ps(u, v); });
    case BinaryOpType::MUL: return f([](__m256 u, __m256 v) { return _mm256_mul_ps(u, v); });
    case BinaryOpType::DIV: return f([](__m256 u, __m256 v) { return _mm256_div_ps(u, v); });
    // vmaxps / vminps return v when either is NaN: u's NaN put back.
    case BinaryOpType::MAX: return f([](__m256 u, __m256 v) { return _mm256_blendv_ps(_mm256_max_ps(u, v), u, _mm256_cmp_ps(u, u, _CMP_UNORD_Q)); });
    case BinaryOpType::MIN: return f([](__m256 u, __m256 v) { return _mm256_blendv_ps(_mm256_min_ps(u, v), u, _mm256_cmp_ps(u, u, _CMP_UNORD_Q)); });
    // Comparisons: 1 where the ordered (NaN: false) predicate holds, else 0.
    case BinaryOpType::GREATER: return f([](__m256 u, __m256 v) { return _mm256_and_ps(_mm256_cmp_ps(u, v, _CMP_GT_OQ), _mm256_set1_ps(1.0f)); });
    case BinaryOpType::GREATER_EQUAL: return f([](__m256 u, __m256 v) { return _mm256_and_ps(_mm256_cmp_ps(u, v, _CMP_GE_OQ), _mm256_set1_ps(1.0f)); });
    case BinaryOpType::LESS: return f([](__m256 u, __m256 v) { return _mm256_and_ps(_mm256_cmp_ps(u, v, _CMP_LT_OQ), _mm256_set1_ps(1.0f)); });
    case BinaryOpType::LESS_EQUAL: return f([](__m256 u, __m256 v) { return _mm256_and_ps(_mm256_cmp_ps(u, v, _CMP_LE_OQ), _mm256_set1_ps(1.0f)); });
    case BinaryOpType::EQUAL: return f([](__m256 u, __m256 v) { return _mm256_and_ps(_mm256_cmp_ps(u, v, _CMP_EQ_OQ), _mm256_set1_ps(1.0f)); });
  }
}

using tessera::avx2::load8;
using tessera::avx2::store8;

// y[i] = body(a[i], b[i]) over n elements (b null: unary, body's second
// argument unused), dtypes fixed at compile time (A, B, O: bfloat16), so
// the loop tests no dtype flag per vector. The last n % 8 go through float32
// stack buffers converted element by element.
template <bool A, bool B, bool O, class Body>
void over_typed(size_t n, const void* a, const void* b, void* y, Body body) {
  const bool binary = b != nullptr;
  auto in_b = [&](size_t i) { return binary ? load8<B>(b, i) : _mm256_setzero_ps(); };
  size_t i = 0;
  if constexpr (A && O) {  // bfloat16 in and out: 16 lanes at a time in unpacked order (bfloat16_avx2.h)
    if (!binary || B) {
      for (; i + 16 <= n; i += 16) {
        __m256 a0, a1, b0 = _mm256_setzero_ps(), b1 = _mm256_setzero_ps();
        tessera::avx2::load_bf16x16_unpacked(static_cast<const uint16_t*>(a) + i, a0, a1);
        if (binary) tessera::avx2::load_bf16x16_unpacked(static_cast<const uint16_t*>(b) + i, b0, b1);
        tessera::avx2::store_bf16x16_unpacked(static_cast<uint16_t*>(y) + i, body(a0, b0), body(a1, b1));
      }
    }
  }
  if constexpr (O) {  // bfloat16 out: 16 lanes per pack and store
    for (; i + 16 <= n; i += 16) {
      const __m256 lo = body(load8<A>(a, i), in_b(i)), hi = body(load8<A>(a, i + 8), in_b(i + 8));
      tessera::avx2::store_bf16x16(static_cast<uint16_t*>(y) + i, lo, hi);
    }
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
  // Mixed: both widened to float32 a chunk at a time (the bulk
  // conversions), the float32 loop, then rounded back.
  constexpr size_t kChunk = 256;
  alignas(32) float fa[kChunk], fb[kChunk], fy[kChunk];
  auto type = [](const FusedOperand& x) { return x.bf16 ? DataType::BFLOAT16 : DataType::FLOAT32; };
  auto at = [&](const FusedOperand& x, size_t i) { return static_cast<std::byte*>(x.data) + i * (x.bf16 ? 2 : 4); };
  for (size_t i = 0; i < n; i += kChunk) {
    const size_t m = std::min(kChunk, n - i);
    convert_to_float(at(a, i), type(a), fa, m), convert_to_float(at(*b, i), type(*b), fb, m);
    over_typed<false, false, false>(m, fa, fb, fy, body);
    convert_from_float(fy, at(y, i), type(y), m);
  }
}

}  // namespace

__m256 apply_activation(const UnaryWithParam& act, __m256 v) {
  __m256 r = v;
  with_activation(act, [&](auto f) { r = f(v); });
  return r;
}

void unary_f32(const UnaryWithParam& act, float* x, size_t n) {
  with_activation(act, [&](auto f) {
    over_typed<false, false, false>(n, x, nullptr, x, [&](__m256 u, __m256) { return f(u); });
  });
}

void binary_f32(BinaryOpType op, const float* a, const float* b, float* y, size_t n) {
  with_binary_op(op, [&](auto g) { over_typed<false, false, false>(n, a, b, y, g); });
}

// A binary op with no activation or ReLU runs fused in one loop; with
// another, in two steps over chunks that stay in L1 (the op into float32,
// then the activation into the output): a loop per op and activation pair
// (11 x 66 of them, five dtype mixes each) took this file 15 minutes to
// compile under the sanitizers, for pairs models rarely hold.
void fused_eltwise(const FusedOperand& a, const FusedOperand* b, const FusedOperand& out, BinaryOpType op,
                   const UnaryWithParam& act, size_t n) {
  if (!b) {
    with_activation(act, [&](auto f) { over(n, a, nullptr, out, [&](__m256 u, __m256) { return f(u); }); });
    return;
  }
  if (!act.has_affine() && (act.op == UnaryOpType::IDENTITY || act.op == UnaryOpType::RELU)) {
    const bool relu = act.op == UnaryOpType::RELU;
    with_binary_op(op, [&](auto g) {
      if (relu) over(n, a, b, out, [&](__m256 u, __m256 v) { return _mm256_max_ps(_mm256_setzero_ps(), g(u, v)); });
      else over(n, a, b, out, g);
    });
    return;
  }
  auto advanced = [](const FusedOperand& x, size_t i) {
    return FusedOperand{static_cast<std::byte*>(x.data) + i * (x.bf16 ? 2 : 4), x.bf16};
  };
  constexpr size_t kChunk = 1024;
  alignas(32) float chunk[kChunk];
  const FusedOperand tmp{chunk, false};
  for (size_t c = 0; c < n; c += kChunk) {
    const size_t m = std::min(kChunk, n - c);
    const FusedOperand bc = advanced(*b, c);
    with_binary_op(op, [&](auto g) { over(m, advanced(a, c), &bc, tmp, g); });
    with_activation(act, [&](auto f) { over(m, tmp, nullptr, advanced(out, c), [&](__m256 u, __m256) { return f(u); }); });
  }
}

void softmax_row(float* x, size_t n, bool log) {
  const size_t padded = (n + 7) / 8 * 8;
  std::fill(x + n, x + padded, -INFINITY);  // adds exp(-inf) = 0 to the sum
  __m256 top = set(-INFINITY), nan = _mm256_setzero_ps();
  for (size_t i = 0; i < padded; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    top = _mm256_max_ps(top, v);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, top);
  const float top1 = _mm256_movemask_ps(nan) ? NAN : *std::max_element(lanes, lanes + 8);
  const __m256 m = set(top1);
  __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
  for (size_t i = 0; i < padded; i += 8) {
    const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + i), m), e = exp_ps(d);
    _mm256_storeu_ps(x + i, log ? d : e);
    s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  alignas(32) double sums[4];
  _mm256_store_pd(sums, _mm256_add_pd(s0, s1));
  const double sum = (sums[0] + sums[1]) + (sums[2] + sums[3]);
  if (log) {
    const __m256 ls = set(static_cast<float>(std::log(sum)));
    for (size_t i = 0; i < padded; i += 8) _mm256_storeu_ps(x + i, _mm256_sub_ps(_mm256_loadu_ps(x + i), ls));
  } else {
    const __m256 inv = set(static_cast<float>(1.0 / sum));
    for (size_t i = 0; i < padded; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
  }
}

void layer_norm_row(float* x, size_t n, const float* w, const float* b, float eps) {
  const size_t full = n / 8 * 8;
  auto hsum = [](__m256d v) {
    alignas(32) double d[4];
    _mm256_store_pd(d, v);
    return (d[0] + d[1]) + (d[2] + d[3]);
  };
  __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
  for (size_t i = 0; i < full; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
    s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
  }
  double sum = hsum(_mm256_add_pd(s0, s1));
  for (size_t i = full; i < n; ++i) sum += x[i];
  const double mean = sum / static_cast<double>(n);
  const __m256d mv = _mm256_set1_pd(mean);
  s0 = s1 = _mm256_setzero_pd();
  for (size_t i = 0; i < full; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256d lo = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), mv);
    const __m256d hi = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), mv);
    s0 = _mm256_fmadd_pd(lo, lo, s0), s1 = _mm256_fmadd_pd(hi, hi, s1);
  }
  double sq = hsum(_mm256_add_pd(s0, s1));
  for (size_t i = full; i < n; ++i) sq += (x[i] - mean) * (x[i] - mean);
  const auto rstd = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(n) + eps));
  const auto fmean = static_cast<float>(mean);
  const __m256 vr = set(rstd), vm = set(fmean);
  for (size_t i = 0; i < full; i += 8) {
    const __m256 y = _mm256_mul_ps(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm), vr), _mm256_loadu_ps(w + i));
    _mm256_storeu_ps(x + i, _mm256_add_ps(y, _mm256_loadu_ps(b + i)));
  }
  for (size_t i = full; i < n; ++i) {
    const float y = (x[i] - fmean) * rstd;  // (two statements: no fused multiply-add, as the vectors)
    x[i] = y * w[i] + b[i];
  }
}

void affine_rows(const FusedOperand& x, size_t x_stride, const FusedOperand& out, size_t out_stride, size_t rows,
                 size_t n, const float* scale, const float* shift, const UnaryWithParam& act) {
  // float32 rows in place; bfloat16 ones widened and rounded a chunk at a
  // time around the float32 loop (as `over` does for mixed operands).
  constexpr size_t kChunk = 256;
  alignas(32) float fx[kChunk];
  auto type = [](const FusedOperand& v) { return v.bf16 ? DataType::BFLOAT16 : DataType::FLOAT32; };
  const size_t in_unit = x.bf16 ? 2 : 4, out_unit = out.bf16 ? 2 : 4;
  with_activation(act, [&](auto f) {
    for (size_t r = 0; r < rows; ++r) {
      const auto* in = static_cast<const std::byte*>(x.data) + r * x_stride;
      auto* o = static_cast<std::byte*>(out.data) + r * out_stride;
      for (size_t c = 0; c < n; c += kChunk) {
        const size_t m = std::min(kChunk, n - c);
        const bool plain = !x.bf16 && !out.bf16;
        const float* src = plain ? reinterpret_cast<const float*>(in) + c : fx;
        float* dst = plain ? reinterpret_cast<float*>(o) + c : fx;
        if (!plain) convert_to_float(in + c * in_unit, type(x), fx, m);
        size_t i = 0;
        for (; i + 8 <= m; i += 8)
          _mm256_storeu_ps(dst + i, f(_mm256_fmadd_ps(_mm256_loadu_ps(src + i), _mm256_loadu_ps(scale + c + i),
                                                      _mm256_loadu_ps(shift + c + i))));
        if (i < m) {  // the tail through a stack vector
          alignas(32) float t[8] = {}, s8[8] = {}, h8[8] = {};
          std::copy(src + i, src + m, t), std::copy(scale + c + i, scale + c + m, s8);
          std::copy(shift + c + i, shift + c + m, h8);
          _mm256_store_ps(t, f(_mm256_fmadd_ps(_mm256_load_ps(t), _mm256_load_ps(s8), _mm256_load_ps(h8))));
          std::copy(t, t + (m - i), dst + i);
        }
        if (!plain) convert_from_float(fx, o + c * out_unit, type(out), m);
      }
    }
  });
}

}  // namespace tessera::cpu::avx2
