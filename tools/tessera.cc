// The `tessera` command line:
//
//   tessera run MODEL.onnx [--input [NAME=]X.npy | --input ALL.npz ... | --random]
//                          [--output Y.npy|Y.npz] [--output-dir DIR] [--reference R.npy|R.npz|DIR]
//                          [--config trace,2cq] [--dtype float32|bfloat16|bfloat8_b] [--batch B] [--explain]
//   tessera bench MODEL.onnx [--iterations N] [--batch B] [--dtype ...] [--config ...]
//                            [--input X.npy --reference R.npy|R.npz|DIR] [--profile TRACE.json|-]
//   tessera compile MODEL.onnx -o MODEL.tsi [--target cpu|wormhole_b0] [--dtype ...] [--batch B] [--name N]
//   tessera info MODEL.tsi [--json]
//   tessera merge A.tsi B.tsi ... -o MERGED.tsi [--separate]
//   tessera compare MODEL.onnx [--input X.npy] [--dtype ... | --amp-level N | --precision-config R.json]
//                   [--threshold 0.999] [--csv F.csv] [--plot F.png]   (compare_command.h)
//   tessera conformance [DIR] [--filter S] [--min-pass-rate R]
//   tessera sweep | train-predictor | predict    (predictor_commands.h)
//
// run and bench take a compiled image (.tsi) as well as an ONNX file
// (--model NAME picks one of a merged image's models).
//
// Results go to stdout, errors to stderr with exit code 1 (2 for bad usage).
#include <fmt/format.h>
#include <malloc.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "compare_command.h"
#include "conformance.h"
#include "image_commands.h"
#include "model_io.h"
#include "model_runner.h"
#include "predictor_commands.h"
#include "tessera/base/cpu_features.h"
#include "tessera/cnn/testing.h"
#include "tessera/cnn/weights.h"
#include "tessera/device/profiler.h"
#include "tessera/ops/quantized_conv2d.h"

