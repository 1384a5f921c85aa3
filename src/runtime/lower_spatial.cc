// Lowering pools, Resize / Upsample and BatchNormalization.
#include "lowering.h"

namespace tessera::runtime {

Status CompiledModel::Impl::lower_pool(const Node& n) {
  const int x = n.inputs[0], y = n.outputs[0];
  if (rank(x) != 4) return lower_fallback(n, fmt::format("{}-D pooling (the device kernel is 2-D)", rank(x) - 2));
  if (n.outputs.size() > 1) return lower_fallback(n, "the Indices output");
  const Dims& xd = dims(x);
  TS_ASSIGN_OR_RETURN(graph::SpatialGeometry geo, graph::spatial_geometry(n, xd, {}));
  const bool average = n.op_type == "AveragePool";
  if (n.attr_int("storage_order", 0) != 0) return lower_fallback(n, "storage_order 1");
  if (geo.pads[0] != geo.pads[2] || geo.pads[1] != geo.pads[3]) return lower_fallback(n, "asymmetric padding");
  if (2 * geo.pads[0] > geo.kernel[0] || 2 * geo.pads[1] > geo.kernel[1])
    return lower_fallback(n, "padding over half the kernel");
  if (average && geo.dilations != Dims{1, 1}) return lower_fallback(n, "dilated average pooling");
  Pool2dParams p;
  p.batch_size = static_cast<uint32_t>(xd[0]);
  p.channels = static_cast<uint32_t>(xd[1]);
  p.input_height = static_cast<uint32_t>(xd[2]);
  p.input_width = static_cast<uint32_t>(xd[3]);
  p.kernel_size = {static_cast<uint32_t>(geo.kernel[0]), static_cast<uint32_t>(geo.kernel[1])};
  p.stride = {static_cast<uint32_t>(geo.strides[0]), static_cast<uint32_t>(geo.strides[1])};
  p.dilation = {static_cast<uint32_t>(geo.dilations[0]), static_cast<uint32_t>(geo.dilations[1])};
  p.padding = {static_cast<uint32_t>(geo.pads[0]), static_cast<uint32_t>(geo.pads[1])};
  p.ceil_mode = n.attr_int("ceil_mode", 0) != 0;
  p.count_include_pad = n.attr_int("count_include_pad", 0) != 0;
  if (!p.validate().ok() || p.output_height() != dims(y)[2] || p.output_width() != dims(y)[3])
    return lower_fallback(n, "a window geometry the device kernel does not produce");
  note_nhwc(x);
  nhwc[static_cast<size_t>(y)] = true;
  steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
    TS_ASSIGN_OR_RETURN(Tensor in, as_nhwc(s, x, cq));
    TS_ASSIGN_OR_RETURN(Tensor out, average ? avg_pool2d(in, p, cq) : max_pool2d(in, p, cq));
    return put_nhwc(s, y, out);
  });
  return ok_status();
}

