// conv2d over the 3x3 and 1x1 layer shapes of ResNet-50 (224x224, batch 1)
// and the Vanilla UNet (480x640, batch 1): GFLOP/s per layer and summed over
// each layer set, as a share of the FP32 FMA / BF16 dot-product peaks
// measured in the same run. Each call is the whole op: output allocation,
// dispatch, kernel (weights prepared beforehand). The tables time calls back
// to back, 10 per synchronize, as layers run inside a model; the line under
// each table gives the same set synchronised after every call. The last
// Tessera column is float32 at math fidelity LoFi (bfloat16 operands on
// AMX CPUs, Winograd 3x3 elsewhere): not exact, so not the float32 target.
// The FMA peak is also measured right before and right after each layer's
// float32 timing, and the float32 share is given of their mean too: a VM
// whose speed changes within minutes (bench/RESULTS.md) otherwise reads a
// layer from a slow moment against a peak from a fast one, or the reverse.
//
//   bench_conv [--layers bench/layers/conv_layers.txt] [--ort ORT_TIMES] [--quick]
//
// ORT_TIMES holds "<set>.<name>\t<median ms>" lines from bench/ort/time_models.js
// (bench/conv_vs_ort.sh makes them in the same run); with it, each table gets
// ONNX Runtime's float32 time for the same one-layer model.
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "tessera/base/cpu_features.h"
#include "tessera/ops/conv2d.h"
#include "tessera/tessera.h"

#include "peak.h"

