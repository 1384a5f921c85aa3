// The host kernels of data-dependent shapes (NonMaxSuppression, NonZero)
// on hand-computed cases, special values and error paths, and the host
// tail that runs them after the device's part of a model (the conformance
// suite checks the kernels against ONNX's outputs; construct_det_nms a
// whole detector against PyTorch).
#include "tessera/graph/host_tail.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>

#include "tessera/graph/host_eval.h"
#include "tessera/graph/shape_inference.h"
#include "test_util.h"

namespace tessera::graph {
namespace {

using ::testing::HasSubstr;

Node nms_node(int64_t center = 0) {
  Node n{.name = "nms", .op_type = "NonMaxSuppression", .outputs = {0}};
  if (center) n.attrs["center_point_box"] = Attribute{.kind = Attribute::Kind::INT, .i = center};
  return n;
}

StatusOr<HostTensor> nms(const HostTensor& boxes, const HostTensor& scores, std::vector<const HostTensor*> rest,
                         int64_t center = 0) {
  std::vector<const HostTensor*> ins = {&boxes, &scores};
  ins.insert(ins.end(), rest.begin(), rest.end());
  TS_ASSIGN_OR_RETURN(std::vector<HostTensor> out, evaluate(nms_node(center), ins, 13));
  return out.at(0);
}

// Boxes 0 and 1 overlap by IoU 0.68, box 2 lies apart; corners in either order.
const HostTensor kBoxes = HostTensor::floats({1, 3, 4}, {0, 0, 10, 10, 1, 1, 11, 11, 30, 30, 20, 20});

TEST(HostTail, NonMaxSuppressionKeepsTheBestOfOverlappingBoxes) {
  const HostTensor scores = HostTensor::floats({1, 1, 3}, {0.8f, 0.9f, 0.3f});
  const HostTensor max_out = HostTensor::ints({1}, {10}), iou = HostTensor::floats({1}, {0.5f});
  ASSERT_OK_AND_ASSIGN(HostTensor sel, nms(kBoxes, scores, {&max_out, &iou}));
  EXPECT_EQ(sel.type, ElemType::INT64);
  EXPECT_EQ(sel.dims, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(sel.i, (std::vector<int64_t>{0, 0, 1, 0, 0, 2}));  // by score: box 1, then 2; box 0 suppressed
  // IoU 0.68 is not above 0.7: all three, best first.
  const HostTensor loose = HostTensor::floats({1}, {0.7f});
  ASSERT_OK_AND_ASSIGN(sel, nms(kBoxes, scores, {&max_out, &loose}));
  EXPECT_EQ(sel.i, (std::vector<int64_t>{0, 0, 1, 0, 0, 0, 0, 0, 2}));
  // At most one per class; ties in score go to the lower index.
  const HostTensor one = HostTensor::ints({1}, {1}), tied = HostTensor::floats({1, 1, 3}, {0.5f, 0.5f, 0.5f});
  ASSERT_OK_AND_ASSIGN(sel, nms(kBoxes, tied, {&one, &iou}));
  EXPECT_EQ(sel.i, (std::vector<int64_t>{0, 0, 0}));
}

// The selection checks a candidate only against kept boxes whose x range
// can meet it: the same selection as checking every kept box, over
// thousands of boxes in clusters and in class-offset regions (a detector's
// batched NMS), with degenerate boxes, corners in either order, and NaN and
// infinite coordinates.
TEST(HostTail, NonMaxSuppressionMatchesTheGreedyCheckOfEveryKeptBox) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  const int64_t count = 3000;
  std::vector<float> b(static_cast<size_t>(count * 4)), sc(static_cast<size_t>(count));
  for (int64_t k = 0; k < count; ++k) {
    const float region = static_cast<float>(k % 7) * 1000.0f, cx = region + 200 * u(rng), cy = 200 * u(rng);
    const float w = k % 50 == 0 ? 0.0f : 1 + 60 * u(rng), h = 1 + 60 * u(rng);
    float* p = b.data() + k * 4;
    p[0] = cy - h / 2, p[1] = cx - w / 2, p[2] = cy + h / 2, p[3] = cx + w / 2;
    if (k % 3 == 0) std::swap(p[1], p[3]);  // corners in either order
    sc[static_cast<size_t>(k)] = u(rng);
  }
  b[17 * 4 + 1] = NAN, b[29 * 4 + 2] = INFINITY, b[31 * 4 + 1] = -INFINITY, b[43 * 4 + 3] = NAN;
  for (float th : {0.0f, 0.3f, 0.7f}) {
    // The greedy selection, every kept box checked (ONNX Runtime's arithmetic).
    std::vector<int64_t> order(static_cast<size_t>(count));
    for (int64_t k = 0; k < count; ++k) order[static_cast<size_t>(k)] = k;
    std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return sc[x] > sc[y]; });
    struct B {
      float y1, x1, y2, x2, area;
    };
    std::vector<B> kept;
    std::vector<int64_t> want;
    for (int64_t k : order) {
      const float* p = b.data() + k * 4;
      const B c{std::min(p[0], p[2]), std::min(p[1], p[3]), std::max(p[0], p[2]), std::max(p[1], p[3]), 0};
      const float area = (c.y2 - c.y1) * (c.x2 - c.x1);
      const bool hit = std::any_of(kept.begin(), kept.end(), [&](const B& o) {
        const float iy1 = std::max(o.y1, c.y1), ix1 = std::max(o.x1, c.x1);
        const float iy2 = std::min(o.y2, c.y2), ix2 = std::min(o.x2, c.x2);
        if (iy2 <= iy1 || ix2 <= ix1) return false;
        const float inter = (iy2 - iy1) * (ix2 - ix1), uni = o.area + area - inter;
        return o.area > 0 && area > 0 && uni > 0 && inter / uni > th;
      });
      if (hit) continue;
      kept.push_back({c.y1, c.x1, c.y2, c.x2, area});
      want.insert(want.end(), {0, 0, k});
    }
    const HostTensor boxes = HostTensor::floats({1, count, 4}, b), scores = HostTensor::floats({1, 1, count}, sc);
    const HostTensor max_out = HostTensor::ints({1}, {count}), iou = HostTensor::floats({1}, {th});
    ASSERT_OK_AND_ASSIGN(HostTensor sel, nms(boxes, scores, {&max_out, &iou}));
    EXPECT_GT(want.size() / 3, 100u);
    EXPECT_EQ(sel.i, want) << "threshold " << th;
  }
}

