// AVX2 activations on registers (internal; include only from files compiled
// with the AVX2 flags, named *_avx2.cc): the algorithms of
// avx512_activation.h on 8 lanes. Without vscalefps, exp scales by 2^n as
// two halves, so that n from -150 to 128 stays exact through denormals and
// overflow. with_activation(act, f) calls f with the activation as a
// functor on __m256, so that kernels apply it in registers before they store.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <limits>

#include "tessera/ops/activation.h"

namespace tessera::cpu::avx2 {

// GCC left exp_neg_ps an out-of-line call per vector inside the activation
// lambdas; every vector helper here is forced inline.
#ifndef TS_VINLINE
#define TS_VINLINE inline __attribute__((always_inline))
#endif

TS_VINLINE __m256 set(float v) { return _mm256_set1_ps(v); }
TS_VINLINE __m256 blend(__m256 a, __m256 b, __m256 mask) { return _mm256_blendv_ps(a, b, mask); }
TS_VINLINE __m256 lt(__m256 a, __m256 b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
TS_VINLINE __m256 abs_ps(__m256 x) { return _mm256_and_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff))); }

// p 2^n for integer-valued n in [-252, 254], one half of n at a time: 2^n
// itself overflows at n = 128, where p 2^n (p < 1) may not.
TS_VINLINE __m256 scale_pow2(__m256 p, __m256 n) {
  const __m256i half = _mm256_cvtps_epi32(_mm256_floor_ps(_mm256_mul_ps(n, set(0.5f))));
  const __m256i rest = _mm256_sub_epi32(_mm256_cvtps_epi32(n), half);
  auto bits = [](__m256i e) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23));
  };
  return _mm256_mul_ps(_mm256_mul_ps(p, bits(half)), bits(rest));
}

// e^(x - n ln 2) for integer-valued n = round(x log2 e): Cephes' expf
// polynomial on the reduced argument (ln 2 in two parts).
TS_VINLINE __m256 exp_reduced(__m256 x, __m256 n) {
  __m256 r = _mm256_fnmadd_ps(n, set(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, set(-2.12194440e-4f), r);
  __m256 p = set(1.9875691500E-4f);
  p = _mm256_fmadd_ps(p, r, set(1.3981999507E-3f));
  p = _mm256_fmadd_ps(p, r, set(8.3334519073E-3f));
  p = _mm256_fmadd_ps(p, r, set(4.1665795894E-2f));
  p = _mm256_fmadd_ps(p, r, set(1.6666665459E-1f));
  p = _mm256_fmadd_ps(p, r, set(5.0000001201E-1f));
  return _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, set(1.0f)));
}

// max/min return their second operand when either is NaN: x goes second.
TS_VINLINE __m256 exp_ps(__m256 x) {
  x = _mm256_min_ps(set(89.0f), _mm256_max_ps(set(-104.0f), x));
  const __m256 n =
      _mm256_round_ps(_mm256_mul_ps(x, set(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 y = scale_pow2(exp_reduced(x, n), n);
  return blend(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));  // NaN in, NaN out
}

// e^-x for sigmoid and silu, which need no denormal results: -x clamped to
// [-87.3, 88.3] (e^-x stays normal; beyond 88.3 it is FLT_MAX),
// n = round(-x log2 e) by the 1.5 * 2^23 trick, whose low mantissa bits are
// n itself, and 2^n added to the exponent in one integer add. The same
// polynomial as exp_ps; 20 operations against exp_ps's 33 (silu is on every
// conv of YOLO-style models).
TS_VINLINE __m256 exp_neg_ps(__m256 x) {
  const __m256 t0 = _mm256_sub_ps(_mm256_setzero_ps(), x);
  const __m256 big = _mm256_cmp_ps(t0, set(88.3f), _CMP_GT_OQ);
  const __m256 t = _mm256_min_ps(set(88.3f), _mm256_max_ps(set(-87.3f), t0));  // NaN stays NaN
  const __m256 magic = set(12582912.0f);
  const __m256 k = _mm256_fmadd_ps(t, set(1.44269504088896341f), magic);
  const __m256 n = _mm256_sub_ps(k, magic);
  const __m256 p = exp_reduced(t, n);
  const __m256i scale = _mm256_slli_epi32(_mm256_sub_epi32(_mm256_castps_si256(k), _mm256_castps_si256(magic)), 23);
  const __m256 e = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), scale));
  return blend(e, set(std::numeric_limits<float>::max()), big);
}

