// Compiled models against the host reference evaluation of the same graph
// (the unoptimized graph, every node on graph::evaluate), in float32 and
// bfloat16, through run() and through the traced two-queue Pipeline; the
// report (passes, fallbacks) and the error paths.
//
// Tolerances: float32 PCC >= 0.99999 and max |diff| <= 1e-4 * max |ref|;
// bfloat16 activations / weights PCC >= 0.999.
#include "tessera/runtime/compiled_model.h"

#include "graph_reference.h"
#include "onnx_model_builder.h"
#include "tessera/base/cpu_features.h"
#include "tessera/cnn/pipeline.h"
#include "tessera/device/profiler.h"
#include "tessera/graph/host_eval.h"
#include "tessera/import/onnx.h"
#include "tessera/ops/eltwise.h"
#include "test_util.h"

namespace tessera::runtime {
namespace {

using tessera::testing::pcc;
using tessera::testing::random_values;
using ::testing::HasSubstr;

std::vector<graph::HostTensor> reference(const graph::Graph& g, const graph::HostTensor& x) {
  const auto vals = tessera::testing::reference_values(g, x);
  std::vector<graph::HostTensor> r;
  if (vals.empty()) return r;
  for (int o : g.outputs) r.push_back(*vals[static_cast<size_t>(o)]);
  return r;
}

graph::HostTensor input_for(const std::vector<int64_t>& dims, uint32_t seed) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return graph::HostTensor::floats(dims, random_values(static_cast<size_t>(n), seed, 1.0f));
}

Tensor device_input(const graph::HostTensor& x, Device& dev) {
  std::vector<uint32_t> d(x.dims.begin(), x.dims.end());
  return to_device(Tensor::from_vector(x.f, Shape(std::span<const uint32_t>(d)), DataType::FLOAT32).value(), dev)
      .value();
}

void expect_close(const Tensor& got_dev, const graph::HostTensor& want, double min_pcc, double max_rel) {
  auto got = got_dev.cpu().value().to_vector().value();
  ASSERT_EQ(got.size(), want.f.size());
  double max_ref = 0, max_diff = 0;
  for (size_t k = 0; k < got.size(); ++k) {
    max_ref = std::max(max_ref, std::fabs(double{want.f[k]}));
    max_diff = std::max(max_diff, std::fabs(double{got[k]} - want.f[k]));
  }
  EXPECT_GE(pcc(got, want.f), min_pcc);
  if (max_rel > 0) {
    EXPECT_LE(max_diff, max_rel * max_ref);
  }
}

// Special values as the reference has them (NaN where it is NaN, its
// infinities), elsewhere within rel |ref| + abs + of_max times its largest
// finite value.
void expect_near_special(const Tensor& got_dev, const graph::HostTensor& want, double rel, double abs,
                         double of_max = 0) {
  const std::vector<float> got = got_dev.cpu().value().to_vector().value();
  ASSERT_EQ(got.size(), want.f.size());
  double max_ref = 0;
  for (float w : want.f)
    if (std::isfinite(w)) max_ref = std::max(max_ref, std::fabs(double{w}));
  for (size_t k = 0; k < got.size(); ++k) {
    const float w = want.f[k];
    if (std::isnan(w))
      EXPECT_TRUE(std::isnan(got[k])) << k << ": " << got[k];
    else if (std::isinf(w))
      EXPECT_EQ(got[k], w) << k;
    else
      EXPECT_NEAR(got[k], w, rel * std::fabs(w) + abs + of_max * max_ref) << k;
  }
}

class CompiledModelTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(CompiledModelTest, SmallCnnMatchesTheHostReference) {
  const int64_t batch = GetParam();
  ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(testing_onnx::small_cnn(batch).bytes()));
  const graph::HostTensor x = input_for(g.value(g.inputs[0]).dims, 7);
  const auto want = reference(g, x);
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.trace_region_size = 1 << 20, .num_command_queues = 2}));
  ASSERT_OK_AND_ASSIGN(auto model, CompiledModel::compile(g, *dev, {}));
  const CompileReport& rep = model->report();
  auto rewrites = [&](std::string_view pass) {
    for (const auto& p : rep.passes)
      if (p.pass == pass) return p.rewrites;
    ADD_FAILURE() << "no pass " << pass;
    return -1;
  };
  EXPECT_EQ(rewrites("fold_bias_add"), 0);             // no constant bias add
  EXPECT_EQ(rewrites("fold_batch_norm"), 1);           // the batch norm
  EXPECT_EQ(rewrites("fold_scale_mul"), 0);            // no constant scale
  EXPECT_EQ(rewrites("fuse_activation_patterns"), 1);  // x * sigmoid(x)
  EXPECT_GE(rewrites("fuse_activations"), 2);          // relu and silu into their convs
  EXPECT_EQ(rewrites("fuse_residual_adds"), 1);        // the residual add into the second conv
  EXPECT_TRUE(rep.fallbacks.empty()) << rep.to_string();
  // Each conv's kernel choice is known once the first run has made it.
  for (const std::string& s : model->conv_selections()) EXPECT_THAT(s, HasSubstr(": not run yet"));
  const Tensor xs[] = {device_input(x, *dev)};
  ASSERT_OK_AND_ASSIGN(auto outs, model->run(xs));
  ASSERT_EQ(outs.size(), 2u);
  ASSERT_FALSE(model->conv_selections().empty());
  for (const std::string& s : model->conv_selections()) {
    EXPECT_THAT(s, ::testing::ContainsRegex(": [a-z0-9_]+ for conv2d:n[0-9]+h"));
    EXPECT_THAT(s, ::testing::Not(HasSubstr("not run yet")));
  }
  expect_close(outs[0], want[0], 0.99999, 1e-4);
  expect_close(outs[1], want[1], 0.99999, 1e-4);
  // bfloat16 activations with bfloat16 and bfloat8_b weights.
  for (DataType w : {DataType::BFLOAT16, DataType::BFLOAT8_B}) {
    ASSERT_OK_AND_ASSIGN(auto lp, CompiledModel::compile(g, *dev, {.dtype = DataType::BFLOAT16, .weights_dtype = w}));
    ASSERT_OK(enable_profiler(*dev));
    ASSERT_OK_AND_ASSIGN(auto lo, lp->run(xs));
    ASSERT_OK_AND_ASSIGN(DeviceProfile prof, read_profile(*dev));
    ASSERT_OK(disable_profiler(*dev));
    expect_close(lo[0], want[0], 0.999, 0);
    expect_close(lo[1], want[1], 0.999, 0);
    // The float32 image moves to NHWC and rounds to bfloat16 in one launch,
    // no typecast first (those left are the outputs'); the same as feeding
    // it in bfloat16.
    ASSERT_FALSE(prof.ops.empty());
    EXPECT_EQ(prof.ops[0].kernel_name, "any_permute__transpose_tiles_converted");
    for (const OpTiming& op : prof.ops) EXPECT_FALSE(op.key.starts_with("typecast:f32")) << op.key;
    ASSERT_OK_AND_ASSIGN(Tensor xb, typecast(xs[0], DataType::BFLOAT16));
    const Tensor xbs[] = {xb};
    ASSERT_OK_AND_ASSIGN(auto lb, lp->run(xbs));
    for (size_t k = 0; k < lo.size(); ++k)
      EXPECT_EQ(testing::host_bytes(lb[k].cpu().value()), testing::host_bytes(lo[k].cpu().value()));
  }
}

INSTANTIATE_TEST_SUITE_P(Batch, CompiledModelTest, ::testing::Values(1, 3));

// A detection head: Conv -> Reshape [N, A * B, H, W] to [N, A, B, H, W] ->
// Transpose (0, 1, 3, 4, 2) -> Sigmoid. The reshape is a view of the conv's
// NHWC rows and the transpose one permute (one layout conversion: the input
// to the conv); with the reshape's result also a graph output, it is taken
// plainly (a second conversion). Both match the host reference.
TEST(CompiledModel, DetectionHeadSplitTransposeMatchesTheHostReference) {
  for (bool split_is_output : {false, true})
    for (int64_t batch : {1, 2}) {
      SCOPED_TRACE(fmt::format("batch {} split output {}", batch, split_is_output));
      testing_onnx::ModelBuilder b(13);
      b.input("x", {batch, 4, 6, 5});
      b.random_initializer("w", {6, 4, 1, 1}, 0.5f, 1);
      b.random_initializer("bias", {6}, 0.1f, 2);
      b.int_initializer("shape", {batch, 2, 3, 6, 5});
      b.node("Conv", {"x", "w", "bias"}, {"c"});
      b.node("Reshape", {"c", "shape"}, {"split"});
      auto* t = b.node("Transpose", {"split"}, {"t"});
      b.ints(t, "perm", {0, 1, 3, 4, 2});
      b.node("Sigmoid", {"t"}, {"y"});
      b.output("y");
      if (split_is_output) b.output("split");
      ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(b.bytes()));
      const graph::HostTensor x = input_for(g.value(g.inputs[0]).dims, 3);
      const auto want = reference(g, x);
      ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
      ASSERT_OK_AND_ASSIGN(auto model, CompiledModel::compile(g, *dev, {}));
      EXPECT_EQ(model->report().layout_conversions, split_is_output ? 2 : 1) << model->report().to_string();
      const Tensor xs[] = {device_input(x, *dev)};
      ASSERT_OK_AND_ASSIGN(auto outs, model->run(xs));
      ASSERT_EQ(outs.size(), want.size());
      for (size_t k = 0; k < outs.size(); ++k) expect_close(outs[k], want[k], 0.99999, 1e-4);
    }
}

