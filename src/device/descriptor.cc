#include "tessera/device/descriptor.h"

#include <hwloc.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "tessera/base/cpu_features.h"

namespace tessera {

uint32_t CoreRangeSet::num_cores() const {
  uint32_t n = 0;
  for (const auto& r : ranges_) n += r.num_cores();
  return n;
}

bool CoreRangeSet::contains(CoreCoord c) const {
  return std::any_of(ranges_.begin(), ranges_.end(), [&](const CoreRange& r) { return r.contains(c); });
}

CoreRange CoreRangeSet::bounding_box() const {
  if (ranges_.empty()) return {};
  CoreRange box = ranges_[0];
  for (const auto& r : ranges_) {
    box.start.x = std::min(box.start.x, r.start.x);
    box.start.y = std::min(box.start.y, r.start.y);
    box.end.x = std::max(box.end.x, r.end.x);
    box.end.y = std::max(box.end.y, r.end.y);
  }
  return box;
}

std::vector<CoreCoord> CoreRangeSet::cores(bool row_major) const {
  std::vector<CoreCoord> out;
  out.reserve(num_cores());
  for (const auto& r : ranges_) {
    if (row_major) {
      for (uint32_t y = r.start.y; y <= r.end.y; ++y)
        for (uint32_t x = r.start.x; x <= r.end.x; ++x) out.push_back({x, y});
    } else {
      for (uint32_t x = r.start.x; x <= r.end.x; ++x)
        for (uint32_t y = r.start.y; y <= r.end.y; ++y) out.push_back({x, y});
    }
  }
  return out;
}

Status CoreRangeSet::validate() const {
  if (ranges_.empty()) return invalid_argument_error("CoreRangeSet: expected at least one core range, found none");
  for (size_t i = 0; i < ranges_.size(); ++i) {
    const auto& r = ranges_[i];
    if (r.start.x > r.end.x || r.start.y > r.end.y)
      return invalid_argument_error("CoreRangeSet: range {} has start after end", r.to_string());
    for (size_t j = 0; j < i; ++j)
      if (ranges_[j].intersects(r))
        return invalid_argument_error("CoreRangeSet: ranges {} and {} overlap", ranges_[j].to_string(), r.to_string());
  }
  return ok_status();
}

std::string CoreRangeSet::to_string() const {
  std::string s = "{";
  for (size_t i = 0; i < ranges_.size(); ++i) s += (i ? "," : "") + ranges_[i].to_string();
  return s + "}";
}

StatusOr<CoreRangeSet> num_cores_to_corerangeset(uint32_t num_cores, CoreCoord grid, bool row_wise) {
  if (num_cores == 0 || num_cores > grid.x * grid.y)
    return invalid_argument_error("num_cores_to_corerangeset: expected 1..{} cores for a {}x{} grid, got {}",
                                  grid.x * grid.y, grid.x, grid.y, num_cores);
  const uint32_t line = row_wise ? grid.x : grid.y;  // cores per full row (column)
  const uint32_t full = num_cores / line, rest = num_cores % line;
  auto at = [&](uint32_t along, uint32_t across) { return row_wise ? CoreCoord{along, across} : CoreCoord{across, along}; };
  std::vector<CoreRange> ranges;
  if (full > 0) ranges.emplace_back(at(0, 0), at(line - 1, full - 1));
  if (rest > 0) ranges.emplace_back(at(0, full), at(rest - 1, full));
  return CoreRangeSet(std::move(ranges));
}

bool DeviceDescriptor::is_usable(CoreCoord c) const {
  return c.x < grid.x && c.y < grid.y && std::find(disabled_cores.begin(), disabled_cores.end(), c) == disabled_cores.end();
}

CoreCoord DeviceDescriptor::compute_grid() const {
  CoreCoord best{0, 0};
  uint32_t height = grid.y;  // rows [0, height) usable in every column so far
  for (uint32_t x = 0; x < grid.x; ++x) {
    uint32_t h = 0;
    while (h < height && is_usable({x, h})) ++h;
    height = h;
    if (uint64_t{x + 1} * height > uint64_t{best.x} * best.y) best = {x + 1, height};
  }
  return best;
}

std::string DeviceDescriptor::to_string() const {
  const std::string shared = shared_cache_size ? fmt::format(", {} MiB shared cache", shared_cache_size >> 20) : "";
  return fmt::format("{}: {}x{} cores, {} B L1 per core{}, {} DRAM bank(s) of {} MiB, host cores {}, isa [{}]{}", name,
                     grid.x, grid.y, l1_size_per_core, shared, num_dram_banks, dram_bank_size >> 20, host_cores, isa,
                     emulated ? " (emulated)" : "");
}

StatusOr<uint64_t> parse_l1_size(std::string_view text) {
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < 4096 || v > (uint64_t{1} << 32))
    return invalid_argument_error("cpu descriptor: TESSERA_CPU_L1_SIZE must be a byte count in 4096..{}, found '{}'",
                                  uint64_t{1} << 32, text);
  return v;
}

