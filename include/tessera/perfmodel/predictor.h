// perfmodel::Predictor: how long an op will take on this machine, answered
// from a learned model file (tessera train-predictor) without running it.
//
//   TS_ASSIGN_OR_RETURN(auto p, perfmodel::Predictor::load("predictor.json"));  // cached per path
//   for (const auto& w : p->warnings()) log(w);       // another machine or commit
//   TS_ASSIGN_OR_RETURN(double ns, p->predict_json(
//       R"({"op":"conv2d","input":{"logical_shape":[1,64,56,56]},"out_channels":64,"kernel_size":[3,3],"padding":[1,1]})"));
//
// The file holds, per op family, gradient-boosted trees on log time (trained
// by XGBoost, stored as plain arrays and walked here: a query costs a
// microsecond or two and the predictor links no XGBoost), the feature
// names, the machine fingerprint and the commit its measurements were taken
// at (their kernels), and the held-out error. A prediction is never below the op's roofline floor on
// the model's machine (features.h).
//
// Errors: INVALID_ARGUMENT for a malformed query (op_query.h), NOT_FOUND
// for an op whose family the file has no model for, INVALID_ARGUMENT /
// DATA_LOSS-style messages for a file that is not a predictor or is
// corrupt. Never a silent 0.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tessera/perfmodel/machine.h"
#include "tessera/perfmodel/op_query.h"

namespace tessera::perfmodel {

// One regression forest: trees of (feature, threshold, children) nodes.
struct Forest {
  struct Tree {
    std::vector<int32_t> left, right, feature;  // left[i] < 0: a leaf
    std::vector<float> value;                   // threshold, or the leaf's value
    std::vector<uint8_t> default_left;          // where a missing (NaN) feature goes
  };
  float base = 0;
  std::vector<Tree> trees;
  // Lays the trees out for eval: each node's children side by side, every
  // tree in one array (a query walks ~10 cache lines per tree less than the
  // arrays above would cost). Call after filling `trees`.
  void finalize();
  double eval(const float* features) const;  // base + the leaves reached (finalized)

 private:
  struct Node {
    float value;   // threshold, or the leaf's value
    int32_t left;  // first child (the right one follows it), relative to the tree's root; -1: a leaf
    uint16_t feature;
    uint8_t default_left;
  };
  std::vector<Node> nodes_;
  std::vector<uint32_t> roots_;
};

struct FamilyModel {
  std::string family;
  std::vector<std::string> feature_names;
  Forest forest;  // predicts ln(nanoseconds)
};

class Predictor {
 public:
  static constexpr int kFormatVersion = 1;

  // Parses the file once; later loads of the same path share it (the file's
  // size and mtime unchanged).
  static StatusOr<std::shared_ptr<const Predictor>> load(const std::string& path);
  static StatusOr<std::shared_ptr<const Predictor>> from_json(std::string_view text, std::string_view origin);

  StatusOr<double> predict(const OpQuery& query) const;  // nanoseconds
  StatusOr<double> predict_json(std::string_view query_json) const;

  // Staleness: one line per fact of this machine or build that differs from
  // the model's ("kernel tier: avx512 -> avx2", "commit: 521f181 -> 9ab0c3d").
  const std::vector<std::string>& warnings() const { return warnings_; }
  const MachineFingerprint& machine() const { return machine_; }
  const std::string& commit() const { return commit_; }
  const std::vector<FamilyModel>& families() const { return families_; }

 private:
  Predictor() = default;
  MachineFingerprint machine_;
  std::string commit_, created_;
  std::vector<FamilyModel> families_;
  std::vector<std::string> warnings_;
};

// The file's JSON for families trained elsewhere (train.cc writes it).
std::string predictor_json(const MachineFingerprint& machine, std::string_view commit,
                           const std::vector<FamilyModel>& families, std::string_view metrics_json);

}  // namespace tessera::perfmodel
