// The Tessera demo: open a device with two command queues, run a small model
// eagerly, then through the TT-CNN Pipeline in each of its five
// configurations (traced, two queues, pipelined I/O), check that every
// pipeline output matches eager execution bit for bit, and print how fast.
//
// Then the Vanilla UNet at 480x640 through the recommended configuration (two
// queues with trace), float32 and bfloat16: end-to-end and device-only FPS.
//
//   tessera_demo [--device cpu|wormhole_b0] [--iterations N] [--workers N] [--unet-frames N]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tessera/cnn/pipeline.h"
#include "tessera/device/profiler.h"
#include "vanilla_unet/unet.h"
#include "tessera/tessera.h"

namespace {

using namespace tessera;
using Clock = std::chrono::steady_clock;

constexpr int kReluAddPairs = 8;

// rows -> bf16 tiles -> 8 x (relu, add) -> rows: 18 launches.
StatusOr<Tensor> model(const Tensor& input) {
  TS_ASSIGN_OR_RETURN(Tensor x, tilize(input, {.dtype = DataType::BFLOAT16}));
  for (int i = 0; i < kReluAddPairs; ++i) {
    TS_ASSIGN_OR_RETURN(Tensor r, relu(x));
    TS_ASSIGN_OR_RETURN(x, add(r, x));
  }
  return untilize(x, {.dtype = DataType::FLOAT32});
}

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

Status run(const std::string& descriptor, int iterations, int workers) {
  TS_ASSIGN_OR_RETURN(auto device, open_device({.descriptor = descriptor,
                                                .l1_small_size = 16384,
                                                .trace_region_size = 1 << 20,
                                                .num_command_queues = 2,
                                                .worker_threads = workers}));
  std::printf("device 0: %s\n", device->descriptor().to_string().c_str());
  const Shape shape{1, 1, 512, 512};
  // Host inputs and both sets of outputs are allocated (and their pages
  // touched) before timing starts.
  std::vector<Tensor> inputs, eager_outputs;
  for (int i = 0; i < iterations; ++i) {
    std::vector<float> v(shape.volume());
    for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<float>((k * 7 + i * 13) % 97) / 16.0f - 3.0f;
    TS_ASSIGN_OR_RETURN(Tensor h, Tensor::from_vector(v, shape, DataType::FLOAT32));
    inputs.push_back(h);
    eager_outputs.push_back(allocate_tensor_on_host(h.spec()));
  }
  // 1 MiB activations: too large for this CPU's L1 budget, so they live in DRAM
  // (interleaved over its banks); the launches split over the worker threads.
  const MemoryConfig input_config = DRAM_MEMORY_CONFIG;
  std::printf("model: %s -> tilize -> %d x (relu, add) -> untilize, %d launches per run\n",
              TensorSpec{shape, DataType::FLOAT32, Layout::ROW_MAJOR, input_config}.to_string().c_str(), kReluAddPairs,
              2 + 2 * kReluAddPairs);

  // Eager: write, run, read, one after another on cq 0.
  TS_ASSIGN_OR_RETURN(Tensor input, to_device(inputs[0], *device, input_config));
  TS_ASSIGN_OR_RETURN(Tensor warm, model(input));  // compiles every program
  TS_RETURN_IF_ERROR(synchronize_device(*device));
  auto t0 = Clock::now();
  for (int i = 0; i < iterations; ++i) {
    TS_RETURN_IF_ERROR(copy_host_to_device_tensor(inputs[i], input, 0));
    TS_ASSIGN_OR_RETURN(Tensor out, model(input));
    TS_RETURN_IF_ERROR(copy_device_to_host_tensor(out, eager_outputs[i], true, 0));
  }
  const double eager_ms = ms_since(t0);

  std::printf("eager, 1 queue (write, run, read): %8.2f ms for %d runs  %8.1f runs/s  %6.2f us per launch\n",
              eager_ms, iterations, iterations / eager_ms * 1e3, eager_ms * 1e3 / (iterations * (2 + 2 * kReluAddPairs)));

  // The same model through the Pipeline in each of its configurations; the
  // two-queue traced one is the recommended.
  struct Named {
    const char* name;
    cnn::PipelineConfig config;
  };
  const Named configs[] = {
      {"pipeline: 1 queue", {.use_trace = false, .num_command_queues = 1}},
      {"pipeline: 1 queue, trace", {.use_trace = true, .num_command_queues = 1}},
      {"pipeline: 2 queues", {.use_trace = false, .num_command_queues = 2}},
      {"pipeline: 2 queues, trace (recommended)", {.use_trace = true, .num_command_queues = 2}},
      {"pipeline: 2 queues, trace, pipelined I/O",
       {.use_trace = true, .num_command_queues = 2, .all_transfers_on_separate_command_queue = true}},
  };
  auto pipeline_model = [](const Tensor& x) -> StatusOr<cnn::ModelOutput> {
    TS_ASSIGN_OR_RETURN(Tensor y, model(x));
    return cnn::ModelOutput::of(y);
  };
  int mismatches = 0;
  for (const Named& c : configs) {
    TS_ASSIGN_OR_RETURN(auto pipe, cnn::create_pipeline_from_config(c.config, pipeline_model, *device, input_config,
                                                                     DRAM_MEMORY_CONFIG, DRAM_MEMORY_CONFIG));
    TS_RETURN_IF_ERROR(pipe->compile(inputs[0]));
    TS_RETURN_IF_ERROR(pipe->preallocate_output_tensors_on_host(inputs.size()));
    t0 = Clock::now();
    TS_RETURN_IF_ERROR(pipe->enqueue(inputs));
    TS_ASSIGN_OR_RETURN(auto outs, pipe->pop_all());
    const double ms = ms_since(t0);
    int differ = 0;
    for (int i = 0; i < iterations; ++i)
      differ += std::memcmp(eager_outputs[i].host_data(), outs[i].tensor->host_data(),
                            eager_outputs[i].spec().storage_bytes()) != 0;
    mismatches += differ;
    std::printf("%-40s %8.2f ms for %d runs  %8.1f runs/s  outputs differing from eager: %d\n", c.name, ms,
                iterations, iterations / ms * 1e3, differ);
    TS_RETURN_IF_ERROR(pipe->cleanup());
  }
  std::printf("program cache: %zu programs, %llu hits, %llu misses\n", device->program_cache().size(),
              static_cast<unsigned long long>(device->program_cache().hits()),
              static_cast<unsigned long long>(device->program_cache().misses()));
  TS_RETURN_IF_ERROR(close_device(*device));
  if (mismatches) return internal_error("pipelines differ from eager execution on {} outputs", mismatches);
  return ok_status();
}

// The Vanilla UNet (480x640, built from Tessera ops with fixed-seed random
// weights) through the recommended configuration: two queues with trace.
Status run_unet(const std::string& descriptor, int frames, int workers, models::UNetPrecision precision) {
  const DataType dtype = precision == models::UNetPrecision::FLOAT32 ? DataType::FLOAT32 : DataType::BFLOAT16;
  const char* precision_name = precision == models::UNetPrecision::FLOAT32    ? "float32"
                               : precision == models::UNetPrecision::BFLOAT16 ? "bfloat16"
                                                                              : "the original's bfloat8_b table";
  TS_ASSIGN_OR_RETURN(auto device, open_device({.descriptor = descriptor,
                                                .l1_small_size = 16384,
                                                .trace_region_size = 1 << 20,
                                                .num_command_queues = 2,
                                                .worker_threads = workers}));
  TS_ASSIGN_OR_RETURN(std::shared_ptr<models::VanillaUNet> unet,
                      models::VanillaUNet::create({.precision = precision, .sharded = descriptor == "wormhole_b0"},
                                                  device));
  auto model = [unet](const Tensor& x) -> StatusOr<cnn::ModelOutput> {
    TS_ASSIGN_OR_RETURN(Tensor y, (*unet)(x));
    return cnn::ModelOutput::of(y);
  };
  std::vector<Tensor> inputs;
  for (int i = 0; i < frames; ++i) {
    // The original's input: channels-first rows (1, 1, 3, H*W).
    std::vector<float> v(unet->chw_input_shape().volume());
    for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<float>((k * 7 + static_cast<size_t>(i) * 13) % 97) / 48.0f - 1.0f;
    TS_ASSIGN_OR_RETURN(Tensor h, Tensor::from_vector(v, unet->chw_input_shape(), dtype));
    inputs.push_back(h);
  }
  // Sharded: the original's 64 L1 input shards and 12 DRAM shards.
  const bool sharded = unet->options().sharded;
  TS_ASSIGN_OR_RETURN(const MemoryConfig l1_in,
                      sharded ? unet->l1_input_memory_config(*device) : StatusOr<MemoryConfig>(DRAM_MEMORY_CONFIG));
  TS_ASSIGN_OR_RETURN(const MemoryConfig dram_in,
                      sharded ? unet->dram_input_memory_config(*device) : StatusOr<MemoryConfig>(DRAM_MEMORY_CONFIG));
  TS_ASSIGN_OR_RETURN(auto pipe, cnn::create_pipeline_from_config({.use_trace = true, .num_command_queues = 2}, model,
                                                                   *device, l1_in, dram_in));
  auto t0 = Clock::now();
  TS_RETURN_IF_ERROR(pipe->compile(inputs[0]));
  const double compile_ms = ms_since(t0);
  TS_RETURN_IF_ERROR(pipe->preallocate_output_tensors_on_host(inputs.size()));
  t0 = Clock::now();
  TS_RETURN_IF_ERROR(pipe->enqueue(inputs));
  TS_ASSIGN_OR_RETURN(auto outs, pipe->pop_all());
  const double e2e_ms = ms_since(t0);
  TS_RETURN_IF_ERROR(pipe->cleanup());
  // Device-only: back-to-back replays of the model with its input in place.
  TS_ASSIGN_OR_RETURN(Tensor x, to_device(inputs[0], *device, l1_in));
  TS_ASSIGN_OR_RETURN(TraceId tid, begin_trace_capture(*device, 0));
  TS_ASSIGN_OR_RETURN(Tensor y, (*unet)(x));
  TS_RETURN_IF_ERROR(end_trace_capture(*device, tid, 0));
  t0 = Clock::now();
  for (int i = 0; i < frames; ++i) TS_RETURN_IF_ERROR(execute_trace(*device, tid, 0, false));
  TS_RETURN_IF_ERROR(synchronize_device(*device));
  const double device_ms = ms_since(t0);
  // Kernel-only: the profiler's per-launch times over one replay.
  TS_RETURN_IF_ERROR(enable_profiler(*device));
  TS_RETURN_IF_ERROR(execute_trace(*device, tid, 0, true));
  TS_ASSIGN_OR_RETURN(DeviceProfile profile, read_profile(*device));
  TS_RETURN_IF_ERROR(disable_profiler(*device));
  const double kernel_ms = profile.total_us() / 1e3;
  TS_RETURN_IF_ERROR(release_trace(*device, tid));
  // The trace's output for input 0 equals the pipeline's.
  TS_ASSIGN_OR_RETURN(Tensor y0, y.cpu());
  std::printf("\nVanilla UNet 480x640 (%s, %.1f GFLOP per frame), 2 queues + trace: compile %.0f ms\n",
              precision_name, unet->flops() / 1e9, compile_ms);
  std::printf("  end to end:  %6.2f FPS (%d frames, %.1f ms per frame)\n", frames / e2e_ms * 1e3, frames,
              e2e_ms / frames);
  std::printf("  device only: %6.2f FPS (trace replays back to back, %.0f GFLOP/s)\n", frames / device_ms * 1e3,
              unet->flops() / (device_ms / frames) / 1e6);
  std::printf("  device kernel-only: %6.2f FPS (%.1f ms in %zu launches, from the device profiler)\n",
              1e3 / kernel_ms, kernel_ms, profile.ops.size());
  if (std::memcmp(y0.host_data(), outs[0].tensor->host_data(), y0.spec().storage_bytes()) != 0)
    return internal_error("the UNet pipeline output differs from the trace's output for the same input");
  return close_device(*device);
}

}  // namespace

