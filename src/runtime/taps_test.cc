// Intermediate taps (CompileOptions::intermediates_to_save): the tapped
// values come back beside the outputs and match the host reference of the
// same values; tapping values the compiled model has anyway changes no
// output bit; bad patterns are errors naming them.
#include "graph_reference.h"
#include "onnx_model_builder.h"
#include "tessera/cnn/pipeline.h"
#include "tessera/graph/host_eval.h"
#include "tessera/import/onnx.h"
#include "tessera/runtime/compiled_model.h"
#include "test_util.h"

namespace tessera::runtime {
namespace {

using tessera::testing::pcc;
using tessera::testing::random_values;

// Every value of `g` on the host reference kernels, by name.
std::map<std::string, graph::HostTensor> all_values(const graph::Graph& g, const graph::HostTensor& x) {
  const auto vals = tessera::testing::reference_values(g, x);
  std::map<std::string, graph::HostTensor> r;
  for (size_t v = 0; v < vals.size(); ++v)
    if (vals[v]) r[g.values[v].name] = *vals[v];
  return r;
}

std::vector<float> host(const Tensor& t) { return t.cpu().value().to_vector().value(); }

TEST(Taps, ReturnTheValuesAndChangeNoOutput) {
  ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(testing_onnx::small_cnn(2).bytes()));
  const auto& xd = g.value(g.inputs[0]).dims;
  const graph::HostTensor x = graph::HostTensor::floats(xd, random_values(2 * 3 * 16 * 16, 5, 1.0f));
  const auto want = all_values(g, x);
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({.num_command_queues = 2}));
  const Tensor in[] = {
      to_device(Tensor::from_vector(x.f, Shape{2, 3, 16, 16}, DataType::FLOAT32).value(), *dev).value()};
  for (const DataType dt : {DataType::FLOAT32, DataType::BFLOAT16}) {
    const CompileOptions plain{.dtype = dt, .weights_dtype = dt};
    ASSERT_OK_AND_ASSIGN(auto untapped, CompiledModel::compile(g, *dev, plain));
    // Every value the compiled model computes anyway (the passes' result),
    // but a channel concat a conv reads: tapped, it is written out instead of
    // gathered by the conv's shards (the same values, another kernel path).
    std::vector<std::string> names;
    for (const graph::Value& v : untapped->graph().values)
      if (!v.constant && v.producer >= 0 &&
          untapped->graph().nodes[static_cast<size_t>(v.producer)].op_type != "Concat")
        names.push_back(v.name);
    CompileOptions tapped_opts = plain;
    tapped_opts.intermediates_to_save = names;
    ASSERT_OK_AND_ASSIGN(auto tapped, CompiledModel::compile(g, *dev, tapped_opts));
    ASSERT_OK_AND_ASSIGN(std::vector<Tensor> a, untapped->run(in));
    ASSERT_OK_AND_ASSIGN(CompiledModel::Outputs b, tapped->run_with_intermediates(in));
    ASSERT_EQ(a.size(), b.outputs.size());
    for (size_t k = 0; k < a.size(); ++k) EXPECT_EQ(host(a[k]), host(b.outputs[k])) << data_type_name(dt);
    EXPECT_EQ(tapped->output_names(), untapped->output_names());
    const std::vector<std::string> tn = tapped->intermediate_names();
    ASSERT_EQ(tn.size(), b.intermediates.size());
    EXPECT_GE(tn.size(), names.size() - a.size());  // the outputs are not tapped twice
    for (size_t k = 0; k < tn.size(); ++k) {
      const graph::HostTensor& ref = want.at(tn[k]);
      EXPECT_EQ(b.intermediates[k].shape().volume(), static_cast<uint64_t>(ref.volume())) << tn[k];
      EXPECT_GE(pcc(host(b.intermediates[k]), ref.f), dt == DataType::FLOAT32 ? 0.99999 : 0.99) << tn[k];
    }
  }
}

