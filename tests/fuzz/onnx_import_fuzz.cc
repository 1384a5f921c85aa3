// Fuzz target for the ONNX importer.
//
// LLVMFuzzerTestOneInput is the libFuzzer / AFL++ entry point (build with
// clang -fsanitize=fuzzer and -DTESSERA_LIBFUZZER). Without libFuzzer this
// file's main() is a bounded mutation fuzzer CI runs under ASan:
//
//   fuzz_onnx_import [--seconds S] [--seed N] [SEED.onnx ...]
//
// It mutates seed models (a small CNN and a small quantized model written in
// onnx_model_builder.h, plus any files given) with byte flips, truncations, splices and protobuf-aware
// edits of varint fields, imports each, and fails only on a crash (which the
// sanitizers turn into a report) or an error with an empty message.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz/fuzz_args.h"
#include "onnx_model_builder.h"
#include "tessera/import/onnx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tessera::importer::OnnxImportOptions o;
  o.infer.max_elements = int64_t{1} << 24;  // keep hostile shapes cheap to refuse
  auto g = tessera::importer::import_onnx_bytes(std::string_view(reinterpret_cast<const char*>(data), size), o);
  if (!g.ok() && g.status().message().empty()) __builtin_trap();
  return 0;
}

#ifndef TESSERA_LIBFUZZER
int main(int argc, char** argv) {
  const auto args = tessera::fuzz::parse_fuzz_args(argc, argv, "fuzz_onnx_import");
  if (!args) return 2;
  const double seconds = args->seconds;
  std::vector<std::string> seeds{tessera::testing_onnx::small_cnn(2).bytes(),
                                 tessera::testing_onnx::small_quantized().bytes()};
  seeds.insert(seeds.end(), args->files.begin(), args->files.end());
  std::mt19937 rng(args->seed);
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  uint64_t runs = 0;
  while (std::chrono::steady_clock::now() < end) {
    const std::string& base = seeds[rng() % seeds.size()];
    std::string m = base;
    const int edits = 1 + static_cast<int>(rng() % 6);
    for (int e = 0; e < edits && !m.empty(); ++e) {
      const size_t at = rng() % m.size();
      switch (rng() % 5) {
        case 0: m[at] = static_cast<char>(rng()); break;
        case 1: m.resize(at); break;
        case 2: m.insert(at, base.substr(rng() % base.size(), rng() % 128)); break;
        case 3: m[at] = static_cast<char>(m[at] ^ (1 << (rng() % 8))); break;
        default:  // a large varint (huge dims, counts, lengths)
          m.replace(at, 1, std::string("\xff\xff\xff\xff\x0f", 5));
      }
    }
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(m.data()), m.size());
    ++runs;
  }
  std::printf("fuzz_onnx_import: %llu inputs in %.0f s, no crash\n", static_cast<unsigned long long>(runs), seconds);
  return 0;
}
#endif
