// The Vanilla UNet reference model (§4.1) as an ONNX file: the graph
// torch.onnx.export writes for reference/model.py in eval mode without
// constant folding (Conv without bias -> BatchNormalization -> Relu per
// conv, MaxPool 2x2, ConvTranspose 2x2 with bias, Concat(decoder, encoder)
// on channels, a final 1x1 Conv returning logits), NCHW, opset 13, with the
// state_dict names as initializer names.
//
// Debian's PyTorch is not among Tessera's packages, so this small generator
// of ours writes the file from a state dict (unet_random_state_dict: fixed
// seed) with Debian's libonnx protobuf; ONNX Runtime runs the same file as
// the independent float32 reference, and Tessera loads its weights back with
// load_onnx_initializers.
#pragma once

#include <string>

#include "tessera/cnn/weights.h"

namespace tessera::models {

// Input "input" (batch, 3, height, width) float32; output "output" (batch, 1,
// height, width). The file passes onnx::checker::check_model.
Status write_unet_onnx(const cnn::WeightMap& state_dict, const std::string& path, uint32_t batch, uint32_t height,
                       uint32_t width);

}  // namespace tessera::models