// A channel shuffle between convs (ShuffleNet's): Reshape [N, C, H, W] to
// [N, 2, C / 2, H, W], Transpose (0, 2, 1, 3, 4), Reshape back. It stays on
// the conv's NHWC rows, one permute within each pixel's channels: the one
// layout conversion left is the input's. Another 5-D transpose of the split
// (not a shuffle) is one permute out of the rows; both match the host.
TEST(CompiledModel, ChannelShuffleStaysNhwc) {
  for (bool shuffle : {true, false})
    for (int64_t batch : {1, 2}) {
      SCOPED_TRACE(fmt::format("batch {} shuffle {}", batch, shuffle));
      testing_onnx::ModelBuilder b(13);
      b.input("x", {batch, 4, 5, 3});
      b.random_initializer("w1", {6, 4, 1, 1}, 0.5f, 1);
      b.random_initializer("w2", {6, 6, 3, 3}, 0.3f, 2);
      b.int_initializer("split", {batch, 2, 3, 5, 3});
      b.int_initializer("merged", {batch, 6, 5, 3});
      b.node("Conv", {"x", "w1"}, {"c"});
      b.node("Reshape", {"c", "split"}, {"s"});
      auto* t = b.node("Transpose", {"s"}, {"t"});
      b.ints(t, "perm", shuffle ? std::vector<int64_t>{0, 2, 1, 3, 4} : std::vector<int64_t>{0, 2, 3, 1, 4});
      if (shuffle) {
        b.node("Reshape", {"t", "merged"}, {"m"});
        auto* c2 = b.node("Conv", {"m", "w2"}, {"y"});
        b.ints(c2, "pads", {1, 1, 1, 1});
      } else {
        b.node("Relu", {"t"}, {"y"});
      }
      b.output("y");
      ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(b.bytes()));
      const graph::HostTensor x = input_for(g.value(g.inputs[0]).dims, 5);
      const auto want = reference(g, x);
      ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
      ASSERT_OK_AND_ASSIGN(auto model, CompiledModel::compile(g, *dev, {}));
      EXPECT_EQ(model->report().layout_conversions, 1) << model->report().to_string();
      const Tensor xs[] = {device_input(x, *dev)};
      ASSERT_OK_AND_ASSIGN(auto outs, model->run(xs));
      ASSERT_EQ(outs.size(), 1u);
      expect_close(outs[0], want[0], 0.99999, 1e-4);
    }
}

// ConvNeXt's block as PyTorch exports it (a conv, Transpose to
// channels-last, LayerNormalization, MatMul + Add, GELU, MatMul + Add,
// Transpose back, layer scale, residual): the MatMuls run as 1x1 convs on
// the NHWC rows with GELU, the scale and the residual fused; the transposes
// around the LayerNorm are views. Nothing moves data but the input's and the
// output's layout conversions.
TEST(CompiledModel, ChannelsLastMlpRunsAsConvs) {
  testing_onnx::ModelBuilder b(17);
  b.input("x", {2, 8, 4, 3});
  b.random_initializer("w0", {8, 1, 3, 3}, 0.5f, 8);
  b.random_initializer("ln_s", {8}, 0.5f, 1);
  b.random_initializer("ln_b", {8}, 0.1f, 2);
  b.random_initializer("w1", {8, 32}, 0.3f, 3);
  b.random_initializer("b1", {32}, 0.1f, 4);
  b.random_initializer("w2", {32, 8}, 0.3f, 5);
  b.random_initializer("b2", {8}, 0.1f, 6);
  b.random_initializer("gamma", {8, 1, 1}, 0.5f, 7);
  auto* dw = b.node("Conv", {"x", "w0"}, {"d"});
  b.ints(dw, "pads", {1, 1, 1, 1});
  b.i(dw, "group", 8);
  b.ints(b.node("Transpose", {"d"}, {"t"}), "perm", {0, 2, 3, 1});
  b.node("LayerNormalization", {"t", "ln_s", "ln_b"}, {"ln"});
  b.node("MatMul", {"ln", "w1"}, {"m1"});
  b.node("Add", {"m1", "b1"}, {"a1"});
  b.node("Gelu", {"a1"}, {"g1"});
  b.node("MatMul", {"g1", "w2"}, {"m2"});
  b.node("Add", {"m2", "b2"}, {"a2"});
  b.ints(b.node("Transpose", {"a2"}, {"back"}), "perm", {0, 3, 1, 2});
  b.node("Mul", {"gamma", "back"}, {"sc"});
  b.node("Add", {"sc", "d"}, {"y"});
  b.output("y");
  ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(b.bytes()));
  const graph::HostTensor x = input_for(g.value(g.inputs[0]).dims, 9);
  const auto want = reference(g, x);
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  ASSERT_OK_AND_ASSIGN(auto model, CompiledModel::compile(g, *dev, {}));
  const CompileReport& rep = model->report();
  EXPECT_TRUE(rep.fallbacks.empty()) << rep.to_string();
  const Tensor xs[] = {device_input(x, *dev)};
  ASSERT_OK(enable_profiler(*dev));
  ASSERT_OK_AND_ASSIGN(auto outs, model->run(xs));
  ASSERT_OK_AND_ASSIGN(DeviceProfile prof, read_profile(*dev));
  ASSERT_OK(disable_profiler(*dev));
  ASSERT_EQ(outs.size(), 1u);
  expect_close(outs[0], want[0], 0.99999, 1e-4);
  std::vector<std::string> ops;
  for (const OpTiming& op : prof.ops) ops.push_back(op.key.substr(0, op.key.find(':')));
  EXPECT_EQ(ops, (std::vector<std::string>{"permute", "conv2d", "layer_norm", "conv2d", "conv2d", "permute"}))
      << rep.to_string();
}

// Three frames of `dims` (seeds from `seed`) through the traced two-queue
// Pipeline, the first output of each against the host reference (`list`:
// the model has several outputs, which come as a list); replays allocate
// no device memory.
void expect_traced_pipeline_matches(CompiledModel& model, Device& dev, const graph::Graph& g,
                                    const std::vector<int64_t>& dims, uint32_t seed, bool list) {
  std::vector<uint32_t> d(dims.begin(), dims.end());
  const Shape shape{std::span<const uint32_t>(d)};
  std::vector<Tensor> inputs;
  std::vector<graph::HostTensor> refs;
  for (uint32_t s = 0; s < 3; ++s) {
    const graph::HostTensor x = input_for(dims, seed + s);
    refs.push_back(reference(g, x)[0]);
    inputs.push_back(Tensor::from_vector(x.f, shape, DataType::FLOAT32).value());
  }
  ASSERT_OK_AND_ASSIGN(
      auto pipe, cnn::create_pipeline_from_config({.use_trace = true, .num_command_queues = 2}, model.pipeline_model(),
                                                  dev, DRAM_MEMORY_CONFIG, DRAM_MEMORY_CONFIG));
  ASSERT_OK(pipe->compile(inputs[0]));
  const MemoryRegionStats before = dev.memory_stats(BufferType::DRAM);
  ASSERT_OK(pipe->enqueue(inputs));
  ASSERT_OK_AND_ASSIGN(auto outs, pipe->pop_all());
  // Replays reuse the captured buffers: no new device memory.
  const MemoryRegionStats after = dev.memory_stats(BufferType::DRAM);
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
  EXPECT_EQ(after.num_buffers, before.num_buffers);
  ASSERT_EQ(outs.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_EQ(outs[i].is_tensor(), !list);
    expect_close(list ? *outs[i].list[0].tensor : *outs[i].tensor, refs[i], 0.99999, 1e-4);
  }
  ASSERT_OK(pipe->cleanup());
}

TEST(CompiledModel, RunsThroughTheTracedPipelineWithoutAllocating) {
  ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(testing_onnx::small_cnn().bytes()));
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.trace_region_size = 1 << 20, .num_command_queues = 2}));
  ASSERT_OK_AND_ASSIGN(auto model, CompiledModel::compile(g, *dev, {}));
  expect_traced_pipeline_matches(*model, *dev, g, {1, 3, 16, 16}, 10, /*list=*/true);  // two graph outputs
}