Status CompiledModel::Impl::lower_resize(const Node& n, bool* lowered) {
  *lowered = false;
  const int x = n.inputs[0], y = n.outputs[0];
  if (rank(x) != 4) return ok_status();
  const Dims& xd = dims(x);
  const Dims& yd = dims(y);
  if (xd[0] != yd[0] || xd[1] != yd[1]) return ok_status();
  const bool upsample_op = n.op_type == "Upsample";
  const std::string mode = n.attr_string("mode", "nearest");
  const std::string ctm = upsample_op ? "asymmetric" : n.attr_string("coordinate_transformation_mode", "half_pixel");
  if (!upsample_op && g.opset >= 11 && n.inputs.size() > 1 && n.inputs[1] >= 0 && ctm == "tf_crop_and_resize")
    return ok_status();
  UpsampleParams up;
  // Scales from the inferred sizes unless the file's scales are given (ONNX
  // maps coordinates with the given scale, not with out/in).
  up.scale_h = static_cast<float>(yd[2]) / static_cast<float>(xd[2]);
  up.scale_w = static_cast<float>(yd[3]) / static_cast<float>(xd[3]);
  const size_t scales_slot = upsample_op || g.opset < 11 ? 1 : 2;
  if (n.inputs.size() > scales_slot && n.inputs[scales_slot] >= 0 && g.is_constant(n.inputs[scales_slot]) &&
      g.value(n.inputs[scales_slot]).constant->size() == 4) {
    up.scale_h = static_cast<float>(g.value(n.inputs[scales_slot]).constant->at(2));
    up.scale_w = static_cast<float>(g.value(n.inputs[scales_slot]).constant->at(3));
  }
  if (mode == "nearest") {
    const std::string nm = n.attr_string("nearest_mode", "round_prefer_floor");
    const bool legacy = upsample_op || g.opset < 11;  // Upsample and Resize-10: asymmetric, floor
    if (!legacy && (ctm != "asymmetric" || nm != "floor")) return ok_status();
    up.mode = UpsampleMode::NEAREST;
  } else if (mode == "linear" || mode == "bilinear") {
    up.mode = UpsampleMode::BILINEAR;
    if (ctm == "align_corners") {
      // ONNX maps with the unrounded output size, PyTorch (and the kernel) with the rounded one.
      if (std::floor(xd[2] * up.scale_h) != xd[2] * up.scale_h || std::floor(xd[3] * up.scale_w) != xd[3] * up.scale_w)
        return ok_status();
      up.align_corners = true;
    } else if (ctm != "half_pixel" && !(ctm == "pytorch_half_pixel" && yd[2] > 1 && yd[3] > 1)) {
      return ok_status();
    }
  } else {
    return ok_status();
  }
  if (mode != "nearest" && (n.attr_int("exclude_outside", 0) != 0)) return ok_status();
  *lowered = true;
  note_nhwc(x);
  nhwc[static_cast<size_t>(y)] = true;
  steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
    TS_ASSIGN_OR_RETURN(Tensor in, as_nhwc(s, x, cq));
    UpsampleParams q = up;
    q.cq_id = cq;
    TS_ASSIGN_OR_RETURN(Tensor out, upsample(in, q));
    if (out.shape().volume() != to_shape(dims(y)).volume())
      return internal_error("{}: upsample produced {}, expected {}", g.value(y).name, out.shape().to_string(),
                            graph::dims_to_string(dims(y)));
    return put_nhwc(s, y, out);
  });
  return ok_status();
}

// A global pool as the reduce `op` over every axis after N and C (kept).
Node CompiledModel::Impl::spatial_reduce(const Node& n, const char* op) const {
  Node r = n;
  r.op_type = op;
  std::vector<int64_t> axes;
  for (int64_t a = 2; a < static_cast<int64_t>(rank(n.inputs[0])); ++a) axes.push_back(a);
  r.attrs["axes"] = graph::Attribute{.kind = graph::Attribute::Kind::INTS, .ints = axes};
  r.attrs["keepdims"] = graph::Attribute{.kind = graph::Attribute::Kind::INT, .i = 1};
  return r;
}

Status CompiledModel::Impl::lower_global_avg_pool(const Node& n) {
  const int x = n.inputs[0], y = n.outputs[0];
  if (rank(x) < 3) return not_covered(n);
  if (rank(x) != 4) return lower_reduce(spatial_reduce(n, "ReduceMean"));  // (a video model's (N, C, T, H, W))
  note_nhwc(x);
  nhwc[static_cast<size_t>(y)] = true;
  steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
    TS_ASSIGN_OR_RETURN(Tensor in, as_nhwc(s, x, cq));
    TS_ASSIGN_OR_RETURN(Tensor out, global_avg_pool2d(in, cq));
    return put_nhwc(s, y, out);
  });
  return ok_status();
}

namespace {

// What a reduction computes around its pools: before them, |x| (L1), x * x
// (SumSquare, L2) or -x (Min); after, since the pools average, the sums
// scaled by the `pooled` element count (L2: sqrt(pooled * s) = sqrt(s) *
// sqrt(pooled), one op) and Min negated back.
struct ReduceMath {
  bool extreme = false, mean = false, square = false;
  std::optional<UnaryWithParam> pre, post;

  ReduceMath(const std::string& op, float pooled)
      : extreme(op == "ReduceMax" || op == "ReduceMin"),
        mean(op == "ReduceMean"),
        square(op == "ReduceSumSquare" || op == "ReduceL2") {
    if (op == "ReduceL1") pre = UnaryWithParam{UnaryOpType::ABS};
    if (op == "ReduceMin") pre = UnaryWithParam{UnaryOpType::NEG};
    if (!mean && !extreme && pooled != 1.0f) post = UnaryWithParam{.scale = pooled};
    if (op == "ReduceL2") post = UnaryWithParam{.op = UnaryOpType::SQRT, .scale = std::sqrt(pooled)};
    if (op == "ReduceMin") post = UnaryWithParam{UnaryOpType::NEG};
  }
  // x with the operation before the pools (x itself when there is none).
  StatusOr<Tensor> before(const Tensor& x, uint8_t cq) const {
    if (square) return mul(x, x, {.cq_id = cq});
    if (pre) return unary(x, *pre, {.cq_id = cq});
    return x;
  }
  bool has_before() const { return square || pre.has_value(); }
};

}  // namespace

