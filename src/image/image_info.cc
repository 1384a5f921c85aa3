// `tessera info`: what an image holds, as text for people and JSON
// (nlohmann-json) for tools.
#include <fmt/format.h>

#include <map>
#include <nlohmann/json.hpp>

#include "tessera/image/image.h"

namespace tessera::image {

namespace {

std::string mib(uint64_t b) { return fmt::format("{:.2f} MiB", static_cast<double>(b) / (1 << 20)); }

std::string io_line(const IoInfo& io) {
  return fmt::format("'{}' {} {}", io.name, io.dtype, graph::dims_to_string(io.dims));
}

// The options with an AMP level's dtypes and fidelity in place of the ones
// it replaces (runtime/precision.h): what the model runs with.
runtime::CompileOptions effective(const runtime::CompileOptions& given) {
  runtime::CompileOptions o = given;
  const StatusOr<std::optional<runtime::AmpDefaults>> amp = runtime::amp_level_defaults(given.precision.amp_level);
  if (amp.ok() && *amp)
    o.dtype = (*amp)->dtype, o.weights_dtype = (*amp)->weights_dtype, o.math_fidelity = (*amp)->math_fidelity;
  return o;
}

std::string options_line(const runtime::CompileOptions& given) {
  const runtime::CompileOptions o = effective(given);
  return fmt::format("activations {}, weights {}, math fidelity {}, micro-batch {}{}", data_type_name(o.dtype),
                     data_type_name(o.weights_dtype), math_fidelity_name(o.math_fidelity),
                     o.micro_batch ? (*o.micro_batch ? fmt::format("{} image(s)", *o.micro_batch) : "off") : "auto",
                     o.allow_fallback ? "" : ", host fallbacks disallowed") +
         (o.precision.empty() ? "" : ", precision " + runtime::precision_config_to_json(o.precision)) +
         (o.numerics == runtime::Numerics::kFast ? ""
                                                 : ", numerics " + std::string(runtime::numerics_name(o.numerics)));
}

}  // namespace

std::string info_text(const ImageInfo& info) {
  const ImageHeader& h = info.header;
  const DeviceDescriptor& t = h.target;
  std::string s;
  s += fmt::format("image format {}.{}, written by Tessera {} ({})\n", h.format_major, h.format_minor,
                   h.tessera_version, h.tessera_commit);
  s += fmt::format("target: {}{}: {}x{} cores, {} B L1 per core, {} DRAM bank(s) of {}\n", t.name,
                   t.emulated ? " (emulated)" : "", t.grid.x, t.grid.y, t.l1_size_per_core, t.num_dram_banks,
                   mib(t.dram_bank_size));
  s += fmt::format("kernels chosen for: {} on {} ({})\n", h.kernel_isa,
                   h.cpu_model.empty() ? "an unknown CPU" : h.cpu_model, h.cpu_features);
  s += fmt::format("file: {} (metadata {}, weights {})\n", mib(info.file_bytes), mib(info.meta_bytes),
                   mib(info.weights_bytes));
  for (const ModelInfo& m : info.models) {
    const runtime::CompileReport& r = m.report;
    s += fmt::format("\nmodel '{}'\n  options: {}\n", m.name, options_line(m.options));
    for (const IoInfo& io : m.inputs) s += fmt::format("  input  {}\n", io_line(io));
    for (const IoInfo& io : m.outputs) s += fmt::format("  {} {}\n", m.host_tail_nodes ? "device output" : "output", io_line(io));
    if (m.host_tail_nodes) {
      std::string ops;
      for (const auto& [op, n] : m.host_tail_ops) ops += fmt::format("{}{} {}", ops.empty() ? "" : ", ", op, n);
      s += fmt::format("  host tail: {} node(s) on the device outputs ({}); the model's outputs: {}\n",
                       m.host_tail_nodes, ops, fmt::join(m.model_outputs, ", "));
    }
    int nodes = 0;
    std::string ops;
    for (const auto& [op, n] : m.op_counts) nodes += n, ops += fmt::format("{}{} {}", ops.empty() ? "" : ", ", op, n);
    s += fmt::format("  {} nodes: {}\n", nodes, ops);
    s +=
        fmt::format("  compiled: {} device op(s), {} host fallback(s), {} layout conversion(s), {:.2f} GFLOP per run\n",
                    r.device_ops, r.fallbacks.size(), r.layout_conversions, r.conv_flops * 1e-9);
    for (const auto& f : r.fallbacks) s += fmt::format("    host fallback: {}\n", f);
    std::string passes;
    for (const auto& p : r.passes)
      if (p.rewrites) passes += fmt::format("{}{} {}", passes.empty() ? "" : ", ", p.pass, p.rewrites);
    s += fmt::format("  passes: {}\n", passes.empty() ? "none rewrote anything" : passes);
    // Kernels by name: "conv1: onednn_jit for conv2d:..." counts as onednn_jit.
    std::map<std::string, int> kernels;
    for (const std::string& k : m.conv_kernels) {
      const size_t at = k.rfind(": ", k.find(" for "));
      const std::string rest = at == std::string::npos ? k : k.substr(at + 2);
      ++kernels[rest.substr(0, rest.find(' '))];
    }
    std::string ks;
    for (const auto& [k, n] : kernels) ks += fmt::format("{}{} {}", ks.empty() ? "" : ", ", k, n);
    if (!ks.empty()) s += fmt::format("  conv kernels on the compiling CPU: {}\n", ks);
    std::string w;
    for (const auto& [dtype, b] : m.weight_bytes) w += fmt::format("{}{} {}", w.empty() ? "" : ", ", dtype, mib(b));
    s += fmt::format("  constants: {} ({})\n", m.num_constants, w.empty() ? "none" : w);
    if (m.prepared_layers)
      s += fmt::format("  prepared weights: {} conv(s), {}, for {}\n", m.prepared_layers, mib(m.prepared_bytes),
                       m.prepared_for);
    else
      s += "  prepared weights: none (portable: kernels chosen and weights packed where it loads)\n";
    const uint32_t banks = std::max<uint32_t>(t.num_dram_banks, 1);
    s += fmt::format("  device memory once loaded: DRAM {} ({} per bank), L1 {}\n", mib(m.resident_dram_bytes),
                     mib(m.resident_dram_bytes / banks), mib(m.resident_l1_bytes));
  }
  return s;
}

std::string info_json(const ImageInfo& info) {
  using nlohmann::json;
  const ImageHeader& h = info.header;
  const DeviceDescriptor& t = h.target;
  json j;
  j["format_version"] = fmt::format("{}.{}", h.format_major, h.format_minor);
  j["tessera_version"] = h.tessera_version;
  j["tessera_commit"] = h.tessera_commit;
  json disabled = json::array();
  for (const CoreCoord& c : t.disabled_cores) disabled.push_back({c.x, c.y});
  j["target"] = {{"name", t.name},
                 {"emulated", t.emulated},
                 {"grid", {t.grid.x, t.grid.y}},
                 {"l1_size_per_core", t.l1_size_per_core},
                 {"shared_cache_size", t.shared_cache_size},
                 {"num_dram_banks", t.num_dram_banks},
                 {"dram_bank_size", t.dram_bank_size},
                 {"disabled_cores", disabled},
                 {"host_cores", t.host_cores},
                 {"isa", t.isa}};
  j["kernel_isa"] = h.kernel_isa;
  j["cpu_model"] = h.cpu_model;
  j["cpu_features"] = h.cpu_features;
  j["file_bytes"] = info.file_bytes;
  j["meta_bytes"] = info.meta_bytes;
  j["weights_bytes"] = info.weights_bytes;
  j["models"] = json::array();
  for (const ModelInfo& m : info.models) {
    const runtime::CompileReport& r = m.report;
    auto ios = [](const std::vector<IoInfo>& v) {
      json a = json::array();
      for (const IoInfo& io : v) a.push_back({{"name", io.name}, {"dtype", io.dtype}, {"shape", io.dims}});
      return a;
    };
    json ops = json::object(), weights = json::object(), passes = json::object();
    for (const auto& [op, n] : m.op_counts) ops[op] = n;
    for (const auto& [dtype, b] : m.weight_bytes) weights[dtype] = b;
    for (const auto& p : r.passes) passes[p.pass] = p.rewrites;
    const runtime::CompileOptions o = effective(m.options);
    j["models"].push_back(
        {{"name", m.name},
         {"options",
          {{"dtype", data_type_name(o.dtype)},
           {"weights_dtype", data_type_name(o.weights_dtype)},
           {"math_fidelity", math_fidelity_name(o.math_fidelity)},
           {"micro_batch", o.micro_batch ? json(*o.micro_batch) : json("auto")},
           {"allow_fallback", o.allow_fallback},
           {"precision", json::parse(runtime::precision_config_to_json(o.precision))},
           {"numerics", runtime::numerics_name(o.numerics)}}},
         {"inputs", ios(m.inputs)},
         {"outputs", ios(m.outputs)},
         {"op_counts", ops},
         {"device_ops", r.device_ops},
         {"host_fallbacks", r.fallbacks},
         {"layout_conversions", r.layout_conversions},
         {"flops_per_run", r.conv_flops},
         {"passes", passes},
         {"conv_plans", r.conv_plans},
         {"conv_kernels", m.conv_kernels},
         {"constants", m.num_constants},
         {"prepared_layers", m.prepared_layers},
         {"prepared_bytes", m.prepared_bytes},
         {"prepared_for", m.prepared_for},
         {"weight_bytes", weights},
         {"resident_dram_bytes", m.resident_dram_bytes},
         {"resident_dram_bytes_per_bank", m.resident_dram_bytes / std::max<uint32_t>(t.num_dram_banks, 1)},
         {"resident_l1_bytes", m.resident_l1_bytes}});
    if (m.host_tail_nodes) {
      json tail_ops = json::object();
      for (const auto& [op, n] : m.host_tail_ops) tail_ops[op] = n;
      j["models"].back()["host_tail"] = {
          {"nodes", m.host_tail_nodes}, {"op_counts", tail_ops}, {"model_outputs", m.model_outputs}};
    }
  }
  // Names come from the file: bytes that are not UTF-8 print as U+FFFD.
  return j.dump(2, ' ', false, json::error_handler_t::replace);
}

}  // namespace tessera::image
