// The body of host_gemm_f32 (host_gemm.h), included by each tier inside its
// own anonymous namespace with D (L doubles) and kRows (rows per block)
// defined.
//
// Blocked over k (kDepth values) and over columns (2L): each k block of a
// is widened to double once, each block of b widened once into a dense panel
// (transposed when b is, zero columns past n) which stays in L1 while every
// row block reads it; the double sums are kept between k blocks, so every
// output still sums its products in k's order.

constexpr int64_t kDepth = 256, kW = 2 * L;

template <int R>
void block(const double* a, int64_t lda, const double* panel, double* acc, int64_t ldacc, int64_t depth, int64_t cols) {
  D s[R][2] = {};
  for (int r = 0; r < R; ++r)
    if (cols == kW)
      __builtin_memcpy(&s[r], acc + r * ldacc, sizeof(s[r]));
    else
      for (int64_t c = 0; c < cols; ++c) s[r][c / L][c % L] = acc[r * ldacc + c];
  for (int64_t q = 0; q < depth; ++q) {
    D b0, b1;
    __builtin_memcpy(&b0, panel + q * kW, sizeof(b0));
    __builtin_memcpy(&b1, panel + q * kW + L, sizeof(b1));
    for (int r = 0; r < R; ++r) {
      const D av = a[r * lda + q] - D{};  // (a broadcast: x - 0 is x, -0.0 included)
      s[r][0] += av * b0;
      s[r][1] += av * b1;
    }
  }
  for (int r = 0; r < R; ++r)
    if (cols == kW)
      __builtin_memcpy(acc + r * ldacc, &s[r], sizeof(s[r]));
    else
      for (int64_t c = 0; c < cols; ++c) acc[r * ldacc + c] = s[r][c / L][c % L];
}

// Columns [j_begin, j_end) of y.
void gemm(const float* a, const float* b, bool b_transposed, float* y, int64_t m, int64_t n, int64_t k, int64_t j_begin,
          int64_t j_end) {
  const int64_t w = j_end - j_begin;  // acc's row stride
  double* acc = new double[static_cast<unsigned long>(m * w)]();
  double* panel = new double[static_cast<unsigned long>(kDepth * kW)];
  double* wide = new double[static_cast<unsigned long>(m * kDepth)];  // a's k block, (m, depth)
  for (int64_t q0 = 0; q0 < k; q0 += kDepth) {
    const int64_t depth = k - q0 < kDepth ? k - q0 : kDepth;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t q = 0; q < depth; ++q) wide[i * depth + q] = a[i * k + q0 + q];
    for (int64_t j0 = j_begin; j0 < j_end; j0 += kW) {
      const int64_t cols = j_end - j0 < kW ? j_end - j0 : kW;
      for (int64_t c = 0; c < kW; ++c)  // (b's rows read along, transposed or not)
        if (c >= cols || !b_transposed)
          for (int64_t q = 0; q < depth; ++q) panel[q * kW + c] = c >= cols ? 0.0 : b[(q0 + q) * n + j0 + c];
        else
          for (int64_t q = 0; q < depth; ++q) panel[q * kW + c] = b[(j0 + c) * k + q0 + q];
      double* out = acc + (j0 - j_begin);
      int64_t i0 = 0;
      for (; i0 + kRows <= m; i0 += kRows) block<kRows>(wide + i0 * depth, depth, panel, out + i0 * w, w, depth, cols);
      for (; i0 < m; ++i0) block<1>(wide + i0 * depth, depth, panel, out + i0 * w, w, depth, cols);
    }
  }
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < w; ++j) y[i * n + j_begin + j] = static_cast<float>(acc[i * w + j]);
  delete[] wide;
  delete[] panel;
  delete[] acc;
}
