// Classifier heads (M x K against N x K float32 weights, Gemm transB = 1,
// M = 1 and 8: batch 1 and 8):
// Tessera's gemv kernel against oneDNN's gemm (the kernel set capped below
// AVX2) in the same process, alternating, 37 rounds of 12 calls, median per
// call. "hot" repeats one weight set (it stays in the L3); "cold" rotates 12
// (about 100 MB), so each call reads its weights from DRAM, as inside a model.
//
//   bench_gemv
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <utility>
#include <vector>

#include "harness.h"
#include "tessera/base/cpu_features.h"
#include "tessera/ops/matmul.h"
#include "tessera/tessera.h"

using namespace tessera;

namespace {
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
}  // namespace

int main() {
  auto dev = bench::value_or_die(open_device({}));
  const KernelIsa native = kernel_isa();
  if (native == KernelIsa::kScalar) {
    std::fprintf(stderr, "bench_gemv: the gemv kernel needs AVX2 or AVX-512\n");
    return 2;
  }
  std::printf("| head | rows | oneDNN hot ms | gemv hot ms | oneDNN cold ms | gemv cold ms (GB/s of weights) |\n"
              "|---|---|---|---|---|---|\n");
  for (uint32_t m : {1u, 8u})
  for (auto [k, n] : {std::pair{2048u, 1000u}, std::pair{1280u, 1000u}}) {
    auto make = [&](Shape s) {
      std::vector<float> v(s.volume(), 0.01f);
      return bench::value_or_die(to_device(bench::value_or_die(Tensor::from_vector(v, s, DataType::FLOAT32)), *dev));
    };
    std::vector<Tensor> weights;
    for (int i = 0; i < 12; ++i) weights.push_back(make(Shape{n, k}));
    const Tensor a = make(Shape{m, k}), bias = make(Shape{n});
    std::vector<double> t[2][2];  // [gemv][cold]
    for (int round = 0; round < 40; ++round)
      for (int gemv = 0; gemv < 2; ++gemv) {
        set_kernel_isa_limit(gemv ? native : KernelIsa::kScalar);
        for (int cold = 0; cold < 2; ++cold) {
          const double t0 = now();
          for (int i = 0; i < 12; ++i)
            bench::value_or_die(linear(a, weights[cold ? i : 0], bias, {.transpose_b = true}));
          CHECK_OK(synchronize_device(*dev));
          if (round >= 3) t[gemv][cold].push_back((now() - t0) / 12);
        }
      }
    set_kernel_isa_limit(native);
    auto median = [](std::vector<double>& v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    const double gb = 4.0 * k * n / 1e9;
    const double oh = median(t[0][0]), gh = median(t[1][0]), oc = median(t[0][1]), gc = median(t[1][1]);
    std::printf("| %u -> %u | %u | %.3f (%.0f) | %.3f (%.0f) | %.3f (%.0f) | %.3f (%.0f) |\n", k, n, m, oh * 1e3, gb / oh,
                gh * 1e3, gb / gh, oc * 1e3, gb / oc, gc * 1e3, gb / gc);
  }
  return 0;
}
