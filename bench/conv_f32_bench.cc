// float32 conv2d over a layer file, for comparing two builds of a kernel on
// a drifting VM: 30 rounds of 5 back-to-back calls per layer, median and min
// per call, and the count-weighted sum. Run the two builds one after the
// other, twice, in alternating order, and compare within each pair.
// With --hifi2 each round also times the layer at MathFidelity::HiFi2 (3x3
// stride-1 layers may run Winograd), right after the HiFi4 calls, so the two
// columns share the VM's drift. --workers N opens the device with N worker
// threads: one worker takes the second vCPU's stalls out of a comparison.
// --activation NAME fuses NAME instead of relu (YOLO's convs fuse silu).
// --kernel-time reports the device profiler's time per call instead (the
// launches' kernel-only time, without the host's dispatch: what ONNX
// Runtime's profiler reports for its node, the anchor in
// bench/conv_vs_ort_rounds.py).
//
//   bench_conv_f32 bench/layers/conv_layers.txt [SET] [--hifi2] [--workers N] [--activation NAME] [--kernel-time]
//
// Layer lines as in bench_conv (set name h w c k r stride count [groups]; padding
// r/2, fused ReLU unless --activation, random input, float32 weights).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "harness.h"
#include "tessera/ops/conv2d.h"
#include "tessera/tessera.h"

using namespace tessera;