TEST(HostTail, NonMaxSuppressionEmptyResultsAndSpecialScores) {
  const HostTensor scores = HostTensor::floats({1, 1, 3}, {0.8f, NAN, 0.3f});
  const HostTensor max_out = HostTensor::ints({1}, {10}), iou = HostTensor::floats({1}, {0.5f});
  // No max_output_boxes_per_class: none selected, a (0, 3) result.
  ASSERT_OK_AND_ASSIGN(HostTensor sel, nms(kBoxes, scores, {}));
  EXPECT_EQ(sel.dims, (std::vector<int64_t>{0, 3}));
  // A score threshold above every score: none; scores must exceed it; a NaN score is never selected.
  const HostTensor high = HostTensor::floats({1}, {0.8f}), low = HostTensor::floats({1}, {-INFINITY});
  ASSERT_OK_AND_ASSIGN(sel, nms(kBoxes, scores, {&max_out, &iou, &high}));
  EXPECT_EQ(sel.dims, (std::vector<int64_t>{0, 3}));
  ASSERT_OK_AND_ASSIGN(sel, nms(kBoxes, scores, {&max_out, &iou, &low}));
  EXPECT_EQ(sel.i, (std::vector<int64_t>{0, 0, 0, 0, 0, 2}));
  // Centre format (x, y, w, h): the same boxes, the same selection.
  const HostTensor centred = HostTensor::floats({1, 3, 4}, {5, 5, 10, 10, 6, 6, 10, 10, 25, 25, 10, 10});
  const HostTensor s2 = HostTensor::floats({1, 1, 3}, {0.8f, 0.9f, 0.3f});
  ASSERT_OK_AND_ASSIGN(sel, nms(centred, s2, {&max_out, &iou}, 1));
  EXPECT_EQ(sel.i, (std::vector<int64_t>{0, 0, 1, 0, 0, 2}));
}

