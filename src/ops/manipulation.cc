// Every manipulation op is one affine gather: output element o (an index
// vector) takes input k's element at flat index base_k + sum_d (o_d - lo_kd) *
// stride_kd when lo_k <= o < hi_k, else the fill value. Reshape, permute,
// slice, pad, concat and the CHW/HWC conversions only choose lo, hi, stride
// and base. The kernel walks output rows; where the innermost stride is 1 it
// copies runs (spanning input rows when a reshape regroups them), else it
// copies element by element.
#include "tessera/ops/manipulation.h"

#include <cstring>
#if defined(__SSE2__)
#include <immintrin.h>
#endif
#include <numeric>

#include "cpu/rows.h"
#include "cpu/stream_copy.h"
#include "op_common.h"
#include "tessera/numerics/convert.h"
#include "tessera/ops/eltwise.h"

namespace tessera {

namespace {

constexpr int kMaxRank = Shape::kMaxRank;

struct GatherSource {
  TensorAccess access;
  uint64_t base = 0;
  uint32_t lo[kMaxRank] = {}, hi[kMaxRank] = {};
  uint64_t stride[kMaxRank] = {};
};

template <int N>
struct GatherArgs {
  GatherSource src[N];
  uint32_t num_src = 0;
  TensorAccess out;
  uint32_t rank = 0;
  uint32_t dims[kMaxRank] = {};  // output dims
  uint32_t in_width[N] = {};     // each input's row width (for flat -> row, col)
  bool has_fill = false;
  // Every source a whole row-major tensor whose rows land unconverted in a
  // column range of the output's rows (concat along the last dim): a row is
  // one copy per source, with no index arithmetic (see run_gather).
  bool whole_rows = false;
  // Every source and the output packed, in the output's dtype: rows copy by
  // plain pointer arithmetic.
  bool packed = false;
  // Plain copies (whole_rows, packed) by non-temporal stores
  // (ops::streams_output).
  bool stream = false;
  // Sources of `src_type` converted to the output's `out_type` as they are
  // copied (concat's dtype): packed sources and output only, read along
  // their rows (run_gather checks).
  bool convert = false;
  DataType src_type = DataType::FLOAT32, out_type = DataType::FLOAT32;
  alignas(8) std::byte fill[8] = {};  // the fill value in the output dtype (aligned: converted as one)
};

void fill_units(const TensorAccess& out, uint32_t r, uint32_t c0, uint32_t c1, const std::byte* value) {
  for (uint32_t c = c0; c < c1; ++c) {
    uint32_t run = 0;
    std::memcpy(out.unit(r, c, &run), value, out.unit_bytes);
  }
}

template <int N>
Status gather_kernel(const void* raw, uint32_t row_begin, uint32_t row_end) {
  const auto& g = *static_cast<const GatherArgs<N>*>(raw);
  const uint32_t last = g.rank - 1, width = g.dims[last];
  auto copy = [&g](std::byte* dst, const std::byte* src, uint64_t n) {
    if (g.stream)
      cpu::stream_copy(dst, src, n);
    else
      std::memcpy(dst, src, n);
  };
  // `units` elements from src (in the sources' dtype) to dst.
  auto move = [&](std::byte* dst, const std::byte* src, uint64_t units) {
    if (g.convert)
      convert_elements(src, g.src_type, dst, g.out_type, units);
    else
      copy(dst, src, units * g.out.unit_bytes);
  };
  if (g.whole_rows) {
    const uint64_t ub = g.out.unit_bytes, out_stride = g.out.uniform_row_stride();
    for (uint32_t r = row_begin; r < row_end; ++r) {
      std::byte* o = g.out.base + r * out_stride;
      for (uint32_t k = 0; k < g.num_src; ++k) {
        const GatherSource& s = g.src[k];
        copy(o + s.lo[last] * ub, s.access.base + r * s.access.uniform_row_stride(), g.in_width[k] * ub);
      }
    }
    if (g.stream) cpu::stream_fence();
    return Status();
  }
  // The output row's index over the leading dims: divided out once, then
  // stepped (a division per dim per row took most of the time of a
  // detection head's 85-wide rows).
  uint32_t idx[kMaxRank] = {};
  for (uint32_t d = last, rest = row_begin; d-- > 0;) {
    idx[d] = rest % g.dims[d];
    rest /= g.dims[d];
  }
  auto step = [&](uint32_t rows) {  // idx += rows, rows <= what is left of dim last - 1
    if (last == 0) return;
    idx[last - 1] += rows;
    for (uint32_t d = last - 1; d > 0 && idx[d] == g.dims[d]; --d) {
      idx[d] = 0;
      ++idx[d - 1];
    }
  };
  for (uint32_t r = row_begin; r < row_end;) {
    uint32_t rows = 1;  // output rows this iteration copies
    uint32_t covered_lo = width, covered_hi = 0;  // pad: one source, a single column range
    for (uint32_t k = 0; k < g.num_src; ++k) {
      const GatherSource& s = g.src[k];
      uint64_t flat = s.base;
      bool inside = true;
      for (uint32_t d = 0; d < last && inside; ++d) {
        inside = idx[d] >= s.lo[d] && idx[d] < s.hi[d];
        flat += uint64_t{idx[d] - s.lo[d]} * s.stride[d];
      }
      if (!inside) continue;
      const uint32_t c0 = s.lo[last], n = s.hi[last] - s.lo[last], w = g.in_width[k];
      covered_lo = std::min(covered_lo, c0);
      covered_hi = std::max(covered_hi, c0 + n);
      if (s.stride[last] == 1 && g.packed) {
        // Plain copies, a run of rows along the output's next dim at a time
        // where that is one source's alone:
        // - a source that fills whole output rows lying back to back along
        //   that dim in the source too: one copy (a concat along that dim);
        // - a lone source without fill (a permute keeping its last dim, a
        //   slice): a copy per row, evenly spaced, without the index
        //   arithmetic per row (a detection head's (80, 80, 3, 85) ->
        //   (3, 80, 80, 85) permute is 19200 rows per anchor).
        const uint64_t ub = g.out.unit_bytes, ib = s.access.unit_bytes;
        const bool back_to_back = c0 == 0 && n == width && last > 0 && s.stride[last - 1] == n;
        const bool lone = g.num_src == 1 && !g.has_fill && last > 0;
        if (back_to_back || lone)
          rows = std::min({s.hi[last - 1] - idx[last - 1], g.dims[last - 1] - idx[last - 1], row_end - r});
        std::byte* o = g.out.base + (uint64_t{r} * width + c0) * ub;
        const std::byte* in = s.access.base + flat * ib;
        if (back_to_back || rows == 1) {
          move(o, in, uint64_t{rows} * n);
        } else {
          for (uint32_t j = 0; j < rows; ++j, o += width * ub, in += s.stride[last - 1] * ib) move(o, in, n);
        }
      } else if (s.stride[last] == 1) {
        for (uint32_t done = 0; done < n;) {
          const uint64_t f = flat + done;
          const uint32_t sr = static_cast<uint32_t>(f / w), sc = static_cast<uint32_t>(f % w);
          const uint32_t run = std::min(n - done, w - sc);
          cpu::copy_row(s.access, sr, sc, g.out, r, c0 + done, run);
          done += run;
        }
      } else if (s.access.is_packed() && g.out.is_packed() && (g.out.unit_bytes == 4 || g.out.unit_bytes == 2)) {
        // Strided reads from packed storage (permutes such as NCHW -> NHWC):
        // plain pointer arithmetic, no per-element unit lookup.
        const uint64_t st = s.stride[last];
        std::byte* dst = g.out.base + (uint64_t{r} * g.out.cols + c0) * g.out.unit_bytes;
        if (g.out.unit_bytes == 4) {
          const auto* src = reinterpret_cast<const uint32_t*>(s.access.base) + flat;
          auto* d = reinterpret_cast<uint32_t*>(dst);
          for (uint32_t j = 0; j < n; ++j) d[j] = src[uint64_t{j} * st];
        } else {
          const auto* src = reinterpret_cast<const uint16_t*>(s.access.base) + flat;
          auto* d = reinterpret_cast<uint16_t*>(dst);
          for (uint32_t j = 0; j < n; ++j) d[j] = src[uint64_t{j} * st];
        }
      } else {
        for (uint32_t j = 0; j < n; ++j) {
          const uint64_t f = flat + uint64_t{j} * s.stride[last];
          uint32_t run = 0;
          const std::byte* p = s.access.unit(static_cast<uint32_t>(f / w), static_cast<uint32_t>(f % w), &run);
          std::memcpy(g.out.unit(r, c0 + j, &run), p, g.out.unit_bytes);
        }
      }
    }
    if (g.has_fill) {
      if (covered_hi <= covered_lo) {
        fill_units(g.out, r, 0, width, g.fill);
      } else {
        fill_units(g.out, r, 0, covered_lo, g.fill);
        fill_units(g.out, r, covered_hi, width, g.fill);
      }
    }
    r += rows;
    step(rows);
  }
  if (g.stream) cpu::stream_fence();
  return ok_status();
}

// Row-major flat strides of `s`.
std::array<uint64_t, kMaxRank> flat_strides(const Shape& s) {
  std::array<uint64_t, kMaxRank> st{};
  uint64_t acc = 1;
  for (int d = s.rank() - 1; d >= 0; --d) {
    st[static_cast<size_t>(d)] = acc;
    acc *= s[d];
  }
  return st;
}

Status check_input(const Tensor& t, std::string_view op) {
  TS_RETURN_IF_ERROR(ops::require_device_tensor(t, op));
  if (t.layout() != Layout::ROW_MAJOR)
    return unimplemented_error("{}: expected a ROW_MAJOR input, found {}; untilize it first", op,
                               t.spec().to_string());
  return ok_status();
}

int normalize_dim(int dim, int rank) { return dim < 0 ? dim + rank : dim; }

// A source covering the whole output box [lo, lo + in dims).
GatherSource whole_source(const Tensor& in) {
  GatherSource s;
  auto st = flat_strides(in.shape());
  for (int d = 0; d < in.shape().rank(); ++d) {
    s.hi[d] = in.shape()[d];
    s.stride[d] = st[static_cast<size_t>(d)];
  }
  return s;
}

template <int N>
StatusOr<Tensor> run_gather(std::string_view op, std::span<const Tensor> inputs, std::span<GatherSource> sources,
                            const Shape& out_shape, DataType out_type, const ManipulationParams& p,
                            std::optional<float> fill, const std::string& attrs) {
  const Tensor& first = inputs[0];
  Device& device = *first.device();
  if (out_shape.rank() == 0 || out_shape.volume() == 0)
    return invalid_argument_error("{}: the output {} would be empty", op, out_shape.to_string());
  TensorSpec out_spec{out_shape, out_type, Layout::ROW_MAJOR,
                      p.memory_config.value_or(MemoryConfig{TensorMemoryLayout::INTERLEAVED,
                                                            first.memory_config().buffer_type, std::nullopt})};
  TS_RETURN_IF_ERROR(out_spec.validate_for_device(device.descriptor()).annotate(op));
  TS_ASSIGN_OR_RETURN(Tensor out, allocate_tensor_on_device(out_spec, device));
  auto args = std::make_unique<GatherArgs<N>>();
  args->num_src = static_cast<uint32_t>(inputs.size());
  args->rank = static_cast<uint32_t>(out_shape.rank());
  for (int d = 0; d < out_shape.rank(); ++d) args->dims[d] = out_shape[d];
  std::string key = fmt::format("{}:{}:", op, attrs);
  TS_ASSIGN_OR_RETURN(args->out, make_access(out));
  const uint32_t last = args->rank - 1;
  for (size_t k = 0; k < inputs.size(); ++k) {
    // The kernel converts only packed rows of one dtype (GatherArgs::convert);
    // others gather in their dtype, then convert in a second launch.
    if (inputs[k].dtype() != out_type) {
      TS_ASSIGN_OR_RETURN(TensorAccess in, make_access(inputs[k]));
      if (inputs[k].dtype() != first.dtype() || !is_floating(out_type))
        return internal_error("{}: the gather converts one float dtype, found {} and {} into {}", op,
                              data_type_name(first.dtype()), data_type_name(inputs[k].dtype()), data_type_name(out_type));
      if (fill || !in.is_packed() || !args->out.is_packed() || sources[k].stride[last] != 1) {
        out = Tensor();
        TS_ASSIGN_OR_RETURN(Tensor same, run_gather<N>(op, inputs, sources, out_shape, first.dtype(), p, fill, attrs));
        return typecast(same, out_type, p.cq_id);
      }
      args->convert = true;
      args->src_type = first.dtype();
      args->out_type = out_type;
    }
    args->src[k] = sources[k];
    TS_ASSIGN_OR_RETURN(args->src[k].access, make_access(inputs[k]));
    args->in_width[k] = inputs[k].shape()[-1];
    key += inputs[k].spec().to_string() + ",";
  }
  if (fill) {
    args->has_fill = true;
    convert_elements(reinterpret_cast<const std::byte*>(&*fill), DataType::FLOAT32, args->fill, out_type, 1);
  }
  key += "->" + out_spec.to_string();
  // Whole rows (GatherArgs::whole_rows): what the keyed specs decide, so the
  // cached program's name stays true. A UNet's 480x640 concat of two
  // 32-channel maps spent most of its time on the per-row index arithmetic
  // of the general loop (47% of the copy bandwidth).
  bool whole = !fill && args->out.uniform_row_stride() != 0;
  for (size_t k = 0; k < inputs.size() && whole; ++k) {
    const GatherSource& s = args->src[k];
    whole = inputs[k].dtype() == out_type && s.access.unit_bytes == args->out.unit_bytes &&
            s.access.uniform_row_stride() != 0 && s.base == 0 && s.stride[last] == 1 &&
            s.hi[last] - s.lo[last] == args->in_width[k];
    uint64_t expect = args->in_width[k];  // row-major strides, every row of the output
    for (uint32_t d = last; d-- > 0 && whole;) {
      whole = s.lo[d] == 0 && s.hi[d] == args->dims[d] && s.stride[d] == expect;
      expect *= args->dims[d];
    }
  }
  args->whole_rows = whole;
  bool packed = args->out.is_packed();
  for (size_t k = 0; k < inputs.size() && packed; ++k)
    packed = args->convert || (inputs[k].dtype() == out_type && args->src[k].access.is_packed() &&
                               args->src[k].access.unit_bytes == args->out.unit_bytes);
  args->packed = packed;
  // Plain copies read as many bytes as they write.
  args->stream = (whole || packed) && !fill && !args->convert && ops::streams_output(device, 2 * out_spec.storage_bytes());
  const uint32_t rows = static_cast<uint32_t>(out_shape.volume() / out_shape[-1]);
  auto compile = [&]() -> StatusOr<Program> {
    Program prog;
    prog.kernel = gather_kernel<N>;
    prog.kernel_name = fmt::format("any_{}__{}{}{}", op, whole ? "rows" : "gather", args->stream ? "_streamed" : "",
                                   args->convert ? "_converted" : "");
    prog.num_tasks = rows;
    prog.grain = ops::default_grain(device, rows, out_spec.storage_bytes() * 2, ops::kMinChunkBytesStreaming);
    return prog;
  };
  TS_RETURN_IF_ERROR(ops::launch(device, p.cq_id, key, compile, *args));
  return out;
}

StatusOr<Tensor> gather_one(std::string_view op, const Tensor& in, GatherSource src, const Shape& out_shape,
                            const ManipulationParams& p, std::optional<float> fill, const std::string& attrs,
                            std::optional<DataType> out_type = std::nullopt) {
  return run_gather<1>(op, std::span<const Tensor>(&in, 1), std::span<GatherSource>(&src, 1), out_shape,
                       out_type.value_or(in.dtype()), p, fill, attrs);
}

std::string join(std::span<const uint32_t> v) { return fmt::format("{}", fmt::join(v, ",")); }

// A permute that swaps two adjacent groups of dims behind a common prefix,
// out[b][p][c] = in[b][c][p] (NCHW -> NHWC: b = N, c = C, p = H * W, and
// back), between tensors whose rows are evenly spaced (packed, or padded row
// pages in one bank): batches of 2-D transposes in tiles. The gather walks
// output rows, which for NHWC with 3 channels are 3 elements each: 0.75 ms
// for a 224x224 image, against ~0.1 ms here.
struct TransposeArgs {
  const std::byte* in;
  std::byte* out;
  uint32_t batches, c, p, unit;
  uint32_t p_tile;                // p per task: a tile of at least ~1024 elements
  uint32_t in_w, out_w;           // row widths (in_w divides p, out_w divides c)
  uint64_t in_stride, out_stride; // bytes from one row to the next
  // Dense rows of a few channels (an image) converted from `in_type` to the
  // output's `out_type` on the way (unit: the output's element size).
  bool convert = false;
  DataType in_type = DataType::FLOAT32, out_type = DataType::FLOAT32;
};
constexpr uint32_t kTransposeTile = 32;

template <class T>
void transpose_tile(const TransposeArgs& a, uint32_t b, uint32_t c0, uint32_t c1, uint32_t p0, uint32_t p1) {
  const uint64_t in_rows_per_c = a.p / a.in_w, out_rows_per_p = a.c / a.out_w;
  const uint64_t c_step = in_rows_per_c * a.in_stride;  // bytes from in[b][i][j] to in[b][i + 1][j]
  if (a.c <= 4 && a.out_w == a.c) {
    // Few channels (an image's 3): each channel's run of input row is read
    // once, contiguously, and written one element per output row.
    for (uint32_t i = c0; i < c1; ++i) {
      for (uint32_t j = p0, jr = p0 / a.in_w, jc = p0 % a.in_w; j < p1;) {
        const uint32_t n = std::min(p1 - j, a.in_w - jc);
        const T* src = reinterpret_cast<const T*>(a.in + ((uint64_t{b} * a.c + i) * in_rows_per_c + jr) * a.in_stride) + jc;
        std::byte* dst = a.out + (uint64_t{b} * a.p + j) * a.out_stride + uint64_t{i} * sizeof(T);
        for (uint32_t k = 0; k < n; ++k) *reinterpret_cast<T*>(dst + uint64_t{k} * a.out_stride) = src[k];
        j += n;
        jc = 0;
        ++jr;
      }
    }
    return;
  }
  for (uint32_t j = p0, jr = p0 / a.in_w, jc = p0 % a.in_w; j < p1; ++j) {
    const std::byte* src = a.in + ((uint64_t{b} * a.c + c0) * in_rows_per_c + jr) * a.in_stride + uint64_t{jc} * sizeof(T);
    uint64_t orow = (uint64_t{b} * a.p + j) * out_rows_per_p + c0 / a.out_w;
    uint32_t ocol = c0 % a.out_w;
    for (uint32_t i = c0; i < c1;) {
      T* dst = reinterpret_cast<T*>(a.out + orow * a.out_stride) + ocol;
      const uint32_t n = std::min(c1 - i, a.out_w - ocol);
      for (uint32_t k = 0; k < n; ++k) dst[k] = *reinterpret_cast<const T*>(src + uint64_t{i - c0 + k} * c_step);
      i += n;
      ocol = 0;
      ++orow;
    }
    if (++jc == a.in_w) {
      jc = 0;
      ++jr;
    }
  }
}

// Dense rows on both sides (in[b][i][j] at ((b * c + i) * p + j) units, out
// likewise): square tiles, so that both the reads and the writes run along
// rows, and 4-byte units move as 4x4 register transposes. The tile walk
// above reads the input down columns, one element per row: YOLO's
// 80x80x255 head permute took 3.5 ms.
constexpr uint32_t kDenseTile = 64;

template <class T>
void transpose_dense(const std::byte* in_bytes, std::byte* out_bytes, uint32_t c, uint32_t p, uint32_t i0, uint32_t i1,
                     uint32_t j0, uint32_t j1) {
  const auto* in = reinterpret_cast<const T*>(in_bytes);
  auto* out = reinterpret_cast<T*>(out_bytes);
  if (c <= 4) {  // an image's channels: interleave c rows into contiguous output
    uint32_t j = j0;
#if defined(__SSE2__)
    // Register transposes of the c rows (the last repeated up to four), each
    // pixel's column stored 4 lanes wide: the (4 - c) extra lanes land on
    // the next pixel, rewritten by its own store (so never on the tile's
    // last pixel, which may belong to another task).
    if (c >= 2 && i0 == 0 && i1 == c) {
      const T* r[4];
      for (uint32_t i = 0; i < 4; ++i) r[i] = in + uint64_t{std::min(i, c - 1)} * p;
      if constexpr (sizeof(T) == 4) {  // 4x4 float transposes, four pixels at a time
        auto row = [&](int i) { return reinterpret_cast<const float*>(r[i]) + j; };
        float* d = reinterpret_cast<float*>(out);
        for (; j + 4 < j1; j += 4) {
          __m128 r0 = _mm_loadu_ps(row(0)), r1 = _mm_loadu_ps(row(1)), r2 = _mm_loadu_ps(row(2)),
                 r3 = _mm_loadu_ps(row(3));
          _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
          float* o = d + uint64_t{j} * c;
          _mm_storeu_ps(o, r0), _mm_storeu_ps(o + c, r1), _mm_storeu_ps(o + 2 * c, r2), _mm_storeu_ps(o + 3 * c, r3);
        }
      } else if constexpr (sizeof(T) == 2) {
        // A bfloat16 image: eight pixels at a time, the rows interleaved by
        // unpacks, each pixel's lanes stored 8 bytes wide. The scalar loop
        // took 0.050 ms for MobileNetV2's 224x224x3 bfloat16 input, three
        // times the float32 one's 0.016.
        auto row = [&](int i) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(r[i] + j)); };
        for (; j + 8 < j1; j += 8) {
          const __m128i r0 = row(0), r1 = row(1), r2 = row(2), r3 = row(3);
          // (r0, r1) and (r2, r3) pairs per pixel, then four lanes per pixel: pixels 0-1, 2-3, 4-5, 6-7.
          const __m128i lo01 = _mm_unpacklo_epi16(r0, r1), hi01 = _mm_unpackhi_epi16(r0, r1);
          const __m128i lo23 = _mm_unpacklo_epi16(r2, r3), hi23 = _mm_unpackhi_epi16(r2, r3);
          const __m128i px[4] = {_mm_unpacklo_epi32(lo01, lo23), _mm_unpackhi_epi32(lo01, lo23),
                                 _mm_unpacklo_epi32(hi01, hi23), _mm_unpackhi_epi32(hi01, hi23)};
          T* o = out + uint64_t{j} * c;
          for (uint32_t k = 0; k < 4; ++k) {
            _mm_storel_epi64(reinterpret_cast<__m128i*>(o + (2 * k) * c), px[k]);
            _mm_storel_epi64(reinterpret_cast<__m128i*>(o + (2 * k + 1) * c), _mm_unpackhi_epi64(px[k], px[k]));
          }
        }
      }
    }
#endif
    for (; j < j1; ++j)
      for (uint32_t i = i0; i < i1; ++i) out[uint64_t{j} * c + i] = in[uint64_t{i} * p + j];
    return;
  }
  uint32_t i = i0;
#if defined(__SSE2__)
  if constexpr (sizeof(T) == 4) {
    for (; i + 4 <= i1; i += 4) {
      uint32_t j = j0;
      for (; j + 4 <= j1; j += 4) {
        const float* s = reinterpret_cast<const float*>(in + uint64_t{i} * p + j);
        __m128 r0 = _mm_loadu_ps(s), r1 = _mm_loadu_ps(s + p), r2 = _mm_loadu_ps(s + 2 * uint64_t{p}),
               r3 = _mm_loadu_ps(s + 3 * uint64_t{p});
        _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
        float* d = reinterpret_cast<float*>(out + uint64_t{j} * c + i);
        _mm_storeu_ps(d, r0), _mm_storeu_ps(d + c, r1), _mm_storeu_ps(d + 2 * uint64_t{c}, r2),
            _mm_storeu_ps(d + 3 * uint64_t{c}, r3);
      }
      for (; j < j1; ++j)
        for (uint32_t k = 0; k < 4; ++k) out[uint64_t{j} * c + i + k] = in[uint64_t{i + k} * p + j];
    }
  }
#endif
  for (; i < i1; ++i)
    for (uint32_t j = j0; j < j1; ++j) out[uint64_t{j} * c + i] = in[uint64_t{i} * p + j];
}