namespace {

struct Rounds {
  std::vector<double> s;
  double median() {
    std::sort(s.begin(), s.end());
    return s[s.size() / 2];
  }
  double min() { return *std::min_element(s.begin(), s.end()); }
};

double seconds(const std::function<void()>& body) {
  const auto a = std::chrono::steady_clock::now();
  body();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  const bool hifi2 = std::erase(args, "--hifi2") > 0;
  const bool kernel_time = std::erase(args, "--kernel-time") > 0;
  int workers = 0;
  if (auto it = std::find(args.begin(), args.end(), "--workers"); it != args.end()) {
    if (it + 1 == args.end() || (workers = std::atoi((it + 1)->c_str())) <= 0) {
      std::fprintf(stderr, "bench_conv_f32: --workers expects a positive count\n");
      return 2;
    }
    args.erase(it, it + 2);
  }
  UnaryOpType activation = UnaryOpType::RELU;
  if (auto it = std::find(args.begin(), args.end(), "--activation"); it != args.end()) {
    const auto op = it + 1 == args.end() ? std::nullopt : parse_unary_op(*(it + 1));
    if (!op) {
      std::fprintf(stderr, "bench_conv_f32: --activation expects an activation name (relu, silu, ...)\n");
      return 2;
    }
    activation = *op;
    args.erase(it, it + 2);
  }
  if (args.empty() || args.size() > 2) {
    std::fprintf(stderr,
                 "usage: bench_conv_f32 LAYERS [SET] [--hifi2] [--workers N] [--activation NAME] [--kernel-time]\n");
    return 2;
  }
  if (hifi2 && kernel_time) {
    std::fprintf(stderr, "bench_conv_f32: --kernel-time times one fidelity; leave out --hifi2\n");
    return 2;
  }
  const std::vector<bench::ConvLayer> layers =
      bench::read_conv_layers(args[0], "bench_conv_f32", args.size() == 2 ? args[1] : "");
  auto dev = bench::value_or_die(open_device({.worker_threads = workers}));
  if (hifi2)
    std::printf("| layer | HiFi4 median ms | GFLOP/s | min ms | HiFi2 median ms | GFLOP/s | min ms | HiFi4 / HiFi2 |\n"
                "|---|---|---|---|---|---|---|---|\n");
  else
    std::printf("| layer | median ms | GFLOP/s | min ms |\n|---|---|---|---|\n");
  double total_s = 0, total_gflop = 0, total2_s = 0;
  for (const bench::ConvLayer& l : layers) {
    const uint32_t h = l.h, w = l.w, c = l.c, k = l.k, r = l.r, s = l.stride, cg = l.c / l.groups;
    const int count = l.count;
    const std::string& name = l.name;
    Conv2dParams p;
    p.input_height = h, p.input_width = w, p.in_channels = c, p.out_channels = k, p.groups = l.groups;
    p.kernel_size = {r, r}, p.stride = {s, s};
    p.with_padding(r / 2, r / 2);
    p.activation = {activation};
    std::vector<float> xv(uint64_t{h} * w * c), wv(uint64_t{k} * cg * r * r);
    uint32_t state = 12345;
    auto next = [&] { return (state = state * 1664525u + 1013904223u) >> 8; };
    for (float& v : xv) v = static_cast<float>(next()) / (1 << 24);
    for (float& v : wv) v = (static_cast<float>(next()) / (1 << 24) - 0.5f) * 0.1f;
    Tensor x = bench::value_or_die(to_device(bench::value_or_die(Tensor::from_vector(xv, Shape{1, h, w, c}, DataType::FLOAT32)), *dev));
    Tensor wt = bench::value_or_die(Tensor::from_vector(wv, Shape{k, cg, r, r}, DataType::FLOAT32));
    const Conv2dConfig cfg{.weights_dtype = DataType::FLOAT32};
    Conv2dConfig cfg2 = cfg;
    cfg2.compute_config.math_fidelity = MathFidelity::HiFi2;
    Conv2dResult first = bench::value_or_die(conv2d(x, wt, std::nullopt, p, cfg));
    Conv2dResult second = bench::value_or_die(conv2d(x, wt, std::nullopt, p, cfg2));
    auto calls = [&](const Conv2dResult& r, const Conv2dConfig& c) {
      return [&] {
        for (int i = 0; i < 5; ++i) bench::value_or_die(conv2d(x, r.weights, p, c));
        CHECK_OK(synchronize_device(*dev));
      };
    };
    Rounds a, b;
    for (int round = -2; round < 30; ++round) {  // two warm-up rounds
      if (kernel_time && round == 0) CHECK_OK(enable_profiler(*dev));
      const double ta = seconds(calls(first, cfg)), tb = hifi2 ? seconds(calls(second, cfg2)) : 0;
      if (round >= 0) a.s.push_back(ta / 5), b.s.push_back(tb / 5);
    }
    if (kernel_time) {  // per call: the sum of its launches' kernel-only times
      const DeviceProfile profile = bench::value_or_die(read_profile(*dev));
      CHECK_OK(disable_profiler(*dev));
      a.s = bench::kernel_seconds_per_call(profile, 30 * 5);
      if (a.s.empty()) {
        std::fprintf(stderr, "bench_conv_f32: the profiler recorded %zu launches for %d calls\n", profile.ops.size(),
                     30 * 5);
        return 1;
      }
    }
    const double gflop = 2.0 * k * cg * r * r * first.output_height * first.output_width / 1e9;
    const double ma = a.median();
    if (hifi2) {
      const double mb = b.median();
      std::printf("| %s | %.3f | %.0f | %.3f | %.3f | %.0f | %.3f | %.2fx |\n", name.c_str(), ma * 1e3, gflop / ma,
                  a.min() * 1e3, mb * 1e3, gflop / mb, b.min() * 1e3, ma / mb);
      total2_s += mb * count;
    } else {
      std::printf("| %s | %.3f | %.0f | %.3f |\n", name.c_str(), ma * 1e3, gflop / ma, a.min() * 1e3);
    }
    total_s += ma * count;
    total_gflop += gflop * count;
  }
  std::printf("\nweighted by count: %.1f ms, %.0f GFLOP/s\n", total_s * 1e3, total_gflop / total_s);
  if (hifi2)
    std::printf("HiFi2: %.1f ms, %.0f GFLOP/s (direct-conv FLOPs over time)\n", total2_s * 1e3, total_gflop / total2_s);
  return 0;
}
