// Micro-batching: runs of per-image ops a few images at a time, where the
// whole batch spills the cache and a group fits.
#include "lowering.h"

namespace tessera::runtime {

// The micro-batched runs (CompileOptions::micro_batch) of `per` images per
// group. A cut is a point between two nodes where one value alone is live
// (made before, read after): a run of nodes between two cuts reads only the
// first cut's value and leaves only the second's, so it can run group by
// group. Within each longest chain of such intervals whose ops are
// per-image and fit the cache per group, the run is the stretch of whole
// intervals with the largest estimated saving (below), if positive.
std::vector<MicroBatch> find_micro_batches(const Graph& g, uint32_t per, const MicroBatchBudget& mbb) {
  const size_t k = g.nodes.size();
  const int64_t batch = g.value(g.inputs[0]).dims.empty() ? 0 : g.value(g.inputs[0]).dims[0];
  if (per == 0 || batch <= per || batch % per != 0) return {};
  const uint64_t es = element_size(mbb.act_dtype);
  auto batched = [&](int v) {
    const graph::Value& val = g.value(v);
    return val.type == graph::ElemType::FLOAT32 && val.has_shape && val.dims.size() == 4 && val.dims[0] == batch;
  };
  auto bytes = [&](int v, int64_t images) {
    return static_cast<uint64_t>(graph::dims_volume(g.value(v).dims) / batch * images) * es;
  };
  // Per node: whether it may run per group, and whether the whole batch spills.
  std::vector<bool> fits(k), spills(k);
  std::vector<uint64_t> whole(k), weights(k);  // bytes each node moves over the whole batch; its constants' bytes
  const uint64_t wes = mbb.weights_dtype == DataType::FLOAT32 ? 4 : 2;  // block floats: about 1, counted as 2
  const uint64_t budget = mbb.cache_bytes;
  for (size_t ni = 0; ni < k; ++ni) {
    const Node& n = g.nodes[ni];
    bool ok = per_image_op(n) && batched(n.outputs[0]);
    uint64_t group = bytes(n.outputs[0], per);
    whole[ni] = bytes(n.outputs[0], batch);
    for (int v : n.inputs) {
      if (v < 0) continue;
      if (g.is_constant(v)) {  // weights; an element-wise operand must not vary by image
        const auto& d = g.value(v).dims;
        weights[ni] += static_cast<uint64_t>(graph::dims_volume(d)) * wes;
        ok = ok && n.op_type != "Concat" &&
             (n.op_type == "Conv" || n.op_type == "ConvTranspose" || n.op_type == "BatchNormalization" ||
              d.size() < 4 || d[0] == 1);
        continue;
      }
      ok = ok && batched(v);
      group += bytes(v, per);
      whole[ni] += bytes(v, batch);
    }
    fits[ni] = ok && group <= budget;
    spills[ni] = whole[ni] > budget;
  }
  // Cuts: positions p (before node p) where one batched value alone is live.
  std::vector<int> made(g.values.size(), -1), last(g.values.size(), -1);
  for (size_t ni = 0; ni < k; ++ni) {
    for (int v : g.nodes[ni].inputs)
      if (v >= 0) last[static_cast<size_t>(v)] = static_cast<int>(ni);
    for (int v : g.nodes[ni].outputs) made[static_cast<size_t>(v)] = static_cast<int>(ni);
  }
  for (int o : g.outputs) last[static_cast<size_t>(o)] = std::numeric_limits<int>::max();
  std::vector<std::pair<size_t, int>> cuts;  // (position, the live value)
  for (size_t p = 0; p <= k; ++p) {
    int live = -1, count = 0;
    for (size_t v = 0; v < g.values.size() && count < 2; ++v) {
      const bool input = std::find(g.inputs.begin(), g.inputs.end(), static_cast<int>(v)) != g.inputs.end();
      if (g.values[v].constant || last[v] < static_cast<int>(p) || made[v] >= static_cast<int>(p) ||
          (made[v] < 0 && !input))
        continue;
      live = static_cast<int>(v);
      ++count;
    }
    if (count == 1 && batched(live)) cuts.emplace_back(p, live);
  }
  auto all_fit = [&](size_t i) {  // interval i: nodes [cuts[i], cuts[i + 1])
    for (size_t ni = cuts[i].first; ni < cuts[i + 1].first; ++ni)
      if (!fits[ni]) return false;
    return true;
  };
  // A run [a, b) of cuts pays for copying its output into the whole batch
  // (read and written) and for reading its weights once per group; it saves
  // about kSavedShare of the bytes its spilling nodes move over the whole
  // batch (ResNet-50 at batch 8: 6 ms saved on 554 MB moved, about 240 MB
  // of DRAM traffic at 40 GB/s).
  constexpr double kSavedShare = 0.4;
  const int64_t groups = batch / per;
  std::vector<double> saved(cuts.size(), 0.0);  // saved[i]: net bytes of intervals [0, i)
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    saved[i + 1] = saved[i];
    for (size_t ni = cuts[i].first; ni < cuts[i + 1].first; ++ni) {
      if (spills[ni]) saved[i + 1] += kSavedShare * static_cast<double>(whole[ni]);
      saved[i + 1] -= static_cast<double>((groups - 1) * static_cast<int64_t>(weights[ni]));
    }
  }
  std::vector<MicroBatch> runs;
  for (size_t c = 0; c + 1 < cuts.size();) {
    size_t end = c;
    while (end + 1 < cuts.size() && all_fit(end)) ++end;
    const size_t first = c;
    c = end == first ? c + 1 : end;
    // The best run inside the chain of intervals [first, end).
    double best = 0;
    size_t a0 = 0, b0 = 0;
    for (size_t a = first; a < end; ++a)
      for (size_t b = a + 1; b <= end; ++b) {
        const double net = saved[b] - saved[a] - 2.0 * static_cast<double>(bytes(cuts[b].second, batch));
        if (net > best) best = net, a0 = a, b0 = b;
      }
    if (best <= 0) continue;
    MicroBatch mb;
    mb.begin = cuts[a0].first;
    mb.end = cuts[b0].first;
    mb.in = cuts[a0].second;
    mb.out = cuts[b0].second;
    mb.per = per;
    mb.groups = static_cast<uint32_t>(groups);
    runs.push_back(mb);
  }
  return runs;
}

