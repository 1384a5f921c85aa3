// Lowering data movement: Concat, the Reshape family, Transpose, Slice / Pad / Split.
#include "lowering.h"

#include "tessera/ops/concat_affine.h"

namespace tessera::runtime {

namespace {

// The slice of the whole of a value of dims `d`; callers narrow one axis.
SliceParams whole_slice(const Dims& d) {
  SliceParams sl;
  for (int64_t v : d) sl.begin.push_back(0), sl.end.push_back(static_cast<uint32_t>(v)), sl.step.push_back(1);
  return sl;
}

}  // namespace

// Tile with constant repeats: each axis repeated r > 1 times becomes a
// concat of r copies along it, in the layout the input has (NHWC for a
// 4-D value a conv wrote). Zero repeats (an empty result) run on the host.
// DepthToSpace and SpaceToDepth (a super-resolution model's pixel shuffle)
// as one permute of the NHWC value: DepthToSpace views (N, H, W, C) as (N,
// H, W, b, b, C') (DCR: channel (b1 b + b2) C' + c) or (N, H, W, C', b, b)
// (CRD) and moves the block axes beside H and W; SpaceToDepth the reverse of
// DCR. The result is NHWC.
Status CompiledModel::Impl::lower_depth_space(const Node& n) {
  const int x = n.inputs[0], y = n.outputs[0];
  const int64_t bs = n.attr_int("blocksize", 0);
  if (rank(x) != 4 || bs < 1) return not_covered(n);
  const Dims& xd = dims(x);
  const Dims& yd = dims(y);
  const auto u = [](int64_t v) { return static_cast<uint32_t>(v); };
  const uint32_t b = u(bs), nn = u(xd[0]);
  Shape view, out;
  std::array<int, 6> perm{};
  if (n.op_type == "DepthToSpace") {
    const uint32_t h = u(xd[2]), w = u(xd[3]), c = u(yd[1]);
    const bool crd = n.attr_string("mode", "DCR") == "CRD";
    view = crd ? Shape{nn, h, w, c, b, b} : Shape{nn, h, w, b, b, c};
    perm = crd ? std::array<int, 6>{0, 1, 4, 2, 5, 3} : std::array<int, 6>{0, 1, 3, 2, 4, 5};
    out = Shape{nn, h * b, w * b, c};
  } else {
    const uint32_t h = u(yd[2]), w = u(yd[3]), c = u(xd[1]);
    view = Shape{nn, h, b, w, b, c};
    perm = {0, 1, 3, 2, 4, 5};
    out = Shape{nn, h, w, b * b * c};
  }
  note_nhwc(x);
  nhwc[static_cast<size_t>(y)] = true;
  steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
    TS_ASSIGN_OR_RETURN(Tensor t, as_nhwc(s, x, cq));
    TS_ASSIGN_OR_RETURN(t, reshape(t, view));
    TS_ASSIGN_OR_RETURN(t, permute(t, perm, {.cq_id = cq}));
    TS_ASSIGN_OR_RETURN(t, reshape(t, out));
    return put_nhwc(s, y, t);
  });
  return ok_status();
}

Status CompiledModel::Impl::lower_tile(const Node& n) {
  const int x = n.inputs[0], y = n.outputs[0];
  if (n.inputs.size() != 2 || !g.is_constant(n.inputs[1])) return not_covered(n);
  const graph::HostTensor& r = *g.value(n.inputs[1]).constant;
  if (r.type != graph::ElemType::INT64 || r.i.size() != rank(x)) return not_covered(n);
  for (int64_t k : r.i)
    if (k < 1 || k > (int64_t{1} << 16)) return not_covered(n);
  const bool use_nhwc = rank(x) == 4 && nhwc[static_cast<size_t>(x)];
  if (use_nhwc)
    note_nhwc(x);
  else
    note_plain(x);
  nhwc[static_cast<size_t>(y)] = use_nhwc;
  const std::vector<int64_t> repeats = r.i;
  steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
    TS_ASSIGN_OR_RETURN(Tensor t, use_nhwc ? as_nhwc(s, x, cq) : plain(s, x, cq));
    for (size_t d = 0; d < repeats.size(); ++d) {
      if (repeats[d] == 1) continue;
      const std::vector<Tensor> copies(static_cast<size_t>(repeats[d]), t);
      TS_ASSIGN_OR_RETURN(t, concat(copies, use_nhwc ? kToNhwc[d] : static_cast<int>(d), {.cq_id = cq}));
    }
    return use_nhwc ? put_nhwc(s, y, t) : put_plain(s, y, t);
  });
  return ok_status();
}

