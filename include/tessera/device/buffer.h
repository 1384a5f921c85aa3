// BufferType and Buffer: a device allocation in one memory region.
//
// Regions of a device (sizes fixed at open_device):
//   DRAM      every DRAM bank, minus the TRACE region at the top of each bank
//   TRACE     trace buffers (trace_region_size bytes per bank, used in bank 0)
//   L1        every core's L1, minus the L1_SMALL region at its top
//   L1_SMALL  l1_small_size bytes per core
// A Buffer owns `size_per_bank` bytes at `address` in every bank of its
// region (lockstep). It is freed when the last reference goes or at
// deallocate(); the host memory behind it stays mapped while the device
// lives, so a stale address can be wrong but never faults, as on the original.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

namespace tessera {

class Device;

enum class BufferType : uint8_t { DRAM = 0, L1 = 1, SYSTEM_MEMORY = 2, L1_SMALL = 3, TRACE = 4 };
std::string_view buffer_type_name(BufferType t);

class Buffer {
 public:
  Buffer(std::shared_ptr<Device> device, BufferType type, uint64_t address, uint64_t size_per_bank);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  // `size_per_bank` bytes from `offset` bytes into every bank of `parent`;
  // nullptr when that range is not inside the parent.
  static std::shared_ptr<Buffer> view(std::shared_ptr<Buffer> parent, uint64_t offset, uint64_t size_per_bank);

  Device& device() const { return *device_; }
  BufferType type() const { return type_; }
  uint64_t address() const { return address_; }
  uint64_t size_per_bank() const { return size_per_bank_; }
  bool is_allocated() const { return parent_ ? parent_->is_allocated() : allocated_; }
  // Host memory of this buffer in bank `bank` (a DRAM bank or a core index).
  std::byte* bank_data(uint32_t bank) const;
  // Returns the memory to the allocator; later calls, and calls on a view, are no-ops.
  void deallocate();

 private:
  std::shared_ptr<Device> device_;
  BufferType type_;
  uint64_t address_, size_per_bank_;
  bool allocated_ = true;
  std::shared_ptr<Buffer> parent_;  // set for views
};

}  // namespace tessera
