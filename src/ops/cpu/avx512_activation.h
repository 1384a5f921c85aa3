// AVX-512 activations on registers (internal; include only from files
// compiled with the AVX-512 flags). exp follows Cephes' expf
// (range reduction by ln 2, degree-6 polynomial, scaling with vscalefps so
// overflow and underflow saturate to inf and 0); tanh uses Cephes' tanhf
// polynomial below 0.625 and 1 - 2/(e^2|x| + 1) above; gelu uses the erfc
// approximation of Numerical Recipes (relative error < 1.2e-7), so that
// 0.5 x erfc(|x|/sqrt 2) keeps its relative accuracy for negative x.
//
// Activations whose results are rounded to bfloat16 take `kBf16Out = true`:
// the same formulas on exp2_bf16_ps, a cheaper exp accurate to bfloat16 (see
// there). The template parameter picks the exp at compile time.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <limits>

#include "avx512_util.h"
#include "tessera/ops/activation.h"

namespace tessera::cpu::avx512 {

inline __m512 set(float v) { return _mm512_set1_ps(v); }

// max/min return their second operand when either is NaN: put x second to
// keep NaN.
inline __m512 exp_ps(__m512 x) {
  x = _mm512_min_ps(set(89.0f), _mm512_max_ps(set(-104.0f), x));
  const __m512 n =
      _mm512_roundscale_ps(_mm512_mul_ps(x, set(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, set(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, set(-2.12194440e-4f), r);
  __m512 p = set(1.9875691500E-4f);
  p = _mm512_fmadd_ps(p, r, set(1.3981999507E-3f));
  p = _mm512_fmadd_ps(p, r, set(8.3334519073E-3f));
  p = _mm512_fmadd_ps(p, r, set(4.1665795894E-2f));
  p = _mm512_fmadd_ps(p, r, set(1.6666665459E-1f));
  p = _mm512_fmadd_ps(p, r, set(5.0000001201E-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, set(1.0f)));
  return _mm512_scalef_ps(p, n);
}

// 2^t for results rounded to bfloat16: relative error under 8e-5, 24 times
// under bfloat16's half ulp (2^-9), so the rounded result is within one
// bfloat16 ulp of the correctly rounded one. A degree-3 polynomial of 2^f on
// [0, 1), f = t - floor(t) from vreduceps, times 2^floor(t) by vscalefps,
// which floors t itself (a separate vroundscaleps for n cost two more
// micro-ops per vector: a bfloat16 silu on the Xeon VM ran 11.5-11.9 against
// 10.6-10.9 cycles per 16 values, one core, data in L1, five alternated
// runs). No clamp: at +-inf or past float32's range f is 0 and vscalefps
// saturates to inf or 0, and NaN stays NaN. The log2(e) scaling of an exp
// argument is one multiply the caller folds into its own (silu: x *
// -log2(e)); its rounding adds at most 128 * 2^-24 to t. On the Zen 5 CPU
// here a bfloat16 silu on this exp ran at 1.8 ns per 16 values (one core,
// data in L1) against 3.4 on exp_ps.
inline constexpr float kLog2e = 1.44269504088896341f;
inline __m512 exp2_bf16_ps(__m512 t) {
  const __m512 f = _mm512_reduce_ps(t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);  // t - floor(t)
  // 2^f on [0, 1) (Lawson-weighted least squares on Chebyshev nodes).
  __m512 p = _mm512_fmadd_ps(set(0.078024514f), f, set(0.22606717f));
  p = _mm512_fmadd_ps(p, f, set(0.69583356f));
  p = _mm512_fmadd_ps(p, f, set(0.99992520f));
  return _mm512_scalef_ps(p, t);  // p * 2^floor(t)
}

// e^(scale x): exact to float32 (exp_ps) or to bfloat16 (exp2_bf16_ps).
template <bool kBf16Out>
inline __m512 exp_scaled(__m512 x, float scale) {
  if constexpr (kBf16Out)
    return exp2_bf16_ps(_mm512_mul_ps(x, set(scale * kLog2e)));
  else
    return exp_ps(scale == 1.0f ? x : _mm512_mul_ps(x, set(scale)));
}

// a / b. For results rounded to bfloat16, a * vrcp14ps(b): its relative
// error (2^-14) and exp2_bf16_ps's (8e-5) stay far under bfloat16's half ulp
// (2^-9). vdivps issues once per 10 cycles or so: a bfloat16 silu on it took
// ~12 cycles per 16 values on one core of the Xeon VM, bound by the divider.
// The callers' b is at least 1: vrcp14ps returns 0 at b = inf, as a / b
// does for finite a (NaN for an infinite a, both ways), and keeps denormal
// results (FTZ is off).
template <bool kBf16Out>
inline __m512 divide(__m512 a, __m512 b) {
  if constexpr (kBf16Out)
    return _mm512_mul_ps(a, _mm512_rcp14_ps(b));
  else
    return _mm512_div_ps(a, b);
}

template <bool kBf16Out = false>
inline __m512 exp_act_ps(__m512 x) {
  return exp_scaled<kBf16Out>(x, 1.0f);
}
template <bool kBf16Out = false>
inline __m512 sigmoid_ps(__m512 x) {
  return divide<kBf16Out>(set(1.0f), _mm512_add_ps(set(1.0f), exp_scaled<kBf16Out>(x, -1.0f)));
}
template <bool kBf16Out = false>
inline __m512 silu_ps(__m512 x) {
  return divide<kBf16Out>(x, _mm512_add_ps(set(1.0f), exp_scaled<kBf16Out>(x, -1.0f)));
}

template <bool kBf16Out = false>
inline __m512 tanh_ps(__m512 x) {
  const __m512 sign = _mm512_and_ps(x, set(-0.0f));
  const __m512 a = _mm512_abs_ps(x);
  const __m512 big =
      _mm512_sub_ps(set(1.0f), divide<kBf16Out>(set(2.0f), _mm512_add_ps(exp_scaled<kBf16Out>(a, 2.0f), set(1.0f))));
  const __m512 s = _mm512_mul_ps(x, x);
  __m512 p = set(-5.70498872745E-3f);
  p = _mm512_fmadd_ps(p, s, set(2.06390887954E-2f));
  p = _mm512_fmadd_ps(p, s, set(-5.37397155531E-2f));
  p = _mm512_fmadd_ps(p, s, set(1.33314422036E-1f));
  p = _mm512_fmadd_ps(p, s, set(-3.33332819422E-1f));
  const __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, s), x, x);
  const __mmask16 is_small = _mm512_cmp_ps_mask(a, set(0.625f), _CMP_LT_OQ);
  return _mm512_mask_mov_ps(_mm512_or_ps(big, sign), is_small, small);
}

// erfc(z) for z >= 0.
template <bool kBf16Out = false>
inline __m512 erfc_ps(__m512 z) {
  const __m512 t = _mm512_div_ps(set(1.0f), _mm512_fmadd_ps(set(0.5f), z, set(1.0f)));
  const float c[] = {0.17087277f,  -0.82215223f, 1.48851587f, -1.13520398f, 0.27886807f,
                     -0.18628806f, 0.09678418f,  0.37409196f, 1.00002368f,  -1.26551223f};
  __m512 p = set(c[0]);
  for (int i = 1; i < 10; ++i) p = _mm512_fmadd_ps(p, t, set(c[i]));
  return _mm512_mul_ps(t, exp_scaled<kBf16Out>(_mm512_fnmadd_ps(z, z, p), 1.0f));
}

template <bool kBf16Out = false>
inline __m512 gelu_ps(__m512 x) {
  const __m512 e = erfc_ps<kBf16Out>(_mm512_mul_ps(_mm512_abs_ps(x), set(0.70710678118654752f)));
  const __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
  const __m512 f = _mm512_mask_mov_ps(_mm512_sub_ps(set(2.0f), e), neg, e);  // 1 + erf(x / sqrt 2)
  return _mm512_mul_ps(_mm512_mul_ps(set(0.5f), x), f);
}

// erf: the odd Taylor series below |x| = 0.5 (1 - erfc would lose erf's
// relative precision near 0; the terms past x^13 are under 2e-8 there),
// sign(x) (1 - erfc(|x|)) above. NaN stays NaN, +-Inf gives +-1.
template <bool kBf16Out = false>
inline __m512 erf_ps(__m512 x) {
  const __m512 a = _mm512_abs_ps(x), x2 = _mm512_mul_ps(x, x);
  const float c[] = {1.0f / 9360, -1.0f / 1320, 1.0f / 216, -1.0f / 42, 1.0f / 10, -1.0f / 3, 1.0f};
  __m512 p = set(c[0]);
  for (int i = 1; i < 7; ++i) p = _mm512_fmadd_ps(p, x2, set(c[i]));
  const __m512 small = _mm512_mul_ps(_mm512_mul_ps(x, set(1.12837916709551257f)), p);
  const __m512 big = _mm512_or_ps(_mm512_sub_ps(set(1.0f), erfc_ps<kBf16Out>(a)), _mm512_and_ps(x, set(-0.0f)));
  return _mm512_mask_mov_ps(big, _mm512_cmp_ps_mask(a, set(0.5f), _CMP_LT_OQ), small);
}

// gelu's tanh form: x / 2 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))).
template <bool kBf16Out = false>
inline __m512 gelu_tanh_ps(__m512 x) {
  const __m512 inner = _mm512_mul_ps(_mm512_fmadd_ps(_mm512_mul_ps(_mm512_mul_ps(x, x), x), set(0.044715f), x),
                                     set(0.79788456080286536f));
  return _mm512_mul_ps(_mm512_mul_ps(set(0.5f), x), _mm512_add_ps(set(1.0f), tanh_ps<kBf16Out>(inner)));
}

// elu: x < 0 ? alpha (e^x - 1) : x; NaN and -0 pass through. The exp is
// float32-accurate even for bfloat16 results: e^x - 1 near 0 keeps only
// the exp's absolute error.
inline __m512 elu_ps(__m512 x, __m512 alpha) {
  const __m512 e =
      _mm512_mul_ps(alpha, _mm512_sub_ps(exp_scaled<false>(_mm512_min_ps(x, _mm512_setzero_ps()), 1.0f), set(1.0f)));
  return _mm512_mask_mov_ps(x, _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ), e);
}

template <bool kBf16Out = false>
inline __m512 mish_ps(__m512 x) {
  const __m512 e = exp_scaled<kBf16Out>(_mm512_min_ps(set(20.0f), x), 1.0f);
  const __m512 n = _mm512_mul_ps(e, _mm512_add_ps(e, set(2.0f)));  // (1 + e)^2 - 1
  return _mm512_mul_ps(x, divide<kBf16Out>(n, _mm512_add_ps(n, set(2.0f))));
}

// ln x: Cephes' logf (x = m 2^e with m in [sqrt(1/2), sqrt 2), a degree-8
// polynomial in m - 1, ln 2 in two parts); vgetmantps / vgetexpps split
// denormals too. 0 gives -inf, negatives NaN, +inf +inf, NaN NaN.
inline __m512 log_ps(__m512 x) {
  __m512 m = _mm512_getmant_ps(x, _MM_MANT_NORM_p5_1, _MM_MANT_SIGN_zero);  // [0.5, 1)
  __m512 e = _mm512_add_ps(_mm512_getexp_ps(x), set(1.0f));
  const __mmask16 low = _mm512_cmp_ps_mask(m, set(0.70710678118654752f), _CMP_LT_OQ);
  e = _mm512_mask_sub_ps(e, low, e, set(1.0f));
  m = _mm512_sub_ps(_mm512_mask_add_ps(m, low, m, m), set(1.0f));
  const __m512 z = _mm512_mul_ps(m, m);
  const float c[] = {7.0376836292E-2f,  -1.1514610310E-1f, 1.1676998740E-1f,  -1.2420140846E-1f, 1.4249322787E-1f,
                     -1.6668057665E-1f, 2.0000714765E-1f,  -2.4999993993E-1f, 3.3333331174E-1f};
  __m512 p = set(c[0]);
  for (int i = 1; i < 9; ++i) p = _mm512_fmadd_ps(p, m, set(c[i]));
  __m512 y = _mm512_mul_ps(_mm512_mul_ps(p, m), z);
  y = _mm512_fmadd_ps(e, set(-2.12194440e-4f), y);
  y = _mm512_fnmadd_ps(z, set(0.5f), y);
  __m512 r = _mm512_fmadd_ps(e, set(0.693359375f), _mm512_add_ps(m, y));
  const float inf = std::numeric_limits<float>::infinity();
  r = _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_EQ_OQ), set(-inf));
  r = _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(x, set(inf), _CMP_EQ_OQ), set(inf));
  return _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ),
                            set(std::numeric_limits<float>::quiet_NaN()));
}

