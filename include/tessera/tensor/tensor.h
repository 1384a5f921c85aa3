// Tensor: a TensorSpec plus storage on the host or on a device, and the
// transfers between them.
//
// Copies of a Tensor share storage (like the original's Python objects): a
// device buffer is freed when the last copy goes, or at deallocate().
//
// Transfers run on a command queue in order with that queue's other work.
// copy_host_to_device_tensor keeps the host storage alive until the write
// has run. A non-blocking read's host tensor is valid only after
// synchronize_device or an event recorded after it.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "tessera/base/status.h"
#include "tessera/device/device.h"
#include "tessera/tensor/tensor_spec.h"

namespace tessera {

class Tensor {
 public:
  Tensor() = default;

  const TensorSpec& spec() const { return spec_; }
  const Shape& shape() const { return spec_.shape; }
  DataType dtype() const { return spec_.dtype; }
  Layout layout() const { return spec_.layout; }
  const MemoryConfig& memory_config() const { return spec_.memory_config; }
  StorageType storage_type() const { return buffer_ ? StorageType::DEVICE : StorageType::HOST; }
  bool is_on_device() const { return buffer_ != nullptr; }
  // Host tensors are always allocated; device tensors until deallocated.
  bool is_allocated() const { return buffer_ ? buffer_->is_allocated() : host_ != nullptr; }
  Device* device() const { return buffer_ ? &buffer_->device() : nullptr; }
  const std::shared_ptr<Buffer>& buffer() const { return buffer_; }
  // FAILED_PRECONDITION for host or deallocated tensors.
  StatusOr<uint64_t> buffer_address() const;

  // Host storage (nullptr for device tensors).
  std::byte* host_data() const { return host_.get(); }

  // A tensor of `shape` sharing this tensor's storage, when the bytes need not
  // move: ROW_MAJOR with the same volume, and either the same last dim (the
  // 2D view and its pages are unchanged) or rows packed densely on both
  // sides (interleaved in a one-bank region, every row a multiple of the
  // alignment, or host storage). FAILED_PRECONDITION otherwise; reshape()
  // then copies.
  StatusOr<Tensor> view(const Shape& shape) const;

  // Items [first, first + count) of dim 0 (images of a batch), sharing this
  // tensor's storage: ROW_MAJOR and not sharded, and on a device the item
  // `first` must start a round of the region's banks (always so with one
  // bank, as on the cpu device). FAILED_PRECONDITION otherwise, OUT_OF_RANGE
  // past dim 0. Writes through the view land in this tensor.
  StatusOr<Tensor> batch_view(uint32_t first, uint32_t count) const;

  // Reads a device tensor into a new host tensor on `cq_id`.
  StatusOr<Tensor> cpu(bool blocking = true, uint8_t cq_id = 0) const;

  // A host tensor from values in logical row-major order, converted to
  // `dtype` and laid out in `layout` (TILE pads with zeros).
  static StatusOr<Tensor> from_vector(const std::vector<float>& values, const Shape& shape, DataType dtype,
                                      Layout layout = Layout::ROW_MAJOR);
  // Raw integer values, for integer dtypes (no float rounding).
  static StatusOr<Tensor> from_integers(const std::vector<int64_t>& values, const Shape& shape, DataType dtype,
                                        Layout layout = Layout::ROW_MAJOR);
  // Logical row-major values of a host tensor as float.
  StatusOr<std::vector<float>> to_vector() const;

 private:
  friend Tensor allocate_tensor_on_host(const TensorSpec& spec);
  friend StatusOr<Tensor> allocate_tensor_on_device(const TensorSpec& spec, Device& device);
  friend StatusOr<Tensor> map_file_to_device(const TensorSpec&, std::span<const std::byte>, int, uint64_t, Device&,
                                             uint8_t);
  TensorSpec spec_;
  std::shared_ptr<std::byte[]> host_;
  std::shared_ptr<Buffer> buffer_;
};

// A zero-filled host tensor (its memory config is kept as a target for later
// transfers).
Tensor allocate_tensor_on_host(const TensorSpec& spec);
// An uninitialised device tensor; errors for invalid specs and full regions.
StatusOr<Tensor> allocate_tensor_on_device(const TensorSpec& spec, Device& device);

// Writes `host` into the existing device tensor `dst` on `cq_id`. Shapes,
// dtypes and layouts must match.
Status copy_host_to_device_tensor(const Tensor& host, const Tensor& dst, uint8_t cq_id = 0);
// Reads `src` into the existing host tensor `host` on `cq_id`.
Status copy_device_to_host_tensor(const Tensor& src, const Tensor& host, bool blocking = true, uint8_t cq_id = 0);
// Allocates a device tensor with `memory_config` and writes `host` into it.
StatusOr<Tensor> to_device(const Tensor& host, Device& device, const MemoryConfig& memory_config = DRAM_MEMORY_CONFIG,
                           uint8_t cq_id = 0);

// A DRAM tensor of `spec` holding `bytes` (its storage_bytes), which are
// also the range at `offset` (a multiple of 4096) of the open file `fd`, as
// an image's prepared weights are. A one-row ROW_MAJOR interleaved tensor on
// a device whose DRAM is one bank gets the file's pages mapped in
// (Device::map_file: nothing is copied, and writes never reach the file);
// any other (or fd -1) is allocated and `bytes` written into it on `cq_id`.
// INVALID_ARGUMENT when `bytes` is not the spec's size.
StatusOr<Tensor> map_file_to_device(const TensorSpec& spec, std::span<const std::byte> bytes, int fd, uint64_t offset,
                                    Device& device, uint8_t cq_id = 0);

// Frees a device tensor's buffer. Without force only when no other Tensor
// shares it. No-op for host tensors and already freed tensors.
void deallocate(Tensor& t, bool force = false);

// Host-side conversions used by reference kernels and tests.
StatusOr<Tensor> host_to_layout(const Tensor& host, Layout layout);
StatusOr<Tensor> host_typecast(const Tensor& host, DataType dtype);

}  // namespace tessera
