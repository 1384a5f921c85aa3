#include "image_commands.h"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <set>

#include "model_io.h"
#include "tessera/device/device.h"
#include "tessera/image/image.h"

namespace tessera::tools {

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::string mib(uint64_t b) { return fmt::format("{:.2f} MiB", static_cast<double>(b) / (1 << 20)); }

}  // namespace

Status compile_command(const CompileRequest& r) {
  if (!r.output.ends_with(".tsi"))
    return invalid_argument_error("-o {}: expected a file name ending in .tsi", r.output);
  TS_ASSIGN_OR_RETURN(auto device, open_device({.descriptor = r.target,
                                                .l1_small_size = 16384,
                                                .trace_region_size = 8 << 20,
                                                .num_command_queues = 2,
                                                .worker_threads = r.workers,
                                                .pin_threads = r.pin}));
  ModelOptions options = r.options;
  options.workers = static_cast<uint32_t>(std::max(r.workers, 0));
  TS_ASSIGN_OR_RETURN(runtime::CompileOptions copts, compile_options_for(options));
  // An image's shapes are fixed: a dynamic dim past the batch needs --shape.
  TS_ASSIGN_OR_RETURN(const std::vector<DeclaredInput> declared, declared_inputs(r.model));
  for (size_t k = 0; k < declared.size(); ++k) {
    const auto& d = declared[k].dims;
    if ((k > 0 || r.options.input_shape.empty()) && std::find(d.begin() + (d.empty() ? 0 : 1), d.end(), -1) != d.end())
      return invalid_argument_error(
          "input '{}' has dynamic dims {}: an image is compiled for one shape; give it "
          "with --shape{}",
          declared[k].name, graph::dims_to_string(d), k > 0 ? " (only the first input's can be given yet)" : "");
  }
  double import_ms = 0;
  std::optional<graph::HostTail> tail;  // (a detector's post-processing: the host runs it after the device part)
  TS_ASSIGN_OR_RETURN(graph::Graph g, import_graph(r.model, r.options, &import_ms, &tail));
  const std::string name = r.name.empty() ? std::filesystem::path(r.model).stem().string() : r.name;
  const auto t0 = std::chrono::steady_clock::now();
  TS_ASSIGN_OR_RETURN(image::ImageModel m, image::compile_model(name, std::move(g), *device, copts, r.portable));
  m.tail = std::move(tail);
  const double compile_ms = ms_since(t0);
  const image::ImageHeader header = image::header_for(*device);
  const image::ImageModel* models[] = {&m};
  TS_RETURN_IF_ERROR(image::write_image(r.output, header, models));
  const auto& rep = m.report;
  std::printf(
      "compiled '%s' for %s (%s kernels) in %.0f ms (import %.0f ms): %d device ops, %zu host fallback(s), "
      "%.2f GFLOP per run\n",
      name.c_str(), header.target.name.c_str(), header.kernel_isa.c_str(), compile_ms, import_ms, rep.device_ops,
      rep.fallbacks.size(), rep.conv_flops * 1e-9);
  for (const auto& f : rep.fallbacks) std::printf("  host fallback: %s\n", f.c_str());
  if (m.tail) std::printf("  host tail, %s\n", m.tail->summary().c_str());
  std::printf("wrote %s: %s\n", r.output.c_str(), mib(std::filesystem::file_size(r.output)).c_str());
  return close_device(*device);
}

Status info_command(const std::string& path, bool json) {
  TS_ASSIGN_OR_RETURN(auto img, image::Image::open(path));
  TS_RETURN_IF_ERROR(img->verify_weights());  // (a damaged file is reported here too, not only at load)
  const std::string s = json ? image::info_json(img->info()) + "\n" : image::info_text(img->info());
  std::fputs(s.c_str(), stdout);
  return ok_status();
}

