// The run_inference queues under a long soak: N samples (default 1,000,000)
// of a small conv model pushed by one thread and popped by another. Each
// sample's input encodes its index, so every output is checked against the
// expected one: nothing lost, duplicated, reordered or wrong. Resident
// memory is sampled along the way and must stay flat after warm-up.
//
//   bench_inference_soak [N] [--no-pipeline]
#include <malloc.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "tessera/device/device.h"
#include "tessera/runtime/inference_queue.h"

using namespace tessera;

namespace {

uint64_t rss_kib() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.starts_with("VmRSS:")) return std::stoull(line.substr(6));
  return 0;
}

// y = relu(conv1x1(x)): (1, 3, 8, 8) -> (1, 4, 8, 8).
graph::Graph small_model() {
  graph::Graph g;
  const int x = g.add_value({.name = "x", .dims = {1, 3, 8, 8}, .has_shape = true});
  std::vector<float> w(12);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.1f * static_cast<float>(i) - 0.5f;
  const int wv = g.add_value({.name = "w", .dims = {4, 3, 1, 1}, .has_shape = true,
                              .constant = graph::HostTensor::floats({4, 3, 1, 1}, w)});
  const int c = g.add_value({.name = "c", .dims = {1, 4, 8, 8}, .has_shape = true});
  const int y = g.add_value({.name = "y", .dims = {1, 4, 8, 8}, .has_shape = true});
  g.nodes.push_back({.name = "conv", .op_type = "Conv", .inputs = {x, wv}, .outputs = {c}});
  g.nodes.push_back({.name = "relu", .op_type = "Relu", .inputs = {c}, .outputs = {y}});
  g.inputs = {x};
  g.outputs = {y};
  g.values[static_cast<size_t>(c)].producer = 0;
  g.values[static_cast<size_t>(y)].producer = 1;
  return g;
}

constexpr int kDistinct = 997;  // inputs cycle through this many values (a prime: no alignment with anything)

Tensor input_for(uint64_t i) {
  std::vector<float> v(3 * 8 * 8);
  for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<float>(i % kDistinct) * 0.01f - static_cast<float>(k) * 0.001f;
  return Tensor::from_vector(v, Shape{1, 3, 8, 8}, DataType::FLOAT32).value();
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t n = 1'000'000;
  bool pipeline = true;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--no-pipeline") == 0) pipeline = false;
    else n = std::stoull(argv[i]);
  }
  auto device = open_device({.descriptor = "cpu", .trace_region_size = 1 << 20, .num_command_queues = 2}).value();
  auto model = runtime::CompiledModel::compile(small_model(), *device, {}).value();
  // The expected output of every distinct input, from direct runs.
  std::vector<std::vector<float>> want;
  for (int i = 0; i < kDistinct; ++i) {
    const Tensor in[] = {to_device(input_for(static_cast<uint64_t>(i)), *device).value()};
    const std::vector<Tensor> ys = model->run(in).value();
    want.push_back(ys[0].cpu().value().to_vector().value());
  }
  auto q = runtime::InferenceQueue::start(*model, *device, {.input_count = n, .capacity = 32, .use_pipeline = pipeline})
               .value();
  const auto t0 = std::chrono::steady_clock::now();
  std::thread producer([&] {
    for (uint64_t i = 0; i < n; ++i)
      if (Status s = q->push({input_for(i)}); !s.ok()) {
        std::fprintf(stderr, "push %llu: %s\n", static_cast<unsigned long long>(i), s.to_string().c_str());
        std::exit(1);
      }
  });
  uint64_t bad = 0, out_of_order = 0, failed = 0, rss_warm = 0, rss_max = 0;
  for (uint64_t i = 0; i < n; ++i) {
    auto o = q->pop();
    if (!o.ok()) {
      std::fprintf(stderr, "pop %llu: %s\n", static_cast<unsigned long long>(i), o.status().to_string().c_str());
      return 1;
    }
    if (o->index != i) ++out_of_order;
    if (!o->status.ok()) {
      ++failed;
      continue;
    }
    const std::vector<float> v = o->outputs[0].to_vector().value();
    const std::vector<float>& w = want[o->index % kDistinct];
    if (v.size() != w.size() || std::memcmp(v.data(), w.data(), v.size() * 4) != 0) ++bad;
    if (i == n / 10) rss_warm = rss_kib();
    if (i > n / 10 && i % 1024 == 0) rss_max = std::max(rss_max, rss_kib());
  }
  producer.join();
  const bool drained = q->pop().status().code() == StatusCode::kOutOfRange;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%llu samples through the inference queue (%s) in %.1f s (%.1f us each): %llu wrong, %llu out of "
              "order, %llu failed, %s; resident memory %.1f MiB after warm-up (10%%), at most %.1f MiB after\n",
              static_cast<unsigned long long>(n), pipeline ? "traced two-queue pipeline" : "CompiledModel::run", s,
              s / static_cast<double>(n) * 1e6, static_cast<unsigned long long>(bad),
              static_cast<unsigned long long>(out_of_order), static_cast<unsigned long long>(failed),
              drained ? "queue drained" : "QUEUE NOT DRAINED", rss_warm / 1024.0, rss_max / 1024.0);
  return bad || out_of_order || failed || !drained ? 1 : 0;
}
