// Fuzz target for the compiled image reader (tessera/image/image.h).
//
// LLVMFuzzerTestOneInput is the libFuzzer / AFL++ entry point (build with
// clang -fsanitize=fuzzer and -DTESSERA_LIBFUZZER). Without libFuzzer this
// file's main() is a bounded mutation fuzzer CI runs under ASan:
//
//   fuzz_image_load [--seconds S] [--seed N] [SEED.tsi ...]
//
// Seeds: images of a small CNN (one with int8 storage) and of a detector
// with a host tail compiled here, plus any files given. Half
// the mutants get their checksums recomputed, so that the mutations reach
// the FlatBuffers verifier and the graph checks behind the CRCs. Each mutant
// is opened, every model decoded and described; the target fails only on a
// crash (the sanitizers' report) or an error with an empty message.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "../src/image/image_format.h"
#include "fuzz/fuzz_args.h"
#include "onnx_model_builder.h"
#include "tessera/device/device.h"
#include "tessera/graph/host_tail.h"
#include "tessera/graph/shape_inference.h"
#include "tessera/image/image.h"
#include "tessera/import/onnx.h"

namespace {

void check(const tessera::Status& s) {
  if (!s.ok() && s.message().empty()) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto img = tessera::image::Image::from_bytes(std::vector<uint8_t>(data, data + size));
  check(img.status());
  if (!img.ok()) return 0;
  (void)tessera::image::info_text((*img)->info());
  (void)tessera::image::info_json((*img)->info());
  for (size_t i = 0; i < (*img)->num_models(); ++i) check((*img)->model(i).status());
  return 0;
}

#ifndef TESSERA_LIBFUZZER
namespace {

std::vector<uint8_t> small_image() {
  using namespace tessera;
  auto g = importer::import_onnx_bytes(testing_onnx::small_cnn(1).bytes()).value();
  auto device = open_device({.descriptor = "cpu"}).value();
  auto m = image::compile_model("small", std::move(g), *device, {}).value();
  const image::ImageModel* ms[] = {&m};
  return image::serialize_image(image::header_for(*device), ms).value();
}

// A portable image with a constant of 1024 integers, stored as int8.
std::vector<uint8_t> int8_image() {
  using namespace tessera;
  auto g = importer::import_onnx_bytes(testing_onnx::small_cnn(1).bytes()).value();
  auto device = open_device({.descriptor = "cpu"}).value();
  auto m = image::compile_model("small", std::move(g), *device, {}, /*portable=*/true).value();
  std::vector<float> q(1024);
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>(static_cast<int>(i % 256) - 128);
  m.graph.add_value({.name = "q", .type = graph::ElemType::FLOAT32, .dims = {1024}, .has_shape = true,
                     .constant = graph::HostTensor::floats({1024}, std::move(q))});
  const image::ImageModel* ms[] = {&m};
  return image::serialize_image(image::header_for(*device), ms).value();
}

// A detector's image with its host tail (NonMaxSuppression, an If's branches).
std::vector<uint8_t> tail_image() {
  using namespace tessera;
  importer::OnnxImportOptions io;
  io.infer_shapes = false;
  auto g = importer::import_onnx_bytes(testing_onnx::nms_detector().bytes(), io).value();
  auto tail = graph::HostTail::split(g).value();
  if (!graph::infer_shapes(g).ok() || !tail || !tail->bind_prefix(g).ok()) __builtin_trap();
  g.remove_dead_nodes();
  auto device = open_device({.descriptor = "cpu"}).value();
  auto m = image::compile_model("det", std::move(g), *device, {}).value();
  m.tail = std::move(tail);
  const image::ImageModel* ms[] = {&m};
  return image::serialize_image(image::header_for(*device), ms).value();
}

// Recomputes the section and preamble checksums where the layout still allows.
void fix_checksums(std::vector<uint8_t>& b) {
  using namespace tessera::image::format;
  if (b.size() < kPreambleBytes) return;
  Preamble p;
  std::memcpy(&p, b.data(), sizeof p);
  if (p.meta_offset <= b.size() && p.meta_bytes <= b.size() - p.meta_offset)
    p.meta_crc = crc32_of({b.data() + p.meta_offset, p.meta_bytes});
  if (p.weights_offset <= b.size() && p.weights_bytes <= b.size() - p.weights_offset)
    p.weights_crc = crc32_of({b.data() + p.weights_offset, p.weights_bytes});
  p.preamble_crc = preamble_crc(p);
  std::memcpy(b.data(), &p, sizeof p);
}

}  // namespace

int main(int argc, char** argv) {
  const auto args = tessera::fuzz::parse_fuzz_args(argc, argv, "fuzz_image_load");
  if (!args) return 2;
  const double seconds = args->seconds;
  std::vector<std::vector<uint8_t>> seeds{small_image(), tail_image(), int8_image()};
  for (const std::string& f : args->files) seeds.emplace_back(f.begin(), f.end());
  std::mt19937 rng(args->seed);
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  uint64_t runs = 0;
  while (std::chrono::steady_clock::now() < end) {
    const std::vector<uint8_t>& base = seeds[rng() % seeds.size()];
    std::vector<uint8_t> m = base;
    // Most edits land in the metadata (the first few KiB), where the structure is.
    const size_t meta_end = std::min<size_t>(m.size(), 64 + 16384);
    const int edits = 1 + static_cast<int>(rng() % 6);
    for (int e = 0; e < edits && !m.empty(); ++e) {
      const size_t at = rng() % 4 ? rng() % meta_end % m.size() : rng() % m.size();
      switch (rng() % 6) {
        case 0: m[at] = static_cast<uint8_t>(rng()); break;
        case 1: m.resize(at); break;
        case 2: {
          const size_t from = rng() % base.size(), n = std::min<size_t>(rng() % 64, base.size() - from);
          m.insert(m.begin() + static_cast<std::ptrdiff_t>(at), base.begin() + static_cast<std::ptrdiff_t>(from),
                   base.begin() + static_cast<std::ptrdiff_t>(from + n));
          break;
        }
        case 3: m[at] = static_cast<uint8_t>(m[at] ^ (1 << (rng() % 8))); break;
        case 4:  // a large 32-bit value (offsets, lengths, counts, ids)
          if (at + 4 <= m.size()) {
            const uint32_t v = rng() % 2 ? 0xffffffffu : 0x7fffffffu - rng() % 1024;
            std::memcpy(m.data() + at, &v, 4);
          }
          break;
        default:  // a small integer (ids, enum values, dims)
          m[at] = static_cast<uint8_t>(rng() % 8);
      }
    }
    if (rng() % 2) fix_checksums(m);
    LLVMFuzzerTestOneInput(m.data(), m.size());
    ++runs;
  }
  std::printf("fuzz_image_load: %llu inputs in %.0f s, no crash\n", static_cast<unsigned long long>(runs), seconds);
  return 0;
}
#endif