Status CompiledModel::Impl::lower_concat(const Node& n) {
  const int y = n.outputs[0];
  const size_t r = rank(y);
  int64_t axis = n.attr_int("axis", 0);
  if (axis < 0) axis += static_cast<int64_t>(r);
  bool any_nhwc = false;
  for (int in : n.inputs) any_nhwc = any_nhwc || (in >= 0 && nhwc[static_cast<size_t>(in)]);
  // A per-channel affine (graph::fuse_concat_affine) runs over NHWC rows,
  // the channels last.
  const std::vector<float> scale = n.attr_floats("tessera_channel_scale"),
                           shift = n.attr_floats("tessera_channel_shift");
  const bool affine = !scale.empty();
  if (affine && (r != 4 || (axis != 1) || scale.size() != static_cast<size_t>(dims(y)[1]) || shift.size() != scale.size()))
    return internal_error("{}: a channel affine of {} scales and {} shifts for a {}-D output along axis {}", n.label(),
                          scale.size(), shift.size(), r, axis);
  const bool out_nhwc = r == 4 && (any_nhwc || affine);
  std::optional<Tensor> scale_t, shift_t;
  if (affine) {
    const auto c = static_cast<int64_t>(scale.size());
    TS_ASSIGN_OR_RETURN(scale_t, upload(graph::HostTensor::floats({c}, scale), {c}, DataType::FLOAT32));
    TS_ASSIGN_OR_RETURN(shift_t, upload(graph::HostTensor::floats({c}, shift), {c}, DataType::FLOAT32));
  }
  const UnaryWithParam act = activation_of(n).value_or(UnaryWithParam{UnaryOpType::IDENTITY});
  std::vector<std::optional<Tensor>> consts(n.inputs.size());
  for (size_t k = 0; k < n.inputs.size(); ++k) {
    const int in = n.inputs[k];
    if (g.is_constant(in)) {
      TS_ASSIGN_OR_RETURN(consts[k], out_nhwc ? constant_nhwc(in) : constant(in));
    } else if (out_nhwc)
      note_nhwc(in);
    else
      note_plain(in);
  }
  nhwc[static_cast<size_t>(y)] = out_nhwc;
  const int dim = out_nhwc ? kToNhwc[axis] : static_cast<int>(axis);
  const std::vector<int> ins = n.inputs;
  if (out_nhwc && dim == 3 && ins.size() <= 4 && !affine &&
      std::none_of(ins.begin(), ins.end(), [&](int in) { return in < 0 || g.is_constant(in); }))
    channel_concats[y] = {lowering, ins};
  steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
    std::vector<Tensor> ts;
    for (size_t k = 0; k < ins.size(); ++k) {
      if (consts[k]) {
        ts.push_back(*consts[k]);
        continue;
      }
      TS_ASSIGN_OR_RETURN(Tensor t, out_nhwc ? as_nhwc(s, ins[k], cq) : plain(s, ins[k], cq));
      // (Inputs of different dtypes, by precision rules: each in the result's.)
      if (has_value_df && t.dtype() != planned_dtype(y)) {
        TS_ASSIGN_OR_RETURN(t, typecast(t, planned_dtype(y), cq));
      }
      ts.push_back(std::move(t));
    }
    // A graph output in a bfloat16 run leaves in float32, converted as it
    // is copied (out_dtype).
    const DataType dtype = out_dtype(y).value_or(ts[0].dtype());
    if (affine) {
      TS_ASSIGN_OR_RETURN(Tensor out, concat_affine(ts, *scale_t, *shift_t, act, dtype, {.cq_id = cq}));
      return put(s, y, out);
    }
    TS_ASSIGN_OR_RETURN(Tensor out, concat(ts, dim, dtype, {.cq_id = cq}));
    return put(s, y, out);
  });
  return ok_status();
}

