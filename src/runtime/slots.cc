// Values in and out of the steps' slots: constants uploaded once, layout
// conversions between NCHW and NHWC, graph inputs converted to the
// activation dtype as they are first read.
#include <bit>

#include "lowering.h"
#include "tessera/numerics/block_float.h"
#include "tessera/numerics/float16.h"

namespace tessera::runtime {

StatusOr<Tensor> CompiledModel::Impl::upload(const HostTensor& h, const Dims& dims, DataType dtype) {
  std::vector<float> ints;  // integer constants as float
  if (h.type != graph::ElemType::FLOAT32) ints.assign(h.i.begin(), h.i.end());
  TS_ASSIGN_OR_RETURN(Tensor host,
                      Tensor::from_vector(h.type == graph::ElemType::FLOAT32 ? h.f : ints, to_shape(dims), dtype));
  return to_device(host, *device);
}

void round_to_format(std::vector<float>& v, size_t cols, DataType df) {
  if (df == DataType::BFLOAT16)
    for (float& x : v) x = round_to_bfloat16(x);
  if (df == DataType::FLOAT16)
    for (float& x : v) x = round_to_float16(x);
  if (!is_block_float(df)) return;
  const int bits = bfp_mantissa_bits(df);
  for (size_t row = 0; row < v.size(); row += cols)
    for (size_t b = row; b < row + cols; b += 16) {
      const size_t e = std::min(b + 16, row + cols);
      uint32_t shared = 0;
      for (size_t i = b; i < e; ++i) shared = std::max(shared, (std::bit_cast<uint32_t>(v[i]) >> 23) & 0xffu);
      for (size_t i = b; i < e; ++i)
        v[i] = std::bit_cast<float>(bfp_decode(bfp_encode(std::bit_cast<uint32_t>(v[i]), shared, bits), shared, bits));
    }
}

StatusOr<Tensor> CompiledModel::Impl::upload_weights(const HostTensor& h, const Dims& dims, bool transposed) {
  const OpPrecision& p = op_precision[lowering];
  const DataType df = p.weights_df.value_or(act_dtype());
  if (df == DataType::FLOAT32) return upload(h, dims, DataType::FLOAT32);
  HostTensor rounded = h;
  const size_t cols = static_cast<size_t>(dims.empty() ? 1 : dims.back()), rows = rounded.f.size() / cols;
  if (!transposed || !is_block_float(df) || dims.size() != 2) {
    round_to_format(rounded.f, cols, df);
  } else {  // (N, K) held for (K, N): the blocks run along N, as for any B
    std::vector<float> kn(rounded.f.size());
    for (size_t r = 0; r < rows; ++r)
      for (size_t c = 0; c < cols; ++c) kn[c * rows + r] = rounded.f[r * cols + c];
    round_to_format(kn, rows, df);
    for (size_t r = 0; r < rows; ++r)
      for (size_t c = 0; c < cols; ++c) rounded.f[r * cols + c] = kn[c * rows + r];
  }
  // An op with a float32 input computes in float32, on the rounded values.
  if (planned_dtype(g.nodes[lowering].inputs[0]) == DataType::FLOAT32) return upload(rounded, dims, DataType::FLOAT32);
  // (Block-float values are exact in bfloat16.)
  return upload(rounded, dims, matmul_weights_dtype(DataType::BFLOAT16));
}

StatusOr<Tensor> CompiledModel::Impl::constant(int v) {
  auto& c = constants[static_cast<size_t>(v)];
  if (!c) {
    TS_ASSIGN_OR_RETURN(c, upload(*g.value(v).constant, dims(v), act_dtype()));
  }
  return *c;
}

StatusOr<Tensor> CompiledModel::Impl::constant_nhwc(int v) {
  Dims d = dims(v);
  while (d.size() < 4) d.insert(d.begin(), 1);
  HostTensor h = *g.value(v).constant;
  h.dims = d;
  Node t;
  t.op_type = "Transpose";
  t.attrs["perm"].kind = graph::Attribute::Kind::INTS;
  t.attrs["perm"].ints = {0, 2, 3, 1};
  const HostTensor* args[] = {&h};
  TS_ASSIGN_OR_RETURN(auto out, graph::evaluate(t, args, g.opset));
  return upload(out[0], out[0].dims, act_dtype());
}

bool CompiledModel::Impl::in_caller_dtype(const Slots& s, int v) const {
  const auto& t = s[static_cast<size_t>(v)];
  return graph_input[static_cast<size_t>(v)] && t && t->dtype() != act_dtype();
}

StatusOr<Tensor> CompiledModel::Impl::get(Slots& s, int v) {
  if (g.is_constant(v)) return constant(v);
  auto& t = s[static_cast<size_t>(v)];
  if (!t) return internal_error("value '{}' is read before it is computed (or after its release)", g.value(v).name);
  if (in_caller_dtype(s, v)) {
    TS_ASSIGN_OR_RETURN(t, typecast(*t, act_dtype(), step_cq));
  }
  return *t;
}

bool CompiledModel::Impl::same_bytes_either_layout(int v) const {
  const Dims& d = dims(v);
  return d.size() == 4 && (d[1] == 1 || d[2] * d[3] == 1);
}

StatusOr<Tensor> CompiledModel::Impl::plain(Slots& s, int v, uint8_t cq) {
  TS_ASSIGN_OR_RETURN(Tensor t, get(s, v));
  if (!nhwc[static_cast<size_t>(v)]) return t;
  if (same_bytes_either_layout(v) && t.layout() == Layout::ROW_MAJOR && !t.memory_config().is_sharded())
    return reshape(t, to_shape(dims(v)));
  return permute(t, kNhwcToNchwPerm, {.cq_id = cq});
}

StatusOr<Tensor> CompiledModel::Impl::as_nhwc(Slots& s, int v, uint8_t cq, bool dense) {
  const bool moves = !nhwc[static_cast<size_t>(v)] && !same_bytes_either_layout(v);
  const bool converts = moves && in_caller_dtype(s, v);  // a graph input: converted as it moves
  TS_ASSIGN_OR_RETURN(Tensor t, converts ? *s[static_cast<size_t>(v)] : get(s, v));
  if (nhwc[static_cast<size_t>(v)]) return t;
  const DataType dt = converts ? act_dtype() : t.dtype();
  const Dims& d4 = dims(v);
  if (dense && moves && (d4[1] * static_cast<int64_t>(element_size(dt))) % 4 == 0) {
    const auto rows = static_cast<uint32_t>(d4[0] * d4[2] * d4[3]), cols = static_cast<uint32_t>(d4[1]);
    const MemoryConfig one_shard{
        TensorMemoryLayout::HEIGHT_SHARDED, BufferType::DRAM,
        ShardSpec{CoreRangeSet(CoreRange({0, 0}, {0, 0})), {rows, cols}, ShardOrientation::ROW_MAJOR}};
    return permute(t, kNchwToNhwcPerm, dt, {.memory_config = one_shard, .cq_id = cq});
  }
  if (same_bytes_either_layout(v) && !t.memory_config().is_sharded()) {
    const Dims& d = dims(v);
    return reshape(t, Shape{static_cast<uint32_t>(d[0]), static_cast<uint32_t>(d[2]), static_cast<uint32_t>(d[3]),
                            static_cast<uint32_t>(d[1])});
  }
  return permute(t, kNchwToNhwcPerm, dt, {.cq_id = cq});
}

void CompiledModel::Impl::note_plain(int v) {
  if (v >= 0 && nhwc[static_cast<size_t>(v)]) ++report.layout_conversions;
}

void CompiledModel::Impl::note_nhwc(int v) {
  if (v >= 0 && !nhwc[static_cast<size_t>(v)] && !g.is_constant(v)) ++report.layout_conversions;
}

Status CompiledModel::Impl::put(Slots& s, int v, Tensor t) {
  s[static_cast<size_t>(v)] = std::move(t);
  return ok_status();
}

// (The reshaped tensor goes straight into its slot: GCC 12 reports a
// moved-from local Tensor's optional shard spec as maybe-uninitialized.)
Status CompiledModel::Impl::put_nhwc(Slots& s, int v, const Tensor& t) {
  const Dims& d = dims(v);
  StatusOr<Tensor> r = reshape(t, Shape{static_cast<uint32_t>(d[0]), static_cast<uint32_t>(d[2]),
                                        static_cast<uint32_t>(d[3]), static_cast<uint32_t>(d[1])});
  if (!r.ok()) return r.status();
  s[static_cast<size_t>(v)] = *r;
  return ok_status();
}

Status CompiledModel::Impl::put_plain(Slots& s, int v, const Tensor& t) {
  if (t.shape().volume() != to_shape(dims(v)).volume())
    return internal_error("value '{}': the kernel produced {}, the graph says {}", g.value(v).name,
                          t.shape().to_string(), graph::dims_to_string(dims(v)));
  if (t.shape() == to_shape(dims(v))) return put(s, v, t);
  StatusOr<Tensor> r = reshape(t, to_shape(dims(v)));
  if (!r.ok()) return r.status();
  s[static_cast<size_t>(v)] = *r;
  return ok_status();
}

}  // namespace tessera::runtime
