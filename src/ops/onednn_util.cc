#include "onednn_util.h"

#include <algorithm>

#include "tessera/numerics/convert.h"

namespace tessera::onednn {

uint64_t dense_row_stride(const TensorAccess& a) {
  return a.kind != TensorAccess::Kind::kInterleavedTiles && a.is_packed() ? uint64_t{a.cols} * a.unit_bytes : 0;
}

bool append_activation(dnnl::post_ops& po, const UnaryWithParam& a) {
  using A = dnnl::algorithm;
  switch (a.op) {
    case UnaryOpType::IDENTITY: return true;
    case UnaryOpType::RELU: po.append_eltwise(1.f, A::eltwise_relu, 0.f, 0.f); return true;
    case UnaryOpType::LEAKY_RELU: po.append_eltwise(1.f, A::eltwise_relu, a.param, 0.f); return true;
    case UnaryOpType::RELU6: po.append_eltwise(1.f, A::eltwise_clip, 0.f, 6.f); return true;
    case UnaryOpType::SILU: po.append_eltwise(1.f, A::eltwise_swish, 1.f, 0.f); return true;
    case UnaryOpType::GELU: po.append_eltwise(1.f, A::eltwise_gelu_erf, 0.f, 0.f); return true;
    case UnaryOpType::SIGMOID: po.append_eltwise(1.f, A::eltwise_logistic, 0.f, 0.f); return true;
    case UnaryOpType::TANH: po.append_eltwise(1.f, A::eltwise_tanh, 0.f, 0.f); return true;
    case UnaryOpType::HARDSWISH: po.append_eltwise(1.f, A::eltwise_hardswish, 0.f, 0.f); return true;
    case UnaryOpType::MISH: po.append_eltwise(1.f, A::eltwise_mish, 0.f, 0.f); return true;
    case UnaryOpType::EXP: po.append_eltwise(1.f, A::eltwise_exp, 0.f, 0.f); return true;
    case UnaryOpType::SQRT: po.append_eltwise(1.f, A::eltwise_sqrt, 0.f, 0.f); return true;
    case UnaryOpType::HARDSIGMOID: return false;
  }
  return false;
}

void gather_rows(const TensorAccess& a, uint64_t r0, uint64_t r1, std::byte* out) {
  for (uint64_t r = r0; r < r1; ++r)
    for (uint32_t c = 0; c < a.cols;) {
      uint32_t run = 0;
      const std::byte* p = a.unit(static_cast<uint32_t>(r), c, &run);
      std::memcpy(out + ((r - r0) * a.cols + c) * a.unit_bytes, p, uint64_t{run} * a.unit_bytes);
      c += run;
    }
}

void scatter_rows(const TensorAccess& a, uint64_t r0, uint64_t r1, const std::byte* in) {
  for (uint64_t r = r0; r < r1; ++r)
    for (uint32_t c = 0; c < a.cols;) {
      uint32_t run = 0;
      std::byte* p = a.unit(static_cast<uint32_t>(r), c, &run);
      std::memcpy(p, in + ((r - r0) * a.cols + c) * a.unit_bytes, uint64_t{run} * a.unit_bytes);
      c += run;
    }
}

void apply_activation_in_place(const UnaryWithParam& act, DataType t, std::byte* data, uint64_t elements) {
  float buf[kTileElements];
  const uint32_t es = element_size(t);
  for (uint64_t i = 0; i < elements; i += kTileElements) {
    const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(kTileElements, elements - i));
    convert_to_float(data + i * es, t, buf, n);
    for (uint32_t k = 0; k < n; ++k) buf[k] = static_cast<float>(apply_activation(act, buf[k]));
    convert_from_float(buf, data + i * es, t, n);
  }
}

}  // namespace tessera::onednn