const std::vector<int>& physical_core_cpus() {
  static const std::vector<int> cpus = [] {
    std::vector<int> v;
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) != 0) return v;
    if (hwloc_topology_load(topo) == 0) {
      // The topology holds only the CPUs this process is allowed (hwloc's
      // default), so a restricted process (taskset, cgroups) pins within them.
      const int cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
      for (int i = 0; i < cores; ++i) {
        hwloc_obj_t core = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, static_cast<unsigned>(i));
        if (hwloc_obj_t pu = hwloc_get_obj_inside_cpuset_by_type(topo, core->cpuset, HWLOC_OBJ_PU, 0))
          v.push_back(static_cast<int>(pu->os_index));
      }
    }
    hwloc_topology_destroy(topo);
    return v;
  }();
  return cpus;
}

StatusOr<DeviceDescriptor> native_cpu_descriptor() {
  static const StatusOr<DeviceDescriptor> cached = []() -> StatusOr<DeviceDescriptor> {
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) != 0 || hwloc_topology_load(topo) != 0)
      return internal_error("cpu descriptor: hwloc could not read the machine topology");
    DeviceDescriptor d;
    d.name = "cpu";
    int cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
    if (cores <= 0) cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    // L1 of a logical core = the private cache its working set should stay in:
    // the L2 when there is one, else the L1 data cache, else 1 MiB.
    uint64_t l1 = 0;
    for (hwloc_obj_type_t t : {HWLOC_OBJ_L2CACHE, HWLOC_OBJ_L1CACHE}) {
      hwloc_obj_t o = hwloc_get_obj_by_type(topo, t, 0);
      if (o && o->attr && o->attr->cache.size) {
        l1 = o->attr->cache.size;
        break;
      }
    }
    // The shared cache: the first L3 (all cores of this VM share one), at
    // most kSharedCachePerCore per core that sees it. A VM reports its host's
    // whole L3 while other tenants' cores fill most of it. On a 2-vCPU Xeon VM
    // whose L3 reads 300 MiB, one core read 24 GB/s from a 32 MiB buffer and
    // 10-13 GB/s, DRAM's rate, from 64 MiB and more; a two-thread copy
    // with plain stores held its cache speed to a 48 MiB footprint, kept up
    // with non-temporal stores at 78 MB (reused output) and fell 1.5-2x
    // behind them at 157 MB. Zen 5's 32 MiB L3 over 2 vCPUs is under the cap.
    constexpr uint64_t kSharedCachePerCore = uint64_t{48} << 20;
    uint64_t shared = 0;
    if (hwloc_obj_t o = hwloc_get_obj_by_type(topo, HWLOC_OBJ_L3CACHE, 0); o && o->attr) {
      const int sharing = o->cpuset ? hwloc_get_nbobjs_inside_cpuset_by_type(topo, o->cpuset, HWLOC_OBJ_CORE) : cores;
      shared = std::min<uint64_t>(o->attr->cache.size, kSharedCachePerCore * static_cast<uint64_t>(std::max(1, sharing)));
    }
    int numa = std::max(1, hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE));
    hwloc_topology_destroy(topo);
    d.grid = {static_cast<uint32_t>(cores), 1};
    d.l1_size_per_core = l1 ? l1 : (1u << 20);
    d.shared_cache_size = shared;
    if (const char* env = std::getenv("TESSERA_CPU_L1_SIZE")) {
      TS_ASSIGN_OR_RETURN(d.l1_size_per_core, parse_l1_size(env));
    }
    d.num_dram_banks = static_cast<uint32_t>(numa);
    // DRAM: half of physical memory, at most 8 GiB, reserved lazily.
    uint64_t phys = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGE_SIZE));
    uint64_t dram = std::min<uint64_t>(phys / 2, uint64_t{8} << 30);
    d.dram_bank_size = dram / d.num_dram_banks / 4096 * 4096;
    d.l1_alignment = 64;
    d.dram_alignment = 64;
    d.dram_page_alignment = 1;
    d.isa = cpu_features().to_string();
    d.host_cores = static_cast<uint32_t>(cores);
    return d;
  }();
  return cached;
}

DeviceDescriptor wormhole_b0_descriptor() {
  DeviceDescriptor d;
  d.name = "wormhole_b0";
  d.grid = {8, 8};
  d.l1_size_per_core = 1499136;
  d.num_dram_banks = 12;
  d.dram_bank_size = uint64_t{1} << 30;
  d.l1_alignment = 16;
  d.dram_alignment = 32;
  d.isa = cpu_features().to_string();
  d.host_cores = std::max(1u, std::thread::hardware_concurrency());
  d.emulated = true;
  return d;
}