// Tiles of kDenseTile c by p_tile p (kDenseTile, or longer runs when c is a few channels).
uint32_t dense_p_tile(uint32_t c) { return c <= 4 ? 4096 : kDenseTile; }

// A converting tile (TransposeArgs::convert): runs of each channel's row
// converted into a buffer in the output dtype, then interleaved from there.
void transpose_dense_converted(const TransposeArgs& a, uint32_t b, uint32_t j0, uint32_t j1) {
  constexpr uint32_t kRun = 1024;
  alignas(64) std::byte buf[4 * kRun * 4];
  const uint32_t ui = element_size(a.in_type);
  const std::byte* in = a.in + uint64_t{b} * a.c * a.p * ui;
  std::byte* out = a.out + uint64_t{b} * a.c * a.p * a.unit;
  for (uint32_t j = j0; j < j1; j += kRun) {
    const uint32_t n = std::min(kRun, j1 - j);
    for (uint32_t i = 0; i < a.c; ++i)
      convert_elements(in + (uint64_t{i} * a.p + j) * ui, a.in_type, buf + uint64_t{i} * n * a.unit, a.out_type, n);
    std::byte* o = out + uint64_t{j} * a.c * a.unit;
    if (a.unit == 2) transpose_dense<uint16_t>(buf, o, a.c, n, 0, a.c, 0, n);
    else transpose_dense<uint32_t>(buf, o, a.c, n, 0, a.c, 0, n);
  }
}

