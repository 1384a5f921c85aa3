// The portable depthwise loop (internal), included by depthwise_avx512.cc
// inside a namespace of its own, after <algorithm>, depthwise_kernels.h and
// tessera/numerics/convert.h.

Status depthwise_kernel(const void* raw, uint32_t begin, uint32_t end) {
  const auto& a = *static_cast<const DepthwiseArgs*>(raw);
  constexpr uint32_t kChunk = 1024;
  alignas(64) float acc[kChunk], tap[kChunk];
  const uint32_t eo = element_size(a.dst_type);
  for (uint32_t t = begin; t < end; ++t) {
    const uint32_t img = t / a.oh, oy = t % a.oh;
    for (uint32_t ox = 0; ox < a.ow; ++ox) {
      uint32_t run = 0;
      std::byte* out = a.dst.unit((img * a.oh + oy) * a.ow + ox, 0, &run);
      for (uint32_t c0 = 0; c0 < a.c; c0 += kChunk) {
        const uint32_t cn = std::min(kChunk, a.c - c0);
        std::copy_n(a.bias + c0, cn, acc);
        for (uint32_t ky = 0; ky < a.kh; ++ky) {
          const int64_t iy = int64_t{oy} * a.sh + int64_t{ky} * a.dh - a.pad_t;
          if (iy < 0 || iy >= a.h) continue;
          for (uint32_t kx = 0; kx < a.kw; ++kx) {
            const int64_t ix = int64_t{ox} * a.sw + int64_t{kx} * a.dw - a.pad_l;
            if (ix < 0 || ix >= a.w) continue;
            const std::byte* p = a.src.unit(static_cast<uint32_t>((uint64_t{img} * a.h + iy) * a.w + ix), c0, &run);
            const float* x = reinterpret_cast<const float*>(p);
            if (a.src_type != DataType::FLOAT32) {
              convert_to_float(p, a.src_type, tap, cn);
              x = tap;
            }
            const float* wt = a.weights + (uint64_t{ky} * a.kw + kx) * a.c + c0;
            for (uint32_t i = 0; i < cn; ++i) acc[i] += x[i] * wt[i];
          }
        }
        a.math.unary(a.activation, acc, cn);
        convert_from_float(acc, out + uint64_t{c0} * eo, a.dst_type, cn);
      }
    }
  }
  return Status();
}
