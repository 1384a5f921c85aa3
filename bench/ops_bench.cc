// Non-conv2d ops over layer shapes of ResNet-50, MobileNetV2, the Vanilla UNet
// and a YOLO-style detector (bench/layers/op_layers.txt), float32 and
// bfloat16, each beside its floor measured in the same run: memory-bound ops
// against the two-thread copy bandwidth measured just before the row (bytes
// read + written per call),
// transposed convolutions against the FP32 FMA / bfloat16 peaks (AMX's where the CPU has it). With --ort,
// ONNX Runtime's time for the same one-layer model (bench/ops_vs_ort.sh)
// is printed beside Tessera's float32 time. With --kernels each row ends
// with the kernels one call of each dtype launched (from the device profiler).
// By default each call is an eager launch (validation, allocation, program
// cache lookup, enqueue); with --replay the ten calls of a repetition are
// captured once in a trace and replayed back to back, as a model's launches
// run in the Pipeline. With --kernel-time each call's time is the device
// profiler's: the sum of its launches' kernel-only times, without the host's
// dispatch (on two vCPUs the host thread that dispatches eager calls shares
// them with the kernels' threads) or the queue's hand-offs. That is what
// ONNX Runtime's column reports for its node (its profiler's kernel time).
//
//   bench_ops [--layers bench/layers/op_layers.txt] [--ort ORT_TIMES] [--quick] [--kernels] [--replay]
//             [--kernel-time]
#include <fmt/format.h>

#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "harness.h"
#include "peak.h"
#include "tessera/base/cpu_features.h"
#include "tessera/device/profiler.h"
#include "tessera/ops/conv2d.h"
#include "tessera/ops/conv_transpose2d.h"
#include "tessera/ops/eltwise.h"
#include "tessera/ops/manipulation.h"
#include "tessera/ops/matmul.h"
#include "tessera/ops/pool2d.h"
#include "tessera/ops/upsample.h"
#include "tessera/tessera.h"

namespace {

using namespace tessera;
using bench::time_it;

// Each row and dtype runs this long before it is timed (bench::settle).
constexpr double kSettleSeconds = 0.15;
using bench::value_or_die;

struct Layer {
  std::string set, name, op;
  uint32_t h, w, c, p1, p2, p3;
};

// Milliseconds to three places, four under 0.1 ms (where one place in the
// third is 10-30% of a small launch).
std::string format_ms(double ms) { return ms < 0.1 ? fmt::format("{:.4f}", ms) : fmt::format("{:.3f}", ms); }

std::vector<Layer> read_layers(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "bench_ops: cannot read %s\n", path.c_str());
    std::exit(1);
  }
  std::vector<Layer> v;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream f(line);
    Layer l;
    if (!(f >> l.set >> l.name >> l.op >> l.h >> l.w >> l.c >> l.p1 >> l.p2 >> l.p3)) {
      std::fprintf(stderr, "bench_ops: bad line: %s\n", line.c_str());
      std::exit(1);
    }
    // Checked here, before the measurements and the table's first row start; the
    // ops prepare() builds (its own fallback error stays for a name added here only).
    static const std::set<std::string> kOps = {"add_relu", "silu",    "maxpool", "gap",      "dwconv",    "convT",
                                               "upnearest", "upbilinear", "concat", "typecast", "image_in", "permute5",
                                               "rowconcat", "fc"};
    if (!kOps.count(l.op)) {
      std::string known;
      for (const std::string& op : kOps) known += " " + op;
      std::fprintf(stderr, "bench_ops: unknown op %s in line: %s (expected one of:%s)\n", l.op.c_str(), line.c_str(),
                   known.c_str());
      std::exit(1);
    }
    v.push_back(l);
  }
  return v;
}

Tensor device_tensor(Device& dev, Shape s, DataType dt) {
  auto v = std::vector<float>(s.volume());
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 97) * 0.01f - 0.4f;
  return value_or_die(to_device(value_or_die(Tensor::from_vector(v, s, dt)), dev));
}

// One layer, prepared: `run` enqueues one call; bytes and flops per call.
struct Prepared {
  std::function<void()> run;
  double bytes = 0, flops = 0;
};

