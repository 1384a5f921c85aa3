// Loading an image's model onto a device: the target check, then the
// compiler's planning and lowering of the stored graph (no passes: they ran
// when the image was compiled).
#include <fmt/format.h>

#include "tessera/base/cpu_features.h"
#include "tessera/device/device.h"
#include "tessera/image/image.h"

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

}  // namespace

StatusOr<LoadedModel> load_model(const Image& image, size_t index, Device& device) {
  const ImageHeader& h = image.info().header;
  TS_RETURN_IF_ERROR(check_target(h.target, device.descriptor()));
  LoadedModel out;
  const std::string_view here = kernel_isa_name(kernel_isa());
  if (h.kernel_isa != here)
    out.notes.push_back(fmt::format("the image was compiled with {} kernels, this CPU runs {}: kernels re-selected "
                                    "for it at load",
                                    h.kernel_isa, here));
  TS_ASSIGN_OR_RETURN(ImageModel m, image.model(index));
  TS_ASSIGN_OR_RETURN(out.model, runtime::CompiledModel::compile(std::move(m.graph), device, m.options));
  out.model->set_pass_reports(std::move(m.report.passes));
  return out;
}

}  // namespace tessera::image