// GlobalMaxPool: ReduceMax over every spatial axis, dims kept (lower_reduce:
// a max pool over the whole image for a 4-D value).
Status CompiledModel::Impl::lower_global_max_pool(const Node& n) {
  if (rank(n.inputs[0]) < 3) return not_covered(n);
  return lower_reduce(spatial_reduce(n, "ReduceMax"));
}

// ReduceMean over the spatial axes of an image (a squeeze-excitation
// block's or a classifier's `x.mean((2, 3))`) is a global average pool, with
// or without the kept dims. Other axes run on the host.
// ReduceMean / Sum / SumSquare / L1 / L2 / Max / Min of a 4-D value over
// its spatial axes (2, 3) or its channels (1), built from device ops:
//   spatial: global_avg_pool2d (times H * W for the sums), or max_pool2d
//            over the whole image; Min as -max(-x);
//   channels: a 1x1 conv to one channel with weights 1 (1 / C for the mean);
// with |x| or x * x before (L1; SumSquare, L2) and sqrt after (L2, fused
// into the scale or the conv). Max / Min over channels and other axes stay
// host fallbacks.
// Reductions of a 4-D value over any of its channel and spatial axes (not
// the batch), in its NHWC storage: the spatial part by a pool whose window
// spans the reduced axes (max_pool2d for Max / Min, avg_pool2d for the
// sums), then the channel part by a 1x1 conv of ones (the sums) or a max
// pool over each pixel's channels (Max / Min); |x|, x * x or -x before, the
// scale, sqrt or negation after.
Status CompiledModel::Impl::lower_reduce(const Node& n) {
  const int x = n.inputs[0], y = n.outputs[0];
  const std::string& op = n.op_type;
  std::vector<int64_t> axes = n.attr_ints("axes");
  const bool axes_input = (op == "ReduceSum" && g.opset >= 13) || g.opset >= 18;
  if (axes_input && n.inputs.size() > 1 && n.inputs[1] >= 0) {
    if (!g.is_constant(n.inputs[1])) return not_covered(n);
    const HostTensor& a = *g.value(n.inputs[1]).constant;
    axes.assign(a.i.begin(), a.i.end());
  }
  if (n.outputs.size() != 1) return not_covered(n);
  const auto r = static_cast<int64_t>(rank(x));
  if (axes.empty() && n.attr_int("noop_with_empty_axes", 0) == 0)  // every axis
    for (int64_t a = 0; a < r; ++a) axes.push_back(a);
  for (int64_t& a : axes) a = a < 0 ? a + r : a;
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  if (!axes.empty() && (axes.front() < 0 || axes.back() >= r)) return not_covered(n);  // (the host says why)
  // Images over channels and pixels: pools and a conv on the NHWC value; anything else row by row.
  if (r != 4 || axes.empty() || axes.front() == 0) return lower_reduce_rows(n, axes);
  const auto has = [&](int64_t a) { return std::find(axes.begin(), axes.end(), a) != axes.end(); };
  const bool over_c = has(1), over_h = has(2), over_w = has(3);
  const bool keep = n.attr_int("keepdims", 1) != 0;
  const Dims& xd = dims(x);
  const auto nn = static_cast<uint32_t>(xd[0]), c = static_cast<uint32_t>(xd[1]), h = static_cast<uint32_t>(xd[2]),
             w = static_cast<uint32_t>(xd[3]);
  const uint32_t oh = over_h ? 1 : h, ow = over_w ? 1 : w, oc = over_c ? 1 : c;
  // The spatial pool averages over its area; the channel sums are a conv.
  const ReduceMath math(op, static_cast<float>(uint64_t{h / oh} * (w / ow)));
  const bool extreme = math.extreme, mean = math.mean;
  const std::optional<UnaryWithParam> post = math.post;
  const bool pool_spatial = over_h || over_w;
  const Pool2dParams spatial{.batch_size = nn,
                             .input_height = h,
                             .input_width = w,
                             .channels = c,
                             .kernel_size = {h / oh, w / ow},
                             .stride = {h / oh, w / ow}};
  const uint32_t pixels = nn * oh * ow;
  const Pool2dParams across_c{.batch_size = 1,
                              .input_height = pixels,
                              .input_width = c,
                              .channels = 1,
                              .kernel_size = {1, c},
                              .stride = {1, c}};
  cnn::DirectConv2d* sum_c = nullptr;  // the channel sums: a 1x1 conv of ones
  if (over_c && !extreme) {
    Conv2dParams p{.batch_size = nn,
                   .input_height = oh,
                   .input_width = ow,
                   .in_channels = c,
                   .out_channels = 1,
                   .kernel_size = {1, 1}};
    const std::vector<float> ones(c, mean ? 1.0f / static_cast<float>(c) : 1.0f);
    TS_ASSIGN_OR_RETURN(Tensor wt, Tensor::from_vector(ones, Shape{1, c, 1, 1}, DataType::FLOAT32));
    Conv2dConfig config{.dtype = post ? std::nullopt : out_dtype(y)};
    config.compute_config.math_fidelity = opt.math_fidelity;
    convs.push_back(std::make_unique<cnn::DirectConv2d>(p, wt, std::nullopt, config));
    sum_c = convs.back().get();
    report.conv_flops += per_run(lowering, p.flops());
  }
  note_nhwc(x);
  // The result in NHWC storage is (N, OH, OW, OC): the graph's value with
  // keepdims; without it, the same bytes unless both channels and a spatial
  // axis remain (then it moves to NCHW first).
  const bool moves = !keep && oc > 1 && oh * ow > 1;
  if (keep) nhwc[static_cast<size_t>(y)] = true;
  steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
    TS_ASSIGN_OR_RETURN(Tensor t, as_nhwc(s, x, cq, /*dense=*/!pool_spatial));
    TS_ASSIGN_OR_RETURN(t, math.before(t, cq));
    if (pool_spatial) {
      TS_ASSIGN_OR_RETURN(t, extreme ? max_pool2d(t, spatial, cq) : avg_pool2d(t, spatial, cq));
    }
    if (sum_c) {
      TS_ASSIGN_OR_RETURN(t, reshape(t, Shape{nn, oh, ow, c}));
      TS_ASSIGN_OR_RETURN(t, (*sum_c)(t, cq));
    } else if (over_c) {
      TS_ASSIGN_OR_RETURN(t, reshape(t, Shape{1, pixels, c, 1}));
      TS_ASSIGN_OR_RETURN(t, max_pool2d(t, across_c, cq));
    }
    if (post) {
      TS_ASSIGN_OR_RETURN(t, unary(t, *post, {.dtype = out_dtype(y), .cq_id = cq}));
    }
    if (keep) return put_nhwc(s, y, t);
    if (moves) {
      TS_ASSIGN_OR_RETURN(t, reshape(t, Shape{nn, oh, ow, oc}));
      TS_ASSIGN_OR_RETURN(t, permute(t, kNhwcToNchwPerm, {.cq_id = cq}));
    }
    return put_plain(s, y, t);
  });
  return ok_status();
}