// A Reshape of an NHWC-resident [N, A * B, H, W] value into [N, A, B, H, W]
// whose one reader is a Transpose: the NHWC rows viewed as (N, H, W, A, B),
// so the Transpose is one permute of those rows. YOLO's detection head
// (0, 1, 3, 4, 2: anchors by box fields) moves whole runs of B values; taken
// plainly it was two full transposes (NHWC -> NCHW, then B innermost), 0.7
// ms each for YOLO's 80x80x255 head. A channel shuffle (0, 2, 1, 3, 4, then
// a Reshape back to [N, C, H, W]: merges_split_channels) stays NHWC
// throughout: one permute within each pixel's channels.
bool CompiledModel::Impl::splits_channels_for_transpose(const Node& n) const {
  const int x = n.inputs[0], y = n.outputs[0];
  if (!nhwc[static_cast<size_t>(x)] || rank(x) != 4 || rank(y) != 5) return false;
  const Dims& xd = dims(x);
  const Dims& yd = dims(y);
  if (yd[0] != xd[0] || yd[1] * yd[2] != xd[1] || yd[3] != xd[2] || yd[4] != xd[3]) return false;
  if (std::find(g.outputs.begin(), g.outputs.end(), y) != g.outputs.end()) return false;
  const std::vector<std::pair<int, int>> readers = g.consumers()[static_cast<size_t>(y)];
  if (readers.size() != 1) return false;
  return g.nodes[static_cast<size_t>(readers[0].first)].op_type == "Transpose";
}

bool CompiledModel::Impl::merges_split_channels(const Node& transpose) const {
  const int y = transpose.outputs[0];
  if (transpose.attr_ints("perm") != Dims{0, 2, 1, 3, 4}) return false;
  if (std::find(g.outputs.begin(), g.outputs.end(), y) != g.outputs.end()) return false;
  const auto& readers = consumers[static_cast<size_t>(y)];
  if (readers.size() != 1) return false;
  const Node& r = g.nodes[static_cast<size_t>(readers[0].first)];
  const Dims& yd = dims(y);
  return r.op_type == "Reshape" && rank(r.outputs[0]) == 4 &&
         dims(r.outputs[0]) == Dims{yd[0], yd[1] * yd[2], yd[3], yd[4]};
}

Status CompiledModel::Impl::lower_reshape(const Node& n) {
  const int x = n.inputs[0], y = n.outputs[0];
  const std::string& op = n.op_type;
  if (split_nhwc[static_cast<size_t>(x)]) {  // a shuffled (N, H, W, B, A) view back to NHWC channels
    nhwc[static_cast<size_t>(y)] = true;
    steps.push_back([=, this](Slots& s, uint8_t) -> Status {
      TS_ASSIGN_OR_RETURN(Tensor in, get(s, x));
      return put_nhwc(s, y, in);
    });
    return ok_status();
  }
  if (op == "Reshape" && splits_channels_for_transpose(n)) {
    // Kept as the NHWC rows viewed as (N, H, W, A, B): the Transpose moves
    // whole runs of B values (see splits_channels_for_transpose).
    split_nhwc[static_cast<size_t>(y)] = true;
    const Dims& d = dims(y);
    const Shape view{static_cast<uint32_t>(d[0]), static_cast<uint32_t>(d[3]), static_cast<uint32_t>(d[4]),
                     static_cast<uint32_t>(d[1]), static_cast<uint32_t>(d[2])};
    steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
      TS_ASSIGN_OR_RETURN(Tensor in, get(s, x));
      if (in.memory_config().is_sharded()) {
        TS_ASSIGN_OR_RETURN(in, to_memory_config(in, DRAM_MEMORY_CONFIG, cq));
      }
      TS_ASSIGN_OR_RETURN(Tensor out, reshape(in, view));
      return put(s, y, out);
    });
    return ok_status();
  }
  note_plain(x);
  steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
    TS_ASSIGN_OR_RETURN(Tensor in, plain(s, x, cq));
    TS_ASSIGN_OR_RETURN(Tensor out, reshape(in, to_shape(dims(y))));
    return put(s, y, out);
  });
  return ok_status();
}