// A tap on a value the passes would fuse away (the conv output its batch
// norm folds into) keeps it: the tap is the conv's own output.
TEST(Taps, KeepValuesThePassesWouldFuse) {
  ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(testing_onnx::small_cnn(1).bytes()));
  const graph::HostTensor x = graph::HostTensor::floats({1, 3, 16, 16}, random_values(3 * 16 * 16, 9, 1.0f));
  const auto want = all_values(g, x);
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  ASSERT_OK_AND_ASSIGN(auto m, CompiledModel::compile(g, *dev, {.intermediates_to_save = {"c1", "r[0-9]"}}));
  EXPECT_EQ(m->intermediate_names(), (std::vector<std::string>{"c1", "r1"}));
  const Tensor in[] = {
      to_device(Tensor::from_vector(x.f, Shape{1, 3, 16, 16}, DataType::FLOAT32).value(), *dev).value()};
  ASSERT_OK_AND_ASSIGN(CompiledModel::Outputs out, m->run_with_intermediates(in));
  ASSERT_EQ(out.intermediates.size(), 2u);
  EXPECT_EQ(out.intermediates[0].shape(), (Shape{1, 8, 16, 16}));
  EXPECT_GE(pcc(host(out.intermediates[0]), want.at("c1").f), 0.99999);
  EXPECT_GE(pcc(host(out.intermediates[1]), want.at("r1").f), 0.99999);
}

// Through the Pipeline: every executor's intermediates queue returns each
// input's taps, in input order, bit-identical to run_with_intermediates.
TEST(Taps, ThroughEveryPipelineExecutor) {
  ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(testing_onnx::small_cnn(1).bytes()));
  ASSERT_OK_AND_ASSIGN(auto dev,
                       open_device({.l1_small_size = 16384, .trace_region_size = 1 << 20, .num_command_queues = 2}));
  for (const DataType dt : {DataType::FLOAT32, DataType::BFLOAT16}) {
    ASSERT_OK_AND_ASSIGN(auto m,
                         CompiledModel::compile(
                             g, *dev, {.dtype = dt, .weights_dtype = dt, .intermediates_to_save = {"c1", "r1", "mp"}}));
    std::vector<Tensor> xs;
    std::vector<CompiledModel::Outputs> want;
    for (uint32_t i = 0; i < 3; ++i) {
      xs.push_back(Tensor::from_vector(random_values(3 * 16 * 16, 20 + i, 1.0f), Shape{1, 3, 16, 16}, DataType::FLOAT32)
                       .value());
      const Tensor in[] = {to_device(xs.back(), *dev).value()};
      ASSERT_OK_AND_ASSIGN(CompiledModel::Outputs o, m->run_with_intermediates(in));
      want.push_back(std::move(o));
    }
    for (const cnn::PipelineConfig config :
         {cnn::PipelineConfig{.use_trace = false, .num_command_queues = 1},
          cnn::PipelineConfig{.use_trace = true, .num_command_queues = 1},
          cnn::PipelineConfig{.use_trace = false, .num_command_queues = 2},
          cnn::PipelineConfig{.use_trace = true, .num_command_queues = 2},
          cnn::PipelineConfig{
              .use_trace = true, .num_command_queues = 2, .all_transfers_on_separate_command_queue = true}}) {
      const std::optional<MemoryConfig> dram_out =
          config.all_transfers_on_separate_command_queue ? std::optional(DRAM_MEMORY_CONFIG) : std::nullopt;
      ASSERT_OK_AND_ASSIGN(auto pipe,
                           cnn::create_pipeline_from_config(config, m->pipeline_model(), *dev, DRAM_MEMORY_CONFIG,
                                                            DRAM_MEMORY_CONFIG, dram_out));
      pipe->split_intermediates(true);
      ASSERT_OK(pipe->compile(xs[0]));
      ASSERT_OK(pipe->enqueue(xs));
      ASSERT_OK_AND_ASSIGN(auto outs, pipe->pop_all());
      ASSERT_OK_AND_ASSIGN(auto taps, pipe->pop_intermediates());
      ASSERT_EQ(outs.size(), 3u);
      ASSERT_EQ(taps.size(), 3u);
      for (size_t i = 0; i < 3; ++i) {
        ASSERT_EQ(outs[i].list.size(), want[i].outputs.size()) << config.to_string();
        for (size_t k = 0; k < want[i].outputs.size(); ++k)
          EXPECT_EQ(host(*outs[i].list[k].tensor), host(want[i].outputs[k])) << config.to_string();
        ASSERT_EQ(taps[i].size(), 3u);
        for (size_t k = 0; k < 3; ++k)
          EXPECT_EQ(host(taps[i][k]), host(want[i].intermediates[k])) << config.to_string() << " tap " << k;
      }
      ASSERT_OK(pipe->cleanup());
    }
  }
  // A Pipeline that keeps no intermediates says so.
  ASSERT_OK_AND_ASSIGN(auto plain, CompiledModel::compile(g, *dev, {}));
  ASSERT_OK_AND_ASSIGN(auto pipe, cnn::create_pipeline_from_config({.use_trace = false, .num_command_queues = 1},
                                                                   plain->pipeline_model(), *dev, DRAM_MEMORY_CONFIG));
  EXPECT_EQ(pipe->pop_intermediates().status().code(), StatusCode::kFailedPrecondition);
  // Splitting the output of a model that has no taps (two outputs here) is an error, not a guess.
  pipe->split_intermediates(true);
  const Tensor x =
      Tensor::from_vector(random_values(3 * 16 * 16, 9, 1.0f), Shape{1, 3, 16, 16}, DataType::FLOAT32).value();
  ASSERT_OK(pipe->compile(x));
  const Tensor xs[] = {x, x};
  ASSERT_OK(pipe->enqueue(xs));
  EXPECT_ERROR(pipe->pop_all(), StatusCode::kInvalidArgument, "a model of two outputs and no taps?");
  EXPECT_ERROR(pipe->pop_intermediates(), StatusCode::kInvalidArgument, "the model's output must be the list");
  ASSERT_OK(pipe->cleanup());
}