// Reductions of any rank over any axes (the batch axis, every axis, none
// with noop_with_empty_axes) on the plain row-major value. Size-1 axes drop
// out and adjacent axes of one kind merge into runs; each reduced run R, with
// `outer` the kept elements before it and `inner` every element after it,
// is one pool over an (N = outer, H = R, W = 1, C = inner) view, the runs
// one after another (means and extremes compose; sums scale by the whole
// reduced count at the end, as the 4-D path does).
Status CompiledModel::Impl::lower_reduce_rows(const Node& n, std::vector<int64_t> axes) {
  const int x = n.inputs[0], y = n.outputs[0];
  const std::string& op = n.op_type;
  const Dims& xd = dims(x);
  std::vector<bool> reduced(xd.size(), false);
  for (int64_t a : axes) reduced[static_cast<size_t>(a)] = true;
  std::vector<std::pair<uint64_t, bool>> runs;  // (size, reduced)
  uint64_t count = 1;
  for (size_t k = 0; k < xd.size(); ++k) {
    const auto d = static_cast<uint64_t>(xd[k]);
    if (d == 1) continue;
    if (reduced[k]) count *= d;
    if (!runs.empty() && runs.back().second == reduced[k])
      runs.back().first *= d;
    else
      runs.push_back({d, reduced[k]});
  }
  const ReduceMath math(op, static_cast<float>(count));
  std::vector<Pool2dParams> pools;
  for (size_t i = 0; i < runs.size(); ++i) {
    if (!runs[i].second) continue;
    uint64_t outer = 1, inner = 1;
    for (size_t j = 0; j < i; ++j) outer *= runs[j].second ? 1 : runs[j].first;
    for (size_t j = i + 1; j < runs.size(); ++j) inner *= runs[j].first;
    const uint64_t big = std::max({outer, inner, runs[i].first});
    if (big > std::numeric_limits<uint32_t>::max()) return not_covered(n);
    const auto len = static_cast<uint32_t>(runs[i].first);
    pools.push_back({.batch_size = static_cast<uint32_t>(outer),
                     .input_height = len,
                     .input_width = 1,
                     .channels = static_cast<uint32_t>(inner),
                     .kernel_size = {len, 1},
                     .stride = {len, 1}});
  }
  note_plain(x);
  const std::optional<DataType> od = out_dtype(y);
  const Shape out_shape = to_shape(dims(y));
  steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
    TS_ASSIGN_OR_RETURN(Tensor t, plain(s, x, cq));
    TS_ASSIGN_OR_RETURN(t, math.before(t, cq));
    for (const Pool2dParams& p : pools) {
      TS_ASSIGN_OR_RETURN(t, reshape(t, Shape{p.batch_size, p.input_height, 1, p.channels}));
      TS_ASSIGN_OR_RETURN(t, math.extreme ? max_pool2d(t, p, cq) : avg_pool2d(t, p, cq));
    }
    // (A copy when nothing else wrote a new tensor: t is still x's own.)
    if (math.post || (!math.has_before() && pools.empty()) || (od && t.dtype() != *od)) {
      TS_ASSIGN_OR_RETURN(t, unary(t, math.post.value_or(UnaryWithParam{}), {.dtype = od, .cq_id = cq}));
    }
    TS_ASSIGN_OR_RETURN(t, reshape(t, out_shape));
    return put_plain(s, y, t);
  });
  return ok_status();
}