Status CompiledModel::Impl::lower_transpose(const Node& n) {
  const int x = n.inputs[0], y = n.outputs[0];
  const size_t r = rank(x);
  Dims perm = n.attr_ints("perm");
  if (perm.empty())
    for (size_t k = 0; k < r; ++k) perm.push_back(static_cast<int64_t>(r - 1 - k));
  const bool from_nhwc = nhwc[static_cast<size_t>(x)];
  std::vector<int> p(r);
  for (size_t k = 0; k < r; ++k) p[k] = from_nhwc ? kToNhwc[perm[k]] : static_cast<int>(perm[k]);
  if (split_nhwc[static_cast<size_t>(x)]) {
    // Logical [N, A, B, H, W] stored as (N, H, W, A, B): axis d at kSplitAt[d].
    static constexpr int kSplitAt[5] = {0, 3, 4, 1, 2};
    if (merges_split_channels(n)) {
      split_nhwc[static_cast<size_t>(y)] = true;  // [N, B, A, H, W] stored as (N, H, W, B, A)
      p = {0, 1, 2, 4, 3};
    } else {
      for (size_t k = 0; k < r; ++k) p[k] = kSplitAt[perm[k]];
    }
  }
  // NHWC storage is channels-last, so two transposes move no bytes: an NHWC
  // value to (N, H, W, C) is its storage read plainly, and a plain (N, H, W,
  // C) value to (N, C, H, W) is stored as NHWC (linear_to_conv's transposes,
  // LayerNorm over channels between two permutes).
  bool identity = true;
  for (size_t k = 0; k < r; ++k) identity = identity && p[k] == static_cast<int>(k);
  if (identity) {
    steps.push_back([=, this](Slots& s, uint8_t) -> Status {
      TS_ASSIGN_OR_RETURN(Tensor in, get(s, x));
      return put_plain(s, y, in);
    });
    return ok_status();
  }
  if (!from_nhwc && !split_nhwc[static_cast<size_t>(x)] && r == 4 && perm == Dims{0, 3, 1, 2}) {
    nhwc[static_cast<size_t>(y)] = true;
    steps.push_back([=, this](Slots& s, uint8_t) -> Status {
      TS_ASSIGN_OR_RETURN(Tensor in, get(s, x));
      return put_nhwc(s, y, in);
    });
    return ok_status();
  }
  steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
    TS_ASSIGN_OR_RETURN(Tensor in, get(s, x));
    TS_ASSIGN_OR_RETURN(Tensor out, permute(in, p, {.cq_id = cq}));
    return put(s, y, out);
  });
  return ok_status();
}

// Pad in reflect or edge mode: per padded axis, the slices of the positions
// it repeats (one per padded position, mirrored or the edge's) around the
// whole value, concatenated along that axis; the layout kept.
Status CompiledModel::Impl::lower_edge_pad(const Node& n) {
  const int x = n.inputs[0], y = n.outputs[0];
  const std::string mode = n.attr_string("mode", "constant");
  if (mode != "reflect" && mode != "edge") return lower_fallback(n, fmt::format("pad mode '{}'", mode));
  if (n.inputs.size() > 3 && n.inputs[3] >= 0) return lower_fallback(n, "the axes input");
  const size_t r = rank(x);
  const Dims& xd = dims(x);
  const Dims pads = g.opset >= 11 ? g.value(n.inputs[1]).constant->i : n.attr_ints("pads");
  if (pads.size() != 2 * r) return not_covered(n);
  const bool in_nhwc = nhwc[static_cast<size_t>(x)] && r == 4;
  struct Axis {
    int dim;                                    // in the device layout
    std::vector<std::optional<SliceParams>> pieces;  // in output order; nullopt: the whole value
  };
  std::vector<Axis> axes;
  Dims at = xd;  // the value's dims in the device layout, as each axis is padded in turn
  if (in_nhwc)
    for (size_t d = 0; d < 4; ++d) at[static_cast<size_t>(kToNhwc[d])] = xd[d];
  for (size_t d = 0; d < r; ++d) {
    const int64_t before = pads[d], after = pads[d + r], len = xd[d];
    if (before == 0 && after == 0) continue;
    if (before < 0 || after < 0) return lower_fallback(n, "negative pads (cropping)");
    if (mode == "reflect" && (before >= len || after >= len))
      return lower_fallback(n, fmt::format("a reflect pad of {} / {} on a dim of {}", before, after, len));
    Axis a{in_nhwc ? kToNhwc[d] : static_cast<int>(d), {}};
    const auto dim = static_cast<size_t>(a.dim);
    auto piece = [&](int64_t p) {  // the one position p along the axis
      SliceParams sl = whole_slice(at);
      sl.begin[dim] = static_cast<uint32_t>(p), sl.end[dim] = static_cast<uint32_t>(p + 1);
      a.pieces.push_back(sl);
    };
    for (int64_t i = before; i >= 1; --i) piece(mode == "edge" ? 0 : i);
    a.pieces.push_back(std::nullopt);
    for (int64_t i = 1; i <= after; ++i) piece(mode == "edge" ? len - 1 : len - 1 - i);
    at[dim] += before + after;
    axes.push_back(std::move(a));
  }
  nhwc[static_cast<size_t>(y)] = in_nhwc;
  steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
    TS_ASSIGN_OR_RETURN(Tensor t, get(s, x));
    if (t.memory_config().is_sharded()) {
      TS_ASSIGN_OR_RETURN(t, to_memory_config(t, DRAM_MEMORY_CONFIG, cq));
    }
    for (const Axis& a : axes) {
      std::vector<Tensor> parts;
      for (const std::optional<SliceParams>& sl : a.pieces) {
        if (!sl) {
          parts.push_back(t);
          continue;
        }
        TS_ASSIGN_OR_RETURN(Tensor piece, slice(t, *sl, {.cq_id = cq}));
        parts.push_back(std::move(piece));
      }
      TS_ASSIGN_OR_RETURN(t, concat(parts, a.dim, {.cq_id = cq}));
    }
    return put(s, y, t);
  });
  return ok_status();
}