// A model of two inputs through the traced Pipeline, a frame of both per
// run: bit-identical to CompiledModel::run on the same inputs; a frame of
// one input is refused naming the model's inputs.
TEST(CompiledModel, FramesOfTwoInputsRunThroughThePipeline) {
  testing_onnx::ModelBuilder b(13);
  b.input("a", {1, 4, 5, 6});
  b.input("b", {1, 4, 5, 6});
  b.node("Add", {"a", "b"}, {"s"});
  b.node("Relu", {"s"}, {"y"});
  b.output("y");
  ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(b.bytes()));
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.trace_region_size = 1 << 20, .num_command_queues = 2}));
  ASSERT_OK_AND_ASSIGN(auto model, CompiledModel::compile(g, *dev, {}));
  auto host = [](uint32_t seed) {
    return Tensor::from_vector(input_for({1, 4, 5, 6}, seed).f, Shape{1, 4, 5, 6}, DataType::FLOAT32).value();
  };
  std::vector<cnn::Frame> frames;
  for (uint32_t k = 0; k < 3; ++k) frames.push_back({host(30 + 2 * k), host(31 + 2 * k)});
  ASSERT_OK_AND_ASSIGN(auto one, cnn::create_pipeline_from_config({.use_trace = false}, model->pipeline_model(), *dev,
                                                                  DRAM_MEMORY_CONFIG));
  EXPECT_ERROR(one->compile(frames[0][0]), StatusCode::kInvalidArgument,
               "a frame of 1 input tensor(s); the model takes 2 (a, b)");
  ASSERT_OK_AND_ASSIGN(
      auto pipe, cnn::create_pipeline_from_config({.use_trace = true, .num_command_queues = 2}, model->pipeline_model(),
                                                  *dev, DRAM_MEMORY_CONFIG, DRAM_MEMORY_CONFIG));
  ASSERT_OK(pipe->compile(frames[0]));
  ASSERT_OK(pipe->enqueue(std::span<const cnn::Frame>(frames)));
  ASSERT_OK_AND_ASSIGN(auto outs, pipe->pop_all());
  ASSERT_EQ(outs.size(), frames.size());
  for (size_t k = 0; k < frames.size(); ++k) {
    const Tensor xs[] = {to_device(frames[k][0], *dev).value(), to_device(frames[k][1], *dev).value()};
    ASSERT_OK_AND_ASSIGN(auto want, model->run(xs));
    EXPECT_EQ(outs[k].tensor->to_vector().value(), want[0].cpu().value().to_vector().value()) << k;
  }
  ASSERT_OK(pipe->cleanup());
}

// An output that folds to a constant (a shape, cast to float): each run
// returns a copy, which the caller may release (the Pipeline does) while the
// model keeps its own; three frames through the traced Pipeline.
TEST(CompiledModel, ConstantOutputsAreCopiesTheCallerMayRelease) {
  testing_onnx::ModelBuilder b(13);
  b.input("x", {1, 3, 4, 4});
  b.node("Relu", {"x"}, {"y"});
  b.node("Shape", {"x"}, {"s"});
  b.node("Cast", {"s"}, {"dims"})->add_attribute()->set_name("to");
  b.graph().mutable_node(2)->mutable_attribute(0)->set_type(onnx::AttributeProto::INT);
  b.graph().mutable_node(2)->mutable_attribute(0)->set_i(1);
  b.output("y");
  b.output("dims");
  ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(b.bytes()));
  ASSERT_TRUE(g.is_constant(g.outputs[1]));
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.trace_region_size = 1 << 20, .num_command_queues = 2}));
  ASSERT_OK_AND_ASSIGN(auto model, CompiledModel::compile(g, *dev, {}));
  const Tensor x = device_input(input_for({1, 3, 4, 4}, 5), *dev);
  for (int run = 0; run < 2; ++run) {
    ASSERT_OK_AND_ASSIGN(std::vector<Tensor> outs, model->run(std::span<const Tensor>(&x, 1)));
    EXPECT_EQ(outs[1].cpu().value().to_vector().value(), (std::vector<float>{1, 3, 4, 4}));
    deallocate(outs[1], /*force=*/true);
  }
  std::vector<cnn::Frame> frames(3, cnn::Frame{x.cpu().value()});
  ASSERT_OK_AND_ASSIGN(
      auto pipe, cnn::create_pipeline_from_config({.use_trace = true, .num_command_queues = 2}, model->pipeline_model(),
                                                  *dev, DRAM_MEMORY_CONFIG, DRAM_MEMORY_CONFIG));
  ASSERT_OK(pipe->compile(frames[0]));
  ASSERT_OK(pipe->enqueue(std::span<const cnn::Frame>(frames)));
  ASSERT_OK_AND_ASSIGN(auto outs, pipe->pop_all());
  ASSERT_EQ(outs.size(), 3u);
  for (const auto& o : outs) {
    ASSERT_EQ(o.list.size(), 2u);
    EXPECT_EQ(o.list[1].tensor->to_vector().value(), (std::vector<float>{1, 3, 4, 4}));
  }
  ASSERT_OK(pipe->cleanup());
}

// On the emulated Wormhole the per-conv plan shards the small convs in L1
// (and puts their outputs back in DRAM for readers other than convs).
TEST(CompiledModel, ConvShardingPlanOnTheEmulatedWormhole) {
  ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(testing_onnx::small_cnn().bytes()));
  const graph::HostTensor x = input_for({1, 3, 16, 16}, 21);
  const auto want = reference(g, x);
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.descriptor = "wormhole_b0", .l1_small_size = 16384}));
  ASSERT_OK_AND_ASSIGN(auto model, CompiledModel::compile(g, *dev, {}));
  const auto& plans = model->report().conv_plans;
  ASSERT_EQ(plans.size(), 3u);
  int applied = 0;
  for (const auto& p : plans) applied += p.find("(applied)") != std::string::npos;
  EXPECT_GT(applied, 0) << fmt::format("{}", fmt::join(plans, "\n"));
  const Tensor xs[] = {device_input(x, *dev)};
  ASSERT_OK_AND_ASSIGN(auto outs, model->run(xs));
  expect_close(outs[0], want[0], 0.99999, 1e-4);
  // The same graph on the CPU plans the same way but keeps DRAM.
  ASSERT_OK_AND_ASSIGN(auto cpu, open_device({}));
  ASSERT_OK_AND_ASSIGN(auto cpu_model, CompiledModel::compile(g, *cpu, {}));
  for (const auto& p : cpu_model->report().conv_plans) EXPECT_EQ(p.find("(applied)"), std::string::npos) << p;
}

TEST(CompiledModel, OpsWithoutDeviceKernelsFallBackAndAreReported) {
  testing_onnx::ModelBuilder b(13);
  b.input("x", {2, 3, 4});
  b.node("Abs", {"x"}, {"a"});
  b.node("Pow", {"a", "a"}, {"m"});  // a run-time exponent
  b.node("Sin", {"m"}, {"y"});
  b.output("y");
  ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(b.bytes()));
  const graph::HostTensor x = input_for({2, 3, 4}, 3);
  const auto want = reference(g, x);
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  ASSERT_OK_AND_ASSIGN(auto model, CompiledModel::compile(g, *dev, {}));
  ASSERT_EQ(model->report().fallbacks.size(), 2u);
  EXPECT_THAT(model->report().fallbacks[0], HasSubstr("Pow 'm': attributes the device kernel does not cover"));
  EXPECT_THAT(model->report().fallbacks[1], HasSubstr("Sin 'y': no device kernel"));
  const Tensor xs[] = {device_input(x, *dev)};
  ASSERT_OK_AND_ASSIGN(auto outs, model->run(xs));
  expect_close(outs[0], want[0], 0.99999, 1e-6);
  // With fallbacks disabled the same graph is an error naming the node.
  auto strict = CompiledModel::compile(g, *dev, {.allow_fallback = false});
  EXPECT_EQ(strict.status().code(), StatusCode::kUnimplemented);
  EXPECT_THAT(strict.status().message(), HasSubstr("Pow 'm'"));
}

// Element-wise ops outside the usual activations run on the device: Elu
// (fused into the conv with its alpha), Erf, Neg, Abs and Reciprocal.
TEST(CompiledModel, MoreElementwiseOpsRunOnTheDevice) {
  testing_onnx::ModelBuilder b(13);
  b.input("x", {2, 3, 5, 4});
  b.random_initializer("w", {6, 3, 3, 3}, 0.5f, 1);
  b.initializer("one", {1}, {1.0f});
  auto* c = b.node("Conv", {"x", "w"}, {"c"});
  b.ints(c, "pads", {1, 1, 1, 1});
  b.f(b.node("Elu", {"c"}, {"e"}), "alpha", 0.7f);
  b.node("Erf", {"e"}, {"f"});
  b.node("Neg", {"f"}, {"n"});
  b.node("Abs", {"n"}, {"a"});
  b.node("Add", {"a", "one"}, {"p"});
  b.node("Reciprocal", {"p"}, {"y"});
  b.output("y");
  ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(b.bytes()));
  const graph::HostTensor x = input_for(g.value(g.inputs[0]).dims, 4);
  const auto want = reference(g, x);
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  ASSERT_OK_AND_ASSIGN(auto model, CompiledModel::compile(g, *dev, {.allow_fallback = false}));
  const Tensor xs[] = {device_input(x, *dev)};
  ASSERT_OK_AND_ASSIGN(auto outs, model->run(xs));
  expect_close(outs[0], want[0], 0.99999, 1e-5);
}

// InstanceNormalization (a style-transfer or segmentation net's norm) runs
// on the device as group_norm with a group per channel, at batch 2, with
// values far from zero mean and unit variance per channel.
TEST(CompiledModel, InstanceNormalizationRunsOnTheDevice) {
  testing_onnx::ModelBuilder b(13);
  b.input("x", {2, 6, 9, 7});
  b.random_initializer("s", {6}, 1.0f, 2);
  b.random_initializer("bias", {6}, 0.5f, 3);
  b.initializer("shift", {1, 6, 1, 1}, {3.0f, -2.0f, 0.5f, 10.0f, -7.0f, 0.0f});
  b.node("Add", {"x", "shift"}, {"xs"});
  b.f(b.node("InstanceNormalization", {"xs", "s", "bias"}, {"n"}), "epsilon", 1e-3f);
  b.node("Relu", {"n"}, {"y"});
  b.output("y");
  ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(b.bytes()));
  const graph::HostTensor x = input_for(g.value(g.inputs[0]).dims, 11);
  const auto want = reference(g, x);
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  for (const DataType dt : {DataType::FLOAT32, DataType::BFLOAT16}) {
    ASSERT_OK_AND_ASSIGN(auto model,
                         CompiledModel::compile(g, *dev, {.dtype = dt, .weights_dtype = dt, .allow_fallback = false}));
    const Tensor xs[] = {device_input(x, *dev)};
    ASSERT_OK_AND_ASSIGN(auto outs, model->run(xs));
    if (dt == DataType::FLOAT32)
      expect_close(outs[0], want[0], 0.99999, 1e-5);
    else
      expect_close(outs[0], want[0], 0.999, 0);
  }
}

