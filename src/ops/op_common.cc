#include "op_common.h"

namespace tessera::ops {

Status require_device_tensor(const Tensor& t, std::string_view op, std::string_view name) {
  if (!t.is_on_device())
    return invalid_argument_error("{}: {} must be a device tensor, found a host tensor {}; use to_device first", op,
                                  name, t.spec().to_string());
  if (!t.is_allocated())
    return failed_precondition_error("{}: {} {} has been deallocated", op, name, t.spec().to_string());
  return ok_status();
}

uint32_t default_grain(const Device& device, uint32_t n, uint64_t total_bytes, uint64_t min_chunk_bytes) {
  uint64_t chunks = static_cast<uint64_t>(device.workers().num_threads()) * 4;
  chunks = std::clamp<uint64_t>(total_bytes / min_chunk_bytes, 1, chunks);
  return static_cast<uint32_t>(std::max<uint64_t>(1, (n + chunks - 1) / chunks));
}

bool streams_output(const Device& device, uint64_t bytes) {
  const uint64_t shared = device.descriptor().shared_cache_size;
  return bytes > (shared ? shared : uint64_t{16} << 20);
}

}  // namespace tessera::ops
