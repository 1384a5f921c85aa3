#include "compare_command.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "tessera/cnn/testing.h"
#include "tessera/runtime/compiled_model.h"

namespace tessera::tools {

std::string regex_escape(const std::string& name) {
  std::string out;
  for (char ch : name) {
    if (std::string_view("\\^$.|?*+()[]{}").find(ch) != std::string_view::npos) out += '\\';
    out += ch;
  }
  return out;
}

namespace {

constexpr size_t kCandidates = 3;  // ops tried for a suggestion (each one compile and run)

struct Row {
  std::string node, op_type, value;
  std::vector<std::string> inputs;  // the values it reads that an op made
  runtime::OpPrecision precision;
  double pcc = 1, max_abs = 0, time_us = 0;
  double loss = 0;  // the PCC it loses: its worst input's PCC less its own
};

std::string short_formats(const runtime::OpPrecision& p) {
  std::string s(data_type_name(p.output_df));
  s += fmt::format(" {:<9}", p.weights_df ? data_type_name(*p.weights_df) : "-");
  s += fmt::format(" {:<5}", p.math_fidelity ? math_fidelity_name(*p.math_fidelity) : "-");
  return s;
}

// A rule that keeps `p`'s op wider: bfloat16 weights for block-float ones,
// float32 output for a bfloat16 one, HiFi4 below it. Nullopt when the op
// already computes as wide as its input allows.
std::optional<runtime::PrecisionRule> widening_rule(const Row& r) {
  runtime::PrecisionRule rule{.name_regex = regex_escape(r.node)};
  const runtime::OpPrecision& p = r.precision;
  bool wider = false;
  if (p.weights_df && is_block_float(*p.weights_df)) rule.input_df[1] = DataType::BFLOAT16, wider = true;
  if (p.output_df == DataType::BFLOAT16) rule.output_df = DataType::FLOAT32, wider = true;
  if (p.math_fidelity && *p.math_fidelity != MathFidelity::HiFi4)
    rule.math_fidelity = MathFidelity::HiFi4, wider = true;
  if (!wider) return std::nullopt;
  return rule;
}

double final_pcc(const std::vector<Tensor>& golden, const std::vector<Tensor>& got) {
  double worst = 1;
  for (size_t k = 0; k < golden.size(); ++k) {
    const std::vector<float> a = golden[k].cpu().value().to_vector().value(),
                             b = got[k].cpu().value().to_vector().value();
    worst = std::min(worst, cnn::comp_pcc(a, b).pcc);
  }
  return worst;
}

struct Compiled {
  std::unique_ptr<runtime::CompiledModel> model;
  runtime::CompiledModel::Outputs outputs;
};

StatusOr<Compiled> compile_and_run(const graph::Graph& g, Device& device, runtime::CompileOptions o,
                                   const std::vector<std::string>& taps, std::span<const Tensor> inputs) {
  o.intermediates_to_save = taps;
  Compiled c;
  TS_ASSIGN_OR_RETURN(c.model, runtime::CompiledModel::compile(g, device, o));
  TS_ASSIGN_OR_RETURN(c.outputs, c.model->run_with_intermediates(inputs));
  return c;
}

Status write_csv(const std::string& path, const std::vector<Row>& rows, double total_us) {
  std::ofstream f(path);
  f << "index,node,op_type,output_df,weights_df,math_fidelity,pcc,pcc_lost,max_abs_error,time_us,time_share\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const runtime::OpPrecision& p = r.precision;
    f << fmt::format("{},\"{}\",{},{},{},{},{:.9f},{:.3e},{:.6g},{:.3f},{:.5f}\n", i, r.node, r.op_type,
                     data_type_name(p.output_df), p.weights_df ? data_type_name(*p.weights_df) : "",
                     p.math_fidelity ? math_fidelity_name(*p.math_fidelity) : "", r.pcc, r.loss, r.max_abs, r.time_us,
                     total_us > 0 ? r.time_us / total_us : 0.0);
  }
  f.close();
  if (!f) return internal_error("--csv {}: cannot write the file", path);
  return ok_status();
}

// scripts/plot_compare.py from the source tree, or installed beside the data files.
Status plot(const std::string& csv, const std::string& png, double threshold) {
  std::string script;
  for (const char* s : {TESSERA_PLOT_SCRIPT, TESSERA_PLOT_SCRIPT_INSTALLED})
    if (std::filesystem::is_regular_file(s)) script = s;
  if (script.empty())
    return not_found_error("--plot: plot_compare.py is neither at {} nor at {}", TESSERA_PLOT_SCRIPT,
                           TESSERA_PLOT_SCRIPT_INSTALLED);
  // (Debian's python3-matplotlib imports under /usr/bin/python3.)
  const std::string cmd = fmt::format("/usr/bin/python3 '{}' '{}' '{}' {}", script, csv, png, threshold);
  if (const int rc = std::system(cmd.c_str()); rc != 0)
    return internal_error("--plot: '{}' failed (exit status {}); it needs python3-matplotlib", cmd, rc);
  return ok_status();
}

}  // namespace