Status transpose_dense_kernel(const void* raw, uint32_t begin, uint32_t end) {
  const auto& a = *static_cast<const TransposeArgs*>(raw);
  const uint32_t pw = dense_p_tile(a.c);
  const uint32_t ct = (a.c + kDenseTile - 1) / kDenseTile, pt = (a.p + pw - 1) / pw;
  for (uint32_t t = begin; t < end; ++t) {  // (batch, tile of c, tile of p), p fastest
    const uint32_t b = t / (ct * pt), i0 = t / pt % ct * kDenseTile, j0 = t % pt * pw;
    const uint32_t i1 = std::min(a.c, i0 + kDenseTile), j1 = std::min(a.p, j0 + pw);
    if (a.convert) {
      transpose_dense_converted(a, b, j0, j1);
      continue;
    }
    const uint64_t off = uint64_t{b} * a.c * a.p * a.unit;
    const std::byte* in = a.in + off;
    std::byte* out = a.out + off;
    switch (a.unit) {
      case 1: transpose_dense<uint8_t>(in, out, a.c, a.p, i0, i1, j0, j1); break;
      case 2: transpose_dense<uint16_t>(in, out, a.c, a.p, i0, i1, j0, j1); break;
      case 4: transpose_dense<uint32_t>(in, out, a.c, a.p, i0, i1, j0, j1); break;
      default: transpose_dense<uint64_t>(in, out, a.c, a.p, i0, i1, j0, j1); break;
    }
  }
  return ok_status();
}

