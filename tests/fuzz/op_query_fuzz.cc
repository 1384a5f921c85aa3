// Fuzz target for the predictor's parsers: op queries (perfmodel/op_query.h)
// and model files (Predictor::from_json).
//
// LLVMFuzzerTestOneInput is the libFuzzer / AFL++ entry point (build with
// clang -fsanitize=fuzzer and -DTESSERA_LIBFUZZER). Without libFuzzer this
// file's main() is a bounded mutation fuzzer CI runs under ASan:
//
//   fuzz_op_query [--seconds S] [--seed N] [SEED.json ...]
//
// Seeds: the documented short form, points of every sweep space, a small
// model file, plus any files given. A query that parses must survive its
// features and serialize to a query that parses back equal; a model that
// loads must answer or refuse a query. The target fails on a crash (the
// sanitizers' report), an error with an empty message, or a round trip
// that changes the query.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "fuzz/fuzz_args.h"
#include "tessera/perfmodel/features.h"
#include "tessera/perfmodel/predictor.h"
#include "tessera/perfmodel/sweep.h"

namespace {

using namespace tessera::perfmodel;

void check(const tessera::Status& s) {
  if (!s.ok() && s.message().empty()) std::abort();
}

std::string small_model() {
  FamilyModel f{.family = "eltwise_unary", .feature_names = feature_names("eltwise_unary")};
  Forest::Tree t{.left = {1, -1, -1},
                 .right = {2, -1, -1},
                 .feature = {1, 0, 0},
                 .value = {20.0f, 6.0f, 9.0f},
                 .default_left = {1, 0, 0}};
  f.forest.base = 0.5f;
  f.forest.trees = {t, t};
  return predictor_json(this_machine(2), "fuzz", {f}, "{}");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto q = parse_op_query(text);
  check(q.status());
  if (q.ok()) {
    const MachineFingerprint m = this_machine(2);
    std::vector<float> x;
    const double floor_ns = append_features(*q, m, x);
    if (x.size() != feature_names(find_op(q->op)->family).size()) std::abort();
    if (!(floor_ns > 0) || floor_ns != roofline_floor_ns(*q, op_cost(*q), m)) std::abort();
    auto again = parse_op_query(to_json(*q));
    if (!again.ok() || !(*again == *q)) std::abort();
  }
  auto p = Predictor::from_json(text, "fuzz");
  check(p.status());
  if (p.ok()) {
    auto ns = (*p)->predict_json(R"({"op":"relu","input":{"logical_shape":[1,64,56,56]}})");
    check(ns.status());
    if (ns.ok() && !(*ns > 0)) std::abort();
  }
  return 0;
}

#ifndef TESSERA_LIBFUZZER
int main(int argc, char** argv) {
  const auto args = tessera::fuzz::parse_fuzz_args(argc, argv, "fuzz_op_query");
  if (!args) return 2;
  std::vector<std::string> seeds = {
      R"({"op":"conv2d","input":{"logical_shape":[1,64,56,56],"dtype":"FLOAT32"},"out_channels":64,"kernel_size":[3,3],"padding":[1,1]})",
      R"({"op":"add","input_a":{"logical_shape":[1,8,8,16],"tensor_layout":{"dtype":"DataType::BFLOAT16","memory_config":{"buffer_type":"L1"}}}})",
      small_model()};
  for (const std::string& space : sweep_ops()) {
    auto queries = sample_space(space, 4, 0);
    for (const OpQuery& q : queries.value()) seeds.push_back(to_json(q));
  }
  for (const std::string& f : args->files) seeds.push_back(f);
  // Fragments a mutation may splice in: the values the parsers branch on.
  const std::vector<std::string> tokens = {"-1",
                                           "0",
                                           "1e30",
                                           "4294967296",
                                           "1.5",
                                           "null",
                                           "[]",
                                           "{}",
                                           "\"\"",
                                           "\"TILE\"",
                                           "\"bfloat8_b\"",
                                           "\"L1\"",
                                           "\"HEIGHT_SHARDED\"",
                                           "[1,2,3,4,5,6,7,8,9]",
                                           "16777217",
                                           "true",
                                           "\"same\"",
                                           "NaN",
                                           "\"relu\"",
                                           "[0,1]"};
  const uint64_t runs = tessera::fuzz::mutate_text(*args, seeds, tokens, [](const std::string& m) {
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(m.data()), m.size());
  });
  std::printf("fuzz_op_query: %llu inputs in %.0f s, no crash\n", static_cast<unsigned long long>(runs), args->seconds);
  return 0;
}
#endif
