// The reference kernel for normalization (the oracle its fast kernels are tested against).
#include "tessera/ops/normalization.h"

#include <cmath>

#include "tessera/ops/reference.h"

namespace tessera {

namespace reference {

namespace {
std::vector<double> param_or(const std::optional<Tensor>& t, uint32_t c, double fallback) {
  std::vector<double> v(c, fallback);
  if (t) {
    auto f = t->to_vector().value();
    for (uint32_t i = 0; i < c; ++i) v[i] = f[i];
  }
  return v;
}
}  // namespace

StatusOr<Tensor> softmax(const Tensor& input, DataType out) {
  TS_ASSIGN_OR_RETURN(std::vector<float> x, input.to_vector());
  const uint32_t c = input.shape()[-1];
  for (size_t r = 0; r < x.size() / c; ++r) {
    float* row = x.data() + r * c;
    double m = -INFINITY, sum = 0;
    for (uint32_t i = 0; i < c; ++i) m = std::max<double>(m, row[i]);
    for (uint32_t i = 0; i < c; ++i) sum += std::exp(row[i] - m);
    for (uint32_t i = 0; i < c; ++i) row[i] = static_cast<float>(std::exp(row[i] - m) / sum);
  }
  return Tensor::from_vector(x, input.shape(), out);
}

StatusOr<Tensor> log_softmax(const Tensor& input, DataType out) {
  TS_ASSIGN_OR_RETURN(std::vector<float> x, input.to_vector());
  const uint32_t c = input.shape()[-1];
  for (size_t r = 0; r < x.size() / c; ++r) {
    float* row = x.data() + r * c;
    double m = -INFINITY, sum = 0;
    for (uint32_t i = 0; i < c; ++i) m = std::isnan(row[i]) || row[i] > m ? row[i] : m;
    for (uint32_t i = 0; i < c; ++i) sum += std::exp(row[i] - m);
    for (uint32_t i = 0; i < c; ++i) row[i] = static_cast<float>(row[i] - m - std::log(sum));
  }
  return Tensor::from_vector(x, input.shape(), out);
}

StatusOr<Tensor> layer_norm(const Tensor& input, const NormParams& p, DataType out) {
  TS_ASSIGN_OR_RETURN(std::vector<float> x, input.to_vector());
  const uint32_t c = input.shape()[-1];
  auto w = param_or(p.weight, c, 1), b = param_or(p.bias, c, 0);
  for (size_t r = 0; r < x.size() / c; ++r) {
    float* row = x.data() + r * c;
    double mean = 0, var = 0;
    for (uint32_t i = 0; i < c; ++i) mean += row[i];
    mean /= c;
    for (uint32_t i = 0; i < c; ++i) var += (row[i] - mean) * (row[i] - mean);
    const double rstd = 1 / std::sqrt(var / c + p.epsilon);
    for (uint32_t i = 0; i < c; ++i) row[i] = static_cast<float>((row[i] - mean) * rstd * w[i] + b[i]);
  }
  return Tensor::from_vector(x, input.shape(), out);
}

StatusOr<Tensor> group_norm(const Tensor& input, uint32_t groups, const NormParams& p, DataType out) {
  TS_ASSIGN_OR_RETURN(std::vector<float> x, input.to_vector());
  const Shape& s = input.shape();
  const uint64_t hw = uint64_t{s[1]} * s[2], c = s[3], cg = c / groups;
  auto w = param_or(p.weight, s[3], 1), b = param_or(p.bias, s[3], 0);
  for (uint32_t n = 0; n < s[0]; ++n)
    for (uint32_t g = 0; g < groups; ++g) {
      auto at = [&](uint64_t px, uint64_t ch) -> float& { return x[(n * hw + px) * c + g * cg + ch]; };
      double mean = 0, var = 0;
      for (uint64_t px = 0; px < hw; ++px)
        for (uint64_t ch = 0; ch < cg; ++ch) mean += at(px, ch);
      mean /= double(hw * cg);
      for (uint64_t px = 0; px < hw; ++px)
        for (uint64_t ch = 0; ch < cg; ++ch) var += (at(px, ch) - mean) * (at(px, ch) - mean);
      const double rstd = 1 / std::sqrt(var / double(hw * cg) + p.epsilon);
      for (uint64_t px = 0; px < hw; ++px)
        for (uint64_t ch = 0; ch < cg; ++ch)
          at(px, ch) = static_cast<float>((at(px, ch) - mean) * rstd * w[g * cg + ch] + b[g * cg + ch]);
    }
  return Tensor::from_vector(x, input.shape(), out);
}

StatusOr<Tensor> batch_norm(const Tensor& input, const Tensor& mean, const Tensor& var, const NormParams& p,
                            DataType out) {
  TS_ASSIGN_OR_RETURN(std::vector<float> x, input.to_vector());
  const uint32_t c = input.shape()[-1];
  auto w = param_or(p.weight, c, 1), b = param_or(p.bias, c, 0), m = param_or(mean, c, 0), v = param_or(var, c, 1);
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t ch = i % c;
    x[i] = static_cast<float>((x[i] - m[ch]) / std::sqrt(v[ch] + p.epsilon) * w[ch] + b[ch]);
  }
  return Tensor::from_vector(x, input.shape(), out);
}

}  // namespace reference

}  // namespace tessera
