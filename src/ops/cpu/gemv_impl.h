// The gemv loop (gemv_kernels.h) over V, a GCC vector of kLanes floats
// (internal), included by gemv_avx512.cc (16 lanes) and gemv_avx2.cc (8),
// each compiled with its ISA's flags, inside a namespace of its own that
// defines H and W, GCC vectors of kLanes uint16_t and uint32_t.

// kLanes values from p, float32 or bfloat16 (widened exactly: the bits move
// up 16). Unaligned: a memcpy compiles to vmovups (dereferencing a V* would
// assume V's alignment).
template <class V, int kLanes, bool kBf16>
inline V load(const void* p, uint64_t i) {
  V v;
  if constexpr (kBf16) {
    H h;
    __builtin_memcpy(&h, static_cast<const uint16_t*>(p) + i, sizeof(H));
    const W w = __builtin_convertvector(h, W) << 16;
    __builtin_memcpy(&v, &w, sizeof(V));
  } else {
    __builtin_memcpy(&v, static_cast<const float*>(p) + i, sizeof(V));
  }
  return v;
}
inline float value(const void* p, bool bf16, uint64_t i) {
  return bf16 ? bfloat16_to_float(static_cast<const uint16_t*>(p)[i]) : static_cast<const float*>(p)[i];
}

// out[i * cols + c - c0 + q] for i < R, q < C: R rows of `a` against C
// weight rows, R x C accumulators, plus the bias.
template <class V, int kLanes, bool kA, bool kB, int R, int C>
inline void block(const GemvArgs& a, uint32_t r, uint32_t c, float* out, uint32_t cols) {
  const uint32_t kv = a.k / kLanes * kLanes;
  uint64_t x[R], w[C];  // element offsets of the rows
  for (int i = 0; i < R; ++i) x[i] = (r + i) * a.lda;
  for (int q = 0; q < C; ++q) w[q] = (c + q) * a.ldb;
  V s[R][C] = {};
  // The first rows' pass streams the weights from memory, and prefetches the
  // next C weight rows at the same offset: a row of 2048 values is one or
  // two pages, where the hardware prefetchers stop, and each new row started
  // cold (ResNet-50's head in the model, three alternated runs: float32
  // 0.22-0.24 -> 0.17-0.18 ms, bfloat16 0.12-0.18 -> 0.09-0.10). Past the last
  // row it prefetches addresses nothing reads, which cannot fault.
  constexpr uint64_t es = kB ? 2 : 4;
  const char* next = static_cast<const char*>(a.b) + (c + C) * a.ldb * es;
  for (uint32_t j = 0; j < kv; j += kLanes) {
    V wv[C];
    for (int q = 0; q < C; ++q) wv[q] = load<V, kLanes, kB>(a.b, w[q] + j);
    if (r == 0)
      for (int q = 0; q < C; ++q) __builtin_prefetch(next + (q * a.ldb + j) * es);
    for (int i = 0; i < R; ++i) {
      const V u = load<V, kLanes, kA>(a.a, x[i] + j);
      for (int q = 0; q < C; ++q) s[i][q] += u * wv[q];
    }
  }
  for (int i = 0; i < R; ++i)
    for (int q = 0; q < C; ++q) {
      float o = 0;
      for (int l = 0; l < kLanes; ++l) o += s[i][q][l];
      for (uint32_t j = kv; j < a.k; ++j) o += value(a.a, kA, x[i] + j) * value(a.b, kB, w[q] + j);
      out[(r + i) * cols + q] = o + (a.bias ? value(a.bias, a.bias_bf16, c + q) : 0.0f);
    }
}

// Columns [c, c + C) for every row, kRows rows at a time: the C weight rows
// (C x K values, in the L1 or L2) are read from memory once for all rows.
template <class V, int kLanes, bool kA, bool kB, int kRows, int C>
inline void columns(const GemvArgs& a, uint32_t c, float* out, uint32_t cols) {
  uint32_t r = 0;
  for (; r + kRows <= a.m; r += kRows) block<V, kLanes, kA, kB, kRows, C>(a, r, c, out, cols);
  switch (a.m - r) {
    case 3: if constexpr (kRows > 3) block<V, kLanes, kA, kB, 3, C>(a, r, c, out, cols); break;
    case 2: if constexpr (kRows > 2) block<V, kLanes, kA, kB, 2, C>(a, r, c, out, cols); break;
    case 1: block<V, kLanes, kA, kB, 1, C>(a, r, c, out, cols); break;
    default: break;
  }
}

// kRows rows per block: 4 x 4 accumulators with 32 vector registers
// (AVX-512), 2 x 4 with 16 (AVX2). A task's sums go to a float32 buffer
// (m x its columns), which takes the activation and is then stored,
// rounded to bfloat16 where the output is.
template <class V, int kLanes, bool kA, bool kB>
Status gemv_t(const GemvArgs& a, uint32_t begin, uint32_t end) {
  constexpr int kRows = kLanes >= 16 ? 4 : 2;
  thread_local Scratch buffer;
  for (uint32_t t = begin; t < end; ++t) {
    const uint32_t c0 = t * a.cols_per_task, c1 = std::min(a.n, c0 + a.cols_per_task), cols = c1 - c0;
    if (c1 <= c0) continue;
    float* out = buffer.floats(uint64_t{a.m} * cols);
    uint32_t c = c0;
    for (; c + 4 <= c1; c += 4) columns<V, kLanes, kA, kB, kRows, 4>(a, c, out + (c - c0), cols);
    for (; c < c1; ++c) columns<V, kLanes, kA, kB, kRows, 1>(a, c, out + (c - c0), cols);  // the last, one at a time
    if (!a.activation.is_identity()) a.math.unary(a.activation, out, uint64_t{a.m} * cols);
    for (uint32_t r = 0; r < a.m; ++r) {
      const float* row = out + uint64_t{r} * cols;
      if (a.y_bf16)
        float_to_bfloat16(row, static_cast<uint16_t*>(a.y) + r * a.ldy + c0, cols);
      else
        std::copy(row, row + cols, static_cast<float*>(a.y) + r * a.ldy + c0);
    }
  }
  return Status();
}

template <class V, int kLanes>
Status gemv(const void* raw, uint32_t begin, uint32_t end) {
  const auto& a = *static_cast<const GemvArgs*>(raw);
  if (a.a_bf16) return a.b_bf16 ? gemv_t<V, kLanes, true, true>(a, begin, end) : gemv_t<V, kLanes, true, false>(a, begin, end);
  return a.b_bf16 ? gemv_t<V, kLanes, false, true>(a, begin, end) : gemv_t<V, kLanes, false, false>(a, begin, end);
}
