// The gemv loop (gemv_kernels.h) over V, a GCC vector of kLanes floats
// (internal), included by gemv_avx512.cc (16 lanes) and gemv_avx2.cc (8),
// each compiled with its ISA's flags, inside a namespace of its own.

// An unaligned load (a memcpy compiles to vmovups; dereferencing a V* would
// assume V's alignment).
template <class V>
inline V load(const float* p) {
  V v;
  __builtin_memcpy(&v, p, sizeof(V));
  return v;
}

// y[r + i][c + q] for i < R, q < C: R rows of `a` against C weight rows,
// R x C accumulators.
template <class V, int kLanes, int R, int C>
inline void block(const GemvArgs& a, uint32_t r, uint32_t c) {
  const uint32_t kv = a.k / kLanes * kLanes;
  const float* x[R];
  const float* w[C];
  for (int i = 0; i < R; ++i) x[i] = a.a + (r + i) * a.lda;
  for (int q = 0; q < C; ++q) w[q] = a.b + (c + q) * a.ldb;
  V s[R][C] = {};
  for (uint32_t j = 0; j < kv; j += kLanes) {
    V wv[C];
    for (int q = 0; q < C; ++q) wv[q] = load<V>(w[q] + j);
    for (int i = 0; i < R; ++i) {
      const V u = load<V>(x[i] + j);
      for (int q = 0; q < C; ++q) s[i][q] += u * wv[q];
    }
  }
  for (int i = 0; i < R; ++i)
    for (int q = 0; q < C; ++q) {
      float o = 0;
      for (int l = 0; l < kLanes; ++l) o += s[i][q][l];
      for (uint32_t j = kv; j < a.k; ++j) o += x[i][j] * w[q][j];
      a.y[(r + i) * a.ldy + c + q] = o + (a.bias ? a.bias[c + q] : 0.0f);
    }
}

// Columns [c, c + C) for every row, kRows rows at a time: the C weight rows
// (C x K floats, in the L1 or L2) are read from memory once for all rows.
template <class V, int kLanes, int kRows, int C>
inline void columns(const GemvArgs& a, uint32_t c) {
  uint32_t r = 0;
  for (; r + kRows <= a.m; r += kRows) block<V, kLanes, kRows, C>(a, r, c);
  switch (a.m - r) {
    case 3: if constexpr (kRows > 3) block<V, kLanes, 3, C>(a, r, c); break;
    case 2: if constexpr (kRows > 2) block<V, kLanes, 2, C>(a, r, c); break;
    case 1: block<V, kLanes, 1, C>(a, r, c); break;
    default: break;
  }
}

// kRows rows per block: 4 x 4 accumulators with 32 vector registers
// (AVX-512), 2 x 4 with 16 (AVX2).
template <class V, int kLanes>
Status gemv(const void* raw, uint32_t begin, uint32_t end) {
  const auto& a = *static_cast<const GemvArgs*>(raw);
  constexpr int kRows = kLanes >= 16 ? 4 : 2;
  for (uint32_t t = begin; t < end; ++t) {
    const uint32_t c0 = t * a.cols_per_task, c1 = std::min(a.n, c0 + a.cols_per_task);
    uint32_t c = c0;
    for (; c + 4 <= c1; c += 4) columns<V, kLanes, kRows, 4>(a, c);
    for (; c < c1; ++c) columns<V, kLanes, kRows, 1>(a, c);  // the last columns, one at a time
    if (a.activation.op != UnaryOpType::IDENTITY && c1 > c0)
      for (uint32_t r = 0; r < a.m; ++r) a.math.unary(a.activation, a.y + r * a.ldy + c0, c1 - c0);
  }
  return Status();
}