// Tasks: (batch, tile of p) pairs; each does every c for its p tile.
Status transpose_kernel(const void* raw, uint32_t begin, uint32_t end) {
  const auto& a = *static_cast<const TransposeArgs*>(raw);
  const uint32_t tiles = (a.p + a.p_tile - 1) / a.p_tile;
  for (uint32_t t = begin; t < end; ++t) {
    const uint32_t b = t / tiles, p0 = (t % tiles) * a.p_tile, p1 = std::min(a.p, p0 + a.p_tile);
    for (uint32_t c0 = 0; c0 < a.c; c0 += kTransposeTile) {
      const uint32_t c1 = std::min(a.c, c0 + kTransposeTile);
      switch (a.unit) {
        case 1: transpose_tile<uint8_t>(a, b, c0, c1, p0, p1); break;
        case 2: transpose_tile<uint16_t>(a, b, c0, c1, p0, p1); break;
        case 4: transpose_tile<uint32_t>(a, b, c0, c1, p0, p1); break;
        default: transpose_tile<uint64_t>(a, b, c0, c1, p0, p1); break;
      }
    }
  }
  return ok_status();
}

// The (batches, c, p) view of a group-swapping permutation, if `perm` is one:
// perm = (0 .. k-1, j .. r-1, k .. j-1).
std::optional<std::array<uint32_t, 3>> group_swap(const Shape& in, std::span<const int> perm) {
  const int r = in.rank();
  int k = 0;
  while (k < r && perm[static_cast<size_t>(k)] == k) ++k;
  if (k >= r - 1) return std::nullopt;
  const int j = perm[static_cast<size_t>(k)];
  if (j <= k) return std::nullopt;
  for (int i = 0; i < r; ++i) {
    const int want = i < k ? i : i < k + (r - j) ? j + (i - k) : k + (i - k - (r - j));
    if (perm[static_cast<size_t>(i)] != want) return std::nullopt;
  }
  std::array<uint32_t, 3> v{1, 1, 1};
  for (int d = 0; d < r; ++d) v[d < k ? 0 : d < j ? 1 : 2] *= in[d];
  return v;
}

}  // namespace

