// Fuzz target for the precision-rule parser (runtime/precision.h's
// parse_precision_config) and the compiler's checks of what it parsed.
//
// LLVMFuzzerTestOneInput is the libFuzzer / AFL++ entry point (build with
// clang -fsanitize=fuzzer and -DTESSERA_LIBFUZZER). Without libFuzzer this
// file's main() is a bounded mutation fuzzer CI runs under ASan:
//
//   fuzz_precision_config [--seconds S] [--seed N] [SEED.json ...]
//
// A config that parses must serialize to one that parses back to the same
// JSON, and compiling a small net with it must succeed or fail with a
// message. The target fails on a crash (the sanitizers' report), an error
// with an empty message, or a round trip that changes the config.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "fuzz/fuzz_args.h"
#include "onnx_model_builder.h"
#include "tessera/import/onnx.h"
#include "tessera/runtime/compiled_model.h"

namespace {

using namespace tessera;

void check(const Status& s) {
  if (!s.ok() && s.message().empty()) std::abort();
}

// A conv, its activation, a pool and a Gemm: every kind of field applies somewhere.
const graph::Graph& small_net() {
  static const graph::Graph g = [] {
    testing_onnx::ModelBuilder b(13);
    b.input("x", {1, 3, 8, 8});
    b.random_initializer("w", {4, 3, 3, 3}, 0.3f, 1);
    b.random_initializer("fc_w", {5, 4}, 0.3f, 2);
    auto* c = b.node("Conv", {"x", "w"}, {"c"});
    b.ints(c, "pads", {1, 1, 1, 1});
    b.node("Relu", {"c"}, {"r"});
    b.node("GlobalAveragePool", {"r"}, {"gap"});
    b.node("Flatten", {"gap"}, {"flat"});
    auto* fc = b.node("Gemm", {"flat", "fc_w"}, {"logits"});
    b.i(fc, "transB", 1);
    b.output("logits");
    return importer::import_onnx_bytes(b.bytes()).value();
  }();
  return g;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto c = runtime::parse_precision_config(text);
  check(c.status());
  if (!c.ok()) return 0;
  const std::string json = runtime::precision_config_to_json(*c);
  auto again = runtime::parse_precision_config(json);
  if (!again.ok() || runtime::precision_config_to_json(*again) != json) std::abort();
  static std::shared_ptr<Device> device = open_device({}).value();
  for (const runtime::Numerics n : {runtime::Numerics::kFast, runtime::Numerics::kTt}) {
    runtime::CompileOptions o{.numerics = n};
    o.precision = *c;
    check(runtime::CompiledModel::compile(small_net(), *device, o).status());
  }
  return 0;
}

#ifndef TESSERA_LIBFUZZER
int main(int argc, char** argv) {
  const auto args = tessera::fuzz::parse_fuzz_args(argc, argv, "fuzz_precision_config");
  if (!args) return 2;
  std::vector<std::string> seeds = {
      R"({"amp_level": 1, "rules": [{"op_type": "Conv", "name_regex": "c|r", "output_df": "float32",
          "input_df": {"1": "bfloat16"}, "math_fidelity": "HiFi4", "accumulate_df": "bfloat16"}]})",
      R"([{"name_regex": "logits", "input_df": {"1": "bfloat2_b"}}, {"op_type": "gemm", "output_df": "bfloat16"}])",
      R"({"rules": [{"intermediate_df": "float32", "name_regex": "(a|b)*c{2,3}[^x]"}]})"};
  for (const std::string& f : args->files) seeds.push_back(f);
  const std::vector<std::string> tokens = {"-1",
                                           "0",
                                           "3",
                                           "1e30",
                                           "null",
                                           "[]",
                                           "{}",
                                           "\"\"",
                                           "\"float16\"",
                                           "\"bfloat8_b\"",
                                           "\"LoFi\"",
                                           "\"Conv\"",
                                           "\".*\"",
                                           "\"(\"",
                                           "\"[a-\"",
                                           "{\"0\": \"float32\"}",
                                           "{\"7\": \"bfloat4_b\"}",
                                           "true"};
  const uint64_t runs = tessera::fuzz::mutate_text(*args, seeds, tokens, [](const std::string& m) {
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(m.data()), m.size());
  });
  std::printf("fuzz_precision_config: %llu inputs in %.0f s, no crash\n", static_cast<unsigned long long>(runs),
              args->seconds);
  return 0;
}
#endif
