#include "tessera/perfmodel/conv_choosers.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tessera/perfmodel/machine.h"

namespace tessera::perfmodel {
namespace {

using nlohmann::json;
constexpr std::string_view kSelectNames[] = {"heuristic", "measured", "predicted"};
constexpr std::string_view kCacheFormat = "tessera-conv-choices";
constexpr int kCacheVersion = 1;
constexpr double kOneRoundNs = 2e6;

// The facts a measured choice holds for: the same CPU and tier, worker
// count and build (the kernels may have changed otherwise).
std::string machine_key(uint32_t workers) {
  const MachineFingerprint m = this_machine(workers);
  return fmt::format("{} | {} | {} | {} workers | {}", m.cpu_model, m.kernel_tier, m.cpu_features, m.workers,
                     tessera_commit());
}

// The chosen one when `best` beats the selection's choice (times[0]) by
// over `margin`, else the selection's.
size_t pick(const std::vector<double>& times, double margin) {
  size_t best = 0;
  for (size_t i = 1; i < times.size(); ++i)
    if (times[i] < times[best]) best = i;
  return times[best] < times[0] * (1.0 - margin) ? best : 0;
}

std::string listing(const cnn::ConvChoice& c, const std::vector<double>& ns) {
  std::string out;
  for (size_t i = 0; i < ns.size(); ++i)
    out += fmt::format("{}{} {}", i ? ", " : "", c.algorithms[i],
                       std::isfinite(ns[i]) ? fmt::format("{:.3f} ms", ns[i] / 1e6) : std::string("failed"));
  return out;
}

// The cache, shared by every conv of every model the chooser serves.
struct Cache {
  std::mutex mu;
  std::string path, machine;
  bool loaded = false, warned = false;
  json doc;

  Status load() {
    if (loaded) return ok_status();
    loaded = true;
    doc = json{{"format", kCacheFormat}, {"version", kCacheVersion}, {"machines", json::object()}};
    if (path.empty() || !std::filesystem::exists(path)) return ok_status();
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    json d = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
    if (d.is_discarded() || !d.is_object() || d.value("format", "") != kCacheFormat || !d.contains("machines") ||
        !d["machines"].is_object())
      return invalid_argument_error("{}: expected a conv choice cache (JSON, format \"{}\"); remove it to start anew",
                                    path, kCacheFormat);
    if (d.value("version", 0) != kCacheVersion)
      return invalid_argument_error("{}: conv choice cache version {}, this build reads {}; remove it to start anew",
                                    path, d.value("version", 0), kCacheVersion);
    doc = std::move(d);
    return ok_status();
  }
  const json* find(const std::string& key) const {
    const json& m = doc["machines"];
    auto it = m.find(machine);
    if (it == m.end()) return nullptr;
    auto e = it->find(key);
    return e == it->end() || !e->is_object() || !e->contains("algorithm") ? nullptr : &*e;
  }
  // Written whole to a temporary file, then renamed over the cache.
  Status store(const std::string& key, json entry) {
    doc["machines"][machine][key] = std::move(entry);
    if (path.empty()) return ok_status();
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
    const std::string tmp = fmt::format("{}.{}.tmp", path, static_cast<long>(::getpid()));
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << doc.dump(1) << '\n';
      if (!out) return failed_precondition_error("cannot write the conv choice cache {}", tmp);
    }
    std::filesystem::rename(tmp, path, ec);
    if (ec) return failed_precondition_error("cannot replace the conv choice cache {}: {}", path, ec.message());
    return ok_status();
  }
};

}  // namespace

std::string_view conv_select_name(ConvSelect s) { return kSelectNames[static_cast<size_t>(s)]; }

std::optional<ConvSelect> parse_conv_select(std::string_view name) {
  for (size_t i = 0; i < std::size(kSelectNames); ++i)
    if (kSelectNames[i] == name) return static_cast<ConvSelect>(i);
  return std::nullopt;
}

std::string default_conv_cache_path() {
  std::filesystem::path dir;
  if (const char* d = std::getenv("TESSERA_CACHE_DIR"); d && *d) {
    dir = d;
  } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
    dir = std::filesystem::path(x) / "tessera";
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    dir = std::filesystem::path(h) / ".cache" / "tessera";
  } else {
    dir = std::filesystem::temp_directory_path() / "tessera";
  }
  return (dir / "conv_choices.json").string();
}

