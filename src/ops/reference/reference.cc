#include "tessera/ops/reference.h"

#include <cmath>

#include "tessera/numerics/convert.h"

namespace tessera::reference {

namespace {
Status require_host(const Tensor& t, std::string_view op) {
  if (t.is_on_device()) return invalid_argument_error("reference::{}: expected a host tensor", op);
  return ok_status();
}

// The flat index of element i of the broadcast `shape` in an operand of
// shape `s`: the coordinates of the dims it broadcasts dropped.
uint64_t source_index(const Shape& shape, const Shape& s, uint64_t i) {
  uint64_t idx = 0, stride = 1;
  for (int d = 1; d <= shape.rank(); ++d) {
    const uint64_t coord = i % shape[-d];
    i /= shape[-d];
    if (d > s.rank()) continue;
    if (s[-d] != 1) idx += coord * stride;
    stride *= s[-d];
  }
  return idx;
}
}  // namespace

StatusOr<Tensor> unary(const Tensor& input, const UnaryWithParam& act, DataType out) {
  TS_RETURN_IF_ERROR(require_host(input, unary_op_name(act.op)));
  TS_ASSIGN_OR_RETURN(std::vector<float> v, input.to_vector());
  for (float& x : v) x = static_cast<float>(apply_activation(act, x));
  return Tensor::from_vector(v, input.shape(), out, input.layout());
}

StatusOr<Tensor> binary(const Tensor& a, const Tensor& b, BinaryOpType op, const UnaryWithParam& act, DataType out) {
  TS_RETURN_IF_ERROR(require_host(a, binary_op_name(op)));
  TS_RETURN_IF_ERROR(require_host(b, binary_op_name(op)));
  TS_ASSIGN_OR_RETURN(Shape shape, broadcast_shapes(a.shape(), b.shape()));
  TS_ASSIGN_OR_RETURN(std::vector<float> va, a.to_vector());
  TS_ASSIGN_OR_RETURN(std::vector<float> vb, b.to_vector());
  std::vector<float> v(shape.volume());
  for (uint64_t i = 0; i < v.size(); ++i) {
    const double x = va[source_index(shape, a.shape(), i)], y = vb[source_index(shape, b.shape(), i)];
    double r = 0;
    switch (op) {
      case BinaryOpType::ADD: r = x + y; break;
      case BinaryOpType::SUB: r = x - y; break;
      case BinaryOpType::MUL: r = x * y; break;
      case BinaryOpType::DIV: r = x / y; break;
      case BinaryOpType::MAX: r = std::isnan(x) || x > y ? x : y; break;  // NaN kept
      case BinaryOpType::MIN: r = std::isnan(x) || x < y ? x : y; break;
      case BinaryOpType::GREATER: r = x > y; break;  // (NaN compares false)
      case BinaryOpType::GREATER_EQUAL: r = x >= y; break;
      case BinaryOpType::LESS: r = x < y; break;
      case BinaryOpType::LESS_EQUAL: r = x <= y; break;
      case BinaryOpType::EQUAL: r = x == y; break;
    }
    v[i] = static_cast<float>(apply_activation(act, static_cast<float>(r)));
  }
  return Tensor::from_vector(v, shape, out, a.shape() == shape ? a.layout() : Layout::ROW_MAJOR);
}

StatusOr<Tensor> where(const Tensor& cond, const Tensor& a, const Tensor& b, DataType out) {
  for (const Tensor* t : {&cond, &a, &b}) TS_RETURN_IF_ERROR(require_host(*t, "where"));
  TS_ASSIGN_OR_RETURN(Shape ab, broadcast_shapes(a.shape(), b.shape()));
  TS_ASSIGN_OR_RETURN(Shape shape, broadcast_shapes(cond.shape(), ab));
  TS_ASSIGN_OR_RETURN(std::vector<float> vc, cond.to_vector());
  TS_ASSIGN_OR_RETURN(std::vector<float> va, a.to_vector());
  TS_ASSIGN_OR_RETURN(std::vector<float> vb, b.to_vector());
  std::vector<float> v(shape.volume());
  for (uint64_t i = 0; i < v.size(); ++i) {
    const bool c = vc[source_index(shape, cond.shape(), i)] != 0.0f;  // (NaN: true)
    v[i] = c ? va[source_index(shape, a.shape(), i)] : vb[source_index(shape, b.shape(), i)];
  }
  return Tensor::from_vector(v, shape, out);
}

StatusOr<Tensor> relu(const Tensor& input, DataType out) { return unary(input, {UnaryOpType::RELU}, out); }

StatusOr<Tensor> add(const Tensor& a, const Tensor& b, DataType out) {
  return binary(a, b, BinaryOpType::ADD, {}, out);
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
    TS_ASSIGN_OR_RETURN(Tensor t, reference::typecast(input, out));
    return host_to_layout(t, Layout::TILE);
  }
  TS_ASSIGN_OR_RETURN(std::vector<float> v, input.to_vector());
  return Tensor::from_vector(v, input.shape(), out, Layout::TILE);
}

StatusOr<Tensor> untilize(const Tensor& input, DataType out) {
  TS_RETURN_IF_ERROR(require_host(input, "untilize"));
  if (!is_floating(input.dtype())) {
    TS_ASSIGN_OR_RETURN(Tensor t, reference::typecast(input, out));
    return host_to_layout(t, Layout::ROW_MAJOR);
  }
  TS_ASSIGN_OR_RETURN(std::vector<float> v, input.to_vector());
  return Tensor::from_vector(v, input.shape(), out, Layout::ROW_MAJOR);
}

}  // namespace tessera::reference
