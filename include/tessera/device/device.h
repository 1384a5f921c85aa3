// Device: open_device / close_device, memory regions, command queues, events
// and traces, with the semantics of the original runtime on the CPU.
//
// Usage:
//   TS_ASSIGN_OR_RETURN(auto device, open_device({.l1_small_size = 16384,
//       .trace_region_size = 1 << 20, .num_command_queues = 2}));
//   ... ops and transfers enqueue work on cq 0 or 1 ...
//   TS_ASSIGN_OR_RETURN(Event e, record_event(*device, 1));
//   TS_RETURN_IF_ERROR(wait_for_event(0, e));     // cq 0 waits for cq 1's work so far
//   TS_RETURN_IF_ERROR(synchronize_device(*device));
//   TS_RETURN_IF_ERROR(close_device(*device));
//
// Command queues (CUDA: streams). Each queue is an in-order executor thread;
// the two queues of a device run concurrently. A program launch runs on the
// device's worker threads. Host calls that enqueue return at once unless they
// say they block.
//
// Errors. A command that fails inside a queue poisons the queue: later
// commands on it are skipped, events recorded after it carry its status, a
// queue that waits on such an event is poisoned too, and synchronize_device /
// event_synchronize / blocking reads return the first error. The error is
// sticky until the device is closed. Nothing waits forever on a failure, and
// close_device drains both queues before joining their threads.
//
// Traces (CUDA: graphs). Between begin_trace_capture and end_trace_capture,
// program launches on the capturing queue are recorded, not run, with their
// compiled program and the fixed buffer addresses of their arguments. Writes,
// reads, event records and event waits on that queue are refused, and so is a
// launch whose program is not yet in the program cache (run the op once
// first). end_trace_capture copies the trace into the TRACE region and fails
// if it does not fit. execute_trace replays the launches with no allocation,
// no validation and no kernel selection.
//
// NOTE: unlike the original, where a buffer allocated after capture may land
// on a captured intermediate and be overwritten by every replay, Tessera keeps
// every address range a capture allocated reserved until release_trace:
// intermediates freed during capture stay reserved, and freeing a captured
// output only takes effect when the trace is released. Buffers allocated
// before capture (the trace's inputs) are the caller's to keep in place.
//
// Thread-safety: all functions may be called from any thread; a single queue
// keeps the order in which its commands were enqueued.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "tessera/base/status.h"
#include "tessera/base/thread_pool.h"
#include "tessera/device/buffer.h"
#include "tessera/device/descriptor.h"
#include "tessera/device/program.h"

namespace tessera {

struct DeviceParams {
  int device_id = 0;
  std::string descriptor = "cpu";   // "cpu" (this machine) or "wormhole_b0"
  uint64_t l1_small_size = 0;       // bytes per core reserved as L1_SMALL
  uint64_t trace_region_size = 0;   // bytes per DRAM bank reserved as TRACE
  int num_command_queues = 1;       // 1 or 2
  int worker_threads = 0;           // 0: one per physical core
  // Pin the command-queue threads to the first physical core and pool worker
  // i to core i (modulo the cores; see tessera/base/affinity.h for why).
  // Off, or on a single core, the OS places them.
  bool pin_threads = true;
};

using TraceId = uint32_t;

// An event: "everything enqueued on queue `cq_id` before the record". Cheap to
// copy; valid after its device closes (it then reads as complete).
struct Event {
  std::shared_ptr<Device> device;
  uint8_t cq_id = 0;
  uint64_t sequence = 0;  // the queue's command count at the record
};

// Statistics of one memory region, per bank.
struct MemoryRegionStats {
  BufferType type;
  uint32_t num_banks = 0;
  uint64_t bank_size = 0;        // bytes of the region in each bank
  uint64_t allocated_bytes = 0;
  uint64_t free_bytes = 0;
  uint64_t largest_free_block = 0;
  size_t num_buffers = 0;
};

class CommandQueue;
struct TraceRecord;

class Device : public std::enable_shared_from_this<Device> {
 public:
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  int id() const { return params_.device_id; }
  const DeviceDescriptor& descriptor() const { return desc_; }
  const DeviceParams& params() const { return params_; }
  int num_command_queues() const { return params_.num_command_queues; }
  bool is_open() const;

