#include "tessera/runtime/model_outputs.h"

namespace tessera::runtime {

StatusOr<std::vector<graph::HostTensor>> model_outputs(std::span<const Tensor> compiled_outputs,
                                                       const graph::HostTail* tail) {
  std::vector<graph::HostTensor> host;
  for (size_t k = 0; k < compiled_outputs.size(); ++k) {
    const Tensor& t = compiled_outputs[k];
    if (t.is_on_device()) return invalid_argument_error("output {}: on the device; expected a host tensor", k);
    TS_ASSIGN_OR_RETURN(std::vector<float> v, t.to_vector());
    host.push_back(graph::HostTensor::floats(std::vector<int64_t>(t.shape().dims().begin(), t.shape().dims().end()),
                                             std::move(v)));
  }
  if (!tail) return host;
  return tail->run(host);
}

}  // namespace tessera::runtime
