#include "tessera/device/device.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <thread>

#include "command_queue.h"
#include "tessera/base/aligned.h"
#include "tessera/device/allocator.h"

namespace tessera {

std::string_view buffer_type_name(BufferType t) {
  switch (t) {
    case BufferType::DRAM: return "DRAM";
    case BufferType::L1: return "L1";
    case BufferType::SYSTEM_MEMORY: return "SYSTEM_MEMORY";
    case BufferType::L1_SMALL: return "L1_SMALL";
    case BufferType::TRACE: return "TRACE";
  }
  return "?";
}

namespace {

// Makes [p, p + len) plain device memory again, in place (MAP_FIXED: no
// moment without a mapping), as Mapping::map reserves it.
void remap_anonymous(std::byte* p, uint64_t len) {
  void* r = mmap(p, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  if (r != MAP_FAILED) madvise(r, len, MADV_HUGEPAGE);
}

// Anonymous mapping reserved lazily: pages are backed on first touch.
struct Mapping {
  std::byte* data = nullptr;
  size_t size = 0;
  Mapping() = default;
  Mapping(const Mapping&) = delete;
  ~Mapping() {
    if (data) munmap(data, size);
  }
  Status map(size_t bytes, bool huge) {
    size = align_up(bytes ? bytes : 1, 4096);
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      size = 0;
      return resource_exhausted_error("could not reserve {} B of host memory for device memory", bytes);
    }
    data = static_cast<std::byte*>(p);
    if (huge) madvise(p, size, MADV_HUGEPAGE);
    return ok_status();
  }
};

struct Region {
  RangeAllocator alloc;
  std::byte* host = nullptr;  // bank 0, address 0
  uint64_t bank_stride = 0;
  uint32_t num_banks = 0;
};

struct Capture {
  TraceId id = 0;
  std::vector<std::byte> blob;
  uint32_t launches = 0;
  Status failure;
};

using BufferKey = std::pair<BufferType, uint64_t>;  // region, address

// A buffer allocated while a trace was being captured.
struct CaptureAlloc {
  BufferKey key;
  uint64_t size;
  bool freed;
};

// A live buffer a trace writes at a fixed address: its owner's free is
// deferred until every trace holding it is released.
struct Hold {
  int traces = 0;
  bool owner_freed = false;
};

// What a trace keeps reserved: free ranges carved out at capture end, and
// holds on buffers that were still live then.
struct TraceMemory {
  std::vector<std::pair<BufferType, std::pair<uint64_t, uint64_t>>> pieces;
  std::vector<BufferKey> held;
};

// A command that raced with close_device and was not enqueued.
Status closed_error(std::string_view what, int device_id) {
  return failed_precondition_error("{}: device {} was closed before the command could be enqueued", what, device_id);
}

}  // namespace

struct Device::Impl {
  Mapping dram, l1;
  mutable std::mutex mem_mu;
  Region regions[5];
  uint64_t allocations = 0;
  uint64_t fail_at = 0;  // fail_allocation: the allocation count that fails (0: none)
  std::vector<std::unique_ptr<CommandQueue>> queues;
  ProfileSink profile;  // shared by the queues; see profiler.h
  mutable std::mutex state_mu;  // open flag, captures, traces
  bool open = true;
  std::optional<Capture> capture[2];
  std::map<TraceId, TraceRecord> traces;
  // Guarded by mem_mu: allocations of captures in progress, holds, and the
  // memory each trace keeps reserved.
  std::map<TraceId, std::vector<CaptureAlloc>> capture_allocs;
  std::map<BufferKey, Hold> holds;
  std::map<TraceId, TraceMemory> trace_memory;