// Tile on the device: of a conv's NHWC output over batch, height and
// channels, and of a plain value over its last two axes, with no fallback.
TEST(CompiledModel, TileRunsOnTheDeviceInEitherLayout) {
  testing_onnx::ModelBuilder b(13);
  b.input("x", {1, 3, 5, 4});
  b.random_initializer("w", {4, 3, 3, 3}, 0.5f, 5);
  b.int_initializer("r4", {2, 2, 1, 3});
  b.int_initializer("r3", {1, 2, 3});
  b.int_initializer("shape3", {3, 5, 4});
  b.ints(b.node("Conv", {"x", "w"}, {"c"}), "pads", {1, 1, 1, 1});
  b.node("Tile", {"c", "r4"}, {"tc"});
  b.node("Reshape", {"x", "shape3"}, {"x3"});
  b.node("Tile", {"x3", "r3"}, {"tx"});
  b.output("tc");
  b.output("tx");
  ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(b.bytes()));
  const graph::HostTensor x = input_for(g.value(g.inputs[0]).dims, 3);
  const auto want = reference(g, x);
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  ASSERT_OK_AND_ASSIGN(auto model, CompiledModel::compile(g, *dev, {.allow_fallback = false}));
  const Tensor xs[] = {device_input(x, *dev)};
  ASSERT_OK_AND_ASSIGN(auto outs, model->run(xs));
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(outs[0].shape(), (Shape{2, 8, 5, 12}));
  EXPECT_EQ(outs[1].shape(), (Shape{3, 10, 12}));
  expect_close(outs[0], want[0], 0.99999, 1e-5);
  expect_close(outs[1], want[1], 1.0, 0);  // copies: exact
}

// x -> Conv -> c -> Gelu as PyTorch exports it -> y.
void ModelBuilderNodes(testing_onnx::ModelBuilder& b, bool half_inside) {
  b.node("Conv", {"x", "w"}, {"c"});
  b.node("Div", {"c", "sqrt2"}, {"d"});
  b.node("Erf", {"d"}, {"e"});
  b.node("Add", {"e", "one"}, {"a"});
  if (half_inside) {
    b.node("Mul", {"c", "half"}, {"h"});
    b.node("Mul", {"h", "a"}, {"y"});
  } else {
    b.node("Mul", {"c", "a"}, {"m"});
    b.node("Mul", {"m", "half"}, {"y"});
  }
}

// The model of `b` (x (1, 4, 6, 6) in) compiles to one device op, a conv
// with its activation fused, with no fallback, and matches the host.
void expect_one_fused_conv(const testing_onnx::ModelBuilder& b, Device& dev) {
  ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(b.bytes()));
  const graph::HostTensor x = input_for({1, 4, 6, 6}, 9);
  const auto want = reference(g, x);
  ASSERT_OK_AND_ASSIGN(auto model, CompiledModel::compile(g, dev, {}));
  const CompileReport& rep = model->report();
  EXPECT_TRUE(rep.fallbacks.empty()) << rep.to_string();
  EXPECT_EQ(rep.device_ops, 1) << rep.to_string();
  const Tensor xs[] = {device_input(x, dev)};
  ASSERT_OK_AND_ASSIGN(auto outs, model->run(xs));
  expect_close(outs[0], want[0], 0.99999, 1e-5);
}

// PyTorch's export of nn.GELU() before opset 20 (Div, Erf, Add, Mul, Mul)
// after a conv becomes one Gelu the conv runs fused, on the device: the
// pattern with the 0.5 on the outer Mul and with it on the inner one.
TEST(CompiledModel, ErfGeluPatternFusesIntoOneDeviceActivation) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  for (bool half_inside : {false, true}) {
    testing_onnx::ModelBuilder b(13);
    b.input("x", {1, 4, 6, 6});
    b.random_initializer("w", {8, 4, 3, 3}, 0.5f, 1);
    b.initializer("sqrt2", {}, {1.4142135f});
    b.initializer("one", {}, {1.0f});
    b.initializer("half", {}, {0.5f});
    ModelBuilderNodes(b, half_inside);
    b.output("y");
    expect_one_fused_conv(b, *dev);
  }
}

// nn.GELU(approximate='tanh') as PyTorch 1.13 exports it (x * x * x, Mul
// by 0.044715, Add x, Mul by sqrt(2/pi), Tanh, Add 1, Mul x, Mul 0.5), and
// with Pow(x, 3) for the cube: one Gelu (tanh form) the conv runs fused.
TEST(CompiledModel, TanhGeluPatternFusesIntoOneDeviceActivation) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  for (bool pow : {false, true}) {
    testing_onnx::ModelBuilder b(13);
    b.input("x", {1, 4, 6, 6});
    b.random_initializer("w", {8, 4, 3, 3}, 0.5f, 1);
    b.initializer("k", {}, {0.044715f});
    b.initializer("s", {}, {0.7978846f});
    b.initializer("one", {}, {1.0f});
    b.initializer("half", {}, {0.5f});
    b.initializer("three", {}, {3.0f});
    b.node("Conv", {"x", "w"}, {"c"});
    if (pow) {
      b.node("Pow", {"c", "three"}, {"c3"});
    } else {
      b.node("Mul", {"c", "c"}, {"c2"});
      b.node("Mul", {"c", "c2"}, {"c3"});
    }
    b.node("Mul", {"k", "c3"}, {"kc3"});
    b.node("Add", {"c", "kc3"}, {"inner"});
    b.node("Mul", {"s", "inner"}, {"arg"});
    b.node("Tanh", {"arg"}, {"t"});
    b.node("Add", {"one", "t"}, {"gate"});
    b.node("Mul", {"c", "gate"}, {"m"});
    b.node("Mul", {"half", "m"}, {"y"});
    b.output("y");
    expect_one_fused_conv(b, *dev);
  }
}

// LayerNorm as PyTorch exports nn.LayerNorm before opset 17 (ReduceMean,
// Sub, Pow, ReduceMean, Add, Sqrt, Div, then the affine Mul and Add, or
// neither) becomes one LayerNormalization on the device: no ReduceMean, Pow
// or Sqrt host fallbacks.
TEST(CompiledModel, WrittenOutLayerNormFusesIntoOneDeviceOp) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  for (bool affine : {true, false}) {
    testing_onnx::ModelBuilder b(13);
    b.input("x", {2, 5, 3, 8});
    b.initializer("two", {}, {2.0f});
    b.initializer("eps", {}, {1e-5f});
    b.random_initializer("gamma", {8}, 1.0f, 3);
    b.random_initializer("beta", {8}, 0.5f, 4);
    testing_onnx::ModelBuilder::ints(b.node("ReduceMean", {"x"}, {"m"}), "axes", {-1});
    b.node("Sub", {"x", "m"}, {"d"});
    b.node("Pow", {"d", "two"}, {"p"});
    testing_onnx::ModelBuilder::ints(b.node("ReduceMean", {"p"}, {"v"}), "axes", {-1});
    b.node("Add", {"v", "eps"}, {"ve"});
    b.node("Sqrt", {"ve"}, {"s"});
    b.node("Div", {"d", "s"}, {affine ? "n" : "y"});
    if (affine) {
      b.node("Mul", {"n", "gamma"}, {"g"});
      b.node("Add", {"g", "beta"}, {"y"});
    }
    b.output("y");
    ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(b.bytes()));
    const graph::HostTensor x = input_for({2, 5, 3, 8}, 11);
    const auto want = reference(g, x);
    ASSERT_OK_AND_ASSIGN(auto model, CompiledModel::compile(g, *dev, {}));
    const CompileReport& rep = model->report();
    EXPECT_TRUE(rep.fallbacks.empty()) << rep.to_string();
    EXPECT_EQ(rep.device_ops, 1) << rep.to_string();
    const Tensor xs[] = {device_input(x, *dev)};
    ASSERT_OK_AND_ASSIGN(auto outs, model->run(xs));
    expect_close(outs[0], want[0], 0.99999, 1e-4);
  }
}

