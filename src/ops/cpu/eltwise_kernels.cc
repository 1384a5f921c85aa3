#include "eltwise_kernels.h"

#include <algorithm>

#include "../op_common.h"
#include "rows.h"
#include "tessera/base/cpu_features.h"
#include "tessera/numerics/convert.h"

namespace tessera::cpu {

namespace {

// Calls body(a, b, out, n) for each <=1024-element chunk of each page in
// [begin, end).
template <class Body>
Status for_each_chunk(const EltwiseArgs& g, uint32_t begin, uint32_t end, Body body) {
  const uint32_t ca = tile_size_bytes(g.a_type), cb = tile_size_bytes(g.b_type), co = tile_size_bytes(g.out_type);
  const uint64_t tiles_per_page = g.page_elements / kTileElements;
  for (uint32_t p = begin; p < end; ++p) {
    const bool binary = g.op == EltwiseOp::kBinary;
    const std::byte* pa = g.flat ? g.a.base + p * tiles_per_page * ca : g.a.page(p);
    const std::byte* pb = !binary ? nullptr : g.flat ? g.b.base + p * tiles_per_page * cb : g.b.page(p);
    std::byte* po = g.flat ? g.out.base + p * tiles_per_page * co : g.out.page(p);
    const uint32_t elements =
        g.flat ? static_cast<uint32_t>(std::min<uint64_t>(g.page_elements, g.total_elements - uint64_t{p} * g.page_elements))
               : g.page_elements;
    for (uint32_t i = 0, k = 0; i < elements; i += kTileElements, ++k) {
      uint32_t n = std::min(kTileElements, elements - i);
      body(pa + size_t{k} * ca, pb ? pb + size_t{k} * cb : nullptr, po + size_t{k} * co, n);
    }
  }
  return Status();
}

Status eltwise_generic(const void* args, uint32_t begin, uint32_t end) {
  const auto& g = *static_cast<const EltwiseArgs*>(args);
  return for_each_chunk(g, begin, end, [&](const std::byte* a, const std::byte* b, std::byte* o, uint32_t n) {
    if (g.op == EltwiseOp::kTypecast) return convert_elements(a, g.a_type, o, g.out_type, n);
    alignas(64) float fa[kTileElements], fb[kTileElements];
    convert_to_float(a, g.a_type, fa, n);
    if (g.op == EltwiseOp::kBinary) {
      convert_to_float(b, g.b_type, fb, n);
      g.math.binary(g.binary_op, fa, fb, fa, n);
    }
    g.math.unary(g.activation, fa, n);
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

KernelFn select_eltwise_kernel(const EltwiseArgs& g, std::string_view op_name, std::string* name) {
  const DataType out = g.out_type;
  const bool same = g.a_type == out && (g.op != EltwiseOp::kBinary || g.b_type == out);
  const bool plain_relu = g.op == EltwiseOp::kUnary && g.activation.op == UnaryOpType::RELU;
  const bool plain_add = g.op == EltwiseOp::kBinary && g.binary_op == BinaryOpType::ADD &&
                         g.activation.op == UnaryOpType::IDENTITY;
  if (avx512_kernels_enabled() && same && (plain_relu || plain_add) &&
      (out == DataType::FLOAT32 || out == DataType::BFLOAT16)) {
    const bool f32 = out == DataType::FLOAT32;
    *name = fmt::format("{}_{}__avx512", f32 ? "f32" : "bf16", op_name);
    if (plain_relu) return f32 ? relu_f32_avx512 : relu_bf16_avx512;
    return f32 ? add_f32_avx512 : add_bf16_avx512;
  }
  *name = fmt::format("any_{}__{}", op_name, g.op == EltwiseOp::kTypecast ? "generic" : g.math.isa);
  return eltwise_generic;
}

Status broadcast_kernel(const void* raw, uint32_t row_begin, uint32_t row_end) {
  const auto& g = *static_cast<const BroadcastArgs*>(raw);
  alignas(64) float fa[kTileElements], fb[kTileElements];
  for (uint32_t r = row_begin; r < row_end; ++r) {
    uint32_t ra = 0, rb = 0;
    ops::broadcast_indices(r, g.num_lead, g.lead, g.a_stride, g.b_stride, &ra, &rb);
    for (uint32_t c = 0; c < g.cols; c += kTileElements) {
      const uint32_t n = std::min(kTileElements, g.cols - c);
      if (g.a_col_broadcast) {
        read_row(g.a, g.a_type, ra, 0, 1, fa);
        std::fill_n(fa + 1, n - 1, fa[0]);
      } else {
        read_row(g.a, g.a_type, ra, c, n, fa);
      }
      if (g.b_col_broadcast) {
        read_row(g.b, g.b_type, rb, 0, 1, fb);
        std::fill_n(fb + 1, n - 1, fb[0]);
      } else {
        read_row(g.b, g.b_type, rb, c, n, fb);
      }
      g.math.binary(g.binary_op, fa, fb, fa, n);
      g.math.unary(g.activation, fa, n);
      write_row(g.out, g.out_type, r, c, n, fa);
    }
  }
  return Status();
}

}  // namespace tessera::cpu