Prepared prepare(Device& dev, const Layer& l, DataType dt) {
  const double es = element_size(dt);
  const Shape x_shape{1, l.h, l.w, l.c};
  Tensor x = device_tensor(dev, x_shape, dt);
  const double x_bytes = es * x_shape.volume();
  Prepared p;
  if (l.op == "add_relu") {
    Tensor y = device_tensor(dev, x_shape, dt);
    p.run = [=] { (void)value_or_die(add(x, y, {.activation = UnaryWithParam{UnaryOpType::RELU}})); };
    p.bytes = 3 * x_bytes;
  } else if (l.op == "silu") {
    p.run = [=] { (void)value_or_die(unary(x, {UnaryOpType::SILU})); };
    p.bytes = 2 * x_bytes;
  } else if (l.op == "maxpool") {
    Pool2dParams pp;
    pp.input_height = l.h, pp.input_width = l.w, pp.channels = l.c;
    pp.kernel_size = {l.p1, l.p1}, pp.stride = {l.p2, l.p2}, pp.padding = {l.p3, l.p3};
    p.run = [=] { (void)value_or_die(max_pool2d(x, pp)); };
    p.bytes = x_bytes + es * l.c * pp.output_height() * pp.output_width();
  } else if (l.op == "gap") {
    p.run = [=] { (void)value_or_die(global_avg_pool2d(x)); };
    p.bytes = x_bytes + es * l.c;
  } else if (l.op == "dwconv") {
    Conv2dParams cp;
    cp.input_height = l.h, cp.input_width = l.w, cp.in_channels = cp.out_channels = cp.groups = l.c;
    cp.kernel_size = {l.p1, l.p1}, cp.stride = {l.p2, l.p2};
    cp.with_padding(l.p1 / 2, l.p1 / 2);
    cp.activation = {UnaryOpType::RELU6};
    Tensor w = value_or_die(Tensor::from_vector(std::vector<float>(uint64_t{l.c} * l.p1 * l.p1, 0.1f),
                                                Shape{l.c, 1, l.p1, l.p1}, DataType::FLOAT32));
    const Conv2dConfig cfg{.weights_dtype = dt};
    auto prepared = value_or_die(conv2d(x, w, std::nullopt, cp, cfg)).weights;
    p.run = [=] { (void)value_or_die(conv2d(x, prepared, cp, cfg)); };
    p.bytes = x_bytes + es * l.c * cp.output_height() * cp.output_width();
    p.flops = static_cast<double>(cp.flops());
  } else if (l.op == "convT") {
    ConvTranspose2dParams tp;
    tp.input_height = l.h, tp.input_width = l.w, tp.in_channels = l.c, tp.out_channels = l.p3;
    tp.kernel_size = {l.p1, l.p1}, tp.stride = {l.p2, l.p2};
    Tensor w = value_or_die(Tensor::from_vector(std::vector<float>(uint64_t{l.c} * l.p3 * l.p1 * l.p1, 0.01f),
                                                Shape{l.c, l.p3, l.p1, l.p1}, DataType::FLOAT32));
    const Conv2dConfig cfg{.weights_dtype = dt};
    auto prepared = value_or_die(conv_transpose2d(x, w, std::nullopt, tp, cfg)).weights;
    p.run = [=] { (void)value_or_die(conv_transpose2d(x, prepared, tp, cfg)); };
    p.bytes = x_bytes + es * l.p3 * tp.output_height() * tp.output_width();
    p.flops = static_cast<double>(tp.flops());
  } else if (l.op == "upnearest" || l.op == "upbilinear") {
    const UpsampleParams up{.scale_h = float(l.p1), .scale_w = float(l.p1),
                            .mode = l.op == "upnearest" ? UpsampleMode::NEAREST : UpsampleMode::BILINEAR};
    p.run = [=] { (void)value_or_die(upsample(x, up)); };
    p.bytes = x_bytes * (1 + l.p1 * l.p1);
  } else if (l.op == "concat") {
    Tensor y = device_tensor(dev, Shape{1, l.h, l.w, l.p1}, dt);
    p.run = [=] {
      const Tensor in[] = {x, y};
      (void)value_or_die(concat(in, 3));
    };
    p.bytes = 2 * es * l.h * l.w * (l.c + l.p1);
  } else if (l.op == "typecast") {
    // A model's float32 input cast for bfloat16 compute (the f32 columns), and
    // back (the bf16 columns).
    const DataType to = dt == DataType::FLOAT32 ? DataType::BFLOAT16 : DataType::FLOAT32;
    p.run = [=] { (void)value_or_die(typecast(x, to)); };
    p.bytes = 6.0 * x_shape.volume();
  } else if (l.op == "image_in") {
    // A model's (1, c, h, w) image to NHWC in the other dtype, in one launch
    // (permute with a dtype): float32 -> bfloat16 for bfloat16 compute (the
    // f32 columns), and back (the bf16 columns).
    const DataType to = dt == DataType::FLOAT32 ? DataType::BFLOAT16 : DataType::FLOAT32;
    Tensor img = device_tensor(dev, Shape{1, l.c, l.h, l.w}, dt);
    p.run = [=] {
      const int perm[] = {0, 2, 3, 1};
      (void)value_or_die(permute(img, perm, to));
    };
    p.bytes = 6.0 * img.shape().volume();
  } else if (l.op == "permute5") {
    // A detection head's (1, h, w, anchors, outputs) -> (1, anchors, h, w, outputs).
    Tensor t = device_tensor(dev, Shape{1, l.h, l.w, l.p1, l.c}, dt);
    p.run = [=] {
      const int perm[] = {0, 3, 1, 2, 4};
      (void)value_or_die(permute(t, perm));
    };
    p.bytes = 2 * es * l.h * l.w * l.p1 * l.c;
  } else if (l.op == "rowconcat") {
    // A detector's three heads' (1, boxes, outputs) along the boxes: p1
    // anchors per pixel of h x w, h/2 x w/2 and h/4 x w/4 maps.
    const uint32_t boxes = l.h * l.w * l.p1;
    Tensor a = device_tensor(dev, Shape{1, boxes, l.c}, dt), b = device_tensor(dev, Shape{1, boxes / 4, l.c}, dt),
           c = device_tensor(dev, Shape{1, boxes / 16, l.c}, dt);
    p.run = [=] {
      const Tensor in[] = {a, b, c};
      (void)value_or_die(concat(in, 1));
    };
    p.bytes = 2 * es * (boxes + boxes / 4 + boxes / 16) * l.c;
  } else if (l.op == "fc") {
    Tensor a = device_tensor(dev, Shape{1, l.c}, dt);
    // (N, K) weights, as a classifier head's Gemm (transB = 1) from PyTorch.
    Tensor w = device_tensor(dev, Shape{l.p1, l.c}, dt);
    Tensor b = device_tensor(dev, Shape{l.p1}, dt);
    p.run = [=] { (void)value_or_die(linear(a, w, b, {.transpose_b = true})); };
    p.bytes = es * (double(l.c) * l.p1 + l.c + 2 * l.p1);
    p.flops = 2.0 * l.c * l.p1;
  } else {
    std::fprintf(stderr, "bench_ops: unknown op %s\n", l.op.c_str());
    std::exit(1);
  }
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  std::string layers_path = "bench/layers/op_layers.txt", ort_path;
  int reps = 21;
  bool kernels = false, replay = false, kernel_time = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick") reps = 5;
    else if (a == "--layers" && i + 1 < argc) layers_path = argv[++i];
    else if (a == "--ort" && i + 1 < argc) ort_path = argv[++i];
    else if (a == "--kernels") kernels = true;
    else if (a == "--replay") replay = true;
    else if (a == "--kernel-time") kernel_time = true;
    else {
      std::fprintf(stderr,
                   "bench_ops: unknown argument %s\nusage: bench_ops [--layers FILE] [--ort ORT_TIMES] [--quick] "
                   "[--kernels] [--replay] [--kernel-time]\n",
                   a.c_str());
      return 2;
    }
  }
  const auto layers = read_layers(layers_path);
  const auto ort = ort_path.empty() ? std::map<std::string, double>{} : bench::read_ort(ort_path);
  const int threads = static_cast<int>(std::thread::hardware_concurrency());
  ThreadPool pool(threads);
  // 256 MB per buffer: in two core complexes (two 32 MB L3s) a 64 MB copy
  // read up to 99 GB/s.
  bench::BandwidthProbe probe(size_t{256} << 20);
  const double run_copy = probe.copy_gbs(pool, reps);
  std::string_view bf16_name;
  const double fma = bench::fma_f32_peak_gflops(threads), dot = bench::bf16_peak_gflops(threads, &bf16_name);
  std::printf("# Tessera op benchmarks (%s)\n\n", tessera::cpu_features().to_string().c_str());
  std::printf("Measured in this run on %d threads: copy bandwidth (read+write) %.1f GB/s, FP32 FMA peak %.0f GFLOP/s, "
              "bf16 peak (%.*s) %.0f GFLOP/s.%s\n\n",
              threads, run_copy, fma, static_cast<int>(bf16_name.size()), bf16_name.data(), dot,
              ort.empty() ? "" : " ONNX Runtime: onnxruntime-node 1.30.0, CPU, 2 intra-op threads, NCHW float32, "
                                 "median of its profiled kernel time (layout reorders left out).");
  if (replay) std::printf("Timed as traced replays of ten calls each (`--replay`).\n\n");
  if (kernel_time)
    std::printf("Times are kernel-only: the device profiler's launch times per call, medians (`--kernel-time`).\n\n");
  std::printf("Each memory-bound row's %% is of the copy bandwidth measured just before it (`copy GB/s`): a VM's "
              "bandwidth moves within seconds (the Zen 5 VM moves its two vCPUs between one core complex and two, "
              "which changes it by half). `round trip` is a cache line's round trip between the two cores before and "
              "after the row (Zen 5: about 100 ns in one complex, about 500 ns in two).\n\n");
  std::printf("| set | layer | f32 ms | f32 %% of floor | bf16 ms | bf16 %% of floor |%s copy GB/s | round trip ns |\n",
              ort.empty() ? "" : " ORT f32 ms | f32 vs ORT |");
  std::printf("|---|---|---|---|---|---|%s---|---|\n", ort.empty() ? "" : "---|---|");
  const std::vector<int>& cpus = physical_core_cpus();
  auto round_trip = [&]() -> std::string {
    return cpus.size() >= 2 ? fmt::format("{:.0f}", bench::core_round_trip_ns(cpus[0], cpus[1])) : "-";
  };
  auto dev = value_or_die(open_device({.trace_region_size = replay ? size_t{64} << 20 : 0}));
  for (const Layer& l : layers) {
    std::printf("| %s | %s |", l.set.c_str(), l.name.c_str());
    const std::string rt_before = round_trip();
    const double row_copy = probe.copy_gbs(pool, 7, 1);
    double f32_s = 0;
    std::string launched;
    for (DataType dt : {DataType::FLOAT32, DataType::BFLOAT16}) {
      Prepared p = prepare(*dev, l, dt);
      p.run();
      CHECK_OK(synchronize_device(*dev));
      bench::Timing t;
      std::optional<TraceId> tid;
      if (replay) {
        tid = value_or_die(begin_trace_capture(*dev, 0));
        for (int i = 0; i < 10; ++i) p.run();
        CHECK_OK(end_trace_capture(*dev, *tid, 0));
        CHECK_OK(execute_trace(*dev, *tid, 0, true));
        bench::settle(kSettleSeconds, [&] { CHECK_OK(execute_trace(*dev, *tid, 0, true)); });
        t = time_it(reps, [&] { CHECK_OK(execute_trace(*dev, *tid, 0, true)); });
      } else {
        auto ten_calls = [&] {
          for (int i = 0; i < 10; ++i) p.run();
          CHECK_OK(synchronize_device(*dev));
        };
        bench::settle(kSettleSeconds, ten_calls);
        t = time_it(reps, ten_calls);
      }
      double s = t.median_s / 10;
      if (kernel_time) {  // the same calls again, profiled: per call, the sum of its launches' durations
        CHECK_OK(enable_profiler(*dev));
        const int calls = reps * 10;
        if (tid) {
          for (int r = 0; r < reps; ++r) CHECK_OK(execute_trace(*dev, *tid, 0, true));
        } else {
          for (int i = 0; i < calls; ++i) p.run();
        }
        const DeviceProfile profile = value_or_die(read_profile(*dev));
        CHECK_OK(disable_profiler(*dev));
        std::vector<double> per = bench::kernel_seconds_per_call(profile, static_cast<size_t>(calls));
        if (per.empty()) {
          std::fprintf(stderr, "bench_ops: %s recorded %zu launches for %d calls\n", l.name.c_str(), profile.ops.size(),
                       calls);
          return 1;
        }
        std::sort(per.begin(), per.end());
        s = per[per.size() / 2];
      }
      if (tid) CHECK_OK(release_trace(*dev, *tid));
      if (dt == DataType::FLOAT32) f32_s = s;
      // Compute-bound layers against the compute peak, the rest against copy bandwidth.
      const bool compute = l.op == "convT";
      const double pct = compute ? 100 * p.flops / s / 1e9 / (dt == DataType::FLOAT32 ? fma : dot)
                                 : 100 * p.bytes / s / 1e9 / row_copy;
      std::printf(" %s | %.0f%% %s |", format_ms(s * 1e3).c_str(), pct, compute ? "peak" : "bw");
      if (kernels) {
        CHECK_OK(enable_profiler(*dev));
        p.run();
        const DeviceProfile profile = value_or_die(read_profile(*dev));
        CHECK_OK(disable_profiler(*dev));
        launched += std::string(launched.empty() ? " " : " / ") + std::string(data_type_name(dt)) + ":";
        for (const OpTiming& op : profile.ops) launched += " " + op.kernel_name;
      }
    }
    if (!ort.empty()) {
      auto it = ort.find(l.set + "." + l.name);
      if (it != ort.end()) std::printf(" %.3f | %.2fx |", it->second, it->second / 1e3 / f32_s);  // whole microseconds
      else std::printf(" - | - |");
    }
    std::printf(" %.1f | %s / %s |", row_copy, rt_before.c_str(), round_trip().c_str());
    std::printf("%s\n", launched.empty() ? "" : (launched + " |").c_str());
  }
  return 0;
}
