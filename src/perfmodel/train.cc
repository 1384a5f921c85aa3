#include "tessera/perfmodel/train.h"

#include <fmt/ranges.h>
#include <xgboost/c_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>

#include "tessera/perfmodel/features.h"
#include "tessera/perfmodel/predictor.h"

namespace tessera::perfmodel {
namespace {

using nlohmann::json;

Status xgb(int rc, std::string_view what) {
  return rc == 0 ? ok_status() : internal_error("XGBoost {}: {}", what, XGBGetLastError());
}

// Owning handles (move-only).
template <class H, int (*Free)(H)>
struct Handle {
  H h = nullptr;
  Handle() = default;
  Handle(Handle&& o) noexcept : h(std::exchange(o.h, nullptr)) {}
  Handle& operator=(Handle&&) = delete;
  ~Handle() {
    if (h) Free(h);
  }
};
using Matrix = Handle<DMatrixHandle, XGDMatrixFree>;
using Booster = Handle<BoosterHandle, XGBoosterFree>;

struct Rows {
  std::vector<float> x;  // row-major
  std::vector<float> y;  // ln(ns)
  std::vector<double> floor_ns;
  std::vector<double> repeat_error;  // |first half - second half| / median of the kept measurement
  std::vector<std::string> op;
  size_t n() const { return y.size(); }
};

enum Split { kTrain, kValid, kTest };
Split split_of(const std::string& query) {  // by configuration: FNV-1a of the canonical query
  uint64_t h = 1469598103934665603ull;
  for (char c : query) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  const uint64_t b = h % 100;
  return b < 70 ? kTrain : b < 85 ? kValid : kTest;
}

StatusOr<Matrix> matrix(const Rows& r, size_t cols) {
  Matrix m;
  TS_RETURN_IF_ERROR(xgb(XGDMatrixCreateFromMat(r.x.data(), r.n(), cols, std::nanf(""), &m.h), "DMatrix"));
  TS_RETURN_IF_ERROR(xgb(XGDMatrixSetFloatInfo(m.h, "label", r.y.data(), r.n()), "labels"));
  return m;
}

// XGBoost's JSON model (format of 1.x: learner.gradient_booster.model.trees) as a Forest.
StatusOr<Forest> forest_of(BoosterHandle b) {
  bst_ulong len = 0;
  const char* buf = nullptr;
  TS_RETURN_IF_ERROR(xgb(XGBoosterSaveModelToBuffer(b, R"({"format": "json"})", &len, &buf), "save"));
  json j = json::parse(std::string_view(buf, len), nullptr, false);
  if (j.is_discarded()) return internal_error("XGBoost saved a model that is not JSON");
  Forest f;
  try {
    const json& learner = j.at("learner");
    f.base = std::stof(learner.at("learner_model_param").at("base_score").get<std::string>());
    for (const json& t : learner.at("gradient_booster").at("model").at("trees")) {
      Forest::Tree tree;
      tree.left = t.at("left_children").get<std::vector<int32_t>>();
      tree.right = t.at("right_children").get<std::vector<int32_t>>();
      tree.feature = t.at("split_indices").get<std::vector<int32_t>>();
      tree.value = t.at("split_conditions").get<std::vector<float>>();  // a leaf's value where it is a leaf
      tree.default_left = t.at("default_left").get<std::vector<uint8_t>>();
      f.trees.push_back(std::move(tree));
    }
  } catch (const json::exception& e) {
    return internal_error("XGBoost's JSON model has an unexpected shape: {}", e.what());
  }
  f.finalize();
  return f;
}

double valid_rmse(BoosterHandle b, int iter, DMatrixHandle valid) {
  const char* names[] = {"valid"};
  const char* out = nullptr;
  if (XGBoosterEvalOneIter(b, iter, &valid, names, 1, &out) != 0 || !out) return INFINITY;
  const char* p = std::strstr(out, "valid-rmse:");
  return p ? std::atof(p + 11) : INFINITY;
}

void describe(std::string& md, const std::string& name, const ErrorStats& e) {
  md += fmt::format("| {} | {} | {:.3f} | {:.1f}% | {:.1f}% | {:.1f}% | {:.1f}% |\n", name, e.n, e.r2, 100 * e.mape,
                    100 * e.median_ape, 100 * e.within10, 100 * e.within25);
}

json stats_json(const ErrorStats& e) {
  return {{"n", e.n},
          {"r2", e.r2},
          {"mape", e.mape},
          {"median_ape", e.median_ape},
          {"within10", e.within10},
          {"within25", e.within25}};
}

}  // namespace

ErrorStats error_stats(const std::vector<double>& measured, const std::vector<double>& predicted) {
  ErrorStats e;
  e.n = measured.size();
  if (e.n == 0) return e;
  std::vector<double> ape(e.n);
  double mean = 0, ss_res = 0, ss_tot = 0;
  for (double m : measured) mean += m / static_cast<double>(e.n);
  for (size_t i = 0; i < e.n; ++i) {
    ape[i] = std::fabs(predicted[i] - measured[i]) / measured[i];
    ss_res += (predicted[i] - measured[i]) * (predicted[i] - measured[i]);
    ss_tot += (measured[i] - mean) * (measured[i] - mean);
    e.mape += ape[i] / static_cast<double>(e.n);
    e.within10 += (ape[i] <= 0.10) / static_cast<double>(e.n);
    e.within25 += (ape[i] <= 0.25) / static_cast<double>(e.n);
  }
  e.r2 = ss_tot > 0 ? 1 - ss_res / ss_tot : 0;
  std::nth_element(ape.begin(), ape.begin() + static_cast<std::ptrdiff_t>(e.n / 2), ape.end());
  e.median_ape = ape[e.n / 2];
  return e;
}

StatusOr<TrainReport> train_predictor(Dataset& dataset, const TrainOptions& options, const std::string& out_path) {
  TrainReport report;
  int64_t machine = options.machine_id;
  TS_ASSIGN_OR_RETURN(auto machines, dataset.machines());
  if (machines.empty()) return failed_precondition_error("the dataset holds no measurements (run tessera sweep)");
  if (machine == 0) {
    const MachineFingerprint here = this_machine();
    for (const auto& [id, m] : machines)
      if (fingerprint_differences(m, here).empty() ||
          (m.cpu_model == here.cpu_model && m.workers == here.workers && m.kernel_tier == here.kernel_tier))
        machine = id;
    if (machine == 0 && machines.size() == 1) machine = machines[0].first;
    if (machine == 0)
      return failed_precondition_error("the dataset holds {} machines and none is this one; choose with --machine ID",
                                       machines.size());
  }
  TS_ASSIGN_OR_RETURN(report.machine, dataset.machine(machine));
  TS_ASSIGN_OR_RETURN(std::vector<MeasurementRow> rows, dataset.rows(machine, true));

  // Several measurements of one configuration (commits, reruns) become its median.
  // The commit the model speaks for: the one most of its measurements were taken at.
  std::map<std::string, size_t> commits;
  for (const MeasurementRow& r : rows) ++commits[r.commit];
  std::string commit(tessera_commit());
  size_t most = 0;
  for (const auto& [c, n] : commits)
    if (n > most) commit = c, most = n;
  std::map<std::string, std::vector<double>> times;
  std::map<std::string, double> repeat;
  for (const MeasurementRow& r : rows)
    if (r.time_ns > 0) {
      times[r.query].push_back(r.time_ns);
      repeat[r.query] = r.passes >= 2 ? std::fabs(r.run_a_ns - r.run_b_ns) / r.time_ns : NAN;
    }

  std::map<std::string, std::array<Rows, 3>> by_family;
  for (auto& [query, t] : times) {
    StatusOr<OpQuery> q = parse_op_query(query);
    if (!q.ok()) continue;  // an op this Tessera no longer knows
    std::nth_element(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(t.size() / 2), t.end());
    Rows& r = by_family[std::string(find_op(q->op)->family)][split_of(query)];
    r.floor_ns.push_back(append_features(*q, report.machine, r.x));
    r.y.push_back(static_cast<float>(std::log(t[t.size() / 2])));
    r.repeat_error.push_back(repeat[query]);
    r.op.push_back(q->op);
  }

  std::ofstream csv;
  if (!options.test_predictions_csv.empty()) {
    csv.open(options.test_predictions_csv);
    if (!csv) return invalid_argument_error("cannot write {}", options.test_predictions_csv);
    csv << "family,op,measured_ns,predicted_ns,floor_ns\n";
  }
  std::vector<FamilyModel> models;
  for (auto& [family, split] : by_family) {
    const size_t total = split[kTrain].n() + split[kValid].n() + split[kTest].n();
    if (total < options.min_rows || split[kTrain].n() < 8 || split[kValid].n() < 2 || split[kTest].n() < 2) {
      report.skipped.push_back(fmt::format("{}: {} configurations (train {}, valid {}, test {}; min {})", family, total,
                                           split[kTrain].n(), split[kValid].n(), split[kTest].n(), options.min_rows));
      continue;
    }
    const std::vector<std::string> names = feature_names(family);
    TS_ASSIGN_OR_RETURN(Matrix train, matrix(split[kTrain], names.size()));
    TS_ASSIGN_OR_RETURN(Matrix valid, matrix(split[kValid], names.size()));
    Booster b;
    TS_RETURN_IF_ERROR(xgb(XGBoosterCreate(&train.h, 1, &b.h), "create"));
    double mean = 0;
    for (float y : split[kTrain].y) mean += y / static_cast<double>(split[kTrain].n());
    const std::pair<const char*, std::string> params[] = {{"objective", "reg:squarederror"},
                                                          {"tree_method", "hist"},
                                                          {"max_depth", "7"},
                                                          {"eta", "0.1"},
                                                          {"subsample", "0.85"},
                                                          {"colsample_bytree", "0.9"},
                                                          {"min_child_weight", "1"},
                                                          {"lambda", "1"},
                                                          {"nthread", "2"},
                                                          {"seed", "7"},
                                                          {"base_score", fmt::format("{}", mean)},
                                                          {"verbosity", "0"}};
    for (const auto& [k, v] : params) TS_RETURN_IF_ERROR(xgb(XGBoosterSetParam(b.h, k, v.c_str()), k));
    double best = INFINITY;
    int best_iter = 0;
    for (int it = 0; it < static_cast<int>(options.max_trees); ++it) {
      TS_RETURN_IF_ERROR(xgb(XGBoosterUpdateOneIter(b.h, it, train.h), "update"));
      const double rmse = valid_rmse(b.h, it, valid.h);
      if (rmse < best - 1e-6) best = rmse, best_iter = it;
      if (it - best_iter >= static_cast<int>(options.early_stopping)) break;
    }
    Booster sliced;
    TS_RETURN_IF_ERROR(xgb(XGBoosterSlice(b.h, 0, best_iter + 1, 1, &sliced.h), "slice"));
    TS_ASSIGN_OR_RETURN(Forest forest, forest_of(sliced.h));

    // The forest walk must agree with XGBoost's own predictions (validation rows).
    bst_ulong const* shape = nullptr;
    bst_ulong dim = 0;
    const float* out = nullptr;
    TS_RETURN_IF_ERROR(xgb(XGBoosterPredictFromDMatrix(sliced.h, valid.h,
                                                       R"({"type": 0, "training": false, "iteration_begin": 0,
                                                           "iteration_end": 0, "strict_shape": false})",
                                                       &shape, &dim, &out),
                           "predict"));
    for (size_t i = 0; i < split[kValid].n(); ++i)
      if (std::fabs(forest.eval(&split[kValid].x[i * names.size()]) - out[i]) > 1e-3)
        return internal_error("family {}: the forest walk gives {} where XGBoost gives {} (row {})", family,
                              forest.eval(&split[kValid].x[i * names.size()]), out[i], i);

