#include <immintrin.h>

#include "avx512_util.h"
#include "pool_kernels.h"

namespace tessera::cpu::avx512 {

namespace {

// max(v, m) keeps m on ties and when m is NaN; then a NaN v replaces it.
inline __m512 nan_max(__m512 m, __m512 v) {
  return _mm512_mask_mov_ps(_mm512_max_ps(v, m), _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), v);
}

// acc[i] = op(acc[i], x[i]) over float32 or widened bfloat16 values.
template <class Op>
void accumulate_f32(float* acc, const void* x, size_t n, Op op) {
  const float* p = static_cast<const float*>(x);
  for_each_vector(n, [&](size_t i, __mmask16 k) { storeu_ps(acc + i, k, op(loadu_ps(acc + i, k), loadu_ps(p + i, k))); });
}
template <class Op>
void accumulate_bf16(float* acc, const void* x, size_t n, Op op) {
  const uint16_t* p = static_cast<const uint16_t*>(x);
  for_each_vector(n, [&](size_t i, __mmask16 k) { storeu_ps(acc + i, k, op(loadu_ps(acc + i, k), load_bf16(p + i, k))); });
}
inline __m512 add(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
}  // namespace

void max_accumulate_f32(float* acc, const void* x, size_t n) { accumulate_f32(acc, x, n, nan_max); }
void max_accumulate_bf16(float* acc, const void* x, size_t n) { accumulate_bf16(acc, x, n, nan_max); }
void sum_accumulate_f32(float* acc, const void* x, size_t n) { accumulate_f32(acc, x, n, add); }
void sum_accumulate_bf16(float* acc, const void* x, size_t n) { accumulate_bf16(acc, x, n, add); }

}  // namespace tessera::cpu::avx512