namespace {

// An emulated device of another shape, from a JSON file (nlohmann-json):
//   {"name": "wormhole_4x4", "grid": [4, 4], "l1_size_per_core": 1499136,
//    "num_dram_banks": 12, "dram_bank_size": 1073741824,
//    "l1_alignment": 16, "dram_alignment": 32, "disabled_cores": [[0, 3]]}
// The last three are optional (wormhole_b0's values, no disabled cores).
StatusOr<DeviceDescriptor> descriptor_from_json(const std::string& path) {
  using nlohmann::json;
  std::ifstream f(path);
  if (!f) return not_found_error("cannot read the device descriptor '{}'", path);
  const json j = json::parse(f, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return invalid_argument_error("device descriptor '{}': expected a JSON object", path);
  static const char* const kKeys[] = {"name",         "grid",           "l1_size_per_core", "num_dram_banks",
                                      "dram_bank_size", "l1_alignment", "dram_alignment",   "disabled_cores"};
  for (const auto& [key, value] : j.items())
    if (std::find_if(std::begin(kKeys), std::end(kKeys), [&](const char* k) { return key == k; }) == std::end(kKeys))
      return invalid_argument_error("device descriptor '{}': unknown key '{}' (expected: name, grid, "
                                    "l1_size_per_core, num_dram_banks, dram_bank_size, l1_alignment, "
                                    "dram_alignment, disabled_cores)",
                                    path, key);
  DeviceDescriptor d = wormhole_b0_descriptor();
  auto number = [&](const char* key, uint64_t lo, uint64_t hi, bool required, auto& out) -> Status {
    if (!j.contains(key)) {
      return required ? invalid_argument_error("device descriptor '{}': '{}' is missing", path, key) : ok_status();
    }
    const json& v = j.at(key);
    if (!v.is_number_unsigned() || v.get<uint64_t>() < lo || v.get<uint64_t>() > hi)
      return invalid_argument_error("device descriptor '{}': '{}' must be an integer in {}..{}, got {}", path, key, lo,
                                    hi, v.dump());
    out = static_cast<std::remove_reference_t<decltype(out)>>(v.get<uint64_t>());
    return ok_status();
  };
  if (!j.contains("name") || !j.at("name").is_string() || j.at("name").get<std::string>().empty())
    return invalid_argument_error("device descriptor '{}': 'name' must be a non-empty string", path);
  d.name = j.at("name").get<std::string>();
  if (d.name == "cpu") return invalid_argument_error("device descriptor '{}': 'cpu' is this machine's name", path);
  const json* grid = j.contains("grid") ? &j.at("grid") : nullptr;
  if (!grid || !grid->is_array() || grid->size() != 2 || !(*grid)[0].is_number_unsigned() ||
      !(*grid)[1].is_number_unsigned() || (*grid)[0].get<uint64_t>() - 1 >= 64 || (*grid)[1].get<uint64_t>() - 1 >= 64)
    return invalid_argument_error("device descriptor '{}': 'grid' must be [x, y] with each in 1..64", path);
  d.grid = {static_cast<uint32_t>((*grid)[0].get<uint64_t>()), static_cast<uint32_t>((*grid)[1].get<uint64_t>())};
  TS_RETURN_IF_ERROR(number("l1_size_per_core", 4096, uint64_t{1} << 32, true, d.l1_size_per_core));
  TS_RETURN_IF_ERROR(number("num_dram_banks", 1, 64, true, d.num_dram_banks));
  TS_RETURN_IF_ERROR(number("dram_bank_size", uint64_t{1} << 20, uint64_t{1} << 36, true, d.dram_bank_size));
  TS_RETURN_IF_ERROR(number("l1_alignment", 1, 4096, false, d.l1_alignment));
  TS_RETURN_IF_ERROR(number("dram_alignment", 1, 4096, false, d.dram_alignment));
  for (uint32_t a : {d.l1_alignment, d.dram_alignment})
    if (a & (a - 1)) return invalid_argument_error("device descriptor '{}': alignments must be powers of two", path);
  if (j.contains("disabled_cores")) {
    const json& cores = j.at("disabled_cores");
    if (!cores.is_array()) return invalid_argument_error("device descriptor '{}': 'disabled_cores' must be a list", path);
    for (const json& c : cores) {
      if (!c.is_array() || c.size() != 2 || !c[0].is_number_unsigned() || !c[1].is_number_unsigned() ||
          c[0].get<uint64_t>() >= d.grid.x || c[1].get<uint64_t>() >= d.grid.y)
        return invalid_argument_error("device descriptor '{}': disabled core {} is not [x, y] inside the {}x{} grid",
                                      path, c.dump(), d.grid.x, d.grid.y);
      d.disabled_cores.push_back({static_cast<uint32_t>(c[0].get<uint64_t>()), static_cast<uint32_t>(c[1].get<uint64_t>())});
    }
    if (d.disabled_cores.size() >= d.num_cores())
      return invalid_argument_error("device descriptor '{}': every core of the grid is disabled", path);
  }
  return d;
}

}  // namespace

StatusOr<DeviceDescriptor> find_device_descriptor(std::string_view name) {
  if (name == "cpu") return native_cpu_descriptor();
  if (name == "wormhole_b0") return wormhole_b0_descriptor();
  if (name.ends_with(".json")) return descriptor_from_json(std::string(name));
  return invalid_argument_error("unknown device descriptor '{}': expected 'cpu', 'wormhole_b0' or a JSON file "
                                "(DESCRIPTOR.json)",
                                name);
}

}  // namespace tessera