// x^p for a constant p != 0: e^(p ln|x|), with C's pow at the edges: a
// finite negative x gives NaN unless p is an integer, and x^p takes x's
// sign (-0 and -inf included) for odd integers p. ln|x| = -inf at 0 and
// +inf at inf, so e^(p ln|x|) is already 0 or inf there.
struct PowConsts {
  float p;
  bool integer, odd;
  explicit PowConsts(float e)
      : p(e), integer(std::nearbyint(e) == e), odd(integer && std::fabs(e) < 16777216.0f && std::fmod(e, 2.0f) != 0) {}
};
inline __m512 pow_ps(__m512 x, const PowConsts& k) {
  const __m512 r = exp_ps(_mm512_mul_ps(set(k.p), log_ps(_mm512_abs_ps(x))));
  if (k.odd) return _mm512_or_ps(r, _mm512_and_ps(x, set(-0.0f)));
  if (k.integer) return r;
  const __mmask16 nan = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ) &
                        _mm512_cmp_ps_mask(x, set(-std::numeric_limits<float>::infinity()), _CMP_NEQ_OQ);
  return _mm512_mask_mov_ps(r, nan, set(std::numeric_limits<float>::quiet_NaN()));
}

// ln(1 + e^x) = max(x, 0) + log1p(e^-|x|), log1p(u) = u ln(w) / (w - 1)
// with w = 1 + u (exact to float32 where w rounds; u itself where w = 1).
// NaN stays NaN (x goes second in vmaxps), +inf gives +inf, -inf 0.
inline __m512 softplus_ps(__m512 x) {
  const __m512 u = exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(x)));
  const __m512 w = _mm512_add_ps(set(1.0f), u), d = _mm512_sub_ps(w, set(1.0f));
  const __m512 l =
      _mm512_mask_div_ps(u, _mm512_cmp_ps_mask(d, _mm512_setzero_ps(), _CMP_NEQ_UQ), _mm512_mul_ps(log_ps(w), u), d);
  return _mm512_add_ps(_mm512_max_ps(_mm512_setzero_ps(), x), l);
}