  // Buffers whose pages map_file replaced with a file's: their host range,
  // made anonymous memory again when the buffer is freed.
  std::map<BufferKey, std::pair<std::byte*, uint64_t>> file_maps;
  void free_range(BufferType type, uint64_t address);  // mem_mu held
  void reserve_for_trace(TraceId id);  // mem_mu held
  void release_trace_memory(TraceId id);  // mem_mu held
  TraceId next_trace = 0;
};

Device::Device(DeviceDescriptor desc, DeviceParams params)
    : desc_(std::move(desc)), params_(std::move(params)), impl_(std::make_unique<Impl>()) {}

Device::~Device() {
  if (is_open()) (void)close_device(*this);
}

bool Device::is_open() const {
  std::lock_guard<std::mutex> lock(impl_->state_mu);
  return impl_->open;
}

StatusOr<std::shared_ptr<Device>> open_device(const DeviceParams& params) {
  if (params.num_command_queues < 1 || params.num_command_queues > 2)
    return invalid_argument_error("open_device: num_command_queues must be 1 or 2, found {}",
                                  params.num_command_queues);
  if (params.worker_threads < 0)
    return invalid_argument_error("open_device: worker_threads must be >= 0, found {}", params.worker_threads);
  TS_ASSIGN_OR_RETURN(DeviceDescriptor desc, find_device_descriptor(params.descriptor));
  if (params.l1_small_size >= desc.l1_size_per_core)
    return invalid_argument_error("open_device: l1_small_size {} B does not fit in the {} B of L1 per core of {}",
                                  params.l1_small_size, desc.l1_size_per_core, desc.name);
  if (params.trace_region_size >= desc.dram_bank_size)
    return invalid_argument_error("open_device: trace_region_size {} B does not fit in a {} B DRAM bank of {}",
                                  params.trace_region_size, desc.dram_bank_size, desc.name);
  std::shared_ptr<Device> dev(new Device(desc, params));
  Device::Impl& im = *dev->impl_;
  TS_RETURN_IF_ERROR(im.dram.map(desc.dram_bank_size * desc.num_dram_banks, true));
  TS_RETURN_IF_ERROR(im.l1.map(desc.l1_size_per_core * desc.num_cores(), false));

  const uint64_t l1_small = align_up(params.l1_small_size, desc.l1_alignment);
  const uint64_t trace = align_up(params.trace_region_size, desc.dram_alignment);
  const uint64_t dram_main = desc.dram_bank_size - trace, l1_main = desc.l1_size_per_core - l1_small;
  auto set = [&](BufferType t, uint64_t base, uint64_t size, uint32_t align, std::byte* host, uint64_t stride,
                 uint32_t banks) {
    Region& r = im.regions[static_cast<int>(t)];
    r.alloc = RangeAllocator(base, size, align);
    r.host = host;
    r.bank_stride = stride;
    r.num_banks = banks;
  };
  set(BufferType::DRAM, 0, dram_main, desc.dram_alignment, im.dram.data, desc.dram_bank_size, desc.num_dram_banks);
  set(BufferType::TRACE, dram_main, trace, desc.dram_alignment, im.dram.data, desc.dram_bank_size, 1);
  set(BufferType::L1, 0, l1_main, desc.l1_alignment, im.l1.data, desc.l1_size_per_core, desc.num_cores());
  set(BufferType::L1_SMALL, l1_main, l1_small, desc.l1_alignment, im.l1.data, desc.l1_size_per_core,
      desc.num_cores());

  int workers = params.worker_threads ? params.worker_threads : static_cast<int>(desc.host_cores);
  // The queue threads (each the first thread of its launches) on the first
  // core, worker i on core i: no two of a launch's threads share a core.
  const std::vector<int>& cores = physical_core_cpus();
  const bool pin = params.pin_threads && cores.size() >= 2;
  std::vector<int> worker_cpus;
  if (pin)
    for (int i = 1; i < workers; ++i) worker_cpus.push_back(cores[static_cast<size_t>(i) % cores.size()]);
  dev->workers_ = std::make_unique<ThreadPool>(workers, std::move(worker_cpus));
  for (int q = 0; q < params.num_command_queues; ++q)
    im.queues.push_back(std::make_unique<CommandQueue>(static_cast<uint8_t>(q), *dev->workers_, &im.profile,
                                                       pin ? cores[0] : -1));
  return dev;
}

Status close_device(Device& device) {
  Device::Impl& im = *device.impl_;
  {
    std::lock_guard<std::mutex> lock(im.state_mu);
    if (!im.open) return ok_status();
    im.open = false;
  }
  Status first;
  for (auto& q : im.queues) {
    q->stop();
    if (first.ok()) first = q->error();
  }
  std::lock_guard<std::mutex> lock(im.state_mu);
  for (auto& [id, t] : im.traces) device.free_buffer(BufferType::TRACE, t.address);
  im.traces.clear();
  return first;
}

Status Device::check_cq(uint8_t cq_id, std::string_view what) const {
  if (cq_id >= params_.num_command_queues)
    return out_of_range_error("{}: cq_id {} is out of range; device {} was opened with {} command queue(s)", what,
                              cq_id, params_.device_id, params_.num_command_queues);
  if (!impl_->open) return failed_precondition_error("{}: device {} is closed", what, params_.device_id);
  return ok_status();
}

StatusOr<std::shared_ptr<Buffer>> Device::allocate_buffer(BufferType type, uint64_t size_per_bank,
                                                          std::string_view what) {
  if (type == BufferType::SYSTEM_MEMORY)
    return invalid_argument_error("allocate_buffer: SYSTEM_MEMORY is host memory, not a device region");
  if (!is_open()) return failed_precondition_error("allocate_buffer: device {} is closed", params_.device_id);
  std::lock_guard<std::mutex> lock(impl_->mem_mu);
  Region& r = impl_->regions[static_cast<int>(type)];
  ++impl_->allocations;
  if (impl_->fail_at && impl_->allocations == impl_->fail_at) {
    impl_->fail_at = 0;
    return resource_exhausted_error("Out of Memory: allocating {} B per bank of {}{}{} failed (injected by "
                                    "Device::fail_allocation)",
                                    size_per_bank, buffer_type_name(type), what.empty() ? "" : " for ", what);
  }
  std::optional<uint64_t> addr = r.alloc.allocate(size_per_bank);
  if (!addr) {
    return resource_exhausted_error(
        "Out of Memory: Not enough space to allocate {} B {} buffer across {} banks, where each bank needs to store "
        "{} B, but the {} region of a bank is {} B with {} B free (largest free block {} B){}{}",
        size_per_bank * r.num_banks, buffer_type_name(type), r.num_banks, size_per_bank, buffer_type_name(type),
        r.alloc.size(), r.alloc.free_bytes(), r.alloc.largest_free_block(), what.empty() ? "" : "; while allocating ",
        what);
  }
  for (auto& [id, allocs] : impl_->capture_allocs)
    allocs.push_back({{type, *addr}, align_up(size_per_bank ? size_per_bank : 1, r.alloc.alignment()), false});
  return std::make_shared<Buffer>(shared_from_this(), type, *addr, size_per_bank);
}

void Device::free_buffer(BufferType type, uint64_t address) {
  std::lock_guard<std::mutex> lock(impl_->mem_mu);
  const BufferKey key{type, address};
  for (auto& [id, allocs] : impl_->capture_allocs) {
    for (auto it = allocs.rbegin(); it != allocs.rend(); ++it) {
      if (it->key == key && !it->freed) {
        it->freed = true;
        break;
      }
    }
  }
  auto h = impl_->holds.find(key);
  if (h != impl_->holds.end()) {
    h->second.owner_freed = true;  // a trace still writes here: freed at release_trace
    return;
  }
  impl_->free_range(type, address);
}

void Device::Impl::free_range(BufferType type, uint64_t address) {
  if (auto m = file_maps.find({type, address}); m != file_maps.end()) {
    remap_anonymous(m->second.first, m->second.second);
    file_maps.erase(m);
  }
  regions[static_cast<int>(type)].alloc.free(address);
}

void Device::prefault(std::span<const std::shared_ptr<Buffer>> buffers) {
  constexpr uint64_t kPage = 4096, kChunk = uint64_t{1} << 20;
  std::vector<std::pair<std::byte*, uint64_t>> chunks;  // whole pages
  for (const auto& b : buffers)
    for (uint32_t bank = 0; b && bank < impl_->regions[static_cast<int>(b->type())].num_banks; ++bank) {
      std::byte* p = b->bank_data(bank);
      std::byte* lo = reinterpret_cast<std::byte*>(reinterpret_cast<uintptr_t>(p) / kPage * kPage);
      const uint64_t len = align_up(static_cast<uint64_t>(p + b->size_per_bank() - lo), kPage);
      for (uint64_t at = 0; at < len; at += kChunk) chunks.emplace_back(lo + at, std::min(kChunk, len - at));
    }
  auto fill = [&](uint32_t begin, uint32_t end) {
    for (uint32_t i = begin; i < end; ++i)
      if (madvise(chunks[i].first, chunks[i].second, MADV_POPULATE_READ) != 0)  // before Linux 5.14: touch
        for (uint64_t at = 0; at < chunks[i].second; at += kPage)
          (void)*static_cast<volatile const std::byte*>(chunks[i].first + at);
  };
  workers_->parallel_for(static_cast<uint32_t>(chunks.size()), 1, fill);
}

StatusOr<std::shared_ptr<Buffer>> Device::map_file(int fd, uint64_t offset, uint64_t bytes, std::string_view what) {
  constexpr uint64_t kPage = 4096;
  const Region& r = impl_->regions[static_cast<int>(BufferType::DRAM)];
  if (r.num_banks != 1)
    return unimplemented_error("map_file: {}'s DRAM interleaves pages over {} banks; a file maps into one bank only",
                               desc_.name, r.num_banks);
  if (offset % kPage) return invalid_argument_error("map_file: the file offset {} is not a multiple of {}", offset, kPage);
  // Whole pages at a page boundary inside the allocation.
  const uint64_t len = align_up(bytes ? bytes : 1, kPage);
  TS_ASSIGN_OR_RETURN(std::shared_ptr<Buffer> whole, allocate_buffer(BufferType::DRAM, len + kPage, what));
  std::byte* host = host_address(BufferType::DRAM, 0, whole->address());
  const uint64_t skip = align_up(reinterpret_cast<uintptr_t>(host), kPage) - reinterpret_cast<uintptr_t>(host);
  // Read-only, then writable: a page is copied only if written. The page
  // tables fill on first touch, or all at once with prefault().
  void* p = mmap(host + skip, len, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, static_cast<off_t>(offset));
  if (p != MAP_FAILED && mprotect(p, len, PROT_READ | PROT_WRITE) != 0) p = MAP_FAILED;
  if (p == MAP_FAILED) {
    const int err = errno;
    remap_anonymous(host + skip, len);  // the failed MAP_FIXED may have unmapped the range
    return internal_error("map_file: cannot map {} B of the file at offset {}{}{}: {}", bytes, offset,
                          what.empty() ? "" : " for ", what, std::strerror(err));
  }
  {
    std::lock_guard<std::mutex> lock(impl_->mem_mu);
    impl_->file_maps[{BufferType::DRAM, whole->address()}] = {host + skip, len};
  }
  return Buffer::view(std::move(whole), skip, bytes);
}

// Every address range the capture allocated stays the trace's: buffers still
// live are held (their owner's free waits for release_trace), and the ranges
// of buffers freed during capture are reserved again. Reuse inside the
// capture stays allowed; only allocations after it are kept away.
void Device::Impl::reserve_for_trace(TraceId id) {
  std::vector<CaptureAlloc> allocs = std::move(capture_allocs[id]);
  capture_allocs.erase(id);
  TraceMemory& mem = trace_memory[id];
  std::map<BufferType, std::vector<std::pair<uint64_t, uint64_t>>> ranges;
  for (const CaptureAlloc& a : allocs) {
    if (!a.freed && std::find(mem.held.begin(), mem.held.end(), a.key) == mem.held.end()) {
      ++holds[a.key].traces;
      mem.held.push_back(a.key);
    }
    ranges[a.key.first].emplace_back(a.key.second, a.key.second + a.size);
  }
  for (auto& [type, rs] : ranges) {
    std::sort(rs.begin(), rs.end());
    for (size_t i = 0; i < rs.size();) {
      uint64_t lo = rs[i].first, hi = rs[i].second;
      for (++i; i < rs.size() && rs[i].first <= hi; ++i) hi = std::max(hi, rs[i].second);
      for (auto part : regions[static_cast<int>(type)].alloc.reserve_free_parts(lo, hi - lo))
        mem.pieces.push_back({type, part});
    }
  }
}

void Device::Impl::release_trace_memory(TraceId id) {
  auto it = trace_memory.find(id);
  if (it == trace_memory.end()) return;
  for (const auto& [type, part] : it->second.pieces) regions[static_cast<int>(type)].alloc.free(part.first);
  for (const BufferKey& key : it->second.held) {
    auto h = holds.find(key);
    if (h == holds.end() || --h->second.traces > 0) continue;
    if (h->second.owner_freed) free_range(key.first, key.second);
    holds.erase(h);
  }
  trace_memory.erase(it);
}

MemoryRegionStats Device::memory_stats(BufferType type) const {
  std::lock_guard<std::mutex> lock(impl_->mem_mu);
  const Region& r = impl_->regions[static_cast<int>(type)];
  return {type, r.num_banks, r.alloc.size(), r.alloc.allocated_bytes(), r.alloc.free_bytes(),
          r.alloc.largest_free_block(), r.alloc.num_allocations()};
}

uint32_t Device::alignment(BufferType type) const {
  if (type == BufferType::L1 || type == BufferType::L1_SMALL) return desc_.l1_alignment;
  return desc_.dram_page_alignment ? desc_.dram_page_alignment : desc_.dram_alignment;
}

uint64_t Device::allocation_count() const {
  std::lock_guard<std::mutex> lock(impl_->mem_mu);
  return impl_->allocations;
}

void Device::fail_allocation(uint64_t nth) {
  std::lock_guard<std::mutex> lock(impl_->mem_mu);
  impl_->fail_at = nth ? impl_->allocations + nth : 0;
}

std::byte* Device::host_address(BufferType type, uint32_t bank, uint64_t address) const {
  const Region& r = impl_->regions[static_cast<int>(type)];
  return r.host + bank * r.bank_stride + address;
}

bool Device::may_compile_programs(uint8_t cq_id) const {
  std::lock_guard<std::mutex> lock(impl_->state_mu);
  return cq_id >= 2 || !impl_->capture[cq_id].has_value();
}

Status Device::enqueue_program(uint8_t cq_id, const Program& program, const void* args, size_t args_size) {
  std::unique_lock<std::mutex> lock(impl_->state_mu);
  TS_RETURN_IF_ERROR(check_cq(cq_id, "enqueue_program"));
  if (auto& cap = impl_->capture[cq_id]) {
    const uint32_t record = static_cast<uint32_t>(sizeof(LaunchRecord) + align_up(args_size, 16));
    size_t at = cap->blob.size();
    cap->blob.resize(at + record);
    LaunchRecord hdr{&program, static_cast<uint32_t>(args_size), record};
    std::memcpy(cap->blob.data() + at, &hdr, sizeof hdr);
    std::memcpy(cap->blob.data() + at + sizeof hdr, args, args_size);
    ++cap->launches;
    return ok_status();
  }
  CommandQueue& q = *impl_->queues[cq_id];
  lock.unlock();
  Command cmd;
  cmd.kind = Command::Kind::kProgram;
  cmd.program = &program;
  cmd.args.assign(static_cast<const std::byte*>(args), static_cast<const std::byte*>(args) + args_size);
  if (q.push(std::move(cmd)) == 0) return closed_error("enqueue_program", params_.device_id);
  return ok_status();
}

Status Device::enqueue_host_command(uint8_t cq_id, std::string_view what, std::function<Status()> fn,
                                    bool blocking) {
  std::unique_lock<std::mutex> lock(impl_->state_mu);
  TS_RETURN_IF_ERROR(check_cq(cq_id, what));
  if (impl_->capture[cq_id]) {
    Status s = failed_precondition_error(
        "{}s are not supported during trace capture (cq {} is capturing trace {}); move the {} before "
        "begin_trace_capture or onto the other command queue",
        what, cq_id, impl_->capture[cq_id]->id, what);
    if (impl_->capture[cq_id]->failure.ok()) impl_->capture[cq_id]->failure = s;
    return s;
  }
  CommandQueue& q = *impl_->queues[cq_id];
  lock.unlock();
  Command cmd;
  cmd.kind = Command::Kind::kHost;
  cmd.host = std::move(fn);
  uint64_t seq = q.push(std::move(cmd));
  if (seq == 0) return closed_error(what, params_.device_id);
  if (!blocking) return ok_status();
  q.wait_for(seq);
  return q.status_up_to(seq);
}

StatusOr<Event> record_event(Device& device, uint8_t cq_id) {
  std::lock_guard<std::mutex> lock(device.impl_->state_mu);
  TS_RETURN_IF_ERROR(device.check_cq(cq_id, "record_event"));
  if (device.impl_->capture[cq_id])
    return failed_precondition_error("record_event: events cannot be recorded during trace capture (cq {})", cq_id);
  return Event{device.shared_from_this(), cq_id, device.impl_->queues[cq_id]->enqueued()};
}

Status wait_for_event(uint8_t cq_id, const Event& event) {
  if (!event.device) return invalid_argument_error("wait_for_event: the event was never recorded");
  Device& device = *event.device;
  std::unique_lock<std::mutex> lock(device.impl_->state_mu);
  TS_RETURN_IF_ERROR(device.check_cq(cq_id, "wait_for_event"));
  if (device.impl_->capture[cq_id])
    return failed_precondition_error("wait_for_event: events cannot be waited on during trace capture (cq {})",
                                     cq_id);
  CommandQueue& q = *device.impl_->queues[cq_id];
  Command cmd;
  cmd.kind = Command::Kind::kWaitEvent;
  cmd.wait_queue = device.impl_->queues[event.cq_id].get();
  cmd.wait_sequence = event.sequence;
  lock.unlock();
  if (q.push(std::move(cmd)) == 0) return closed_error("wait_for_event", device.id());
  return ok_status();
}

Status event_synchronize(const Event& event) {
  if (!event.device) return invalid_argument_error("event_synchronize: the event was never recorded");
  CommandQueue& q = *event.device->impl_->queues[event.cq_id];
  q.wait_for(event.sequence);
  return q.status_up_to(event.sequence);
}

Status synchronize_device(Device& device, std::optional<uint8_t> cq_id) {
  if (cq_id && *cq_id >= device.num_command_queues())
    return out_of_range_error("synchronize_device: cq_id {} is out of range; device {} has {} command queue(s)",
                              *cq_id, device.id(), device.num_command_queues());
  Status first;
  for (auto& q : device.impl_->queues) {
    if (cq_id && q->id() != *cq_id) continue;
    q->wait_for(q->enqueued());
    if (first.ok()) first = q->error();
  }
  return first;
}

StatusOr<TraceId> begin_trace_capture(Device& device, uint8_t cq_id) {
  std::lock_guard<std::mutex> lock(device.impl_->state_mu);
  TS_RETURN_IF_ERROR(device.check_cq(cq_id, "begin_trace_capture"));
  auto& cap = device.impl_->capture[cq_id];
  if (cap)
    return failed_precondition_error("begin_trace_capture: cq {} is already capturing trace {}", cq_id, cap->id);
  cap.emplace();
  cap->id = device.impl_->next_trace++;
  std::lock_guard<std::mutex> mlock(device.impl_->mem_mu);
  device.impl_->capture_allocs[cap->id];
  return cap->id;
}

Status end_trace_capture(Device& device, TraceId trace_id, uint8_t cq_id) {
  Device::Impl& im = *device.impl_;
  std::unique_lock<std::mutex> lock(im.state_mu);
  TS_RETURN_IF_ERROR(device.check_cq(cq_id, "end_trace_capture"));
  auto& cap = im.capture[cq_id];
  if (!cap || cap->id != trace_id)
    return failed_precondition_error("end_trace_capture: cq {} is not capturing trace {}", cq_id, trace_id);
  Capture c = std::move(*cap);
  cap.reset();
  auto drop_allocs = [&] {
    std::lock_guard<std::mutex> mlock(im.mem_mu);
    im.capture_allocs.erase(trace_id);
  };
  if (!c.failure.ok()) drop_allocs();
  if (!c.failure.ok())
    return failed_precondition_error("end_trace_capture: trace {} is unusable because a command was refused "
                                     "during its capture: {}",
                                     trace_id, c.failure.message());
  const uint64_t region = im.regions[static_cast<int>(BufferType::TRACE)].alloc.size();
  const uint64_t need = std::max<uint64_t>(c.blob.size(), 1);
  std::optional<uint64_t> addr;
  {
    std::lock_guard<std::mutex> mlock(im.mem_mu);
    ++im.allocations;
    addr = im.regions[static_cast<int>(BufferType::TRACE)].alloc.allocate(need);
  }
  if (!addr) {
    drop_allocs();
    if (need > region)
      return resource_exhausted_error(
          "Creating trace buffers of size {}B on device {}, but only {}B is allocated for trace region; open the "
          "device with trace_region_size >= {}",
          need, device.id(), region, need);
    return resource_exhausted_error("Creating trace buffers of size {}B on device {}, but only {}B of the {}B trace "
                                    "region is free; release unused traces",
                                    need, device.id(), device.memory_stats(BufferType::TRACE).free_bytes, region);
  }
  std::byte* dst = device.host_address(BufferType::TRACE, 0, *addr);
  std::memcpy(dst, c.blob.data(), c.blob.size());
  im.traces[trace_id] = TraceRecord{trace_id, *addr, c.blob.size(), c.launches, dst};
  std::lock_guard<std::mutex> mlock(im.mem_mu);
  im.reserve_for_trace(trace_id);
  return ok_status();
}

Status execute_trace(Device& device, TraceId trace_id, uint8_t cq_id, bool blocking) {
  Device::Impl& im = *device.impl_;
  std::unique_lock<std::mutex> lock(im.state_mu);
  TS_RETURN_IF_ERROR(device.check_cq(cq_id, "execute_trace"));
  if (im.capture[cq_id])
    return failed_precondition_error("execute_trace: cq {} is capturing trace {}; traces cannot be nested", cq_id,
                                     im.capture[cq_id]->id);
  auto it = im.traces.find(trace_id);
  if (it == im.traces.end())
    return not_found_error("execute_trace: trace {} does not exist on device {} (never captured, or released)",
                           trace_id, device.id());
  CommandQueue& q = *im.queues[cq_id];
  Command cmd;
  cmd.kind = Command::Kind::kExecuteTrace;
  cmd.trace = &it->second;
  lock.unlock();
  uint64_t seq = q.push(std::move(cmd));
  if (seq == 0) return closed_error("execute_trace", device.id());
  if (!blocking) return ok_status();
  q.wait_for(seq);
  return q.status_up_to(seq);
}

Status release_trace(Device& device, TraceId trace_id) {
  Device::Impl& im = *device.impl_;
  {
    std::lock_guard<std::mutex> lock(im.state_mu);
    if (!im.traces.count(trace_id))
      return not_found_error("release_trace: trace {} does not exist on device {}", trace_id, device.id());
  }
  // A replay of this trace may still be queued: let it finish first.
  for (auto& q : im.queues) q->wait_for(q->enqueued());
  std::lock_guard<std::mutex> lock(im.state_mu);
  auto it = im.traces.find(trace_id);
  if (it == im.traces.end()) return ok_status();
  device.free_buffer(BufferType::TRACE, it->second.address);
  im.traces.erase(it);
  std::lock_guard<std::mutex> mlock(im.mem_mu);
  im.release_trace_memory(trace_id);
  return ok_status();
}

StatusOr<TraceInfo> trace_info(Device& device, TraceId trace_id) {
  std::lock_guard<std::mutex> lock(device.impl_->state_mu);
  auto it = device.impl_->traces.find(trace_id);
  if (it == device.impl_->traces.end())
    return not_found_error("trace_info: trace {} does not exist on device {}", trace_id, device.id());
  return TraceInfo{it->second.size, it->second.num_launches, it->second.address};
}

Buffer::Buffer(std::shared_ptr<Device> device, BufferType type, uint64_t address, uint64_t size_per_bank)
    : device_(std::move(device)), type_(type), address_(address), size_per_bank_(size_per_bank) {}

Buffer::~Buffer() { deallocate(); }

std::shared_ptr<Buffer> Buffer::view(std::shared_ptr<Buffer> parent, uint64_t offset, uint64_t size_per_bank) {
  if (!parent || offset > parent->size_per_bank_ || size_per_bank > parent->size_per_bank_ - offset) return nullptr;
  auto v = std::make_shared<Buffer>(parent->device_, parent->type_, parent->address_ + offset, size_per_bank);
  v->allocated_ = false;
  v->parent_ = std::move(parent);
  return v;
}

void Buffer::deallocate() {
  if (!allocated_) return;
  allocated_ = false;
  device_->free_buffer(type_, address_);
}

std::byte* Buffer::bank_data(uint32_t bank) const { return device_->host_address(type_, bank, address_); }

ProfileSink& profile_sink(Device& device) { return device.impl_->profile; }

}  // namespace tessera
