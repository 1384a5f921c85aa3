// float32 conv2d over a layer file, for comparing two builds of a kernel on
// a drifting VM: 30 rounds of 5 back-to-back calls per layer, median and min
// per call, and the count-weighted sum. Run the two builds one after the
// other, twice, in alternating order, and compare within each pair.
//
//   bench_conv_f32 bench/layers/conv_layers.txt [SET]
//
// Layer lines as in bench_conv (set name h w c k r stride count; padding
// r/2, fused ReLU, random input, float32 weights).
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "harness.h"
#include "tessera/ops/conv2d.h"
#include "tessera/tessera.h"

using namespace tessera;

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: bench_conv_f32 LAYERS [SET]\n");
    return 2;
  }
  std::ifstream file(argv[1]);
  if (!file) {
    std::fprintf(stderr, "bench_conv_f32: cannot read %s\n", argv[1]);
    return 2;
  }
  const std::string only = argc == 3 ? argv[2] : "";
  auto dev = bench::value_or_die(open_device({}));
  std::printf("| layer | median ms | GFLOP/s | min ms |\n|---|---|---|---|\n");
  double total_s = 0, total_gflop = 0;
  for (std::string line; std::getline(file, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream is(line);
    std::string set, name;
    uint32_t h, w, c, k, r, s, count;
    if (!(is >> set >> name >> h >> w >> c >> k >> r >> s >> count)) {
      std::fprintf(stderr, "bench_conv_f32: expected 'set name h w c k r stride count', found '%s'\n", line.c_str());
      return 2;
    }
    if (!only.empty() && set != only) continue;
    Conv2dParams p;
    p.input_height = h, p.input_width = w, p.in_channels = c, p.out_channels = k;
    p.kernel_size = {r, r}, p.stride = {s, s};
    p.with_padding(r / 2, r / 2);
    p.activation = {UnaryOpType::RELU};
    std::vector<float> xv(uint64_t{h} * w * c), wv(uint64_t{k} * c * r * r);
    uint32_t state = 12345;
    auto next = [&] { return (state = state * 1664525u + 1013904223u) >> 8; };
    for (float& v : xv) v = static_cast<float>(next()) / (1 << 24);
    for (float& v : wv) v = (static_cast<float>(next()) / (1 << 24) - 0.5f) * 0.1f;
    Tensor x = bench::value_or_die(to_device(bench::value_or_die(Tensor::from_vector(xv, Shape{1, h, w, c}, DataType::FLOAT32)), *dev));
    Tensor wt = bench::value_or_die(Tensor::from_vector(wv, Shape{k, c, r, r}, DataType::FLOAT32));
    const Conv2dConfig cfg{.weights_dtype = DataType::FLOAT32};
    Conv2dResult first = bench::value_or_die(conv2d(x, wt, std::nullopt, p, cfg));
    const bench::Timing t = bench::time_it(30, [&] {
      for (int i = 0; i < 5; ++i) bench::value_or_die(conv2d(x, first.weights, p, cfg));
      CHECK_OK(synchronize_device(*dev));
    });
    const double gflop = 2.0 * k * c * r * r * first.output_height * first.output_width / 1e9;
    std::printf("| %s | %.3f | %.0f | %.3f |\n", name.c_str(), t.median_s / 5 * 1e3, gflop / (t.median_s / 5),
                t.min_s / 5 * 1e3);
    total_s += t.median_s / 5 * count;
    total_gflop += gflop * count;
  }
  std::printf("\nweighted by count: %.1f ms, %.0f GFLOP/s\n", total_s * 1e3, total_gflop / total_s);
  return 0;
}