// celu: x < 0 ? alpha (e^(x / alpha) - 1) : x; NaN and -0 pass through.
inline __m512 celu_ps(__m512 x, __m512 alpha, __m512 inv_alpha) {
  const __m512 neg = _mm512_mul_ps(_mm512_min_ps(x, _mm512_setzero_ps()), inv_alpha);
  const __m512 e = _mm512_mul_ps(alpha, _mm512_sub_ps(exp_ps(neg), set(1.0f)));
  return _mm512_mask_mov_ps(x, _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ), e);
}

// -1, 0 or 1; NaN stays NaN.
inline __m512 sign_ps(__m512 x) {
  __m512 r = _mm512_mask_mov_ps(_mm512_setzero_ps(), _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GT_OQ), set(1.0f));
  r = _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ), set(-1.0f));
  return _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

// The nearest bfloat16 (ties to even) as a float; NaN kept quiet, float32
// denormals rounded as numbers (float_to_bfloat16's bits).
inline __m512 round_bf16_ps(__m512 x) {
  const __m512i u = _mm512_castps_si512(x), high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  r = _mm512_mask_or_epi32(r, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), u, _mm512_set1_epi32(0x00400000));
  return _mm512_castsi512_ps(_mm512_and_si512(r, high));
}

// v < lo ? lo : v > hi ? hi : v, and relu (v < 0 ? 0 : v), with NaN and -0
// kept: vmaxps / vminps return their second operand when either is NaN or
// both are zeros, so v goes second. One instruction per bound, where a
// compare and a masked move took two: in the bfloat16 depthwise kernel,
// compute-bound on one core, relu6 that way cost 7-13% of its time.
inline __m512 relu_keep_nan(__m512 v) { return _mm512_max_ps(_mm512_setzero_ps(), v); }
inline __m512 clamp_keep_nan(__m512 v, float lo, float hi) { return _mm512_min_ps(set(hi), _mm512_max_ps(set(lo), v)); }

