// Host reference kernels of ONNX's quantization ops: QuantizeLinear,
// DequantizeLinear, DynamicQuantizeLinear, ConvInteger, MatMulInteger,
// QLinearConv, QLinearMatMul. Integers are INT64 HostTensors; the integer
// type a quantizer saturates to is the node's tessera_quant_type (the
// importer records it from the zero point's type). Scaling and rounding are
// float32 arithmetic, as ONNX Runtime's kernels do it (x / scale, then round
// half to even), so results agree with it bit for bit; the integer products
// of the Integer / QLinear ops go through the float conv and matmul kernels,
// exact while a sum stays below 2^24.
#include <cmath>

#include "host_kernels.h"
#include "host_spatial.h"

namespace tessera::graph::host {
namespace {

StatusOr<QuantRange> checked_range(const Node& n) {
  if (const auto r = quant_range(n)) return *r;
  return unimplemented_error("{}: quantizing to {} (Tessera quantizes to uint8, int8, uint16 and int16)", n.label(),
                             n.attr_string("tessera_quant_type", "uint8"));
}

// Round half to even, then the zero point, then saturate; NaN quantizes to
// the zero point (an integer has no NaN; ONNX leaves it undefined).
int64_t quantize(float x, float scale, double zero_point, QuantRange r) {
  const float q = std::nearbyint(x / scale);
  if (std::isnan(q)) return static_cast<int64_t>(zero_point);
  return static_cast<int64_t>(std::clamp(double{q} + zero_point, r.lo, r.hi));
}

// Which element of a per-tensor (one value) or per-axis (dims[axis] values)
// scale or zero point applies to element `flat` of a tensor of dims `d`.
struct Broadcast {
  int64_t axis_len = 1, inner = 1;  // axis_len 1: per tensor
  size_t at(size_t flat) const { return axis_len == 1 ? 0 : static_cast<size_t>(flat / inner % axis_len); }
};

StatusOr<Broadcast> per_axis(const Node& n, const Dims& d, const HostTensor& scale, const HostTensor* zp) {
  Broadcast b;
  if (scale.volume() == 1 && scale.dims.size() <= 1) {
    if (zp && zp->volume() != 1)
      return invalid_argument_error("{}: a scalar scale with a zero point of {} values", n.label(), zp->volume());
    return b;
  }
  const int64_t axis = norm_axis(n.attr_int("axis", 1), d.size());
  TS_RETURN_IF_ERROR(check_axis(n, axis, d.size()));
  if (scale.dims.size() != 1 || scale.dims[0] != d[static_cast<size_t>(axis)])
    return invalid_argument_error("{}: scale of shape {}, expected a scalar or ({}) along axis {} of {}", n.label(),
                                  dims_to_string(scale.dims), d[static_cast<size_t>(axis)], axis, dims_to_string(d));
  if (zp && zp->dims != scale.dims)
    return invalid_argument_error("{}: zero point of shape {}, the scale's is {}", n.label(), dims_to_string(zp->dims),
                                  dims_to_string(scale.dims));
  b.axis_len = d[static_cast<size_t>(axis)];
  for (size_t k = static_cast<size_t>(axis) + 1; k < d.size(); ++k) b.inner *= d[k];
  return b;
}

double zero_point_at(const HostTensor* zp, size_t k) { return zp ? zp->at(k) : 0.0; }

// x - zero point as floats (ConvInteger, MatMulInteger, the QLinear ops);
// per-axis zero points (a weight's, per output channel) along `axis`.
StatusOr<HostTensor> centered(const Node& n, const HostTensor& x, const HostTensor* zp, int64_t axis) {
  HostTensor y = make(ElemType::FLOAT32, x.dims);
  Broadcast b;
  if (zp && zp->volume() != 1) {
    if (zp->dims.size() != 1 || x.dims.empty() || axis >= static_cast<int64_t>(x.dims.size()) ||
        zp->dims[0] != x.dims[static_cast<size_t>(axis)])
      return invalid_argument_error("{}: zero point of shape {} for an input of shape {}", n.label(),
                                    dims_to_string(zp->dims), dims_to_string(x.dims));
    b.axis_len = zp->dims[0];
    for (size_t k = static_cast<size_t>(axis) + 1; k < x.dims.size(); ++k) b.inner *= x.dims[k];
  }
  for (size_t k = 0; k < x.size(); ++k) y.f[k] = static_cast<float>(x.at(k) - zero_point_at(zp, b.at(k)));
  return y;
}

HostTensor to_ints(const HostTensor& acc) {
  HostTensor y = make(ElemType::INT64, acc.dims);
  for (size_t k = 0; k < acc.size(); ++k) y.i[k] = std::llround(acc.f[k]);
  return y;
}

// The integer conv of QLinearConv / ConvInteger: x and w centered, through
// the float reference conv.
StatusOr<HostTensor> integer_conv(const Node& n, const HostTensor& x, const HostTensor* xzp, const HostTensor& w,
                                  const HostTensor* wzp) {
  if (xzp && xzp->volume() != 1)
    return invalid_argument_error("{}: the input's zero point must be a scalar, got {}", n.label(),
                                  dims_to_string(xzp->dims));
  TS_ASSIGN_OR_RETURN(HostTensor xc, centered(n, x, xzp, 0));
  TS_ASSIGN_OR_RETURN(HostTensor wc, centered(n, w, wzp, 0));
  const HostTensor* args[] = {&xc, &wc};
  TS_ASSIGN_OR_RETURN(std::vector<HostTensor> y, conv(n, args));
  return std::move(y[0]);
}

// The integer product of QLinearMatMul / MatMulInteger: a's zero point per
// row (M) or scalar, b's per column (N) or scalar.
StatusOr<HostTensor> integer_matmul(const Node& n, const HostTensor& a, const HostTensor* azp, const HostTensor& b,
                                    const HostTensor* bzp) {
  TS_ASSIGN_OR_RETURN(HostTensor ac, centered(n, a, azp, static_cast<int64_t>(a.dims.size()) - 2));
  TS_ASSIGN_OR_RETURN(HostTensor bc, centered(n, b, bzp, static_cast<int64_t>(b.dims.size()) - 1));
  return matmul(n, ac, bc);
}

// acc * multiplier[c] (per channel along axis 1, or one), rounded, plus the
// zero point, saturated: ONNX Runtime's requantization.
StatusOr<HostTensor> requantize(const Node& n, const HostTensor& acc, const std::vector<float>& multiplier,
                                double zero_point) {
  TS_ASSIGN_OR_RETURN(const QuantRange r, checked_range(n));
  HostTensor y = make(ElemType::INT64, acc.dims);
  int64_t inner = 1;
  for (size_t k = 2; k < acc.dims.size(); ++k) inner *= acc.dims[k];
  const auto channels = static_cast<int64_t>(multiplier.size());
  for (size_t k = 0; k < acc.size(); ++k) {
    const float m = multiplier[channels == 1 ? 0 : static_cast<size_t>(static_cast<int64_t>(k) / inner % channels)];
    y.i[k] = quantize(acc.f[k] * m, 1.0f, zero_point, r);
  }
  return y;
}

Status need_scalar(const Node& n, Ins ins, size_t k, const char* what) {
  TS_RETURN_IF_ERROR(need(n, ins, k));
  if (ins[k]->volume() != 1)
    return invalid_argument_error("{}: {} must be a scalar, got {}", n.label(), what, dims_to_string(ins[k]->dims));
  return ok_status();
}

}  // namespace

std::optional<QuantRange> quant_range(const Node& n) {
  const std::string t = n.attr_string("tessera_quant_type", "uint8");
  if (t == "uint8") return QuantRange{0, 255};
  if (t == "int8") return QuantRange{-128, 127};
  if (t == "uint16") return QuantRange{0, 65535};
  if (t == "int16") return QuantRange{-32768, 32767};
  return std::nullopt;
}

StatusOr<HostTensor> quantize_linear(const Node& n, Ins ins) {
  TS_RETURN_IF_ERROR(need(n, ins, 0));
  TS_RETURN_IF_ERROR(need(n, ins, 1));
  const HostTensor &x = *ins[0], &scale = *ins[1];
  const HostTensor* zp = in(ins, 2);
  TS_ASSIGN_OR_RETURN(const QuantRange r, checked_range(n));
  TS_ASSIGN_OR_RETURN(const Broadcast b, per_axis(n, x.dims, scale, zp));
  HostTensor y = make(ElemType::INT64, x.dims);
  for (size_t k = 0; k < x.size(); ++k) {
    const size_t c = b.at(k);
    y.i[k] = quantize(static_cast<float>(x.at(k)), static_cast<float>(scale.at(c)), zero_point_at(zp, c), r);
  }
  return y;
}

StatusOr<HostTensor> dequantize_linear(const Node& n, Ins ins) {
  TS_RETURN_IF_ERROR(need(n, ins, 0));
  TS_RETURN_IF_ERROR(need(n, ins, 1));
  const HostTensor &x = *ins[0], &scale = *ins[1];
  const HostTensor* zp = in(ins, 2);
  TS_ASSIGN_OR_RETURN(const Broadcast b, per_axis(n, x.dims, scale, zp));
  HostTensor y = make(ElemType::FLOAT32, x.dims);
  for (size_t k = 0; k < x.size(); ++k) {
    const size_t c = b.at(k);
    y.f[k] = static_cast<float>(x.at(k) - zero_point_at(zp, c)) * static_cast<float>(scale.at(c));
  }
  return y;
}

StatusOr<std::vector<HostTensor>> dynamic_quantize_linear(const HostTensor& x) {
  // The range always holds 0; NaN elements take no part in it.
  float lo = 0, hi = 0;
  for (size_t k = 0; k < x.size(); ++k) {
    const auto v = static_cast<float>(x.at(k));
    if (v < lo) lo = v;
    if (v > hi) hi = v;
  }
  // An empty range (x all zeros) has scale 1, as ONNX Runtime's.
  const float scale = hi == lo ? 1.0f : (hi - lo) / 255.0f;
  const float zp = std::nearbyint(std::clamp(0.0f - lo / scale, 0.0f, 255.0f));
  HostTensor y = make(ElemType::INT64, x.dims);
  for (size_t k = 0; k < x.size(); ++k) y.i[k] = quantize(static_cast<float>(x.at(k)), scale, zp, {0, 255});
  return std::vector<HostTensor>{std::move(y), HostTensor::floats({}, {scale}),
                                 HostTensor::ints({}, {static_cast<int64_t>(zp)})};
}

StatusOr<HostTensor> conv_integer(const Node& n, Ins ins) {
  TS_RETURN_IF_ERROR(need(n, ins, 0));
  TS_RETURN_IF_ERROR(need(n, ins, 1));
  TS_ASSIGN_OR_RETURN(HostTensor acc, integer_conv(n, *ins[0], in(ins, 2), *ins[1], in(ins, 3)));
  return to_ints(acc);
}

StatusOr<HostTensor> matmul_integer(const Node& n, Ins ins) {
  TS_RETURN_IF_ERROR(need(n, ins, 0));
  TS_RETURN_IF_ERROR(need(n, ins, 1));
  TS_ASSIGN_OR_RETURN(HostTensor acc, integer_matmul(n, *ins[0], in(ins, 2), *ins[1], in(ins, 3)));
  return to_ints(acc);
}

StatusOr<HostTensor> qlinear_conv(const Node& n, Ins ins) {
  // x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B
  for (size_t k : {size_t{0}, size_t{3}, size_t{4}}) TS_RETURN_IF_ERROR(need(n, ins, k));
  for (size_t k : {size_t{1}, size_t{6}}) TS_RETURN_IF_ERROR(need_scalar(n, ins, k, k == 1 ? "x_scale" : "y_scale"));
  const HostTensor &w = *ins[3], &ws = *ins[4];
  const int64_t M = w.dims.empty() ? 0 : w.dims[0];
  if (ws.volume() != 1 && ws.volume() != M)
    return invalid_argument_error("{}: w_scale has {} values for {} output channels", n.label(), ws.volume(), M);
  TS_ASSIGN_OR_RETURN(HostTensor acc, integer_conv(n, *ins[0], in(ins, 2), w, in(ins, 5)));
  if (const HostTensor* bias = in(ins, 8)) {
    if (bias->volume() != M)
      return invalid_argument_error("{}: bias has {} values for {} output channels", n.label(), bias->volume(), M);
    const int64_t inner = acc.volume() / std::max<int64_t>(1, acc.dims[0] * M);
    for (size_t k = 0; k < acc.size(); ++k)
      acc.f[k] += static_cast<float>(bias->at(static_cast<size_t>(static_cast<int64_t>(k) / inner % M)));
  }
  std::vector<float> multiplier;
  for (size_t c = 0; c < ws.size(); ++c)
    multiplier.push_back(static_cast<float>(ins[1]->at(0)) * static_cast<float>(ws.at(c)) /
                         static_cast<float>(ins[6]->at(0)));
  return requantize(n, acc, multiplier, zero_point_at(in(ins, 7), 0));
}

StatusOr<HostTensor> quantized_conv(const Node& n, Ins ins) {
  TS_RETURN_IF_ERROR(need(n, ins, 0));
  TS_RETURN_IF_ERROR(need(n, ins, 1));
  const auto s = n.attr_float("input_scale", 1.0f);
  const int64_t zp = n.attr_int("input_zero_point", 0);
  const std::vector<float> ws = n.attr_floats("weight_scales");
  const HostTensor& x = *ins[0];
  const int64_t M = ins[1]->dims.empty() ? 0 : ins[1]->dims[0];
  if (ws.size() != 1 && static_cast<int64_t>(ws.size()) != M)
    return invalid_argument_error("{}: {} weight scales for {} output channels", n.label(), ws.size(), M);
  HostTensor xc = make(ElemType::FLOAT32, x.dims);
  for (size_t k = 0; k < x.size(); ++k) {
    const auto v = static_cast<float>(x.at(k));
    xc.f[k] = std::isnan(v) ? v : static_cast<float>(quantize(v, s, static_cast<double>(zp), QuantRange{0, 255}) - zp);
  }
  const HostTensor* args[] = {&xc, ins[1]};
  TS_ASSIGN_OR_RETURN(std::vector<HostTensor> y, conv(n, args));
  HostTensor& acc = y[0];
  const HostTensor* bias = in(ins, 2);
  if (bias && bias->volume() != M)
    return invalid_argument_error("{}: bias has {} values for {} output channels", n.label(), bias->volume(), M);
  const int64_t inner = acc.volume() / std::max<int64_t>(1, acc.dims[0] * M);
  for (size_t k = 0; k < acc.size(); ++k) {
    const auto c = static_cast<size_t>(static_cast<int64_t>(k) / inner % M);
    const float scaled = s * ws[ws.size() == 1 ? 0 : c] * acc.f[k];  // (s * ws first, as the device)
    acc.f[k] = scaled + (bias ? static_cast<float>(bias->at(c)) : 0.0f);
  }
  // The output's QuantizeLinear -> DequantizeLinear (fuse_quantized_convs),
  // after its Relu (which evaluate_fused applies again, to the same values).
  if (n.has_attr("output_scale")) {
    const float os = n.attr_float("output_scale", 1.0f);
    const auto oz = static_cast<double>(n.attr_int("output_zero_point", 0));
    const QuantRange r{static_cast<double>(n.attr_int("output_lo", 0)),
                       static_cast<double>(n.attr_int("output_hi", 255))};
    const bool relu = n.attr_string("tessera_activation", "") == "relu";
    for (float& v : acc.f) {
      if (relu && v < 0) v = 0;
      if (!std::isnan(v)) v = static_cast<float>(static_cast<double>(quantize(v, os, oz, r)) - oz) * os;
    }
  }
  return std::move(acc);
}

StatusOr<HostTensor> qlinear_matmul(const Node& n, Ins ins) {
  // a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point
  for (size_t k : {size_t{0}, size_t{3}}) TS_RETURN_IF_ERROR(need(n, ins, k));
  for (size_t k : {size_t{1}, size_t{4}, size_t{6}}) TS_RETURN_IF_ERROR(need_scalar(n, ins, k, "a scale"));
  for (size_t k : {size_t{2}, size_t{5}, size_t{7}})
    if (in(ins, k)) TS_RETURN_IF_ERROR(need_scalar(n, ins, k, "a zero point"));
  TS_ASSIGN_OR_RETURN(HostTensor acc, integer_matmul(n, *ins[0], in(ins, 2), *ins[3], in(ins, 5)));
  const float m =
      static_cast<float>(ins[1]->at(0)) * static_cast<float>(ins[4]->at(0)) / static_cast<float>(ins[6]->at(0));
  return requantize(n, acc, {m}, zero_point_at(in(ins, 7), 0));
}

}  // namespace tessera::graph::host
