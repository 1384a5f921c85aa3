// AVX-512 float32 activations and arithmetic (the vector activations are in
// avx512_activation.h).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
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
    // vmaxps / vminps return v when either is NaN: u's NaN put back.
    case BinaryOpType::MAX: return f([](__m512 u, __m512 v) { return _mm512_mask_mov_ps(_mm512_max_ps(u, v), _mm512_cmp_ps_mask(u, u, _CMP_UNORD_Q), u); });
    case BinaryOpType::MIN: return f([](__m512 u, __m512 v) { return _mm512_mask_mov_ps(_mm512_min_ps(u, v), _mm512_cmp_ps_mask(u, u, _CMP_UNORD_Q), u); });
    // Comparisons: 1 where the ordered (NaN: false) predicate holds, else 0.
    case BinaryOpType::GREATER: return f([](__m512 u, __m512 v) { return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(u, v, _CMP_GT_OQ), _mm512_set1_ps(1.0f)); });
    case BinaryOpType::GREATER_EQUAL: return f([](__m512 u, __m512 v) { return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(u, v, _CMP_GE_OQ), _mm512_set1_ps(1.0f)); });
    case BinaryOpType::LESS: return f([](__m512 u, __m512 v) { return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(u, v, _CMP_LT_OQ), _mm512_set1_ps(1.0f)); });
    case BinaryOpType::LESS_EQUAL: return f([](__m512 u, __m512 v) { return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(u, v, _CMP_LE_OQ), _mm512_set1_ps(1.0f)); });
    case BinaryOpType::EQUAL: return f([](__m512 u, __m512 v) { return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(u, v, _CMP_EQ_OQ), _mm512_set1_ps(1.0f)); });
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

// f over n bfloat16 values, 32 at a time: the even and odd elements of each
// 64-byte vector widen with one instruction each (a shift, a mask), the two
// results round in one vcvtne2ps2bf16 and one vpermw interleaves them back,
// two instructions fewer per 16 values than widening and rounding each half.
// A pair of halves holding a float32 denormal rounds exactly (to_bf16), as
// every bfloat16 store does.
template <bool kTail, class F>
[[gnu::always_inline]] inline void unary_bf16_pair(const uint16_t* in, uint16_t* out, __mmask32 m, F f) {
  const __m512i raw = kTail ? _mm512_maskz_loadu_epi16(m, in) : _mm512_loadu_si512(in);
  const __m512 even = f(bf16_even(raw));
  const __m512 odd = f(bf16_odd(raw));
  __m512i packed;
  if (!_kortestz_mask16_u8(_mm512_fpclass_ps_mask(even, kDenormalClass), _mm512_fpclass_ps_mask(odd, kDenormalClass)))
      [[unlikely]]
    packed = interleave_bf16_halves(_mm512_inserti64x4(_mm512_castsi256_si512(to_bf16_exact(even)), to_bf16_exact(odd), 1));
  else
    packed = interleave_bf16_halves(reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(odd, even)));
  if (kTail) _mm512_mask_storeu_epi16(out, m, packed);
  else _mm512_storeu_si512(out, packed);
}
template <class F>
void unary_bf16_pairs(const uint16_t* in, uint16_t* out, size_t n, F f) {
  size_t i = 0;
  for (; i + 32 <= n; i += 32) unary_bf16_pair<false>(in + i, out + i, 0, f);
  if (i < n) unary_bf16_pair<true>(in + i, out + i, static_cast<__mmask32>((uint64_t{1} << (n - i)) - 1), f);
}

// Activations fused into a binary op's loop: none and ReLU (a residual
// add's). Named types, so that both output dtypes share the loops.
struct NoActivation {
  __m512 operator()(__m512 v) const { return v; }
};
struct Relu {
  __m512 operator()(__m512 v) const { return relu_keep_nan(v); }
};

// out = f(g(a, b)) over n elements. Operands of the output's dtype (the
// common case) get a loop with the dtype fixed at compile time; mixed ones
// test each operand's dtype per vector.
template <bool kBf16Out, class G, class F>
void binary_loop(const FusedOperand& a, const FusedOperand& b, const FusedOperand& out, size_t n, G g, F f) {
  constexpr std::bool_constant<kBf16Out> same;
  if (a.bf16 == kBf16Out && b.bf16 == kBf16Out) {
    for_each_vector(n, [&](size_t i, __mmask16 m) {
      store(out.data, same, i, m, f(g(load(a.data, same, i, m), load(b.data, same, i, m))));
    });
  } else {
    for_each_vector(n, [&](size_t i, __mmask16 m) {
      store(out.data, same, i, m, f(g(load(a.data, a.bf16, i, m), load(b.data, b.bf16, i, m))));
    });
  }
}