  // Allocates `size_per_bank` bytes at one address in every bank of `type`.
  // RESOURCE_EXHAUSTED names the request, the region and what is free.
  StatusOr<std::shared_ptr<Buffer>> allocate_buffer(BufferType type, uint64_t size_per_bank,
                                                    std::string_view what = "");
  // A DRAM buffer of `bytes` per bank whose memory is the file `fd`'s pages
  // from `offset` (a multiple of 4096), mapped in copy-on-write instead of
  // copied: nothing is read until touched, and writes to the buffer stay in
  // memory, never reaching the file. When the buffer is freed its range is
  // plain device memory again. UNIMPLEMENTED where the region interleaves
  // pages over several banks (an emulated device: allocate and write instead),
  // INVALID_ARGUMENT for an unaligned offset, the allocation's errors, and
  // the system's error when the file cannot be mapped there.
  StatusOr<std::shared_ptr<Buffer>> map_file(int fd, uint64_t offset, uint64_t bytes, std::string_view what = "");
  // Fills in the page tables of these buffers' memory on the worker threads
  // (file pages map read-only, nothing is copied), so that the first kernels
  // to read them take no page faults: what a load does after map_file.
  void prefault(std::span<const std::shared_ptr<Buffer>> buffers);
  MemoryRegionStats memory_stats(BufferType type) const;
  // Page alignment of tensors in `type` (row and tile pages start this many
  // bytes apart at least; the descriptor's dram_page_alignment for DRAM).
  uint32_t alignment(BufferType type) const;
  // Counts allocate_buffer calls since open (tests use it to prove that a
  // replay allocates nothing).
  uint64_t allocation_count() const;
  // Test hook: the `nth` allocate_buffer call from now on (1: the next one)
  // fails with RESOURCE_EXHAUSTED, as a full region would; 0 disarms it.
  // Tests use it to prove every caller turns a failed allocation into a
  // clear error and leaves the device usable.
  void fail_allocation(uint64_t nth);
  // Host pointer to `address` in `bank` of region `type`; no checks.
  std::byte* host_address(BufferType type, uint32_t bank, uint64_t address) const;

  ThreadPool& workers() const { return *workers_; }
  ProgramCache& program_cache() { return program_cache_; }

  // Launches `program` on queue `cq_id` with `args` (copied), or records it
  // when that queue is capturing a trace.
  Status enqueue_program(uint8_t cq_id, const Program& program, const void* args, size_t args_size);
  // Runs `fn` on queue `cq_id` in order; `what` ("write", "read") names it in
  // errors, and such commands are refused during capture. With blocking,
  // returns fn's status once it ran.
  Status enqueue_host_command(uint8_t cq_id, std::string_view what, std::function<Status()> fn, bool blocking);
  // Whether a program for launch on `cq_id` may be compiled now (false while
  // that queue captures a trace).
  bool may_compile_programs(uint8_t cq_id) const;

  struct Impl;  // internal

 private:
  friend StatusOr<std::shared_ptr<Device>> open_device(const DeviceParams&);
  friend Status close_device(Device&);
  friend class Buffer;
  friend StatusOr<Event> record_event(Device&, uint8_t);
  friend Status wait_for_event(uint8_t, const Event&);
  friend Status event_synchronize(const Event&);
  friend Status synchronize_device(Device&, std::optional<uint8_t>);
  friend StatusOr<TraceId> begin_trace_capture(Device&, uint8_t);
  friend Status end_trace_capture(Device&, TraceId, uint8_t);
  friend Status execute_trace(Device&, TraceId, uint8_t, bool);
  friend Status release_trace(Device&, TraceId);
  friend StatusOr<struct TraceInfo> trace_info(Device&, TraceId);
  friend struct ProfileSink& profile_sink(Device&);

  Device(DeviceDescriptor desc, DeviceParams params);
  Status check_cq(uint8_t cq_id, std::string_view what) const;
  void free_buffer(BufferType type, uint64_t address);

  DeviceDescriptor desc_;
  DeviceParams params_;
  std::unique_ptr<ThreadPool> workers_;
  ProgramCache program_cache_;
  std::unique_ptr<Impl> impl_;
};

// Opens a device. INVALID_ARGUMENT for num_command_queues outside 1..2, an
// unknown descriptor, or L1_SMALL / TRACE regions larger than their memory.
StatusOr<std::shared_ptr<Device>> open_device(const DeviceParams& params = {});
// Drains and stops the queues and frees traces; returns the first queue error
// if any. Buffers still referenced stay valid host memory until released.
Status close_device(Device& device);

StatusOr<Event> record_event(Device& device, uint8_t cq_id);
// Enqueues a barrier on `cq_id` of the event's device: later commands on
// that queue start after the event completes.
Status wait_for_event(uint8_t cq_id, const Event& event);
// Blocks the host until the event completes; returns its queue's error, if
// that error came before the event.
Status event_synchronize(const Event& event);
// Blocks until every queue (or queue `cq_id`) has run everything enqueued.
Status synchronize_device(Device& device, std::optional<uint8_t> cq_id = std::nullopt);

StatusOr<TraceId> begin_trace_capture(Device& device, uint8_t cq_id = 0);
Status end_trace_capture(Device& device, TraceId trace_id, uint8_t cq_id = 0);
Status execute_trace(Device& device, TraceId trace_id, uint8_t cq_id = 0, bool blocking = true);
Status release_trace(Device& device, TraceId trace_id);

// Size in bytes a trace occupies in the TRACE region, and its launch count.
struct TraceInfo {
  uint64_t size_bytes = 0;
  uint32_t num_launches = 0;
  uint64_t address = 0;
};
StatusOr<TraceInfo> trace_info(Device& device, TraceId trace_id);

}  // namespace tessera