// 1 / (1 + e^-x): the reciprocal estimate and one Newton step (relative
// error ~1e-7; a division costs more than the rest of silu on Zen 3). Past
// -x = 88.3, e^-x is FLT_MAX and the estimate 0, so the step stays 0 and
// silu(-inf) = -inf * 0 = NaN, as x / (1 + e^-x).
TS_VINLINE __m256 sigmoid_ps(__m256 x) {
  const __m256 d = _mm256_add_ps(set(1.0f), exp_neg_ps(x));
  const __m256 r = _mm256_rcp_ps(d);
  return _mm256_fmadd_ps(r, _mm256_fnmadd_ps(d, r, set(1.0f)), r);
}
TS_VINLINE __m256 silu_ps(__m256 x) { return _mm256_mul_ps(x, sigmoid_ps(x)); }

TS_VINLINE __m256 tanh_ps(__m256 x) {
  const __m256 sign = _mm256_and_ps(x, set(-0.0f));
  const __m256 a = abs_ps(x);
  const __m256 big =
      _mm256_sub_ps(set(1.0f), _mm256_div_ps(set(2.0f), _mm256_add_ps(exp_ps(_mm256_add_ps(a, a)), set(1.0f))));
  const __m256 s = _mm256_mul_ps(x, x);
  __m256 p = set(-5.70498872745E-3f);
  p = _mm256_fmadd_ps(p, s, set(2.06390887954E-2f));
  p = _mm256_fmadd_ps(p, s, set(-5.37397155531E-2f));
  p = _mm256_fmadd_ps(p, s, set(1.33314422036E-1f));
  p = _mm256_fmadd_ps(p, s, set(-3.33332819422E-1f));
  const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, s), x, x);
  return blend(_mm256_or_ps(big, sign), small, lt(a, set(0.625f)));
}

TS_VINLINE __m256 erfc_ps(__m256 z) {  // z >= 0
  const __m256 t = _mm256_div_ps(set(1.0f), _mm256_fmadd_ps(set(0.5f), z, set(1.0f)));
  const float c[] = {0.17087277f,  -0.82215223f, 1.48851587f, -1.13520398f, 0.27886807f,
                     -0.18628806f, 0.09678418f,  0.37409196f, 1.00002368f,  -1.26551223f};
  __m256 p = set(c[0]);
  for (int i = 1; i < 10; ++i) p = _mm256_fmadd_ps(p, t, set(c[i]));
  return _mm256_mul_ps(t, exp_ps(_mm256_fnmadd_ps(z, z, p)));
}

TS_VINLINE __m256 gelu_ps(__m256 x) {
  const __m256 e = erfc_ps(_mm256_mul_ps(abs_ps(x), set(0.70710678118654752f)));
  const __m256 f = blend(_mm256_sub_ps(set(2.0f), e), e, lt(x, _mm256_setzero_ps()));
  return _mm256_mul_ps(_mm256_mul_ps(set(0.5f), x), f);
}

// erf and elu as in avx512_activation.h.
TS_VINLINE __m256 erf_ps(__m256 x) {
  const __m256 a = abs_ps(x), x2 = _mm256_mul_ps(x, x);
  const float c[] = {1.0f / 9360, -1.0f / 1320, 1.0f / 216, -1.0f / 42, 1.0f / 10, -1.0f / 3, 1.0f};
  __m256 p = set(c[0]);
  for (int i = 1; i < 7; ++i) p = _mm256_fmadd_ps(p, x2, set(c[i]));
  const __m256 small = _mm256_mul_ps(_mm256_mul_ps(x, set(1.12837916709551257f)), p);
  const __m256 big = _mm256_or_ps(_mm256_sub_ps(set(1.0f), erfc_ps(a)), _mm256_and_ps(x, set(-0.0f)));
  return blend(big, small, lt(a, set(0.5f)));
}

TS_VINLINE __m256 gelu_tanh_ps(__m256 x) {
  const __m256 inner = _mm256_mul_ps(_mm256_fmadd_ps(_mm256_mul_ps(_mm256_mul_ps(x, x), x), set(0.044715f), x),
                                     set(0.79788456080286536f));
  return _mm256_mul_ps(_mm256_mul_ps(set(0.5f), x), _mm256_add_ps(set(1.0f), tanh_ps(inner)));
}