// Whether a conv tile applies `a` on its accumulators (identity, relu and
// relu6 without an affine), not through FloatMath over a buffer; and that
// activation, NaN kept as FloatMath keeps it.
inline bool clamps_in_registers(const UnaryWithParam& a) {
  return !a.has_affine() && (a.op == UnaryOpType::IDENTITY || a.op == UnaryOpType::RELU || a.op == UnaryOpType::RELU6);
}
inline __m512 clamp_in_registers(UnaryOpType op, __m512 v) {
  if (op == UnaryOpType::RELU6) return clamp_keep_nan(v, 0.0f, 6.0f);
  return op == UnaryOpType::RELU ? relu_keep_nan(v) : v;
}

// Calls f with the vector functor of the activation alone (one dispatch per
// call, not per vector). kBf16Out: the results are rounded to bfloat16.
// with_hot_activation takes the activations kernels meet most after a conv
// (and says whether it took `act`); with_other_activation the rest.
template <bool kBf16Out, class F>
bool with_hot_activation(const UnaryWithParam& act, F&& f) {
  const __m512 zero = _mm512_setzero_ps();
  auto take = [&](auto g) { return f(g), true; };
  switch (act.op) {
    case UnaryOpType::IDENTITY:
      return take([](__m512 v) { return v; });
    case UnaryOpType::RELU:
      return take([](__m512 v) { return relu_keep_nan(v); });
    case UnaryOpType::RELU6:
      return take([](__m512 v) { return clamp_keep_nan(v, 0.0f, 6.0f); });
    case UnaryOpType::LEAKY_RELU: {
      const __m512 slope = set(act.param);
      return take([=](__m512 v) { return _mm512_mask_mul_ps(v, _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), v, slope); });
    }
    // Lambdas, not function pointers: GCC does not always inline a call
    // through a pointer inside the kernels' loops (silu: on every conv of
    // YOLO-style models).
    case UnaryOpType::SILU:
      return take([](__m512 v) { return silu_ps<kBf16Out>(v); });
    case UnaryOpType::CLIP: {
      const __m512 lo = set(act.param), hi = set(act.param2);
      return take([=](__m512 v) { return _mm512_min_ps(hi, _mm512_max_ps(lo, v)); });
    }
    case UnaryOpType::HARDSWISH:
      return take([=](__m512 v) {
        const __m512 t = _mm512_min_ps(set(6.0f), _mm512_max_ps(_mm512_add_ps(v, set(3.0f)), zero));
        return _mm512_div_ps(_mm512_mul_ps(v, t), set(6.0f));
      });
    case UnaryOpType::HARDSIGMOID:
      return take([=](__m512 v) {
        const __m512 t = _mm512_fmadd_ps(v, set(1.0f / 6.0f), set(0.5f));
        return _mm512_min_ps(set(1.0f), _mm512_max_ps(zero, t));  // NaN stays NaN (MAXPS returns its second operand)
      });
    default:
      return false;
  }
}

