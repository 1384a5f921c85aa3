// Training the predictor (`tessera train-predictor`): one gradient-boosted
// forest per op family on ln(kernel time), through XGBoost's C API (Debian's
// libxgboost), with honest held-out error.
//
// Split: by configuration. Each canonical query (to_json) hashes to train
// (70%), validation (15%) or test (15%), so repeated measurements of one
// configuration, across sweeps and commits, never sit in two splits.
// Validation picks the number of trees (early stopping); test is touched
// once, for the reported error, by the same forest walk Predictor uses.
//
// Error (on test): R^2 of the times, MAPE, median APE, and the shares
// within +-10% and +-25%, per family, per op, and per size decile (deciles
// of the op's roofline floor).
#pragma once

#include <array>
#include <string>
#include <vector>

#include "tessera/perfmodel/dataset.h"

namespace tessera::perfmodel {

struct TrainOptions {
  int64_t machine_id = 0;  // 0: the dataset's machine matching this one (else its only machine)
  uint32_t max_trees = 1500;
  uint32_t early_stopping = 60;      // rounds without a better validation error
  uint32_t min_rows = 24;            // families with fewer ok rows are left out (named in the report)
  std::string test_predictions_csv;  // family, op, measured_ns, predicted_ns, floor_ns per test row (for plots)
};

struct ErrorStats {
  size_t n = 0;
  double r2 = 0, mape = 0, median_ape = 0, within10 = 0, within25 = 0;  // shares in [0, 1]
};
ErrorStats error_stats(const std::vector<double>& measured, const std::vector<double>& predicted);

struct FamilyReport {
  std::string family;
  size_t train = 0, valid = 0, test = 0;
  size_t trees = 0;
  // The measurements' own noise: the share of test configurations whose
  // first two passes agree within +-10% (NaN with single-pass sweeps). A
  // model is held to one label per configuration; it cannot beat that
  // label's noise by much.
  double repeat10 = 0;
  ErrorStats test_error;
  std::vector<std::pair<std::string, ErrorStats>> per_op;
  std::vector<ErrorStats> deciles;  // by roofline floor, smallest first
};

struct TrainReport {
  MachineFingerprint machine;
  std::vector<FamilyReport> families;
  std::vector<std::string> skipped;  // "upsample: 12 rows (min 24)"
  std::string markdown() const;      // the tables bench/RESULTS.md keeps
  std::string metrics_json() const;  // stored in the model file
};

StatusOr<TrainReport> train_predictor(Dataset& dataset, const TrainOptions& options, const std::string& out_path);

}  // namespace tessera::perfmodel