TS_VINLINE __m256 elu_ps(__m256 x, __m256 alpha) {
  const __m256 zero = _mm256_setzero_ps();
  const __m256 e = _mm256_mul_ps(alpha, _mm256_sub_ps(exp_ps(_mm256_min_ps(x, zero)), set(1.0f)));
  return blend(x, e, lt(x, zero));
}

TS_VINLINE __m256 mish_ps(__m256 x) {
  const __m256 e = exp_ps(_mm256_min_ps(set(20.0f), x));
  const __m256 n = _mm256_mul_ps(e, _mm256_add_ps(e, set(2.0f)));
  return _mm256_mul_ps(x, _mm256_div_ps(n, _mm256_add_ps(n, set(2.0f))));
}

// relu and clamps with NaN and -0 kept, one instruction per bound, as in
// avx512_activation.h: vmaxps / vminps return their second operand (v) when
// either is NaN or both are zeros.
TS_VINLINE __m256 clamp_keep_nan(__m256 v, float lo, float hi) {
  return _mm256_min_ps(set(hi), _mm256_max_ps(set(lo), v));
}

// ln x: avx512_activation.h's log_ps; denormals are scaled by 2^25 first
// (no vgetmantps here).
TS_VINLINE __m256 log_ps(__m256 x) {
  const __m256 tiny = lt(x, set(std::numeric_limits<float>::min()));
  const __m256i bits = _mm256_castps_si256(blend(x, _mm256_mul_ps(x, set(33554432.0f)), tiny));
  __m256 e = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(bits, 23), _mm256_set1_epi32(126)));
  e = blend(e, _mm256_sub_ps(e, set(25.0f)), tiny);
  __m256 m = _mm256_castsi256_ps(
      _mm256_or_si256(_mm256_and_si256(bits, _mm256_set1_epi32(0x007fffff)), _mm256_set1_epi32(0x3f000000)));
  const __m256 low = lt(m, set(0.70710678118654752f));
  e = blend(e, _mm256_sub_ps(e, set(1.0f)), low);
  m = _mm256_sub_ps(blend(m, _mm256_add_ps(m, m), low), set(1.0f));
  const __m256 z = _mm256_mul_ps(m, m);
  const float c[] = {7.0376836292E-2f,  -1.1514610310E-1f, 1.1676998740E-1f,  -1.2420140846E-1f, 1.4249322787E-1f,
                     -1.6668057665E-1f, 2.0000714765E-1f,  -2.4999993993E-1f, 3.3333331174E-1f};
  __m256 p = set(c[0]);
  for (int i = 1; i < 9; ++i) p = _mm256_fmadd_ps(p, m, set(c[i]));
  __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, m), z);
  y = _mm256_fmadd_ps(e, set(-2.12194440e-4f), y);
  y = _mm256_fnmadd_ps(z, set(0.5f), y);
  __m256 r = _mm256_fmadd_ps(e, set(0.693359375f), _mm256_add_ps(m, y));
  const float inf = std::numeric_limits<float>::infinity();
  r = blend(r, set(-inf), _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_EQ_OQ));
  r = blend(r, set(inf), _mm256_cmp_ps(x, set(inf), _CMP_EQ_OQ));
  const __m256 nan = _mm256_or_ps(lt(x, _mm256_setzero_ps()), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  return blend(r, set(std::numeric_limits<float>::quiet_NaN()), nan);
}

// x^p for a constant p != 0: avx512_activation.h's pow_ps.
struct PowConsts {
  float p;
  bool integer, odd;
  explicit PowConsts(float e)
      : p(e), integer(std::nearbyint(e) == e), odd(integer && std::fabs(e) < 16777216.0f && std::fmod(e, 2.0f) != 0) {}
};
TS_VINLINE __m256 pow_ps(__m256 x, const PowConsts& k) {
  const __m256 r = exp_ps(_mm256_mul_ps(set(k.p), log_ps(abs_ps(x))));
  if (k.odd) return _mm256_or_ps(r, _mm256_and_ps(x, set(-0.0f)));
  if (k.integer) return r;
  const __m256 nan = _mm256_and_ps(lt(x, _mm256_setzero_ps()),
                                   _mm256_cmp_ps(x, set(-std::numeric_limits<float>::infinity()), _CMP_NEQ_OQ));
  return blend(r, set(std::numeric_limits<float>::quiet_NaN()), nan);
}