Status merge_command(const std::vector<std::string>& inputs, const std::string& output, bool separate) {
  if (inputs.size() < 2) return invalid_argument_error("merge takes at least two images, got {}", inputs.size());
  if (!output.ends_with(".tsi")) return invalid_argument_error("-o {}: expected a file name ending in .tsi", output);
  std::vector<image::ImageModel> models;
  std::optional<image::ImageHeader> header;
  std::set<std::string> names;
  uint64_t weights_before = 0, resident = 0;
  std::vector<std::pair<uint64_t, std::string>> consumers;
  for (const std::string& path : inputs) {
    TS_ASSIGN_OR_RETURN(auto img, image::Image::open(path));
    TS_RETURN_IF_ERROR(img->verify_weights().annotate(path));
    const image::ImageHeader& h = img->info().header;
    if (!header) {
      header = h;
    } else if (h.target.name != header->target.name || h.target.emulated != header->target.emulated) {
      return invalid_argument_error("{} was compiled for {}, {} for {}: the models of an image share one target", path,
                                    h.target.name, inputs[0], header->target.name);
    }
    weights_before += img->info().weights_bytes;
    for (size_t i = 0; i < img->num_models(); ++i) {
      TS_ASSIGN_OR_RETURN(image::ImageModel m, img->model(i));
      for (image::PreparedBlob& b : m.prepared) b.owned.assign(b.mapped.begin(), b.mapped.end());  // img closes
      std::string name = m.name;
      for (int k = 2; names.count(name); ++k) name = fmt::format("{}_{}", m.name, k);
      if (name != m.name)
        std::printf("%s: model '%s' renamed '%s' (the name was taken)\n", path.c_str(), m.name.c_str(), name.c_str());
      m.name = name;
      names.insert(name);
      resident += m.resident_dram_bytes;
      consumers.emplace_back(m.resident_dram_bytes, name);
      models.push_back(std::move(m));
    }
  }
  // Models run one at a time, their activations from the same device memory;
  // their constants stay resident side by side.
  const DeviceDescriptor& t = header->target;
  const uint64_t capacity = uint64_t{t.num_dram_banks} * t.dram_bank_size;
  if (capacity && resident > capacity) {
    std::sort(consumers.rbegin(), consumers.rend());
    std::string top;
    for (size_t i = 0; i < std::min<size_t>(3, consumers.size()); ++i)
      top += fmt::format("{}'{}' {}", i ? ", " : "", consumers[i].second, mib(consumers[i].first));
    return resource_exhausted_error("the merged models hold {} of constants on {}, whose DRAM is {}; the largest: {}",
                                    mib(resident), t.name, mib(capacity), top);
  }
  std::vector<const image::ImageModel*> ptrs;
  for (const auto& m : models) ptrs.push_back(&m);
  TS_RETURN_IF_ERROR(image::write_image(output, *header, ptrs, {.dedup_weights = !separate}));
  TS_ASSIGN_OR_RETURN(auto merged, image::Image::open(output));
  const uint32_t banks = std::max<uint32_t>(t.num_dram_banks, 1);
  // The footprint per model before, and of the merged image after.
  std::printf("%-24s %14s %18s %12s\n", "model", "DRAM", "DRAM per bank", "L1");
  uint64_t l1 = 0;
  for (const auto& m : models) {
    std::printf("%-24s %14s %18s %12s\n", m.name.c_str(), mib(m.resident_dram_bytes).c_str(),
                mib(m.resident_dram_bytes / banks).c_str(), mib(m.resident_l1_bytes).c_str());
    l1 += m.resident_l1_bytes;
  }
  std::printf("%-24s %14s %18s %12s  (of %s per bank)\n", "merged, all loaded", mib(resident).c_str(),
              mib(resident / banks).c_str(), mib(l1).c_str(), mib(t.dram_bank_size).c_str());
  std::printf(
      "merged %zu model(s) into %s: weights %s in the inputs, %s merged%s; activations come from the same "
      "device memory for every model, as they run one at a time\n",
      models.size(), output.c_str(), mib(weights_before).c_str(), mib(merged->info().weights_bytes).c_str(),
      separate ? " (kept separate)" : " (identical arrays stored once)");
  return ok_status();
}

}  // namespace tessera::tools
