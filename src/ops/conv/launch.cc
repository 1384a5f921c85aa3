#include "launch.h"

#include "tessera/ops/data_movement.h"
#include "tessera/ops/manipulation.h"

namespace tessera::conv {

StatusOr<std::vector<float>> bias_values(const std::optional<Tensor>& bias, const Geometry& g) {
  if (bias && (bias->is_on_device() || bias->shape().volume() != g.cout))
    return invalid_argument_error("{}: expected a host bias with {} values, found {}",
                                  g.transposed ? "conv_transpose2d" : "conv2d", g.cout, bias->spec().to_string());
  if (!bias) return std::vector<float>(g.cout, 0.0f);
  return bias->to_vector();
}

StatusOr<PreparedConv2dWeights> upload_weights(const std::string& key, const Tensor& weight, const Tensor& bias,
                                               Device& device, uint8_t cq_id) {
  PreparedConv2dWeights w;
  w.key = key;
  TS_ASSIGN_OR_RETURN(w.weight, to_device(weight, device, DRAM_MEMORY_CONFIG, cq_id));
  TS_ASSIGN_OR_RETURN(w.bias, to_device(bias, device, DRAM_MEMORY_CONFIG, cq_id));
  return w;
}

StatusOr<Tensor> output_tensor(const Tensor& input, const Problem& pr) {
  if (pr.residual && pr.residual->in_place && pr.residual->tensor.buffer() != input.buffer()) {
    StatusOr<Tensor> r = reshape(pr.residual->tensor, pr.output.shape);
    if (r.ok() && r->spec() == pr.output) return r;
  }
  return allocate_tensor_on_device(pr.output, *input.device());
}

// Rows narrower than 4 bytes (and transposed convs, whose patch kernel is a
// matmul over interleaved rows) stay interleaved; dense rows as one DRAM
// shard let the kernel read or write them in place, where interleaving them
// over the banks would cost it another gather or scatter copy.
MemoryConfig staging(uint32_t rows, uint32_t cols, DataType dtype, bool dense) {
  if (!dense || !stages_densely(uint64_t{cols} * element_size(dtype))) return DRAM_MEMORY_CONFIG;
  return MemoryConfig{TensorMemoryLayout::HEIGHT_SHARDED, BufferType::DRAM,
                      ShardSpec{CoreRangeSet(CoreRange({0, 0}, {0, 0})), {rows, cols}, ShardOrientation::ROW_MAJOR}};
}

StatusOr<Tensor> as_output_rows(const Tensor& t, const Geometry& g, uint8_t cq_id) {
  const Shape out_shape{1, 1, g.n * g.oh * g.ow, g.cout};
  StatusOr<Tensor> v = t.view(out_shape);
  if (v.ok()) return v;
  return reshape(t, out_shape, {.cq_id = cq_id});
}

}  // namespace tessera::conv
