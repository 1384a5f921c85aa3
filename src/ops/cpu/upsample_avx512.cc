// The bilinear row kernel (upsample_kernels.h) in 16-lane vectors, the last
// one masked; bfloat16 widened as read and rounded as stored (avx512_util.h).
#include <immintrin.h>

#include "avx512_activation.h"
#include "upsample_kernels.h"

namespace tessera::cpu::avx512 {

namespace {

template <bool kBf16>
void bilinear_rows_t(const BilinearRowsArgs& a, uint32_t begin, uint32_t end) {
  for (uint32_t t = begin; t < end; ++t) {
    const uint32_t n = t / a.oh, oy = t % a.oh;
    const UpsampleSample& sy = a.ys[oy];
    const std::byte* top = a.in + (uint64_t{n} * a.h + sy.i0) * a.w * a.in_stride;
    const std::byte* bottom = a.in + (uint64_t{n} * a.h + sy.i1) * a.w * a.in_stride;
    std::byte* out = a.out + (uint64_t{n} * a.oh + oy) * a.ow * a.out_stride;
    const __m512 wy = _mm512_set1_ps(sy.w1);
    for (uint32_t ox = 0; ox < a.ow; ++ox, out += a.out_stride) {
      const UpsampleSample& sx = a.xs[ox];
      const void* p00 = top + sx.i0 * a.in_stride;
      const void* p01 = top + sx.i1 * a.in_stride;
      const void* p10 = bottom + sx.i0 * a.in_stride;
      const void* p11 = bottom + sx.i1 * a.in_stride;
      const __m512 wx = _mm512_set1_ps(sx.w1);
      for_each_vector(a.c, [&](size_t c, __mmask16 m) {
        const __m512 v00 = load(p00, kBf16, c, m), v01 = load(p01, kBf16, c, m);
        const __m512 v10 = load(p10, kBf16, c, m), v11 = load(p11, kBf16, c, m);
        const __m512 t0 = _mm512_fmadd_ps(wx, _mm512_sub_ps(v01, v00), v00);
        const __m512 b0 = _mm512_fmadd_ps(wx, _mm512_sub_ps(v11, v10), v10);
        store(out, kBf16, c, m, _mm512_fmadd_ps(wy, _mm512_sub_ps(b0, t0), t0));
      });
    }
  }
}

}  // namespace

void bilinear_rows(const BilinearRowsArgs& a, uint32_t begin, uint32_t end) {
  return a.bf16 ? bilinear_rows_t<true>(a, begin, end) : bilinear_rows_t<false>(a, begin, end);
}

}  // namespace tessera::cpu::avx512
