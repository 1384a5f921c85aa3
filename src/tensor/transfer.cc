#include <algorithm>
#include <cstring>

#include "tessera/tensor/access.h"
#include "tessera/tensor/tensor.h"

namespace tessera {

namespace {

Status check_pair(const Tensor& host, const Tensor& dev, std::string_view what) {
  if (host.is_on_device())
    return invalid_argument_error("{}: expected a host tensor, found a tensor on device {}", what,
                                  host.device()->id());
  if (!dev.is_on_device()) return invalid_argument_error("{}: expected a device tensor, found a host tensor", what);
  if (!host.spec().same_data_format(dev.spec()))
    return invalid_argument_error("{}: host tensor {} does not match device tensor {} (shape, dtype and layout must "
                                  "be equal)",
                                  what, host.spec().to_string(), dev.spec().to_string());
  return ok_status();
}

// Copies on the worker pool of the queue's device, in row chunks.
void parallel_copy(Device& device, const TensorAccess& src, const TensorAccess& dst) {
  const uint32_t threads = static_cast<uint32_t>(device.workers().num_threads());
  const uint64_t bytes = uint64_t{src.rows} * src.cols * src.unit_bytes;
  const uint32_t chunks = static_cast<uint32_t>(std::clamp<uint64_t>(bytes >> 18, 1, threads * 4));  // >= 256 KiB
  const uint32_t grain = std::max<uint32_t>(1, (src.rows + chunks - 1) / chunks);
  auto fn = [&](uint32_t b, uint32_t e) { copy_units(src, dst, b, e); };
  device.workers().parallel_for(src.rows, grain, fn);
}

}  // namespace

Status copy_host_to_device_tensor(const Tensor& host, const Tensor& dst, uint8_t cq_id) {
  TS_RETURN_IF_ERROR(check_pair(host, dst, "copy_host_to_device_tensor"));
  TS_ASSIGN_OR_RETURN(TensorAccess s, make_access(host));
  TS_ASSIGN_OR_RETURN(TensorAccess d, make_access(dst));
  Device& device = *dst.device();
  // The command keeps the host storage alive until it has run. It holds no
  // reference to the device: a queue thread must never drop the last one
  // (closing a device drains its queues first, so device memory outlives them).
  auto fn = [s, d, &device, keep_host = host]() -> Status {
    parallel_copy(device, s, d);
    return ok_status();
  };
  return device.enqueue_host_command(cq_id, "write", std::move(fn), false);
}

Status copy_device_to_host_tensor(const Tensor& src, const Tensor& host, bool blocking, uint8_t cq_id) {
  TS_RETURN_IF_ERROR(check_pair(host, src, "copy_device_to_host_tensor"));
  TS_ASSIGN_OR_RETURN(TensorAccess s, make_access(src));
  TS_ASSIGN_OR_RETURN(TensorAccess d, make_access(host));
  Device& device = *src.device();
  auto fn = [s, d, &device, keep_host = host]() -> Status {
    parallel_copy(device, s, d);
    return ok_status();
  };
  return device.enqueue_host_command(cq_id, "read", std::move(fn), blocking);
}

StatusOr<Tensor> to_device(const Tensor& host, Device& device, const MemoryConfig& memory_config, uint8_t cq_id) {
  if (host.is_on_device()) return invalid_argument_error("to_device: tensor is already on device {}", host.device()->id());
  TensorSpec spec = host.spec();
  spec.memory_config = memory_config;
  TS_ASSIGN_OR_RETURN(Tensor dev, allocate_tensor_on_device(spec, device));
  TS_RETURN_IF_ERROR(copy_host_to_device_tensor(host, dev, cq_id));
  return dev;
}

StatusOr<Tensor> map_file_to_device(const TensorSpec& spec, std::span<const std::byte> bytes, int fd, uint64_t offset,
                                    Device& device, uint8_t cq_id) {
  TS_RETURN_IF_ERROR(spec.validate_for_device(device.descriptor()));
  const uint64_t want = spec.storage_bytes();
  if (spec.memory_config.buffer_type != BufferType::DRAM || bytes.size() != want)
    return invalid_argument_error("map_file_to_device: expected {} B for a DRAM tensor {}, found {} B", want,
                                  spec.to_string(), bytes.size());
  if (fd >= 0 && spec.layout == Layout::ROW_MAJOR && spec.physical_height() == 1 &&
      !spec.memory_config.is_sharded()) {
    StatusOr<std::shared_ptr<Buffer>> mapped = device.map_file(fd, offset, bytes.size(), spec.to_string());
    if (mapped.ok()) {
      Tensor t;
      t.spec_ = spec;
      t.buffer_ = std::move(*mapped);
      return t;
    }
    if (mapped.status().code() != StatusCode::kUnimplemented) return mapped.status();
  }
  Tensor host = allocate_tensor_on_host(spec);
  std::memcpy(host.host_data(), bytes.data(), bytes.size());
  return to_device(host, device, spec.memory_config, cq_id);
}

StatusOr<Tensor> Tensor::cpu(bool blocking, uint8_t cq_id) const {
  if (!is_on_device()) return *this;
  TensorSpec spec = spec_;
  spec.memory_config = DRAM_MEMORY_CONFIG;
  Tensor host = allocate_tensor_on_host(spec);
  TS_RETURN_IF_ERROR(copy_device_to_host_tensor(*this, host, blocking, cq_id));
  return host;
}

}  // namespace tessera
