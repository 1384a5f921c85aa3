// A channel concat with a per-channel affine and an activation applied as
// the values are copied:
//
//   out[..., c] = act(fma(concat(inputs, last dim)[..., c], scale[c], shift[c]))
//
// the fma rounded once to float32, the activation as the element-wise ops
// compute it (eltwise.h), then rounded to `dtype`. A BatchNormalization and
// its activation read by nothing but a Concat's output, as densely connected
// blocks' pre-activation layers write them (BN -> ReLU -> Conv after every
// concat): one pass over the data where the concat and the normalisation
// took two each (graph::fuse_concat_affine makes such nodes).
//
// Inputs: ROW_MAJOR float32 or bfloat16 tensors of one dtype, their leading
// dims equal, concatenated along the last one (NHWC channels); any number of
// them. `scale` and `shift`: ROW_MAJOR float32 device tensors of as many
// values as the output has channels ((C) or (1, 1, 1, C)). `dtype`: float32 or
// bfloat16. The output is ROW_MAJOR, interleaved in `params.memory_config`'s
// buffer type when given (else the first input's).
#pragma once

#include <span>

#include "tessera/ops/activation.h"
#include "tessera/ops/manipulation.h"
#include "tessera/tensor/tensor.h"

namespace tessera {

StatusOr<Tensor> concat_affine(std::span<const Tensor> inputs, const Tensor& scale, const Tensor& shift,
                               const UnaryWithParam& activation, DataType dtype, const ManipulationParams& params = {});

}  // namespace tessera
