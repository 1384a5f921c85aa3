// Layout and memory-config changes on a device.
//
//   tilize     ROW_MAJOR -> TILE (zero padding), optionally to another dtype
//              (e.g. float32 rows -> bfloat8_b tiles);
//   untilize   TILE -> ROW_MAJOR (padding dropped); block-float input
//              becomes bfloat16 unless another dtype is asked for;
//   to_layout  either of the above for device tensors, host conversion for
//              host tensors;
//   to_memory_config / reshard
//              copy into another memory config (interleaved or sharded, DRAM
//              or L1). reshard with `output` writes in place into that
//              persistent tensor, which is how a traced input is refilled.
// The output memory config defaults to the input's.
#pragma once

#include <optional>

#include "tessera/tensor/tensor.h"

namespace tessera {

struct DataMovementParams {
  std::optional<MemoryConfig> memory_config;
  std::optional<DataType> dtype;
  uint8_t cq_id = 0;
};

StatusOr<Tensor> tilize(const Tensor& input, const DataMovementParams& params = {});
StatusOr<Tensor> untilize(const Tensor& input, const DataMovementParams& params = {});
StatusOr<Tensor> to_layout(const Tensor& input, Layout layout, const DataMovementParams& params = {});
StatusOr<Tensor> to_memory_config(const Tensor& input, const MemoryConfig& memory_config, uint8_t cq_id = 0);
StatusOr<Tensor> reshard(const Tensor& input, const MemoryConfig& memory_config,
                         std::optional<Tensor> output = std::nullopt, uint8_t cq_id = 0);

}  // namespace tessera