Status CompiledModel::Impl::lower_slice_pad_split(const Node& n) {
  const int x = n.inputs[0], y = n.outputs[0];
  const std::string& op = n.op_type;
  // Evaluate the index arithmetic once on the host: per output, begin/end/step per dim (plain layout).
  const size_t r = rank(x);
  const bool from_nhwc = nhwc[static_cast<size_t>(x)] && r == 4;
  auto map = [&](auto v) {  // reorder per-dim NCHW values to NHWC
    if (!from_nhwc) return v;
    auto o = v;
    for (size_t d = 0; d < 4; ++d) o[static_cast<size_t>(kToNhwc[d])] = v[d];
    return o;
  };
  if (op == "Pad" && n.attr_string("mode", "constant") != "constant") return lower_edge_pad(n);
  if (op == "Pad") {
    const Dims& xd = dims(x);
    const Dims& yd = dims(y);
    Dims pads = n.attr_ints("pads");
    if (g.opset >= 11) pads = g.value(n.inputs[1]).constant->i;
    if (n.inputs.size() > 3 && n.inputs[3] >= 0) return lower_fallback(n, "the axes input");
    float value = n.attr_float("value", 0.0f);
    if (g.opset >= 11 && n.inputs.size() > 2 && n.inputs[2] >= 0 && g.value(n.inputs[2]).constant->size())
      value = static_cast<float>(g.value(n.inputs[2]).constant->at(0));
    std::vector<std::array<uint32_t, 2>> pp(r);
    for (size_t d = 0; d < r; ++d) {
      if (pads[d] < 0 || pads[d + r] < 0) return lower_fallback(n, "negative pads (cropping)");
      pp[d] = {static_cast<uint32_t>(pads[d]), static_cast<uint32_t>(pads[d + r])};
    }
    (void)xd, (void)yd;
    pp = map(pp);
    nhwc[static_cast<size_t>(y)] = from_nhwc;
    steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
      TS_ASSIGN_OR_RETURN(Tensor in, get(s, x));
      TS_ASSIGN_OR_RETURN(Tensor out, pad(in, pp, value, {.cq_id = cq}));
      return put(s, y, out);
    });
    return ok_status();
  }
  // Slice / Split: per output the [begin, end) per dim.
  std::vector<SliceParams> slices;
  if (op == "Slice") {
    // Re-derive begin/step from the host kernel's rules on a small index probe.
    std::vector<int64_t> starts, ends, axes, steps_v;
    if (g.opset < 10) {
      starts = n.attr_ints("starts"), ends = n.attr_ints("ends"), axes = n.attr_ints("axes");
    } else {
      starts = g.value(n.inputs[1]).constant->i, ends = g.value(n.inputs[2]).constant->i;
      if (n.inputs.size() > 3 && n.inputs[3] >= 0) axes = g.value(n.inputs[3]).constant->i;
      if (n.inputs.size() > 4 && n.inputs[4] >= 0) steps_v = g.value(n.inputs[4]).constant->i;
    }
    if (axes.empty())
      for (size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<int64_t>(k));
    if (steps_v.empty()) steps_v.assign(starts.size(), 1);
    const Dims& xd = dims(x);
    SliceParams sl = whole_slice(xd);
    for (size_t k = 0; k < starts.size(); ++k) {
      const auto d = static_cast<size_t>(axes[k] < 0 ? axes[k] + static_cast<int64_t>(r) : axes[k]);
      const int64_t dim = xd[d];
      if (steps_v[k] < 1) return lower_fallback(n, "negative steps");
      auto clamp = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + dim : v, 0, dim); };
      sl.begin[d] = static_cast<uint32_t>(clamp(starts[k]));
      sl.end[d] = static_cast<uint32_t>(clamp(ends[k]));
      sl.step[d] = static_cast<uint32_t>(steps_v[k]);
      if (sl.begin[d] >= sl.end[d]) return lower_fallback(n, "an empty result");
    }
    slices.push_back(sl);
  } else {
    const Dims& xd = dims(x);
    int64_t axis = n.attr_int("axis", 0);
    if (axis < 0) axis += static_cast<int64_t>(r);
    uint32_t begin = 0;
    for (int o : n.outputs) {
      SliceParams sl = whole_slice(xd);
      const auto len = static_cast<uint32_t>(dims(o)[static_cast<size_t>(axis)]);
      if (len == 0) return lower_fallback(n, "an empty output");
      sl.begin[static_cast<size_t>(axis)] = begin;
      sl.end[static_cast<size_t>(axis)] = begin + len;
      begin += len;
      slices.push_back(sl);
    }
  }
  for (auto& sl : slices) sl.begin = map(sl.begin), sl.end = map(sl.end), sl.step = map(sl.step);
  const std::vector<int> outs = n.outputs;
  for (int o : outs) nhwc[static_cast<size_t>(o)] = from_nhwc;
  steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
    TS_ASSIGN_OR_RETURN(Tensor in, get(s, x));
    for (size_t k = 0; k < outs.size(); ++k) {
      TS_ASSIGN_OR_RETURN(Tensor out, slice(in, slices[k], {.cq_id = cq}));
      TS_RETURN_IF_ERROR(put(s, outs[k], out));
    }
    return ok_status();
  });
  return ok_status();
}

