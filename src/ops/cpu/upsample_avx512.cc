// The bilinear row kernel (upsample_kernels.h) in 16-lane vectors, the last
// one masked; bfloat16 widened as read and rounded as stored (avx512_util.h).
//
// Each input row's horizontal blends (top / bottom of upsample_kernels.h)
// are computed once per worker and strip of output columns, and kept while
// the output rows that read them run: at 2x, four output rows read each input
// row. An output vector is then one blend of two float32 vectors from the
// L1. The same arithmetic as blending all four pixels per output, so the same
// bits. On a 60x80x64 2x upsample (kernel-only, alternated with the old
// kernel) it took 0.050 against 0.062 ms in bfloat16 and 0.058 against 0.064
// in float32; blending whole rows instead of strips (40 KB each, past the
// L1) made float32 25% slower.
#include <immintrin.h>

#include <algorithm>
#include <memory>

#include "avx512_activation.h"
#include "tessera/base/aligned.h"
#include "upsample_kernels.h"

namespace tessera::cpu::avx512 {

namespace {

// Two input rows' horizontal blends over one strip of output columns (the
// two rows an output row reads), each keyed by its row in the image at hand.
struct BlendedRows {
  std::shared_ptr<std::byte[]> bytes;
  size_t row_floats = 0;
  int64_t key[2] = {-1, -1};
  float* row(int slot) { return reinterpret_cast<float*>(bytes.get()) + slot * row_floats; }
};

// Output columns per strip: two strips of blends in 32 KB of the L1 (16,
// 32 and 64 KB alternated on a 60x80x64 2x upsample: 32 was fastest in
// bfloat16 and within noise of 16 in float32).
constexpr size_t kStripBytes = 32 * 1024;

template <bool kBf16>
void blend_row(const BilinearRowsArgs& a, const std::byte* in_row, uint32_t ox0, uint32_t ox1, float* dst) {
  for (uint32_t ox = ox0; ox < ox1; ++ox, dst += a.c) {
    const UpsampleSample& sx = a.xs[ox];
    const std::byte* p0 = in_row + sx.i0 * a.in_stride;
    const std::byte* p1 = in_row + sx.i1 * a.in_stride;
    const __m512 wx = _mm512_set1_ps(sx.w1), vx = _mm512_set1_ps(1 - sx.w1);
    for_each_vector(a.c, [&](size_t c, __mmask16 m) {
      const __m512 v0 = load(p0, kBf16, c, m), v1 = load(p1, kBf16, c, m);
      storeu_ps(dst + c, m, _mm512_fmadd_ps(wx, v1, _mm512_mul_ps(vx, v0)));
    });
  }
}

template <bool kBf16>
void bilinear_rows_t(const BilinearRowsArgs& a, uint32_t begin, uint32_t end) {
  thread_local BlendedRows cache;
  const uint32_t strip = static_cast<uint32_t>(std::clamp<size_t>(kStripBytes / (2 * sizeof(float) * a.c), 1, a.ow));
  const size_t row_floats = size_t{strip} * a.c;
  if (cache.row_floats < row_floats) {
    cache.bytes = make_aligned_bytes(2 * row_floats * sizeof(float));
    cache.row_floats = row_floats;
  }
  for (uint32_t first = begin; first < end;) {  // the tasks of one image
    const uint32_t n = first / a.oh, last = std::min(end, (n + 1) * a.oh);
    const std::byte* image = a.in + uint64_t{n} * a.h * a.w * a.in_stride;
    for (uint32_t ox0 = 0; ox0 < a.ow; ox0 += strip) {
      const uint32_t ox1 = std::min(a.ow, ox0 + strip);
      cache.key[0] = cache.key[1] = -1;
      // The slot holding input row `iy`'s blends, made now if neither
      // does; `keep` names a slot not to overwrite.
      auto blended = [&](int64_t iy, int keep) {
        for (int s = 0; s < 2; ++s)
          if (cache.key[s] == iy) return s;
        const int s = keep == 0 ? 1 : 0;
        blend_row<kBf16>(a, image + static_cast<uint64_t>(iy) * a.w * a.in_stride, ox0, ox1, cache.row(s));
        cache.key[s] = iy;
        return s;
      };
      for (uint32_t t = first; t < last; ++t) {
        const uint32_t oy = t % a.oh;
        const UpsampleSample& sy = a.ys[oy];
        const int top_slot = blended(sy.i0, cache.key[0] == sy.i1 ? 0 : cache.key[1] == sy.i1 ? 1 : -1);
        const float* top = cache.row(top_slot);
        const float* bottom = cache.row(blended(sy.i1, top_slot));
        std::byte* out = a.out + ((uint64_t{n} * a.oh + oy) * a.ow + ox0) * a.out_stride;
        const __m512 wy = _mm512_set1_ps(sy.w1), vy = _mm512_set1_ps(1 - sy.w1);
        for (uint32_t ox = ox0; ox < ox1; ++ox, out += a.out_stride, top += a.c, bottom += a.c)
          for_each_vector(a.c, [&](size_t c, __mmask16 m) {
            const __m512 t0 = loadu_ps(top + c, m), b0 = loadu_ps(bottom + c, m);
            store(out, kBf16, c, m, _mm512_fmadd_ps(wy, b0, _mm512_mul_ps(vy, t0)));
          });
      }
    }
    first = last;
  }
}

}  // namespace

void bilinear_rows(const BilinearRowsArgs& a, uint32_t begin, uint32_t end) {
  return a.bf16 ? bilinear_rows_t<true>(a, begin, end) : bilinear_rows_t<false>(a, begin, end);
}

}  // namespace tessera::cpu::avx512