StatusOr<Tensor> reshape(const Tensor& input, const Shape& shape, const ManipulationParams& p) {
  TS_RETURN_IF_ERROR(check_input(input, "reshape"));
  if (shape.volume() != input.shape().volume())
    return invalid_argument_error("reshape: cannot reshape {} ({} elements) to {} ({} elements)",
                                  input.shape().to_string(), input.shape().volume(), shape.to_string(),
                                  shape.volume());
  // Free when the bytes stay where they are and no other memory config is asked for.
  if (!p.memory_config || *p.memory_config == input.memory_config()) {
    StatusOr<Tensor> v = input.view(shape);
    if (v.ok()) return v;
  }
  // Output flat index = input flat index.
  GatherSource s;
  auto st = flat_strides(shape);
  for (int d = 0; d < shape.rank(); ++d) {
    s.hi[d] = shape[d];
    s.stride[d] = st[static_cast<size_t>(d)];
  }
  return gather_one("reshape", input, s, shape, p, std::nullopt, shape.to_string());
}

StatusOr<Tensor> permute(const Tensor& input, std::span<const int> perm, const ManipulationParams& p) {
  return permute(input, perm, input.dtype(), p);
}

StatusOr<Tensor> permute(const Tensor& input, std::span<const int> perm, DataType dtype, const ManipulationParams& p) {
  TS_RETURN_IF_ERROR(check_input(input, "permute"));
  const bool convert = dtype != input.dtype();
  if (convert && (!is_floating(dtype) || !is_floating(input.dtype())))
    return invalid_argument_error("permute: converts between float dtypes only, found {} into {}",
                                  data_type_name(input.dtype()), data_type_name(dtype));
  const int rank = input.shape().rank();
  if (static_cast<int>(perm.size()) != rank)
    return invalid_argument_error("permute: expected {} dims in the permutation of {}, found {}", rank,
                                  input.shape().to_string(), perm.size());
  std::array<bool, kMaxRank> seen{};
  std::array<uint32_t, kMaxRank> dims{};
  GatherSource s;
  auto st = flat_strides(input.shape());
  for (int i = 0; i < rank; ++i) {
    const int d = normalize_dim(perm[static_cast<size_t>(i)], rank);
    if (d < 0 || d >= rank || seen[static_cast<size_t>(d)])
      return invalid_argument_error("permute: ({}) is not a permutation of {} dims", fmt::join(perm, ","), rank);
    seen[static_cast<size_t>(d)] = true;
    dims[static_cast<size_t>(i)] = input.shape()[d];
    s.hi[i] = input.shape()[d];
    s.stride[i] = st[static_cast<size_t>(d)];
  }
  const Shape out(std::span<const uint32_t>(dims.data(), static_cast<size_t>(rank)));
  std::vector<int> norm(perm.begin(), perm.end());
  for (int& d : norm) d = normalize_dim(d, rank);
  if (const auto bcp = group_swap(input.shape(), norm); bcp && out.volume() > 0) {
    Device& device = *input.device();
    const TensorSpec spec{out, dtype, Layout::ROW_MAJOR,
                          p.memory_config.value_or(MemoryConfig{TensorMemoryLayout::INTERLEAVED,
                                                                input.memory_config().buffer_type, std::nullopt})};
    TS_RETURN_IF_ERROR(spec.validate_for_device(device.descriptor()).annotate("permute"));
    TS_ASSIGN_OR_RETURN(Tensor y, allocate_tensor_on_device(spec, device));
    TS_ASSIGN_OR_RETURN(TensorAccess ia, make_access(input));
    TS_ASSIGN_OR_RETURN(TensorAccess oa, make_access(y));
    const uint32_t unit = element_size(dtype), in_unit = element_size(input.dtype());
    // Packed storage is one long row; otherwise rows are the last dims.
    const uint32_t c = (*bcp)[1], pp = (*bcp)[2];
    const uint32_t in_w = ia.is_packed() ? pp : input.shape()[-1], out_w = oa.is_packed() ? c : out[-1];
    const uint64_t in_stride = ia.is_packed() ? uint64_t{pp} * in_unit : ia.uniform_row_stride(),
                   out_stride = oa.is_packed() ? uint64_t{c} * unit : oa.uniform_row_stride();
    // Dense rows both ways: tiles that read and write along rows.
    const bool dense = in_stride == uint64_t{in_w} * in_unit && out_stride == uint64_t{out_w} * unit;
    // Conversions on the way: an image's few channels, float32 and bfloat16.
    const bool converts_here = dense && c <= 4 && (unit == 2 || unit == 4) && (in_unit == 2 || in_unit == 4);
    if (in_stride != 0 && out_stride != 0 && (unit == 1 || unit == 2 || unit == 4 || unit == 8) &&
        (!convert || converts_here)) {
      const uint32_t p_tile = std::max(kTransposeTile, 1024 / std::max(c, 1u) / kTransposeTile * kTransposeTile);
      TransposeArgs args{ia.base, oa.base, (*bcp)[0], c, pp, unit, p_tile, in_w, out_w, in_stride, out_stride};
      args.convert = convert;
      args.in_type = input.dtype();
      args.out_type = dtype;
      const uint32_t tiles = dense ? ((c + kDenseTile - 1) / kDenseTile) * ((pp + dense_p_tile(c) - 1) / dense_p_tile(c))
                                   : (args.p + p_tile - 1) / p_tile;
      const uint32_t tasks = args.batches * tiles;
      const std::string key = fmt::format("permute:{}:{}->{}", fmt::join(norm, ","), input.spec().to_string(),
                                          spec.to_string());
      TS_RETURN_IF_ERROR(ops::launch(device, p.cq_id, key, [&]() -> StatusOr<Program> {
        Program prog;
        prog.kernel = dense ? transpose_dense_kernel : transpose_kernel;
        prog.kernel_name = fmt::format("any_permute__{}{}", dense ? "transpose_tiles" : "transpose",
                                       convert ? "_converted" : "");
        prog.num_tasks = tasks;
        prog.grain = ops::default_grain(device, tasks, spec.storage_bytes() * 2, ops::kMinChunkBytesStreaming);
        return prog;
      }, args));
      return y;
    }
  }
  if (convert) {  // a permute, then a typecast
    TS_ASSIGN_OR_RETURN(Tensor moved, permute(input, perm, p));
    return typecast(moved, dtype, p.cq_id);
  }
  return gather_one("permute", input, s, out, p, std::nullopt, fmt::format("{}", fmt::join(norm, ",")));
}

