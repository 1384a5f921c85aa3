// `tessera compare`: a model at a chosen precision against float32, op by
// op, on the same input, to decide the model's precision.
//
// Both runs tap every value an op of the compiled model writes
// (CompileOptions::intermediates_to_save), so the rows are the ops the
// model runs (after fusion), in execution order. Per op: its formats and
// fidelity (and the rule that set them), PCC and max abs error of its
// output against float32's, and its share of the kernel time
// (CompiledModel::op_times_us). The first op under the threshold is marked
// and a rule that keeps it wider is suggested; the suggestion is then
// applied and the model's final PCC with it printed beside the one without.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "model_runner.h"
#include "tessera/base/status.h"

namespace tessera::tools {

struct CompareRequest {
  std::string model;                // ONNX file
  ModelOptions options;             // the precision to compare (dtype, AMP level, rules, fidelity)
  std::vector<std::string> inputs;  // model_io.h's input specs; random values where none is given
  double threshold = 0.999;         // PCC below which an op is marked
  std::string csv;                  // one row per op, written here when set
  std::string plot;                 // a PNG of PCC per op (scripts/plot_compare.py, matplotlib)
  bool check_suggestion = true;     // compile and run with the suggested rule
  int workers = 0;
};

// What compare printed, for tests and tools.
struct CompareResult {
  size_t ops = 0;                                   // rows
  std::optional<size_t> first_under, picked;        // row indexes: the op marked, the op widened
  double final_pcc = 0;                             // the outputs' (worst) PCC against float32
  std::optional<double> final_pcc_with_suggestion;  // the best candidate's (check_suggestion)
  std::string suggestion;  // the precision config JSON suggested ("": none, or none raised the final PCC)
};
StatusOr<CompareResult> compare_command(const CompareRequest& request);

// `name` as an ECMAScript regex that matches it alone.
std::string regex_escape(const std::string& name);

}  // namespace tessera::tools