TEST(HostTail, NonMaxSuppressionErrorsNameTheInput) {
  const HostTensor scores = HostTensor::floats({1, 1, 3}, {0.8f, 0.9f, 0.3f});
  auto err = [](const StatusOr<HostTensor>& r) {
    return r.ok() ? std::string("ok") : std::string(r.status().message());
  };
  EXPECT_THAT(err(nms(HostTensor::floats({3, 4}, std::vector<float>(12)), scores, {})),
              HasSubstr("boxes must be [batches, boxes, 4], found [3,4]"));
  EXPECT_THAT(err(nms(kBoxes, HostTensor::floats({1, 1, 2}, {1, 2}), {})),
              HasSubstr("scores must be [batches, classes, boxes] = [1, C, 3], found [1,1,2]"));
  const HostTensor max_out = HostTensor::ints({1}, {10}), bad_iou = HostTensor::floats({1}, {1.5f});
  EXPECT_THAT(err(nms(kBoxes, scores, {&max_out, &bad_iou})), HasSubstr("iou_threshold must be in [0, 1], found 1.5"));
  EXPECT_THAT(err(nms(kBoxes, scores, {}, 2)), HasSubstr("center_point_box must be 0 or 1, found 2"));
}

TEST(HostTail, NonZeroListsCoordinatesWithNaNNonZero) {
  const HostTensor x = HostTensor::floats({2, 3}, {0, 1, 0, NAN, 0, -0.0f});
  ASSERT_OK_AND_ASSIGN(std::vector<HostTensor> out, evaluate(Node{.name = "nz", .op_type = "NonZero", .outputs = {0}},
                                                             std::vector<const HostTensor*>{&x}, 13));
  EXPECT_EQ(out[0].dims, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(out[0].i, (std::vector<int64_t>{0, 1, 1, 0}));  // (0, 1) and (1, 0); -0.0 is zero
  const HostTensor zeros = HostTensor::floats({4}, {0, 0, 0, 0});
  ASSERT_OK_AND_ASSIGN(out, evaluate(Node{.name = "nz", .op_type = "NonZero", .outputs = {0}},
                                     std::vector<const HostTensor*>{&zeros}, 13));
  EXPECT_EQ(out[0].dims, (std::vector<int64_t>{1, 0}));
}

int value(Graph& g, const std::string& name, std::vector<int64_t> dims = {}) {
  return g.add_value(Value{.name = name, .dims = dims, .has_shape = !dims.empty()});
}

// boxes_in -> Relu -> boxes (a model output), scores_in -> Sigmoid -> scores,
// NMS(boxes, scores, 10, 0.5) -> sel -> Cast to float -> self (a model output,
// first): the NMS and the Cast form the tail.
Graph detector() {
  Graph g;
  const int bi = value(g, "boxes_in", {1, 3, 4}), si = value(g, "scores_in", {1, 1, 3});
  const int b = value(g, "boxes"), s = value(g, "scores"), sel = value(g, "sel"), self = value(g, "self");
  const int m = g.add_value(Value{
      .name = "max", .type = ElemType::INT64, .dims = {1}, .has_shape = true, .constant = HostTensor::ints({1}, {10})});
  const int iou =
      g.add_value(Value{.name = "iou", .dims = {1}, .has_shape = true, .constant = HostTensor::floats({1}, {0.5f})});
  g.inputs = {bi, si};
  g.nodes.push_back(Node{.name = "r", .op_type = "Relu", .inputs = {bi}, .outputs = {b}});
  g.nodes.push_back(Node{.name = "s", .op_type = "Sigmoid", .inputs = {si}, .outputs = {s}});
  g.nodes.push_back(Node{.name = "nms", .op_type = "NonMaxSuppression", .inputs = {b, s, m, iou}, .outputs = {sel}});
  Node cast{.name = "c", .op_type = "Cast", .inputs = {sel}, .outputs = {self}};
  cast.attrs["to"] = Attribute{.kind = Attribute::Kind::INT, .i = 1};
  g.nodes.push_back(std::move(cast));
  g.outputs = {self, b};
  return g;
}

TEST(HostTail, SplitRunsTheTailOnThePrefixOutputs) {
  Graph g = detector();
  ASSERT_OK_AND_ASSIGN(std::optional<HostTail> tail, HostTail::split(g));
  ASSERT_TRUE(tail);
  EXPECT_EQ(tail->num_nodes(), 2u);
  EXPECT_THAT(tail->summary(), HasSubstr("2 node(s) from NonMaxSuppression 'nms': Cast, NonMaxSuppression"));
  EXPECT_EQ(tail->output_names(), (std::vector<std::string>{"self", "boxes"}));
  // The prefix: its model output (boxes), then what the tail reads (boxes again, scores).
  ASSERT_EQ(g.outputs.size(), 3u);
  EXPECT_EQ(g.value(g.outputs[0]).name, "boxes");
  EXPECT_EQ(g.value(g.outputs[2]).name, "scores");
  EXPECT_EQ(g.nodes.size(), 2u);
  ASSERT_OK(infer_shapes(g));
  ASSERT_OK(tail->bind_prefix(g));
  const HostTensor boxes = kBoxes;
  const HostTensor scores = HostTensor::floats({1, 1, 3}, {0.8f, 0.9f, 0.3f});
  // The device's outputs come flat; the tail reshapes them to the prefix's shapes.
  ASSERT_OK_AND_ASSIGN(std::vector<HostTensor> out,
                       tail->run({boxes, boxes, HostTensor::floats({3}, std::vector<float>(scores.f))}));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].dims, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(out[0].f, (std::vector<float>{0, 0, 1, 0, 0, 2}));
  EXPECT_EQ(out[1].f, boxes.f);
  EXPECT_THAT(tail->run({boxes}).status().message(), HasSubstr("takes the prefix's 3 outputs, got 1"));
  EXPECT_THAT(tail->run({boxes, boxes, HostTensor::floats({2}, {1, 2})}).status().message(),
              HasSubstr("prefix output 'scores': 2 values, the host tail reads [1,1,3]"));
}