StatusOr<Tensor> pad(const Tensor& input, std::span<const std::array<uint32_t, 2>> padding, float value,
                     const ManipulationParams& p) {
  TS_RETURN_IF_ERROR(check_input(input, "pad"));
  const int rank = input.shape().rank();
  if (padding.size() > static_cast<size_t>(rank))
    return invalid_argument_error("pad: {} padding pairs for the {} dims of {}", padding.size(), rank,
                                  input.shape().to_string());
  const int skip = rank - static_cast<int>(padding.size());
  GatherSource s = whole_source(input);
  std::array<uint32_t, kMaxRank> dims{};
  std::string attrs;
  for (int d = 0; d < rank; ++d) {
    const std::array<uint32_t, 2> pd = d >= skip ? padding[static_cast<size_t>(d - skip)] : std::array<uint32_t, 2>{};
    const uint64_t size = uint64_t{input.shape()[d]} + pd[0] + pd[1];
    if (size > UINT32_MAX) return invalid_argument_error("pad: dim {} would have {} elements", d, size);
    dims[static_cast<size_t>(d)] = static_cast<uint32_t>(size);
    s.lo[d] = pd[0];
    s.hi[d] = pd[0] + input.shape()[d];
    attrs += fmt::format("{}/{},", pd[0], pd[1]);
  }
  const Shape out(std::span<const uint32_t>(dims.data(), static_cast<size_t>(rank)));
  return gather_one("pad", input, s, out, p, value, fmt::format("{}v{}", attrs, value));
}

