#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "direct_conv_kernels.h"
#include "scratch.h"
#include "tessera/numerics/bfloat16.h"
#include "tessera/numerics/bfloat16_avx2.h"

namespace tessera::cpu::avx2 {

namespace {

constexpr uint32_t kBlockPixels = 6;

// RW output pixels x 16 channels into `out` (RW x 16 floats), starting from
// `init` (pixel j's sums at init + j * step), over `taps` taps of `cin`
// channels: pixel j's input for tap t at ind[j * taps + t] + c0 (a pixel's
// row, or zeros where the tap falls in the padding). Reading through these
// pointers, the direct kernel takes its inputs straight from the tensor's
// rows (no padded copy), and a block may span output rows, so small maps
// keep all 12 accumulators busy (a 7-wide row made blocks of 4 and 3
// pixels, 8 and 6 accumulators, under FMA latency x throughput).
// Named accumulators: an array of them ends up on the stack inside the loop
// with GCC 12 (measured 30 against 65-73 GFLOP/s on one core).
template <uint32_t RW>
void block(const float* const* ind, uint32_t taps, size_t c0, uint32_t cin, const float* w, const float* init,
           size_t step, float* out) {
  __m256 c00 = _mm256_loadu_ps(init), c01 = _mm256_loadu_ps(init + 8), c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
  if constexpr (RW > 1) c10 = _mm256_loadu_ps(init + step), c11 = _mm256_loadu_ps(init + step + 8);
  if constexpr (RW > 2) c20 = _mm256_loadu_ps(init + 2 * step), c21 = _mm256_loadu_ps(init + 2 * step + 8);
  if constexpr (RW > 3) c30 = _mm256_loadu_ps(init + 3 * step), c31 = _mm256_loadu_ps(init + 3 * step + 8);
  if constexpr (RW > 4) c40 = _mm256_loadu_ps(init + 4 * step), c41 = _mm256_loadu_ps(init + 4 * step + 8);
  if constexpr (RW > 5) c50 = _mm256_loadu_ps(init + 5 * step), c51 = _mm256_loadu_ps(init + 5 * step + 8);
  for (uint32_t t = 0; t < taps; ++t) {
    const float *i0 = ind[t] + c0, *i1, *i2, *i3, *i4, *i5;
    if constexpr (RW > 1) i1 = ind[taps + t] + c0;
    if constexpr (RW > 2) i2 = ind[2 * taps + t] + c0;
    if constexpr (RW > 3) i3 = ind[3 * taps + t] + c0;
    if constexpr (RW > 4) i4 = ind[4 * taps + t] + c0;
    if constexpr (RW > 5) i5 = ind[5 * taps + t] + c0;
    for (uint32_t c = 0; c < cin; ++c, w += 16) {
      const __m256 w0 = _mm256_loadu_ps(w), w1 = _mm256_loadu_ps(w + 8);
      __m256 a = _mm256_broadcast_ss(i0 + c);
      c00 = _mm256_fmadd_ps(a, w0, c00), c01 = _mm256_fmadd_ps(a, w1, c01);
      if constexpr (RW > 1) {
        a = _mm256_broadcast_ss(i1 + c);
        c10 = _mm256_fmadd_ps(a, w0, c10), c11 = _mm256_fmadd_ps(a, w1, c11);
      }
      if constexpr (RW > 2) {
        a = _mm256_broadcast_ss(i2 + c);
        c20 = _mm256_fmadd_ps(a, w0, c20), c21 = _mm256_fmadd_ps(a, w1, c21);
      }
      if constexpr (RW > 3) {
        a = _mm256_broadcast_ss(i3 + c);
        c30 = _mm256_fmadd_ps(a, w0, c30), c31 = _mm256_fmadd_ps(a, w1, c31);
      }
      if constexpr (RW > 4) {
        a = _mm256_broadcast_ss(i4 + c);
        c40 = _mm256_fmadd_ps(a, w0, c40), c41 = _mm256_fmadd_ps(a, w1, c41);
      }
      if constexpr (RW > 5) {
        a = _mm256_broadcast_ss(i5 + c);
        c50 = _mm256_fmadd_ps(a, w0, c50), c51 = _mm256_fmadd_ps(a, w1, c51);
      }
    }
  }
  _mm256_storeu_ps(out, c00), _mm256_storeu_ps(out + 8, c01);
  if constexpr (RW > 1) _mm256_storeu_ps(out + 16, c10), _mm256_storeu_ps(out + 24, c11);
  if constexpr (RW > 2) _mm256_storeu_ps(out + 32, c20), _mm256_storeu_ps(out + 40, c21);
  if constexpr (RW > 3) _mm256_storeu_ps(out + 48, c30), _mm256_storeu_ps(out + 56, c31);
  if constexpr (RW > 4) _mm256_storeu_ps(out + 64, c40), _mm256_storeu_ps(out + 72, c41);
  if constexpr (RW > 5) _mm256_storeu_ps(out + 80, c50), _mm256_storeu_ps(out + 88, c51);
}

using BlockFn = void (*)(const float* const*, uint32_t, size_t, uint32_t, const float*, const float*, size_t, float*);
constexpr BlockFn kBlocks[kBlockPixels + 1] = {nullptr,   block<1>, block<2>, block<3>,
                                               block<4>, block<5>, block<6>};

// A 1x1 block of rw pixels whose `cin` inputs lie `px` floats apart from `in`.
inline void strided_block(uint32_t rw, const float* in, size_t px, uint32_t cin, const float* w, const float* init,
                          size_t step, float* out) {
  const float* ind[kBlockPixels];
  for (uint32_t j = 0; j < rw; ++j) ind[j] = in + j * px;
  kBlocks[rw](ind, 1, 0, cin, w, init, step, out);
}

// bfloat16 <-> float32 (numerics/bfloat16.h, bfloat16_avx2.h).
using tessera::avx2::load_bf16;
using tessera::avx2::store_bf16x16;

// One pixel's cin bfloat16 channels as float32.
inline void widen_pixel(const uint16_t* src, uint32_t cin, float* dst) {
  uint32_t c = 0;
  for (; c + 8 <= cin; c += 8) _mm256_storeu_ps(dst + c, load_bf16(src + c));
  for (; c < cin; ++c) dst[c] = bfloat16_to_float(src[c]);
}

// Input rows [iy0, iy0 + rows) of image `img`, zero-padded, `pw` pixels per
// row of cin floats, pixel x holding input column x - pad_l (the Winograd
// kernel's patches).
void pad_rows(const DirectConvArgs& a, uint32_t img, int64_t iy0, uint32_t rows, uint32_t pw, float* dst) {
  const uint64_t stride = a.src.uniform_row_stride(), row = uint64_t{pw} * a.cin;
  const uint32_t x1 = std::min<uint32_t>(pw, a.pad_l + a.w);  // padded columns [pad_l, x1) hold input
  for (uint32_t r = 0; r < rows; ++r) {
    float* d = dst + r * row;
    const int64_t iy = iy0 + r;
    if (iy < 0 || iy >= a.h || x1 <= a.pad_l) {
      std::fill(d, d + row, 0.0f);
      continue;
    }
    std::fill(d, d + uint64_t{a.pad_l} * a.cin, 0.0f);
    std::fill(d + uint64_t{x1} * a.cin, d + row, 0.0f);
    const std::byte* s = a.src.base + ((uint64_t{img} * a.h + static_cast<uint64_t>(iy)) * a.w) * stride;
    if (a.src_bf16) {
      for (uint32_t x = a.pad_l; x < x1; ++x)
        widen_pixel(reinterpret_cast<const uint16_t*>(s + (x - a.pad_l) * stride), a.cin, d + uint64_t{x} * a.cin);
    } else if (stride == a.cin * sizeof(float)) {
      std::memcpy(d + uint64_t{a.pad_l} * a.cin, s, (x1 - a.pad_l) * stride);
    } else {
      for (uint32_t x = a.pad_l; x < x1; ++x)
        std::memcpy(d + uint64_t{x} * a.cin, s + (x - a.pad_l) * stride, a.cin * sizeof(float));
    }
  }
}

// One output pixel's 16 channels: adds the residual's `ocs` channels (float32
// or bfloat16, T) at `res`, or stores `ocs` channels to `out` (two vector
// moves when whole).
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) { return load_bf16(p); }
inline float value(float v) { return v; }
inline float value(uint16_t v) { return bfloat16_to_float(v); }
template <class T>
void add_residual(float* px, const std::byte* res, uint32_t ocs) {
  const auto* r = reinterpret_cast<const T*>(res);
  if (ocs == 16) {
    _mm256_store_ps(px, _mm256_add_ps(_mm256_load_ps(px), load8(r)));
    _mm256_store_ps(px + 8, _mm256_add_ps(_mm256_load_ps(px + 8), load8(r + 8)));
  } else {
    for (uint32_t c = 0; c < ocs; ++c) px[c] += value(r[c]);
  }
}
inline void store_pixel_bf16(std::byte* out, const float* px, uint32_t ocs) {
  auto* o = reinterpret_cast<uint16_t*>(out);
  if (ocs == 16) {
    store_bf16x16(o, _mm256_load_ps(px), _mm256_load_ps(px + 8));
  } else {
    alignas(32) uint16_t b[16];
    store_bf16x16(b, _mm256_load_ps(px), _mm256_load_ps(px + 8));
    std::memcpy(o, b, ocs * sizeof(uint16_t));
  }
}
inline void store_pixel(std::byte* out, const float* px, uint32_t ocs) {
  if (ocs == 16) {
    _mm256_storeu_ps(reinterpret_cast<float*>(out), _mm256_load_ps(px));
    _mm256_storeu_ps(reinterpret_cast<float*>(out) + 8, _mm256_load_ps(px + 8));
  } else {
    std::memcpy(out, px, ocs * sizeof(float));
  }
}

// Finishes n pixels of 16 channels in `px` (aligned) whose outputs start at
// `out`, `step` bytes apart (the residual's at `res` with the same step, or
// none): activation, residual, its activation, store.
void finish(const DirectConvArgs& a, float* px, uint32_t n, uint32_t ocs, std::byte* out, const std::byte* res,
            uint64_t step, uint64_t res_step) {
  if (!a.activation.is_identity()) a.math.unary(a.activation, px, uint64_t{n} * 16);
  if (res) {
    if (a.res_bf16) {
      for (uint32_t j = 0; j < n; ++j) add_residual<uint16_t>(px + j * 16, res + j * res_step, ocs);
    } else {
      for (uint32_t j = 0; j < n; ++j) add_residual<float>(px + j * 16, res + j * res_step, ocs);
    }
    if (!a.res_activation.is_identity()) a.math.unary(a.res_activation, px, uint64_t{n} * 16);
  }
  if (a.dst_bf16) {
    for (uint32_t j = 0; j < n; ++j) store_pixel_bf16(out + j * step, px + j * 16, ocs);
  } else {
    for (uint32_t j = 0; j < n; ++j) store_pixel(out + j * step, px + j * 16, ocs);
  }
}

// bfloat16 input rows [iy0, iy1) of image `img` as dense float32 rows (w
// pixels of cin each) in `dst`.
void widen_rows(const DirectConvArgs& a, uint32_t img, uint32_t iy0, uint32_t iy1, float* dst) {
  const uint64_t stride = a.src.uniform_row_stride();
  for (uint64_t px = (uint64_t{img} * a.h + iy0) * a.w, end = (uint64_t{img} * a.h + iy1) * a.w; px < end; ++px) {
    widen_pixel(reinterpret_cast<const uint16_t*>(a.src.base + px * stride), a.cin, dst);
    dst += a.cin;
  }
}

// Winograd F(2x2, 3x3) transforms over 8 channels (__m256) or one (float):
// GCC's vector extensions give __m256 the same +, - as float.
template <class T>
T load(const float* p) {
  if constexpr (std::is_same_v<T, float>)
    return *p;
  else
    return _mm256_loadu_ps(p);
}
inline void store(float* p, float v) { *p = v; }
inline void store(float* p, __m256 v) { _mm256_storeu_ps(p, v); }

// V = B^T d B of the 4x4 patch with pixel (i, j) at d + i * dy + j * dx;
// position i * 4 + j goes to v + (i * 4 + j) * vs.
template <class T>
void transform_patch(const float* d, size_t dy, size_t dx, float* v, size_t vs) {
  T r[4][4];
  for (int j = 0; j < 4; ++j) {
    const T d0 = load<T>(d + j * dx), d1 = load<T>(d + dy + j * dx), d2 = load<T>(d + 2 * dy + j * dx),
            d3 = load<T>(d + 3 * dy + j * dx);
    r[0][j] = d0 - d2, r[1][j] = d1 + d2, r[2][j] = d2 - d1, r[3][j] = d1 - d3;
  }
  for (int i = 0; i < 4; ++i) {
    store(v + (i * 4 + 0) * vs, r[i][0] - r[i][2]);
    store(v + (i * 4 + 1) * vs, r[i][1] + r[i][2]);
    store(v + (i * 4 + 2) * vs, r[i][2] - r[i][1]);
    store(v + (i * 4 + 3) * vs, r[i][1] - r[i][3]);
  }
}

// Y = A^T M A + bias for 16 channels: M's position k at m + k * ms (16
// floats each); output pixel (i, j) to y + (i * 2 + j) * 16.
void transform_products(const float* m, size_t ms, const float* bias, float* y) {
  for (int h = 0; h < 16; h += 8) {
    __m256 v[16];
    for (int k = 0; k < 16; ++k) v[k] = _mm256_loadu_ps(m + k * ms + h);
    __m256 t0[4], t1[4];
    for (int j = 0; j < 4; ++j) t0[j] = v[j] + v[4 + j] + v[8 + j], t1[j] = v[4 + j] - v[8 + j] - v[12 + j];
    const __m256 b = _mm256_loadu_ps(bias + h);
    _mm256_store_ps(y + h, t0[0] + t0[1] + t0[2] + b);
    _mm256_store_ps(y + 16 + h, t0[1] - t0[2] - t0[3] + b);
    _mm256_store_ps(y + 32 + h, t1[0] + t1[1] + t1[2] + b);
    _mm256_store_ps(y + 48 + h, t1[1] - t1[2] - t1[3] + b);
  }
}

}  // namespace