template <bool kBf16Out, class F>
void with_other_activation(const UnaryWithParam& act, F&& f) {
  switch (act.op) {
    case UnaryOpType::SIGMOID:
      return f([](__m512 v) { return sigmoid_ps<kBf16Out>(v); });
    case UnaryOpType::GELU:
      return f([](__m512 v) { return gelu_ps<kBf16Out>(v); });
    case UnaryOpType::TANH:
      return f([](__m512 v) { return tanh_ps<kBf16Out>(v); });
    case UnaryOpType::MISH:
      return f([](__m512 v) { return mish_ps<kBf16Out>(v); });
    case UnaryOpType::EXP:
      return f([](__m512 v) { return exp_scaled<kBf16Out>(v, 1.0f); });
    case UnaryOpType::SQRT:
      return f([](__m512 v) { return _mm512_sqrt_ps(v); });
    case UnaryOpType::ELU: {
      const __m512 alpha = set(act.param);
      return f([=](__m512 v) { return elu_ps(v, alpha); });
    }
    case UnaryOpType::ERF:
      return f([](__m512 v) { return erf_ps<kBf16Out>(v); });
    case UnaryOpType::NEG:
      return f([](__m512 v) { return _mm512_xor_ps(v, set(-0.0f)); });
    case UnaryOpType::ABS:
      return f([](__m512 v) { return _mm512_abs_ps(v); });
    case UnaryOpType::RECIPROCAL:
      return f([](__m512 v) { return _mm512_div_ps(set(1.0f), v); });
    case UnaryOpType::GELU_TANH:
      return f([](__m512 v) { return gelu_tanh_ps<kBf16Out>(v); });
    case UnaryOpType::LOG:
      return f([](__m512 v) { return log_ps(v); });
    case UnaryOpType::POW: {
      if (act.param == 0.0f) return f([](__m512) { return set(1.0f); });
      const PowConsts k(act.param);
      return f([=](__m512 v) { return pow_ps(v, k); });
    }
    case UnaryOpType::SOFTPLUS:
      return f([](__m512 v) { return softplus_ps(v); });
    case UnaryOpType::SOFTSIGN:
      return f([](__m512 v) { return _mm512_div_ps(v, _mm512_add_ps(set(1.0f), _mm512_abs_ps(v))); });
    case UnaryOpType::CELU: {
      const __m512 alpha = set(act.param), inv = set(1.0f / act.param);
      return f([=](__m512 v) { return celu_ps(v, alpha, inv); });
    }
    case UnaryOpType::THRESHOLDED_RELU: {
      const __m512 t = set(act.param);  // v > t or NaN: v
      return f([=](__m512 v) { return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, t, _CMP_NLE_UQ), v); });
    }
    case UnaryOpType::FLOOR:
      return f([](__m512 v) { return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); });
    case UnaryOpType::CEIL:
      return f([](__m512 v) { return _mm512_roundscale_ps(v, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC); });
    case UnaryOpType::ROUND:
      return f([](__m512 v) { return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); });
    case UnaryOpType::SIGN:
      return f([](__m512 v) { return sign_ps(v); });
    case UnaryOpType::TO_FLOAT16:  // (vcvtps2ph rounds to nearest even, keeps NaN and float16 denormals)
      return f(
          [](__m512 v) { return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)); });
    case UnaryOpType::TO_BFLOAT16:
      return f([](__m512 v) { return round_bf16_ps(v); });
    default:  // (with_hot_activation's)
      return;
  }
}