namespace tessera::tools {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

void add_select_options(CLI::App* s, std::string& select, std::string& predictor, std::string& cache) {
  s->add_option("--select", select,
                "how convs choose their kernels: heuristic (hand-set thresholds) | measured (each candidate timed "
                "once at compile, cached per machine) | predicted (the op runtime predictor, --predictor)")
      ->check(CLI::IsMember({"heuristic", "measured", "predicted"}));
  s->add_option("--predictor", predictor, "--select predicted: the model file (tessera train-predictor)")
      ->check(CLI::ExistingFile);
  s->add_option("--select-cache", cache,
                "--select measured: the cache file (default: $TESSERA_CACHE_DIR, $XDG_CACHE_HOME/tessera or "
                "~/.cache/tessera, conv_choices.json)");
}

void add_precision_options(CLI::App* s, int& amp_level, std::string& config, std::string& numerics) {
  s->add_option("--numerics", numerics,
                "fast (Tessera's kernels) | tt: convs and matmuls compute as the Wormhole matrix engine does "
                "(truncated multiplies per fidelity phase, bfloat16 or float32 destination; a slower study mode)")
      ->check(CLI::IsMember({"fast", "tt"}));
  s->add_option("--amp-level", amp_level,
                "0 off | 1 bfloat16 activations, bfloat8_b conv/matmul weights, HiFi2 | 2 bfloat4_b weights, LoFi "
                "(replaces --dtype and --math-fidelity; default: the --precision-config file's, else 0)")
      ->check(CLI::Range(0, 2));
  s->add_option("--precision-config", config,
                "per-op formats and fidelity: a JSON file of configure_mixed_precision-style rules "
                "(docs/precision.md)")
      ->check(CLI::ExistingFile);
}

struct Common {
  std::string model, dtype = "float32", config = "trace,2cq", device, math_fidelity = "HiFi4";
  std::string model_name;  // --model: a merged image's model
  std::string micro_batch = "auto";
  int64_t batch = 1;
  std::string shape;  // "1x3x480x640"
  int workers = 0;
  bool verbose = false;
  bool explain = false;
  bool no_pin = false;
  std::vector<std::string> intermediates;  // run --save-intermediates
  std::string intermediates_dir;
  std::string select = "heuristic", predictor, select_cache;  // ModelOptions'
  int amp_level = -1;
  std::string precision_config;
  std::string numerics = "fast";
};

StatusOr<ModelOptions> model_options(const Common& c) {
  ModelOptions o{.precision = c.dtype, .batch = c.batch};
  o.math_fidelity = c.math_fidelity;
  o.micro_batch = c.micro_batch;
  o.model_name = c.model_name;
  o.intermediates = c.intermediates;
  o.select = c.select;
  o.predictor = c.predictor;
  o.select_cache = c.select_cache;
  o.workers = static_cast<uint32_t>(std::max(c.workers, 0));
  o.select_verbose = c.verbose;
  o.amp_level = c.amp_level;
  o.precision_config = c.precision_config;
  o.numerics = c.numerics;
  if (!c.shape.empty()) {
    std::stringstream ss(c.shape);
    std::string item;
    while (std::getline(ss, item, 'x')) {
      try {
        o.input_shape.push_back(std::stoll(item));
      } catch (const std::exception&) {
        return invalid_argument_error("--shape '{}': expected dims joined by 'x', like 1x3x480x640", c.shape);
      }
      if (o.input_shape.back() <= 0) return invalid_argument_error("--shape '{}': dims must be positive", c.shape);
    }
    o.batch = o.input_shape.empty() ? c.batch : o.input_shape[0];
  }
  return o;
}

// The --device given; by default an image's target, or the CPU.
StatusOr<std::string> device_for(const Common& c) {
  if (!c.device.empty() || !is_image_file(c.model)) return c.device.empty() ? std::string("cpu") : c.device;
  TS_ASSIGN_OR_RETURN(auto img, image::Image::open(c.model));
  const std::string& target = img->info().header.target.name;
  if (target != "cpu" && target != "wormhole_b0")
    return invalid_argument_error(
        "{} was compiled for '{}', a device from a descriptor file: give that file with "
        "--device DESCRIPTOR.json",
        c.model, target);
  return target;
}

StatusOr<std::shared_ptr<Device>> open(const Common& c) {
  TS_ASSIGN_OR_RETURN(const std::string device, device_for(c));
  return open_device({.descriptor = device,
                      .l1_small_size = 16384,
                      .trace_region_size = 8 << 20,
                      .num_command_queues = 2,
                      .worker_threads = c.workers,
                      .pin_threads = !c.no_pin});
}

void print_report(const LoadedModel& m, const Common& c) {
  const bool verbose = c.verbose;
  if (c.dtype != "float32" && !cpu_features().avx512_bf16)
    std::fprintf(stderr,
                 "note: this CPU has no bfloat16 dot-product instructions (AVX512_BF16): --dtype %s computes on "
                 "bfloat16-rounded values without faster arithmetic, usually slower than float32\n",
                 c.dtype.c_str());
  const auto& r = m.model->report();
  for (const std::string& n : m.notes) std::printf("note: %s\n", n.c_str());
  std::printf(
      "%s in %.0f ms (%s %.0f ms): %d device ops, %zu host fallback(s), %d layout conversion(s), "
      "%.2f GFLOP per run\n",
      m.from_image ? "loaded" : "compiled", m.compile_ms, m.from_image ? "reading the image" : "import", m.import_ms,
      r.device_ops, r.fallbacks.size(), r.layout_conversions, r.conv_flops * 1e-9);
  for (const auto& f : r.fallbacks) std::printf("  host fallback: %s\n", f.c_str());
  for (const auto& p : r.passes) {
    if (p.pass == "fuse_quantized_convs" && p.rewrites > 0)
      std::printf("note: %d quantized conv(s) multiply integers (quantized_conv2d, %s sums on this CPU)\n",
                  p.rewrites, std::string(quantized_conv2d_kernel()).c_str());
    if (p.pass == "lower_quantized" && p.rewrites > 0)
      std::printf("note: %d other quantization op(s) computed in float32 holding the integers\n", p.rewrites);
  }
  size_t applied = 0;
  for (const auto& p : r.conv_plans) applied += p.find("(applied)") != std::string::npos;
  std::printf("conv placement: %zu of %zu convs sharded in L1%s\n", applied, r.conv_plans.size(),
              verbose ? "" : " (--verbose lists each plan)");
  if (verbose)
    for (const auto& p : r.conv_plans) std::printf("  %s\n", p.c_str());
  for (const auto& m : r.micro_batches) std::printf("micro-batched: %s\n", m.c_str());
  if (!r.bfloat16_values.empty())
    std::printf("%zu value(s) kept in bfloat16, every reader rounding them to it%s\n", r.bfloat16_values.size(),
                verbose ? ":" : " (--verbose lists them)");
  if (verbose)
    for (const auto& v : r.bfloat16_values) std::printf("  %s\n", v.c_str());
}

void print_selections(const runtime::CompiledModel& model) {
  const std::vector<std::string> lines = model.conv_selections();
  std::printf("conv kernels (%zu convs; the candidates before each choice, in order, with why they declined):\n",
              lines.size());
  for (std::string l : lines) {
    for (size_t at = l.find('\n'); at != std::string::npos; at = l.find('\n', at + 1)) l.insert(at + 1, "  ");
    std::printf("  %s\n", l.c_str());
  }
  const runtime::CompileReport& r = model.report();
  std::printf("op precision (%zu ops; the rule or AMP level that set a field in parentheses):\n",
              r.op_precisions.size());
  for (const std::string& l : r.op_precisions) std::printf("  %s\n", l.c_str());
  for (const std::string& l : r.precision_notes) std::printf("  note: %s\n", l.c_str());
}

// The seeds' PCC rule: 0.999 in float32, 0.99 with bfloat16 activations
// (or per-op precision, which may give ops bfloat16, or the original's
// numerics) — as asked on the command line, or as a compiled image was.
double pcc_threshold(const Common& c, const LoadedModel& m) {
  if (m.image_options) {
    const runtime::CompileOptions& o = *m.image_options;
    const bool exact = o.dtype == DataType::FLOAT32 && o.weights_dtype == DataType::FLOAT32 && o.precision.empty() &&
                       o.numerics == runtime::Numerics::kFast && o.math_fidelity == MathFidelity::HiFi4;
    return exact ? 0.999 : 0.99;
  }
  return c.dtype == "float32" && c.amp_level <= 0 && c.precision_config.empty() && c.numerics == "fast" ? 0.999 : 0.99;
}

// The --input files of run and bench by input name (model_io.h's
// read_inputs, its conversion notes printed); a file's shape is the model's
// where the model leaves it open (symbolic dims, the batch), and --shape
// overrides the first input's.
using InputFiles = std::map<std::string, Tensor>;
StatusOr<InputFiles> read_input_files(const Common& c, const std::vector<std::string>& input_files, ModelOptions& mo) {
  TS_ASSIGN_OR_RETURN(const std::vector<DeclaredInput> declared, declared_inputs(c.model, c.model_name));
  std::vector<std::string> notes;
  TS_ASSIGN_OR_RETURN(InputFiles files, read_inputs(input_files, declared, &notes));
  for (const std::string& n : notes) std::printf("%s\n", n.c_str());
  TS_RETURN_IF_ERROR(shapes_from_inputs(declared, files, mo));
  return files;
}

// Every input from `input_files` (model_io.h; random where none is given),
// every output printed, written and checked; one frame (every input) through
// the Pipeline.
Status cmd_run(const Common& c, const std::vector<std::string>& input_files, const std::string& output,
               const std::string& output_dir, const std::string& reference) {
  TS_ASSIGN_OR_RETURN(auto device, open(c));
  TS_ASSIGN_OR_RETURN(ModelOptions mo, model_options(c));
  TS_ASSIGN_OR_RETURN(InputFiles files, read_input_files(c, input_files, mo));
  TS_ASSIGN_OR_RETURN(LoadedModel m, load_model(c.model, *device, mo));
  print_report(m, c);
  const std::vector<std::string> out_names = output_names(m);
  TS_ASSIGN_OR_RETURN(std::vector<Tensor> xs, host_inputs(*m.model, files));
  const auto t0 = Clock::now();
  std::vector<Tensor> ys;
  {
    TS_ASSIGN_OR_RETURN(cnn::PipelineConfig pc, parse_pipeline_config(c.config));
    std::vector<std::vector<Tensor>> taps;  // the Pipeline's intermediates queue
    TS_ASSIGN_OR_RETURN(auto outs, run_pipeline(*m.model, *device, pc, {xs}, &taps));
    const cnn::ModelOutput& o = outs[0];
    if (o.is_tensor()) {
      ys.push_back(*o.tensor);
    } else {
      for (const auto& e : o.list) ys.push_back(*e.tensor);
    }
    if (!c.intermediates.empty()) {
      std::printf("%zu intermediate(s) tapped (the Pipeline's intermediates queue)\n", taps[0].size());
      TS_RETURN_IF_ERROR(write_outputs("", c.intermediates_dir, m.model->intermediate_names(), taps[0]));
    }
  }
  const double ms = ms_since(t0);
  if (m.tail) {
    const auto t1 = Clock::now();
    TS_ASSIGN_OR_RETURN(std::vector<graph::HostTensor> outs, finish_outputs(m, ys));
    std::printf("host tail, %s: %.2f ms\n", m.tail->summary().c_str(), ms_since(t1));
    for (size_t k = 0; k < outs.size(); ++k)
      std::printf("output '%s' %s\n", out_names[k].c_str(), outs[k].descriptor().c_str());
    std::printf("1 run through the pipeline: %.0f ms\n", ms);
    if (c.explain) print_selections(*m.model);
    TS_RETURN_IF_ERROR(write_host_outputs(output, output_dir, out_names, outs));
    if (!reference.empty())
      TS_RETURN_IF_ERROR(check_host_references(reference, out_names, outs, pcc_threshold(c, m)));
    return close_device(*device);
  }
  if (ys.size() != out_names.size())
    return internal_error("the model has {} outputs, the run returned {}", out_names.size(), ys.size());
  for (size_t k = 0; k < ys.size(); ++k) {
    TS_ASSIGN_OR_RETURN(std::vector<float> v, ys[k].to_vector());
    double sum = 0, lo = INFINITY, hi = -INFINITY;
    uint64_t nan = 0;
    for (float f : v) {
      if (std::isnan(f)) {
        ++nan;
        continue;
      }
      sum += f, lo = std::min<double>(lo, f), hi = std::max<double>(hi, f);
    }
    if (nan == v.size()) {
      std::printf("output '%s' %s: all %zu values NaN\n", out_names[k].c_str(), ys[k].shape().to_string().c_str(),
                  v.size());
      continue;
    }
    std::printf("output '%s' %s: min %.6g max %.6g mean %.6g%s\n", out_names[k].c_str(),
                ys[k].shape().to_string().c_str(), lo, hi, sum / static_cast<double>(v.size() - nan),
                nan ? fmt::format(" ({} NaN)", nan).c_str() : "");
  }
  std::printf("1 run through the pipeline: %.0f ms\n", ms);
  if (c.explain) print_selections(*m.model);
  TS_RETURN_IF_ERROR(write_outputs(output, output_dir, out_names, ys));
  if (!reference.empty()) TS_RETURN_IF_ERROR(check_references(reference, out_names, ys, pcc_threshold(c, m)));
  return close_device(*device);
}

// A progress bar on a terminal, a line per 10% when piped.
class Progress {
 public:
  Progress(std::string what, int total) : what_(std::move(what)), total_(total), tty_(isatty(STDOUT_FILENO)) {}
  void update(int done) {
    if (tty_) {
      const int w = 30, filled = total_ ? done * w / total_ : w;
      std::printf("\r%-12s [%s%s] %d/%d", what_.c_str(), std::string(static_cast<size_t>(filled), '#').c_str(),
                  std::string(static_cast<size_t>(w - filled), '.').c_str(), done, total_);
      std::fflush(stdout);
      if (done == total_) std::printf("\n");
    } else if (total_ && (done * 10 / total_ != last_ || done == total_)) {
      last_ = done * 10 / total_;
      std::printf("%s: %d/%d\n", what_.c_str(), done, total_);
    }
  }