Status direct_conv_kernel(const void* raw, uint32_t begin, uint32_t end) {
  const auto& a = *static_cast<const DirectConvArgs*>(raw);
  const uint32_t blocks = (a.cout + 15) / 16, taps = a.kh * a.kw;
  const uint64_t out_stride = a.dst.uniform_row_stride();
  const uint64_t out_unit = a.dst_bf16 ? 2 : 4, res_unit = a.res_bf16 ? 2 : 4;  // bytes per channel
  // Floats from one input pixel to the next: in the rows, or in the task's widened copy.
  const uint64_t in_stride = a.src_bf16 ? a.cin : a.src.uniform_row_stride() / sizeof(float);
  const uint64_t res_stride = a.res.base ? a.res.uniform_row_stride() : 0;
  const bool chunked = a.cin_block < a.cin;
  const auto* src = reinterpret_cast<const float*>(a.src.base);
  thread_local Scratch zeros_scratch, partial_scratch, widened_scratch, ind_scratch;
  const auto* zeros = static_cast<const float*>(zeros_scratch.zeros(a.cin * sizeof(float)));
  float* widened = nullptr;
  float* partial = nullptr;
  alignas(32) float tile[kBlockPixels * 16];
  for (uint32_t t = begin; t < end; ++t) {
    const uint32_t group = t % a.groups, band = t / a.groups % a.bands, img = t / a.groups / a.bands;
    const uint32_t oy0 = band * a.band_rows, oy1 = std::min(a.oh, oy0 + a.band_rows);
    const uint32_t b0 = group * a.group_blocks, b1 = std::min(blocks, b0 + a.group_blocks);
    if (oy0 >= oy1 || b0 >= b1) continue;
    // The band's output pixels, row after row: each one's input row per tap,
    // or zeros in the padding.
    const uint32_t pixels = (oy1 - oy0) * a.ow;
    const auto** ind = reinterpret_cast<const float**>(ind_scratch.pointers(uint64_t{pixels} * taps));
    // bfloat16 rows: the input rows the band reads, widened; `lines` then
    // points at (image img, row iy_lo).
    const float* lines = src + uint64_t{img} * a.h * a.w * in_stride;
    int64_t iy_lo = 0;
    if (a.src_bf16) {
      iy_lo = std::max<int64_t>(0, int64_t{oy0} * a.sh - a.pad_t);
      const int64_t iy_hi = std::min<int64_t>(a.h, int64_t{oy1 - 1} * a.sh - a.pad_t + int64_t{a.kh - 1} * a.dh + 1);
      if (iy_hi > iy_lo) {
        widened = widened_scratch.floats(uint64_t(iy_hi - iy_lo) * a.w * a.cin);
        widen_rows(a, img, static_cast<uint32_t>(iy_lo), static_cast<uint32_t>(iy_hi), widened);
      }
      lines = widened;
    }
    const float** at = ind;
    for (uint32_t oy = oy0; oy < oy1; ++oy)
      for (uint32_t ox = 0; ox < a.ow; ++ox)
        for (uint32_t ky = 0; ky < a.kh; ++ky) {
          const int64_t iy = int64_t{oy} * a.sh - a.pad_t + int64_t{ky} * a.dh;
          const bool row = iy >= 0 && iy < a.h;
          const float* line = lines + uint64_t(row ? iy - iy_lo : 0) * a.w * in_stride;
          for (uint32_t kx = 0; kx < a.kw; ++kx) {
            const int64_t ix = int64_t{ox} * a.sw - a.pad_l + int64_t{kx} * a.dw;
            *at++ = row && ix >= 0 && ix < a.w ? line + ix * in_stride : zeros;
          }
        }
    // In nearly equal blocks of at most six pixels, which may span rows
    // (outputs and partial sums are dense over the band's pixels).
    const uint32_t nblk = (pixels + kBlockPixels - 1) / kBlockPixels;
    const uint64_t first_pixel = (uint64_t{img} * a.oh + oy0) * a.ow;
    std::byte* out0 = a.dst.base + first_pixel * out_stride;
    const std::byte* res0 = a.res.base ? a.res.base + first_pixel * res_stride : nullptr;
    if (chunked) partial = partial_scratch.floats(uint64_t{pixels} * 16);
    for (uint32_t b = b0; b < b1; ++b) {
      const uint32_t oc0 = b * 16, ocs = std::min(16u, a.cout - oc0);
      const float* w = a.weights + uint64_t{b} * taps * a.cin * 16;
      for (uint32_t c0 = 0; c0 < a.cin; c0 += a.cin_block) {
        const uint32_t cb = std::min(a.cin_block, a.cin - c0);
        const bool first = c0 == 0, last = c0 + cb == a.cin;
        for (uint32_t k = 0, p = 0; k < nblk; ++k) {
          const uint32_t rw = (pixels - p + (nblk - k) - 1) / (nblk - k);
          float* sum = chunked ? partial + uint64_t{p} * 16 : nullptr;
          kBlocks[rw](ind + uint64_t{p} * taps, taps, c0, cb, w, first ? a.bias + oc0 : sum, first ? 0 : 16,
                      last ? tile : sum);
          if (last)
            finish(a, tile, rw, ocs, out0 + uint64_t{p} * out_stride + uint64_t{oc0} * out_unit,
                   res0 ? res0 + uint64_t{p} * res_stride + uint64_t{oc0} * res_unit : nullptr, out_stride,
                   res_stride);
          p += rw;
        }
        w += uint64_t{taps} * cb * 16;
      }
    }
  }
  return Status();
}

