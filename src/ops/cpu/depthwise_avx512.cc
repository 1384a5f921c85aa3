// The AVX-512 depthwise kernel. 3- and 5-wide kernels of stride 1 or 2 take
// the direct path (depthwise_direct3.h). Other shapes: a worker stages the input
// rows its output rows read as float32, zero-padded on both sides, in a ring
// of kh rows (each input row staged once for a run of stride-1 output rows), so
// every output pixel reads all its taps without bounds checks. Output pixels
// go in blocks of eight, one accumulator each (eight FMA chains cover the FMA
// latency on two pipes; four left it latency bound), per 16-channel block;
// the activation is applied in registers and each result stored once.
// Accumulation order is the portable kernel's: bias, then taps in (ky, kx)
// order, in float32 FMAs. Kernels past 7x7 and dtypes other than float32 and
// bfloat16 take the portable loop.
#include <algorithm>

#include "avx512_activation.h"
#include "depthwise_direct3.h"
#include "depthwise_kernels.h"
#include "scratch.h"
#include "tessera/base/aligned.h"
#include "tessera/numerics/convert.h"

namespace tessera::cpu::avx512 {

namespace portable {
#include "depthwise_impl.h"
}  // namespace portable

namespace {

constexpr int kPx = 8;  // output pixels per block

// The staged input rows of one worker: kh rows, each blocked by 16 channels
// (for each channel block, `pitch` pixels of 16 floats: a block's pixels
// lie back to back in cache lines, where NHWC pixels of hundreds of
// channels put each tap in another line), pixel p holding input column
// p - pad_l (zero outside the row and past the channel count).
struct RowRing {
  Scratch bytes;
  float* data = nullptr;
  int64_t key[kMaxK];  // which input row (image * h + iy) each slot holds; -1 for none
};

template <bool kBf16Out, class Act>
void depthwise_rows(const DepthwiseArgs& a, uint32_t begin, uint32_t end, Act act) {
  const uint32_t C = a.c, KW = a.kw;
  const int64_t ow = a.ow, sw = a.sw, dw = a.dw;
  // Wide enough for whole blocks: the last block's extra pixels read zeros
  // and are not stored.
  const int64_t blocks = (ow + kPx - 1) / kPx;
  const int64_t pitch = (blocks * kPx - 1) * sw + int64_t{KW - 1} * dw + 1;
  const int64_t cols = std::clamp<int64_t>(pitch - a.pad_l, 0, a.w);  // input columns any output reads
  const uint64_t in_stride = a.src.uniform_row_stride(), out_stride = a.dst.uniform_row_stride();
  const uint32_t cblocks = static_cast<uint32_t>(div_up(C, 16));
  const uint64_t row_floats = uint64_t{cblocks} * static_cast<uint64_t>(pitch) * 16;
  thread_local RowRing ring;
  thread_local Scratch pixel_scratch;  // one input pixel in float32, when converted
  float* const pixel = pixel_scratch.floats(C);
  ring.data = ring.bytes.floats(row_floats * a.kh);
  std::fill(std::begin(ring.key), std::end(ring.key), -1);

  auto stage = [&](uint32_t slot, int64_t key) {
    float* d = ring.data + slot * row_floats;
    for (uint32_t b = 0; b < cblocks; ++b) {
      float* row = d + uint64_t{b} * pitch * 16;
      std::fill(row, row + uint64_t{a.pad_l} * 16, 0.0f);
      std::fill(row + (a.pad_l + cols) * 16, row + pitch * 16, 0.0f);
    }
    for (int64_t ix = 0; ix < cols; ++ix) {
      const uint64_t unit = static_cast<uint64_t>(key) * a.w + ix;
      const float* px = pixel;
      if (in_stride && a.src_type == DataType::FLOAT32) {
        px = reinterpret_cast<const float*>(a.src.base + unit * in_stride);
      } else if (in_stride) {
        convert_to_float(a.src.base + unit * in_stride, a.src_type, pixel, C);
      } else {
        for (uint32_t c = 0, run = 0; c < C; c += run) {
          const std::byte* p = a.src.unit(static_cast<uint32_t>(unit), c, &run);
          run = std::min(run, C - c);
          convert_to_float(p, a.src_type, pixel + c, run);
        }
      }
      float* at = d + (a.pad_l + ix) * 16;
      for (uint32_t b = 0; b < cblocks; ++b, at += pitch * 16)
        _mm512_store_ps(at, _mm512_maskz_loadu_ps(tail_mask(C - b * 16), px + b * 16));
    }
    ring.key[slot] = key;
  };

  for (uint32_t t = begin; t < end; ++t) {
    const uint32_t img = t / a.oh, oy = t % a.oh;
    // The rows this output row reads, staged where not already.
    int64_t want[kMaxK];
    uint32_t want_ky[kMaxK], nrows = 0;
    for (uint32_t ky = 0; ky < a.kh; ++ky) {
      const int64_t iy = int64_t{oy} * a.sh + int64_t{ky} * a.dh - a.pad_t;
      if (iy < 0 || iy >= a.h) continue;
      want[nrows] = int64_t{img} * a.h + iy;
      want_ky[nrows++] = ky;
    }
    const float* rows[kMaxK];
    for (uint32_t r = 0; r < nrows; ++r) {
      uint32_t s = 0;
      while (s < a.kh && ring.key[s] != want[r]) ++s;
      if (s == a.kh) {  // stage into a slot this output row does not read
        for (s = 0; s < a.kh; ++s)
          if (std::find(want, want + nrows, ring.key[s]) == want + nrows) break;
        stage(s, want[r]);
      }
      rows[r] = ring.data + s * row_floats;
    }
    const uint64_t out_row = (uint64_t{img} * a.oh + oy) * a.ow;
    auto out_at = [&](int64_t ox) {
      uint32_t run = 0;
      return out_stride ? a.dst.base + (out_row + ox) * out_stride : a.dst.unit(static_cast<uint32_t>(out_row + ox), 0, &run);
    };
    for (uint32_t cb = 0, b = 0; cb < C; cb += 16, ++b) {
      const __mmask16 m = tail_mask(C - cb);
      const __m512 bias = _mm512_maskz_loadu_ps(m, a.bias + cb);
      __m512 wv[kMaxK * kMaxK];
      for (uint32_t r = 0; r < nrows; ++r)
        for (uint32_t kx = 0; kx < KW; ++kx)
          wv[r * KW + kx] = _mm512_maskz_loadu_ps(m, a.weights + (uint64_t{want_ky[r]} * KW + kx) * C + cb);
      for (int64_t ox0 = 0; ox0 < ow; ox0 += kPx) {
        __m512 acc[kPx];
        _Pragma("GCC unroll 8") for (int j = 0; j < kPx; ++j) acc[j] = bias;
        for (uint32_t r = 0; r < nrows; ++r) {
          const float* p = rows[r] + (uint64_t{b} * pitch + ox0 * sw) * 16;
          for (uint32_t kx = 0; kx < KW; ++kx, p += dw * 16) {
            const __m512 w = wv[r * KW + kx];
            _Pragma("GCC unroll 8") for (int j = 0; j < kPx; ++j)
              acc[j] = _mm512_fmadd_ps(_mm512_load_ps(p + j * sw * 16), w, acc[j]);
          }
        }
        const int64_t npx = std::min<int64_t>(kPx, ow - ox0);
        _Pragma("GCC unroll 8") for (int j = 0; j < kPx; ++j)
          if (j < npx) store(out_at(ox0 + j), kBf16Out, cb, m, act(acc[j]));
      }
    }
  }
}

}  // namespace

// The direct path's exact redo (depthwise_direct3.h).
[[gnu::noinline, gnu::cold]] void direct3::redo_rows_exactly(const DepthwiseArgs& a, uint32_t t, uint32_t rows) {
  (void)portable::depthwise_kernel(&a, t, t + rows);
}

Status depthwise_kernel(const void* raw, uint32_t begin, uint32_t end) {
  const auto& a = *static_cast<const DepthwiseArgs*>(raw);
  if (direct3::applies(a)) {
    // Blocks of seven at stride 1 with the same dtype in and out only
    // (MobileNet's layers): each block width is another set of
    // instantiations, the build's longest compile under the sanitizers, and
    // stride 2 measured no gain.
    const bool seven = a.kw == 3 && a.sw == 1 && a.src_type == a.dst_type && a.ow % 8 != 0 && a.ow % 7 == 0;
    if (a.kw == 5) direct3::run_five(a, begin, end);
    else if (seven) direct3::run_stride1_seven(a, begin, end);
    else if (a.sw == 1) direct3::run<1>(a, begin, end);
    else direct3::run<2>(a, begin, end);
    return Status();
  }
  if (a.kh > kMaxK || a.kw > kMaxK || (a.dst_type != DataType::FLOAT32 && a.dst_type != DataType::BFLOAT16))
    return portable::depthwise_kernel(raw, begin, end);
  if (a.dst_type == DataType::BFLOAT16)
    with_activation<true, kCompactActivations>(a.activation, [&](auto act) { depthwise_rows<true>(a, begin, end, act); });
  else
    with_activation<false, kCompactActivations>(a.activation, [&](auto act) { depthwise_rows<false>(a, begin, end, act); });
  return Status();
}

}  // namespace tessera::cpu::avx512