// ArgMax / ArgMin: the index of the extreme along `axis` as an exact float
// (the device's integers; arg_reduce.h). Over the channels of an NHWC image
// (a segmentation head's per-pixel class) each pixel's channels are a row:
// no permute, and the (N, 1, H, W) result holds the same bytes in either
// layout. Otherwise a permute that keeps the other axes in order moves the
// axis last, and the result holds the output's elements in order.
Status CompiledModel::Impl::lower_arg_reduce(const Node& n) {
  const int x = n.inputs[0], y = n.outputs[0];
  const auto r = static_cast<int64_t>(rank(x));
  int64_t axis = n.attr_int("axis", 0);
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r || n.outputs.size() != 1) return not_covered(n);  // (the host says why)
  const Dims xd = dims(x);
  if (xd[static_cast<size_t>(axis)] > (int64_t{1} << 24))
    return lower_fallback(n, "more than 2^24 values along the axis (indices exact in float32)");
  const auto op = n.op_type == "ArgMax" ? &argmax : &argmin;
  const bool last = n.attr_int("select_last_index", 0) != 0;
  const Shape out_shape = to_shape(dims(y));
  const auto len = static_cast<uint32_t>(xd[static_cast<size_t>(axis)]);
  const auto rows = static_cast<uint32_t>(to_shape(xd).volume() / len);
  const bool channels = r == 4 && axis == 1 && nhwc[static_cast<size_t>(x)];
  channels ? note_nhwc(x) : note_plain(x);
  std::vector<int> perm;
  for (int64_t k = 0; k < r; ++k)
    if (k != axis) perm.push_back(static_cast<int>(k));
  perm.push_back(static_cast<int>(axis));
  const bool moves = !channels && axis != r - 1 && rows > 1 && len > 1;
  // The rows the kernel reads: NHWC pixels as (N * H, W, C), the result's
  // rows W wide as the output's; one row or a length of 1 in any order.
  std::optional<Shape> rows_shape;
  if (channels) rows_shape = Shape{static_cast<uint32_t>(xd[0] * xd[2]), static_cast<uint32_t>(xd[3]), len};
  else if (!moves && axis != r - 1) rows_shape = Shape{rows, len};
  steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
    TS_ASSIGN_OR_RETURN(Tensor t, channels ? as_nhwc(s, x, cq, /*dense=*/true) : plain(s, x, cq));
    if (moves) {
      TS_ASSIGN_OR_RETURN(t, permute(t, perm, {.cq_id = cq}));
    } else if (rows_shape) {
      TS_ASSIGN_OR_RETURN(t, reshape(t, *rows_shape));
    }
    TS_ASSIGN_OR_RETURN(t, op(t, {.select_last_index = last, .cq_id = cq}));
    TS_ASSIGN_OR_RETURN(t, reshape(t, out_shape));
    return put_plain(s, y, t);
  });
  return ok_status();
}

