#include "tessera/ops/reference.h"

#include "tessera/numerics/convert.h"

namespace tessera::reference {

namespace {
Status require_host(const Tensor& t, std::string_view op) {
  if (t.is_on_device()) return invalid_argument_error("reference::{}: expected a host tensor", op);
  return ok_status();
}
}  // namespace

StatusOr<Tensor> relu(const Tensor& input, DataType out) {
  TS_RETURN_IF_ERROR(require_host(input, "relu"));
  TS_ASSIGN_OR_RETURN(std::vector<float> v, input.to_vector());
  for (float& x : v) x = x < 0.0f ? 0.0f : x;
  return Tensor::from_vector(v, input.shape(), out, input.layout());
}

StatusOr<Tensor> add(const Tensor& a, const Tensor& b, DataType out) {
  TS_RETURN_IF_ERROR(require_host(a, "add"));
  TS_RETURN_IF_ERROR(require_host(b, "add"));
  TS_ASSIGN_OR_RETURN(std::vector<float> va, a.to_vector());
  TS_ASSIGN_OR_RETURN(std::vector<float> vb, b.to_vector());
  if (va.size() != vb.size()) return invalid_argument_error("reference::add: shapes differ");
  for (size_t i = 0; i < va.size(); ++i) va[i] += vb[i];
  return Tensor::from_vector(va, a.shape(), out, a.layout());
}

StatusOr<Tensor> typecast(const Tensor& input, DataType out) {
  TS_RETURN_IF_ERROR(require_host(input, "typecast"));
  if (!is_floating(input.dtype()) && !is_floating(out)) {
    // Integer to integer: exact through int64, element by element.
    TS_ASSIGN_OR_RETURN(Tensor rm, host_to_layout(input, Layout::ROW_MAJOR));
    std::vector<int64_t> v(input.shape().volume());
    const uint32_t es = element_size(input.dtype());
    for (size_t i = 0; i < v.size(); ++i) {
      const std::byte* p = rm.host_data() + i * es;
      switch (input.dtype()) {
        case DataType::UINT8: v[i] = *reinterpret_cast<const uint8_t*>(p); break;
        case DataType::UINT16: v[i] = *reinterpret_cast<const uint16_t*>(p); break;
        case DataType::UINT32: v[i] = *reinterpret_cast<const uint32_t*>(p); break;
        default: v[i] = *reinterpret_cast<const int32_t*>(p); break;
      }
    }
    return Tensor::from_integers(v, input.shape(), out, input.layout());
  }
  TS_ASSIGN_OR_RETURN(std::vector<float> v, input.to_vector());
  return Tensor::from_vector(v, input.shape(), out, input.layout());
}

StatusOr<Tensor> tilize(const Tensor& input, DataType out) {
  TS_RETURN_IF_ERROR(require_host(input, "tilize"));
  if (!is_floating(input.dtype())) {
    TS_ASSIGN_OR_RETURN(Tensor t, typecast(input, out));
    return host_to_layout(t, Layout::TILE);
  }
  TS_ASSIGN_OR_RETURN(std::vector<float> v, input.to_vector());
  return Tensor::from_vector(v, input.shape(), out, Layout::TILE);
}

StatusOr<Tensor> untilize(const Tensor& input, DataType out) {
  TS_RETURN_IF_ERROR(require_host(input, "untilize"));
  if (!is_floating(input.dtype())) {
    TS_ASSIGN_OR_RETURN(Tensor t, typecast(input, out));
    return host_to_layout(t, Layout::ROW_MAJOR);
  }
  TS_ASSIGN_OR_RETURN(std::vector<float> v, input.to_vector());
  return Tensor::from_vector(v, input.shape(), out, Layout::ROW_MAJOR);
}

}  // namespace tessera::reference
