// The AVX-512 depthwise kernel's bfloat16 direct path on one core, two ways
// over the same rows: 32 channels at a time as even and odd halves (the
// prepared pairs-order weights, depthwise_direct3.h block_pairs) and the
// 16-channel block in order (the same arguments without those weights).
// MobileNetV2's 3x3 depthwise shapes with ReLU6, data in cache; 40 rounds of
// 20 calls with the order flipped every round; best and median per call, and
// whether both wrote the same bytes (they must: same accumulation order).
//
//   bench_depthwise            (pin it: taskset -c 1 ./build/release/bench_depthwise)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "depthwise_kernels.h"
#include "tessera/base/cpu_features.h"
#include "tessera/tessera.h"

using namespace tessera;

namespace {

struct Shape3 {
  uint32_t h, w, c, stride;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main() {
  if (kernel_isa() != KernelIsa::kAvx512) {
    std::fprintf(stderr, "bench_depthwise: the kernel needs AVX-512 with AVX512_BF16\n");
    return 2;
  }
  std::printf("| bfloat16, ReLU6 | in order us (best / median) | pairs us (best / median) | same bytes |\n"
              "|---|---|---|---|\n");
  const Shape3 shapes[] = {{112, 112, 32, 1}, {56, 56, 144, 1}, {28, 28, 192, 1}, {14, 14, 384, 1},
                           {14, 14, 576, 1},  {7, 7, 960, 1},   {112, 112, 96, 2}, {56, 56, 144, 2}};
  for (const Shape3& s : shapes) {
    const uint32_t oh = (s.h - 1) / s.stride + 1, ow = (s.w - 1) / s.stride + 1;
    std::vector<float> xv(size_t{s.h} * s.w * s.c);
    for (size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>(i % 17) * 0.1f - 0.8f;
    Tensor x = Tensor::from_vector(xv, Shape{1, 1, s.h * s.w, s.c}, DataType::BFLOAT16).value();
    Tensor y = Tensor::from_vector(std::vector<float>(size_t{oh} * ow * s.c), Shape{1, 1, oh * ow, s.c},
                                   DataType::BFLOAT16)
                   .value();
    // Weights (C, 3x3) and bias, prepared as conv2d prepares them.
    const cpu::DepthwiseWeightsLayout layout(3, 3, s.c);
    std::vector<float> w(9 * s.c), b(s.c), packed(layout.size());
    for (uint32_t c = 0; c < s.c; ++c) {
      b[c] = 0.01f * static_cast<float>(c % 5);
      for (uint32_t k = 0; k < 9; ++k) w[c * 9 + k] = 0.01f * static_cast<float>((c + k) % 7);
    }
    cpu::pack_depthwise_weights(layout, w.data(), b.data(), packed.data());
    cpu::DepthwiseArgs a{};
    a.src = make_access(x).value();
    a.dst = make_access(y).value();
    a.weights = packed.data();
    a.bias = b.data();
    a.src_type = a.dst_type = DataType::BFLOAT16;
    a.math = cpu::select_float_math();
    a.activation = UnaryWithParam{UnaryOpType::RELU6};
    a.n = 1, a.h = s.h, a.w = s.w, a.c = s.c, a.oh = oh, a.ow = ow, a.kh = a.kw = 3;
    a.sh = a.sw = s.stride, a.dh = a.dw = 1, a.pad_t = a.pad_l = 1;
    std::vector<double> us[2];
    std::vector<uint16_t> out[2];
    for (int round = 0; round < 40; ++round)
      for (int k = 0; k < 2; ++k) {
        const int pairs_on = (k + round) % 2;
        a.weights_pairs = pairs_on ? packed.data() + layout.weights_pairs() : nullptr;
        a.bias_pairs = pairs_on ? packed.data() + layout.bias_pairs() : nullptr;
        const auto t0 = std::chrono::steady_clock::now();
        for (int r = 0; r < 20; ++r) (void)cpu::avx512::depthwise_kernel(&a, 0, oh);
        us[pairs_on].push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / 20);
        if (out[pairs_on].empty()) {
          const auto* p = reinterpret_cast<const uint16_t*>(a.dst.base);
          out[pairs_on].assign(p, p + size_t{oh} * ow * s.c);
        }
      }
    std::printf("| %ux%ux%u%s | %.1f / %.1f | %.1f / %.1f | %s |\n", s.h, s.w, s.c, s.stride == 2 ? " /2" : "",
                *std::min_element(us[0].begin(), us[0].end()), median(us[0]),
                *std::min_element(us[1].begin(), us[1].end()), median(us[1]), out[0] == out[1] ? "yes" : "NO");
  }
  return 0;
}