// Gather of a run-time value at constant indices that are one run of
// consecutive positions (a scalar: qkv[0], x[:, -1]): a slice along the
// axis, then the output's shape (a view).
Status CompiledModel::Impl::lower_gather(const Node& n) {
  const int x = n.inputs[0], y = n.outputs[0];
  const size_t r = rank(x);
  int64_t axis = n.attr_int("axis", 0);
  if (axis < 0) axis += static_cast<int64_t>(r);
  if (axis < 0 || axis >= static_cast<int64_t>(r)) return not_covered(n);
  const graph::HostTensor& idx = *g.value(n.inputs[1]).constant;
  const int64_t len = dims(x)[static_cast<size_t>(axis)];
  std::vector<int64_t> ids;
  for (size_t k = 0; k < idx.size(); ++k) {
    const double i = idx.at(k);  // (checked before the cast: an int64 index may be anything)
    if (!(i >= static_cast<double>(-len) && i < static_cast<double>(len)))
      return lower_fallback(n, fmt::format("index {} out of range for a dim of {}", i, len));
    ids.push_back(static_cast<int64_t>(i) + (i < 0 ? len : 0));
  }
  for (size_t k = 1; k < ids.size(); ++k)
    if (ids[k] != ids[0] + static_cast<int64_t>(k)) return lower_fallback(n, "indices that are not one consecutive run");
  if (ids.empty()) return lower_fallback(n, "an empty result");
  SliceParams sl = whole_slice(dims(x));
  sl.begin[static_cast<size_t>(axis)] = static_cast<uint32_t>(ids[0]);
  sl.end[static_cast<size_t>(axis)] = static_cast<uint32_t>(ids.back() + 1);
  note_plain(x);
  const Shape out = to_shape(dims(y));
  steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
    TS_ASSIGN_OR_RETURN(Tensor in, plain(s, x, cq));
    TS_ASSIGN_OR_RETURN(Tensor t, slice(in, sl, {.cq_id = cq}));
    TS_ASSIGN_OR_RETURN(t, reshape(t, out));
    return put_plain(s, y, t);
  });
  return ok_status();
}

}  // namespace tessera::runtime