namespace {

using namespace tessera;
using bench::read_ort;

using Layer = bench::ConvLayer;
std::vector<Layer> read_layers(const std::string& path) { return bench::read_conv_layers(path, "bench_conv"); }

struct Variant {
  const char* name;
  DataType act, weights;
  MathFidelity fidelity = MathFidelity::HiFi4;
};
// float32 at LoFi: bfloat16 operands on AMX CPUs, Winograd for 3x3 stride-1
// layers elsewhere (conv2d.cc, lowers_to_bf16 and allows_winograd).
const Variant kVariants[] = {{"f32", DataType::FLOAT32, DataType::FLOAT32},
                             {"bf16", DataType::BFLOAT16, DataType::BFLOAT16},
                             {"bf16 act + bfp8 w", DataType::BFLOAT16, DataType::BFLOAT8_B},
                             {"f32 LoFi", DataType::FLOAT32, DataType::FLOAT32, MathFidelity::LoFi}};
constexpr int kNumVariants = static_cast<int>(std::size(kVariants));

// Seconds per call of one layer in one variant: back to back (10 calls per
// synchronize, as layers run inside a model) and synchronised after each call.
struct LayerTime {
  double back_to_back, synchronous;
};
LayerTime time_layer(Device& dev, const Layer& l, const Variant& v, int reps) {
  Conv2dParams p;
  p.input_height = l.h;
  p.input_width = l.w;
  p.in_channels = l.c;
  p.out_channels = l.k;
  p.kernel_size = {l.r, l.r};
  p.groups = l.groups;
  p.stride = {l.stride, l.stride};
  p.with_padding(l.r / 2, l.r / 2);
  p.activation = {UnaryOpType::RELU};
  Tensor x = allocate_tensor_on_host({Shape{1, l.h, l.w, l.c}, v.act, Layout::ROW_MAJOR});
  const uint32_t cg = l.c / l.groups;
  Tensor w = Tensor::from_vector(std::vector<float>(uint64_t{l.k} * cg * l.r * l.r, 0.01f), Shape{l.k, cg, l.r, l.r},
                                 DataType::FLOAT32)
                 .value();
  Tensor dx = to_device(x, dev).value();
  Conv2dConfig cfg{.weights_dtype = v.weights};
  cfg.compute_config.math_fidelity = v.fidelity;
  Conv2dResult first = conv2d(dx, w, std::nullopt, p, cfg).value();
  (void)synchronize_device(dev);
  auto sync = bench::time_it(reps, [&] {
    Conv2dResult r = conv2d(dx, first.weights, p, cfg).value();
    (void)synchronize_device(dev);
  });
  auto ten_calls = [&] {
    for (int i = 0; i < 10; ++i) Conv2dResult r = conv2d(dx, first.weights, p, cfg).value();
    (void)synchronize_device(dev);
  };
  bench::settle(0.1, ten_calls);  // the device's threads spread over the cores first (harness.h)
  auto b2b = bench::time_it(reps, ten_calls);
  return {b2b.median_s / 10, sync.median_s};
}

// The FMA peak of the moment: a short run of bench_peak's loop (about 10 ms).
double peak_now(int threads) { return bench::fma_f32_peak_gflops(threads, 1'000'000, 3); }

void run_set(Device& dev, const char* title, const std::vector<Layer>& layers, const std::map<std::string, double>& ort,
             double f32_peak, double bf16_peak, int reps, int threads) {
  const bool with_ort = !ort.empty();
  std::printf("\n## %s\n\n| layer | GFLOP | f32 GFLOP/s (%% FMA peak) | FMA peak beside it (%% of it) | bf16 GFLOP/s (%% "
              "bf16 peak) | bf16 act + bfp8 w GFLOP/s | f32 LoFi GFLOP/s |%s\n|---|---|---|---|---|---|---|%s\n",
              title, with_ort ? " ONNX Runtime f32 GFLOP/s | f32 vs ORT |" : "", with_ort ? "---|---|" : "");
  double total_flops = 0, total_s[kNumVariants] = {}, total_sync[kNumVariants] = {}, total_ort = 0;
  double total_peak_s = 0;  // sum of float32 seconds x the peak beside them: GFLOP the FMAs could have done
  for (const Layer& l : layers) {
    const uint32_t pad = l.r / 2;
    const double oh = (l.h + 2 * pad - l.r) / l.stride + 1, ow = (l.w + 2 * pad - l.r) / l.stride + 1;
    const double flops = 2.0 * oh * ow * l.k * (l.c / l.groups) * l.r * l.r;
    double s[kNumVariants], local_peak = 0;
    for (int v = 0; v < kNumVariants; ++v) {
      const double before = v == 0 ? peak_now(threads) : 0;
      LayerTime t = time_layer(dev, l, kVariants[v], reps);
      if (v == 0) local_peak = (before + peak_now(threads)) / 2;
      s[v] = t.back_to_back;
      total_s[v] += s[v] * l.count;
      total_sync[v] += t.synchronous * l.count;
    }
    total_flops += flops * l.count;
    total_peak_s += s[0] * l.count * local_peak;
    std::printf("| %s (x%d) | %.3f | %.0f (%.0f%%) | %.0f (%.0f%%) | %.0f (%.0f%%) | %.0f | %.0f |", l.name.c_str(),
                l.count, flops / 1e9, flops / s[0] / 1e9, 100 * flops / s[0] / 1e9 / f32_peak, local_peak,
                100 * flops / s[0] / 1e9 / local_peak, flops / s[1] / 1e9, 100 * flops / s[1] / 1e9 / bf16_peak,
                flops / s[2] / 1e9, flops / s[3] / 1e9);
    if (with_ort) {
      auto it = ort.find(l.set + "." + l.name);
      const double ort_s = it == ort.end() ? 0 : it->second / 1e3;
      total_ort += ort_s * l.count;
      if (ort_s > 0)
        std::printf(" %.0f | %.2fx |", flops / ort_s / 1e9, ort_s / s[0]);
      else
        std::printf(" - | - |");
    }
    std::printf("\n");
  }
  std::printf("| **all layers, weighted by count** | %.2f | **%.0f (%.0f%%)** | **%.0f (%.0f%%)** | **%.0f (%.0f%%)** | "
              "**%.0f** | **%.0f** |",
              total_flops / 1e9, total_flops / total_s[0] / 1e9, 100 * total_flops / total_s[0] / 1e9 / f32_peak,
              total_peak_s / total_s[0], 100 * total_flops / 1e9 / total_peak_s, total_flops / total_s[1] / 1e9,
              100 * total_flops / total_s[1] / 1e9 / bf16_peak,
              total_flops / total_s[2] / 1e9, total_flops / total_s[3] / 1e9);
  if (with_ort) std::printf(" **%.0f** | **%.2fx** |", total_flops / total_ort / 1e9, total_ort / total_s[0]);
  std::printf("\n\nbf16 / f32 throughput: %.2fx; bfp8 weights / bf16: %.2fx; f32 at LoFi / f32: %.2fx\n",
              total_s[0] / total_s[1], total_s[1] / total_s[2], total_s[0] / total_s[3]);
  std::printf("Synchronised after every call instead: f32 %.0f, bf16 %.0f, bfp8 weights %.0f, f32 LoFi %.0f GFLOP/s over "
              "the set.\n",
              total_flops / total_sync[0] / 1e9, total_flops / total_sync[1] / 1e9, total_flops / total_sync[2] / 1e9,
              total_flops / total_sync[3] / 1e9);
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::string layers_path = "bench/layers/conv_layers.txt", ort_path;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick") {
      quick = true;
    } else if (a == "--layers" && i + 1 < argc) {
      layers_path = argv[++i];
    } else if (a == "--ort" && i + 1 < argc) {
      ort_path = argv[++i];
    } else {
      std::fprintf(stderr, "usage: bench_conv [--layers FILE] [--ort ORT_TIMES] [--quick]\n");
      return 2;
    }
  }
  const auto layers = read_layers(layers_path);
  const auto ort = ort_path.empty() ? std::map<std::string, double>() : read_ort(ort_path);
  const int threads = static_cast<int>(std::thread::hardware_concurrency());
  const double f32_peak = bench::fma_f32_peak_gflops(threads, 10'000'000, 5);
  std::string_view bf16_name;
  const double bf16_peak = bench::bf16_peak_gflops(threads, &bf16_name);
  std::printf("# conv2d (cpu device, %u threads, %s)\n\nMeasured in this run: FP32 FMA peak %.0f GFLOP/s, bf16 peak "
              "(%.*s) %.0f GFLOP/s%s.%s\n",
              std::thread::hardware_concurrency(), cpu_features().to_string().c_str(), f32_peak,
              static_cast<int>(bf16_name.size()), bf16_name.data(), bf16_peak,
              cpu_features().amx_bf16 ? " (oneDNN runs the bfloat16 convolutions on AMX here)" : "",
              ort.empty() ? "" : " ONNX Runtime: onnxruntime-node 1.30.0, CPU, 2 intra-op threads, one Conv+Relu "
                                 "model per layer, NCHW float32, median of its profiled kernel time (layout reorders "
                                 "left out).");
  auto dev = open_device({}).value();
  struct Set {
    const char *name, *title;
    int reps, quick_reps;
  };
  for (const Set& set : {Set{"resnet50", "ResNet-50, 224x224, batch 1", 15, 3},
                         Set{"mobilenet_v2", "MobileNetV2, 224x224, batch 1", 30, 5},
                         Set{"unet", "Vanilla UNet, 480x640, batch 1", 5, 2}}) {
    std::vector<Layer> subset;
    for (const Layer& l : layers)
      if (l.set == set.name) subset.push_back(l);
    if (!subset.empty())
      run_set(*dev, set.title, subset, ort, f32_peak, bf16_peak, quick ? set.quick_reps : set.reps, threads);
  }
  return 0;
}