    FamilyReport fr{.family = family,
                    .train = split[kTrain].n(),
                    .valid = split[kValid].n(),
                    .test = split[kTest].n(),
                    .trees = forest.trees.size()};
    const Rows& test = split[kTest];
    std::vector<double> measured(test.n()), predicted(test.n());
    for (size_t i = 0; i < test.n(); ++i) {
      measured[i] = std::exp(static_cast<double>(test.y[i]));
      predicted[i] = std::max(std::exp(forest.eval(&test.x[i * names.size()])), test.floor_ns[i]);
      if (csv.is_open())
        csv << family << ',' << test.op[i] << ',' << measured[i] << ',' << predicted[i] << ',' << test.floor_ns[i]
            << '\n';
    }
    fr.test_error = error_stats(measured, predicted);
    size_t repeated = 0;
    for (double e : test.repeat_error)
      if (!std::isnan(e)) fr.repeat10 += e <= 0.10, ++repeated;
    fr.repeat10 = repeated ? fr.repeat10 / static_cast<double>(repeated) : NAN;
    std::map<std::string, std::pair<std::vector<double>, std::vector<double>>> per_op;
    for (size_t i = 0; i < test.n(); ++i) {
      per_op[test.op[i]].first.push_back(measured[i]);
      per_op[test.op[i]].second.push_back(predicted[i]);
    }
    if (per_op.size() > 1)
      for (const auto& [op, mp] : per_op) fr.per_op.emplace_back(op, error_stats(mp.first, mp.second));
    std::vector<size_t> order(test.n());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return test.floor_ns[a] < test.floor_ns[b]; });
    if (test.n() >= 20)
      for (size_t d = 0; d < 10; ++d) {
        std::vector<double> m, p;
        for (size_t k = d * test.n() / 10; k < (d + 1) * test.n() / 10; ++k) {
          m.push_back(measured[order[k]]);
          p.push_back(predicted[order[k]]);
        }
        fr.deciles.push_back(error_stats(m, p));
      }
    report.families.push_back(std::move(fr));
    models.push_back({.family = family, .feature_names = names, .forest = std::move(forest)});
  }
  if (models.empty())
    return failed_precondition_error("no family has enough measurements to train on ({}); sweep longer",
                                     fmt::format("{}", fmt::join(report.skipped, "; ")));
  std::ofstream out_file(out_path, std::ios::binary | std::ios::trunc);
  if (!out_file) return invalid_argument_error("cannot write {}", out_path);
  out_file << predictor_json(report.machine, commit, models, report.metrics_json());
  out_file.flush();
  if (!out_file) return internal_error("writing {} failed", out_path);
  return report;
}

