// The Vanilla UNet at 480x640, batch 1, beside ONNX Runtime running the same
// ONNX file in the same run (bench/unet_vs_ort.sh drives both):
//
//   bench_unet export DIR    writes DIR/unet.onnx (the reference model with
//                            fixed-seed weights) and DIR/input.bin (NCHW float32)
//   bench_unet compare DIR   reads DIR/ort_output.bin and DIR/ort.txt (ORT's
//                            median / min / max ms), loads the weights back from
//                            DIR/unet.onnx and runs each Tessera configuration:
//                            PCC against ORT's output, device-only time
//                            (median of trace replays; kernel-only time from the
//                            profiler), end-to-end FPS (2 queues + trace Pipeline,
//                            host tensors in and out).
//   bench_unet verify        every layer configuration of the original's table at
//                            480x640 on wormhole_b0 against the reference kernel.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>

#include "harness.h"
#include "tessera/import/onnx.h"
#include "tessera/import/onnx_weights.h"
#include "tessera/cnn/pipeline.h"
#include "tessera/cnn/testing.h"
#include "tessera/device/profiler.h"
#include "vanilla_unet/reference_onnx.h"
#include "vanilla_unet/unet.h"

namespace {

using namespace tessera;
using bench::value_or_die;
constexpr uint32_t kH = 480, kW = 640;

std::vector<float> read_floats(const std::string& path, size_t n) {
  std::ifstream in(path, std::ios::binary);
  std::vector<float> v(n);
  if (!in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * 4))) {
    std::fprintf(stderr, "bench_unet: cannot read %zu floats from %s\n", n, path.c_str());
    std::exit(1);
  }
  return v;
}

int do_export(const std::string& dir) {
  CHECK_OK(models::write_unet_onnx(models::unet_random_state_dict(0), dir + "/unet.onnx", 1, kH, kW));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(3 * kH * kW);
  for (float& v : x) v = normal(rng);
  std::ofstream(dir + "/input.bin", std::ios::binary)
      .write(reinterpret_cast<const char*>(x.data()), static_cast<std::streamsize>(x.size() * 4));
  return 0;
}

struct Config {
  const char* name;
  const char* descriptor;
  models::UNetPrecision precision;
  bool sharded;
};