 private:
  std::string what_;
  int total_;
  bool tty_;
  int last_ = -1;
};

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const double idx = p / 100.0 * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(idx));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (idx - static_cast<double>(lo));
}

// Kernel time per op kind (the descriptor's first field), each launch's
// median over the `replays` profiled replays, the ten longest launches, and
// a Chrome trace of every replay unless `path` is "-".
Status print_profile(const DeviceProfile& p, int replays, const std::string& path) {
  const size_t n = p.ops.size() / static_cast<size_t>(replays);
  if (n == 0 || n * static_cast<size_t>(replays) != p.ops.size() || p.dropped)
    return internal_error("profile: {} launches ({} dropped) over {} replays, expected a multiple", p.ops.size(),
                          p.dropped, replays);
  std::vector<OpTiming> med(p.ops.begin(), p.ops.begin() + static_cast<std::ptrdiff_t>(n));
  double total_us = 0;
  for (size_t i = 0; i < n; ++i) {
    std::vector<int64_t> d;
    for (size_t r = 0; r < static_cast<size_t>(replays); ++r)
      d.push_back(p.ops[r * n + i].end_ns - p.ops[r * n + i].start_ns);
    std::nth_element(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(d.size() / 2), d.end());
    med[i].end_ns = med[i].start_ns + d[d.size() / 2];
    total_us += med[i].duration_us();
  }
  std::map<std::string, std::pair<double, int>> by_kind;
  for (const auto& op : med) {
    auto& e = by_kind[op.key.substr(0, op.key.find(':'))];
    e.first += op.duration_us(), ++e.second;
  }
  std::vector<std::pair<std::string, std::pair<double, int>>> kinds(by_kind.begin(), by_kind.end());
  std::sort(kinds.begin(), kinds.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  std::printf("  kernel time per op (median of %d replays, %zu launches, %.2f ms):\n", replays, n, total_us / 1e3);
  for (const auto& [k, v] : kinds)
    std::printf("    %-28s %8.3f ms %5.1f%%  %4d launches\n", k.c_str(), v.first / 1e3, 100 * v.first / total_us,
                v.second);
  std::vector<OpTiming> top = med;
  std::sort(top.begin(), top.end(), [](const auto& a, const auto& b) { return a.duration_us() > b.duration_us(); });
  std::printf("  longest launches:\n");
  for (size_t i = 0; i < std::min<size_t>(10, top.size()); ++i)
    std::printf("    %8.3f ms  %s  [%s]\n", top[i].duration_us() / 1e3, top[i].key.c_str(), top[i].kernel_name.c_str());
  if (path != "-") {
    TS_RETURN_IF_ERROR(write_chrome_trace(p, path));
    std::printf("  Chrome trace: %s\n", path.c_str());
  }
  return ok_status();
}

Status cmd_bench(const Common& c, int iterations, const std::vector<std::string>& input_files,
                 const std::string& reference, const std::string& profile_path, double interval_ms) {
  if (iterations < 1) return invalid_argument_error("--iterations {}: expected at least 1", iterations);
  if (!(interval_ms >= 0) || interval_ms > 60000)
    return invalid_argument_error("--interval {}: expected milliseconds in 0..60000", interval_ms);
  TS_ASSIGN_OR_RETURN(auto device, open(c));
  TS_ASSIGN_OR_RETURN(ModelOptions mo, model_options(c));
  // --input: frame 0's inputs (as run's; the others, and inputs without a file, random).
  TS_ASSIGN_OR_RETURN(InputFiles files, read_input_files(c, input_files, mo));
  TS_ASSIGN_OR_RETURN(LoadedModel m, load_model(c.model, *device, mo));
  print_report(m, c);
  TS_ASSIGN_OR_RETURN(cnn::PipelineConfig pc, parse_pipeline_config(c.config));
  std::optional<MemoryConfig> dram_out;
  if (pc.all_transfers_on_separate_command_queue) dram_out = DRAM_MEMORY_CONFIG;
  std::vector<cnn::Frame> inputs(static_cast<size_t>(iterations));
  TS_ASSIGN_OR_RETURN(inputs[0], host_inputs(*m.model, files));
  for (size_t k = 0; k < inputs[0].size(); ++k) {
    const std::vector<Tensor> xs =
        random_inputs(inputs[0][k].shape(), iterations - 1, static_cast<uint32_t>(1000 * (k + 1)));
    for (size_t i = 1; i < inputs.size(); ++i) inputs[i].push_back(xs[i - 1]);
  }
  TS_ASSIGN_OR_RETURN(auto pipe, cnn::create_pipeline_from_config(pc, m.model->pipeline_model(), *device,
                                                                  DRAM_MEMORY_CONFIG, DRAM_MEMORY_CONFIG, dram_out));
  auto t0 = Clock::now();
  TS_RETURN_IF_ERROR(pipe->compile(inputs[0]));
  const double pipeline_compile_ms = ms_since(t0);
  if (c.explain) print_selections(*m.model);
  TS_RETURN_IF_ERROR(pipe->preallocate_output_tensors_on_host(inputs.size()));
  // Latency: one frame at a time, enqueue to outputs on the host; with
  // --interval, each frame starts that long after the last one started (a
  // camera's frame rate), the device idle in between.
  // (Pipelined I/O overlaps one frame's transfers with the next frame's
  // replay and so takes at least two frames per enqueue: no latency.)
  const bool latency = !pc.all_transfers_on_separate_command_queue;
  if (!latency && iterations < 2)
    return invalid_argument_error("--config io: pipelined I/O needs at least 2 iterations, found {}", iterations);
  std::vector<double> lat;
  Progress lp("latency", latency ? iterations : 0);
  auto next = Clock::now();
  for (int i = 0; latency && i < iterations; ++i) {
    if (interval_ms > 0) std::this_thread::sleep_until(next);
    next = Clock::now() +
           std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(interval_ms));
    t0 = Clock::now();
    TS_RETURN_IF_ERROR(pipe->enqueue(std::span<const cnn::Frame>(&inputs[static_cast<size_t>(i)], 1)));
    TS_RETURN_IF_ERROR(pipe->pop_all().status());
    lat.push_back(ms_since(t0));
    lp.update(i + 1);
  }
  // Throughput: every frame enqueued at once, writes overlapping compute.
  t0 = Clock::now();
  TS_RETURN_IF_ERROR(pipe->enqueue(std::span<const cnn::Frame>(inputs)));
  TS_ASSIGN_OR_RETURN(auto outs, pipe->pop_all());
  const double e2e_ms = ms_since(t0);
  std::vector<Tensor> out0;  // frame 0's outputs, for --reference
  if (outs[0].is_tensor()) out0.push_back(*outs[0].tensor);
  for (const auto& o : outs[0].list)
    if (o.is_tensor()) out0.push_back(*o.tensor);
  TS_RETURN_IF_ERROR(pipe->cleanup());
  // Device only: the model captured once and replayed back to back.
  std::vector<Tensor> xs;
  for (const Tensor& h : inputs[0]) {
    TS_ASSIGN_OR_RETURN(Tensor x, to_device(h, *device));
    xs.push_back(std::move(x));
  }
  TS_ASSIGN_OR_RETURN(TraceId tid, begin_trace_capture(*device, 0));
  auto captured = m.model->run(xs);
  TS_RETURN_IF_ERROR(end_trace_capture(*device, tid, 0));
  TS_RETURN_IF_ERROR(captured.status());
  Progress dp("device only", iterations);
  t0 = Clock::now();
  for (int i = 0; i < iterations; ++i) {
    TS_RETURN_IF_ERROR(execute_trace(*device, tid, 0, false));
    if (!isatty(STDOUT_FILENO)) continue;
    TS_RETURN_IF_ERROR(synchronize_device(*device));
    dp.update(i + 1);
  }
  TS_RETURN_IF_ERROR(synchronize_device(*device));
  const double device_ms = ms_since(t0);
  std::optional<DeviceProfile> profile;
  const int profile_replays = std::min(iterations, 10);
  if (!profile_path.empty()) {
    TS_RETURN_IF_ERROR(enable_profiler(*device));
    for (int i = 0; i < profile_replays; ++i) TS_RETURN_IF_ERROR(execute_trace(*device, tid, 0, true));
    TS_ASSIGN_OR_RETURN(profile, read_profile(*device));
    TS_RETURN_IF_ERROR(disable_profiler(*device));
  }
  TS_RETURN_IF_ERROR(release_trace(*device, tid));
  const double frames = static_cast<double>(iterations) * static_cast<double>(m.input_shape[0]);
  // The fidelity when it is not the exact default (LoFi trades precision for speed: see --math-fidelity).
  std::string precision = c.math_fidelity == "HiFi4" ? c.dtype : c.dtype + " " + c.math_fidelity;
  if (c.amp_level >= 0) precision = fmt::format("AMP level {}", c.amp_level);
  if (!c.precision_config.empty()) precision += " + " + c.precision_config;
  if (c.numerics != "fast") precision += ", numerics " + c.numerics;
  std::printf("%s  %s  batch %ld  %s  (%d iterations; pipeline compile %.0f ms)\n", c.model.c_str(), precision.c_str(),
              static_cast<long>(m.input_shape[0]),
              pc.use_trace ? (pc.num_command_queues == 2 ? "2 queues + trace" : "trace") : "no trace", iterations,
              pipeline_compile_ms);
  std::printf("  end to end:  %8.2f FPS (%.2f ms per batch)\n", frames / e2e_ms * 1e3, e2e_ms / iterations);
  const std::string pace =
      interval_ms > 0 ? fmt::format("one batch every {:g} ms", interval_ms) : "one batch at a time";
  if (latency)
    std::printf("  latency:     p50 %.2f ms  p90 %.2f ms  p99 %.2f ms  (%s)\n", percentile(lat, 50),
                percentile(lat, 90), percentile(lat, 99), pace.c_str());
  else
    std::printf("  latency:     not measured (pipelined I/O runs two frames or more per enqueue)\n");
  std::printf("  device only: %8.2f FPS (%.2f ms per batch, trace replays back to back; %.0f GFLOP/s)\n",
              frames / device_ms * 1e3, device_ms / iterations,
              m.model->report().conv_flops / (device_ms / iterations) / 1e6);
  if (profile) TS_RETURN_IF_ERROR(print_profile(*profile, profile_replays, profile_path));
  if (m.tail) {
    // The host tail on frame 0's outputs, timed apart: its work depends on
    // the data (how many boxes pass), so each frame's would differ.
    std::vector<double> tail_ms;
    StatusOr<std::vector<graph::HostTensor>> outs = std::vector<graph::HostTensor>();
    for (int i = 0; i < std::min(iterations, 20); ++i) {
      t0 = Clock::now();
      outs = finish_outputs(m, out0);
      TS_RETURN_IF_ERROR(outs.status());
      tail_ms.push_back(ms_since(t0));
    }
    std::printf("  host tail:   p50 %.3f ms on frame 0's outputs, not in the figures above (%s)\n",
                percentile(tail_ms, 50), m.tail->summary().c_str());
    if (!reference.empty())
      TS_RETURN_IF_ERROR(check_host_references(reference, output_names(m), *outs, pcc_threshold(c, m)));
    return close_device(*device);
  }
  if (!reference.empty())
    TS_RETURN_IF_ERROR(check_references(reference, m.model->output_names(), out0, pcc_threshold(c, m)));
  return close_device(*device);
}