std::string TrainReport::markdown() const {
  std::string md = fmt::format(
      "Machine: {} ({} kernels, {} workers; FP32 FMA {:.0f} GFLOP/s, copy {:.1f} GB/s DRAM, "
      "{:.0f} GB/s cache). Held-out test split, by configuration.\n\n",
      machine.cpu_model, machine.kernel_tier, machine.workers, machine.fma_gflops, machine.dram_gbps,
      machine.cache_gbps);
  md +=
      "| family / op | test configs | R² | MAPE | median APE | within ±10% | within ±25% "
      "|\n|---|---|---|---|---|---|---|\n";
  for (const FamilyReport& f : families) {
    describe(md,
             fmt::format("**{}** (train {}, valid {}, {} trees; repeatable within ±10%: {:.0f}%)", f.family, f.train,
                         f.valid, f.trees, 100 * f.repeat10),
             f.test_error);
    for (const auto& [op, e] : f.per_op) describe(md, "  " + op, e);
  }
  md += "\nPer size decile (by roofline floor, smallest first): share within ±10% / ±25%\n\n| family | ";
  for (int d = 1; d <= 10; ++d) md += fmt::format("d{} | ", d);
  md += "\n|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const FamilyReport& f : families) {
    if (f.deciles.empty()) continue;
    md += "| " + f.family + " | ";
    for (const ErrorStats& e : f.deciles) md += fmt::format("{:.0f} / {:.0f} | ", 100 * e.within10, 100 * e.within25);
    md += "\n";
  }
  for (const std::string& s : skipped) md += "\nNot trained: " + s;
  return md + "\n";
}

std::string TrainReport::metrics_json() const {
  json j = json::object();
  for (const FamilyReport& f : families) {
    json ops = json::object();
    for (const auto& [op, e] : f.per_op) ops[op] = stats_json(e);
    j[f.family] = {{"train", f.train},
                   {"valid", f.valid},
                   {"test", f.test},
                   {"trees", f.trees},
                   {"repeatable_within10", f.repeat10},
                   {"test_error", stats_json(f.test_error)},
                   {"per_op", ops}};
  }
  return j.dump();
}

}  // namespace tessera::perfmodel