FusedOperand advanced(const FusedOperand& x, size_t i) {
  return {static_cast<std::byte*>(x.data) + i * (x.bf16 ? 2 : 4), x.bf16};
}

// One output dtype per instantiation, so that the activation can be the one
// accurate to it (with_activation<kBf16Out>). A unary's operand of either
// dtype gets a loop with the dtype fixed at compile time. Kept apart per
// output dtype: one function holding both made GCC leave some per-vector
// lambdas out-of-line calls (a float32 silu ran 5-8% slower).
//
// A binary op with an activation other than none or ReLU runs in two steps
// over chunks that stay in L1 (the op into float32, then the activation into
// the output): a loop per op and activation pair (11 x 66 of them) took this
// file and its AVX2 twin minutes to compile (15 under the sanitizers) for
// pairs models rarely hold.
template <bool kBf16Out>
[[gnu::noinline]] void fused_eltwise_to(const FusedOperand& a, const FusedOperand* b, const FusedOperand& out,
                                        BinaryOpType op, const UnaryWithParam& act, size_t n) {
  constexpr std::bool_constant<kBf16Out> same;
  constexpr std::bool_constant<!kBf16Out> other;
  if (!b) {
    with_activation<kBf16Out>(act, [&](auto f) {
      if (kBf16Out && a.bf16)
        unary_bf16_pairs(static_cast<const uint16_t*>(a.data), static_cast<uint16_t*>(out.data), n, f);
      else if (a.bf16 == kBf16Out)
        for_each_vector(n, [&](size_t i, __mmask16 m) { store(out.data, same, i, m, f(load(a.data, same, i, m))); });
      else
        for_each_vector(n, [&](size_t i, __mmask16 m) { store(out.data, same, i, m, f(load(a.data, other, i, m))); });
    });
    return;
  }
  if (!act.has_affine() && (act.op == UnaryOpType::IDENTITY || act.op == UnaryOpType::RELU)) {
    const bool relu = act.op == UnaryOpType::RELU;
    with_binary_op(op, [&](auto g) {
      if (relu) binary_loop<kBf16Out>(a, *b, out, n, g, Relu{});
      else binary_loop<kBf16Out>(a, *b, out, n, g, NoActivation{});
    });
    return;
  }
  constexpr size_t kChunk = 1024;
  alignas(64) float chunk[kChunk];
  for (size_t c = 0; c < n; c += kChunk) {
    const size_t m = std::min(kChunk, n - c);
    const FusedOperand o = advanced(out, c);
    with_binary_op(op, [&](auto g) { binary_loop<false>(advanced(a, c), advanced(*b, c), {chunk, false}, m, g, NoActivation{}); });
    with_activation<kBf16Out>(act, [&](auto f) {
      for_each_vector(m, [&](size_t i, __mmask16 k) { store(o.data, same, i, k, f(loadu_ps(chunk + i, k))); });
    });
  }
}

}  // namespace

void fused_eltwise(const FusedOperand& a, const FusedOperand* b, const FusedOperand& out, BinaryOpType op,
                   const UnaryWithParam& act, size_t n) {
  if (out.bf16) fused_eltwise_to<true>(a, b, out, op, act, n);
  else fused_eltwise_to<false>(a, b, out, op, act, n);
}

void softmax_row(float* x, size_t n, bool log) {
  const size_t padded = (n + 15) / 16 * 16;
  std::fill(x + n, x + padded, -INFINITY);  // adds exp(-inf) = 0 to the sum
  __m512 top = set(-INFINITY);
  __mmask16 nan = 0;
  for (size_t i = 0; i < padded; i += 16) {
    const __m512 v = _mm512_load_ps(x + i);
    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    top = _mm512_max_ps(top, v);
  }
  const __m512 m = set(nan ? NAN : _mm512_reduce_max_ps(top));
  __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
  for (size_t i = 0; i < padded; i += 16) {
    const __m512 d = _mm512_sub_ps(_mm512_load_ps(x + i), m), e = exp_act_ps(d);
    _mm512_store_ps(x + i, log ? d : e);
    s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
    s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm512_extractf32x8_ps(e, 1)));
  }
  const double sum = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
  if (log) {
    const __m512 ls = set(static_cast<float>(std::log(sum)));
    for (size_t i = 0; i < padded; i += 16) _mm512_store_ps(x + i, _mm512_sub_ps(_mm512_load_ps(x + i), ls));
  } else {
    const __m512 inv = set(static_cast<float>(1.0 / sum));
    for (size_t i = 0; i < padded; i += 16) _mm512_store_ps(x + i, _mm512_mul_ps(_mm512_load_ps(x + i), inv));
  }
}