int do_compare(const std::string& dir, int frames) {
  const std::vector<float> input = read_floats(dir + "/input.bin", 3 * kH * kW);
  const std::vector<float> ort_out = read_floats(dir + "/ort_output.bin", kH * kW);
  double ort_ms = 0, ort_min = 0, ort_max = 0;
  {
    std::ifstream t(dir + "/ort.txt");
    if (!(t >> ort_ms >> ort_min >> ort_max)) {
      std::fprintf(stderr, "bench_unet: cannot read %s/ort.txt\n", dir.c_str());
      return 1;
    }
  }
  const cnn::WeightMap sd = value_or_die(importer::load_onnx_initializers(dir + "/unet.onnx"));
  std::printf("ONNX Runtime (onnxruntime-node, CPU EP, 2 threads), float32: %.1f ms median (min %.1f, max %.1f), "
              "%.2f FPS\n\n",
              ort_ms, ort_min, ort_max, 1e3 / ort_ms);
  std::printf("| Tessera configuration | descriptor | PCC vs ORT | device-only ms (FPS) | kernel-only ms | "
              "end-to-end FPS | device-only speed vs ORT |\n|---|---|---|---|---|---|---|\n");
  const Config configs[] = {
      {"float32", "cpu", models::UNetPrecision::FLOAT32, false},
      {"bfloat16", "cpu", models::UNetPrecision::BFLOAT16, false},
      {"original bfloat8_b table, DRAM rows", "cpu", models::UNetPrecision::ORIGINAL_BFLOAT8_B, false},
      {"original bfloat8_b table, sharded (§4.2)", "wormhole_b0", models::UNetPrecision::ORIGINAL_BFLOAT8_B, true},
  };
  std::vector<std::string> notes;
  for (const Config& c : configs) {
    auto device = value_or_die(open_device({.descriptor = c.descriptor, .l1_small_size = 12 * 8192,
                                            .trace_region_size = 1 << 20, .num_command_queues = 2}));
    auto unet = std::shared_ptr<models::VanillaUNet>(value_or_die(models::VanillaUNet::create(
        {.precision = c.precision, .sharded = c.sharded, .state_dict = sd}, device)));
    const DataType dt = c.precision == models::UNetPrecision::FLOAT32 ? DataType::FLOAT32 : DataType::BFLOAT16;
    // The original's input: channels-first rows (1, 1, 3, H*W).
    const Tensor host = value_or_die(Tensor::from_vector(input, unet->chw_input_shape(), dt));
    // The original's input configs when sharded (64 L1 shards, 12 DRAM shards).
    const MemoryConfig l1_in = c.sharded ? value_or_die(unet->l1_input_memory_config(*device)) : DRAM_MEMORY_CONFIG;
    const MemoryConfig dram_in = c.sharded ? value_or_die(unet->dram_input_memory_config(*device)) : DRAM_MEMORY_CONFIG;
    Tensor x = value_or_die(to_device(host, *device, l1_in));
    Tensor y = value_or_die((*unet)(x));
    const std::vector<float> got = value_or_die(value_or_die(y.cpu()).to_vector());
    const double pcc = cnn::comp_pcc(ort_out, got, 0.0).pcc;
    // Device-only: back-to-back trace replays with the input in place.
    const TraceId tid = value_or_die(begin_trace_capture(*device, 0));
    (void)value_or_die((*unet)(x));
    CHECK_OK(end_trace_capture(*device, tid, 0));
    CHECK_OK(execute_trace(*device, tid, 0, true));
    const bench::Timing replay = bench::time_it(5, [&] { CHECK_OK(execute_trace(*device, tid, 0, true)); }, 1);
    CHECK_OK(enable_profiler(*device));
    CHECK_OK(execute_trace(*device, tid, 0, true));
    const DeviceProfile profile = value_or_die(read_profile(*device));
    const double kernel_ms = profile.total_us() / 1e3;
    std::map<std::string, std::pair<int, double>> by_op;  // op -> (launches, ms)
    for (const OpTiming& op : profile.ops) {
      auto& e = by_op[op.key.substr(0, op.key.find(':'))];
      ++e.first;
      e.second += op.duration_us() / 1e3;
    }
    std::string breakdown;
    for (const auto& [op, e] : by_op) breakdown += fmt::format(" {} {:.1f} ms ({});", op, e.second, e.first);
    notes.push_back(fmt::format("- {} on {}: kernel time by op:{}", c.name, c.descriptor, breakdown));
    CHECK_OK(disable_profiler(*device));
    CHECK_OK(release_trace(*device, tid));
    // End to end: the recommended Pipeline (2 queues + trace), host in and out.
    auto model = [unet](const Tensor& in) -> StatusOr<cnn::ModelOutput> {
      TS_ASSIGN_OR_RETURN(Tensor out, (*unet)(in));
      return cnn::ModelOutput::of(out);
    };
    auto pipe = value_or_die(cnn::create_pipeline_from_config({.use_trace = true, .num_command_queues = 2}, model,
                                                              *device, l1_in, dram_in));
    CHECK_OK(pipe->compile(host));
    std::vector<Tensor> inputs(static_cast<size_t>(frames), host);
    CHECK_OK(pipe->preallocate_output_tensors_on_host(inputs.size()));
    const bench::Timing e2e = bench::time_it(3, [&] {
      CHECK_OK(pipe->enqueue(inputs));
      (void)value_or_die(pipe->pop_all());
    }, 1);
    CHECK_OK(pipe->cleanup());
    const double dev_ms = replay.median_s * 1e3;
    std::printf("| %s | %s | %.6f | %.1f (%.2f) | %.1f | %.2f | %.2fx |\n", c.name, c.descriptor, pcc, dev_ms,
                1e3 / dev_ms, kernel_ms, frames / e2e.median_s, ort_ms / dev_ms);
    CHECK_OK(close_device(*device));
  }
  std::printf("\n");
  for (const std::string& n : notes) std::printf("%s\n", n.c_str());
  return 0;
}

// Every layer configuration of the original's table at full size on
// wormhole_b0, against the reference kernel (double precision): the
// per-layer check of the test suite (which runs at 32x48) at 480x640.
int do_verify() {
  auto device = value_or_die(open_device({.descriptor = "wormhole_b0", .l1_small_size = 12 * 8192}));
  const auto layers = value_or_die(models::unet_conv_configurations(models::unet_random_state_dict(0), {}));
  std::printf("| layer | input | PCC vs reference (>= 0.999) |\n|---|---|---|\n");
  double worst = 1.0;
  for (const models::UNetConvLayer& l : layers) {
    const cnn::Conv2dConfiguration& c = l.configuration;
    const double pcc = value_or_die(cnn::verify_conv2d_from_config(c, device, 0.999));
    worst = std::min(worst, pcc);
    std::printf("| %s | %ux%ux%u | %.6f |\n", l.name.c_str(), c.input_height, c.input_width, c.in_channels, pcc);
    std::fflush(stdout);
  }
  std::printf("\nlowest: %.6f\n", worst);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "verify") return do_verify();
  const std::string cmd = argc > 2 ? argv[1] : "";
  if (cmd == "export") return do_export(argv[2]);
  if (cmd == "compare") return do_compare(argv[2], argc > 3 ? std::atoi(argv[3]) : 8);
  std::fprintf(stderr, "usage: bench_unet export DIR | bench_unet compare DIR [FRAMES] | bench_unet verify\n");
  return 2;
}