int main(int argc, char** argv) {
  std::string descriptor = "cpu";
  int iterations = 200, workers = 0, unet_frames = 6;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--device" && i + 1 < argc) {
      descriptor = argv[++i];
    } else if (a == "--iterations" && i + 1 < argc) {
      iterations = std::atoi(argv[++i]);
    } else if (a == "--workers" && i + 1 < argc) {
      workers = std::atoi(argv[++i]);
    } else if (a == "--unet-frames" && i + 1 < argc) {
      unet_frames = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: tessera_demo [--device cpu|wormhole_b0] [--iterations N] [--workers N] [--unet-frames N]\n"
                   "unknown argument: %s\n",
                   a.c_str());
      return 2;
    }
  }
  if (iterations < 1 || unet_frames < 0) {
    std::fprintf(stderr, "tessera_demo: --iterations must be >= 1 and --unet-frames >= 0\n");
    return 2;
  }
  tessera::Status s = run(descriptor, iterations, workers);
  using tessera::models::UNetPrecision;
  // On wormhole_b0 the UNet runs the original's sharded table only: float32
  // activations do not fit its L1 plan (the first full-size layer says so).
  std::vector<UNetPrecision> precisions{UNetPrecision::ORIGINAL_BFLOAT8_B};
  if (descriptor != "wormhole_b0") precisions = {UNetPrecision::FLOAT32, UNetPrecision::BFLOAT16, UNetPrecision::ORIGINAL_BFLOAT8_B};
  for (UNetPrecision p : precisions)
    if (s.ok() && unet_frames > 0) s = run_unet(descriptor, unet_frames, workers, p);
  if (!s.ok()) {
    std::fprintf(stderr, "tessera_demo: %s\n", s.to_string().c_str());
    return 1;
  }
  return 0;
}