// Picks the images per group (CompileOptions::micro_batch; by default one
// per worker thread, so that each worker's convs keep one image's maps in its
// own cache, else one). ResNet-50 at batch 8 on two workers, device-only, two
// alternated rounds: 146.1 / 153.4 ms whole-batch, 141.6 / 144.3 with one
// image per group, 140.2 / 138.0 with two. The group's budget: half the
// shared cache (16 MiB where the descriptor names none).
StatusOr<std::vector<MicroBatch>> plan_micro_batches(const Graph& g, const CompileOptions& opt,
                                                     const DeviceDescriptor& device, uint32_t workers) {
  if (opt.micro_batch == 0u || g.inputs.empty()) return std::vector<MicroBatch>();
  const auto& d0 = g.value(g.inputs[0]).dims;
  if (opt.micro_batch && !d0.empty() && *opt.micro_batch < d0[0] && d0[0] % *opt.micro_batch != 0)
    return invalid_argument_error("CompileOptions::micro_batch {} does not divide the batch of {} images",
                                  *opt.micro_batch, d0[0]);
  if (!opt.micro_batch && device.emulated) return std::vector<MicroBatch>();
  if (device.num_dram_banks != 1) return std::vector<MicroBatch>();  // batch views need one DRAM bank
  const uint64_t shared = device.shared_cache_size;
  const MicroBatchBudget budget{.act_dtype = opt.dtype,
                                .weights_dtype = opt.weights_dtype,
                                .cache_bytes = opt.micro_batch_cache_bytes ? opt.micro_batch_cache_bytes
                                               : shared                    ? shared / 2
                                                                           : uint64_t{16} << 20};
  if (opt.micro_batch) return find_micro_batches(g, *opt.micro_batch, budget);
  // The candidate covering the most nodes; ties go to the larger groups.
  auto covered = [](const std::vector<MicroBatch>& r) {
    size_t n = 0;
    for (const auto& mb : r) n += mb.end - mb.begin;
    return n;
  };
  std::vector<MicroBatch> runs;
  for (uint32_t per : {workers, 1u}) {
    std::vector<MicroBatch> r = find_micro_batches(g, per, budget);
    if (covered(r) > covered(runs)) runs = std::move(r);
  }
  return runs;
}

