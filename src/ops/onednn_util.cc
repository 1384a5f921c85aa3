#include "onednn_util.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "cpu/float_math.h"
#include "cpu/rows.h"
#include "tessera/base/cpu_features.h"
#include "tessera/numerics/bfloat16.h"
#include "tessera/numerics/block_float.h"
#include "tessera/numerics/convert.h"
#include "tessera/numerics/tilize.h"

namespace tessera::onednn {

uint64_t dense_row_stride(const TensorAccess& a) {
  return a.kind != TensorAccess::Kind::kInterleavedTiles && a.is_packed() ? uint64_t{a.cols} * a.unit_bytes : 0;
}

bool append_activation(dnnl::post_ops& po, const UnaryWithParam& a) {
  using A = dnnl::algorithm;
  if (a.has_affine()) {
    if (!append_activation(po, a.without_affine())) return false;
    po.append_eltwise(1.f, A::eltwise_linear, a.scale, a.shift);
    return true;
  }
  switch (a.op) {
    case UnaryOpType::IDENTITY: return true;
    // oneDNN's relu of slope 0 is max(x, 0) and its clip max / min against
    // the bounds: a NaN becomes 0 or 6. Tessera's kernels keep it (ONNX and
    // PyTorch do), after the primitive, while the rows are in the cache.
    case UnaryOpType::RELU: return false;
    case UnaryOpType::RELU6: return false;
    case UnaryOpType::LEAKY_RELU:  // a slope blends x and slope * x: NaN stays
      if (a.param == 0.f) return false;
      po.append_eltwise(1.f, A::eltwise_relu, a.param, 0.f);
      return true;
    case UnaryOpType::SILU: po.append_eltwise(1.f, A::eltwise_swish, 1.f, 0.f); return true;
    case UnaryOpType::GELU: po.append_eltwise(1.f, A::eltwise_gelu_erf, 0.f, 0.f); return true;
    case UnaryOpType::SIGMOID: po.append_eltwise(1.f, A::eltwise_logistic, 0.f, 0.f); return true;
    case UnaryOpType::TANH: po.append_eltwise(1.f, A::eltwise_tanh, 0.f, 0.f); return true;
    case UnaryOpType::HARDSWISH: po.append_eltwise(1.f, A::eltwise_hardswish, 0.f, 0.f); return true;
    case UnaryOpType::MISH: po.append_eltwise(1.f, A::eltwise_mish, 0.f, 0.f); return true;
    case UnaryOpType::EXP: po.append_eltwise(1.f, A::eltwise_exp, 0.f, 0.f); return true;
    case UnaryOpType::SQRT: po.append_eltwise(1.f, A::eltwise_sqrt, 0.f, 0.f); return true;
    case UnaryOpType::HARDSIGMOID: return false;
    case UnaryOpType::ELU: po.append_eltwise(1.f, A::eltwise_elu, a.param, 0.f); return true;
    case UnaryOpType::NEG: po.append_eltwise(1.f, A::eltwise_linear, -1.f, 0.f); return true;
    case UnaryOpType::ABS: po.append_eltwise(1.f, A::eltwise_abs, 0.f, 0.f); return true;
    case UnaryOpType::GELU_TANH: po.append_eltwise(1.f, A::eltwise_gelu_tanh, 0.f, 0.f); return true;
    // No erf in oneDNN 2.6's eltwise; its pow(x, -1) is not 1 / x rounded once.
    case UnaryOpType::ERF:
    case UnaryOpType::RECIPROCAL:
    case UnaryOpType::LOG:  // (Tessera's own log and pow, for the same results on every path)
    case UnaryOpType::POW:
    // Tessera's own: NaN kept (clip, thresholded_relu, sign), every path alike.
    case UnaryOpType::SOFTPLUS:
    case UnaryOpType::SOFTSIGN:
    case UnaryOpType::CELU:
    case UnaryOpType::THRESHOLDED_RELU:
    case UnaryOpType::CLIP:
    case UnaryOpType::FLOOR:
    case UnaryOpType::CEIL:
    case UnaryOpType::ROUND:
    case UnaryOpType::SIGN:
    case UnaryOpType::TO_FLOAT16:
    case UnaryOpType::TO_BFLOAT16: return false;
  }
  return false;
}

bool runs_activation(const UnaryWithParam& a) {
  dnnl::post_ops probe;
  return append_activation(probe, a);
}

bool has_bf16_kernels() {
  static const bool has = [] {
    try {
      const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
      const dnnl::memory::desc md({16, 16}, dnnl::memory::data_type::bf16, dnnl::memory::format_tag::ab);
      dnnl::matmul::primitive_desc(dnnl::matmul::desc(md, md, md), engine);
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return has;
}

bool lofi_computes_in_bf16(MathFidelity fidelity) {
  return fidelity == MathFidelity::LoFi && kernel_isa() == KernelIsa::kAvx512 && cpu_features().amx_bf16 &&
         has_bf16_kernels();
}

DataType kernel_type(DataType t) { return t == DataType::BFLOAT16 && !has_bf16_kernels() ? DataType::FLOAT32 : t; }

namespace {

// memcpy of a short run: whole 16-byte pieces inline, the rest by memcpy.
inline void copy_small(void* dst, const void* src, uint64_t bytes) {
  auto* d = static_cast<std::byte*>(dst);
  const auto* s = static_cast<const std::byte*>(src);
  if (bytes % 16 != 0) return void(std::memcpy(d, s, bytes));
  for (uint64_t i = 0; i < bytes; i += 16) std::memcpy(d + i, s + i, 16);
}

template <bool kToBuffer, class Buf>
void move_rows(const TensorAccess& a, DataType t, uint64_t r0, uint64_t r1, uint32_t c0, uint32_t n, Buf* buf,
               DataType buf_type, uint32_t buf_cols = 0) {
  const bool convert = t != buf_type;
  const uint32_t pitch = buf_cols ? buf_cols : n;
  const uint64_t buf_row = uint64_t{pitch} * (convert ? element_size(buf_type) : a.unit_bytes);
  // Evenly spaced rows convert with the bulk conversions: whole when dense,
  // else row by row. Through read_row / write_row, an address lookup and a
  // conversion call per row cost more than the conversion itself on narrow
  // rows (a 224x224 RGB stem staged 50176 three-channel rows per image).
  if (const uint64_t stride = a.uniform_row_stride();
      convert && stride && !is_block_float(t) && (buf_type == DataType::FLOAT32 || t == DataType::FLOAT32)) {
    const uint64_t offset = uint64_t{c0} * a.unit_bytes;
    const bool dense = offset == 0 && stride == uint64_t{n} * a.unit_bytes && pitch == n;
    if constexpr (kToBuffer) {
      if (!dense && t == DataType::FLOAT32 && buf_type == DataType::BFLOAT16 && stride % 4 == 0) {
        // Strided float32 rows into bfloat16 ones (conv2d_concat's parts): one call.
        float_to_bfloat16_rows(reinterpret_cast<const float*>(a.base + r0 * stride + offset), stride / 4,
                               reinterpret_cast<uint16_t*>(buf), pitch, r1 - r0, n);
        return;
      }
    }
    for (uint64_t r = r0; r < r1; r = dense ? r1 : r + 1) {
      std::byte* at = a.base + r * stride + offset;
      Buf* b = buf + (r - r0) * buf_row;
      const uint64_t count = dense ? (r1 - r0) * n : n;
      if (buf_type == DataType::FLOAT32) {  // t -> float32 buffer
        if constexpr (kToBuffer) convert_to_float(at, t, reinterpret_cast<float*>(b), count);
        else convert_from_float(reinterpret_cast<const float*>(b), at, t, count);
      } else {  // float32 rows -> a buffer of buf_type (bfloat16)
        if constexpr (kToBuffer) convert_from_float(reinterpret_cast<const float*>(at), b, buf_type, count);
        else convert_to_float(b, buf_type, reinterpret_cast<float*>(at), count);
      }
    }
    return;
  }
  if (const uint64_t stride = a.uniform_row_stride(); !convert && stride) {
    // Evenly spaced rows copied as they are: no address lookup and no
    // library call per row (conv2d_concat's bfloat16 parts: 64-byte pieces of
    // 307200 rows each on the UNet's first decoder conv).
    const uint64_t bytes = uint64_t{n} * a.unit_bytes, offset = uint64_t{c0} * a.unit_bytes;
    for (uint64_t r = r0; r < r1; ++r) {
      std::byte* at = a.base + r * stride + offset;
      Buf* b = buf + (r - r0) * buf_row;
      if constexpr (kToBuffer) copy_small(b, at, bytes);
      else copy_small(at, b, bytes);
    }
    return;
  }
  thread_local std::vector<float> wide;  // one row in float32, for a buffer of another dtype
  if (convert && buf_type != DataType::FLOAT32 && wide.size() < n) wide.resize(n);
  for (uint64_t r = r0; r < r1; ++r) {
    Buf* row = buf + (r - r0) * buf_row;
    const auto rr = static_cast<uint32_t>(r);
    if (convert) {
      float* f = buf_type == DataType::FLOAT32 ? reinterpret_cast<float*>(const_cast<std::byte*>(row)) : wide.data();
      if constexpr (kToBuffer) {
        cpu::read_row(a, t, rr, c0, n, f);
        if (buf_type != DataType::FLOAT32) convert_from_float(f, row, buf_type, n);
      } else {
        if (buf_type != DataType::FLOAT32) convert_to_float(row, buf_type, f, n);
        cpu::write_row(a, t, rr, c0, n, f);
      }
      continue;
    }
    for (uint32_t c = c0, run = 0; c < c0 + n; c += run) {
      std::byte* at = a.unit(rr, c, &run);
      run = std::min(run, c0 + n - c);
      Buf* b = row + uint64_t{c - c0} * a.unit_bytes;
      if constexpr (kToBuffer) std::memcpy(b, at, uint64_t{run} * a.unit_bytes);
      else std::memcpy(at, b, uint64_t{run} * a.unit_bytes);
    }
  }
}

}  // namespace

void gather_rows(const TensorAccess& a, DataType t, uint64_t r0, uint64_t r1, uint32_t c0, uint32_t n,
                 std::byte* buf, DataType buf_type, uint32_t buf_cols) {
  move_rows<true>(a, t, r0, r1, c0, n, buf, buf_type, buf_cols);
}

void scatter_rows(const TensorAccess& a, DataType t, uint64_t r0, uint64_t r1, uint32_t c0, uint32_t n,
                  const std::byte* buf, DataType buf_type) {
  move_rows<false>(a, t, r0, r1, c0, n, buf, buf_type);
}

namespace {

// One row of one tile: `v` (32 floats, zeros past the matrix) at tile row `rr`.
void write_tile_row(std::byte* tile, DataType t, uint32_t rr, const float* v) {
  if (!is_block_float(t)) {
    const uint32_t es = element_size(t);
    for (uint32_t h = 0; h < 2; ++h) convert_from_float(v + h * 16, tile + tile_offset(rr, h * 16) * es, t, 16);
    return;
  }
  const int w = t == DataType::BFLOAT8_B ? kBfp8MantissaBits : kBfp4MantissaBits;
  for (uint32_t h = 0; h < 2; ++h) {
    const uint32_t face = (rr / 16) * 2 + h, block = face * 16 + rr % 16;
    uint32_t bits[16], e = 0;
    std::memcpy(bits, v + h * 16, sizeof(bits));
    for (uint32_t b : bits) e = std::max(e, (b >> 23) & 0xffu);
    tile[block] = static_cast<std::byte>(e);
    std::byte* data = tile + 64;
    for (uint32_t i = 0; i < 16; ++i) {
      const uint8_t q = bfp_encode(bits[i], e, w);
      if (t == DataType::BFLOAT8_B) {
        data[block * 16 + i] = static_cast<std::byte>(q);
      } else {
        std::byte& byte = data[(block * 16 + i) / 2];
        byte = i % 2 ? (byte & std::byte{0x0f}) | static_cast<std::byte>(q << 4)
                     : (byte & std::byte{0xf0}) | static_cast<std::byte>(q & 0x0f);
      }
    }
  }
}

// Row `rr` of one tile as 32 floats.
void read_tile_row(const std::byte* tile, DataType t, uint32_t rr, float* v) {
  if (!is_block_float(t)) {
    const uint32_t es = element_size(t);
    for (uint32_t h = 0; h < 2; ++h) convert_to_float(tile + tile_offset(rr, h * 16) * es, t, v + h * 16, 16);
    return;
  }
  const int w = t == DataType::BFLOAT8_B ? kBfp8MantissaBits : kBfp4MantissaBits;
  for (uint32_t h = 0; h < 2; ++h) {
    const uint32_t block = ((rr / 16) * 2 + h) * 16 + rr % 16;
    const uint32_t e = static_cast<uint32_t>(tile[block]);
    const std::byte* data = tile + 64;
    for (uint32_t i = 0; i < 16; ++i) {
      const uint32_t k = block * 16 + i;
      const uint8_t q = t == DataType::BFLOAT8_B ? static_cast<uint8_t>(data[k])
                                                 : static_cast<uint8_t>(static_cast<uint8_t>(data[k / 2]) >> (k % 2 ? 4 : 0)) & 0x0f;
      const uint32_t bits = bfp_decode(q, e, w);
      std::memcpy(&v[h * 16 + i], &bits, 4);
    }
  }
}

}  // namespace

void tiles_to_rows(const TensorAccess& src, DataType src_type, uint64_t r0, uint64_t r1, uint32_t cols,
                   std::byte* dst, DataType dst_type) {
  const uint32_t es = element_size(dst_type), tile_cols = (cols + 31) / 32;
  const uint64_t row_bytes = uint64_t{cols} * es;
  alignas(64) float tile_f[kTileElements];
  alignas(64) std::byte staged[kTileElements * 4];
  for (uint64_t band = r0 / 32; band * 32 < r1; ++band) {
    const uint64_t b0 = std::max(r0, band * 32), b1 = std::min(r1, band * 32 + 32);
    for (uint32_t tc = 0; tc < tile_cols; ++tc) {
      uint32_t run = 0;
      const std::byte* tile = src.unit(static_cast<uint32_t>(band), tc, &run);
      const uint32_t valid = std::min(32u, cols - tc * 32);
      std::byte* out = dst + uint64_t{tc} * 32 * es;
      if (b1 - b0 == 32 && src_type == dst_type) {  // whole band, same dtype: untilize in place
        std::byte* rows[32];
        for (uint32_t i = 0; i < 32; ++i) rows[i] = out + (band * 32 + i - r0) * row_bytes;
        untilize_tile(tile, rows, valid, es);
        continue;
      }
      if (b1 - b0 == 32) {  // whole band: decode the tile once, convert in tile order, then untilize
        if (is_block_float(src_type)) {
          unpack_bfp_tiles(tile, tile_f, 1, src_type);
        } else {
          convert_to_float(tile, src_type, tile_f, kTileElements);
        }
        convert_from_float(tile_f, staged, dst_type, kTileElements);
        std::byte* rows[32];
        for (uint32_t i = 0; i < 32; ++i) rows[i] = out + (band * 32 + i - r0) * row_bytes;
        untilize_tile(staged, rows, valid, es);
        continue;
      }
      for (uint64_t r = b0; r < b1; ++r) {
        float v[32];
        read_tile_row(tile, src_type, static_cast<uint32_t>(r % 32), v);
        convert_from_float(v, out + (r - r0) * row_bytes, dst_type, valid);
      }
    }
  }
}

void rows_to_tiles(const TensorAccess& dst, DataType dst_type, const std::byte* src, DataType src_type, uint64_t r0,
                   uint64_t r1, uint32_t cols, uint64_t total_rows) {
  const uint32_t es = element_size(src_type), tile_cols = (cols + 31) / 32;
  const uint64_t row_bytes = uint64_t{cols} * es;
  const uint64_t end = r1 == total_rows ? (total_rows + 31) / 32 * 32 : r1;  // with the last band's padding
  alignas(64) std::byte staged[kTileElements * 4];
  alignas(64) float tile_f[kTileElements];
  for (uint64_t band = r0 / 32; band * 32 < end; ++band) {
    const uint64_t b0 = std::max(r0, band * 32), b1 = std::min(end, band * 32 + 32);
    const bool whole = b0 == band * 32 && b1 == band * 32 + 32;
    for (uint32_t tc = 0; tc < tile_cols; ++tc) {
      uint32_t run = 0;
      std::byte* tile = dst.unit(static_cast<uint32_t>(band), tc, &run);
      const uint32_t valid = std::min(32u, cols - tc * 32);
      if (whole) {
        // Whole bands go through the tilize and block-float kernels.
        const std::byte* rows[32];
        for (uint32_t i = 0; i < 32; ++i) {
          const uint64_t r = band * 32 + i;
          rows[i] = r < total_rows ? src + (r - r0) * row_bytes + uint64_t{tc} * 32 * es : nullptr;
        }
        if (dst_type == src_type) {
          tilize_tile(rows, valid, tile, es);
          continue;
        }
        tilize_tile(rows, valid, staged, es);
        convert_to_float(staged, src_type, tile_f, kTileElements);
        if (is_block_float(dst_type)) {
          pack_bfp_tiles(tile_f, tile, 1, dst_type);
        } else {
          convert_from_float(tile_f, tile, dst_type, kTileElements);
        }
        continue;
      }
      // A band shared with another shard: this shard's rows only.
      for (uint64_t r = b0; r < b1; ++r) {
        float v[32] = {};
        if (r < total_rows) convert_to_float(src + (r - r0) * row_bytes + uint64_t{tc} * 32 * es, src_type, v, valid);
        write_tile_row(tile, dst_type, static_cast<uint32_t>(r % 32), v);
      }
    }
  }
}

void apply_activation_in_place(const UnaryWithParam& act, DataType t, std::byte* data, uint64_t elements) {
  const cpu::FloatMath& math = cpu::select_float_math();
  if (math.fused && (t == DataType::FLOAT32 || t == DataType::BFLOAT16)) {  // the vector activations
    const cpu::FusedOperand io{data, t == DataType::BFLOAT16};
    return math.fused(io, nullptr, io, BinaryOpType::ADD, act, elements);
  }
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
