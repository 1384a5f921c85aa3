// Host reference kernels for the spatial ops (internal to host_eval): N-D
// convolution, transposed convolution, pooling, Resize, GridSample and RoiAlign, with every ONNX
// attribute, in double. The device kernels cover the 2-D PyTorch cases; these
// cover the rest as fallbacks.
#pragma once
#include <span>
#include <vector>

#include "tessera/graph/graph.h"

namespace tessera::graph::host {

using Ins = std::span<const HostTensor* const>;

StatusOr<std::vector<HostTensor>> conv(const Node& n, Ins ins);
StatusOr<std::vector<HostTensor>> conv_transpose(const Node& n, Ins ins);
// MaxPool (with the Indices output), AveragePool, LpPool, GlobalAveragePool, GlobalMaxPool.
StatusOr<std::vector<HostTensor>> pool(const Node& n, Ins ins);
StatusOr<std::vector<HostTensor>> resize(const Node& n, Ins ins, int opset);
// GridSample (opset 16) of a 4-D input, as PyTorch's grid_sample.
StatusOr<std::vector<HostTensor>> grid_sample(const Node& n, Ins ins);
// RoiAlign (opsets 10 and 16): X (N, C, H, W), rois (R, 4), batch_indices (R).
StatusOr<std::vector<HostTensor>> roi_align(const Node& n, Ins ins, int opset);

}  // namespace tessera::graph::host