cnn::ConvChooser measured_conv_chooser(MeasuredChooserOptions options) {
  auto cache = std::make_shared<Cache>();
  cache->path = options.cache_path;
  cache->machine = machine_key(options.workers);
  return [cache, options](const cnn::ConvChoice& c) -> StatusOr<cnn::ConvChosen> {
    std::lock_guard lock(cache->mu);
    TS_RETURN_IF_ERROR(cache->load());
    if (const json* e = cache->find(c.key)) {
      const std::string a = (*e)["algorithm"].get<std::string>();
      if (std::find(c.algorithms.begin(), c.algorithms.end(), a) != c.algorithms.end())
        return cnn::ConvChosen{a,
                               fmt::format("measured (cached {}): {}", e->value("date", "?"), e->value("times", ""))};
    }
    // Candidates in turn, round after round: drift in the machine's speed
    // falls on every candidate alike. Each keeps its best round's median.
    std::vector<double> ns(c.algorithms.size(), std::numeric_limits<double>::infinity());
    std::vector<std::string> failed;
    for (int round = 0; round < options.rounds; ++round) {
      // Convs of milliseconds vary by far less than the margin: one round.
      if (round == 1 && *std::min_element(ns.begin(), ns.end()) > kOneRoundNs) break;
      for (size_t i = 0; i < c.algorithms.size(); ++i) {
        if (round > 0 && !std::isfinite(ns[i])) continue;  // failed once: skipped
        StatusOr<double> t = c.time(c.algorithms[i], options.runs_per_round);
        if (!t.ok()) {
          if (round == 0) failed.push_back(fmt::format("{} ({})", c.algorithms[i], t.status().message()));
          continue;
        }
        if (options.verbose) std::fprintf(stderr, "  round %d %s %.3f ms\n", round, c.algorithms[i].c_str(), *t / 1e6);
        ns[i] = std::min(ns[i], *t);
      }
    }
    if (!std::isfinite(ns[0]))
      return internal_error("{}: the selection's own kernel failed to run: {}", c.key, fmt::join(failed, "; "));
    const size_t best = pick(ns, options.margin);
    std::string times = listing(c, ns);
    if (!failed.empty()) times += fmt::format("; failed: {}", fmt::join(failed, "; "));
    // A cache that cannot be written costs a later compile its measuring, not this one its choice.
    const Status stored =
        cache->store(c.key, json{{"algorithm", c.algorithms[best]}, {"times", times}, {"date", utc_now()}});
    if (!stored.ok() && !cache->warned) {
      cache->warned = true;
      std::fprintf(stderr, "warning: %s (the choices are kept for this process only)\n", stored.to_string().c_str());
    }
    if (options.verbose)
      std::fprintf(stderr, "measured %s -> %s (%s)\n", c.key.c_str(), c.algorithms[best].c_str(), times.c_str());
    return cnn::ConvChosen{c.algorithms[best], "measured: " + times};
  };
}

StatusOr<OpQuery> conv_choice_query(const cnn::ConvChoice& c, std::string_view algorithm, uint32_t workers) {
  const Conv2dConfig& cfg = *c.config;
  json input = {
      {"dtype", data_type_name(c.input.dtype)},
      {"layout", layout_name(c.input.layout)},
      {"memory_config", {{"buffer_type", c.input.memory_config.buffer_type == BufferType::L1 ? "L1" : "DRAM"}}}};
  json q = {{"weights_dtype", data_type_name(cfg.weights_dtype)},
            {"dtype", data_type_name(cfg.dtype.value_or(c.input.dtype))},
            {"algorithm", algorithm}};
  auto activation = [](const UnaryWithParam& a) { return std::string(unary_op_name(a.op)); };
  if (const Conv2dParams* p = c.conv2d) {
    input["logical_shape"] = {p->batch_size, p->in_channels, p->input_height, p->input_width};
    q.update({{"op", "conv2d"},
              {"out_channels", p->out_channels},
              {"kernel_size", p->kernel_size},
              {"stride", p->stride},
              {"padding", p->padding},
              {"dilation", p->dilation},
              {"groups", p->groups},
              {"activation", activation(p->activation)},
              {"math_fidelity", math_fidelity_name(cfg.compute_config.math_fidelity)},
              {"residual", c.residual ? 1 : 0}});
  } else if (const ConvTranspose2dParams* p = c.conv_transpose2d) {
    input["logical_shape"] = {p->batch_size, p->in_channels, p->input_height, p->input_width};
    q.update({{"op", "conv_transpose2d"},
              {"out_channels", p->out_channels},
              {"kernel_size", p->kernel_size},
              {"stride", p->stride},
              {"padding", p->padding},
              {"output_padding", p->output_padding},
              {"dilation", p->dilation},
              {"groups", p->groups},
              {"activation", activation(p->activation)}});
  } else {
    return invalid_argument_error("{}: a conv choice without its params", c.key);
  }
  q["input"] = std::move(input);
  TS_ASSIGN_OR_RETURN(OpQuery query, parse_op_query(q.dump()));
  query.workers = workers;
  return query;
}

cnn::ConvChooser predicted_conv_chooser(std::shared_ptr<const Predictor> predictor, uint32_t workers, double margin) {
  return [predictor, workers, margin](const cnn::ConvChoice& c) -> StatusOr<cnn::ConvChosen> {
    std::vector<double> ns;
    for (const std::string& a : c.algorithms) {
      TS_ASSIGN_OR_RETURN(OpQuery q, conv_choice_query(c, a, workers));
      TS_ASSIGN_OR_RETURN(double t, predictor->predict(q));
      ns.push_back(t);
    }
    const size_t best = pick(ns, margin);
    return cnn::ConvChosen{c.algorithms[best], "predicted: " + listing(c, ns)};
  };
}

}  // namespace tessera::perfmodel