// A value the tail reads that shape inference folds (the threshold below,
// as an image size computed from Shape would be): the tail takes the
// constant and the prefix stops returning it (a device output that is a
// constant would be one persistent tensor for every frame).
TEST(HostTail, ConstantsTheTailReadsLeaveThePrefixOutputs) {
  Graph g = detector();
  const int folded = value(g, "iou_folded");
  g.nodes.push_back(Node{.name = "fold", .op_type = "Relu", .inputs = {g.find("iou")}, .outputs = {folded}});
  g.nodes[2].inputs[3] = folded;
  ASSERT_OK_AND_ASSIGN(std::optional<HostTail> tail, HostTail::split(g));
  ASSERT_TRUE(tail);
  EXPECT_EQ(g.outputs.size(), 4u);  // boxes; boxes, scores, iou_folded
  ASSERT_OK(infer_shapes(g));
  ASSERT_OK(tail->bind_prefix(g));
  ASSERT_EQ(g.outputs.size(), 3u);
  EXPECT_EQ(tail->num_prefix_outputs(), 3u);
  EXPECT_THAT(tail->bind_prefix(g).message(), HasSubstr("bound to its prefix already"));
  const HostTensor scores = HostTensor::floats({1, 1, 3}, {0.8f, 0.9f, 0.3f});
  ASSERT_OK_AND_ASSIGN(std::vector<HostTensor> out, tail->run({kBoxes, kBoxes, scores}));
  EXPECT_EQ(out[0].f, (std::vector<float>{0, 0, 1, 0, 0, 2}));
}

