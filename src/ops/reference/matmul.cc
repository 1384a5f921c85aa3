// The reference kernel for matmul (the oracle its fast kernels are tested against).
#include "tessera/ops/matmul.h"

#include "tessera/ops/eltwise.h"
#include "tessera/ops/reference.h"

namespace tessera {

namespace reference {

StatusOr<Tensor> matmul(const Tensor& a, const Tensor& b, const std::optional<Tensor>& bias, const MatmulParams& params,
                        DataType out_dtype) {
  if (a.is_on_device() || b.is_on_device()) return invalid_argument_error("reference::matmul: expected host tensors");
  const Shape &sa = a.shape(), &sb = b.shape();
  const uint32_t m = sa[-2], k = sa[-1], n = params.transpose_b ? sb[-2] : sb[-1];
  TS_ASSIGN_OR_RETURN(Shape batch, broadcast_shapes(Shape(sa.dims().first(static_cast<size_t>(sa.rank() - 2))),
                                                    Shape(sb.dims().first(static_cast<size_t>(sb.rank() - 2)))));
  TS_ASSIGN_OR_RETURN(std::vector<float> va, a.to_vector());
  TS_ASSIGN_OR_RETURN(std::vector<float> vb, b.to_vector());
  std::vector<float> vbias(n, 0.0f);
  if (bias) {
    TS_ASSIGN_OR_RETURN(vbias, bias->to_vector());
  }
  // Batch index of an operand with `rank` leading dims for output batch i.
  auto batch_index = [&](const Shape& s, uint64_t i) {
    const int lead = s.rank() - 2;
    uint64_t idx = 0, stride = 1;
    for (int d = 1; d <= batch.rank(); ++d) {
      const uint64_t coord = i % batch[-d];
      i /= batch[-d];
      if (d > lead) continue;
      const uint32_t dim = s[lead - d];
      if (dim != 1) idx += coord * stride;
      stride *= dim;
    }
    return idx;
  };
  const uint64_t batches = batch.volume();
  std::vector<float> out(batches * m * n);
  const UnaryWithParam act = params.activation.value_or(UnaryWithParam{});
  for (uint64_t i = 0; i < batches; ++i) {
    const float* pa = va.data() + batch_index(sa, i) * m * k;
    const float* pb = vb.data() + batch_index(sb, i) * uint64_t{k} * n;
    for (uint32_t r = 0; r < m; ++r)
      for (uint32_t c = 0; c < n; ++c) {
        double acc = vbias[c];
        for (uint32_t j = 0; j < k; ++j)
          acc += double{pa[uint64_t{r} * k + j]} *
                 (params.transpose_b ? pb[uint64_t{c} * k + j] : pb[uint64_t{j} * n + c]);
        out[(i * m + r) * n + c] = static_cast<float>(apply_activation(act, acc));
      }
  }
  std::vector<uint32_t> dims(batch.dims().begin(), batch.dims().end());
  dims.push_back(m);
  dims.push_back(n);
  return Tensor::from_vector(out, Shape(std::span<const uint32_t>(dims)), out_dtype);
}

}  // namespace reference

}  // namespace tessera