// Pow by the constants 1, 2, -1 and 0.5 (bit for bit C's pow: a copy,
// x * x, 1 / x, sqrt(x + 0)), 3, 4, -2 and -0.5 (two roundings), and 1.5,
// -2.5 (e^(p ln x)) runs on the device. Zeros from the Relu give pow's
// infinities.
TEST(CompiledModel, PowByCommonConstantsRunsOnTheDevice) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  for (float exponent : {2.0f, 1.0f, -1.0f, 3.0f, -2.0f, 0.5f, -0.5f, 4.0f, 1.5f, -2.5f}) {
    SCOPED_TRACE(exponent);
    testing_onnx::ModelBuilder b(13);
    b.input("x", {2, 4, 3, 5});
    b.initializer("e", {}, {exponent});
    b.node("Relu", {"x"}, {"r"});
    b.node("Pow", {"r", "e"}, {"y"});
    b.output("y");
    ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(b.bytes()));
    const graph::HostTensor x = input_for({2, 4, 3, 5}, 5);
    const auto want = reference(g, x);
    ASSERT_OK_AND_ASSIGN(auto model, CompiledModel::compile(g, *dev, {}));
    EXPECT_EQ(model->report().fallbacks.size(), 0u) << model->report().to_string();
    const Tensor xs[] = {device_input(x, *dev)};
    ASSERT_OK_AND_ASSIGN(auto outs, model->run(xs));
    ASSERT_OK_AND_ASSIGN(std::vector<float> got, outs[0].cpu().value().to_vector());
    if (exponent == 3.0f || exponent == -2.0f || exponent == 4.0f || exponent == -0.5f || exponent == 1.5f ||
        exponent == -2.5f) {
      ASSERT_EQ(got.size(), want[0].f.size());
      const bool general = exponent == 1.5f || exponent == -2.5f;
      for (size_t k = 0; k < got.size(); ++k) {
        const float w = want[0].f[k];
        // (e^(p ln x): within (|p ln x| + 4) 2^-23, and p ln x = ln w.)
        const double rel = general ? (std::fabs(std::log(std::fabs(w))) + 4) * 0x1p-23 : 2e-7;
        if (std::isinf(w) || w == 0.0f)
          EXPECT_EQ(got[k], w) << k;
        else
          EXPECT_NEAR(got[k], w, rel * std::fabs(w)) << k;
      }
    } else {
      EXPECT_EQ(got, want[0].f);
    }
  }
  // The special values: -0 gives +0, as C's pow (the reference) does; -inf
  // gives NaN, as PyTorch's pow(x, 0.5) (a square root) does, where C's
  // gives +inf.
  testing_onnx::ModelBuilder b(13);
  b.input("x", {1, 8});
  b.initializer("e", {}, {0.5f});
  b.node("Pow", {"x", "e"}, {"y"});
  b.output("y");
  ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(b.bytes()));
  const graph::HostTensor x =
      graph::HostTensor::floats({1, 8}, {-0.0f, 0.0f, 4.0f, -4.0f, INFINITY, -INFINITY, NAN, 1e-40f});
  const auto want = reference(g, x);
  ASSERT_OK_AND_ASSIGN(auto model, CompiledModel::compile(g, *dev, {}));
  const Tensor xs[] = {device_input(x, *dev)};
  ASSERT_OK_AND_ASSIGN(auto outs, model->run(xs));
  ASSERT_OK_AND_ASSIGN(std::vector<float> got, outs[0].cpu().value().to_vector());
  EXPECT_TRUE(std::isnan(got[5]));
  for (size_t k = 0; k < got.size(); ++k) {
    if (k == 5) continue;
    if (std::isnan(want[0].f[k])) {
      EXPECT_TRUE(std::isnan(got[k])) << k;
      continue;
    }
    EXPECT_EQ(std::bit_cast<uint32_t>(got[k]), std::bit_cast<uint32_t>(want[0].f[k])) << k;
  }
}

// Log runs on the device: within 2^-22 relative of the reference (1e-7
// absolute near 1), -inf at 0 and NaN for negatives as C's log.
TEST(CompiledModel, LogRunsOnTheDevice) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  testing_onnx::ModelBuilder b(13);
  b.input("x", {2, 4, 3, 5});
  b.node("Log", {"x"}, {"y"});
  b.output("y");
  ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(b.bytes()));
  graph::HostTensor x = input_for({2, 4, 3, 5}, 9);
  x.f[0] = 0.0f, x.f[1] = -0.0f, x.f[2] = INFINITY, x.f[3] = NAN, x.f[4] = 1e-40f, x.f[5] = 1.0f;
  const auto want = reference(g, x);
  ASSERT_OK_AND_ASSIGN(auto model, CompiledModel::compile(g, *dev, {}));
  EXPECT_EQ(model->report().fallbacks.size(), 0u) << model->report().to_string();
  const Tensor xs[] = {device_input(x, *dev)};
  ASSERT_OK_AND_ASSIGN(auto outs, model->run(xs));
  expect_near_special(outs[0], want[0], 0x1p-22, 1e-7);
}

// Reductions of a 4-D value over any of its channel and spatial axes run on
// the device (lower_reduce: pools over the reduced spatial axes, then a 1x1
// conv of ones or a max pool across channels, with |x|, x * x, sqrt and
// negation around them), keepdims or not, against the host reference; over
// the batch axis, or every axis, row by row (lower_reduce_rows).
TEST(CompiledModel, ReductionsOverChannelAndSpatialAxesRunOnTheDevice) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  struct C {
    std::string op;
    std::vector<int64_t> axes;
    int64_t keepdims;
    size_t fallbacks;
  };
  std::vector<C> cases = {{"ReduceMean", {0, 1, 2, 3}, 1, 0}, {"ReduceMax", {0}, 1, 0}, {"ReduceSum", {0}, 0, 0}};
  for (const char* op :
       {"ReduceMean", "ReduceSum", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceMax", "ReduceMin"})
    for (int64_t keep : {1, 0})
      for (std::vector<int64_t> axes : {std::vector<int64_t>{2, 3}, {-2, -1}, {1}, {2}, {3}, {1, 2}, {1, 3}, {1, 2, 3}})
        cases.push_back({op, axes, keep, 0});
  for (const C& c : cases) {
    SCOPED_TRACE(fmt::format("{} axes ({}) keepdims {}", c.op, fmt::join(c.axes, ","), c.keepdims));
    testing_onnx::ModelBuilder b(13);
    b.input("x", {2, 8, 5, 7});
    b.random_initializer("w", {8, 8, 3, 3}, 0.3f, 1);
    b.ints(b.node("Conv", {"x", "w"}, {"r"}), "pads", {1, 1, 1, 1});  // the value lives in NHWC
    std::vector<std::string> ins = {"r"};
    if (c.op == "ReduceSum") {  // opset 13: the axes as an input
      b.int_initializer("axes", c.axes);
      ins.push_back("axes");
    }
    auto* r = b.node(c.op, ins, {"m"});
    if (c.op != "ReduceSum") testing_onnx::ModelBuilder::ints(r, "axes", c.axes);
    testing_onnx::ModelBuilder::i(r, "keepdims", c.keepdims);
    b.output("m");
    ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(b.bytes()));
    const graph::HostTensor x = input_for({2, 8, 5, 7}, 4);
    const auto want = reference(g, x);
    ASSERT_OK_AND_ASSIGN(auto model, CompiledModel::compile(g, *dev, {}));
    EXPECT_EQ(model->report().fallbacks.size(), c.fallbacks) << model->report().to_string();
    const Tensor xs[] = {device_input(x, *dev)};
    ASSERT_OK_AND_ASSIGN(auto outs, model->run(xs));
    EXPECT_EQ(outs[0].shape().volume(), static_cast<uint64_t>(graph::dims_volume(want[0].dims)));
    expect_close(outs[0], want[0], 0.99999, 1e-5);
    // bfloat16 activations: the same ops, within bfloat16's rounding.
    ASSERT_OK_AND_ASSIGN(
        auto bf, CompiledModel::compile(g, *dev, {.dtype = DataType::BFLOAT16, .weights_dtype = DataType::BFLOAT16}));
    EXPECT_EQ(bf->report().fallbacks.size(), c.fallbacks);
    ASSERT_OK_AND_ASSIGN(auto bf_outs, bf->run(xs));
    expect_close(bf_outs[0], want[0], 0.999, 0.05);
  }
}

