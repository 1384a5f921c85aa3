#include "tessera/import/onnx_weights.h"

#include <fmt/format.h>

#include <cmath>

#include "tessera/import/onnx.h"

namespace tessera::importer {

StatusOr<cnn::WeightMap> load_onnx_initializers(const std::string& path) {
  TS_ASSIGN_OR_RETURN(auto tensors, load_onnx_initializer_tensors(path));
  cnn::WeightMap out;
  for (const auto& [name, h] : tensors) {
    if (h.volume() == 0) continue;  // an empty initializer carries no weights
    const std::string what = fmt::format("{}: initializer '{}'", path, name);
    std::vector<float> values(h.size());
    for (size_t k = 0; k < h.size(); ++k) {
      const double v = h.at(k);
      if (h.type == graph::ElemType::INT64 && std::fabs(v) > 16777216.0)
        return invalid_argument_error("{}: integer {} at index {} is not exact in float32", what, v, k);
      values[k] = static_cast<float>(v);
    }
    if (h.dims.size() > static_cast<size_t>(Shape::kMaxRank))
      return invalid_argument_error("{}: rank {} is above Tessera's maximum {}", what, h.dims.size(), Shape::kMaxRank);
    std::vector<uint32_t> dims(h.dims.begin(), h.dims.end());
    if (dims.empty()) dims.push_back(1);  // a scalar becomes (1)
    TS_ASSIGN_OR_RETURN(Tensor tensor,
                        Tensor::from_vector(values, Shape(std::span<const uint32_t>(dims)), DataType::FLOAT32));
    out.emplace(name, std::move(tensor));
  }
  return out;
}

}  // namespace tessera::importer