StatusOr<Tensor> slice(const Tensor& input, const SliceParams& sl, const ManipulationParams& p) {
  TS_RETURN_IF_ERROR(check_input(input, "slice"));
  const int rank = input.shape().rank();
  const auto r = static_cast<size_t>(rank);
  if (sl.begin.size() != r || sl.end.size() != r || (!sl.step.empty() && sl.step.size() != r))
    return invalid_argument_error("slice: expected begin, end (and step) with {} values for {}, found {}, {}, {}", rank,
                                  input.shape().to_string(), sl.begin.size(), sl.end.size(), sl.step.size());
  GatherSource s;
  auto st = flat_strides(input.shape());
  std::array<uint32_t, kMaxRank> dims{};
  for (int d = 0; d < rank; ++d) {
    const auto i = static_cast<size_t>(d);
    const uint32_t step = sl.step.empty() ? 1 : sl.step[i];
    const uint32_t end = std::min(sl.end[i], input.shape()[d]);
    if (step == 0) return invalid_argument_error("slice: step of dim {} must be >= 1, found 0", d);
    if (sl.begin[i] >= end)
      return invalid_argument_error("slice: dim {} of {} is empty: begin {} >= end {}", d, input.shape().to_string(),
                                    sl.begin[i], end);
    dims[i] = (end - sl.begin[i] + step - 1) / step;
    s.hi[d] = dims[i];
    s.stride[d] = st[i] * step;
    s.base += uint64_t{sl.begin[i]} * st[i];
  }
  const Shape out(std::span<const uint32_t>(dims.data(), r));
  std::vector<uint32_t> step = sl.step.empty() ? std::vector<uint32_t>(r, 1) : sl.step;
  return gather_one("slice", input, s, out, p, std::nullopt,
                    fmt::format("{}:{}:{}", join(sl.begin), join(sl.end), join(step)));
}