template <bool kBf16Out, class F>
void with_any_activation(const UnaryWithParam& act, F&& f) {
  if (!with_hot_activation<kBf16Out>(act, f)) with_other_activation<kBf16Out>(act, f);
}

// apply_activation(act, v): act (its affine too) on one vector, dispatched
// per call: one out-of-line function for every activation.
template <bool kBf16Out>
[[gnu::noinline]] __m512 apply_activation(const UnaryWithParam& act, __m512 v);

template <bool kBf16Out>
struct AnyActivation {
  const UnaryWithParam* act;
  __m512 operator()(__m512 v) const { return apply_activation<kBf16Out>(*act, v); }
};

// kCompact: only the hot activations (without an affine) get a functor of
// their own; every other runs through AnyActivation, one shared
// instantiation of f with a call per vector. For kernels with many variants
// of f: the depthwise files took minutes each to compile (up to 15 under the
// sanitizers) with a functor per activation. The element-wise pass keeps a
// functor each: changes to this dispatch's shape there made GCC inline its
// bfloat16 add + relu loop worse (1.5x slower).
template <bool kBf16Out = false, bool kCompact = false, class F>
void with_plain_activation(const UnaryWithParam& act, F&& f) {
  if constexpr (kCompact) {
    if (!with_hot_activation<kBf16Out>(act, f)) f(AnyActivation<kBf16Out>{&act});
  } else {
    with_any_activation<kBf16Out>(act, f);
  }
}

// The same with the affine after the activation: one FMA in the same functor.
template <bool kBf16Out = false, bool kCompact = false, class F>
void with_activation(const UnaryWithParam& act, F&& f) {
  if (!act.has_affine()) return with_plain_activation<kBf16Out, kCompact>(act, f);
  if constexpr (kCompact) {
    f(AnyActivation<kBf16Out>{&act});
  } else {
    const __m512 scale = set(act.scale), shift = set(act.shift);
    with_any_activation<kBf16Out>(act,
                                  [&](auto g) { f([=](__m512 v) { return _mm512_fmadd_ps(g(v), scale, shift); }); });
  }
}

template <bool kBf16Out>
__m512 apply_activation(const UnaryWithParam& act, __m512 v) {
  __m512 r = v;
  with_activation<kBf16Out>(act, [&](auto f) { r = f(v); });
  return r;
}

inline __m512 load(const void* p, bool bf16, size_t i, __mmask16 m) {
  return bf16 ? load_bf16(static_cast<const uint16_t*>(p) + i, m) : loadu_ps(static_cast<const float*>(p) + i, m);
}
inline void store(void* p, bool bf16, size_t i, __mmask16 m, __m512 v) {
  if (bf16)
    storeu_epi16(static_cast<uint16_t*>(p) + i, m, to_bf16(v));
  else
    storeu_ps(static_cast<float*>(p) + i, m, v);
}

}  // namespace tessera::cpu::avx512