void layer_norm_row(float* x, size_t n, const float* w, const float* b, float eps) {
  // (a tail's masked-off lanes load as 0 and leave the sums)
  auto halves = [](__m512 v, __m512d& lo, __m512d& hi) {
    lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v)), hi = _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1));
  };
  __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
  for_each_vector(n, [&](size_t i, __mmask16 m) {
    __m512d lo, hi;
    halves(loadu_ps(x + i, m), lo, hi);
    s0 = _mm512_add_pd(s0, lo), s1 = _mm512_add_pd(s1, hi);
  });
  const double mean = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1)) / static_cast<double>(n);
  const __m512d mv = _mm512_set1_pd(mean);
  s0 = s1 = _mm512_setzero_pd();
  for_each_vector(n, [&](size_t i, __mmask16 m) {
    __m512d lo, hi;
    halves(loadu_ps(x + i, m), lo, hi);
    lo = _mm512_maskz_sub_pd(static_cast<__mmask8>(m), lo, mv), hi = _mm512_maskz_sub_pd(static_cast<__mmask8>(m >> 8), hi, mv);
    s0 = _mm512_fmadd_pd(lo, lo, s0), s1 = _mm512_fmadd_pd(hi, hi, s1);
  });
  const double sq = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
  const __m512 rstd = set(static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(n) + eps)));
  const __m512 fmean = set(static_cast<float>(mean));
  for_each_vector(n, [&](size_t i, __mmask16 m) {
    const __m512 y = _mm512_mul_ps(_mm512_mul_ps(_mm512_sub_ps(loadu_ps(x + i, m), fmean), rstd), loadu_ps(w + i, m));
    storeu_ps(x + i, m, _mm512_add_ps(y, loadu_ps(b + i, m)));
  });
}

namespace {

template <bool kBf16Out>
[[gnu::noinline]] void affine_rows_to(const FusedOperand& x, size_t x_stride, const FusedOperand& out,
                                      size_t out_stride, size_t rows, size_t n, const float* scale,
                                      const float* shift, const UnaryWithParam& act) {
  constexpr std::bool_constant<kBf16Out> same;
  const auto* in = static_cast<const std::byte*>(x.data);
  auto* o = static_cast<std::byte*>(out.data);
  with_activation<kBf16Out>(act, [&](auto f) {
    auto row = [&](auto in_bf16) {
      for (size_t r = 0; r < rows; ++r, in += x_stride, o += out_stride)
        for_each_vector(n, [&](size_t i, __mmask16 m) {
          const __m512 v = _mm512_fmadd_ps(load(in, in_bf16, i, m), loadu_ps(scale + i, m), loadu_ps(shift + i, m));
          store(o, same, i, m, f(v));
        });
    };
    if (x.bf16 == kBf16Out) row(same);
    else row(std::bool_constant<!kBf16Out>());
  });
}

}  // namespace

void affine_rows(const FusedOperand& x, size_t x_stride, const FusedOperand& out, size_t out_stride, size_t rows,
                 size_t n, const float* scale, const float* shift, const UnaryWithParam& act) {
  if (out.bf16) affine_rows_to<true>(x, x_stride, out, out_stride, rows, n, scale, shift, act);
  else affine_rows_to<false>(x, x_stride, out, out_stride, rows, n, scale, shift, act);
}

uint32_t arg_extreme(const float* x, size_t n, bool max, bool last) {
  // The extreme value first (masked-off tail lanes load as the identity),
  // then the first (or last) lane holding it: the NaNs when there are any.
  const __m512 identity = set(max ? -INFINITY : INFINITY);
  __m512 best = identity;
  __mmask16 nan = 0;
  for_each_vector(n, [&](size_t i, __mmask16 m) {
    const __m512 v = _mm512_mask_loadu_ps(identity, m, x + i);
    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    best = max ? _mm512_max_ps(best, v) : _mm512_min_ps(best, v);
  });
  const __m512 target = set(max ? _mm512_reduce_max_ps(best) : _mm512_reduce_min_ps(best));
  auto hits = [&](size_t i) {
    const __mmask16 m = i + 16 <= n ? static_cast<__mmask16>(0xffff) : tail_mask(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    return static_cast<uint32_t>(m & (nan ? _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q)
                                          : _mm512_cmp_ps_mask(v, target, _CMP_EQ_OQ)));
  };
  const size_t vectors = (n + 15) / 16;
  if (last) {
    for (size_t k = vectors; k-- > 0;)
      if (const uint32_t h = hits(k * 16)) return static_cast<uint32_t>(k * 16) + 31 - __builtin_clz(h);
  } else {
    for (size_t k = 0; k < vectors; ++k)
      if (const uint32_t h = hits(k * 16)) return static_cast<uint32_t>(k * 16) + __builtin_ctz(h);
  }
  return 0;  // (unreachable: the target is one of the values)
}

}  // namespace tessera::cpu::avx512
