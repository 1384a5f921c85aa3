// conv3d_to_conv2d: 3-D convolutions (video models) as 2-D convs over
// frames (passes.h).
//
// Output frame t of a 3-D conv is the sum over its kt temporal taps i of a
// 2-D conv of input frame t * st - pt0 + i * dt by the weights' slice i. With
// the frames moved into the batch, each tap is one 2-D conv over all output
// frames at once: Transpose (N, C, T, H, W) -> (N, T, C, H, W), Pad T by the
// temporal padding, per tap a Slice of the frames it reads (step st) reshaped
// to (N * T', C, H, W), a Conv by that tap's (M, C / group, kh, kw) weights,
// the taps' results added (the bias on the first), then back to (N, M, T',
// H', W'). The FLOPs are the 3-D conv's; the device's 2-D kernels run them.
#include <fmt/format.h>

#include "pass_util.h"
#include "tessera/graph/passes.h"
#include "tessera/graph/shape_inference.h"

namespace tessera::graph {

using namespace detail;

PassReport conv3d_to_conv2d(Graph& g) {
  PassReport r{"conv3d_to_conv2d"};
  std::vector<std::vector<Node>> replaced(g.nodes.size());
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    const Node conv = g.nodes[ni];  // (a copy: add_value below)
    if (conv.op_type != "Conv" || conv.inputs.size() < 2 || conv.outputs.size() != 1 || conv.inputs.size() > 3)
      continue;
    const Value x = g.value(conv.inputs[0]), y = g.value(conv.outputs[0]);
    const int wv = conv.inputs[1], bv = conv.inputs.size() > 2 ? conv.inputs[2] : -1;
    if (!x.has_shape || x.dims.size() != 5 || y.dims.size() != 5 || x.type != ElemType::FLOAT32 || !g.is_constant(wv) ||
        (bv >= 0 && !g.is_constant(bv)) || conv.has_attr("tessera_activation"))
      continue;
    const HostTensor w = *g.value(wv).constant;  // (a copy: add_value below)
    if (w.dims.size() != 5) continue;
    auto geo = spatial_geometry(conv, x.dims, w.dims);
    if (!geo.ok()) continue;
    const int64_t N = x.dims[0], C = x.dims[1], T = x.dims[2], H = x.dims[3], W = x.dims[4];
    const int64_t M = w.dims[0], Cg = w.dims[1], kt = w.dims[2], kh = w.dims[3], kw = w.dims[4];
    const int64_t To = y.dims[2], Ho = y.dims[3], Wo = y.dims[4];
    const int64_t st = geo->strides[0], dt = geo->dilations[0], pt0 = geo->pads[0], pt1 = geo->pads[3];
    if (g.opset < 10 && st != 1) continue;  // (Slice before opset 10 has no steps)
    const std::string base = conv.name + ":3d";
    std::vector<Node> nodes;
    auto add = [&](std::string op, std::vector<int> ins, std::vector<int64_t> dims, int out = -1) {
      if (out < 0) out = run_value(g, fmt::format("{}:{}{}", base, op, nodes.size()), std::move(dims));
      nodes.push_back({.name = fmt::format("{}:{}{}", base, op, nodes.size()),
                       .op_type = std::move(op),
                       .inputs = std::move(ins),
                       .outputs = {out}});
      return out;
    };
    const std::vector<int64_t> frames_first{0, 2, 1, 3, 4};  // (its own inverse)
    int frames = add("Transpose", {conv.inputs[0]}, {N, T, C, H, W});
    nodes.back().attrs["perm"] = ints_attr(frames_first);
    const int64_t Tp = T + pt0 + pt1;
    if (pt0 || pt1) {
      const std::vector<int64_t> pads{0, pt0, 0, 0, 0, 0, pt1, 0, 0, 0};
      if (g.opset >= 11) {
        frames = add("Pad", {frames, ints_value(g, base + ":time_pads", pads)}, {N, Tp, C, H, W});
      } else {  // (the pads an attribute)
        frames = add("Pad", {frames}, {N, Tp, C, H, W});
        nodes.back().attrs["pads"] = ints_attr(pads);
      }
    }
    // One image: the frames become the batch once and each tap slices the
    // batch (a view of whole frames, in the conv's NHWC layout); several:
    // each tap slices T, then joins the images' frames.
    const bool one = N == 1;
    const int as_batch = ints_value(g, base + ":as_batch", {N * To, C, H, W});
    if (one) frames = add("Reshape", {frames, ints_value(g, base + ":frames", {Tp, C, H, W})}, {Tp, C, H, W});
    int acc = -1;
    for (int64_t i = 0; i < kt; ++i) {
      int taps = frames;
      const int64_t first = i * dt, end = first + st * (To - 1) + 1;
      const std::vector<int64_t> sliced =
          one ? std::vector<int64_t>{To, C, H, W} : std::vector<int64_t>{N, To, C, H, W};
      if ((first != 0 || end != Tp || st != 1) && g.opset >= 10) {
        taps = add("Slice",
                   {frames, ints_value(g, base + ":starts", {first}), ints_value(g, base + ":ends", {end}),
                    ints_value(g, base + ":axes", {one ? 0 : 1}), ints_value(g, base + ":steps", {st})},
                   sliced);
      } else if (first != 0 || end != Tp || st != 1) {  // (opset < 10: attributes, no steps)
        taps = add("Slice", {frames}, sliced);
        nodes.back().attrs["starts"] = ints_attr({first});
        nodes.back().attrs["ends"] = ints_attr({end});
        nodes.back().attrs["axes"] = ints_attr({one ? 0 : 1});
      }
      if (!one) taps = add("Reshape", {taps, as_batch}, {N * To, C, H, W});
      std::vector<float> wi(static_cast<size_t>(M * Cg * kh * kw));  // the weights' temporal slice i
      for (int64_t m = 0; m < M * Cg; ++m)
        for (int64_t k = 0; k < kh * kw; ++k)
          wi[static_cast<size_t>(m * kh * kw + k)] = w.f[static_cast<size_t>((m * kt + i) * kh * kw + k)];
      const int wid = g.add_value({.name = fmt::format("{}:weights{}", base, i),
                                   .dims = {M, Cg, kh, kw},
                                   .has_shape = true,
                                   .constant = HostTensor::floats({M, Cg, kh, kw}, std::move(wi))});
      std::vector<int> ins{taps, wid};
      if (i == 0 && bv >= 0) ins.push_back(bv);
      const int out = add("Conv", std::move(ins), {N * To, M, Ho, Wo});
      Node& c2 = nodes.back();
      c2.attrs["kernel_shape"] = ints_attr({kh, kw});
      c2.attrs["strides"] = ints_attr({geo->strides[1], geo->strides[2]});
      c2.attrs["dilations"] = ints_attr({geo->dilations[1], geo->dilations[2]});
      c2.attrs["pads"] = ints_attr({geo->pads[1], geo->pads[2], geo->pads[4], geo->pads[5]});
      c2.attrs["group"] = int_attr(conv.attr_int("group", 1));
      // (the new tap first: fuse_residual_adds makes the sum its conv's residual)
      acc = acc < 0 ? out : add("Add", {out, acc}, {N * To, M, Ho, Wo});
    }
    const int split = add("Reshape", {acc, ints_value(g, base + ":as_frames", {N, To, M, Ho, Wo})}, {N, To, M, Ho, Wo});
    add("Transpose", {split}, {}, conv.outputs[0]);
    nodes.back().attrs["perm"] = ints_attr(frames_first);
    replaced[ni] = std::move(nodes);
    ++r.rewrites;
  }
  if (r.rewrites == 0) return r;
  replace_nodes(g, replaced);
  // The transposes between consecutive 3-D convs (and the element-wise ops
  // between them) cancel.
  cancel_transposes(g);
  return r;
}

}  // namespace tessera::graph