StatusOr<Tensor> concat(std::span<const Tensor> inputs, int dim, const ManipulationParams& p) {
  if (inputs.empty()) return invalid_argument_error("concat: expected at least one input");
  return concat(inputs, dim, inputs[0].dtype(), p);
}

StatusOr<Tensor> concat(std::span<const Tensor> inputs, int dim, DataType dtype, const ManipulationParams& p) {
  constexpr int kMaxInputs = 16;  // sources one gather launch reads
  if (inputs.empty()) return invalid_argument_error("concat: expected at least one input");
  if (inputs.size() > kMaxInputs) {
    // In steps: each group of kMaxInputs into an interleaved DRAM part (in
    // the inputs' dtype), then the parts, converted if asked, in the
    // memory config asked for. Every value is copied twice.
    std::vector<Tensor> parts;
    for (size_t k = 0; k < inputs.size(); k += kMaxInputs) {
      const std::span<const Tensor> group = inputs.subspan(k, std::min<size_t>(kMaxInputs, inputs.size() - k));
      if (group.size() == 1) {
        parts.push_back(group[0]);
        continue;
      }
      TS_ASSIGN_OR_RETURN(Tensor part, concat(group, dim, group[0].dtype(),
                                              {.memory_config = DRAM_MEMORY_CONFIG, .cq_id = p.cq_id}));
      parts.push_back(std::move(part));
    }
    return concat(parts, dim, dtype, p);
  }
  for (const Tensor& t : inputs) TS_RETURN_IF_ERROR(check_input(t, "concat"));
  const Shape& s0 = inputs[0].shape();
  const int rank = s0.rank();
  const int d = normalize_dim(dim, rank);
  if (d < 0 || d >= rank) return invalid_argument_error("concat: dim {} is out of range for rank {}", dim, rank);
  std::array<GatherSource, kMaxInputs> sources;
  uint64_t total = 0;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& t = inputs[k];
    if (t.device() != inputs[0].device()) return invalid_argument_error("concat: input {} is on another device", k);
    if (t.dtype() != inputs[0].dtype())
      return invalid_argument_error("concat: input {} is {}, expected {} like input 0", k, data_type_name(t.dtype()),
                                    data_type_name(inputs[0].dtype()));
    bool same = t.shape().rank() == rank;
    for (int i = 0; same && i < rank; ++i) same = i == d || t.shape()[i] == s0[i];
    if (!same)
      return invalid_argument_error("concat: input {} has shape {}, which differs from input 0's {} outside dim {}",
                                    k, t.shape().to_string(), s0.to_string(), d);
    sources[k] = whole_source(t);
    sources[k].lo[d] = static_cast<uint32_t>(total);
    sources[k].hi[d] = static_cast<uint32_t>(total + t.shape()[d]);
    total += t.shape()[d];
  }
  if (total > UINT32_MAX) return invalid_argument_error("concat: dim {} would have {} elements", d, total);
  if (dtype != inputs[0].dtype() && (!is_floating(dtype) || !is_floating(inputs[0].dtype())))
    return invalid_argument_error("concat: converts between float dtypes only, found {} into {}",
                                  data_type_name(inputs[0].dtype()), data_type_name(dtype));
  std::array<uint32_t, kMaxRank> dims{};
  for (int i = 0; i < rank; ++i) dims[static_cast<size_t>(i)] = i == d ? static_cast<uint32_t>(total) : s0[i];
  const Shape out(std::span<const uint32_t>(dims.data(), static_cast<size_t>(rank)));
  const std::span<GatherSource> srcs(sources.data(), inputs.size());
  const std::string attrs = fmt::format("dim{}", d);
  if (inputs.size() <= 2) return run_gather<2>("concat", inputs, srcs, out, dtype, p, std::nullopt, attrs);
  return run_gather<kMaxInputs>("concat", inputs, srcs, out, dtype, p, std::nullopt, attrs);
}

namespace {
// (1, 1, A, B) -> (1, 1, B, A).
StatusOr<Tensor> transpose_rows(std::string_view op, const Tensor& input, const ManipulationParams& p) {
  TS_RETURN_IF_ERROR(check_input(input, op));
  const Shape& s = input.shape();
  if (s.rank() != 4 || s[0] != 1 || s[1] != 1)
    return invalid_argument_error("{}: expected a (1, 1, rows, cols) input, found {}", op, s.to_string());
  GatherSource src;
  src.hi[0] = src.hi[1] = 1;
  src.hi[2] = s[3];
  src.hi[3] = s[2];
  src.stride[2] = 1;
  src.stride[3] = s[3];
  return gather_one(op, input, src, Shape{1, 1, s[3], s[2]}, p, std::nullopt, "");
}
}  // namespace

StatusOr<Tensor> convert_to_hwc(const Tensor& input, const ManipulationParams& p) {
  return transpose_rows("convert_to_hwc", input, p);
}

StatusOr<Tensor> convert_to_chw(const Tensor& input, std::optional<DataType> dtype, const ManipulationParams& p) {
  TS_ASSIGN_OR_RETURN(Tensor chw, transpose_rows("convert_to_chw", input, p));
  if (!dtype || *dtype == chw.dtype()) return chw;
  return typecast(chw, *dtype, p.cq_id);  // a second launch: values are rounded once, after the move
}

}  // namespace tessera