Status cmd_conformance(const std::string& dir, const std::string& filter, double min_rate, bool quiet) {
  TS_ASSIGN_OR_RETURN(ConformanceResult r, run_conformance({}, dir, filter));
  const auto ops = runtime::supported_ops();
  std::printf("Supported ops (%zu): %s\n\n", ops.size(), fmt::format("{}", fmt::join(ops, " ")).c_str());
  for (const auto& c : r.cases)
    if (!quiet || c.status == "fail")
      std::printf("%-62s %-11s %s\n", c.name.c_str(), c.status.c_str(), c.detail.c_str());
  std::printf("\nONNX node tests in %s: %d pass, %d fail (%.1f%% of the %d with supported ops); %d unsupported\n",
              dir.c_str(), r.pass, r.fail, 100 * r.pass_rate(), r.pass + r.fail, r.unsupported);
  if (r.fail) {
    std::printf("Failures:\n");
    for (const auto& c : r.cases)
      if (c.status == "fail") std::printf("  %s: %s\n", c.name.c_str(), c.detail.c_str());
  }
  if (r.pass_rate() < min_rate)
    return failed_precondition_error("pass rate {:.1f}% is below the required {:.1f}%", 100 * r.pass_rate(),
                                     100 * min_rate);
  return ok_status();
}

}  // namespace
}  // namespace tessera::tools

