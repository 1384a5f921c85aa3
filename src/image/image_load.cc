// Loading an image's model onto a device: the target check, the prepared
// weights mapped from the file (when they serve this CPU), then the
// compiler's planning and lowering of the stored graph (no passes: they ran
// when the image was compiled).
#include <fmt/format.h>

#include <set>
#include <sstream>

#include "tessera/base/cpu_features.h"
#include "tessera/device/device.h"
#include "tessera/image/image.h"
#include "tessera/tensor/tensor.h"

namespace tessera::image {

namespace {

std::string describe(const DeviceDescriptor& d) {
  return fmt::format("{} ({}x{} cores, {} B L1 per core, {} DRAM bank(s) of {} B)", d.name, d.grid.x, d.grid.y,
                     d.l1_size_per_core, d.num_dram_banks, d.dram_bank_size);
}

// An emulated target (wormhole_b0) plans L1 and banks for exactly that
// device; a CPU image runs on any CPU device, its plans made again at load.
Status check_target(const DeviceDescriptor& image, const DeviceDescriptor& device) {
  const bool same_kind = image.emulated == device.emulated && image.name == device.name;
  const bool same_geometry = image.grid.x == device.grid.x && image.grid.y == device.grid.y &&
                             image.l1_size_per_core == device.l1_size_per_core &&
                             image.num_dram_banks == device.num_dram_banks &&
                             image.dram_bank_size == device.dram_bank_size;
  if (!same_kind || (image.emulated && !same_geometry))
    return failed_precondition_error("the image was compiled for {}, this device is {}: open a {} device to run it",
                                     describe(image), describe(device), image.name);
  return ok_status();
}

// What `image_key` (prepared_weights_key's "<tier> kernels on <features> |
// <n> workers | oneDNN <v>") has that `here` lacks: the kernel tier and CPU
// features the image needs, then its worker count and oneDNN version where
// they differ.
std::string key_differences(const std::string& image_key, const std::string& here) {
  auto parts = [](const std::string& s) {
    std::vector<std::string> out;
    for (size_t at = 0;;) {
      const size_t bar = s.find(" | ", at);
      out.push_back(s.substr(at, bar == std::string::npos ? std::string::npos : bar - at));
      if (bar == std::string::npos) return out;
      at = bar + 3;
    }
  };
  const std::vector<std::string> a = parts(image_key), b = parts(here);
  std::set<std::string> mine;
  std::istringstream in(b.empty() ? "" : b[0]);
  for (std::string w; in >> w;) mine.insert(w);
  std::string out;
  std::istringstream need(a.empty() ? "" : a[0]);
  for (std::string w; need >> w;)
    if (w != "kernels" && w != "on" && !mine.contains(w)) out += (out.empty() ? "" : " ") + w;
  for (size_t i = 1; i < a.size(); ++i)
    if (i >= b.size() || a[i] != b[i]) out += (out.empty() ? "" : ", ") + a[i];
  return out;
}

StatusOr<std::vector<runtime::PreparedLayer>> map_prepared(const Image& image, const ImageModel& m, Device& device) {
  const std::string here = prepared_weights_key(device);
  if (m.prepared_for != here)
    return failed_precondition_error(
        "model '{}': its conv weights are prepared for {}; this device runs {} (the image has: {}). Compile the "
        "image on this machine (--workers N for a device of N workers), or with --portable for an image that packs "
        "its weights where it loads",
        m.name, m.prepared_for, here, key_differences(m.prepared_for, here));
  std::vector<runtime::PreparedLayer> out;
  for (const PreparedBlob& b : m.prepared) {
    runtime::PreparedLayer l{.node = b.node, .selection = b.selection};
    l.weights.key = b.key;
    const std::span<const uint8_t> bytes = b.bytes();
    TS_ASSIGN_OR_RETURN(l.weights.weight,
                        map_file_to_device(b.spec, std::as_bytes(bytes), b.owned.empty() ? image.file_descriptor() : -1,
                                           b.file_offset, device));
    std::vector<uint32_t> bd(b.bias.dims.begin(), b.bias.dims.end());
    TS_ASSIGN_OR_RETURN(Tensor bias,
                        Tensor::from_vector(b.bias.f, Shape(std::span<const uint32_t>(bd)), DataType::FLOAT32));
    TS_ASSIGN_OR_RETURN(l.weights.bias, to_device(bias, device));
    out.push_back(std::move(l));
  }
  // The weights section's checksum, read through the device's mappings of
  // it: the reading also fills their page tables, so the first run reads
  // them as fast as the next (what Device::prefault does) in the same pass.
  // The views: the tensors map_file_to_device maps (one row-major row,
  // interleaved, on a device of one DRAM bank: their bytes lie as in the
  // file); the others' storage pads or interleaves the bytes, and the
  // image's own mapping is read for them.
  std::vector<Image::WeightsView> views;
  for (size_t i = 0; i < out.size(); ++i) {
    const PreparedBlob& b = m.prepared[i];
    const TensorSpec& spec = out[i].weights.weight.spec();
    if (!b.owned.empty() || device.descriptor().num_dram_banks != 1 || spec.layout != Layout::ROW_MAJOR ||
        spec.physical_height() != 1 || spec.memory_config.is_sharded())
      continue;
    views.push_back(
        {b.file_offset, std::span<const std::byte>(out[i].weights.weight.buffer()->bank_data(0), b.mapped.size())});
  }
  TS_RETURN_IF_ERROR(image.verify_weights(views, &device.workers()));
  return out;
}

}  // namespace

StatusOr<LoadedModel> load_model(const Image& image, size_t index, Device& device) {
  const ImageHeader& h = image.info().header;
  TS_RETURN_IF_ERROR(check_target(h.target, device.descriptor()));
  LoadedModel out;
  TS_ASSIGN_OR_RETURN(ImageModel m, image.model(index));
  const std::string_view here = kernel_isa_name(kernel_isa());
  if (h.kernel_isa != here && m.prepared.empty())
    out.notes.push_back(
        fmt::format("the image was compiled with {} kernels, this CPU runs {}: kernels re-selected "
                    "for it at load",
                    h.kernel_isa, here));
  std::vector<runtime::PreparedLayer> prepared;
  if (!m.prepared.empty()) {
    TS_ASSIGN_OR_RETURN(prepared, map_prepared(image, m, device));
  }
  TS_RETURN_IF_ERROR(image.verify_weights({}, &device.workers()));  // (done by map_prepared where it maps)
  TS_ASSIGN_OR_RETURN(out.model,
                      runtime::CompiledModel::compile(std::move(m.graph), device, m.options, std::move(prepared)));
  out.model->set_pass_reports(std::move(m.report.passes));
  out.tail = std::move(m.tail);
  return out;
}

}  // namespace tessera::image