// Reductions of other ranks, over any axes (the batch axis, the last,
// several apart, every axis by omitting them, size-1 axes) run on the device
// row by row: every op, keepdims or not, float32 and bfloat16, against the
// host reference, NaN and infinities included; ReduceSum with no axes and
// noop_with_empty_axes is a copy.
TEST(CompiledModel, ReductionsOfAnyRankOverAnyAxesRunOnTheDevice) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  struct Case {
    std::vector<int64_t> dims;
    std::vector<std::vector<int64_t>> axes;  // {} = every axis
  };
  const Case shapes[] = {{{6, 10}, {{0}, {-1}, {}}},
                         {{3, 4, 5}, {{1}, {0, 2}, {0, 1}, {}}},
                         {{2, 3, 1, 4, 5}, {{2}, {0, 4}, {1, 2, 3}, {-1, -2}}},
                         {{7}, {{0}}}};
  for (const Case& sc : shapes)
    for (const char* op :
         {"ReduceMean", "ReduceSum", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceMax", "ReduceMin"})
      for (int64_t keep : {1, 0})
        for (const std::vector<int64_t>& axes : sc.axes) {
          SCOPED_TRACE(
              fmt::format("{} x [{}] axes ({}) keepdims {}", op, fmt::join(sc.dims, ","), fmt::join(axes, ","), keep));
          testing_onnx::ModelBuilder b(13);
          b.input("x", sc.dims);
          std::vector<std::string> ins = {"x"};
          if (std::string(op) == "ReduceSum" && !axes.empty()) {
            b.int_initializer("axes", axes);
            ins.push_back("axes");
          }
          auto* r = b.node(op, ins, {"m"});
          if (std::string(op) != "ReduceSum" && !axes.empty()) testing_onnx::ModelBuilder::ints(r, "axes", axes);
          testing_onnx::ModelBuilder::i(r, "keepdims", keep);
          b.output("m");
          ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(b.bytes()));
          graph::HostTensor x = input_for(sc.dims, 6);
          if (x.f.size() > 20) x.f[3] = NAN, x.f[17] = INFINITY;
          const auto want = reference(g, x);
          ASSERT_OK_AND_ASSIGN(auto model, CompiledModel::compile(g, *dev, {}));
          EXPECT_EQ(model->report().fallbacks.size(), 0u) << model->report().to_string();
          const Tensor xs[] = {device_input(x, *dev)};
          ASSERT_OK_AND_ASSIGN(auto outs, model->run(xs));
          EXPECT_EQ(outs[0].shape().volume(), static_cast<uint64_t>(graph::dims_volume(want[0].dims)));
          expect_near_special(outs[0], want[0], 0, 1e-8, 1e-5);
          ASSERT_OK_AND_ASSIGN(
              auto bf,
              CompiledModel::compile(g, *dev, {.dtype = DataType::BFLOAT16, .weights_dtype = DataType::BFLOAT16}));
          EXPECT_EQ(bf->report().fallbacks.size(), 0u);
          ASSERT_OK_AND_ASSIGN(auto bf_outs, bf->run(xs));
          expect_near_special(bf_outs[0], want[0], 0, 2e-5, 0.02);
        }
  testing_onnx::ModelBuilder b(13);
  b.input("x", {3, 4, 5});
  auto* r = b.node("ReduceSum", {"x"}, {"m"});
  testing_onnx::ModelBuilder::i(r, "noop_with_empty_axes", 1);
  b.output("m");
  ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(b.bytes()));
  const graph::HostTensor x = input_for({3, 4, 5}, 7);
  ASSERT_OK_AND_ASSIGN(auto model, CompiledModel::compile(g, *dev, {}));
  EXPECT_EQ(model->report().fallbacks.size(), 0u) << model->report().to_string();
  const Tensor xs[] = {device_input(x, *dev)};
  ASSERT_OK_AND_ASSIGN(auto outs, model->run(xs));
  ASSERT_OK_AND_ASSIGN(std::vector<float> got, outs[0].cpu().value().to_vector());
  EXPECT_EQ(got, x.f);
}

// PRelu runs on the device: a per-channel slope (negative ones too) after a
// conv (NHWC), a slope along the last axis of a rank-3 value, one slope for
// every element (leaky_relu), float32 and bfloat16; NaN and infinities as
// the reference gives them.
TEST(CompiledModel, PReluRunsOnTheDevice) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  struct Case {
    const char* name;
    std::vector<int64_t> x, slope;
    bool conv;
  };
  for (const Case& c :
       {Case{"per channel after a conv", {2, 6, 5, 7}, {6, 1, 1}, true},
        Case{"last axis of rank 3", {3, 4, 5}, {5}, false}, Case{"one slope", {2, 6, 5, 7}, {1}, true}}) {
    SCOPED_TRACE(c.name);
    testing_onnx::ModelBuilder b(13);
    b.input("x", c.x);
    std::string in = "x";
    if (c.conv) {
      b.random_initializer("w", {6, 6, 3, 3}, 0.3f, 1);
      b.ints(b.node("Conv", {"x", "w"}, {"r"}), "pads", {1, 1, 1, 1});
      in = "r";
    }
    int64_t count = 1;
    for (int64_t d : c.slope) count *= d;
    std::vector<float> slope;
    for (int64_t k = 0; k < count; ++k) slope.push_back(count == 1 ? 0.2f : 0.25f * static_cast<float>(k) - 0.6f);
    b.initializer("s", c.slope, slope);
    b.node("PRelu", {in, "s"}, {"y"});
    b.output("y");
    ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(b.bytes()));
    graph::HostTensor x = input_for(c.x, 12);
    x.f[1] = NAN, x.f[2] = -INFINITY, x.f[3] = INFINITY;
    const auto want = reference(g, x);
    for (DataType dt : {DataType::FLOAT32, DataType::BFLOAT16}) {
      ASSERT_OK_AND_ASSIGN(auto model, CompiledModel::compile(g, *dev, {.dtype = dt, .weights_dtype = dt}));
      EXPECT_EQ(model->report().fallbacks.size(), 0u) << model->report().to_string();
      const Tensor xs[] = {device_input(x, *dev)};
      ASSERT_OK_AND_ASSIGN(auto outs, model->run(xs));
      expect_near_special(outs[0], want[0], 0, 0, dt == DataType::FLOAT32 ? 1e-5 : 2e-2);
    }
  }
}

// GlobalMaxPool (CBAM-style channel attention) runs on the device as a max
// pool over the whole image, after a conv (NHWC) and on a 3-D value; a NaN
// wins its channel as in the reference.
TEST(CompiledModel, GlobalMaxPoolRunsOnTheDevice) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  for (bool conv : {true, false}) {
    SCOPED_TRACE(conv ? "after a conv" : "3-D");
    const std::vector<int64_t> dims = conv ? std::vector<int64_t>{2, 6, 5, 7} : std::vector<int64_t>{2, 6, 9};
    testing_onnx::ModelBuilder b(13);
    b.input("x", dims);
    std::string in = "x";
    if (conv) {
      b.random_initializer("w", {6, 6, 3, 3}, 0.3f, 1);
      b.ints(b.node("Conv", {"x", "w"}, {"r"}), "pads", {1, 1, 1, 1});
      in = "r";
    }
    b.node("GlobalMaxPool", {in}, {"y"});
    b.output("y");
    ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(b.bytes()));
    graph::HostTensor x = input_for(dims, 13);
    x.f[40] = NAN;
    const auto want = reference(g, x);
    ASSERT_OK_AND_ASSIGN(auto model, CompiledModel::compile(g, *dev, {}));
    EXPECT_EQ(model->report().fallbacks.size(), 0u) << model->report().to_string();
    const Tensor xs[] = {device_input(x, *dev)};
    ASSERT_OK_AND_ASSIGN(auto outs, model->run(xs));
    expect_near_special(outs[0], want[0], 1e-5, 1e-6);  // (the conv's float32 sums against the reference's double ones)
  }
}

// DepthToSpace (DCR and CRD) and SpaceToDepth run on the device as one
// permute of the NHWC value, after a conv and on a graph input, bit for bit
// the reference's data movement (a conv after them too: the result is NHWC).
TEST(CompiledModel, DepthToSpaceAndSpaceToDepthRunOnTheDevice) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  struct Case {
    const char* op;
    const char* mode;
    int64_t blocksize;
    std::vector<int64_t> dims;
  };
  for (const Case& c : {Case{"DepthToSpace", "DCR", 2, {2, 8, 3, 5}}, Case{"DepthToSpace", "CRD", 2, {2, 8, 3, 5}},
                        Case{"DepthToSpace", "DCR", 3, {1, 18, 4, 2}}, Case{"SpaceToDepth", "", 2, {2, 3, 6, 4}}})
    for (bool conv : {false, true}) {
      SCOPED_TRACE(fmt::format("{} {} blocksize {} {}", c.op, c.mode, c.blocksize, conv ? "after a conv" : "input"));
      testing_onnx::ModelBuilder b(13);
      b.input("x", c.dims);
      std::string in = "x";
      const int64_t ch = c.dims[1];
      if (conv) {
        b.random_initializer("w", {ch, ch, 1, 1}, 0.5f, 3);
        b.node("Conv", {"x", "w"}, {"r"});
        in = "r";
      }
      auto* d = b.node(c.op, {in}, {"y"});
      testing_onnx::ModelBuilder::i(d, "blocksize", c.blocksize);
      if (std::string(c.op) == "DepthToSpace") testing_onnx::ModelBuilder::s(d, "mode", c.mode);
      b.output("y");
      ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(b.bytes()));
      const graph::HostTensor x = input_for(c.dims, 21);
      const auto want = reference(g, x);
      ASSERT_OK_AND_ASSIGN(auto model, CompiledModel::compile(g, *dev, {}));
      EXPECT_EQ(model->report().fallbacks.size(), 0u) << model->report().to_string();
      const Tensor xs[] = {device_input(x, *dev)};
      ASSERT_OK_AND_ASSIGN(auto outs, model->run(xs));
      if (conv) {
        expect_close(outs[0], want[0], 0.99999, 1e-5);
      } else {
        ASSERT_OK_AND_ASSIGN(std::vector<float> got, outs[0].cpu().value().to_vector());
        EXPECT_EQ(got, want[0].f);
      }
    }
}

TEST(CompiledModel, BadOptionsAndInputsAreErrors) {
  ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(testing_onnx::small_cnn().bytes()));
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  EXPECT_THAT(CompiledModel::compile(g, *dev, {.dtype = DataType::BFLOAT16}).status().message(),
              HasSubstr("bfloat16 activations need bfloat16 or block-float weights"));
  EXPECT_EQ(CompiledModel::compile(g, *dev, {.dtype = DataType::BFLOAT8_B}).status().code(),
            StatusCode::kInvalidArgument);
  ASSERT_OK_AND_ASSIGN(auto model, CompiledModel::compile(g, *dev, {}));
  EXPECT_THAT(model->run({}).status().message(), HasSubstr("takes 1 input(s), got 0"));
  const Tensor wrong[] = {device_input(input_for({1, 3, 8, 8}, 1), *dev)};
  EXPECT_THAT(model->run(wrong).status().message(),
              HasSubstr("expected a ROW_MAJOR device tensor of shape [1,3,16,16]"));
  const Tensor host[] = {Tensor::from_vector(std::vector<float>(768), Shape{1, 3, 16, 16}, DataType::FLOAT32).value()};
  EXPECT_THAT(model->run(host).status().message(), HasSubstr("on the host"));
}

