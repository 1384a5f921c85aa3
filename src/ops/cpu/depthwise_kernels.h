// Depthwise convolution (groups = in = out channels) over NHWC rows
// (internal). Every kernel computes per output pixel bias plus kh*kw taps of
// channel vectors, accumulated in float32 in (ky, kx) order, then the fused
// activation. The AVX-512 kernel (depthwise_avx512.cc) has two paths: 3-
// and 5-wide kernels of stride 1 or 2 on evenly spaced rows read their taps
// straight from the rows, eight output pixels per block (seven for 3-wide
// ones at stride 1 on rows that 7 divides and 8 does not), each input column
// loaded once per kernel row; other shapes stage
// zero-padded channel-blocked input rows (kernels past 7x7 take the portable
// loop of depthwise_impl.h).
// conv2d picks the shapes where each beats oneDNN's (conv/select.cc,
// depthwise). The AVX2 kernel (depthwise_avx2.cc) takes float32 or
// bfloat16 rows on every map (conv2d gives it those with bfloat16 in or
// out): per block of six output pixels of a row and 16 channels, it reads
// each tap's input straight from the rows (zeros in the padding) with the
// accumulators in registers, and inside the map applies the activation
// there too (avx2_activation.h) before it stores.
#pragma once

#include <algorithm>

#include "float_math.h"
#include "tessera/device/program.h"
#include "tessera/numerics/data_type.h"
#include "tessera/tensor/access.h"

namespace tessera::cpu {

struct DepthwiseArgs {
  TensorAccess src, dst;
  const float* weights;  // (kh * kw, C) float32, rounded as the weights dtype asks
  const float* bias;     // (C) float32
  // The same in pairs order, or null: per 32 channels the 16 even ones, then
  // the 16 odd ones, zeros past C; (kh * kw, Cp) and (Cp), Cp = C rounded up
  // to 32 (kPairsGroup). The AVX-512 direct path reads bfloat16 rows 32
  // channels at a time as even and odd halves (depthwise_direct3.h).
  const float* weights_pairs = nullptr;
  const float* bias_pairs = nullptr;
  DataType src_type, dst_type;
  FloatMath math;
  UnaryWithParam activation;
  uint32_t n, h, w, c, oh, ow, kh, kw, sh, sw, dh, dw, pad_t, pad_l;
};

inline constexpr uint32_t kPairsGroup = 32;
// Weights per tap in the pairs order: the channels rounded up to whole groups.
inline uint64_t pairs_width(uint32_t c) { return (uint64_t{c} + kPairsGroup - 1) / kPairsGroup * kPairsGroup; }
// Position of channel c in the pairs order.
inline uint32_t pairs_index(uint32_t c) {
  const uint32_t g = c / kPairsGroup * kPairsGroup, k = c % kPairsGroup;
  return g + (k % 2) * (kPairsGroup / 2) + k / 2;
}

// Where each part of a depthwise conv's prepared weights lies, in floats:
// (taps, C) in order, then (taps, Cp) and the bias (Cp) in pairs order.
struct DepthwiseWeightsLayout {
  uint64_t taps, c, cp;
  DepthwiseWeightsLayout(uint64_t kh, uint64_t kw, uint32_t channels)
      : taps(kh * kw), c(channels), cp(pairs_width(channels)) {}
  uint64_t weights_pairs() const { return taps * c; }
  uint64_t bias_pairs() const { return taps * (c + cp); }
  uint64_t size() const { return taps * (c + cp) + cp; }
};

// Fills `out` (layout.size() floats) from weights (C, taps) and a bias (C).
inline void pack_depthwise_weights(const DepthwiseWeightsLayout& layout, const float* weights, const float* bias,
                                   float* out) {
  std::fill(out, out + layout.size(), 0.0f);
  float* pairs = out + layout.weights_pairs();
  for (uint32_t c = 0; c < layout.c; ++c) {
    for (uint64_t k = 0; k < layout.taps; ++k) {
      out[k * layout.c + c] = weights[c * layout.taps + k];
      pairs[k * layout.cp + pairs_index(c)] = weights[c * layout.taps + k];
    }
    out[layout.bias_pairs() + pairs_index(c)] = bias[c];
  }
}

// One task = one output row (image, oy).
namespace avx512 {
Status depthwise_kernel(const void* args, uint32_t begin, uint32_t end);
}
namespace avx2 {
Status depthwise_kernel(const void* args, uint32_t begin, uint32_t end);
}

}  // namespace tessera::cpu
