// upsample on a device: nearest and bilinear resizing of NHWC activations.
//
// Input: a ROW_MAJOR (N, H, W, C) device tensor, float32 or bfloat16,
// interleaved or height sharded. Output: (N, OH, OW, C) ROW_MAJOR with
// OH = floor(H * scale_h), OW = floor(W * scale_w), interleaved in the
// input's buffer type (or `memory_config`). Scales may be fractional (> 0).
//
// Source coordinates follow PyTorch's interpolate with a scale factor:
//   nearest   src = min(floor(dst / scale), in - 1)       (copies: bit exact)
//   bilinear  align_corners = false: src = max((dst + 0.5) / scale - 0.5, 0)
//             align_corners = true:  src = dst * (in - 1) / (out - 1)
// Bilinear weights blend in float32: within 1e-5 relative + 1e-6 absolute of
// the double-precision reference in float32, one ulp in bfloat16.
#pragma once

#include <optional>

#include "tessera/tensor/tensor.h"

namespace tessera {

enum class UpsampleMode : uint8_t { NEAREST, BILINEAR };

struct UpsampleParams {
  float scale_h = 2.0f, scale_w = 2.0f;
  UpsampleMode mode = UpsampleMode::NEAREST;
  bool align_corners = false;  // bilinear only
  std::optional<MemoryConfig> memory_config;
  uint8_t cq_id = 0;

  std::string descriptor(const Shape& input) const;  // "upsample:n1h30w40c512:s2x2:nearest"
  // INVALID_ARGUMENT unless `input` is (N, H, W, C), the scales finite and
  // positive, the output 1..65535 on each side, and align_corners bilinear.
  Status validate(const Shape& input) const;
};

StatusOr<Tensor> upsample(const Tensor& input, const UpsampleParams& params);

}  // namespace tessera
