// Lowering Conv and ConvTranspose nodes onto conv2d / conv_transpose2d layers.
#include "lowering.h"

namespace tessera::runtime {

Status CompiledModel::Impl::plan_conv_sharding(const Node& n, const Conv2dGeometry& geo, Conv2dConfig& config) {
  const bool apply = opt.apply_conv_sharding.value_or(device->descriptor().emulated);
  const DataType io = act_dtype();
  auto est = auto_shard_conv2d(geo, config, io, config.dtype.value_or(io), device->descriptor().compute_grid());
  std::string plan;
  bool fits = false;
  if (!est.ok()) {
    plan = fmt::format("DRAM interleaved (no sharded plan: {})", est.status().message());
  } else if (Status fit = check_conv2d_l1(*est, *device); !fit.ok()) {
    plan = fmt::format("DRAM interleaved ({} does not fit L1)", est->to_string());
  } else if (2 * est->total() > device->descriptor().l1_size_per_core) {
    // Half of L1 stays for what is live around the conv (its sharded input,
    // other L1 outputs): the plan cannot see run-time occupancy.
    plan = fmt::format("DRAM interleaved ({} leaves under half of L1 free)", est->to_string());
  } else {
    fits = true;
    plan = fmt::format("L1 {}", est->to_string());
  }
  if (fits && apply) {
    config.shard_layout = est->parallel.shard_layout;
    plan += " (applied)";
    // Sharded L1 output stays only for convs reading it as their input; other readers get DRAM.
    bool conv_readers = std::find(g.outputs.begin(), g.outputs.end(), n.outputs[0]) == g.outputs.end();
    for (const auto& [reader, slot] : consumers[static_cast<size_t>(n.outputs[0])])
      conv_readers = conv_readers && slot == 0 && g.nodes[static_cast<size_t>(reader)].op_type == "Conv";
    if (!conv_readers) plan += ", then DRAM interleaved for its readers";
    sharded_to_dram = !conv_readers;
  }
  report.conv_plans.push_back(fmt::format("{}: {}", n.name, plan));
  return ok_status();
}

StatusOr<Conv2dParams> CompiledModel::Impl::conv_params(const Node& n) const {
  const int y = n.outputs[0];
  const Dims& xd = dims(n.inputs[0]);
  const Dims& wd = dims(n.inputs[1]);
  TS_ASSIGN_OR_RETURN(graph::SpatialGeometry geo, graph::spatial_geometry(n, xd, wd));
  Conv2dParams p;
  p.batch_size = static_cast<uint32_t>(xd[0]);
  p.in_channels = static_cast<uint32_t>(xd[1]);
  p.input_height = static_cast<uint32_t>(xd[2]);
  p.input_width = static_cast<uint32_t>(xd[3]);
  p.out_channels = static_cast<uint32_t>(wd[0]);
  p.groups = static_cast<uint32_t>(n.attr_int("group", 1));
  p.kernel_size = {static_cast<uint32_t>(geo.kernel[0]), static_cast<uint32_t>(geo.kernel[1])};
  p.stride = {static_cast<uint32_t>(geo.strides[0]), static_cast<uint32_t>(geo.strides[1])};
  p.dilation = {static_cast<uint32_t>(geo.dilations[0]), static_cast<uint32_t>(geo.dilations[1])};
  p.padding = {static_cast<uint32_t>(geo.pads[0]), static_cast<uint32_t>(geo.pads[2]),
               static_cast<uint32_t>(geo.pads[1]), static_cast<uint32_t>(geo.pads[3])};
  if (auto act = activation_of(n)) p.activation = *act;
  if (p.output_height() != dims(y)[2] || p.output_width() != dims(y)[3])
    return internal_error("{}: the kernel's output {}x{} differs from the inferred {}", n.label(), p.output_height(),
                          p.output_width(), graph::dims_to_string(dims(y)));
  return p;
}

// A ConvTranspose node's params but its padding and activation (which
// lower_conv_transpose derives, cropping asymmetric pads).
ConvTranspose2dParams CompiledModel::Impl::conv_transpose_params(const Node& n,
                                                                 const graph::SpatialGeometry& geo) const {
  const Dims& xd = dims(n.inputs[0]);
  const Dims& wd = dims(n.inputs[1]);
  const Dims op = n.attr_ints("output_padding", {0, 0});
  ConvTranspose2dParams p;
  p.batch_size = static_cast<uint32_t>(xd[0]);
  p.in_channels = static_cast<uint32_t>(xd[1]);
  p.input_height = static_cast<uint32_t>(xd[2]);
  p.input_width = static_cast<uint32_t>(xd[3]);
  p.groups = static_cast<uint32_t>(n.attr_int("group", 1));
  p.out_channels = static_cast<uint32_t>(wd[1]) * p.groups;
  p.kernel_size = {static_cast<uint32_t>(geo.kernel[0]), static_cast<uint32_t>(geo.kernel[1])};
  p.stride = {static_cast<uint32_t>(geo.strides[0]), static_cast<uint32_t>(geo.strides[1])};
  p.dilation = {static_cast<uint32_t>(geo.dilations[0]), static_cast<uint32_t>(geo.dilations[1])};
  p.output_padding = {static_cast<uint32_t>(op.size() > 0 ? op[0] : 0),
                      static_cast<uint32_t>(op.size() > 1 ? op[1] : 0)};
  return p;
}

// A conv node's constant weights and optional bias as host tensors, and the
// config every conv layer of the model shares; counts the conv's FLOPs.
StatusOr<CompiledModel::Impl::ConvLayerInputs> CompiledModel::Impl::conv_layer_inputs(const Node& n, uint32_t cout,
                                                                                      uint64_t flops) {
  ConvLayerInputs in;
  const bool has_bias = n.inputs.size() > 2 && n.inputs[2] >= 0;
  if (!given_weights.contains(n.name)) {  // else the layer never reads them (set_prepared)
    for (int v : {n.inputs[1], has_bias ? n.inputs[2] : -1})
      if (v >= 0 && g.value(v).constant->size() != static_cast<size_t>(g.value(v).constant->volume()))
        return failed_precondition_error("{}: the constant '{}' holds no values and no prepared weights were given",
                                         n.label(), g.value(v).name);
    TS_ASSIGN_OR_RETURN(in.weight, Tensor::from_vector(g.value(n.inputs[1]).constant->f, to_shape(dims(n.inputs[1])),
                                                       DataType::FLOAT32));
    if (has_bias) {
      TS_ASSIGN_OR_RETURN(in.bias,
                          Tensor::from_vector(g.value(n.inputs[2]).constant->f, Shape{cout}, DataType::FLOAT32));
    }
  }
  report.conv_flops += per_run(lowering, flops);
  in.config = Conv2dConfig{.weights_dtype = op_precision[lowering].weights_df.value_or(opt.weights_dtype),
                           .dtype = out_dtype(n.outputs[0])};
  in.config.compute_config.math_fidelity = fidelity_of(lowering);
  return in;
}

template <class Layer>
void CompiledModel::Impl::take_given_weights(const Node& n, Layer& layer) {
  auto it = given_weights.find(n.name);
  if (it == given_weights.end()) return;
  layer.set_prepared(std::move(it->second.weights), std::move(it->second.selection));
  given_weights.erase(it);
}

Status CompiledModel::Impl::lower_conv(const Node& n) {
  if (opt.numerics == Numerics::kTt) return lower_conv_tt(n, /*transposed=*/false);
  const int x = n.inputs[0], y = n.outputs[0];
  if (rank(x) != 4) return lower_fallback(n, fmt::format("{}-D convolution (the device kernel is 2-D)", rank(x) - 2));
  if (!g.is_constant(n.inputs[1])) return unimplemented_error("{}: the weight must be a constant", n.label());
  TS_ASSIGN_OR_RETURN(const Conv2dParams p, conv_params(n));
  TS_ASSIGN_OR_RETURN(ConvLayerInputs in, conv_layer_inputs(n, p.out_channels, p.flops()));
  auto& [w, b, config] = in;
  sharded_to_dram = false;
  TS_RETURN_IF_ERROR(plan_conv_sharding(n, conv2d_geometry(p, n.inputs.size() > 2 && n.inputs[2] >= 0), config));
  const int res = n.inputs.size() > 3 ? n.inputs[3] : -1;
  UnaryWithParam res_act;
  if (res >= 0) {
    TS_ASSIGN_OR_RETURN(res_act, residual_activation_of(n));
    note_nhwc(res);
  }
  convs.push_back(std::make_unique<cnn::DirectConv2d>(p, w, b, config));
  cnn::DirectConv2d* layer = convs.back().get();
  conv_layers.push_back({.node = n.name, .conv = layer});
  if (opt.conv_chooser) layer->set_chooser(opt.conv_chooser);
  take_given_weights(n, *layer);
  note_nhwc(x);
  nhwc[static_cast<size_t>(y)] = true;
  const bool to_dram = sharded_to_dram;
  const size_t step = steps.size();
  std::vector<int> parts;  // a fused channel concat's inputs (channel_concats)
  if (auto cat = channel_concats.find(x); cat != channel_concats.end() && res < 0 && consumers[x].size() == 1 &&
                                          std::find(g.outputs.begin(), g.outputs.end(), x) == g.outputs.end() &&
                                          same_micro_batch(cat->second.first, step, x)) {
    parts = cat->second.second;
    steps[cat->second.first] = [](Slots&, uint8_t) { return ok_status(); };
    fused_concats.emplace_back(step, parts);
  }
  steps.push_back([this, layer, x, y, res, res_act, to_dram, step, parts](Slots& s, uint8_t cq) -> Status {
    Tensor out;
    if (!parts.empty()) {
      std::vector<Tensor> ins;
      for (int v : parts) {
        TS_ASSIGN_OR_RETURN(Tensor t, as_nhwc(s, v, cq, /*dense=*/true));
        if (has_value_df && t.dtype() != planned_dtype(x)) {  // (as lower_concat does)
          TS_ASSIGN_OR_RETURN(t, typecast(t, planned_dtype(x), cq));
        }
        ins.push_back(std::move(t));
      }
      TS_ASSIGN_OR_RETURN(out, (*layer)(std::span<const Tensor>(ins), cq));
    } else if (res >= 0) {
      TS_ASSIGN_OR_RETURN(Tensor in, as_nhwc(s, x, cq, /*dense=*/true));
      TS_ASSIGN_OR_RETURN(Tensor r, as_nhwc(s, res, cq));
      // The conv may write over the residual when this is its last reader
      // and no other value (a view, the input) shares its buffer.
      const auto& dying = release[step];
      if (std::find(dying.begin(), dying.end(), res) != dying.end()) s[static_cast<size_t>(res)].reset();
      const bool in_place = r.buffer().use_count() == 1;
      TS_ASSIGN_OR_RETURN(out, (*layer)(in, Conv2dResidual{r, res_act, in_place}, cq));
    } else {
      TS_ASSIGN_OR_RETURN(Tensor in, as_nhwc(s, x, cq, /*dense=*/true));
      TS_ASSIGN_OR_RETURN(out, (*layer)(in, cq));
    }
    if (to_dram && out.memory_config().is_sharded()) {
      TS_ASSIGN_OR_RETURN(out, to_memory_config(out, DRAM_MEMORY_CONFIG, cq));
    }
    return put_nhwc(s, y, out);
  });
  return ok_status();
}

// A QuantizedConv (graph::fuse_quantized_convs) onto quantized_conv2d:
// float32 rows out, typecast when the plan keeps the value in bfloat16.
Status CompiledModel::Impl::lower_quantized_conv(const Node& n) {
  const int x = n.inputs[0], y = n.outputs[0];
  if (rank(x) != 4) return lower_fallback(n, fmt::format("{}-D quantized convolution", rank(x) - 2));
  TS_ASSIGN_OR_RETURN(const Conv2dParams p, conv_params(n));
  QuantizedConv2dParams qp{.conv = p,
                           .input_scale = n.attr_float("input_scale", 1.0f),
                           .input_zero_point = static_cast<int32_t>(n.attr_int("input_zero_point", 0))};
  if (n.has_attr("output_scale"))
    qp.output = OutputQuantization{.scale = n.attr_float("output_scale", 0.0f),
                                   .zero_point = static_cast<int32_t>(n.attr_int("output_zero_point", 0)),
                                   .lo = static_cast<int32_t>(n.attr_int("output_lo", 0)),
                                   .hi = static_cast<int32_t>(n.attr_int("output_hi", 255))};
  TS_ASSIGN_OR_RETURN(
      Tensor w, Tensor::from_vector(g.value(n.inputs[1]).constant->f, to_shape(dims(n.inputs[1])), DataType::FLOAT32));
  std::vector<float> bias;
  if (n.inputs.size() > 2 && n.inputs[2] >= 0) bias = g.value(n.inputs[2]).constant->f;
  const std::vector<float> scales = n.attr_floats("weight_scales");
  auto layer = QuantizedConv2d::create(*device, qp, w, scales, bias);
  if (!layer.ok()) return Status(layer.status().code(), fmt::format("{}: {}", n.label(), layer.status().message()));
  quantized_convs.push_back(std::move(*layer));
  const QuantizedConv2d* conv = quantized_convs.back().get();
  report.conv_flops += per_run(lowering, p.flops());
  note_nhwc(x);
  nhwc[static_cast<size_t>(y)] = true;
  const DataType out = planned_dtype(y);
  steps.push_back([this, conv, x, y, out](Slots& s, uint8_t cq) -> Status {
    TS_ASSIGN_OR_RETURN(Tensor in, as_nhwc(s, x, cq, /*dense=*/true));
    TS_ASSIGN_OR_RETURN(Tensor r, (*conv)(in, cq));
    if (out != r.dtype()) {
      TS_ASSIGN_OR_RETURN(r, typecast(r, out, cq));
    }
    return put_nhwc(s, y, r);
  });
  return ok_status();
}

Status CompiledModel::Impl::lower_conv_transpose(const Node& n) {
  if (opt.numerics == Numerics::kTt) return lower_conv_tt(n, /*transposed=*/true);
  const int x = n.inputs[0], y = n.outputs[0];
  if (rank(x) != 4) return lower_fallback(n, fmt::format("{}-D transposed convolution", rank(x) - 2));
  if (!g.is_constant(n.inputs[1])) return unimplemented_error("{}: the weight must be a constant", n.label());
  const Dims& xd = dims(x);
  const Dims& wd = dims(n.inputs[1]);
  TS_ASSIGN_OR_RETURN(graph::SpatialGeometry geo, graph::spatial_geometry(n, xd, wd));
  ConvTranspose2dParams p = conv_transpose_params(n, geo);
  for (int64_t pad : geo.pads)
    if (pad < 0) return lower_fallback(n, "an output_shape past the full output");
  // Asymmetric padding: run with the smaller pad of each dim, slice the rest off.
  std::array<int64_t, 2> lo{}, crop_begin{}, crop_end{};
  for (int i = 0; i < 2; ++i) {
    lo[static_cast<size_t>(i)] = std::min(geo.pads[static_cast<size_t>(i)], geo.pads[static_cast<size_t>(i) + 2]);
    crop_begin[static_cast<size_t>(i)] = geo.pads[static_cast<size_t>(i)] - lo[static_cast<size_t>(i)];
    crop_end[static_cast<size_t>(i)] = geo.pads[static_cast<size_t>(i) + 2] - lo[static_cast<size_t>(i)];
  }
  p.padding = {static_cast<uint32_t>(lo[0]), static_cast<uint32_t>(lo[1])};
  const bool crop = crop_begin[0] || crop_begin[1] || crop_end[0] || crop_end[1];
  if (auto act = activation_of(n)) {
    if (crop) return lower_fallback(n, "asymmetric padding with a fused activation");
    p.activation = *act;
  }
  if (p.output_height() - crop_begin[0] - crop_end[0] != dims(y)[2] ||
      p.output_width() - crop_begin[1] - crop_end[1] != dims(y)[3])
    return lower_fallback(n, "output geometry the device kernel does not produce");
  TS_ASSIGN_OR_RETURN(ConvLayerInputs in, conv_layer_inputs(n, p.out_channels, p.flops()));
  auto& [w, b, config] = in;
  deconvs.push_back(std::make_unique<cnn::ConvTranspose2d>(p, w, b, config));
  cnn::ConvTranspose2d* layer = deconvs.back().get();
  conv_layers.push_back({.node = n.name, .deconv = layer});
  if (opt.conv_chooser) layer->set_chooser(opt.conv_chooser);
  take_given_weights(n, *layer);
  note_nhwc(x);
  nhwc[static_cast<size_t>(y)] = true;
  const uint32_t oh = p.output_height(), ow = p.output_width();
  steps.push_back([=, this](Slots& s, uint8_t cq) -> Status {
    TS_ASSIGN_OR_RETURN(Tensor in, as_nhwc(s, x, cq));
    TS_ASSIGN_OR_RETURN(Tensor out, (*layer)(in, cq));
    if (crop) {
      TS_ASSIGN_OR_RETURN(out, reshape(out, Shape{p.batch_size, oh, ow, p.out_channels}));
      SliceParams sl{.begin = {0, static_cast<uint32_t>(crop_begin[0]), static_cast<uint32_t>(crop_begin[1]), 0},
                     .end = {p.batch_size, static_cast<uint32_t>(oh - crop_end[0]),
                             static_cast<uint32_t>(ow - crop_end[1]), p.out_channels},
                     .step = {1, 1, 1, 1}};
      TS_ASSIGN_OR_RETURN(out, slice(out, sl, {.cq_id = cq}));
    }
    return put_nhwc(s, y, out);
  });
  return ok_status();
}

}  // namespace tessera::runtime
