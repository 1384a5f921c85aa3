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

template <class V, int kLanes>
Status gemv(const void* raw, uint32_t begin, uint32_t end) {
  const auto& a = *static_cast<const GemvArgs*>(raw);
  const uint32_t kv = a.k / kLanes * kLanes;
  auto sum = [](V v) {
    float s = 0;
    for (int i = 0; i < kLanes; ++i) s += v[i];
    return s;
  };
  for (uint32_t t = begin; t < end; ++t) {
    const uint32_t c0 = t * a.cols_per_task, c1 = std::min(a.n, c0 + a.cols_per_task);
    // Two rows of `a` at a time against four weight rows: eight accumulators.
    for (uint32_t r = 0; r < a.m; r += 2) {
      const bool two = r + 1 < a.m;
      const float* x0 = a.a + r * a.lda;
      const float* x1 = two ? x0 + a.lda : x0;
      float* y0 = a.y + r * a.ldy;
      float* y1 = two ? y0 + a.ldy : nullptr;
      uint32_t c = c0;
      for (; c + 4 <= c1; c += 4) {
        const float* w = a.b + c * a.ldb;
        V s00{}, s01{}, s02{}, s03{}, s10{}, s11{}, s12{}, s13{};
        for (uint32_t j = 0; j < kv; j += kLanes) {
          const V u = load<V>(x0 + j), v = load<V>(x1 + j);
          const V w0 = load<V>(w + j), w1 = load<V>(w + a.ldb + j),
                  w2 = load<V>(w + 2 * a.ldb + j), w3 = load<V>(w + 3 * a.ldb + j);
          s00 += u * w0, s01 += u * w1, s02 += u * w2, s03 += u * w3;
          s10 += v * w0, s11 += v * w1, s12 += v * w2, s13 += v * w3;
        }
        float o[2][4] = {{sum(s00), sum(s01), sum(s02), sum(s03)}, {sum(s10), sum(s11), sum(s12), sum(s13)}};
        for (uint32_t j = kv; j < a.k; ++j)
          for (uint32_t q = 0; q < 4; ++q) o[0][q] += x0[j] * w[q * a.ldb + j], o[1][q] += x1[j] * w[q * a.ldb + j];
        for (uint32_t q = 0; q < 4; ++q) {
          const float bias = a.bias ? a.bias[c + q] : 0.0f;
          y0[c + q] = o[0][q] + bias;
          if (two) y1[c + q] = o[1][q] + bias;
        }
      }
      for (; c < c1; ++c) {  // the last columns, one at a time
        const float* w = a.b + c * a.ldb;
        V s0{}, s1{};
        for (uint32_t j = 0; j < kv; j += kLanes) {
          const V wv = load<V>(w + j);
          s0 += load<V>(x0 + j) * wv, s1 += load<V>(x1 + j) * wv;
        }
        float o0 = sum(s0), o1 = sum(s1);
        for (uint32_t j = kv; j < a.k; ++j) o0 += x0[j] * w[j], o1 += x1[j] * w[j];
        const float bias = a.bias ? a.bias[c] : 0.0f;
        y0[c] = o0 + bias;
        if (two) y1[c] = o1 + bias;
      }
    }
    if (a.activation.op != UnaryOpType::IDENTITY && c1 > c0)
      for (uint32_t r = 0; r < a.m; ++r) a.math.unary(a.activation, a.y + r * a.ldy + c0, c1 - c0);
  }
  return Status();
}
