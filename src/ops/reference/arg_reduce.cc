// The reference kernel for argmax / argmin (the oracle arg_reduce.h's kernel
// is tested against): a plain scan of each row in double.
#include <cmath>

#include "tessera/ops/reference.h"

namespace tessera::reference {

StatusOr<Tensor> arg_reduce(const Tensor& input, bool max, bool select_last_index) {
  TS_ASSIGN_OR_RETURN(std::vector<float> x, input.to_vector());
  const Shape& s = input.shape();
  const uint32_t c = s[-1];
  std::vector<uint32_t> dims;
  for (int k = 0; k + 1 < s.rank(); ++k) dims.push_back(s[k]);
  if (dims.empty()) dims.push_back(1);
  std::vector<float> y(x.size() / c);
  for (size_t r = 0; r < y.size(); ++r) {
    size_t best = 0;
    for (size_t i = 1; i < c; ++i) {
      const double v = x[r * c + i], b = x[r * c + best];
      bool take;
      if (std::isnan(b))
        take = select_last_index && std::isnan(v);  // the first NaN, or the last
      else if (std::isnan(v))
        take = true;  // a NaN beats every number
      else if (v == b)
        take = select_last_index;
      else
        take = max ? v > b : v < b;
      if (take) best = i;
    }
    y[r] = static_cast<float>(best);
  }
  return Tensor::from_vector(y, Shape(std::span<const uint32_t>(dims)), DataType::FLOAT32);
}

}  // namespace tessera::reference
