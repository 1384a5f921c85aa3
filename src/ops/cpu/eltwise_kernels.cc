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
    const bool binary = g.op == EltwiseOp::kBinary && !g.b_scalar;
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

// The scalar operand b as float.
float scalar_of(const EltwiseArgs& g) {
  float v;
  convert_to_float(g.b.base, g.b_type, &v, 1);
  return v;
}

Status eltwise_generic(const void* args, uint32_t begin, uint32_t end) {
  const auto& g = *static_cast<const EltwiseArgs*>(args);
  return for_each_chunk(g, begin, end, [&](const std::byte* a, const std::byte* b, std::byte* o, uint32_t n) {
    if (g.op == EltwiseOp::kTypecast) return convert_elements(a, g.a_type, o, g.out_type, n);
    alignas(64) float fa[kTileElements], fb[kTileElements];
    convert_to_float(a, g.a_type, fa, n);
    if (g.op == EltwiseOp::kBinary) {
      if (g.b_scalar) {
        std::fill_n(fb, n, scalar_of(g));
      } else {
        convert_to_float(b, g.b_type, fb, n);
      }
      g.math.binary(g.binary_op, fa, fb, fa, n);
    }
    g.math.unary(g.activation, fa, n);
    convert_from_float(fa, o, g.out_type, n);
  });
}

// float32 / bfloat16 operands: one pass per page in registers.
Status eltwise_fused(const void* args, uint32_t begin, uint32_t end) {
  const auto& g = *static_cast<const EltwiseArgs*>(args);
  const uint32_t ea = element_size(g.a_type), eb = element_size(g.b_type), eo = element_size(g.out_type);
  const bool binary = g.op == EltwiseOp::kBinary && !g.b_scalar;
  for (uint32_t p = begin; p < end; ++p) {
    const uint64_t first = uint64_t{p} * g.page_elements;
    std::byte* pa = g.flat ? g.a.base + first * ea : g.a.page(p);
    std::byte* pb = !binary ? nullptr : g.flat ? g.b.base + first * eb : g.b.page(p);
    std::byte* po = g.flat ? g.out.base + first * eo : g.out.page(p);
    const size_t n = g.flat ? std::min<uint64_t>(g.page_elements, g.total_elements - first) : g.page_elements;
    if (g.b_scalar) {  // a tile of the scalar as operand b
      alignas(64) float fb[kTileElements];
      std::fill_n(fb, kTileElements, scalar_of(g));
      const uint32_t sa = g.a_type == DataType::BFLOAT16 ? 2 : 4, so = g.out_type == DataType::BFLOAT16 ? 2 : 4;
      for (size_t i = 0; i < n; i += kTileElements) {
        const FusedOperand a{pa + i * sa, g.a_type == DataType::BFLOAT16},
            b{reinterpret_cast<std::byte*>(fb), false}, out{po + i * so, g.out_type == DataType::BFLOAT16};
        g.math.fused(a, &b, out, g.binary_op, g.activation, std::min<size_t>(kTileElements, n - i));
      }
      continue;
    }
    const FusedOperand a{pa, g.a_type == DataType::BFLOAT16}, b{pb, g.b_type == DataType::BFLOAT16},
        out{po, g.out_type == DataType::BFLOAT16};
    g.math.fused(a, binary ? &b : nullptr, out, g.binary_op, g.activation, n);
  }
  return Status();
}

}  // namespace

KernelFn select_eltwise_kernel(const EltwiseArgs& g, std::string_view op_name, std::string* name) {
  auto row_float = [](DataType t) { return t == DataType::FLOAT32 || t == DataType::BFLOAT16; };
  if (g.math.fused && g.op != EltwiseOp::kTypecast && row_float(g.a_type) && row_float(g.out_type) &&
      (g.op != EltwiseOp::kBinary || row_float(g.b_type))) {
    *name = fmt::format("{}_{}__{}_fused", short_dtype_name(g.out_type), op_name, g.math.isa);
    return eltwise_fused;
  }
  *name = fmt::format("any_{}__{}", op_name, g.op == EltwiseOp::kTypecast ? "generic" : g.math.isa);
  return eltwise_generic;
}

Status broadcast_kernel(const void* raw, uint32_t row_begin, uint32_t row_end) {
  const auto& g = *static_cast<const BroadcastArgs*>(raw);
  if (g.out_row_stride) {
    for (uint32_t r = row_begin; r < row_end; ++r) {
      uint32_t ra = 0, rb = 0;
      ops::broadcast_indices(r, g.num_lead, g.lead, g.a_stride, g.b_stride, &ra, &rb);
      const FusedOperand a{g.a.base + ra * g.a_row_stride, g.a_type == DataType::BFLOAT16},
          b{g.b.base + rb * g.b_row_stride, g.b_type == DataType::BFLOAT16},
          out{g.out.base + r * g.out_row_stride, g.out_type == DataType::BFLOAT16};
      g.math.fused(a, &b, out, g.binary_op, g.activation, g.cols);
    }
    return Status();
  }
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
