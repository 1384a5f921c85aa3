// conv2d over the 3x3 and 1x1 layer shapes of ResNet-50 (224x224, batch 1)
// and the Vanilla UNet (480x640, batch 1): GFLOP/s per layer and summed over
// each layer set, as a share of the FP32 FMA / BF16 dot-product peaks
// measured in the same run. Each call is the whole op: output allocation,
// dispatch, kernel (weights prepared beforehand). The tables time calls back
// to back, 10 per synchronize, as layers run inside a model; the line under
// each table gives the same set synchronised after every call.
//
//   bench_conv [--quick]
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "tessera/base/cpu_features.h"
#include "tessera/ops/conv2d.h"
#include "tessera/tessera.h"

namespace tessera::bench {
float fma_f32_loop(uint64_t iterations);
float dot_bf16_loop(uint64_t iterations);
}  // namespace tessera::bench

namespace {

using namespace tessera;

struct Layer {
  const char* name;
  uint32_t h, w, c, k, r, stride;
};

// ResNet-50 v1.5 (stride in the 3x3), every distinct 3x3 / 1x1 shape once,
// with how many times it occurs in the network.
struct Counted {
  Layer layer;
  int count;
};
const Counted kResNet50[] = {
    {{"l1 1x1 64->64", 56, 56, 64, 64, 1, 1}, 1},      {{"l1 3x3 64->64", 56, 56, 64, 64, 3, 1}, 3},
    {{"l1 1x1 64->256", 56, 56, 64, 256, 1, 1}, 4},    {{"l1 1x1 256->64", 56, 56, 256, 64, 1, 1}, 2},
    {{"l2 1x1 256->128", 56, 56, 256, 128, 1, 1}, 1},  {{"l2 3x3 s2 128", 56, 56, 128, 128, 3, 2}, 1},
    {{"l2 3x3 128->128", 28, 28, 128, 128, 3, 1}, 3},  {{"l2 1x1 128->512", 28, 28, 128, 512, 1, 1}, 4},
    {{"l2 1x1 512->128", 28, 28, 512, 128, 1, 1}, 3},  {{"l2 ds 1x1 s2 256->512", 56, 56, 256, 512, 1, 2}, 1},
    {{"l3 1x1 512->256", 28, 28, 512, 256, 1, 1}, 1},  {{"l3 3x3 s2 256", 28, 28, 256, 256, 3, 2}, 1},
    {{"l3 3x3 256->256", 14, 14, 256, 256, 3, 1}, 5},  {{"l3 1x1 256->1024", 14, 14, 256, 1024, 1, 1}, 6},
    {{"l3 1x1 1024->256", 14, 14, 1024, 256, 1, 1}, 5}, {{"l3 ds 1x1 s2 512->1024", 28, 28, 512, 1024, 1, 2}, 1},
    {{"l4 1x1 1024->512", 14, 14, 1024, 512, 1, 1}, 1}, {{"l4 3x3 s2 512", 14, 14, 512, 512, 3, 2}, 1},
    {{"l4 3x3 512->512", 7, 7, 512, 512, 3, 1}, 2},    {{"l4 1x1 512->2048", 7, 7, 512, 2048, 1, 1}, 3},
    {{"l4 1x1 2048->512", 7, 7, 2048, 512, 1, 1}, 2},  {{"l4 ds 1x1 s2 1024->2048", 14, 14, 1024, 2048, 1, 2}, 1},
};
const Counted kUNet[] = {
    {{"enc1 3->32", 480, 640, 3, 32, 3, 1}, 1},      {{"enc1 32->32", 480, 640, 32, 32, 3, 1}, 1},
    {{"enc2 32->64", 240, 320, 32, 64, 3, 1}, 1},    {{"enc2 64->64", 240, 320, 64, 64, 3, 1}, 1},
    {{"enc3 64->128", 120, 160, 64, 128, 3, 1}, 1},  {{"enc3 128->128", 120, 160, 128, 128, 3, 1}, 1},
    {{"enc4 128->256", 60, 80, 128, 256, 3, 1}, 1},  {{"enc4 256->256", 60, 80, 256, 256, 3, 1}, 1},
    {{"bottleneck 256->512", 30, 40, 256, 512, 3, 1}, 1}, {{"bottleneck 512->512", 30, 40, 512, 512, 3, 1}, 1},
    {{"dec4 512->256", 60, 80, 512, 256, 3, 1}, 1},  {{"dec4 256->256", 60, 80, 256, 256, 3, 1}, 1},
    {{"dec3 256->128", 120, 160, 256, 128, 3, 1}, 1}, {{"dec3 128->128", 120, 160, 128, 128, 3, 1}, 1},
    {{"dec2 128->64", 240, 320, 128, 64, 3, 1}, 1},  {{"dec2 64->64", 240, 320, 64, 64, 3, 1}, 1},
    {{"dec1 64->32", 480, 640, 64, 32, 3, 1}, 1},    {{"dec1 32->32", 480, 640, 32, 32, 3, 1}, 1},
    {{"final 1x1 32->1", 480, 640, 32, 1, 1, 1}, 1},
};

volatile float g_sink;

double peak(float (*loop)(uint64_t), double flops_per_iteration) {
  ThreadPool pool(static_cast<int>(std::thread::hardware_concurrency()));
  const uint64_t it = 10'000'000;
  auto t = bench::time_it(5, [&] {
    auto body = [&](uint32_t b, uint32_t e) {
      for (uint32_t i = b; i < e; ++i) g_sink = loop(it);
    };
    pool.parallel_for(static_cast<uint32_t>(pool.num_threads()), 1, body);
  });
  return flops_per_iteration * static_cast<double>(it) * pool.num_threads() / t.median_s / 1e9;
}

struct Variant {
  const char* name;
  DataType act, weights;
};
const Variant kVariants[] = {{"f32", DataType::FLOAT32, DataType::FLOAT32},
                             {"bf16", DataType::BFLOAT16, DataType::BFLOAT16},
                             {"bf16 act + bfp8 w", DataType::BFLOAT16, DataType::BFLOAT8_B}};

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
  p.stride = {l.stride, l.stride};
  p.with_padding(l.r / 2, l.r / 2);
  p.activation = {UnaryOpType::RELU};
  Tensor x = allocate_tensor_on_host({Shape{1, l.h, l.w, l.c}, v.act, Layout::ROW_MAJOR});
  Tensor w = Tensor::from_vector(std::vector<float>(uint64_t{l.k} * l.c * l.r * l.r, 0.01f), Shape{l.k, l.c, l.r, l.r},
                                 DataType::FLOAT32)
                 .value();
  Tensor dx = to_device(x, dev).value();
  Conv2dConfig cfg{.weights_dtype = v.weights};
  Conv2dResult first = conv2d(dx, w, std::nullopt, p, cfg).value();
  (void)synchronize_device(dev);
  auto sync = bench::time_it(reps, [&] {
    Conv2dResult r = conv2d(dx, first.weights, p, cfg).value();
    (void)synchronize_device(dev);
  });
  auto b2b = bench::time_it(reps, [&] {
    for (int i = 0; i < 10; ++i) Conv2dResult r = conv2d(dx, first.weights, p, cfg).value();
    (void)synchronize_device(dev);
  });
  return {b2b.median_s / 10, sync.median_s};
}

