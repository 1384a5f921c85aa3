// Fixed-seed random weights for models built from Tessera ops: He-normal
// conv weights (std sqrt(2 / fan_in)) and small biases standing in for
// folded batch norms, so activations keep their scale through deep nets.
#pragma once

#include <random>

#include "tessera/tensor/tensor.h"

namespace tessera::models {

class WeightSource {
 public:
  explicit WeightSource(uint32_t seed) : rng_(seed) {}
  // Shape (dims...), normal with standard deviation sqrt(2 / fan_in).
  Tensor he_normal(const Shape& shape, uint32_t fan_in) {
    std::normal_distribution<float> d(0.0f, std::sqrt(2.0f / static_cast<float>(fan_in)));
    std::vector<float> v(shape.volume());
    for (float& x : v) x = d(rng_);
    return Tensor::from_vector(v, shape, DataType::FLOAT32).value();
  }
  Tensor bias(uint32_t n, float scale = 0.05f) {
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng_);
    return Tensor::from_vector(v, Shape{n}, DataType::FLOAT32).value();
  }

 private:
  std::mt19937 rng_;
};

}  // namespace tessera::models