// What an image stores of a tail (parts) gives the same tail back; parts
// whose indices disagree are refused, naming what is out of range.
TEST(HostTail, PartsRoundTripAndBadPartsAreRefused) {
  Graph g = detector();
  ASSERT_OK_AND_ASSIGN(std::optional<HostTail> tail, HostTail::split(g));
  ASSERT_OK(infer_shapes(g));
  ASSERT_OK(tail->bind_prefix(g));
  ASSERT_OK_AND_ASSIGN(HostTail back, HostTail::from_parts(tail->parts()));
  EXPECT_EQ(back.summary(), tail->summary());
  EXPECT_EQ(back.output_names(), tail->output_names());
  EXPECT_EQ(back.num_prefix_outputs(), tail->num_prefix_outputs());
  const HostTensor scores = HostTensor::floats({1, 1, 3}, {0.8f, 0.9f, 0.3f});
  ASSERT_OK_AND_ASSIGN(std::vector<HostTensor> want, tail->run({kBoxes, kBoxes, scores}));
  ASSERT_OK_AND_ASSIGN(std::vector<HostTensor> got, back.run({kBoxes, kBoxes, scores}));
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) EXPECT_EQ(got[k].f, want[k].f);

  auto refused = [&](auto&& forge, const std::string& message) {
    HostTail::Parts p = tail->parts();
    forge(p);
    const auto r = HostTail::from_parts(std::move(p));
    ASSERT_FALSE(r.ok()) << message;
    EXPECT_THAT(r.status().message(), HasSubstr(message));
  };
  refused([](HostTail::Parts& p) { p.tail.nodes[0].inputs[0] = 99; }, "names value 99 of");
  refused([](HostTail::Parts& p) { p.tail.outputs[0] = -2; }, "graph input or output -2");
  refused([](HostTail::Parts& p) { p.pos[0] = 7; }, "reads prefix output 7 of 3");
  refused([](HostTail::Parts& p) { p.pos.pop_back(); }, "positions");
  refused([](HostTail::Parts& p) { p.source[0] = 5; }, "output source 5 is out of range");
  refused([](HostTail::Parts& p) { p.source[0] = -9; }, "output source -9 is out of range");
  refused([](HostTail::Parts& p) { p.names.pop_back(); }, "1 output names for 2 outputs");
  refused([](HostTail::Parts& p) { p.tail.nodes[0].op_type = "NoSuchOp"; }, "has no host kernel");
  refused(
      [](HostTail::Parts& p) {
        p.tail.nodes[0].attrs["then_branch"] = Attribute{.kind = Attribute::Kind::GRAPH};
      },
      "graph attribute 'then_branch' is empty");
}

TEST(HostTail, SplitLeavesStaticGraphsAndRefusesWhatItCannotRun) {
  Graph g = detector();
  g.nodes.resize(2);
  g.outputs = {g.find("boxes")};
  ASSERT_OK_AND_ASSIGN(std::optional<HostTail> none, HostTail::split(g));
  EXPECT_FALSE(none);
  EXPECT_EQ(g.nodes.size(), 2u);
  // A tail node reading a graph input directly.
  Graph direct = detector();
  direct.nodes[2].inputs[0] = direct.find("boxes_in");
  EXPECT_THAT(HostTail::split(direct).status().message(), HasSubstr("reads the graph input 'boxes_in' directly"));
  // A node after the NMS with no host kernel.
  Graph loop = detector();
  loop.nodes[3].op_type = "Loop";
  const Status s = HostTail::split(loop).status();
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_THAT(s.message(), HasSubstr("Loop 'c' reads the result of a data-dependent shape and has no host kernel"));
  // ... or inside an If's branch.
  Graph branchy = detector();
  auto branch = std::make_shared<Graph>();
  branch->nodes.push_back(Node{.name = "seq", .op_type = "SequenceConstruct"});
  branchy.nodes[3].op_type = "If";
  branchy.nodes[3].attrs["then_branch"] = Attribute{.kind = Attribute::Kind::GRAPH, .g = branch};
  EXPECT_THAT(HostTail::split(branchy).status().message(),
              HasSubstr("SequenceConstruct 'seq' (in If 'c''s then_branch) reads the result of a data-dependent shape "
                        "and has no host kernel"));
}

}  // namespace
}  // namespace tessera::graph
