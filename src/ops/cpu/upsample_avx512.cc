// The bilinear row kernel (upsample_kernels.h) in 16-lane vectors, the last
// one masked; bfloat16 widened as read and rounded as stored (avx512_util.h).
#include <immintrin.h>

#include "avx512_activation.h"
#include "upsample_kernels.h"

namespace tessera::cpu::avx512 {

namespace {

template <bool kBf16>
void bilinear_rows_t(const BilinearRowsArgs& a, uint32_t begin, uint32_t end) {
  for_each_bilinear_pixel(a, begin, end, [&](const std::byte* const* px, float wx1, float wy1, std::byte* out) {
    const __m512 wx = _mm512_set1_ps(wx1), wy = _mm512_set1_ps(wy1);
    for_each_vector(a.c, [&](size_t c, __mmask16 m) {
      const __m512 v00 = load(px[0], kBf16, c, m), v01 = load(px[1], kBf16, c, m);
      const __m512 v10 = load(px[2], kBf16, c, m), v11 = load(px[3], kBf16, c, m);
      const __m512 t0 = _mm512_fmadd_ps(wx, _mm512_sub_ps(v01, v00), v00);
      const __m512 b0 = _mm512_fmadd_ps(wx, _mm512_sub_ps(v11, v10), v10);
      store(out, kBf16, c, m, _mm512_fmadd_ps(wy, _mm512_sub_ps(b0, t0), t0));
    });
  });
}

}  // namespace

void bilinear_rows(const BilinearRowsArgs& a, uint32_t begin, uint32_t end) {
  return a.bf16 ? bilinear_rows_t<true>(a, begin, end) : bilinear_rows_t<false>(a, begin, end);
}

}  // namespace tessera::cpu::avx512
