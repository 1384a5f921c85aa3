// Graph rewrites the compiler runs before lowering (after infer_shapes).
// Each keeps the graph's results within float32 rounding and reports what it
// changed. Fused ops stay ONNX nodes with Tessera attributes:
//
//   Conv / ConvTranspose / Add / MatMul / Gemm:
//       tessera_activation = "relu" | "relu6" | "silu" | "sigmoid" | "tanh" |
//                            "leaky_relu" | "hardswish" | "hardsigmoid" | ...
//       tessera_activation_param, tessera_activation_param2 (leaky_relu's
//           slope, clip's bounds, ...: FusableActivation)
//       tessera_activation_scale, tessera_activation_shift (Conv: an affine
//           after the activation, see fuse_activation_affine)
//   Conv with a fourth input: a residual added after its activation,
//       then tessera_residual_activation (+ _param): Add(Conv(x), r) fused.
//   SiLU: x * sigmoid(x) (op type "SiLU", one input).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "tessera/graph/graph.h"

namespace tessera::graph {

struct PassReport {
  std::string pass;
  int rewrites = 0;
};

// Conv / ConvTranspose (constant weights and bias) whose output only an Add
// of a constant per-channel vector ((C), (C,1,1), (1,C,1,1)) or scalar reads:
// the constant joins the bias, the Add goes (Paddle exports conv biases so).
PassReport fold_bias_add(Graph& g);
// Conv / ConvTranspose (constant weights) followed by BatchNormalization
// (constant statistics) read by nothing else: scale the weights, fold the
// shift into the bias, drop the BatchNormalization.
PassReport fold_batch_norm(Graph& g);
// A BatchNormalization (constant statistics) fold_batch_norm left, as
// DenseNet's pre-activation blocks have (BN -> ReLU -> Conv): a 1x1
// depthwise Conv with its scale and shift, so the ReLU after it fuses and
// the normalisation is one pass with the activation.
PassReport batch_norm_to_conv(Graph& g);
// LRN over a 4-D value as device ops: x * x, a 1x1 conv whose C x C weights
// hold alpha / size on the channel window (bias `bias`) with a pow(-beta)
// activation, then x times that.
PassReport lrn_to_conv(Graph& g);
// Pad by zeros around H and W (symmetric) read only by an AveragePool, as
// PyTorch exports avg_pool2d(padding=p) with count_include_pad: the pool pads
// itself and counts the padding (Inception's branches: 9 Pad launches).
// Kept apart where the padding would pass half the kernel or mix with
// uncounted pool padding.
PassReport fold_pad_into_average_pool(Graph& g);
// Conv / ConvTranspose (constant float weights and bias) whose output only a
// Mul by a constant per-channel vector or scalar reads: the weights and bias
// are scaled, the Mul goes (PP-LCNet's learnable affine blocks: conv * s + b,
// whose Add fold_bias_add then folds).
PassReport fold_scale_mul(Graph& g);
// Activations exporters write out as several nodes, back to one:
// Mul(x, Sigmoid(x)) -> SiLU(x); Mul(x, HardSigmoid(x; 1/6, 1/2)) -> HardSwish(x);
// Div(Mul(x, Clip(Add(x, 3), 0, 6)), 6) -> HardSwish(x);
// Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5) -> Gelu(x) (PyTorch's nn.GELU before opset 20);
// its tanh form, Tanh(sqrt(2/pi) * (x + 0.044715 x^3)) for the Erf -> Gelu(x; approximate 'tanh').
PassReport fuse_activation_patterns(Graph& g);
// Whether n is a Cast of a float value to FLOAT or DOUBLE: Tessera computes
// in float32, so it changes nothing (a Cast to FLOAT16 or BFLOAT16 rounds:
// fusable_activation's to_float16 / to_bfloat16).
bool float_to_float32(const Graph& g, const Node& n);
// Identity, a Cast of a float to FLOAT or DOUBLE (float_to_float32), and
// Dropout that drops nothing (no training mode, or a ratio of
// 0; its mask output unread), removed: their readers read the input (a graph output keeps its
// node, for its name).
PassReport remove_identities(Graph& g);
// Sum, Mean, Max and Min of any number of operands as binary ops, left to
// right (ONNX's order): Add chains (Mean: then a Div by the count), Max and
// Min of two; one operand: Identity (Mean: the Div by 1).
PassReport split_variadic(Graph& g);
// LayerNorm written out over the last axis, as PyTorch exports nn.LayerNorm
// before opset 17: m = ReduceMean(x), d = Sub(x, m), Div(d, Sqrt(Add(
// ReduceMean(Pow(d, 2)), eps))), then an optional Mul by a constant scale
// and Add of a constant bias -> LayerNormalization(x, scale, bias; axis -1,
// epsilon eps) (scale 1, bias 0 where they are missing).
PassReport fuse_layer_norm(Graph& g);
// GroupNorm as PyTorch exports it: Reshape (N, C, H, W) -> (N, G, L),
// InstanceNormalization with scale 1 and bias 0, Reshape back, then an
// optional Mul by a per-channel gamma and Add of a per-channel beta -> one
// Tessera "GroupNorm" node (x, scale[C], shift[C]; num_groups, epsilon):
// statistics per image over each group of C / G consecutive channels.
PassReport fuse_group_norm(Graph& g);
// Conv over (N, C, L) (Conv1d: ECA-Net's channel attention) as a 2-D conv
// over (N, C, 1, L) between two Reshapes.
PassReport conv1d_to_conv2d(Graph& g);

// Quantized models on the float device: QuantizeLinear, DequantizeLinear,
// DynamicQuantizeLinear, ConvInteger, MatMulInteger, QLinearConv and
// QLinearMatMul become the float ops of their definitions (Div, Round, Add,
// Clip; Sub, Mul; ReduceMin / ReduceMax; Conv and MatMul of centered
// constant weights), their integer results FLOAT32 values holding the
// integers (exact to 2^24), carried unchanged through MaxPool, Reshape,
// Transpose, Concat, nearest Resize and the like. Readers that need the
// integers back (host ops, graph outputs) get them through a Cast. Ops with
// run-time weights or per-axis run-time scales stay on the host.
// A Conv (group 1) of DequantizeLinear(QuantizeLinear(x)) (uint8, one
// constant scale and zero point, perhaps through a Cast to uint8) with
// constant int8 weights behind a DequantizeLinear of zero point 0 (per
// tensor or per output channel) and a constant bias (float, or behind a
// DequantizeLinear) becomes a QuantizedConv of x: inputs x, the int8
// weights as floats and the float bias; attributes the Conv's, input_scale,
// input_zero_point and weight_scales (quantized_conv2d.h computes it). The
// Quantize / Dequantize pair stays for other readers. A QuantizedConv's own
// output pair ([Relu ->] QuantizeLinear -> DequantizeLinear) moves into it
// (output_scale, output_zero_point, output_lo, output_hi; the Relu as its
// tessera_activation), and fuse_activations then adds nothing after it. Runs before
// lower_quantized, where the device runs integer convs exactly
// (quantized_conv2d_kernel() == "int8"; the compiler asks).
PassReport fuse_quantized_convs(Graph& g);
PassReport lower_quantized(Graph& g);
// Conv over (N, C, T, H, W) (a video model's 3-D conv; constant weights,
// no fused activation) as 2-D convs over frames: the frames moved into the
// batch, one Conv per temporal tap over the output frames that tap reads
// (Pad and a strided Slice along T), the taps' results added, then back to
// (N, M, T', H', W'); then cancel_transposes, for consecutive 3-D convs.
PassReport conv3d_to_conv2d(Graph& g);
// LSTM / GRU / RNN (time-major, constant W and B): the input products of
// every step, W x + Wb, as one MatMul on the device (Reshape, MatMul by W^T
// of every direction, Add, Reshape); the layer reads them as its input with
// tessera_projected_inputs = 1 and runs the recurrence alone.
PassReport project_recurrent_inputs(Graph& g);
// Einsum of one or two operands with no label repeated within an operand
// (attention written as einsum: "bhqd,bhkd->bhqk"): labels only one operand
// has and the output lacks are summed first (ReduceSum), then both operands
// transposed and reshaped to (batch..., M, K) and (batch..., K, N) for one
// MatMul, whose result is reshaped and transposed to the output's order.
// Other forms (diagonals, three operands) stay Einsum, on the host.
PassReport lower_einsum(Graph& g);
// A linear layer over the channels of a channels-last image, as PyTorch
// exports nn.Linear after a permute (ConvNeXt's MLP): MatMul(x (N, H, W, K),
// B (K, M) constant), and the Add of a constant bias (M) that alone reads
// it -> Transpose(x; 0,3,1,2), Conv 1x1 (M filters of K, the bias),
// Transpose(0,2,3,1). The conv runs on the device's NHWC rows with prepared
// weights, its transposes are free (NHWC storage is channels-last), and
// cancel_transposes then lets activations, scales and residuals fuse into it.
PassReport linear_to_conv(Graph& g);
// Transpose(Transpose(x, p), q) with q undoing p, and the same with
// element-wise ops of one input between them (Gelu, Relu, Clip, ...), each
// intermediate read only by the next: the transposes go, the element-wise
// ops read x. Transposes whose output is a graph output stay. The same for
// Reshape(Reshape(x)) back to x's dims (a GELU between linear_to_conv's
// token reshapes), so that the transposes around those meet too.
PassReport cancel_transposes(Graph& g);
// An activation whose input is read only by it moves into the producing
// Conv, ConvTranspose, Add / Sub / Mul / Div or MatMul / Gemm. A HardSigmoid
// with other than PyTorch's (1/6, 1/2) after a Conv is rescaled into it (the
// conv's weights and bias absorb the affine part).
PassReport fuse_activations(Graph& g);

// The activation a unary node computes, as Tessera names it (tessera/ops/
// activation.h: "relu", "relu6" for Clip(0, 6), "clip" for other constant
// bounds, ...) with its parameters, or nullopt when it is not one a kernel
// can fuse. Selu is elu(alpha) * gamma; HardSigmoid(alpha, beta) other than
// PyTorch's clip(x, lo, hi) * alpha + beta with [lo, hi] where alpha x + beta
// lies in [0, 1].
struct FusableActivation {
  std::string name;
  float param = 0, param2 = 0;  // leaky_relu's slope, elu / celu alpha, thresholded_relu's, clip's bounds
  float scale = 1, shift = 0;   // then y * scale + shift
};
std::optional<FusableActivation> fusable_activation(const Graph& g, const Node& n);

// Conv with a fused activation whose output only a Mul by a scalar constant
// reads, then (or instead) only an Add or Sub of a scalar constant: the
// affine joins the conv's activation (tessera_activation_scale / _shift,
// y = act(x) * scale + shift in the conv's own pass; PP-LCNet's learnable
// affine blocks after each hard-swish). Runs after fuse_activations.
PassReport fuse_activation_affine(Graph& g);
// Add(Conv(x), r) of same-shaped 4D values, the conv's output read by the
// Add alone: the conv adds r itself (ops/conv2d.h's conv2d_with_residual),
// with the Add's fused activation after. Runs after fuse_activations.
PassReport fuse_residual_adds(Graph& g);
// Concat along the channels of a 4-D value whose only reader is a 1x1
// depthwise Conv of stride 1 without padding (constant weights (C, 1, 1, 1)
// and bias: what batch_norm_to_conv makes of a BatchNormalization after a
// concat, as densely connected blocks' pre-activation layers have), with
// or without a fused activation: the Concat takes the conv's scale and shift
// (tessera_channel_scale / _shift, C floats each) and its activation, and
// the conv goes. The Concat then computes act(fma(x, scale[c], shift[c]))
// as it copies (ops/concat_affine.h): one pass where there were two.
// Runs after fuse_activations.
PassReport fuse_concat_affine(Graph& g);

// Runs the passes: fuse_activation_patterns, fuse_layer_norm,
// linear_to_conv, cancel_transposes, the folds (fold_bias_add again after
// fold_scale_mul), then the fusions in the order above.
std::vector<PassReport> optimize(Graph& g);

}  // namespace tessera::graph
