// The Tessera demo: open a device with two command queues, run a small model
// eagerly, capture it as a trace, replay it in a two-queue loop (replays and
// output copies on cq 0, writes and reads on cq 1, ordered by events), check
// that replay matches eager execution bit for bit, and print what happened
// and how fast.
//
//   tessera_demo [--device cpu|wormhole_b0] [--iterations N] [--workers N]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

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
  std::vector<Tensor> inputs, eager_outputs, outputs;
  for (int i = 0; i < iterations; ++i) {
    std::vector<float> v(shape.volume());
    for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<float>((k * 7 + i * 13) % 97) / 16.0f - 3.0f;
    TS_ASSIGN_OR_RETURN(Tensor h, Tensor::from_vector(v, shape, DataType::FLOAT32));
    inputs.push_back(h);
    outputs.push_back(allocate_tensor_on_host(h.spec()));
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

  // Capture, then the two-queue traced loop of the original.
  TS_ASSIGN_OR_RETURN(TraceId tid, begin_trace_capture(*device, 0));
  TS_ASSIGN_OR_RETURN(Tensor output, model(input));
  TS_RETURN_IF_ERROR(end_trace_capture(*device, tid, 0));
  TS_ASSIGN_OR_RETURN(TraceInfo info, trace_info(*device, tid));
  std::printf("captured trace %u: %u launches, %llu B in the TRACE region\n", tid, info.num_launches,
              static_cast<unsigned long long>(info.size_bytes));
  // Pipelined I/O: cq 0 replays and copies the output into one of two DRAM
  // buffers; cq 1 writes the next input as soon as the trace consumed the
  // current one, and reads the copied output while cq 0 runs the next replay.
  const TensorSpec staged_spec{shape, DataType::FLOAT32, Layout::ROW_MAJOR, DRAM_MEMORY_CONFIG};
  Tensor staged[2];
  for (auto& t : staged) {
    TS_ASSIGN_OR_RETURN(t, allocate_tensor_on_device(staged_spec, *device));
  }
  TS_RETURN_IF_ERROR(reshard(output, DRAM_MEMORY_CONFIG, staged[0], 0).status());  // compile the copy
  TS_RETURN_IF_ERROR(synchronize_device(*device));
  t0 = Clock::now();
  TS_RETURN_IF_ERROR(copy_host_to_device_tensor(inputs[0], input, 1));
  TS_ASSIGN_OR_RETURN(Event written, record_event(*device, 1));
  std::vector<Event> read_done;
  for (int i = 0; i < iterations; ++i) {
    TS_RETURN_IF_ERROR(wait_for_event(0, written));
    TS_RETURN_IF_ERROR(execute_trace(*device, tid, 0, /*blocking=*/false));
    TS_ASSIGN_OR_RETURN(Event consumed, record_event(*device, 0));
    if (i >= 2) TS_RETURN_IF_ERROR(wait_for_event(0, read_done[static_cast<size_t>(i - 2)]));  // staged buffer free
    TS_RETURN_IF_ERROR(reshard(output, DRAM_MEMORY_CONFIG, staged[i % 2], 0).status());
    TS_ASSIGN_OR_RETURN(Event copied, record_event(*device, 0));
    TS_RETURN_IF_ERROR(wait_for_event(1, consumed));
    if (i + 1 < iterations) {
      TS_RETURN_IF_ERROR(copy_host_to_device_tensor(inputs[static_cast<size_t>(i + 1)], input, 1));
      TS_ASSIGN_OR_RETURN(written, record_event(*device, 1));
    }
    TS_RETURN_IF_ERROR(wait_for_event(1, copied));
    TS_RETURN_IF_ERROR(copy_device_to_host_tensor(staged[i % 2], outputs[static_cast<size_t>(i)], false, 1));
    TS_ASSIGN_OR_RETURN(Event done, record_event(*device, 1));
    read_done.push_back(done);
  }
  TS_RETURN_IF_ERROR(synchronize_device(*device));
  const double traced_ms = ms_since(t0);

  int mismatches = 0;
  for (int i = 0; i < iterations; ++i)
    mismatches += std::memcmp(eager_outputs[i].host_data(), outputs[i].host_data(),
                              outputs[i].spec().storage_bytes()) != 0;
  const int launches = iterations * (2 + 2 * kReluAddPairs);
  std::printf("eager, 1 queue:                  %8.2f ms for %d runs  %8.1f runs/s  %6.2f us per launch\n", eager_ms,
              iterations, iterations / eager_ms * 1e3, eager_ms * 1e3 / launches);
  std::printf("traced, 2 queues, pipelined I/O: %8.2f ms for %d runs  %8.1f runs/s  %6.2f us per launch\n", traced_ms,
              iterations, iterations / traced_ms * 1e3, traced_ms * 1e3 / launches);
  std::printf("replay vs eager outputs:         %d of %d differ (bit for bit)\n", mismatches, iterations);
  std::printf("program cache: %zu programs, %llu hits, %llu misses\n", device->program_cache().size(),
              static_cast<unsigned long long>(device->program_cache().hits()),
              static_cast<unsigned long long>(device->program_cache().misses()));
  TS_RETURN_IF_ERROR(release_trace(*device, tid));
  TS_RETURN_IF_ERROR(close_device(*device));
  if (mismatches) return internal_error("traced replay differs from eager execution on {} inputs", mismatches);
  return ok_status();
}

}  // namespace

int main(int argc, char** argv) {
  std::string descriptor = "cpu";
  int iterations = 200, workers = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--device" && i + 1 < argc) {
      descriptor = argv[++i];
    } else if (a == "--iterations" && i + 1 < argc) {
      iterations = std::atoi(argv[++i]);
    } else if (a == "--workers" && i + 1 < argc) {
      workers = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: tessera_demo [--device cpu|wormhole_b0] [--iterations N] [--workers N]\nunknown argument: %s\n",
                   a.c_str());
      return 2;
    }
  }
  if (iterations < 1) {
    std::fprintf(stderr, "tessera_demo: --iterations must be >= 1\n");
    return 2;
  }
  tessera::Status s = run(descriptor, iterations, workers);
  if (!s.ok()) {
    std::fprintf(stderr, "tessera_demo: %s\n", s.to_string().c_str());
    return 1;
  }
  return 0;
}