// op_times_us: a kernel time per node of the compiled graph, eager, each
// step to completion; the convs take time, a bad run count is an error.
TEST(CompiledModel, OpTimesPerNode) {
  ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(testing_onnx::small_cnn(1).bytes()));
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  ASSERT_OK_AND_ASSIGN(auto m, CompiledModel::compile(g, *dev, {}));
  const Tensor in[] = {
      to_device(
          Tensor::from_vector(random_values(3 * 16 * 16, 3, 1.0f), Shape{1, 3, 16, 16}, DataType::FLOAT32).value(),
          *dev)
          .value()};
  ASSERT_OK_AND_ASSIGN(std::vector<double> t, m->op_times_us(in, 3));
  ASSERT_EQ(t.size(), m->graph().nodes.size());
  for (size_t i = 0; i < t.size(); ++i) {
    EXPECT_GE(t[i], 0.0) << i;
    if (m->graph().nodes[i].op_type == "Conv") {
      EXPECT_GT(t[i], 0.0) << m->graph().nodes[i].name;
    }
  }
  EXPECT_EQ(m->op_times_us(in, 0).status().code(), StatusCode::kInvalidArgument);
  // The model runs as before afterwards (the profiler is off again).
  ASSERT_OK(m->run(in).status());
}

TEST(Taps, BadPatternsAreErrorsNamingThem) {
  ASSERT_OK_AND_ASSIGN(graph::Graph g, importer::import_onnx_bytes(testing_onnx::small_cnn(1).bytes()));
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  EXPECT_ERROR(CompiledModel::compile(g, *dev, {.intermediates_to_save = {"c1", "conv("}}),
               StatusCode::kInvalidArgument, "'conv(' is not a valid regular expression");
  EXPECT_ERROR(CompiledModel::compile(g, *dev, {.intermediates_to_save = {"nope.*"}}), StatusCode::kInvalidArgument,
               "'nope.*' matches no value of the graph");
  ASSERT_OK_AND_ASSIGN(auto m, CompiledModel::compile(g, *dev, {}));
  EXPECT_TRUE(m->intermediate_names().empty());
}

}  // namespace
}  // namespace tessera::runtime