int main(int argc, char** argv) {
  using namespace tessera::tools;
  // Model weights pass through a few large host buffers (file, protobuf,
  // graph constants, packed weights); a fresh page costs ~11 us to fault in
  // on this machine, so keep freed memory in the heap for the next buffer
  // instead of returning it to the kernel.
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  CLI::App app{"Tessera: compile ONNX vision models for a device and run them through the pipeline"};
  // A device name, or a descriptor file of an emulated device (device/descriptor.h).
  const CLI::Validator kDeviceName(
      [](std::string& v) -> std::string {
        if (v == "cpu" || v == "wormhole_b0" || (v.ends_with(".json") && std::filesystem::is_regular_file(v)))
          return "";
        return "expected cpu, wormhole_b0 or an existing DESCRIPTOR.json, got '" + v + "'";
      },
      "DEVICE");
  app.require_subcommand(1);
  Common c;
  auto add_common = [&](CLI::App* s) {
    s->add_option("model", c.model, "ONNX model file, or a compiled image (.tsi)")
        ->required()
        ->check(CLI::ExistingFile);
    s->add_option("--model", c.model_name, "the model of a merged image to run");
    s->add_option("--dtype", c.dtype, "float32 | bfloat16 | bfloat8_b (weights; bfloat16 activations)")
        ->check(CLI::IsMember({"float32", "bfloat16", "bfloat8_b"}));
    s->add_option("--batch", c.batch, "batch size (fills the leading input dim)")->check(CLI::PositiveNumber);
    s->add_option("--math-fidelity", c.math_fidelity,
                  "HiFi4 (exact) | HiFi3 | HiFi2 | LoFi: below HiFi4 float32 3x3 convs may run Winograd; "
                  "LoFi on AMX CPUs computes float32 convs on bfloat16 operands")
        ->check(CLI::IsMember({"LoFi", "HiFi2", "HiFi3", "HiFi4"}));
    s->add_option("--micro-batch", c.micro_batch,
                  "auto | off | N: run the early layers N images at a time where the batch spills the cache");
    s->add_option("--shape", c.shape, "the input's shape, NxCxHxW (models with dynamic H, W)");
    add_select_options(s, c.select, c.predictor, c.select_cache);
    add_precision_options(s, c.amp_level, c.precision_config, c.numerics);
    s->add_option("--config", c.config, "pipeline: trace|notrace, 1cq|2cq, io (pipelined I/O)");
    s->add_option("--device", c.device,
                  "cpu | wormhole_b0 | DESCRIPTOR.json (an emulated device; default: an image's target, or cpu)")
        ->check(kDeviceName);
    s->add_option("--workers", c.workers, "worker threads (0: one per physical core)");
    s->add_flag("--verbose", c.verbose, "list every conv's placement plan");
    s->add_flag("--explain", c.explain,
                "list every conv's kernel and why the candidates before it declined, and every op's formats and "
                "fidelity");
    s->add_flag("--no-pin", c.no_pin, "leave the device's threads to the OS (default: each pinned to its own core)");
  };
  std::vector<std::string> inputs;
  std::string output, output_dir, reference;
  bool random = false;
  auto* run = app.add_subcommand("run", "compile MODEL and run one input through the pipeline");
  add_common(run);
  auto* in_opt = run->add_option("--input", inputs,
                                 "X.npy (the next input), NAME=X.npy, or ALL.npz (arrays by input name); repeatable. "
                                 "Shapes must match the model's static dims; other dtypes are converted to float32, "
                                 "with a note");
  run->add_flag("--random", random, "fixed-seed uniform [-1, 1) inputs (the default for inputs without a file)")
      ->excludes(in_opt);
  run->add_option("--output", output, "write the output as .npy, or every output as .npz (keyed by output name)");
  run->add_option("--output-dir", output_dir, "write every output as NAME.npy in this directory");
  auto* taps = run->add_option(
      "--save-intermediates", c.intermediates,
      "tap the values of these names or ECMAScript regexes (repeatable): they are written "
      "beside the outputs, one NAME.npy each in --intermediates-dir (the Pipeline's intermediates queue)");
  run->add_option("--intermediates-dir", c.intermediates_dir, "where --save-intermediates writes the taps")
      ->needs(taps);
  taps->needs(run->get_option("--intermediates-dir"));
  run->add_option("--reference", reference,
                  "compare the output with this .npy, or every output with this .npz's array of its name, or with "
                  "NAME.npy in this directory (PCC)")
      ->check(CLI::ExistingPath);
  int iterations = 50;
  auto* bench = app.add_subcommand("bench", "end-to-end FPS, latency percentiles and device-only FPS");
  add_common(bench);
  bench->add_option("--iterations", iterations, "frames (batches) to time");
  std::vector<std::string> bench_inputs;
  std::string bench_reference;
  bench->add_option("--input", bench_inputs,
                    "frame 0's inputs, as run's --input (X.npy, NAME=X.npy or ALL.npz; their shapes set the model's); "
                    "the other frames and inputs without a file are random");
  bench
      ->add_option("--reference", bench_reference,
                   "check frame 0's outputs against this .npy, .npz or directory (as run's --reference; PCC)")
      ->check(CLI::ExistingPath);
  double interval_ms = 0;
  bench->add_option("--interval", interval_ms,
                    "latency frames start this many ms apart, the device idle in between (0: back to back)");
  std::string profile_path;
  bench->add_option("--profile", profile_path,
                    "kernel time per op, median over up to 10 replays; a Chrome trace to this file ('-': none)");
  CompileRequest creq;
  auto* compile = app.add_subcommand("compile", "compile an ONNX model into an image (.tsi) to ship and load anywhere");
  compile->add_option("model", creq.model, "ONNX model file")->required()->check(CLI::ExistingFile);
  compile->add_option("-o,--output", creq.output, "the image to write (.tsi)")->required();
  compile->add_option("--name", creq.name, "the model's name in the image (default: the file's stem)");
  compile
      ->add_option("--target", creq.target,
                   "cpu | wormhole_b0 | DESCRIPTOR.json: the device to compile for (emulated if absent)")
      ->check(kDeviceName);
  compile->add_option("--dtype", creq.options.precision, "float32 | bfloat16 | bfloat8_b")
      ->check(CLI::IsMember({"float32", "bfloat16", "bfloat8_b"}));
  compile->add_option("--batch", creq.options.batch, "batch size (fills the leading input dim)")
      ->check(CLI::PositiveNumber);
  compile->add_option("--math-fidelity", creq.options.math_fidelity, "HiFi4 | HiFi3 | HiFi2 | LoFi")
      ->check(CLI::IsMember({"LoFi", "HiFi2", "HiFi3", "HiFi4"}));
  compile->add_option("--micro-batch", creq.options.micro_batch, "auto | off | N");
  add_select_options(compile, creq.options.select, creq.options.predictor, creq.options.select_cache);
  add_precision_options(compile, creq.options.amp_level, creq.options.precision_config, creq.options.numerics);
  compile
      ->add_option("--workers", creq.workers,
                   "the worker threads of the device that will run the image (prepared weights are packed per "
                   "worker count; 0: one per physical core of this machine)")
      ->check(CLI::NonNegativeNumber);
  compile->add_flag("--portable", creq.portable,
                    "store the weight constants, not the weights packed for this CPU's kernels: the image loads on "
                    "any CPU, packing them there (a slower load)");
  std::string compile_shape;
  compile->add_option("--shape", compile_shape, "the first input's shape, NxCxHxW (models with dynamic H, W)");
  std::string info_path;
  bool info_json = false;
  auto* info = app.add_subcommand("info", "what a compiled image holds: versions, target, models, memory");
  info->add_option("image", info_path, "a compiled image (.tsi)")->required()->check(CLI::ExistingFile);
  info->add_flag("--json", info_json, "one JSON object, for tools");
  std::vector<std::string> merge_inputs;
  std::string merge_output;
  bool merge_separate = false;
  auto* merge = app.add_subcommand("merge", "merge the models of several images into one image");
  merge->add_option("images", merge_inputs, "compiled images (.tsi)")->required()->check(CLI::ExistingFile);
  merge->add_option("-o,--output", merge_output, "the merged image (.tsi)")->required();
  merge->add_flag("--separate", merge_separate, "store identical weights of different models once each");
  std::string dir = kDefaultNodeTestDir, filter;
  double min_rate = 0.95;
  bool quiet = false;
  auto* conf = app.add_subcommand("conformance", "run the ONNX backend node tests through the compiler");
  conf->add_option("dir", dir, "directory of ONNX test cases");
  conf->add_option("--filter", filter, "only tests whose name contains this");
  conf->add_option("--min-pass-rate", min_rate, "exit non-zero below this pass rate (0..1)");
  conf->add_flag("--quiet", quiet, "print failures only");
  CompareRequest creq2;
  Common cmp;  // the precision options compare shares with run
  auto* compare = app.add_subcommand(
      "compare", "run MODEL at a precision and at float32 on the same input: PCC and error per op, a suggested rule");
  compare->add_option("model", creq2.model, "ONNX model file")->required()->check(CLI::ExistingFile);
  auto* cmp_in = compare->add_option("--input", creq2.inputs, "X.npy, NAME=X.npy or ALL.npz (as run's)");
  bool cmp_random = false;
  compare->add_flag("--random", cmp_random, "fixed-seed uniform [-1, 1) inputs (the default)")->excludes(cmp_in);
  compare->add_option("--dtype", cmp.dtype, "float32 | bfloat16 | bfloat8_b (weights; bfloat16 activations)")
      ->check(CLI::IsMember({"float32", "bfloat16", "bfloat8_b"}));
  compare->add_option("--math-fidelity", cmp.math_fidelity, "HiFi4 | HiFi3 | HiFi2 | LoFi")
      ->check(CLI::IsMember({"LoFi", "HiFi2", "HiFi3", "HiFi4"}));
  add_precision_options(compare, cmp.amp_level, cmp.precision_config, cmp.numerics);
  compare->add_option("--batch", cmp.batch, "batch size (fills the leading input dim)")->check(CLI::PositiveNumber);
  compare->add_option("--shape", cmp.shape, "the input's shape, NxCxHxW (models with dynamic H, W)");
  compare->add_option("--threshold", creq2.threshold, "mark the first op whose PCC is below this (default 0.999)")
      ->check(CLI::Range(0.0, 1.0));
  compare->add_option("--csv", creq2.csv, "write one row per op to this CSV file");
  compare->add_option("--plot", creq2.plot, "draw PCC per op to this PNG (python3-matplotlib)");
  compare->add_flag("!--no-check", creq2.check_suggestion, "do not run the model again with the suggested rule");
  compare->add_option("--workers", creq2.workers, "worker threads (0: one per physical core)");
  PredictorCommands predictor(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  tessera::Status s;
  if (*run)
    s = cmd_run(c, inputs, output, output_dir, reference);
  else if (*bench)
    s = cmd_bench(c, iterations, bench_inputs, bench_reference, profile_path, interval_ms);
  else if (*compile) {
    Common cc;
    cc.shape = compile_shape;
    cc.batch = creq.options.batch;
    auto o = model_options(cc);
    if (o.ok()) {
      creq.options.input_shape = o->input_shape;
      creq.options.batch = o->batch;
    }
    s = o.ok() ? compile_command(creq) : o.status();
  } else if (*info)
    s = info_command(info_path, info_json);
  else if (*merge)
    s = merge_command(merge_inputs, merge_output, merge_separate);
  else if (*compare) {
    auto o = model_options(cmp);
    if (o.ok()) creq2.options = *o;
    s = o.ok() ? compare_command(creq2).status() : o.status();
  } else if (predictor.chosen())
    s = predictor.run();
  else
    s = cmd_conformance(dir, filter, min_rate, quiet);
  if (!s.ok()) {
    std::fprintf(stderr, "tessera: %s\n", s.to_string().c_str());
    return 1;
  }
  return 0;
}