// A residual CNN at batch 4 whose maps spill a small cache budget for the
// whole batch but fit it per group: its early layers run in groups of
// images (CompileOptions::micro_batch), and every grouping gives what the
// whole batch gives, through run() and the traced two-queue Pipeline
// (which allocates nothing on replay).
testing_onnx::ModelBuilder residual_cnn(int64_t batch) {
  testing_onnx::ModelBuilder b(13);
  b.input("x", {batch, 3, 16, 16});
  b.random_initializer("w1", {8, 3, 3, 3}, 0.3f, 1);
  b.random_initializer("w2", {8, 8, 3, 3}, 0.2f, 2);
  b.random_initializer("w3", {8, 8, 1, 1}, 0.3f, 3);
  b.random_initializer("w4", {16, 8, 3, 3}, 0.2f, 4);
  b.random_initializer("fc_w", {10, 24}, 0.3f, 5);
  auto* c1 = b.node("Conv", {"x", "w1"}, {"c1"});
  b.ints(c1, "pads", {1, 1, 1, 1});
  b.node("Relu", {"c1"}, {"r1"});
  auto* c2 = b.node("Conv", {"r1", "w2"}, {"c2"});
  b.ints(c2, "pads", {1, 1, 1, 1});
  b.node("Relu", {"c2"}, {"r2"});
  b.node("Conv", {"r2", "w3"}, {"c3"});
  b.node("Add", {"c3", "r1"}, {"res"});
  b.node("Relu", {"res"}, {"r3"});
  auto* mp = b.node("MaxPool", {"r3"}, {"mp"});
  b.ints(mp, "kernel_shape", {2, 2});
  b.ints(mp, "strides", {2, 2});
  auto* c4 = b.node("Conv", {"mp", "w4"}, {"c4"});
  b.ints(c4, "pads", {1, 1, 1, 1});
  auto* cat = b.node("Concat", {"c4", "mp"}, {"cat"});
  b.i(cat, "axis", 1);
  b.node("GlobalAveragePool", {"cat"}, {"gap"});
  b.node("Flatten", {"gap"}, {"flat"});
  auto* fc = b.node("Gemm", {"flat", "fc_w"}, {"logits"});
  b.i(fc, "transB", 1);
  b.output("logits");
  return b;
}

TEST(CompiledModel, MicroBatchedRunsMatchTheWholeBatch) {
  ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(residual_cnn(4).bytes()));
  const graph::HostTensor x = input_for(g.value(g.inputs[0]).dims, 5);
  const auto want = reference(g, x);
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.trace_region_size = 1 << 20, .num_command_queues = 2}));
  const Tensor xs[] = {device_input(x, *dev)};
  // Per image: at most 24 KB an op; for the batch of 4, up to 96 KB.
  constexpr uint64_t kBudget = 32 << 10;
  ASSERT_OK_AND_ASSIGN(auto whole,
                       CompiledModel::compile(g, *dev, {.micro_batch = 0, .micro_batch_cache_bytes = kBudget}));
  EXPECT_TRUE(whole->report().micro_batches.empty());
  ASSERT_OK_AND_ASSIGN(auto whole_out, whole->run(xs));
  expect_close(whole_out[0], want[0], 0.99999, 1e-4);
  ASSERT_OK_AND_ASSIGN(Tensor whole_host, whole_out[0].cpu());
  ASSERT_OK_AND_ASSIGN(const auto whole_values, whole_host.to_vector());
  for (std::optional<uint32_t> per :
       {std::optional<uint32_t>(1), std::optional<uint32_t>(2), std::optional<uint32_t>()}) {
    SCOPED_TRACE(per ? fmt::format("{} per group", *per) : std::string("automatic"));
    // Two images per group: 48 KB for the residual conv.
    const uint64_t budget = per == 2u ? kBudget + (24 << 10) : kBudget;
    ASSERT_OK_AND_ASSIGN(auto model,
                         CompiledModel::compile(g, *dev, {.micro_batch = per, .micro_batch_cache_bytes = budget}));
    const auto& runs = model->report().micro_batches;
    ASSERT_EQ(runs.size(), 1u) << model->report().to_string();
    if (per) {
      EXPECT_THAT(runs[0], HasSubstr(fmt::format("groups of {} image(s)", *per)));
    }
    EXPECT_THAT(model->report().to_string(), HasSubstr("micro-batched: nodes"));
    EXPECT_EQ(model->report().conv_flops, whole->report().conv_flops);
    ASSERT_OK_AND_ASSIGN(auto outs, model->run(xs));
    ASSERT_OK_AND_ASSIGN(Tensor host, outs[0].cpu());
    ASSERT_OK_AND_ASSIGN(auto got, host.to_vector());
    ASSERT_EQ(got.size(), whole_values.size());
    for (size_t k = 0; k < got.size(); ++k)
      EXPECT_NEAR(got[k], whole_values[k], 1e-5f * (1 + std::fabs(whole_values[k])));
    // The caller's input is untouched (no kernel wrote over it in place).
    ASSERT_OK_AND_ASSIGN(Tensor in_back, xs[0].cpu());
    EXPECT_EQ(in_back.to_vector().value(), x.f);
  }
  // Through the traced two-queue Pipeline: replays allocate nothing.
  ASSERT_OK_AND_ASSIGN(auto model,
                       CompiledModel::compile(g, *dev, {.micro_batch = 1, .micro_batch_cache_bytes = kBudget}));
  expect_traced_pipeline_matches(*model, *dev, g, {4, 3, 16, 16}, 30, /*list=*/false);
  // bfloat16 activations, micro-batched.
  ASSERT_OK_AND_ASSIGN(auto lp, CompiledModel::compile(g, *dev,
                                                       {.dtype = DataType::BFLOAT16,
                                                        .weights_dtype = DataType::BFLOAT16,
                                                        .micro_batch = 2,
                                                        .micro_batch_cache_bytes = kBudget / 2}));
  EXPECT_EQ(lp->report().micro_batches.size(), 1u) << lp->report().to_string();
  ASSERT_OK_AND_ASSIGN(auto lo, lp->run(xs));
  expect_close(lo[0], want[0], 0.999, 0);
}

// A UNet decoder block: a channel concat that a conv alone reads runs
// inside the conv (conv2d_concat: at LoFi on AMX CPUs the shards gather the
// concat's inputs and no concat launches); one that a graph output also
// reads launches. Both close to the host reference at every fidelity.
TEST(CompiledModel, ChannelConcatReadByAConvRunsInside) {
  testing_onnx::ModelBuilder b(13);
  b.input("x", {1, 16, 12, 10});
  b.random_initializer("w1", {16, 16, 3, 3}, 0.2f, 1);
  b.random_initializer("w2", {16, 32, 3, 3}, 0.2f, 2);
  b.random_initializer("w3", {16, 32, 1, 1}, 0.2f, 3);
  auto* c1 = b.node("Conv", {"x", "w1"}, {"c1"});
  b.ints(c1, "pads", {1, 1, 1, 1});
  b.node("Relu", {"c1"}, {"r1"});
  auto* cat = b.node("Concat", {"r1", "x"}, {"cat"});  // read by c2 alone: fused
  b.i(cat, "axis", 1);
  auto* c2 = b.node("Conv", {"cat", "w2"}, {"c2"});
  b.ints(c2, "pads", {1, 1, 1, 1});
  b.node("Relu", {"c2"}, {"r2"});
  auto* cat2 = b.node("Concat", {"r2", "r1"}, {"cat2"});  // also a graph output: launched
  b.i(cat2, "axis", 1);
  b.node("Conv", {"cat2", "w3"}, {"y"});
  b.output("y");
  b.output("cat2");
  ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(b.bytes()));
  const graph::HostTensor x = input_for(g.value(g.inputs[0]).dims, 4);
  const auto want = reference(g, x);
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.worker_threads = 2}));
  const Tensor xs[] = {device_input(x, *dev)};
  const bool amx = cpu_features().amx_bf16 && kernel_isa() == KernelIsa::kAvx512;
  for (MathFidelity fid : {MathFidelity::HiFi4, MathFidelity::LoFi}) {
    SCOPED_TRACE(math_fidelity_name(fid));
    ASSERT_OK_AND_ASSIGN(auto model, CompiledModel::compile(g, *dev, {.math_fidelity = fid}));
    ASSERT_OK(enable_profiler(*dev));
    ASSERT_OK_AND_ASSIGN(auto outs, model->run(xs));
    ASSERT_OK_AND_ASSIGN(DeviceProfile prof, read_profile(*dev));
    ASSERT_OK(disable_profiler(*dev));
    size_t concats = 0;
    for (const OpTiming& t : prof.ops) concats += t.kernel_name.find("concat") != std::string::npos;
    EXPECT_EQ(concats, fid == MathFidelity::LoFi && amx ? 1u : 2u);
    const double min_pcc = fid == MathFidelity::LoFi ? 0.999 : 0.99999;
    expect_close(outs[0], want[0], min_pcc, fid == MathFidelity::LoFi ? 0 : 1e-4);
    expect_close(outs[1], want[1], min_pcc, fid == MathFidelity::LoFi ? 0 : 1e-4);
  }
}