Status CompiledModel::Impl::lower_resize_node(const Node& n) {
  bool lowered = false;
  TS_RETURN_IF_ERROR(lower_resize(n, &lowered));
  if (lowered) return ok_status();
  --report.device_ops;
  return lower_fallback(
      n, fmt::format("mode '{}' / coordinate mode '{}' has no device kernel", n.attr_string("mode", "nearest"),
                     n.attr_string("coordinate_transformation_mode", "half_pixel")));
}

Status CompiledModel::Impl::lower_batch_norm(const Node& n) {
  const int x = n.inputs[0], y = n.outputs[0];
  if (rank(x) != 4 || n.outputs.size() != 1) return not_covered(n);
  std::array<Tensor, 4> stats;
  for (size_t k = 0; k < 4; ++k) {
    if (!g.is_constant(n.inputs[k + 1]))
      return unimplemented_error("{}: input {} must be a constant", n.label(), k + 1);
    TS_ASSIGN_OR_RETURN(stats[k], upload(*g.value(n.inputs[k + 1]).constant, dims(n.inputs[k + 1]), DataType::FLOAT32));
  }
  const float eps = n.attr_float("epsilon", 1e-5f);
  note_nhwc(x);
  nhwc[static_cast<size_t>(y)] = true;
  steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
    TS_ASSIGN_OR_RETURN(Tensor in, as_nhwc(s, x, cq));
    NormParams np{.epsilon = eps, .weight = stats[0], .bias = stats[1], .cq_id = cq};
    TS_ASSIGN_OR_RETURN(Tensor out, batch_norm(in, stats[2], stats[3], np));
    return put(s, y, out);
  });
  return ok_status();
}

// InstanceNormalization (N, C, H, W): statistics per image and channel over
// H * W, which is group_norm with one channel per group (its statistics in
// double, as the host reference's). Other ranks run on the host.
Status CompiledModel::Impl::lower_instance_norm(const Node& n) {
  const int x = n.inputs[0], y = n.outputs[0];
  if (rank(x) != 4 || n.inputs.size() != 3 || n.outputs.size() != 1) return not_covered(n);
  std::array<Tensor, 2> affine;  // scale, B: C values each
  for (size_t k = 0; k < 2; ++k) {
    if (!g.is_constant(n.inputs[k + 1]))
      return unimplemented_error("{}: input {} must be a constant", n.label(), k + 1);
    TS_ASSIGN_OR_RETURN(affine[k],
                        upload(*g.value(n.inputs[k + 1]).constant, dims(n.inputs[k + 1]), DataType::FLOAT32));
  }
  const float eps = n.attr_float("epsilon", 1e-5f);
  // InstanceNormalization: a group per channel; GroupNorm (graph::fuse_group_norm): num_groups.
  const auto channels = static_cast<uint32_t>(dims(x)[1]);
  const auto groups = n.op_type == "GroupNorm" ? static_cast<uint32_t>(n.attr_int("num_groups", 0)) : channels;
  if (groups == 0 || channels % groups != 0) return not_covered(n);
  note_nhwc(x);
  nhwc[static_cast<size_t>(y)] = true;
  steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
    TS_ASSIGN_OR_RETURN(Tensor in, as_nhwc(s, x, cq));
    TS_ASSIGN_OR_RETURN(
        Tensor out, group_norm(in, groups, {.epsilon = eps, .weight = affine[0], .bias = affine[1], .cq_id = cq}));
    return put(s, y, out);
  });
  return ok_status();
}

}  // namespace tessera::runtime
