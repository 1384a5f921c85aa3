// What the oneDNN-backed ops share (internal): error translation, dtype
// mapping, fused activations as post-ops, and staging of rows that are not
// dense in a tensor's memory config.
#pragma once

#include <dnnl.hpp>
#include <omp.h>

#include <cstring>
#include <string_view>

#include "tessera/ops/activation.h"
#include "tessera/ops/compute_config.h"
#include "tessera/tensor/access.h"
#include "tessera/tensor/tensor.h"

namespace tessera::onednn {

// oneDNN calls made on the host thread (primitive creation, weight
// reorders) run on it alone while this lives. With OpenMP's default team
// a reorder leaves a worker spinning for a while after it, on a core
// Tessera's workers need: the convs launched next ran at up to half speed
// (a oneDNN 1x1 conv timed right after packing weights: 0.79 against 0.41
// ms with OMP_WAIT_POLICY=passive).
struct OmpSingleThread {
  int saved = omp_get_max_threads();
  OmpSingleThread() { omp_set_num_threads(1); }
  ~OmpSingleThread() { omp_set_num_threads(saved); }
  OmpSingleThread(const OmpSingleThread&) = delete;
  OmpSingleThread& operator=(const OmpSingleThread&) = delete;
};

// Errors from oneDNN become Status at this boundary.
template <class F>
Status guard(std::string_view op, std::string_view what, F f) {
  try {
    f();
    return ok_status();
  } catch (const dnnl::error& e) {
    return internal_error("{}: oneDNN failed while {}: {} (status {})", op, what, e.what(), static_cast<int>(e.status));
  }
}

inline dnnl::memory::data_type dnnl_type(DataType t) {
  return t == DataType::BFLOAT16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
}

// Row stride in bytes when the rows of `a` are packed densely one after the
// other; 0 when they must be staged: spread over banks, or padded to the page
// alignment (C = 3 in float32 is 12 B of every 32 B page on Wormhole), which sends
// oneDNN to its reference implementation (1 GFLOP/s, measured).
uint64_t dense_row_stride(const TensorAccess& a);

// The fused activation as a oneDNN post-op; false when oneDNN 2.6 lacks it
// (hardsigmoid) or would lose a NaN (ReLU, ReLU6, a leaky ReLU of slope 0:
// its relu and clip post-ops are VMAXPS / VMINPS against a constant, which
// return the constant for a NaN), and the caller applies it afterwards.
bool append_activation(dnnl::post_ops& po, const UnaryWithParam& a);
// Whether append_activation appends `a`.
bool runs_activation(const UnaryWithParam& a);

// Whether oneDNN runs bfloat16 kernels on this CPU. oneDNN 2.6 has them only
// with AVX-512; on an AVX2-only CPU every bfloat16 primitive is unimplemented.
bool has_bf16_kernels();

// Whether float32 operands compute on their bfloat16 roundings at `fidelity`
// (compute_config.h): LoFi on AVX-512 CPUs with AMX and oneDNN's bfloat16
// kernels. Each op adds its own conditions (conv2d.cc's lowers_to_bf16,
// matmul.cc's lofi_lowers).
bool lofi_computes_in_bf16(MathFidelity fidelity);

// The dtype a oneDNN kernel computes on for operands of dtype `t`: `t`, or
// float32 where there are no bfloat16 kernels. The operands are the same
// bfloat16-rounded values either way and both kernels accumulate in float32,
// so only the order of the sums differs.
DataType kernel_type(DataType t);

// Columns [c0, c0 + n) of rows [r0, r1) of `a` (values of dtype `t`) to /
// from a dense buffer of n-value rows of dtype `buf_type`: copied when the
// dtypes match, else converted (float32 buffers of any float rows; bfloat16
// buffers of float32 rows, rounded to nearest even). gather_rows's
// `buf_cols` (0: n) spaces the buffer's rows that many values apart, so that
// several tensors' columns interleave into one row (conv2d_concat).
void gather_rows(const TensorAccess& a, DataType t, uint64_t r0, uint64_t r1, uint32_t c0, uint32_t n,
                 std::byte* buf, DataType buf_type, uint32_t buf_cols = 0);
void scatter_rows(const TensorAccess& a, DataType t, uint64_t r0, uint64_t r1, uint32_t c0, uint32_t n,
                  const std::byte* buf, DataType buf_type);

// Rows [r0, r1) of a dense row-major matrix (`cols` values of `src_type`,
// float32 or bfloat16, per row; `src` holds row r0 first) written into the
// tiles of `dst` (TILE access of a float32, bfloat16, bfloat8_b or bfloat4_b
// tensor of `total_rows` x `cols`): the conv kernel's tilize, fused into its
// own output pass. Writes only rows [r0, r1) plus, when r1 == total_rows, the
// zero padding rows of the last tile band; every written row also gets its
// zero padding columns. Block-float blocks are rows of 16, so shards that
// split a tile band between them never write the same bytes. Bit-exact with
// tilize() followed by the block-float pack.
void rows_to_tiles(const TensorAccess& dst, DataType dst_type, const std::byte* src, DataType src_type, uint64_t r0,
                   uint64_t r1, uint32_t cols, uint64_t total_rows);

// The inverse for the conv kernel's input: rows [r0, r1) of the tiles of
// `src` (TILE access, `src_type` any float dtype, `cols` values per row) into
// a dense row-major buffer of `dst_type` (float32 or bfloat16), row r0
// first. Bit-exact with untilize() (block-float unpacked exactly, then
// rounded once to `dst_type`).
void tiles_to_rows(const TensorAccess& src, DataType src_type, uint64_t r0, uint64_t r1, uint32_t cols,
                   std::byte* dst, DataType dst_type);

// Applies `act` in place to `elements` values of dtype `t`.
void apply_activation_in_place(const UnaryWithParam& act, DataType t, std::byte* data, uint64_t elements);

}  // namespace tessera::onednn
