#include "tessera/perfmodel/sweep.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>

#include "tessera/base/cpu_features.h"
#include "tessera/perfmodel/features.h"
#include "tessera/perfmodel/measure.h"

namespace tessera::perfmodel {
namespace {

using nlohmann::json;
using U = std::span<const double>;

// Work caps per point: a few tens of milliseconds at most on a 2-core machine.
constexpr double kMaxFlops = 3e9;
constexpr double kMaxBytes = 96e6;

uint32_t log_int(double u, double lo, double hi) {
  return static_cast<uint32_t>(std::lround(std::exp(std::log(lo) + u * (std::log(hi) - std::log(lo)))));
}
template <class T>
T pick(double u, std::initializer_list<T> v) {
  return *(v.begin() + std::min<size_t>(v.size() - 1, static_cast<size_t>(u * static_cast<double>(v.size()))));
}
json tensor(std::vector<uint32_t> shape, std::string_view dtype, std::string_view layout = "ROW_MAJOR",
            std::string_view buffer = "DRAM") {
  return {{"logical_shape", shape}, {"dtype", dtype}, {"layout", layout}, {"memory_config", {{"buffer_type", buffer}}}};
}
const char* float_dtype(double u) { return u < 0.5 ? "FLOAT32" : "BFLOAT16"; }

// A conv's kernel: half the points conv2d's own selection ("auto"), half
// one kernel named among those this CPU's tier has (a shape the named one
// cannot run is an invalid point, filtered by conv2d's own check), so that
// the predictor learns each kernel's time beside the selection's.
std::string conv_algorithm(double u, bool transposed) {
  if (u < 0.5) return "auto";
  const std::vector<std::string> names = conv_algorithms_of_this_tier(transposed);
  return names[std::min(names.size() - 1, static_cast<size_t>((u - 0.5) * 2 * static_cast<double>(names.size())))];
}

// (N, C, H, W) with N*H*W*C at most `max_volume`, H and W log-uniform 4..256 (aspect up to 4:3 either way).
std::vector<uint32_t> nchw(double un, double uc, double uh, double ua, uint32_t cmin, uint32_t cmax) {
  const uint32_t n = pick<uint32_t>(un, {1, 1, 1, 1, 2, 4, 8});
  uint32_t c = log_int(uc, cmin, cmax);
  if (std::fmod(uc * 1000, 1.0) < 0.7 && c > 8) c = c / 8 * 8;  // most models' channels are multiples of 8
  const uint32_t h = log_int(uh, 4, 256);
  const uint32_t w = std::max(1u, static_cast<uint32_t>(std::lround(h * (0.75 + 0.6 * ua))));
  return {n, c, h, w};
}

json conv2d(U u) {
  auto s = nchw(u[0], u[1], u[2], u[3], 3, 1024);
  const uint32_t k = pick<uint32_t>(u[4], {1, 1, 1, 3, 3, 3, 5, 7});
  const uint32_t stride = pick<uint32_t>(u[5], {1, 1, 1, 2});
  const bool depthwise = u[6] < 0.2 && k > 1;
  uint32_t cout = depthwise ? s[1] : log_int(u[7], 4, 1024);
  if (!depthwise && std::fmod(u[7] * 1000, 1.0) < 0.7 && cout > 8) cout = cout / 8 * 8;
  const uint32_t groups = depthwise ? s[1] : (u[6] > 0.92 && s[1] % 4 == 0 && cout % 4 == 0 ? 4 : 1);
  // Dilated 3x3s: DeepLab's atrous pyramids reach dilation 36 on small maps.
  const uint32_t dil = k == 3 && u[8] > 0.9 ? pick<uint32_t>((u[8] - 0.9) * 10, {2, 2, 4, 6, 12, 18, 24, 36}) : 1;
  const uint32_t pad = u[9] < 0.85 ? dil * (k / 2) : 0;
  return {{"op", "conv2d"},
          {"input", tensor(s, float_dtype(u[10]))},
          {"out_channels", cout},
          {"kernel_size", {k, k}},
          {"stride", {stride, stride}},
          {"padding", {pad, pad}},
          {"dilation", {dil, dil}},
          {"groups", groups},
          {"activation", pick<const char*>(u[11], {"identity", "relu", "relu", "silu", "relu6"})},
          {"weights_dtype", u[12] < 0.8 ? "same" : "bfloat8_b"},
          {"residual", !depthwise && u[13] < 0.2 ? 1 : 0},
          {"math_fidelity", pick<const char*>(u[14], {"HiFi4", "HiFi4", "HiFi4", "HiFi2", "LoFi"})},
          {"algorithm", conv_algorithm(u[15], false)}};
}
// Decoder up-sampling: kernel == stride (UNet), 3x3 / 2 with output padding, 4x4 / 2 / 1 (DCGAN-style).
json conv_transpose2d(U u) {
  auto s = nchw(u[0], u[1], u[2], u[3], 8, 512);
  s[2] = std::max(2u, s[2] / 2);
  s[3] = std::max(2u, s[3] / 2);
  const int form = static_cast<int>(u[4] * 4);
  const uint32_t k = form == 2 ? 3 : form == 3 ? 4 : 2, pad = form >= 2 ? 1 : 0, out_pad = form == 2 ? 1 : 0;
  uint32_t cout = log_int(u[5], 8, 512);
  if (std::fmod(u[5] * 1000, 1.0) < 0.7 && cout > 8) cout = cout / 8 * 8;
  return {{"op", "conv_transpose2d"},
          {"input", tensor(s, float_dtype(u[6]))},
          {"out_channels", cout},
          {"kernel_size", {k, k}},
          {"stride", {2, 2}},
          {"padding", {pad, pad}},
          {"output_padding", {out_pad, out_pad}},
          {"activation", u[7] < 0.5 ? "identity" : "relu"},
          {"algorithm", conv_algorithm(u[8], true)}};
}
json linear(U u) {
  const uint32_t m = log_int(u[0], 1, 4096), k = log_int(u[1], 16, 4096), n = log_int(u[2], 16, 4096);
  return {{"op", "linear"},
          {"input", tensor({m, k}, float_dtype(u[3]))},
          {"out_features", n},
          {"activation", pick<const char*>(u[4], {"identity", "identity", "relu", "gelu"})}};
}
json matmul(U u) {
  const uint32_t b = pick<uint32_t>(u[0], {1, 1, 2, 4, 8}), m = log_int(u[1], 8, 2048), k = log_int(u[2], 16, 2048),
                 n = log_int(u[3], 16, 2048);
  const char* dt = float_dtype(u[4]);
  return {{"op", "matmul"}, {"input", tensor({b, m, k}, dt)}, {"input_b", tensor({b, k, n}, dt)}};
}
// (rows, width) element-wise shapes: 1 to 1.6M elements... as (1, H, W, C) maps.
std::vector<uint32_t> eltwise_shape(double u0, double u1) {
  const uint32_t c = log_int(u0, 8, 1024);
  const uint32_t hw = std::max(1u, log_int(u1, 16, 65536) / 16 * 16);
  return {1, hw, c};
}
// L1 holds small tensors only (a core's L1 is ~1 MiB).
const char* buffer(double u, const std::vector<uint32_t>& shape) {
  uint64_t v = 1;
  for (uint32_t d : shape) v *= d;
  return u < 0.2 && v <= 64 * 1024 ? "L1" : "DRAM";
}
json unary(U u) {
  const char* op =
      pick<const char*>(u[0], {"relu",        "relu6",    "silu", "gelu", "gelu_tanh", "sigmoid", "tanh", "hardswish",
                               "hardsigmoid", "mish",     "exp",  "sqrt", "elu",       "erf",     "abs",  "reciprocal",
                               "softplus",    "softsign", "celu", "clip", "floor",     "sign"});
  const auto s = eltwise_shape(u[1], u[2]);
  return {{"op", op}, {"input", tensor(s, float_dtype(u[3]), u[4] < 0.3 ? "TILE" : "ROW_MAJOR", buffer(u[5], s))}};
}
json binary(U u) {
  const char* dt = float_dtype(u[3]);
  const char* layout = u[4] < 0.3 ? "TILE" : "ROW_MAJOR";
  auto s = eltwise_shape(u[1], u[2]);
  return {{"op", pick<const char*>(u[0], {"add", "add", "mul", "sub", "div", "max"})},
          {"input", tensor(s, dt, layout)},
          {"input_b", tensor(s, dt, layout)},
          {"activation", u[5] < 0.3 ? "relu" : "identity"}};
}
json pool(U u) {
  const bool max = u[0] < 0.6;
  const uint32_t k = pick<uint32_t>(u[5], {2, 3, 3});
  return {{"op", max ? "max_pool2d" : "avg_pool2d"},
          {"input", tensor(nchw(u[1], u[2], u[3], u[4], 8, 1024), float_dtype(u[6]))},
          {"kernel_size", {k, k}},
          {"stride", {pick<uint32_t>(u[7], {1, 2, 2}), 2}},
          {"padding", {k / 2, k / 2}}};
}
json global_pool(U u) {
  return {{"op", "global_avg_pool2d"}, {"input", tensor(nchw(u[0], u[1], u[2], u[3], 16, 2048), float_dtype(u[4]))}};
}
json upsample(U u) {
  auto s = nchw(u[0], u[1], u[2], u[3], 8, 512);
  s[2] = std::max(2u, s[2] / 2);
  s[3] = std::max(2u, s[3] / 2);
  return {{"op", "upsample"}, {"input", tensor(s, float_dtype(u[4]))}, {"mode", u[5] < 0.7 ? "nearest" : "bilinear"}};
}
json typecast(U u) {
  const bool to_bf16 = u[3] < 0.5;
  return {
      {"op", "typecast"},
      {"input", tensor(eltwise_shape(u[0], u[1]), to_bf16 ? "FLOAT32" : "BFLOAT16", u[2] < 0.4 ? "TILE" : "ROW_MAJOR")},
      {"dtype", to_bf16 ? "BFLOAT16" : "FLOAT32"}};
}
json tilize(U u) {
  return {{"op", "tilize"},
          {"input", tensor(eltwise_shape(u[0], u[1]), float_dtype(u[2]))},
          {"dtype", u[3] < 0.2 ? "bfloat8_b" : "same"}};
}
json untilize(U u) {
  return {{"op", "untilize"}, {"input", tensor(eltwise_shape(u[0], u[1]), float_dtype(u[2]), "TILE")}};
}
json permute(U u) {
  auto s = nchw(u[0], u[1], u[2], u[3], 3, 512);
  std::vector<int> perm = pick<std::vector<int>>(u[4], {{0, 2, 3, 1}, {0, 3, 1, 2}, {0, 2, 1, 3}, {0, 1, 3, 2}});
  return {{"op", "permute"}, {"input", tensor(s, float_dtype(u[5]))}, {"perm", perm}};
}
json concat(U u) {
  const uint32_t n = pick<uint32_t>(u[0], {2, 2, 3, 4}), hw = log_int(u[1], 16, 16384);
  const char* dt = float_dtype(u[2]);
  json inputs = json::array();
  for (uint32_t i = 0; i < n; ++i)
    inputs.push_back(tensor({1, hw, log_int(std::fmod(u[3] + 0.37 * i, 1.0), 8, 512)}, dt));
  return {{"op", "concat"}, {"inputs", inputs}};
}
json norm(U u) {
  const uint32_t rows = log_int(u[1], 1, 16384), width = log_int(u[2], 16, 4096);
  return {{"op", u[0] < 0.5 ? "softmax" : "layer_norm"}, {"input", tensor({rows, width}, float_dtype(u[3]))}};
}

struct Space {
  std::string_view name;  // what --ops names
  uint32_t weight;        // batches draw weight x SweepOptions::batch points (spaces of many ops or dims draw more)
  uint32_t dims;
  json (*gen)(U);
};
// One space a line (clang-format would pack them two a line).
// clang-format off
constexpr Space kSpaces[] = {
    {"conv2d", 4, 16, conv2d},
    {"conv_transpose2d", 1, 9, conv_transpose2d},
    {"linear", 1, 5, linear},
    {"matmul", 1, 5, matmul},
    {"eltwise_unary", 4, 6, unary},
    {"eltwise_binary", 2, 6, binary},
    {"pool2d", 2, 8, pool},
    {"global_avg_pool2d", 1, 5, global_pool},
    {"upsample", 1, 6, upsample},
    {"typecast", 1, 4, typecast},
    {"tilize", 1, 4, tilize},
    {"untilize", 1, 3, untilize},
    {"permute", 1, 6, permute},
    {"concat", 1, 4, concat},
    {"norm", 1, 4, norm},
};
// clang-format on

const Space* find_space(std::string_view name) {
  for (const Space& s : kSpaces)
    if (s.name == name) return &s;
  return nullptr;
}

StatusOr<OpQuery> point(const Space& space, U u) {
  TS_ASSIGN_OR_RETURN(OpQuery q, parse_op_query(space.gen(u).dump()));
  const OpCost c = op_cost(q);
  if (c.flops > kMaxFlops || c.bytes() > kMaxBytes || c.output_elements < 1)
    return invalid_argument_error("over the sweep's work cap");
  return q;
}

}  // namespace

std::vector<std::string> conv_algorithms_of_this_tier(bool transposed) {
  const bool avx512 = kernel_isa() == KernelIsa::kAvx512, amx = avx512 && cpu_features().amx_bf16;
  std::vector<std::string> names;
  if (transposed) {
    names = {"patch_transpose_matmul", "onednn", avx512 ? "patch_transpose_avx512" : "patch_transpose_avx2"};
    if (amx) names.push_back("amx_patch_1x1");
  } else if (avx512) {
    names = {"depthwise",      "narrow_avx512",      "onednn_winograd", "direct_avx512",
             "rows3x3_avx512", "onednn_padded_cout", "onednn_f32_rows", "onednn"};
  } else {
    names = {"depthwise", "winograd_avx2", "direct_avx2", "onednn_winograd", "onednn"};
  }
  return names;
}

std::vector<OpQuery> with_each_conv_algorithm(const std::vector<OpQuery>& queries) {
  std::vector<OpQuery> out;
  for (const OpQuery& q : queries) {
    out.push_back(q);
    if (q.op != "conv2d" && q.op != "conv_transpose2d") continue;
    for (const std::string& a : conv_algorithms_of_this_tier(q.op == "conv_transpose2d")) {
      OpQuery named = q;
      named.args["algorithm"].word = a;
      if (!(named == q)) out.push_back(std::move(named));
    }
  }
  return out;
}

std::vector<std::string> sweep_ops() {
  std::vector<std::string> v;
  for (const Space& s : kSpaces) v.emplace_back(s.name);
  return v;
}

std::vector<std::vector<double>> latin_hypercube(uint32_t n, uint32_t dims, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<std::vector<double>> pts(n, std::vector<double>(dims));
  std::vector<uint32_t> strata(n);
  for (uint32_t d = 0; d < dims; ++d) {
    for (uint32_t i = 0; i < n; ++i) strata[i] = i;
    std::shuffle(strata.begin(), strata.end(), rng);
    for (uint32_t i = 0; i < n; ++i) pts[i][d] = (strata[i] + u(rng)) / n;
  }
  return pts;
}

StatusOr<std::vector<OpQuery>> sample_space(std::string_view op, uint32_t n, uint64_t batch, uint64_t seed) {
  const Space* space = find_space(op);
  if (!space) return invalid_argument_error("no sweep space '{}' (spaces: {})", op, fmt::join(sweep_ops(), ", "));
  std::vector<OpQuery> v;
  for (const auto& u :
       latin_hypercube(n, space->dims, seed * 1000003 + batch * 7919 + std::hash<std::string_view>{}(op)))
    if (auto q = point(*space, u); q.ok()) v.push_back(*std::move(q));
  return v;
}

StatusOr<SweepResult> run_sweep(Dataset& dataset, const SweepOptions& options,
                                const std::function<void(const SweepProgress&)>& progress) {
  std::vector<const Space*> spaces;
  const std::vector<std::string> all = options.queries.empty() ? sweep_ops() : std::vector<std::string>{};
  for (const std::string& name : options.ops.empty() ? all : options.ops) {
    const Space* s = find_space(name);
    if (!s)
      return invalid_argument_error("--ops: no sweep space '{}' (spaces: {})", name, fmt::join(sweep_ops(), ", "));
    spaces.push_back(s);
  }
  if (options.budget_seconds <= 0) return invalid_argument_error("sweep budget must be positive");
  SweepResult result;
  result.machine = this_machine(options.workers);
  TS_RETURN_IF_ERROR(measure_peaks(result.machine));
  TS_ASSIGN_OR_RETURN(int64_t machine, dataset.machine_id(result.machine));
  TS_ASSIGN_OR_RETURN(auto device, open_device({.trace_region_size = size_t{64} << 20,
                                                .worker_threads = static_cast<int>(options.workers)}));
  const std::string commit(tessera_commit());
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  SweepProgress p{.budget_seconds = options.budget_seconds};
  Status status;
  // The given queries (a model's ops) first, as a batch of their own, then the spaces' batches.
  std::vector<const Space*> rounds = spaces;
  if (!options.queries.empty()) rounds.insert(rounds.begin(), nullptr);
  for (uint64_t batch = 0; status.ok() && elapsed() < options.budget_seconds; ++batch) {
    if (spaces.empty() && batch > 0) break;  // only the given queries: measured once
    for (const Space* space : rounds) {
      if (elapsed() >= options.budget_seconds) break;
      if (!space && batch > 0) continue;
      std::vector<OpQuery> queries;
      if (space) {
        TS_ASSIGN_OR_RETURN(queries, sample_space(space->name, options.batch * space->weight, batch, options.seed));
      } else {
        queries = options.queries;
      }
      // The batch's new points, each measured in `passes` passes over the batch:
      // the time kept is the median of its passes (the DRAM bandwidth of a
      // shared machine drifts over seconds; a point measured at three moments
      // is a steadier label than one measured at one).
      std::vector<MeasurementRow> rows;
      std::vector<const OpQuery*> todo;
      std::vector<std::vector<double>> times;
      for (const OpQuery& q : queries) {
        const std::string key = to_json(q);
        TS_ASSIGN_OR_RETURN(bool seen, dataset.contains(machine, commit, key));
        if (seen) {
          ++result.skipped;
          continue;
        }
        rows.push_back({.machine_id = machine,
                        .commit = commit,
                        .measured_at = utc_now(),
                        .source = space ? options.source : options.queries_source,
                        .op = q.op,
                        .family = std::string(find_op(q.op)->family),
                        .query = key});
        todo.push_back(&q);
        times.emplace_back();
      }
      for (uint32_t pass = 0; pass < std::max(1u, options.passes) && status.ok(); ++pass) {
        for (size_t i = 0; i < todo.size() && status.ok(); ++i) {
          MeasurementRow& row = rows[i];
          if (row.status != "ok" || elapsed() >= options.budget_seconds) continue;
          if (options.verbose) std::fprintf(stderr, "measuring %s\n", row.query.c_str());
          if (pass == 0) {  // a kernel that crashes the process leaves this row: a resumed sweep skips the point
            MeasurementRow marker = row;
            marker.status = "ABORTED: the process died while measuring this point (a kernel crashed?)";
            TS_RETURN_IF_ERROR(dataset.add(marker));
          }
          StatusOr<Measurement> m = measure_op(*device, *todo[i], options.replays);
          if (pass == 0) TS_RETURN_IF_ERROR(dataset.remove(machine, commit, row.query));  // it survived
          if (m.ok()) {
            times[i].push_back(m->time_ns);
            row.min_ns = pass ? std::min(row.min_ns, m->min_ns) : m->min_ns;
            row.max_ns = std::max(row.max_ns, m->max_ns);
            row.replays += m->replays, row.launches = m->launches, row.kernels = m->kernels;
          } else if (m.status().code() == StatusCode::kInvalidArgument ||
                     m.status().code() == StatusCode::kUnimplemented ||
                     m.status().code() == StatusCode::kResourceExhausted) {
            row.status = m.status().to_string();
          } else {
            status = m.status().annotate(row.query);  // a broken device or kernel: stop, keep what was measured
          }
        }
      }
      TS_RETURN_IF_ERROR(dataset.begin());
      for (size_t i = 0; i < rows.size(); ++i) {
        MeasurementRow& row = rows[i];
        std::vector<double>& t = times[i];
        if (row.status == "ok" && t.empty()) continue;  // the budget ran out first
        if (row.status == "ok") {
          row.passes = static_cast<uint32_t>(t.size());
          row.run_a_ns = t[0];
          row.run_b_ns = t.size() > 1 ? t[1] : t[0];
          std::sort(t.begin(), t.end());
          row.time_ns = t.size() % 2 ? t[t.size() / 2] : (t[t.size() / 2 - 1] + t[t.size() / 2]) / 2;
          ++result.measured;
        } else {
          ++result.refused;
        }
        TS_RETURN_IF_ERROR(dataset.add(row));
      }
      if (progress && !rows.empty()) {
        p.elapsed_seconds = elapsed(), p.op = space ? space->name : options.queries_source;
        p.measured = result.measured, p.refused = result.refused, p.skipped = result.skipped;
        progress(p);
      }
      TS_RETURN_IF_ERROR(dataset.commit());
      if (!status.ok()) break;
    }
  }
  TS_RETURN_IF_ERROR(close_device(*device));
  if (!status.ok()) return status;
  result.seconds = elapsed();
  return result;
}

}  // namespace tessera::perfmodel