void run_set(Device& dev, const char* title, const Counted* layers, size_t n, double f32_peak, double bf16_peak,
             int reps) {
  std::printf("\n## %s\n\n| layer | GFLOP | f32 GFLOP/s (%% FMA peak) | bf16 GFLOP/s (%% dot peak) | bf16 act + bfp8 w "
              "GFLOP/s |\n|---|---|---|---|---|\n",
              title);
  double total_flops = 0, total_s[3] = {0, 0, 0}, total_sync[3] = {0, 0, 0};
  for (size_t i = 0; i < n; ++i) {
    const Layer& l = layers[i].layer;
    const uint32_t pad = l.r / 2;
    const double oh = (l.h + 2 * pad - l.r) / l.stride + 1, ow = (l.w + 2 * pad - l.r) / l.stride + 1;
    const double flops = 2.0 * oh * ow * l.k * l.c * l.r * l.r;
    double s[3];
    for (int v = 0; v < 3; ++v) {
      LayerTime t = time_layer(dev, l, kVariants[v], reps);
      s[v] = t.back_to_back;
      total_s[v] += s[v] * layers[i].count;
      total_sync[v] += t.synchronous * layers[i].count;
    }
    total_flops += flops * layers[i].count;
    std::printf("| %s (x%d) | %.3f | %.0f (%.0f%%) | %.0f (%.0f%%) | %.0f |\n", l.name, layers[i].count, flops / 1e9,
                flops / s[0] / 1e9, 100 * flops / s[0] / 1e9 / f32_peak, flops / s[1] / 1e9,
                100 * flops / s[1] / 1e9 / bf16_peak, flops / s[2] / 1e9);
  }
  std::printf("| **all layers, weighted by count** | %.2f | **%.0f (%.0f%%)** | **%.0f (%.0f%%)** | **%.0f** |\n",
              total_flops / 1e9, total_flops / total_s[0] / 1e9, 100 * total_flops / total_s[0] / 1e9 / f32_peak,
              total_flops / total_s[1] / 1e9, 100 * total_flops / total_s[1] / 1e9 / bf16_peak,
              total_flops / total_s[2] / 1e9);
  std::printf("\nbf16 / f32 throughput: %.2fx; bfp8 weights / bf16: %.2fx\n", total_s[0] / total_s[1],
              total_s[1] / total_s[2]);
  std::printf("Synchronised after every call instead: f32 %.0f, bf16 %.0f, bfp8 weights %.0f GFLOP/s over the set.\n",
              total_flops / total_sync[0] / 1e9, total_flops / total_sync[1] / 1e9, total_flops / total_sync[2] / 1e9);
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  if (!cpu_features().has_avx512_kernels()) {
    std::printf("bench_conv: needs the AVX-512 peak loops\n");
    return 0;
  }
  const double f32_peak = peak(bench::fma_f32_loop, 12.0 * 16 * 2);
  const double bf16_peak = peak(bench::dot_bf16_loop, 12.0 * 32 * 2);
  std::printf("# conv2d (cpu device, %u threads)\n\nMeasured in this run: FP32 FMA peak %.0f GFLOP/s, BF16 dot peak "
              "%.0f GFLOP/s.\n",
              std::thread::hardware_concurrency(), f32_peak, bf16_peak);
  auto dev = open_device({}).value();
  run_set(*dev, "ResNet-50, 224x224, batch 1", kResNet50, std::size(kResNet50), f32_peak, bf16_peak, quick ? 3 : 15);
  run_set(*dev, "Vanilla UNet, 480x640, batch 1", kUNet, std::size(kUNet), f32_peak, bf16_peak, quick ? 2 : 5);
  return 0;
}
