#include "eltwise_kernels.h"

#include <algorithm>

#include "tessera/base/cpu_features.h"
#include "tessera/numerics/convert.h"

namespace tessera::cpu {

namespace {

// Calls body(a, b, out, n, byte offsets...) for each <=1024-element chunk of
// each page in [begin, end).
template <class Body>
Status for_each_chunk(const EltwiseArgs& g, uint32_t begin, uint32_t end, Body body) {
  const uint32_t ca = tile_size_bytes(g.a_type), cb = tile_size_bytes(g.b_type), co = tile_size_bytes(g.out_type);
  for (uint32_t p = begin; p < end; ++p) {
    const std::byte* pa = g.a.page(p);
    const std::byte* pb = g.op == EltwiseOp::kAdd ? g.b.page(p) : nullptr;
    std::byte* po = g.out.page(p);
    for (uint32_t i = 0, k = 0; i < g.page_elements; i += kTileElements, ++k) {
      uint32_t n = std::min(kTileElements, g.page_elements - i);
      body(pa + size_t{k} * ca, pb ? pb + size_t{k} * cb : nullptr, po + size_t{k} * co, n);
    }
  }
  return Status();
}

Status eltwise_generic(const void* args, uint32_t begin, uint32_t end) {
  const auto& g = *static_cast<const EltwiseArgs*>(args);
  return for_each_chunk(g, begin, end, [&](const std::byte* a, const std::byte* b, std::byte* o, uint32_t n) {
    if (g.op == EltwiseOp::kTypecast) return convert_elements(a, g.a_type, o, g.out_type, n);
    float fa[kTileElements], fb[kTileElements];
    convert_to_float(a, g.a_type, fa, n);
    if (g.op == EltwiseOp::kAdd) {
      convert_to_float(b, g.b_type, fb, n);
      for (uint32_t i = 0; i < n; ++i) fa[i] += fb[i];
    } else {
      for (uint32_t i = 0; i < n; ++i) fa[i] = fa[i] < 0.0f ? 0.0f : fa[i];
    }
    convert_from_float(fa, o, g.out_type, n);
  });
}

Status relu_f32_avx512(const void* args, uint32_t begin, uint32_t end) {
  const auto& g = *static_cast<const EltwiseArgs*>(args);
  return for_each_chunk(g, begin, end, [](const std::byte* a, const std::byte*, std::byte* o, uint32_t n) {
    avx512::relu_f32(reinterpret_cast<const float*>(a), reinterpret_cast<float*>(o), n);
  });
}
Status add_f32_avx512(const void* args, uint32_t begin, uint32_t end) {
  const auto& g = *static_cast<const EltwiseArgs*>(args);
  return for_each_chunk(g, begin, end, [](const std::byte* a, const std::byte* b, std::byte* o, uint32_t n) {
    avx512::add_f32(reinterpret_cast<const float*>(a), reinterpret_cast<const float*>(b), reinterpret_cast<float*>(o),
                    n);
  });
}
Status relu_bf16_avx512(const void* args, uint32_t begin, uint32_t end) {
  const auto& g = *static_cast<const EltwiseArgs*>(args);
  return for_each_chunk(g, begin, end, [](const std::byte* a, const std::byte*, std::byte* o, uint32_t n) {
    avx512::relu_bf16(reinterpret_cast<const uint16_t*>(a), reinterpret_cast<uint16_t*>(o), n);
  });
}
Status add_bf16_avx512(const void* args, uint32_t begin, uint32_t end) {
  const auto& g = *static_cast<const EltwiseArgs*>(args);
  return for_each_chunk(g, begin, end, [](const std::byte* a, const std::byte* b, std::byte* o, uint32_t n) {
    avx512::add_bf16(reinterpret_cast<const uint16_t*>(a), reinterpret_cast<const uint16_t*>(b),
                     reinterpret_cast<uint16_t*>(o), n);
  });
}

}  // namespace

KernelFn select_eltwise_kernel(EltwiseOp op, DataType a, DataType b, DataType out, std::string* name) {
  const char* op_name = op == EltwiseOp::kRelu ? "relu" : op == EltwiseOp::kAdd ? "add" : "typecast";
  const bool same = a == out && (op != EltwiseOp::kAdd || b == out);
  if (avx512_kernels_enabled() && same && op != EltwiseOp::kTypecast &&
      (out == DataType::FLOAT32 || out == DataType::BFLOAT16)) {
    const bool f32 = out == DataType::FLOAT32;
    *name = fmt::format("{}_{}__avx512", f32 ? "f32" : "bf16", op_name);
    if (op == EltwiseOp::kRelu) return f32 ? relu_f32_avx512 : relu_bf16_avx512;
    return f32 ? add_f32_avx512 : add_bf16_avx512;
  }
  *name = fmt::format("any_{}__generic", op_name);
  return eltwise_generic;
}

}  // namespace tessera::cpu