std::vector<std::string> apply_micro_batches(Graph& g, std::vector<MicroBatch>& runs) {
  std::vector<std::string> report;
  for (MicroBatch& mb : runs) {
    auto part = [&](int v) {
      graph::Value pv = g.value(v);
      pv.name += "/micro_batch";
      pv.constant.reset();
      pv.dims[0] = mb.per;
      return g.add_value(std::move(pv));
    };
    mb.in_part = part(mb.in);
    mb.out_part = part(mb.out);
    for (size_t ni = mb.begin; ni < mb.end; ++ni) {
      Node& n = g.nodes[ni];
      for (int& v : n.inputs) {
        if (v == mb.in)
          v = mb.in_part;
        else if (v == mb.out)
          v = mb.out_part;
      }
      for (int& v : n.outputs) {
        if (v == mb.out) {
          v = mb.out_part;
          g.value(mb.out_part).producer = static_cast<int>(ni);
          g.value(mb.out).producer = -1;
        } else {
          g.value(v).dims[0] = mb.per;
        }
      }
    }
    report.push_back(fmt::format("nodes {} .. {} ({}): {} groups of {} image(s)", g.nodes[mb.begin].label(),
                                 g.nodes[mb.end - 1].label(), mb.end - mb.begin, mb.groups, mb.per));
  }
  return report;
}

Status CompiledModel::Impl::plan_micro_batches() {
  TS_ASSIGN_OR_RETURN(micro_batches, runtime::plan_micro_batches(
                                         g, opt, device->descriptor(),
                                         static_cast<uint32_t>(device->workers().num_threads())));
  report.micro_batches = apply_micro_batches(g, micro_batches);
  return ok_status();
}

// Work per run of a node lowered for one micro-batch group: times the groups.
uint64_t CompiledModel::Impl::per_run(size_t ni, uint64_t work) const {
  for (const auto& mb : micro_batches)
    if (ni >= mb.begin && ni < mb.end) return work * mb.groups;
  return work;
}

Status CompiledModel::Impl::run_micro_batch(const MicroBatch& mb, Slots& s, uint8_t cq) {
  TS_ASSIGN_OR_RETURN(Tensor whole, get(s, mb.in));
  if (whole.memory_config().is_sharded() || whole.memory_config().buffer_type != BufferType::DRAM) {
    TS_ASSIGN_OR_RETURN(whole, to_memory_config(whole, DRAM_MEMORY_CONFIG, cq));
  }
  std::optional<Tensor> out;
  for (uint32_t grp = 0; grp < mb.groups; ++grp) {
    // Held here as well as in the slot, so no kernel writes over the input in place.
    TS_ASSIGN_OR_RETURN(Tensor part, whole.batch_view(grp * mb.per, mb.per));
    s[static_cast<size_t>(mb.in_part)] = part;
    TS_RETURN_IF_ERROR(run_steps(mb.begin, mb.end, s, cq, /*group=*/true));
    TS_ASSIGN_OR_RETURN(Tensor result, get(s, mb.out_part));
    if (!out) {
      TensorSpec spec = result.spec();
      std::vector<uint32_t> d(spec.shape.dims().begin(), spec.shape.dims().end());
      d[0] *= mb.groups;
      spec.shape = Shape(std::span<const uint32_t>(d));
      spec.memory_config = DRAM_MEMORY_CONFIG;
      TS_ASSIGN_OR_RETURN(out, allocate_tensor_on_device(spec, *device));
    }
    TS_ASSIGN_OR_RETURN(Tensor dst, out->batch_view(grp * mb.per, mb.per));
    TS_RETURN_IF_ERROR(reshard(result, DRAM_MEMORY_CONFIG, dst, cq).status());
    s[static_cast<size_t>(mb.in_part)].reset();
    s[static_cast<size_t>(mb.out_part)].reset();
  }
  s[static_cast<size_t>(mb.out)] = std::move(*out);
  // The whole input has no reader past the run (a cut); graph inputs belong to the caller.
  if (std::find(g.inputs.begin(), g.inputs.end(), mb.in) == g.inputs.end()) s[static_cast<size_t>(mb.in)].reset();
  return ok_status();
}

}  // namespace tessera::runtime
