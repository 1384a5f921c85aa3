// Tensor manipulation on a device: reshape, permute, pad, slice, concat,
// and the CHW <-> HWC conversions of the original's input and output paths.
//
// Inputs are ROW_MAJOR device tensors of any dtype and memory config
// (interleaved, or sharded in DRAM or L1); values are copied, never rounded,
// so every result matches its reference kernel bit for bit. The output is
// ROW_MAJOR in `memory_config` when given (any config whose shards fit the
// output), else interleaved in the first input's buffer type. Rank <= 8;
// negative dims count from the back.
//
//   reshape        same volume, elements in the same row-major order; a view
//                  sharing the input's storage (no launch) when the bytes
//                  need not move (Tensor::view), else a copy;
//   permute        output dim i is input dim perm[i]. With `dtype` (float
//                  dtypes), the output is converted on the way: one launch
//                  for an image's NCHW -> NHWC move (at most four channels,
//                  dense rows), else a permute and a typecast;
//   pad            `padding[i] = {before, after}` for each dim (missing
//                  leading dims are unpadded), filled with `value` converted
//                  to the dtype;
//   slice          [begin, end) with step >= 1 per dim (end clamped to the
//                  dim, as Python slices);
//   concat         along `dim`; every other dim equal, one dtype. A channel
//                  concat of height-sharded NHWC activations into a
//                  height-sharded output is the UNet's skip connection.
//                  With `dtype` (float dtypes), the output is converted as
//                  it is copied: one launch for packed rows (a bfloat16
//                  detector's heads into its float32 output), else a
//                  concat and a typecast. Any number of inputs: past 16,
//                  groups of 16 are concatenated into DRAM first (a
//                  densely connected block's 17th input and on);
//   convert_to_hwc (1, 1, C, H*W) channels-first rows -> (1, 1, H*W, C);
//   convert_to_chw the inverse, with an optional output dtype (float dtypes).
#pragma once

#include <array>
#include <optional>
#include <span>
#include <vector>

#include "tessera/tensor/tensor.h"

namespace tessera {

struct ManipulationParams {
  std::optional<MemoryConfig> memory_config;
  uint8_t cq_id = 0;
};

StatusOr<Tensor> reshape(const Tensor& input, const Shape& shape, const ManipulationParams& params = {});
StatusOr<Tensor> permute(const Tensor& input, std::span<const int> perm, const ManipulationParams& params = {});
StatusOr<Tensor> permute(const Tensor& input, std::span<const int> perm, DataType dtype,
                         const ManipulationParams& params = {});
StatusOr<Tensor> pad(const Tensor& input, std::span<const std::array<uint32_t, 2>> padding, float value = 0.0f,
                     const ManipulationParams& params = {});

struct SliceParams {
  std::vector<uint32_t> begin;  // one per dim
  std::vector<uint32_t> end;    // one per dim (clamped)
  std::vector<uint32_t> step;   // empty: all 1
};
StatusOr<Tensor> slice(const Tensor& input, const SliceParams& slice, const ManipulationParams& params = {});

StatusOr<Tensor> concat(std::span<const Tensor> inputs, int dim, const ManipulationParams& params = {});
StatusOr<Tensor> concat(std::span<const Tensor> inputs, int dim, DataType dtype, const ManipulationParams& params = {});

StatusOr<Tensor> convert_to_hwc(const Tensor& input, const ManipulationParams& params = {});
StatusOr<Tensor> convert_to_chw(const Tensor& input, std::optional<DataType> dtype = std::nullopt,
                                const ManipulationParams& params = {});

}  // namespace tessera
