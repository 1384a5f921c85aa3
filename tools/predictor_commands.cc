#include "predictor_commands.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <set>

#include "model_runner.h"
#include "tessera/perfmodel/model_queries.h"
#include "tessera/perfmodel/predictor.h"
#include "tessera/perfmodel/sweep.h"
#include "tessera/perfmodel/train.h"

namespace tessera::tools {

using namespace tessera::perfmodel;

struct PredictorCommands::State {
  CLI::App *sweep = nullptr, *train = nullptr, *predict = nullptr;
  std::string db = "perf.sqlite", ops, budget = "20m", export_format, export_out, model = "predictor.json";
  SweepOptions sweep_options;
  bool dry_run = false;
  TrainOptions train_options;
  std::string report, op_json;
  // predict MODEL / sweep --models
  std::string model_path, models;
  ModelOptions model_options;
  bool explain = false;
  int workers = 0;
};

namespace {

// The device ops of each model, compiled for this CPU with `options`, as queries (deduplicated).
StatusOr<std::vector<OpQuery>> model_queries_of(const std::vector<std::string>& paths, const ModelOptions& options,
                                                int workers, std::vector<std::vector<ModelOp>>* per_model = nullptr) {
  TS_ASSIGN_OR_RETURN(auto device, open_device({.worker_threads = workers}));
  ModelQueryOptions qo{.workers = static_cast<uint32_t>(workers)};
  if (options.precision != "float32") qo.activations = DataType::BFLOAT16;
  qo.weights = *parse_data_type(options.precision);
  std::vector<OpQuery> all;
  std::set<std::string> seen;
  for (const std::string& path : paths) {
    TS_ASSIGN_OR_RETURN(LoadedModel m, load_model(path, *device, options));
    TS_ASSIGN_OR_RETURN(std::vector<ModelOp> ops, model_ops(m.model->graph(), qo));
    for (const ModelOp& op : ops)
      if (op.query && seen.insert(to_json(*op.query)).second) all.push_back(*op.query);
    if (per_model) per_model->push_back(std::move(ops));
  }
  TS_RETURN_IF_ERROR(close_device(*device));
  return all;
}

}  // namespace

PredictorCommands::PredictorCommands(CLI::App& app) : s_(std::make_unique<State>()) {
  State& s = *s_;
  s.sweep = app.add_subcommand("sweep", "measure ops over their parameter spaces into the predictor's dataset");
  s.sweep->add_option("--db", s.db, "the dataset (SQLite; created if absent)");
  s.sweep->add_option("--ops", s.ops,
                      "comma-separated sweep spaces (default: all): " + fmt::format("{}", fmt::join(sweep_ops(), ",")));
  s.sweep->add_option("--budget", s.budget, "wall time to spend measuring: 20m, 90s, 1h");
  s.sweep->add_option("--batch", s.sweep_options.batch, "points per space per round (a Latin hypercube)")
      ->check(CLI::Range(1, 4096));
  s.sweep
      ->add_option("--replays", s.sweep_options.replays,
                   "trace replays per point, at least (short ops replay more; their 20%-trimmed mean is kept)")
      ->check(CLI::Range(1, 1000));
  s.sweep
      ->add_option("--passes", s.sweep_options.passes,
                   "times each point is measured, a pass over its batch apart (the median is kept)")
      ->check(CLI::Range(1, 15));
  s.sweep->add_option("--workers", s.sweep_options.workers, "device worker threads (0: one per physical core)");
  s.sweep->add_option("--seed", s.sweep_options.seed, "sampling seed (the same seed redraws the same points)");
  s.sweep->add_flag("--verbose", s.sweep_options.verbose, "print each point before measuring it");
  s.sweep->add_flag("--dry-run", s.dry_run, "print the first round's points as JSON queries; measure nothing");
  s.sweep->add_option("--export", s.export_format, "write the dataset instead of sweeping: csv")
      ->check(CLI::IsMember({"csv"}));
  s.sweep->add_option("-o,--output", s.export_out, "where --export writes");
  s.train = app.add_subcommand("train-predictor", "train the op runtime predictor on a sweep's dataset");
  s.train->add_option("--db", s.db, "the dataset")->check(CLI::ExistingFile);
  s.train->add_option("-o,--output", s.model, "the model file to write");
  s.train->add_option("--machine", s.train_options.machine_id, "the dataset's machine id (default: this machine)");
  s.train->add_option("--report", s.report, "also write the error tables (markdown) here");
  s.train
      ->add_option("--min-rows", s.train_options.min_rows,
                   "families with fewer measured configurations are left out (named in the report)")
      ->check(CLI::Range(8, 1 << 30));
  s.train->add_option("--test-csv", s.train_options.test_predictions_csv,
                      "measured and predicted time per held-out configuration (scripts/predictor_scatter.py plots it)");
  s.predict = app.add_subcommand("predict", "predict an op's kernel time from a trained model");
  auto* op = s.predict->add_option("--op", s.op_json,
                                   "the op as JSON (docs/predictor.md), e.g. "
                                   R"({"op":"relu","input":{"logical_shape":[1,64,56,56]}})");
  auto* model = s.predict
                    ->add_option("model", s.model_path,
                                 "an ONNX model or compiled image: its latency as the sum of its ops' predicted "
                                 "kernel times")
                    ->check(CLI::ExistingFile);
  op->excludes(model);
  s.predict->add_option("--predictor", s.model, "the model file (tessera train-predictor)");
  for (CLI::App* a : {s.predict, s.sweep})
    a->add_option("--dtype", s.model_options.precision, "the models' precision: float32 | bfloat16 | bfloat8_b")
        ->check(CLI::IsMember({"float32", "bfloat16", "bfloat8_b"}));
  s.predict->add_option("--batch", s.model_options.batch, "the model's batch size")->check(CLI::PositiveNumber);
  s.sweep->add_option("--model-batch", s.model_options.batch, "the --models' batch size")->check(CLI::PositiveNumber);
  s.predict->add_option("--workers", s.workers, "device worker threads (0: one per physical core)");
  s.predict->add_flag("--explain", s.explain, "one line per op: its predicted time, its share, its op type and node");
  s.sweep->add_option("--models", s.models,
                      "comma-separated ONNX models or images: measure their ops (before any space; alone unless "
                      "--ops is given)");
}

PredictorCommands::~PredictorCommands() = default;

bool PredictorCommands::chosen() const { return *s_->sweep || *s_->train || *s_->predict; }

StatusOr<double> parse_duration_seconds(std::string_view text) {
  double total = 0;
  size_t i = 0;
  bool any = false;
  while (i < text.size()) {
    size_t j = i;
    while (j < text.size() && (std::isdigit(static_cast<unsigned char>(text[j])) || text[j] == '.')) ++j;
    if (j == i) return invalid_argument_error("duration '{}': expected e.g. 20m, 90s, 1h30m", text);
    double v = 0;
    try {
      v = std::stod(std::string(text.substr(i, j - i)));
    } catch (...) {
      return invalid_argument_error("duration '{}': bad number", text);
    }
    double unit = 1;
    if (j < text.size()) {
      const char u = text[j++];
      unit = u == 'h' ? 3600 : u == 'm' ? 60 : u == 's' ? 1 : -1;
      if (unit < 0) return invalid_argument_error("duration '{}': units are h, m, s", text);
    }
    total += v * unit;
    any = true;
    i = j;
  }
  if (!any || !(total > 0)) return invalid_argument_error("duration '{}': expected a positive time", text);
  return total;
}

namespace {

std::string clock(double s) { return fmt::format("{}m{:02}s", static_cast<int>(s) / 60, static_cast<int>(s) % 60); }

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> v;
  for (size_t i = 0; i < text.size();) {
    size_t j = text.find(',', i);
    if (j == std::string::npos) j = text.size();
    if (j > i) v.push_back(text.substr(i, j - i));
    i = j + 1;
  }
  return v;
}

Status cmd_sweep(const PredictorCommands::State& s) {
  SweepOptions o = s.sweep_options;
  o.ops = split_commas(s.ops);
  const std::string &db = s.db, &budget = s.budget;
  const bool dry_run = s.dry_run;
  if (!s.models.empty()) {
    TS_ASSIGN_OR_RETURN(o.queries, model_queries_of(split_commas(s.models), s.model_options, s.sweep_options.workers));
    o.queries = with_each_conv_algorithm(o.queries);  // what --select predicted ranks
    o.queries_source = "models:" + s.models;
  }
  if (dry_run) {
    for (const OpQuery& q : o.queries) std::printf("%s\n", to_json(q).c_str());
    for (const std::string& op : o.ops.empty() && o.queries.empty() ? sweep_ops() : o.ops) {
      TS_ASSIGN_OR_RETURN(auto qs, sample_space(op, o.batch, 0, o.seed));
      for (const OpQuery& q : qs) std::printf("%s\n", to_json(q).c_str());
    }
    return ok_status();
  }
  TS_ASSIGN_OR_RETURN(auto dataset, Dataset::open(db));
  if (!s.export_format.empty()) {
    if (s.export_out.empty()) return invalid_argument_error("--export csv needs -o FILE");
    TS_RETURN_IF_ERROR(dataset->export_csv(s.export_out));
    std::printf("wrote %s\n", s.export_out.c_str());
    return ok_status();
  }
  TS_ASSIGN_OR_RETURN(o.budget_seconds, parse_duration_seconds(budget));
  const bool tty = isatty(STDERR_FILENO);
  int last_tenth = -1;
  std::fprintf(stderr, "measuring this machine's peaks...\n");
  TS_ASSIGN_OR_RETURN(SweepResult r, run_sweep(*dataset, o, [&](const SweepProgress& p) {
                        const double f = std::min(1.0, p.elapsed_seconds / p.budget_seconds);
                        const int filled = static_cast<int>(f * 30);
                        const std::string line = fmt::format(
                            "[{}{}] {:3.0f}% {}/{}  {:<18} measured {}  refused {}  already had {}",
                            std::string(static_cast<size_t>(filled), '#'),
                            std::string(static_cast<size_t>(30 - filled), '.'), 100 * f, clock(p.elapsed_seconds),
                            clock(p.budget_seconds), p.op, p.measured, p.refused, p.skipped);
                        if (tty)
                          std::fprintf(stderr, "\r%s", line.c_str());
                        else if (static_cast<int>(f * 10) != last_tenth)
                          std::fprintf(stderr, "%s\n", line.c_str());
                        last_tenth = static_cast<int>(f * 10);
                      }));
  if (tty) std::fprintf(stderr, "\n");
  std::printf(
      "swept %.0f s on %s (%s kernels, %u workers): %llu measured, %llu refused by their op, %llu already in %s\n",
      r.seconds, r.machine.cpu_model.c_str(), r.machine.kernel_tier.c_str(), r.machine.workers,
      static_cast<unsigned long long>(r.measured), static_cast<unsigned long long>(r.refused),
      static_cast<unsigned long long>(r.skipped), db.c_str());
  return ok_status();
}

}  // namespace

