#!/usr/bin/python3
"""Writes one ONNX model per layer of bench/layers/op_layers.txt (NCHW, float32,
opset 13, random weights) and OUT_DIR/shapes.json with each model's input and
output shapes for time_op_models.js. Run with Debian's /usr/bin/python3.

    make_op_models.py LAYERS_TXT OUT_DIR
"""
import json
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(0)


def init(name, shape, scale=0.05):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


# Layers without an ONNX Runtime model: onnxruntime-node cannot hand back a
# bfloat16 tensor, the output of a Cast to bfloat16.
NO_ANCHOR = {"typecast", "image_in"}


def model(op, h, w, c, p1, p2, p3):
    """Returns (nodes, inputs {name: shape}, output shape, initializers)."""
    x = [1, c, h, w]
    if op == "add_relu":
        return [helper.make_node("Add", ["x", "y"], ["s"]), helper.make_node("Relu", ["s"], ["out"])], \
            {"x": x, "y": x}, x, []
    if op == "silu":
        return [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["x", "s"], ["out"])], {"x": x}, x, []
    if op == "maxpool":
        oh, ow = (h + 2 * p3 - p1) // p2 + 1, (w + 2 * p3 - p1) // p2 + 1
        return [helper.make_node("MaxPool", ["x"], ["out"], kernel_shape=[p1, p1], strides=[p2, p2],
                                 pads=[p3] * 4)], {"x": x}, [1, c, oh, ow], []
    if op == "gap":
        return [helper.make_node("GlobalAveragePool", ["x"], ["out"])], {"x": x}, [1, c, 1, 1], []
    if op == "dwconv":
        pad = p1 // 2
        oh, ow = (h + 2 * pad - p1) // p2 + 1, (w + 2 * pad - p1) // p2 + 1
        nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], kernel_shape=[p1, p1], strides=[p2, p2],
                                  pads=[pad] * 4, group=c),
                 helper.make_node("Clip", ["c", "lo", "hi"], ["out"])]
        inits = [init("W", (c, 1, p1, p1)), init("B", (c,)), numpy_helper.from_array(np.array(0, np.float32), "lo"),
                 numpy_helper.from_array(np.array(6, np.float32), "hi")]
        return nodes, {"x": x}, [1, c, oh, ow], inits
    if op == "convT":
        return [helper.make_node("ConvTranspose", ["x", "W", "B"], ["out"], kernel_shape=[p1, p1],
                                 strides=[p2, p2])], {"x": x}, [1, p3, h * p2, w * p2], \
            [init("W", (c, p3, p1, p1)), init("B", (p3,))]
    if op in ("upnearest", "upbilinear"):
        attrs = dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor") \
            if op == "upnearest" else dict(mode="linear", coordinate_transformation_mode="half_pixel")
        scales = numpy_helper.from_array(np.array([1, 1, p1, p1], np.float32), "scales")
        return [helper.make_node("Resize", ["x", "", "scales"], ["out"], **attrs)], {"x": x}, \
            [1, c, h * p1, w * p1], [scales]
    if op == "concat":
        return [helper.make_node("Concat", ["x", "y"], ["out"], axis=1)], {"x": x, "y": [1, p1, h, w]}, \
            [1, c + p1, h, w], []
    if op == "permute5":
        return [helper.make_node("Transpose", ["x"], ["out"], perm=[0, 3, 1, 2, 4])], {"x": [1, h, w, p1, c]}, \
            [1, p1, h, w, c], []
    if op == "rowconcat":
        b = h * w * p1
        return [helper.make_node("Concat", ["x", "y", "z"], ["out"], axis=1)], \
            {"x": [1, b, c], "y": [1, b // 4, c], "z": [1, b // 16, c]}, [1, b + b // 4 + b // 16, c], []
    if op == "fc":
        # transB = 1, (N, K) weights: how PyTorch's Linear exports a classifier head.
        return [helper.make_node("Gemm", ["x", "W", "B"], ["out"], transB=1)], {"x": [1, c]}, [1, p1], \
            [init("W", (p1, c)), init("B", (p1,))]
    raise ValueError(op)


def main():
    layers, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    shapes = {}
    for line in open(layers):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        s, name, op, *nums = line.split()
        if op in NO_ANCHOR:
            continue
        nodes, inputs, out_shape, inits = model(op, *map(int, nums))
        graph = helper.make_graph(nodes, "layer",
                                  [helper.make_tensor_value_info(n, TensorProto.FLOAT, v) for n, v in inputs.items()],
                                  [helper.make_tensor_value_info("out", TensorProto.FLOAT, out_shape)],
                                  initializer=inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        onnx.checker.check_model(m)
        onnx.save(m, os.path.join(out, f"{s}.{name}.onnx"))
        shapes[f"{s}.{name}"] = {"inputs": inputs, "output": out_shape}
    json.dump(shapes, open(os.path.join(out, "shapes.json"), "w"))


if __name__ == "__main__":
    main()
