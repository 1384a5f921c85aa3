// The TT-CNN Pipeline and its five executors: outputs bit-identical to eager
// runs of the model on each input over 3 rounds of 32 inputs, for identity,
// tilize -> relu -> untilize and a two-output model, on two input shapes;
// preallocated outputs; a stress run of thousands of distinct inputs checked
// one by one; and every error of the selection table, enqueue and
// preallocation.
#include "tessera/cnn/pipeline.h"

#include "resnet50/resnet50.h"
#include "tessera/ops/data_movement.h"
#include "tessera/ops/eltwise.h"
#include "test_util.h"
#include "vanilla_unet/unet.h"

namespace tessera::cnn {
namespace {

struct Rig {
  std::shared_ptr<Device> device;
  Shape shape;
  MemoryConfig l1, dram_in, dram_out;
};

// (1,1,32,32) on the cpu device (one L1 shard, one DRAM bank) and (1,1,512,64)
// on wormhole_b0 (8 L1 cores, 4 DRAM banks), height sharded, as the original's tests.
Rig make_setup(bool wormhole) {
  Rig s;
  s.device = open_device({.descriptor = wormhole ? "wormhole_b0" : "cpu",
                          .l1_small_size = 16384,
                          .trace_region_size = 1 << 20,
                          .num_command_queues = 2})
                 .value();
  s.shape = wormhole ? Shape{1, 1, 512, 64} : Shape{1, 1, 32, 32};
  const uint32_t cores = wormhole ? 8 : 1, banks = wormhole ? 4 : 1;
  s.l1 = testing::sharded(TensorMemoryLayout::HEIGHT_SHARDED, BufferType::L1, CoreRange({0, 0}, {cores - 1, 0}),
                          s.shape[-2] / cores, s.shape[-1]);
  s.dram_in =
      get_memory_config_for_persistent_dram_tensor(s.shape, TensorMemoryLayout::HEIGHT_SHARDED, {banks, 1}).value();
  s.dram_out = DRAM_MEMORY_CONFIG;
  return s;
}

StatusOr<ModelOutput> identity(const Tensor& x) {
  TS_ASSIGN_OR_RETURN(Tensor y, to_memory_config(x, DRAM_MEMORY_CONFIG));
  return ModelOutput::of(y);
}

StatusOr<ModelOutput> tilize_relu_untilize(const Tensor& x) {
  TS_ASSIGN_OR_RETURN(Tensor t, tilize(x));
  TS_ASSIGN_OR_RETURN(Tensor r, relu(t));
  TS_ASSIGN_OR_RETURN(Tensor y, untilize(r, {.memory_config = DRAM_MEMORY_CONFIG}));
  return ModelOutput::of(y);
}

StatusOr<ModelOutput> two_outputs(const Tensor& x) {
  TS_ASSIGN_OR_RETURN(ModelOutput a, identity(x));
  TS_ASSIGN_OR_RETURN(Tensor r, relu(x, {}));
  TS_ASSIGN_OR_RETURN(Tensor b, to_memory_config(r, DRAM_MEMORY_CONFIG));
  return ModelOutput::of(std::vector<ModelOutput>{a, ModelOutput::of(b)});
}

struct NamedModel {
  const char* name;
  Model model;
};
const NamedModel kModels[] = {
    {"identity", identity}, {"tilize_relu_untilize", tilize_relu_untilize}, {"two_outputs", two_outputs}};

struct NamedConfig {
  const char* name;
  PipelineConfig config;
};
const NamedConfig kConfigs[] = {
    {"1cq", {.use_trace = false, .num_command_queues = 1}},
    {"1cq_trace", {.use_trace = true, .num_command_queues = 1}},
    {"2cq", {.use_trace = false, .num_command_queues = 2}},
    {"2cq_trace", {.use_trace = true, .num_command_queues = 2}},
    {"2cq_trace_pipelined_io",
     {.use_trace = true, .num_command_queues = 2, .all_transfers_on_separate_command_queue = true}},
};

std::vector<Tensor> inputs(const Shape& shape, uint32_t n, uint32_t seed) {
  std::vector<Tensor> v;
  for (uint32_t i = 0; i < n; ++i)
    v.push_back(testing::random_tensor(shape, DataType::BFLOAT16, Layout::ROW_MAJOR, seed + i));
  return v;
}

// Flattens an output into the bytes of its leaves.
void collect(const ModelOutput& o, std::vector<std::vector<std::byte>>* out) {
  if (o.is_tensor()) {
    out->push_back(testing::host_bytes(*o.tensor));
    return;
  }
  for (const ModelOutput& c : o.list) collect(c, out);
}

std::vector<std::vector<std::byte>> eager(Rig& s, const Model& model, const Tensor& host) {
  Tensor l1 = to_device(host, *s.device, s.l1).value();
  ModelOutput out = model(l1).value();
  std::vector<std::vector<std::byte>> bytes;
  std::function<void(const ModelOutput&)> read = [&](const ModelOutput& o) {
    if (o.is_tensor()) {
      bytes.push_back(testing::host_bytes(o.tensor->cpu().value()));
      return;
    }
    for (const ModelOutput& c : o.list) read(c);
  };
  read(out);
  return bytes;
}

TEST(Pipeline, EveryExecutorMatchesEagerRuns) {
  for (bool wormhole : {false, true}) {
    Rig s = make_setup(wormhole);
    for (const NamedModel& m : kModels)
      for (const NamedConfig& c : kConfigs) {
        // (Several outputs run through pipelined I/O too: a persistent DRAM output each.)
        SCOPED_TRACE(fmt::format("{} {} {}", s.device->descriptor().name, m.name, c.name));
        ASSERT_OK_AND_ASSIGN(auto pipe,
                             create_pipeline_from_config(c.config, m.model, *s.device, s.l1, s.dram_in, s.dram_out));
        auto ins = inputs(s.shape, 32, 100);
        ASSERT_OK(pipe->compile(ins[0]));
        ASSERT_TRUE(pipe->output_schema().has_value());
        for (int round = 0; round < 3; ++round) {
          auto round_inputs = inputs(s.shape, 32, 1000 * static_cast<uint32_t>(round + 1));
          ASSERT_OK(pipe->enqueue(round_inputs));
          ASSERT_OK_AND_ASSIGN(auto outs, pipe->pop_all());
          ASSERT_EQ(outs.size(), round_inputs.size());
          for (size_t i = 0; i < outs.size(); ++i) {
            std::vector<std::vector<std::byte>> got;
            collect(outs[i], &got);
            ASSERT_EQ(got, eager(s, m.model, round_inputs[i])) << "round " << round << " input " << i;
          }
        }
        ASSERT_OK(pipe->cleanup());
      }
  }
}

// Two inputs per frame: [a + b, relu(b)] on same-shaped inputs with the
// rig's sharded configs, and [relu(a), c + c] on inputs of two shapes with
// interleaved configs; every executor, 3 rounds of 16 frames, bit-identical
// to eager runs.
StatusOr<ModelOutput> sum_and_relu(std::span<const Tensor> x) {
  TS_ASSIGN_OR_RETURN(Tensor s, add(x[0], x[1], {.memory_config = DRAM_MEMORY_CONFIG}));
  TS_ASSIGN_OR_RETURN(Tensor r, relu(x[1], {.memory_config = DRAM_MEMORY_CONFIG}));
  return ModelOutput::of(std::vector<ModelOutput>{ModelOutput::of(s), ModelOutput::of(r)});
}
StatusOr<ModelOutput> relu_and_double(std::span<const Tensor> x) {
  TS_ASSIGN_OR_RETURN(Tensor r, relu(x[0], {.memory_config = DRAM_MEMORY_CONFIG}));
  TS_ASSIGN_OR_RETURN(Tensor c, add(x[1], x[1], {.memory_config = DRAM_MEMORY_CONFIG}));
  return ModelOutput::of(std::vector<ModelOutput>{ModelOutput::of(r), ModelOutput::of(c)});
}

TEST(Pipeline, FramesOfSeveralInputsMatchEagerRuns) {
  for (bool wormhole : {false, true})
    for (bool two_shapes : {false, true}) {
      Rig s = make_setup(wormhole);
      const MultiInputModel model = two_shapes ? MultiInputModel(relu_and_double) : MultiInputModel(sum_and_relu);
      const Shape second = two_shapes ? Shape{1, 2, 16, 32} : s.shape;
      const MemoryConfig l1 = two_shapes ? DRAM_MEMORY_CONFIG : s.l1;
      const MemoryConfig dram_in = two_shapes ? DRAM_MEMORY_CONFIG : s.dram_in;
      auto frames = [&](uint32_t n, uint32_t seed) {
        std::vector<Frame> f;
        for (uint32_t i = 0; i < n; ++i)
          f.push_back({testing::random_tensor(s.shape, DataType::BFLOAT16, Layout::ROW_MAJOR, seed + 2 * i),
                       testing::random_tensor(second, DataType::BFLOAT16, Layout::ROW_MAJOR, seed + 2 * i + 1)});
        return f;
      };
      auto expect = [&](const Frame& f) {
        std::vector<Tensor> d;
        for (const Tensor& h : f) d.push_back(to_device(h, *s.device, l1).value());
        std::vector<std::vector<std::byte>> bytes;
        const ModelOutput out = model(d).value();
        for (const ModelOutput& o : out.list) bytes.push_back(testing::host_bytes(o.tensor->cpu().value()));
        return bytes;
      };
      for (const NamedConfig& c : kConfigs) {
        SCOPED_TRACE(
            fmt::format("{} {} {}", s.device->descriptor().name, two_shapes ? "two shapes" : "one shape", c.name));
        ASSERT_OK_AND_ASSIGN(auto pipe,
                             create_pipeline_from_config(c.config, model, *s.device, l1, dram_in, DRAM_MEMORY_CONFIG));
        ASSERT_OK(pipe->compile(frames(1, 5)[0]));
        for (uint32_t round = 0; round < 3; ++round) {
          const std::vector<Frame> in = frames(16, 1000 * (round + 1));
          ASSERT_OK(pipe->enqueue(in));
          ASSERT_OK_AND_ASSIGN(auto outs, pipe->pop_all());
          ASSERT_EQ(outs.size(), in.size());
          for (size_t i = 0; i < outs.size(); ++i) {
            std::vector<std::vector<std::byte>> got;
            collect(outs[i], &got);
            ASSERT_EQ(got, expect(in[i])) << "round " << round << " frame " << i;
          }
        }
        // A frame of the wrong size, and a one-input enqueue of a two-input model.
        const std::vector<Frame> short_frame = {{frames(1, 9)[0][0]}, {frames(1, 9)[0][0]}};
        EXPECT_ERROR(pipe->enqueue(short_frame), StatusCode::kInvalidArgument,
                     "a frame of 1 input tensor(s); the executor was compiled with 2");
        ASSERT_OK(pipe->cleanup());
      }
    }
  Rig s = make_setup(false);
  ASSERT_OK_AND_ASSIGN(
      auto pipe, create_pipeline_from_config({.use_trace = false}, MultiInputModel(sum_and_relu), *s.device, s.l1));
  EXPECT_ERROR(pipe->compile(Frame{}), StatusCode::kInvalidArgument, "a frame needs at least one input tensor");
  // A one-input model given a frame of two.
  ASSERT_OK_AND_ASSIGN(auto one, create_pipeline_from_config({.use_trace = false}, identity, *s.device, s.l1));
  const Tensor x = inputs(s.shape, 1, 3)[0];
  EXPECT_ERROR(one->compile(Frame{x, x}), StatusCode::kInvalidArgument,
               "a model of one input was given a frame of 2 input tensors");
}

// The Vanilla UNet (at 32x48, the same layers as at 480x640; 3 rounds of 32
// inputs) and ResNet-50 (at 64x64; 3 rounds of 8), built from Tessera ops,
// through every executor, bit-identical to eager runs.
TEST(Pipeline, ModelsMatchEagerRunsThroughEveryExecutor) {
  auto device = open_device({.l1_small_size = 16384, .trace_region_size = 1 << 20, .num_command_queues = 2}).value();
  std::shared_ptr<models::VanillaUNet> unet = models::VanillaUNet::create({.height = 32, .width = 48}, device).value();
  auto resnet = std::make_shared<models::ResNet50>(models::ResNet50Options{.image_size = 64});
  struct Case {
    const char* name;
    Model model;
    Shape shape;
    uint32_t inputs_per_round;
  };
  const Case cases[] = {
      {"unet",
       [unet](const Tensor& x) -> StatusOr<ModelOutput> {
         TS_ASSIGN_OR_RETURN(Tensor y, (*unet)(x));
         return ModelOutput::of(y);
       },
       unet->input_shape(), 32},
      {"resnet50",
       [resnet](const Tensor& x) -> StatusOr<ModelOutput> {
         TS_ASSIGN_OR_RETURN(Tensor y, (*resnet)(x));
         return ModelOutput::of(y);
       },
       resnet->input_shape(), 8},
  };
  for (const Case& m : cases) {
    // Eager references first (this also prepares every layer's weights).
    std::vector<std::vector<Tensor>> rounds;
    std::vector<std::vector<std::vector<std::byte>>> expected;
    for (uint32_t r = 0; r < 3; ++r) {
      rounds.push_back({});
      expected.push_back({});
      for (uint32_t i = 0; i < m.inputs_per_round; ++i) {
        Tensor h = testing::random_tensor(m.shape, DataType::FLOAT32, Layout::ROW_MAJOR, 7000 + 100 * r + i);
        rounds.back().push_back(h);
        Tensor d = to_device(h, *device).value();
        ModelOutput out = m.model(d).value();
        expected.back().push_back(testing::host_bytes(out.tensor->cpu().value()));
      }
    }
    for (const NamedConfig& c : kConfigs) {
      SCOPED_TRACE(fmt::format("{} {}", m.name, c.name));
      ASSERT_OK_AND_ASSIGN(auto pipe, create_pipeline_from_config(c.config, m.model, *device, DRAM_MEMORY_CONFIG,
                                                                  DRAM_MEMORY_CONFIG, DRAM_MEMORY_CONFIG));
      ASSERT_OK(pipe->compile(rounds[0][0]));
      for (size_t r = 0; r < rounds.size(); ++r) {
        ASSERT_OK(pipe->enqueue(rounds[r]));
        ASSERT_OK_AND_ASSIGN(auto outs, pipe->pop_all());
        ASSERT_EQ(outs.size(), rounds[r].size());
        for (size_t i = 0; i < outs.size(); ++i)
          ASSERT_EQ(testing::host_bytes(*outs[i].tensor), expected[r][i]) << "round " << r << " input " << i;
      }
      ASSERT_OK(pipe->cleanup());
    }
  }
}

TEST(Pipeline, PreallocatedOutputsAreReused) {
  Rig s = make_setup(false);
  for (const NamedConfig& c : kConfigs) {
    SCOPED_TRACE(c.name);
    ASSERT_OK_AND_ASSIGN(
        auto pipe, create_pipeline_from_config(c.config, tilize_relu_untilize, *s.device, s.l1, s.dram_in, s.dram_out));
    auto ins = inputs(s.shape, 8, 7);
    ASSERT_OK(pipe->compile(ins[0]));
    ASSERT_OK(pipe->preallocate_output_tensors_on_host(8));
    ASSERT_OK(pipe->enqueue(ins));
    ASSERT_OK_AND_ASSIGN(auto first, pipe->pop_all());
    ASSERT_OK(pipe->enqueue(ins));
    ASSERT_OK_AND_ASSIGN(auto second, pipe->pop_all());
    ASSERT_EQ(first.size(), 8u);
    for (size_t i = 0; i < first.size(); ++i) {
      EXPECT_EQ(first[i].tensor->host_data(), second[i].tensor->host_data());  // the same slot
      std::vector<std::vector<std::byte>> got;
      collect(second[i], &got);
      EXPECT_EQ(got, eager(s, tilize_relu_untilize, ins[i]));
    }
    EXPECT_ERROR(pipe->enqueue(inputs(s.shape, 9, 7)), StatusCode::kInvalidArgument,
                 "Number of inputs (9) exceeds the number of pre-allocated output slots (8).");
    ASSERT_OK(pipe->cleanup());
  }
}

// Thousands of distinct inputs: input i is filled with a value that names
// it; every output must carry its own input's value, in order.
TEST(Pipeline, StressNothingLostDuplicatedOrReordered) {
  Rig s = make_setup(false);
  for (const NamedConfig& c : {kConfigs[3], kConfigs[4], kConfigs[2]}) {
    SCOPED_TRACE(c.name);
    ASSERT_OK_AND_ASSIGN(auto pipe,
                         create_pipeline_from_config(c.config, identity, *s.device, s.l1, s.dram_in, s.dram_out));
    auto value_of = [](uint32_t i) { return static_cast<float>(i) - 1000.0f; };  // exact in float32
    auto make = [&](uint32_t i) {
      return Tensor::from_vector(std::vector<float>(s.shape.volume(), value_of(i)), s.shape, DataType::FLOAT32).value();
    };
    ASSERT_OK(pipe->compile(make(0)));
    uint32_t next = 0;
    for (int batch = 0; batch < 8; ++batch) {
      std::vector<Tensor> ins;
      for (int k = 0; k < 256; ++k) ins.push_back(make(next + static_cast<uint32_t>(k)));
      ASSERT_OK(pipe->enqueue(ins));
      ASSERT_OK_AND_ASSIGN(auto outs, pipe->pop_all());
      ASSERT_EQ(outs.size(), ins.size());
      for (size_t k = 0; k < outs.size(); ++k) {
        auto v = outs[k].tensor->to_vector().value();
        const float want = value_of(next + static_cast<uint32_t>(k));
        ASSERT_TRUE(std::all_of(v.begin(), v.end(), [&](float x) { return x == want; }))
            << "input " << next + k << " came back as " << v[0];
      }
      next += 256;
    }
    ASSERT_OK(pipe->cleanup());
  }
}

TEST(Pipeline, SelectionErrors) {
  Rig s = make_setup(false);
  auto err = [&](PipelineConfig c, std::optional<MemoryConfig> in, std::optional<MemoryConfig> out) {
    return create_pipeline_from_config(c, identity, *s.device, s.l1, in, out).status();
  };
  EXPECT_ERROR(
      err({.use_trace = true, .num_command_queues = 1}, std::nullopt, std::nullopt), StatusCode::kInvalidArgument,
      "dram_input_memory_config must be provided when using trace all_transfers_on_separate_command_queue=True.");
  EXPECT_ERROR(err({.use_trace = false, .num_command_queues = 2, .all_transfers_on_separate_command_queue = true},
                   s.dram_in, s.dram_out),
               StatusCode::kInvalidArgument,
               "Pipelined I/O (all_transfers_on_separate_command_queue) requires tracing");
  EXPECT_ERROR(err({.use_trace = false, .num_command_queues = 2}, std::nullopt, std::nullopt),
               StatusCode::kInvalidArgument, "dram_input_memory_config must be provided when using multi-CQ executor");
  EXPECT_ERROR(err({.use_trace = true, .num_command_queues = 2, .all_transfers_on_separate_command_queue = true},
                   s.dram_in, std::nullopt),
               StatusCode::kInvalidArgument,
               "dram_output_memory_config must be provided when all_transfers_on_separate_command_queue=True.");
  EXPECT_ERROR(err({.num_command_queues = 3}, s.dram_in, s.dram_out), StatusCode::kInvalidArgument,
               "Unsupported pipeline configuration: use_trace=true\nnum_command_queues=3");
  auto one_queue = open_device({.num_command_queues = 1}).value();
  EXPECT_ERROR(create_pipeline_from_config({.num_command_queues = 2}, identity, *one_queue, s.l1, s.dram_in).status(),
               StatusCode::kInvalidArgument, "needs a device opened with num_command_queues=2");
  // A traced 2-queue pipeline without a DRAM input config fails at creation.
  EXPECT_ERROR(err({.use_trace = true, .num_command_queues = 2}, std::nullopt, std::nullopt),
               StatusCode::kInvalidArgument, "dram_input_memory_config must be provided");
}

TEST(Pipeline, EnqueueCompileAndPreallocateErrors) {
  Rig s = make_setup(false);
  ASSERT_OK_AND_ASSIGN(auto pipe,
                       create_pipeline_from_config({.num_command_queues = 2}, identity, *s.device, s.l1, s.dram_in));
  auto ins = inputs(s.shape, 2, 1);
  EXPECT_ERROR(pipe->preallocate_output_tensors_on_host(2), StatusCode::kFailedPrecondition,
               "Pipeline must be compiled before pre-allocating output tensors.");
  EXPECT_ERROR(pipe->executor().output_schema(), StatusCode::kFailedPrecondition,
               "Executor must be compiled before getting the output schema.");
  Tensor on_device = to_device(ins[0], *s.device).value();
  EXPECT_ERROR(pipe->compile(on_device), StatusCode::kInvalidArgument, "Input tensor must be on host");
  ASSERT_OK(pipe->compile(ins[0]));
  const Tensor mixed[] = {ins[0], on_device};
  EXPECT_ERROR(pipe->enqueue(mixed), StatusCode::kInvalidArgument, "All input tensors must be on host");
  ASSERT_OK(pipe->cleanup());

  // Pipelined I/O: at least two inputs, one output.
  PipelineConfig io{.use_trace = true, .num_command_queues = 2, .all_transfers_on_separate_command_queue = true};
  ASSERT_OK_AND_ASSIGN(auto p2, create_pipeline_from_config(io, identity, *s.device, s.l1, s.dram_in, s.dram_out));
  ASSERT_OK(p2->compile(ins[0]));
  EXPECT_ERROR(p2->enqueue(std::span<const Tensor>(ins.data(), 1)), StatusCode::kInvalidArgument,
               "Pipelined I/O executor requires at least 2 inputs for pipelining (got 1)");
  ASSERT_OK(p2->cleanup());
  // Several outputs (the original takes one): a persistent DRAM tensor each,
  // which needs an interleaved output config.
  ASSERT_OK_AND_ASSIGN(auto p3, create_pipeline_from_config(io, two_outputs, *s.device, s.l1, s.dram_in, s.dram_in));
  EXPECT_ERROR(p3->compile(ins[0]), StatusCode::kInvalidArgument, "needs an interleaved dram_output_memory_config");
  ASSERT_OK_AND_ASSIGN(auto p4, create_pipeline_from_config(io, two_outputs, *s.device, s.l1, s.dram_in, s.dram_out));
  ASSERT_OK(p4->compile(ins[0]));
  ASSERT_OK(p4->enqueue(ins));
  ASSERT_OK_AND_ASSIGN(auto outs, p4->pop_all());
  ASSERT_EQ(outs.size(), ins.size());
  for (const auto& o : outs) EXPECT_EQ(o.list.size(), 2u);
  ASSERT_OK(p4->cleanup());
}

TEST(Pipeline, PersistentDramMemoryConfig) {
  ASSERT_OK_AND_ASSIGN(MemoryConfig w, get_memory_config_for_persistent_dram_tensor(
                                           Shape{1, 1, 64, 64}, TensorMemoryLayout::WIDTH_SHARDED, {2, 1}));
  EXPECT_EQ(w.shard_spec->shape, (std::array<uint32_t, 2>{64, 32}));
  EXPECT_EQ(w.buffer_type, BufferType::DRAM);
  ASSERT_OK_AND_ASSIGN(MemoryConfig h, get_memory_config_for_persistent_dram_tensor(
                                           Shape{1, 1, 64, 64}, TensorMemoryLayout::HEIGHT_SHARDED, {2, 1}));
  EXPECT_EQ(h.shard_spec->shape, (std::array<uint32_t, 2>{32, 64}));
  // The UNet's folded input on 12 banks: 12 x [3, 25600].
  ASSERT_OK_AND_ASSIGN(MemoryConfig u, get_memory_config_for_persistent_dram_tensor(
                                           Shape{1, 1, 3, 307200}, TensorMemoryLayout::WIDTH_SHARDED, {12, 1}));
  EXPECT_EQ(u.shard_spec->shape, (std::array<uint32_t, 2>{3, 25600}));
  EXPECT_EQ(u.shard_spec->grid.num_cores(), 12u);
  EXPECT_ERROR(
      get_memory_config_for_persistent_dram_tensor(Shape{1, 1, 64, 64}, TensorMemoryLayout::WIDTH_SHARDED, {2, 2}),
      StatusCode::kInvalidArgument, "Only 1D DRAM grid is supported (was (2,2))");
  EXPECT_ERROR(get_memory_config_for_persistent_dram_tensor(Shape{64}, TensorMemoryLayout::WIDTH_SHARDED, {2, 1}),
               StatusCode::kInvalidArgument, "Shape must be 2D or higher (was [64])");
  EXPECT_ERROR(get_memory_config_for_persistent_dram_tensor(Shape{1, 64}, TensorMemoryLayout::BLOCK_SHARDED, {2, 1}),
               StatusCode::kInvalidArgument, "Unsupported shard strategy: BLOCK_SHARDED");
}

}  // namespace
}  // namespace tessera::cnn