Status PredictorCommands::run() {
  State& s = *s_;
  if (*s.sweep) return cmd_sweep(s);
  if (*s.train) {
    TS_ASSIGN_OR_RETURN(auto dataset, Dataset::open(s.db));
    TS_ASSIGN_OR_RETURN(TrainReport r, train_predictor(*dataset, s.train_options, s.model));
    const std::string md = r.markdown();
    std::printf("%s\nwrote %s\n", md.c_str(), s.model.c_str());
    if (!s.report.empty()) {
      std::ofstream out(s.report);
      out << md;
      if (!out) return invalid_argument_error("cannot write {}", s.report);
    }
    return ok_status();
  }
  TS_ASSIGN_OR_RETURN(auto p, Predictor::load(s.model));
  for (const std::string& w : p->warnings())
    std::fprintf(stderr, "tessera: warning: %s was trained elsewhere: %s\n", s.model.c_str(), w.c_str());
  if (s.model_path.empty() && s.op_json.empty()) return invalid_argument_error("predict: give --op JSON or a MODEL");
  if (!s.op_json.empty()) {
    TS_ASSIGN_OR_RETURN(OpQuery q, parse_op_query(s.op_json));
    TS_ASSIGN_OR_RETURN(double ns, p->predict(q));
    std::printf("%s: %.3f us predicted (%s, %s kernels, %u workers)\n", q.op.c_str(), ns / 1e3,
                p->machine().cpu_model.c_str(), p->machine().kernel_tier.c_str(), p->machine().workers);
    return ok_status();
  }
  std::vector<std::vector<ModelOp>> per_model;
  TS_RETURN_IF_ERROR(model_queries_of({s.model_path}, s.model_options, s.workers, &per_model).status());
  const std::vector<ModelOp>& ops = per_model.at(0);
  std::vector<double> ns(ops.size(), 0.0);
  double total = 0;
  size_t predicted = 0, views = 0;
  std::vector<std::string> missing;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].view) {
      ++views;
      continue;
    }
    if (!ops[i].query) {
      missing.push_back(fmt::format("{} '{}': {}", ops[i].op_type, ops[i].node, ops[i].note));
      continue;
    }
    StatusOr<double> t = p->predict(*ops[i].query);
    if (!t.ok()) {
      missing.push_back(fmt::format("{} '{}': {}", ops[i].op_type, ops[i].node, t.status().to_string()));
      continue;
    }
    ns[i] = *t;
    total += *t;
    ++predicted;
  }
  std::printf("%s  %s  batch %lld: predicted %.3f ms per batch of device kernels (%.1f FPS), before running it\n",
              s.model_path.c_str(), s.model_options.precision.c_str(), static_cast<long long>(s.model_options.batch),
              total / 1e6, 1e9 / std::max(total, 1.0));
  std::printf("  %zu ops predicted, %zu views (no launch), %zu not modeled; trained on %s (%s kernels, %u workers)\n",
              predicted, views, missing.size(), p->machine().cpu_model.c_str(), p->machine().kernel_tier.c_str(),
              p->machine().workers);
  for (const std::string& m : missing) std::printf("  not modeled: %s\n", m.c_str());
  if (s.explain)
    for (size_t i = 0; i < ops.size(); ++i)
      if (ns[i] > 0)
        std::printf("  %10.3f us %5.1f%%  %-18s %s\n", ns[i] / 1e3, 100 * ns[i] / total, ops[i].op_type.c_str(),
                    ops[i].node.c_str());
  return ok_status();
}

}  // namespace tessera::tools
