// Loading a compiled image against importing and compiling its ONNX file, in
// one process, alternating in rounds, each round on a freshly opened device:
//
//   ONNX:  import + passes + lowering ("ready"), then the first run, which
//          packs every conv's weights for its kernel, then steady runs;
//   image: open + verify + load (prepared weights mapped from the file),
//          then the first run, then steady runs.
//
// Prints medians over the rounds and the images issue's ratios: load against
// import + compile, and against import + compile + the first run's weight
// preparation (the first run minus a steady one: what the ONNX path does
// before it runs at speed); the first run against the steady p50.
//
//   bench_image_load MODEL.onnx [--rounds R] [--runs N] [--batch B]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tessera/device/device.h"
#include "tessera/image/image.h"
#include "tessera/import/onnx.h"
#include "tessera/runtime/compiled_model.h"

namespace {

using namespace tessera;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

template <class T>
T must(StatusOr<T> r, const char* what) {
  if (!r.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, r.status().to_string().c_str());
    std::exit(1);
  }
  return std::move(r).value();
}

void must(const Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, s.to_string().c_str());
    std::exit(1);
  }
}

std::shared_ptr<Device> fresh_device() {
  return must(open_device({.descriptor = "cpu", .num_command_queues = 2}), "open_device");
}

// One run on a fixed input: milliseconds until the outputs are on the host.
double timed_run(runtime::CompiledModel& m, Device& d) {
  std::vector<Tensor> ins;
  for (const auto& dims : m.input_shapes()) {
    const std::vector<uint32_t> u(dims.begin(), dims.end());
    const Shape shape{std::span<const uint32_t>(u)};
    std::vector<float> x(shape.volume());
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.01f * static_cast<float>(i));
    ins.push_back(must(to_device(must(Tensor::from_vector(x, shape, DataType::FLOAT32), "input"), d), "upload"));
  }
  must(synchronize_device(d), "sync");
  const auto t0 = Clock::now();
  auto outs = must(m.run(ins), "run");
  for (const Tensor& y : outs) (void)must(y.cpu(), "read");
  return ms_since(t0);
}

struct Times {
  std::vector<double> ready, first, steady;
  std::vector<double> open;  // an image's open + verify, of `ready`
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.onnx [--rounds R] [--runs N] [--batch B]\n", argv[0]);
    return 2;
  }
  const std::string model = argv[1];
  int rounds = 5, runs = 20;
  int64_t batch = 1;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--rounds")
      rounds = std::atoi(argv[i + 1]);
    else if (a == "--runs")
      runs = std::atoi(argv[i + 1]);
    else if (a == "--batch")
      batch = std::atoll(argv[i + 1]);
  }
  importer::OnnxImportOptions io;
  io.symbolic_dim = batch;
  const std::string path = "/tmp/bench_image_load.tsi";
  {
    auto d = fresh_device();
    auto m = must(image::compile_model("model", must(importer::import_onnx(model, io), "import"), *d, {}), "compile");
    const image::ImageModel* ms[] = {&m};
    must(image::write_image(path, image::header_for(*d), ms), "write");
  }
  Times onnx, img;
  for (int r = 0; r < rounds; ++r) {
    {
      auto d = fresh_device();
      const auto t0 = Clock::now();
      auto g = must(importer::import_onnx(model, io), "import");
      auto m = must(runtime::CompiledModel::compile(std::move(g), *d, {}), "compile");
      onnx.ready.push_back(ms_since(t0));
      onnx.first.push_back(timed_run(*m, *d));
      std::vector<double> s;
      for (int k = 0; k < runs; ++k) s.push_back(timed_run(*m, *d));
      onnx.steady.push_back(median(s));
    }
    {
      auto d = fresh_device();
      const auto t0 = Clock::now();
      auto image = must(image::Image::open(path), "open");
      img.open.push_back(ms_since(t0));
      auto m = must(image::load_model(*image, 0, *d), "load");
      img.ready.push_back(ms_since(t0));
      img.first.push_back(timed_run(*m.model, *d));
      std::vector<double> s;
      for (int k = 0; k < runs; ++k) s.push_back(timed_run(*m.model, *d));
      img.steady.push_back(median(s));
    }
  }
  const double o_ready = median(onnx.ready), o_first = median(onnx.first), o_steady = median(onnx.steady);
  const double i_ready = median(img.ready), i_first = median(img.first), i_steady = median(img.steady);
  std::printf("%s, batch %lld: medians of %d alternated rounds, steady = p50 of %d runs\n", model.c_str(),
              static_cast<long long>(batch), rounds, runs);
  std::printf("| path | ready ms | 1st run ms | steady ms | 1st / steady |\n|---|---|---|---|---|\n");
  std::printf("| ONNX: import + compile | %.1f | %.1f | %.1f | %.2f |\n", o_ready, o_first, o_steady,
              o_first / o_steady);
  std::printf("| image: open + load | %.1f | %.1f | %.1f | %.2f |\n", i_ready, i_first, i_steady, i_first / i_steady);
  std::printf("(image: open + verify %.1f ms, load %.1f ms)\n", median(img.open), i_ready - median(img.open));
  const double o_prepared = o_ready + std::max(0.0, o_first - o_steady);
  std::printf("load vs import + compile: %.1fx faster; vs import + compile + weight preparation (%.1f ms): %.1fx\n",
              o_ready / i_ready, o_prepared, o_prepared / i_ready);
  std::remove(path.c_str());
  return 0;
}