// avx512_activation.h's softplus_ps, celu_ps and sign_ps.
TS_VINLINE __m256 softplus_ps(__m256 x) {
  const __m256 zero = _mm256_setzero_ps();
  const __m256 u = exp_ps(_mm256_sub_ps(zero, abs_ps(x)));
  const __m256 w = _mm256_add_ps(set(1.0f), u), d = _mm256_sub_ps(w, set(1.0f));
  const __m256 l = blend(u, _mm256_div_ps(_mm256_mul_ps(log_ps(w), u), d), _mm256_cmp_ps(d, zero, _CMP_NEQ_UQ));
  return _mm256_add_ps(_mm256_max_ps(zero, x), l);
}
TS_VINLINE __m256 celu_ps(__m256 x, __m256 alpha, __m256 inv_alpha) {
  const __m256 zero = _mm256_setzero_ps();
  const __m256 e =
      _mm256_mul_ps(alpha, _mm256_sub_ps(exp_ps(_mm256_mul_ps(_mm256_min_ps(x, zero), inv_alpha)), set(1.0f)));
  return blend(x, e, lt(x, zero));
}
TS_VINLINE __m256 sign_ps(__m256 x) {
  const __m256 zero = _mm256_setzero_ps();
  const __m256 r = _mm256_sub_ps(_mm256_and_ps(_mm256_cmp_ps(x, zero, _CMP_GT_OQ), set(1.0f)),
                                 _mm256_and_ps(lt(x, zero), set(1.0f)));
  return blend(r, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}
// The nearest bfloat16 (ties to even) as a float; NaN kept quiet.
TS_VINLINE __m256 round_bf16_ps(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
  const __m256 rounded = _mm256_castsi256_ps(_mm256_and_si256(r, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
  const __m256 quiet = _mm256_castsi256_ps(_mm256_and_si256(_mm256_or_si256(u, _mm256_set1_epi32(0x00400000)),
                                                            _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
  return blend(rounded, quiet, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

// Calls f with the vector functor of the activation alone (one dispatch per
// call, not per vector). with_hot_activation takes the activations kernels
// meet most after a conv (and says whether it took `act`);
// with_other_activation the rest.
template <class F>
bool with_hot_activation(const UnaryWithParam& act, F&& f) {
  const __m256 zero = _mm256_setzero_ps();
  auto take = [&](auto g) { return f(g), true; };
  switch (act.op) {
    case UnaryOpType::IDENTITY:
      return take([](__m256 v) { return v; });
    case UnaryOpType::RELU:
      return take([=](__m256 v) { return _mm256_max_ps(zero, v); });
    case UnaryOpType::RELU6:
      return take([](__m256 v) { return clamp_keep_nan(v, 0.0f, 6.0f); });
    case UnaryOpType::LEAKY_RELU: {
      const __m256 slope = set(act.param);
      return take([=](__m256 v) { return blend(v, _mm256_mul_ps(v, slope), lt(v, zero)); });
    }
    case UnaryOpType::SILU:
      return take([](__m256 v) { return silu_ps(v); });
    case UnaryOpType::CLIP: {
      const __m256 lo = set(act.param), hi = set(act.param2);
      return take([=](__m256 v) { return _mm256_min_ps(hi, _mm256_max_ps(lo, v)); });
    }
    case UnaryOpType::HARDSWISH:
      return take([=](__m256 v) {
        const __m256 t = _mm256_min_ps(set(6.0f), _mm256_max_ps(_mm256_add_ps(v, set(3.0f)), zero));
        return _mm256_div_ps(_mm256_mul_ps(v, t), set(6.0f));
      });
    case UnaryOpType::HARDSIGMOID:
      return take([=](__m256 v) {
        const __m256 t = _mm256_fmadd_ps(v, set(1.0f / 6.0f), set(0.5f));
        return _mm256_min_ps(set(1.0f), _mm256_max_ps(zero, t));  // NaN stays NaN (MAXPS returns its second operand)
      });
    default:
      return false;
  }
}

template <class F>
void with_other_activation(const UnaryWithParam& act, F&& f) {
  switch (act.op) {
    case UnaryOpType::SIGMOID:
      return f([](__m256 v) { return sigmoid_ps(v); });
    case UnaryOpType::GELU:
      return f([](__m256 v) { return gelu_ps(v); });
    case UnaryOpType::TANH:
      return f([](__m256 v) { return tanh_ps(v); });
    case UnaryOpType::MISH:
      return f([](__m256 v) { return mish_ps(v); });
    case UnaryOpType::EXP:
      return f([](__m256 v) { return exp_ps(v); });
    case UnaryOpType::SQRT:
      return f([](__m256 v) { return _mm256_sqrt_ps(v); });
    case UnaryOpType::ELU: {
      const __m256 alpha = set(act.param);
      return f([=](__m256 v) { return elu_ps(v, alpha); });
    }
    case UnaryOpType::ERF:
      return f([](__m256 v) { return erf_ps(v); });
    case UnaryOpType::NEG:
      return f([](__m256 v) { return _mm256_xor_ps(v, set(-0.0f)); });
    case UnaryOpType::ABS:
      return f([](__m256 v) { return abs_ps(v); });
    case UnaryOpType::RECIPROCAL:
      return f([](__m256 v) { return _mm256_div_ps(set(1.0f), v); });
    case UnaryOpType::GELU_TANH:
      return f([](__m256 v) { return gelu_tanh_ps(v); });
    case UnaryOpType::LOG:
      return f([](__m256 v) { return log_ps(v); });
    case UnaryOpType::POW: {
      if (act.param == 0.0f) return f([](__m256) { return set(1.0f); });
      const PowConsts k(act.param);
      return f([=](__m256 v) { return pow_ps(v, k); });
    }
    case UnaryOpType::SOFTPLUS:
      return f([](__m256 v) { return softplus_ps(v); });
    case UnaryOpType::SOFTSIGN:
      return f([](__m256 v) { return _mm256_div_ps(v, _mm256_add_ps(set(1.0f), abs_ps(v))); });
    case UnaryOpType::CELU: {
      const __m256 alpha = set(act.param), inv = set(1.0f / act.param);
      return f([=](__m256 v) { return celu_ps(v, alpha, inv); });
    }
    case UnaryOpType::THRESHOLDED_RELU: {
      const __m256 t = set(act.param);  // v > t or NaN: v
      return f([=](__m256 v) { return _mm256_and_ps(_mm256_cmp_ps(v, t, _CMP_NLE_UQ), v); });
    }
    case UnaryOpType::FLOOR:
      return f([](__m256 v) { return _mm256_round_ps(v, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); });
    case UnaryOpType::CEIL:
      return f([](__m256 v) { return _mm256_round_ps(v, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC); });
    case UnaryOpType::ROUND:
      return f([](__m256 v) { return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); });
    case UnaryOpType::SIGN:
      return f([](__m256 v) { return sign_ps(v); });
    case UnaryOpType::TO_FLOAT16:  // (F16C: nearest even, NaN and float16 denormals kept)
      return f([](__m256 v) { return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT)); });
    case UnaryOpType::TO_BFLOAT16:
      return f([](__m256 v) { return round_bf16_ps(v); });
    default:  // (with_hot_activation's)
      return;
  }
}

// apply_activation(act, v): act (its affine too) on one vector, dispatched
// per call: one out-of-line function (float_math_avx2.cc) for every activation.
__m256 apply_activation(const UnaryWithParam& act, __m256 v);

struct AnyActivation {
  const UnaryWithParam* act;
  __m256 operator()(__m256 v) const { return apply_activation(*act, v); }
};

// Calls f with the vector functor of `act`; an affine after the activation
// is one FMA in the same functor. kCompact (as avx512_activation.h's): only
// the hot activations without an affine get a functor of their own, every
// other runs through AnyActivation, one shared instantiation of f.
template <bool kCompact = false, class F>
void with_activation(const UnaryWithParam& act, F&& f) {
  if constexpr (kCompact) {
    if (act.has_affine() || !with_hot_activation(act, f)) f(AnyActivation{&act});
  } else {
    auto plain = [&](auto&& g) {
      if (!with_hot_activation(act, g)) with_other_activation(act, g);
    };
    if (!act.has_affine()) return plain(f);
    const __m256 scale = set(act.scale), shift = set(act.shift);
    plain([&](auto g) { f([=](__m256 v) { return _mm256_fmadd_ps(g(v), scale, shift); }); });
  }
}

}  // namespace tessera::cpu::avx2