// At LoFi on AMX CPUs, values every reader of which rounds them to bfloat16
// (a conv lowered to bfloat16, or a MaxPool / Concat whose result is such a
// value) leave their producer in bfloat16: a UNet's encoder and decoder maps.
// The output is bit for bit that of the same graph with those values also
// graph outputs, which keeps them float32; values read by a conv that does
// not lower (2 output channels) stay float32. Elsewhere nothing is kept.
TEST(CompiledModel, LoFiKeepsValuesInBfloat16WhereEveryReaderRoundsThem) {
  auto build = [](bool expose, int64_t batch = 1) {
    testing_onnx::ModelBuilder b(13);
    b.input("x", {batch, 3, 24, 20});
    b.random_initializer("w0", {16, 3, 3, 3}, 0.3f, 1);
    b.random_initializer("w1", {32, 16, 3, 3}, 0.2f, 2);
    b.random_initializer("w2", {32, 32, 3, 3}, 0.2f, 3);
    b.random_initializer("wu", {32, 16, 2, 2}, 0.2f, 4);
    b.random_initializer("w3", {16, 32, 3, 3}, 0.2f, 5);
    b.random_initializer("w4", {2, 16, 1, 1}, 0.3f, 6);
    for (auto [conv, w, in, out] : {std::tuple{"c0", "w0", "x", "r0"}, {"c1", "w1", "r0", "r1"}}) {
      b.ints(b.node("Conv", {in, w}, {conv}), "pads", {1, 1, 1, 1});
      b.node("Relu", {conv}, {out});
    }
    auto* pool = b.node("MaxPool", {"r1"}, {"p1"});
    b.ints(pool, "kernel_shape", {2, 2});
    b.ints(pool, "strides", {2, 2});
    b.ints(b.node("Conv", {"p1", "w2"}, {"c2"}), "pads", {1, 1, 1, 1});
    b.node("Relu", {"c2"}, {"r2"});
    b.ints(b.node("ConvTranspose", {"r2", "wu"}, {"u"}), "strides", {2, 2});
    b.i(b.node("Concat", {"u", "r0"}, {"cat"}), "axis", 1);
    b.ints(b.node("Conv", {"cat", "w3"}, {"c3"}), "pads", {1, 1, 1, 1});
    b.node("Relu", {"c3"}, {"r3"});
    b.node("Conv", {"r3", "w4"}, {"y"});
    b.output("y");
    if (expose)
      for (const char* v : {"r0", "r1", "p1", "r2", "u", "cat"}) b.output(v);
    return importer::import_onnx_bytes(b.bytes());
  };
  ASSERT_OK_AND_ASSIGN(graph::Graph g, build(false));
  ASSERT_OK_AND_ASSIGN(graph::Graph exposed, build(true));
  const graph::HostTensor x = input_for(g.value(g.inputs[0]).dims, 7);
  const auto want = reference(g, x);
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.worker_threads = 2}));
  const Tensor xs[] = {device_input(x, *dev)};
  const bool amx = cpu_features().amx_bf16 && kernel_isa() == KernelIsa::kAvx512;
  ASSERT_OK_AND_ASSIGN(auto model, CompiledModel::compile(g, *dev, {.math_fidelity = MathFidelity::LoFi}));
  ASSERT_OK_AND_ASSIGN(auto plain, CompiledModel::compile(exposed, *dev, {.math_fidelity = MathFidelity::LoFi}));
  ASSERT_OK_AND_ASSIGN(auto hifi, CompiledModel::compile(g, *dev, {}));
  const auto& kept = model->report().bfloat16_values;
  if (amx) {
    // r0 .. cat: the fused convs' outputs take their activations' names.
    EXPECT_EQ(kept, (std::vector<std::string>{"r0", "r1", "p1", "r2", "u", "cat"})) << model->report().to_string();
    EXPECT_THAT(model->report().to_string(), HasSubstr("6 value(s) kept in bfloat16"));
  } else {
    EXPECT_TRUE(kept.empty());
  }
  EXPECT_TRUE(plain->report().bfloat16_values.empty());
  EXPECT_TRUE(hifi->report().bfloat16_values.empty());
  ASSERT_OK_AND_ASSIGN(auto got, model->run(xs));
  ASSERT_OK_AND_ASSIGN(auto base, plain->run(xs));
  EXPECT_EQ(testing::host_bytes(got[0].cpu().value()), testing::host_bytes(base[0].cpu().value()));
  EXPECT_EQ(got[0].dtype(), DataType::FLOAT32);
  expect_close(got[0], want[0], 0.999, 0);
  // Two images, the head a micro-batched run (one image at a time): the
  // run's edges keep float32, and the output is again the float32 graph's.
  ASSERT_OK_AND_ASSIGN(graph::Graph g2, build(false, 2));
  ASSERT_OK_AND_ASSIGN(graph::Graph exposed2, build(true, 2));
  const graph::HostTensor x2 = input_for(g2.value(g2.inputs[0]).dims, 8);
  const Tensor xs2[] = {device_input(x2, *dev)};
  const CompileOptions mb{.math_fidelity = MathFidelity::LoFi, .micro_batch = 1, .micro_batch_cache_bytes = 40 << 10};
  ASSERT_OK_AND_ASSIGN(auto batched, CompiledModel::compile(g2, *dev, mb));
  ASSERT_OK_AND_ASSIGN(auto batched_plain, CompiledModel::compile(exposed2, *dev, mb));
  EXPECT_FALSE(batched->report().micro_batches.empty()) << batched->report().to_string();
  if (amx) {
    EXPECT_FALSE(batched->report().bfloat16_values.empty());
  }
  ASSERT_OK_AND_ASSIGN(auto got2, batched->run(xs2));
  ASSERT_OK_AND_ASSIGN(auto base2, batched_plain->run(xs2));
  EXPECT_EQ(testing::host_bytes(got2[0].cpu().value()), testing::host_bytes(base2[0].cpu().value()));
  expect_close(got2[0], reference(g2, x2)[0], 0.999, 0);
}

// Where micro-batching does not apply, or is asked for wrongly.
TEST(CompiledModel, MicroBatchingLimits) {
  ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(residual_cnn(4).bytes()));
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  // A group size that does not divide the batch.
  auto bad = CompiledModel::compile(g, *dev, {.micro_batch = 3});
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("micro_batch 3 does not divide the batch of 4 images"));
  // The whole batch per group, or maps that fit the default budget: nothing to do.
  for (std::optional<uint32_t> per : {std::optional<uint32_t>(4), std::optional<uint32_t>()}) {
    ASSERT_OK_AND_ASSIGN(auto m, CompiledModel::compile(g, *dev, {.micro_batch = per}));
    EXPECT_TRUE(m->report().micro_batches.empty()) << m->report().to_string();
  }
  // A run that spans the whole graph (its output is the graph's).
  {
    testing_onnx::ModelBuilder b(13);
    b.input("x", {4, 3, 12, 12});
    b.random_initializer("w", {8, 3, 3, 3}, 0.3f, 1);
    b.random_initializer("w2", {8, 8, 3, 3}, 0.2f, 2);
    b.random_initializer("w3", {1, 8, 1, 1}, 0.3f, 3);
    auto* c = b.node("Conv", {"x", "w"}, {"c"});
    b.ints(c, "pads", {1, 1, 1, 1});
    b.node("Relu", {"c"}, {"r"});
    auto* c2 = b.node("Conv", {"r", "w2"}, {"c2"});
    b.ints(c2, "pads", {1, 1, 1, 1});
    b.node("Relu", {"c2"}, {"r2"});
    b.node("Conv", {"r2", "w3"}, {"y"});  // a small output: its copy costs little
    b.output("y");
    ASSERT_OK_AND_ASSIGN(graph::Graph whole, importer::import_onnx_bytes(b.bytes()));
    const graph::HostTensor x = input_for({4, 3, 12, 12}, 9);
    const auto want = reference(whole, x);
    ASSERT_OK_AND_ASSIGN(auto m,
                         CompiledModel::compile(whole, *dev, {.micro_batch = 1, .micro_batch_cache_bytes = 8 << 10}));
    ASSERT_EQ(m->report().micro_batches.size(), 1u) << m->report().to_string();
    const Tensor xs[] = {device_input(x, *dev)};
    ASSERT_OK_AND_ASSIGN(auto outs, m->run(xs));
    expect_close(outs[0], want[0], 0.99999, 1e-4);
  }
  // Batch 1, and the emulated Wormhole (automatic: off), even with a tiny budget.
  ASSERT_OK_AND_ASSIGN(graph::Graph one, importer::import_onnx_bytes(residual_cnn(1).bytes()));
  ASSERT_OK_AND_ASSIGN(auto m1, CompiledModel::compile(one, *dev, {.micro_batch_cache_bytes = 1 << 10}));
  EXPECT_TRUE(m1->report().micro_batches.empty());
  ASSERT_OK_AND_ASSIGN(auto wh, open_device({.descriptor = "wormhole_b0", .l1_small_size = 16384}));
  ASSERT_OK_AND_ASSIGN(auto mw, CompiledModel::compile(g, *wh, {.micro_batch_cache_bytes = 32 << 10}));
  EXPECT_TRUE(mw->report().micro_batches.empty());
}

}  // namespace
}  // namespace tessera::runtime