StatusOr<CompareResult> compare_command(const CompareRequest& req) {
  if (is_image_file(req.model))
    return invalid_argument_error(
        "{}: compare compiles the model twice (its precision and float32): give the ONNX file", req.model);
  TS_ASSIGN_OR_RETURN(
      auto device,
      open_device(
          {.descriptor = "cpu", .l1_small_size = 16384, .trace_region_size = 8 << 20, .worker_threads = req.workers}));
  ModelOptions mo = req.options;
  TS_ASSIGN_OR_RETURN(const std::vector<DeclaredInput> declared, declared_inputs(req.model));
  std::vector<std::string> notes;
  TS_ASSIGN_OR_RETURN(auto files, read_inputs(req.inputs, declared, &notes));
  for (const std::string& n : notes) std::printf("%s\n", n.c_str());
  TS_RETURN_IF_ERROR(shapes_from_inputs(declared, files, mo));
  TS_ASSIGN_OR_RETURN(graph::Graph g, import_graph(req.model, mo, nullptr));
  TS_ASSIGN_OR_RETURN(runtime::CompileOptions test_opt, compile_options_for(mo));
  runtime::CompileOptions golden_opt{.optimize = test_opt.optimize, .micro_batch = test_opt.micro_batch};

  // The model as it runs at the chosen precision: its ops, their formats, their times.
  TS_ASSIGN_OR_RETURN(auto probe, runtime::CompiledModel::compile(g, *device, test_opt));
  TS_ASSIGN_OR_RETURN(std::vector<Tensor> host_xs, host_inputs(*probe, files));
  std::vector<Tensor> xs;
  for (const Tensor& x : host_xs) {
    TS_ASSIGN_OR_RETURN(Tensor d, to_device(x, *device));
    xs.push_back(std::move(d));
  }
  TS_ASSIGN_OR_RETURN(const std::vector<double> times, probe->op_times_us(xs));
  const graph::Graph& pg = probe->graph();
  std::vector<Row> rows;
  std::vector<std::string> taps;
  // Values the passes made (a QDQ pair's float ops, say) have no name in
  // the model the taps are set on: their ops are not compared.
  std::set<std::string> named;
  for (const graph::Value& v : g.values) named.insert(v.name);
  size_t unnamed = 0;
  for (size_t ni = 0; ni < pg.nodes.size(); ++ni) {
    const graph::Node& n = pg.nodes[ni];
    if (n.outputs.empty() || pg.value(n.outputs[0]).type != graph::ElemType::FLOAT32) continue;
    if (!named.count(pg.value(n.outputs[0]).name)) {
      ++unnamed;
      continue;
    }
    std::vector<std::string> ins;
    for (int v : n.inputs)
      if (v >= 0 && pg.value(v).producer >= 0) ins.push_back(pg.value(v).name);
    rows.push_back({.node = n.name,
                    .op_type = n.op_type,
                    .value = pg.value(n.outputs[0]).name,
                    .inputs = std::move(ins),
                    .precision = probe->op_precision()[ni],
                    .time_us = times[ni]});
    taps.push_back(regex_escape(rows.back().value));
  }
  TS_ASSIGN_OR_RETURN(Compiled golden, compile_and_run(g, *device, golden_opt, taps, xs));
  TS_ASSIGN_OR_RETURN(Compiled test, compile_and_run(g, *device, test_opt, taps, xs));
  // Each op's value: a tap, or one of the model's outputs (which are not tapped twice).
  auto value_of = [](const Compiled& c, const std::string& name) -> std::optional<Tensor> {
    const std::vector<std::string> outs = c.model->output_names(), tapped = c.model->intermediate_names();
    for (size_t k = 0; k < outs.size(); ++k)
      if (outs[k] == name) return c.outputs.outputs[k];
    for (size_t k = 0; k < tapped.size(); ++k)
      if (tapped[k] == name) return c.outputs.intermediates[k];
    return std::nullopt;
  };
  double total_us = 0;
  for (const Row& r : rows) total_us += r.time_us;
  std::optional<size_t> first_under;
  std::map<std::string, double> pcc_of;  // by value
  for (size_t i = 0; i < rows.size(); ++i) {
    Row& r = rows[i];
    const std::optional<Tensor> a = value_of(golden, r.value), b = value_of(test, r.value);
    if (!a || !b) return internal_error("compare: the value '{}' of {} came back from one run only", r.value, r.node);
    TS_ASSIGN_OR_RETURN(Tensor ha, a->cpu());
    TS_ASSIGN_OR_RETURN(Tensor hb, b->cpu());
    TS_ASSIGN_OR_RETURN(std::vector<float> va, ha.to_vector());
    TS_ASSIGN_OR_RETURN(std::vector<float> vb, hb.to_vector());
    r.pcc = cnn::comp_pcc(va, vb).pcc;
    for (size_t k = 0; k < va.size(); ++k)
      if (std::isfinite(va[k]) && std::isfinite(vb[k]))
        r.max_abs = std::max(r.max_abs, static_cast<double>(std::abs(va[k] - vb[k])));
    double in_pcc = 1;
    for (const std::string& v : r.inputs)
      if (auto it = pcc_of.find(v); it != pcc_of.end()) in_pcc = std::min(in_pcc, it->second);
    r.loss = in_pcc - r.pcc;
    pcc_of[r.value] = r.pcc;
    if (!first_under && r.pcc < req.threshold) first_under = i;
  }

  std::printf("%s: %zu ops at the chosen precision against float32 (HiFi4), the same input\n", req.model.c_str(),
              rows.size());
  if (unnamed)
    std::printf("(%zu more ops compute values the passes made, which have no name in the model to tap)\n", unnamed);
  std::printf("%4s  %-44s %-17s %-8s %-9s %-5s %10s %10s %10s %6s\n", "#", "op", "type", "output", "weights", "fid.",
              "PCC", "lost", "max|err|", "time");
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    std::string name = r.node.size() > 44 ? "..." + r.node.substr(r.node.size() - 41) : r.node;
    std::printf("%4zu  %-44s %-17s %s %10.6f %10.2e %10.3g %5.1f%%%s\n", i, name.c_str(), r.op_type.c_str(),
                short_formats(r.precision).c_str(), r.pcc, r.loss, r.max_abs,
                total_us > 0 ? 100 * r.time_us / total_us : 0.0,
                first_under == i ? fmt::format("  <- first under {}", req.threshold).c_str() : "");
  }
  const double pcc_before = final_pcc(golden.outputs.outputs, test.outputs.outputs);
  std::printf("final outputs: PCC %.6f against float32; kernel time %.2f ms (eager, op by op)\n", pcc_before,
              total_us / 1e3);
  CompareResult result{.ops = rows.size(), .first_under = first_under, .final_pcc = pcc_before};
  if (!req.csv.empty()) TS_RETURN_IF_ERROR(write_csv(req.csv, rows, total_us));
  if (!req.plot.empty()) {
    const std::string csv = req.csv.empty() ? req.plot + ".csv" : req.csv;
    if (req.csv.empty()) TS_RETURN_IF_ERROR(write_csv(csv, rows, total_us));
    TS_RETURN_IF_ERROR(plot(csv, req.plot, req.threshold));
    if (req.csv.empty()) std::filesystem::remove(csv);
    std::printf("plot: %s\n", req.plot.c_str());
  }
  // Candidates to widen, in order: the first op under the threshold, then
  // the ops that lose the most PCC (where error enters), of those a rule can
  // widen. With check_suggestion each is tried (one compile and run each)
  // and the one that raises the final PCC most is suggested.
  std::vector<size_t> candidates;
  if (first_under && widening_rule(rows[*first_under])) candidates.push_back(*first_under);
  if (first_under && !widening_rule(rows[*first_under]))
    std::printf("'%s' computes as wide as its input allows (%s): its error comes from the ops before it\n",
                rows[*first_under].node.c_str(), rows[*first_under].precision.to_string().c_str());
  std::vector<size_t> by_loss;
  for (size_t i = 0; i < rows.size(); ++i)
    if (widening_rule(rows[i])) by_loss.push_back(i);
  std::stable_sort(by_loss.begin(), by_loss.end(), [&](size_t a, size_t b) { return rows[a].loss > rows[b].loss; });
  for (size_t i : by_loss)
    if (candidates.size() < (req.check_suggestion ? kCandidates : 1) &&
        std::find(candidates.begin(), candidates.end(), i) == candidates.end())
      candidates.push_back(i);
  if (candidates.empty()) {
    std::printf("every op computes in its widest formats: nothing to suggest\n");
    TS_RETURN_IF_ERROR(close_device(*device));
    return result;
  }
  auto config_with = [&](size_t i) {
    runtime::PrecisionConfig c = test_opt.precision;
    c.rules.push_back(*widening_rule(rows[i]));
    return c;
  };
  size_t best = candidates[0];
  if (req.check_suggestion) {
    std::printf("trying a wider rule for %zu op(s):\n", candidates.size());
    double best_pcc = -2;
    for (size_t i : candidates) {
      runtime::CompileOptions with = test_opt;
      with.precision = config_with(i);
      TS_ASSIGN_OR_RETURN(Compiled c, compile_and_run(g, *device, with, {}, xs));
      const double p = final_pcc(golden.outputs.outputs, c.outputs.outputs);
      std::printf("  %4zu '%s' (%s, lost %.2e): final PCC %.6f\n", i, rows[i].node.c_str(),
                  first_under == i ? "first under the threshold" : "loses the most", rows[i].loss, p);
      if (p > best_pcc) best_pcc = p, best = i;
    }
    result.final_pcc_with_suggestion = best_pcc;
    if (best_pcc <= pcc_before) {
      std::printf(
          "none raises the final PCC (%.6f): the error is spread over many ops; widen a whole kind (e.g. "
          "--amp-level 1, or a rule by op_type)\n",
          pcc_before);
      TS_RETURN_IF_ERROR(close_device(*device));
      return result;
    }
  }
  result.picked = best;
  result.suggestion = runtime::precision_config_to_json(config_with(best));
  std::printf("suggested (keeps '%s' wider; save as rules.json, then --precision-config rules.json):\n  %s\n",
              rows[best].node.c_str(), result.suggestion.c_str());
  if (result.final_pcc_with_suggestion)
    std::printf("with the suggested rule: final PCC %.6f (was %.6f)\n", *result.final_pcc_with_suggestion, pcc_before);
  TS_RETURN_IF_ERROR(close_device(*device));
  return result;
}

}  // namespace tessera::tools