Status winograd_f2_kernel(const void* raw, uint32_t begin, uint32_t end) {
  const auto& a = *static_cast<const DirectConvArgs*>(raw);
  const uint32_t blocks = (a.cout + 15) / 16, tx = (a.ow + 1) / 2, ty = (a.oh + 1) / 2, pw = 2 * tx + 2;
  const uint32_t seg = a.segment_tiles, cin = a.cin;
  const uint64_t out_stride = a.dst.uniform_row_stride(), vs = uint64_t{seg} * cin;
  const uint64_t out_unit = a.dst_bf16 ? 2 : 4, res_unit = a.res_bf16 ? 2 : 4;  // bytes per channel
  const uint64_t res_stride = a.res.base ? a.res.uniform_row_stride() : 0;
  alignas(32) static const float kZeros[16] = {};
  alignas(32) float y[4 * 16];
  thread_local Scratch padded_scratch, v_scratch, m_scratch;
  for (uint32_t t = begin; t < end; ++t) {
    const uint32_t group = t % a.groups, band = t / a.groups % a.bands, img = t / a.groups / a.bands;
    const uint32_t tr0 = band * a.band_rows, tr1 = std::min(ty, tr0 + a.band_rows);
    const uint32_t b0 = group * a.group_blocks, b1 = std::min(blocks, b0 + a.group_blocks);
    if (tr0 >= tr1 || b0 >= b1) continue;
    const uint32_t rows = 2 * (tr1 - tr0) + 2, tiles = (tr1 - tr0) * tx;
    float* const padded = padded_scratch.floats(uint64_t{rows} * pw * cin);
    float* const v = v_scratch.floats(16 * vs);
    float* const m = m_scratch.floats(uint64_t{16} * seg * 16);
    pad_rows(a, img, int64_t{2} * tr0 - a.pad_t, rows, pw, padded);
    for (uint32_t s0 = 0; s0 < tiles; s0 += seg) {
      const uint32_t st = std::min(seg, tiles - s0);
      for (uint32_t k = 0; k < st; ++k) {  // V[16][st][cin]
        const uint32_t r = (s0 + k) / tx, c = (s0 + k) % tx;
        const float* d = padded + (uint64_t{2 * r} * pw + 2 * c) * cin;
        float* vk = v + uint64_t{k} * cin;
        uint32_t ch = 0;
        for (; ch + 8 <= cin; ch += 8) transform_patch<__m256>(d + ch, uint64_t{pw} * cin, cin, vk + ch, vs);
        for (; ch < cin; ++ch) transform_patch<float>(d + ch, uint64_t{pw} * cin, cin, vk + ch, vs);
      }
      // Per block: M[16][st][16], position k's tiles times its weights in
      // nearly equal runs of at most six tiles, then back to output pixels.
      const uint32_t nblk = (st + kBlockPixels - 1) / kBlockPixels;
      for (uint32_t b = b0; b < b1; ++b) {
        for (uint32_t k = 0; k < 16; ++k) {
          const float* w = a.weights + (uint64_t{b} * 16 + k) * cin * 16;
          float* mk = m + uint64_t{k} * seg * 16;
          for (uint32_t q = 0, x = 0; q < nblk; ++q) {
            const uint32_t rw = (st - x + (nblk - q) - 1) / (nblk - q);
            strided_block(rw, v + uint64_t{k} * vs + uint64_t{x} * cin, cin, cin, w, kZeros, 0, mk + uint64_t{x} * 16);
            x += rw;
          }
        }
        const uint32_t oc0 = b * 16, ocs = std::min(16u, a.cout - oc0);
        for (uint32_t k = 0; k < st; ++k) {
          transform_products(m + uint64_t{k} * 16, uint64_t{seg} * 16, a.bias + oc0, y);
          const uint32_t r = (s0 + k) / tx, c = (s0 + k) % tx;
          for (uint32_t i = 0; i < 2; ++i) {  // the tile's pixels inside the output, one row at a time
            const uint32_t oy = 2 * (tr0 + r) + i;
            if (oy >= a.oh) break;
            const uint64_t pixel = (uint64_t{img} * a.oh + oy) * a.ow + 2 * c;
            finish(a, y + i * 32, std::min(2u, a.ow - 2 * c), ocs,
                   a.dst.base + pixel * out_stride + uint64_t{oc0} * out_unit,
                   a.res.base ? a.res.base + pixel * res_stride + uint64_t{oc0} * res_unit : nullptr, out_stride,
                   res_stride);
          }
        }
      }
    }
  }
  return Status();
}

