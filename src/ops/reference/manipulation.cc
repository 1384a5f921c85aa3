// Reference manipulation kernels: index arithmetic on logical values.
#include <cmath>

#include "tessera/ops/manipulation.h"
#include "tessera/ops/reference.h"

namespace tessera::reference {

namespace {

std::vector<uint32_t> unravel(uint64_t i, const Shape& s) {
  std::vector<uint32_t> idx(static_cast<size_t>(s.rank()));
  for (int d = s.rank() - 1; d >= 0; --d) {
    idx[static_cast<size_t>(d)] = static_cast<uint32_t>(i % s[d]);
    i /= s[d];
  }
  return idx;
}

uint64_t ravel(const std::vector<uint32_t>& idx, const Shape& s) {
  uint64_t f = 0;
  for (int d = 0; d < s.rank(); ++d) f = f * s[d] + idx[static_cast<size_t>(d)];
  return f;
}

Shape make_shape(const std::vector<uint32_t>& dims) { return Shape(std::span<const uint32_t>(dims)); }

}  // namespace

StatusOr<Tensor> permute(const Tensor& input, std::span<const int> perm) {
  const Shape& s = input.shape();
  TS_ASSIGN_OR_RETURN(std::vector<float> v, input.to_vector());
  std::vector<uint32_t> dims;
  for (int p : perm) dims.push_back(s[p < 0 ? p + s.rank() : p]);
  const Shape out = make_shape(dims);
  std::vector<float> o(v.size());
  for (uint64_t i = 0; i < o.size(); ++i) {
    auto oi = unravel(i, out);
    std::vector<uint32_t> ii(oi.size());
    for (size_t k = 0; k < perm.size(); ++k) ii[static_cast<size_t>(perm[k] < 0 ? perm[k] + s.rank() : perm[k])] = oi[k];
    o[i] = v[ravel(ii, s)];
  }
  return Tensor::from_vector(o, out, input.dtype());
}

StatusOr<Tensor> pad(const Tensor& input, std::span<const std::array<uint32_t, 2>> padding, float value) {
  const Shape& s = input.shape();
  TS_ASSIGN_OR_RETURN(std::vector<float> v, input.to_vector());
  const int skip = s.rank() - static_cast<int>(padding.size());
  std::vector<uint32_t> dims, before;
  for (int d = 0; d < s.rank(); ++d) {
    auto pd = d >= skip ? padding[static_cast<size_t>(d - skip)] : std::array<uint32_t, 2>{};
    dims.push_back(s[d] + pd[0] + pd[1]);
    before.push_back(pd[0]);
  }
  const Shape out = make_shape(dims);
  std::vector<float> o(out.volume(), value);
  for (uint64_t i = 0; i < v.size(); ++i) {
    auto idx = unravel(i, s);
    for (size_t d = 0; d < idx.size(); ++d) idx[d] += before[d];
    o[ravel(idx, out)] = v[i];
  }
  return Tensor::from_vector(o, out, input.dtype());
}

StatusOr<Tensor> slice(const Tensor& input, const SliceParams& sl) {
  const Shape& s = input.shape();
  TS_ASSIGN_OR_RETURN(std::vector<float> v, input.to_vector());
  std::vector<float> o;
  std::vector<uint32_t> dims;
  for (int d = 0; d < s.rank(); ++d) {
    const auto i = static_cast<size_t>(d);
    const uint32_t step = sl.step.empty() ? 1 : sl.step[i], end = std::min(sl.end[i], s[d]);
    dims.push_back((end - sl.begin[i] + step - 1) / step);
  }
  const Shape out = make_shape(dims);
  for (uint64_t i = 0; i < out.volume(); ++i) {
    auto idx = unravel(i, out);
    for (size_t d = 0; d < idx.size(); ++d) idx[d] = sl.begin[d] + idx[d] * (sl.step.empty() ? 1 : sl.step[d]);
    o.push_back(v[ravel(idx, s)]);
  }
  return Tensor::from_vector(o, out, input.dtype());
}

StatusOr<Tensor> concat(std::span<const Tensor> inputs, int dim) {
  const Shape& s0 = inputs[0].shape();
  const int d = dim < 0 ? dim + s0.rank() : dim;
  std::vector<uint32_t> dims(s0.dims().begin(), s0.dims().end());
  dims[static_cast<size_t>(d)] = 0;
  for (const Tensor& t : inputs) dims[static_cast<size_t>(d)] += t.shape()[d];
  const Shape out = make_shape(dims);
  std::vector<float> o(out.volume());
  uint32_t offset = 0;
  for (const Tensor& t : inputs) {
    TS_ASSIGN_OR_RETURN(std::vector<float> v, t.to_vector());
    for (uint64_t i = 0; i < v.size(); ++i) {
      auto idx = unravel(i, t.shape());
      idx[static_cast<size_t>(d)] += offset;
      o[ravel(idx, out)] = v[i];
    }
    offset += t.shape()[d];
  }
  return Tensor::from_vector(o, out, inputs[0].dtype());
}

StatusOr<Tensor> concat_affine(std::span<const Tensor> inputs, const Tensor& scale, const Tensor& shift,
                               const UnaryWithParam& act, DataType dtype) {
  TS_ASSIGN_OR_RETURN(Tensor joined, reference::concat(inputs, -1));
  TS_ASSIGN_OR_RETURN(std::vector<float> v, joined.to_vector());
  TS_ASSIGN_OR_RETURN(const std::vector<float> s, scale.to_vector());
  TS_ASSIGN_OR_RETURN(const std::vector<float> t, shift.to_vector());
  const uint32_t c = joined.shape()[-1];
  if (s.size() != c || t.size() != c)
    return invalid_argument_error("concat_affine: {} and {} scale and shift values for {} channels", s.size(), t.size(), c);
  for (uint64_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<float>(apply_activation(act, std::fma(v[i], s[i % c], t[i % c])));
  return Tensor::from_vector(v, joined.shape(), dtype);
}

}  // namespace tessera::reference
