// The Pipeline's configurations over whole models built from Tessera ops:
// the Vanilla UNet (480x640) and ResNet-50 (224x224, batch 1 and 8), float32
// and bfloat16. For each model, in one run:
//   device-only FPS  back-to-back trace replays with no transfers (kernel time);
//   dispatch         host time per launch to enqueue the model eagerly, and
//                    to enqueue its trace replay;
//   kernel time      per op kind over one replay, from the device profiler;
//   end to end       FPS of each pipeline configuration over N host inputs
//                    (enqueue ... pop_all, preallocated outputs; median of 3),
//                    and its share of the device-only FPS (median of 3).
//
//   bench_pipeline [--quick] [--models unet,resnet50,resnet50_b8]
#include <chrono>
#include <functional>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "harness.h"
#include "resnet50/resnet50.h"
#include "tessera/base/cpu_features.h"
#include "tessera/cnn/pipeline.h"
#include "tessera/device/profiler.h"
#include "tessera/tessera.h"
#include "vanilla_unet/unet.h"

namespace {

using namespace tessera;
using bench::value_or_die;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct ModelCase {
  std::string name;
  uint32_t batch;
  Shape input;
  uint64_t flops;
  cnn::Model model;
};

using ModelFactory = std::function<ModelCase(const std::shared_ptr<Device>&)>;

void run_case(const ModelFactory& make, DataType dt, int frames) {
  auto device = value_or_die(open_device({.l1_small_size = 16384, .trace_region_size = 8 << 20, .num_command_queues = 2}));
  const ModelCase m = make(device);
  std::vector<Tensor> inputs;
  for (int i = 0; i < frames; ++i) {
    std::vector<float> v(m.input.volume());
    for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<float>((k * 7 + static_cast<size_t>(i) * 13) % 97) / 48.0f - 1.0f;
    inputs.push_back(value_or_die(Tensor::from_vector(v, m.input, dt)));
  }
  // Eager warm-up (compiles programs, prepares weights), then device-only
  // time: replays of a captured run with the input already on the device.
  Tensor x = value_or_die(to_device(inputs[0], *device));
  (void)value_or_die(m.model(x));
  CHECK_OK(synchronize_device(*device));
  auto t = Clock::now();
  for (int i = 0; i < 3; ++i) (void)value_or_die(m.model(x));
  const double eager_enqueue_s = seconds_since(t) / 3;  // host time only: the queue runs behind
  CHECK_OK(synchronize_device(*device));
  const double eager_s = seconds_since(t) / 3;
  TraceId tid = value_or_die(begin_trace_capture(*device, 0));
  (void)value_or_die(m.model(x));
  CHECK_OK(end_trace_capture(*device, tid, 0));
  const uint32_t launches = value_or_die(trace_info(*device, tid)).num_launches;
  CHECK_OK(execute_trace(*device, tid, 0, true));
  // Median of three batches of back-to-back replays.
  const int reps = std::max(3, frames);
  double replay_enqueue_s = 0;
  const bench::Timing replays = bench::time_it(3, [&] {
    for (int i = 0; i < reps; ++i) {
      auto e = Clock::now();
      CHECK_OK(execute_trace(*device, tid, 0, false));
      replay_enqueue_s += seconds_since(e);
    }
    CHECK_OK(synchronize_device(*device));
  }, 0);
  const double device_s = replays.median_s / reps;
  replay_enqueue_s /= 3.0 * reps;
  // Kernel time per op kind over one replay (device profiler).
  CHECK_OK(enable_profiler(*device));
  CHECK_OK(execute_trace(*device, tid, 0, true));
  const DeviceProfile profile = value_or_die(read_profile(*device));
  CHECK_OK(disable_profiler(*device));
  CHECK_OK(release_trace(*device, tid));
  const double device_fps = m.batch / device_s;
  std::printf("\n### %s, %s (%.1f GFLOP per frame)\n\n", m.name.c_str(), std::string(data_type_name(dt)).c_str(),
              m.flops / 1e9 / m.batch);
  std::printf("- device-only: %.2f ms per run, **%.1f FPS**, %.0f GFLOP/s; eager run with sync %.2f ms\n",
              device_s * 1e3, device_fps, m.flops / device_s / 1e9, eager_s * 1e3);
  std::printf("- host dispatch per launch (%u launches): eager %.2f us, traced replay %.3f us (%.1f%% removed)\n",
              launches, eager_enqueue_s / launches * 1e6, replay_enqueue_s / launches * 1e6,
              100 * (1 - replay_enqueue_s / eager_enqueue_s));
  std::map<std::string, std::pair<int, double>> by_op;  // op -> (launches, us)
  for (const OpTiming& o : profile.ops) {
    auto& e = by_op[o.key.substr(0, o.key.find(':'))];
    ++e.first;
    e.second += o.duration_us();
  }
  std::printf("- kernel time by op over one replay (profiler, %.2f ms in launches):", profile.total_us() / 1e3);
  for (const auto& [op, e] : by_op)
    std::printf(" %s %.2f ms (%d, %.0f%%);", op.c_str(), e.second / 1e3, e.first, 100 * e.second / profile.total_us());
  std::printf("\n\n");
  std::printf("| configuration | end-to-end FPS | ms per frame | %% of device-only FPS |\n|---|---|---|---|\n");
  struct Named {
    const char* name;
    cnn::PipelineConfig config;
  };
  const Named configs[] = {
      {"1 queue", {.use_trace = false, .num_command_queues = 1}},
      {"1 queue, trace", {.use_trace = true, .num_command_queues = 1}},
      {"2 queues", {.use_trace = false, .num_command_queues = 2}},
      {"2 queues, trace (recommended)", {.use_trace = true, .num_command_queues = 2}},
      {"2 queues, trace, pipelined I/O",
       {.use_trace = true, .num_command_queues = 2, .all_transfers_on_separate_command_queue = true}},
  };
  for (const Named& c : configs) {
    auto pipe = value_or_die(cnn::create_pipeline_from_config(c.config, m.model, *device, DRAM_MEMORY_CONFIG,
                                                              DRAM_MEMORY_CONFIG, DRAM_MEMORY_CONFIG));
    CHECK_OK(pipe->compile(inputs[0]));
    CHECK_OK(pipe->preallocate_output_tensors_on_host(inputs.size()));
    // Median of three enqueue ... pop_all rounds after one warm round (host
    // pages of the outputs touched).
    const double s = bench::time_it(3, [&] {
                       CHECK_OK(pipe->enqueue(inputs));
                       (void)value_or_die(pipe->pop_all());
                     }, 1).median_s;
    const double fps = frames * m.batch / s;
    std::printf("| %s | %.1f | %.2f | %.0f%% |\n", c.name, fps, s * 1e3 / (frames * m.batch), 100 * fps / device_fps);
    CHECK_OK(pipe->cleanup());
  }
  CHECK_OK(close_device(*device));
}

std::shared_ptr<models::ResNet50> build(const models::ResNet50Options& o, const std::shared_ptr<Device>&) {
  return std::make_shared<models::ResNet50>(o);
}
std::shared_ptr<models::VanillaUNet> build(const models::UNetOptions& o, const std::shared_ptr<Device>& device) {
  return value_or_die(models::VanillaUNet::create(o, device));
}

template <class Options>
ModelFactory make_case(const std::string& name, uint32_t batch, Options o) {
  return [=](const std::shared_ptr<Device>& device) -> ModelCase {
    auto model = build(o, device);
    return {name, batch, model->input_shape(), model->flops(),
            [model](const Tensor& x) -> StatusOr<cnn::ModelOutput> {
              TS_ASSIGN_OR_RETURN(Tensor y, (*model)(x));
              return cnn::ModelOutput::of(y);
            }};
  };
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::string models = "unet,resnet50,resnet50_b8";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick") quick = true;
    else if (a == "--models" && i + 1 < argc) models = argv[++i];
  }
  std::printf("# Tessera pipeline benchmarks (%s)\n", cpu_features().to_string().c_str());
  for (DataType dt : {DataType::FLOAT32, DataType::BFLOAT16}) {
    const DataType wt = dt;
    if (models.find("unet") != std::string::npos)
      run_case(make_case("Vanilla UNet 480x640, batch 1", 1,
                         models::UNetOptions{.precision = wt == DataType::FLOAT32 ? models::UNetPrecision::FLOAT32
                                                                                  : models::UNetPrecision::BFLOAT16}),
               dt, quick ? 3 : 8);
    if (models.find("resnet50,") != std::string::npos || models.ends_with("resnet50"))
      run_case(make_case("ResNet-50 224x224, batch 1", 1, models::ResNet50Options{.weights_dtype = wt}),
               dt, quick ? 8 : 32);
    if (models.find("resnet50_b8") != std::string::npos)
      run_case(make_case("ResNet-50 224x224, batch 8", 8,
                                           models::ResNet50Options{.batch = 8, .weights_dtype = wt}),
               dt, quick ? 2 : 6);
  }
  return 0;
}