Status patch_transpose_kernel(const void* raw, uint32_t begin, uint32_t end) {
  const auto& a = *static_cast<const DirectConvArgs*>(raw);
  const uint32_t cols = a.kh * a.kw * a.cout, blocks = (cols + 15) / 16;
  const uint64_t in_stride = a.src.uniform_row_stride(), out_stride = a.dst.uniform_row_stride();
  const uint64_t out_unit = a.dst_bf16 ? 2 : 4;
  // Floats from one input pixel to the next: in the rows, or in the band's widened copy.
  const size_t px = a.src_bf16 ? a.cin : in_stride / sizeof(float);
  const uint32_t nblk = (a.w + kBlockPixels - 1) / kBlockPixels;
  alignas(32) float tile[kBlockPixels * 16];
  thread_local Scratch widened_scratch;
  float* widened = nullptr;
  struct Run {  // lanes [lane, lane + count) of a block: tap (ky, kx), channels from co
    uint32_t lane, count, ky, kx, co;
  };
  for (uint32_t t = begin; t < end; ++t) {
    const uint32_t group = t % a.groups, band = t / a.groups % a.bands, img = t / a.groups / a.bands;
    const uint32_t y0 = band * a.band_rows, y1 = std::min(a.h, y0 + a.band_rows);
    const uint32_t b0 = group * a.group_blocks, b1 = std::min(blocks, b0 + a.group_blocks);
    if (y0 >= y1) continue;
    if (a.src_bf16) {  // the band's rows, once for all its blocks
      widened = widened_scratch.floats(uint64_t{y1 - y0} * a.w * a.cin);
      widen_rows(a, img, y0, y1, widened);
    }
    for (uint32_t b = b0; b < b1; ++b) {
      const uint32_t n0 = b * 16, ns = std::min(16u, cols - n0);
      Run runs[16];
      uint32_t nruns = 0;
      for (uint32_t l = 0; l < ns;) {
        const uint32_t n = n0 + l, tap = n / a.cout, co = n % a.cout, count = std::min(ns - l, a.cout - co);
        runs[nruns++] = {l, count, tap / a.kw, tap % a.kw, co};
        l += count;
      }
      const float* w = a.weights + uint64_t{b} * a.cin * 16;
      for (uint32_t y = y0; y < y1; ++y) {
        const float* in = a.src_bf16 ? widened + uint64_t{y - y0} * a.w * a.cin
                                     : reinterpret_cast<const float*>(a.src.base + (uint64_t{img} * a.h + y) * a.w * in_stride);
        auto at = [&](const Run& r, uint32_t x) {  // output pixel (y * kh + ky, x * kw + kx), channel co
          return a.dst.base + ((uint64_t{img} * a.oh + uint64_t{y} * a.kh + r.ky) * a.ow + uint64_t{x} * a.kw + r.kx) *
                                  out_stride + uint64_t{r.co} * out_unit;
        };
        for (uint32_t k = 0, x = 0; k < nblk; ++k) {
          const uint32_t rw = (a.w - x + (nblk - k) - 1) / (nblk - k);
          strided_block(rw, in + x * px, px, a.cin, w, a.bias + n0, 0, tile);
          if (nruns == 1) {
            finish(a, tile, rw, runs[0].count, at(runs[0], x), nullptr, a.kw * out_stride, 0);
          } else {  // the block straddles taps: each run to its own pixels
            if (!a.activation.is_identity()) a.math.unary(a.activation, tile, uint64_t{rw} * 16);
            for (uint32_t r = 0; r < nruns; ++r) {
              std::byte* o = at(runs[r], x);
              for (uint32_t j = 0; j < rw; ++j, o += a.kw * out_stride) {
                const float* v = tile + j * 16 + runs[r].lane;
                if (a.dst_bf16) {
                  for (uint32_t c = 0; c < runs[r].count; ++c) reinterpret_cast<uint16_t*>(o)[c] = float_to_bfloat16(v[c]);
                } else {
                  std::memcpy(o, v, runs[r].count * sizeof(float));
                }
              }
            }
          }
          x += rw;
        }
      }
    }
  }
  return Status();
}

}  // namespace tessera::cpu::avx2
