// Conv kernel choosers for runtime::CompileOptions::conv_chooser: how
// `--select measured|predicted` ranks the kernels that can run each conv
// (cnn::ConvChoice) instead of conv2d's hand-set thresholds ("heuristic",
// src/ops/conv/select.h).
//
//   measured:  each candidate timed on this machine, alternating, the
//              fastest kept; the answer cached per machine and build, so
//              a later compile of the same shapes measures nothing.
//   predicted: each candidate's time asked of the op runtime predictor
//              (predictor.h, trained with "algorithm" in the conv queries);
//              nothing runs.
//
// Both keep the selection's own choice unless another candidate is faster
// by more than `margin`: a kernel the thresholds chose is replaced only on
// evidence beyond the measurement's (or the model's) noise.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "tessera/cnn/layers.h"
#include "tessera/perfmodel/op_query.h"
#include "tessera/perfmodel/predictor.h"

namespace tessera::perfmodel {

enum class ConvSelect : uint8_t { kHeuristic, kMeasured, kPredicted };
std::string_view conv_select_name(ConvSelect s);
// "heuristic" | "measured" | "predicted"
std::optional<ConvSelect> parse_conv_select(std::string_view name);

struct MeasuredChooserOptions {
  // The cache file (JSON, created when absent; "" keeps answers in memory
  // only). default_conv_cache_path() is the usual one.
  std::string cache_path;
  uint32_t workers = 0;  // the device's worker threads (0: its default), part of the machine's key
  int rounds = 3;        // candidates timed in turn, `runs_per_round` runs each; the best round's median kept
                         // (one round when every candidate takes over 2 ms)
  int runs_per_round = 5;
  double margin = 0.03;
  bool verbose = false;  // one line per measured conv on stderr
};
// $TESSERA_CACHE_DIR, else $XDG_CACHE_HOME/tessera, else ~/.cache/tessera,
// then "conv_choices.json".
std::string default_conv_cache_path();
// A cache file that cannot be read or parsed is an error when the first
// conv asks (the file named, what was found); one that cannot be written is
// a warning on stderr. A candidate that fails to run is skipped and named
// in the reason.
cnn::ConvChooser measured_conv_chooser(MeasuredChooserOptions options);

// The conv as a predictor query with "algorithm" set (op_query.h's conv2d /
// conv_transpose2d arguments, the input NCHW as the queries take it).
StatusOr<OpQuery> conv_choice_query(const cnn::ConvChoice& choice, std::string_view algorithm, uint32_t workers);
// Errors the chooser returns: the predictor's (NOT_FOUND without a conv
// model, INVALID_ARGUMENT for a query it cannot encode).
cnn::ConvChooser predicted_conv_chooser(std::shared_ptr<const Predictor> predictor, uint32_t workers = 0,
                                        double margin = 0.03);

}  // namespace tessera::perfmodel
