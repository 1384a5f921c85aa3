#!/usr/bin/python3
"""Writes one ONNX model per layer of bench/layers/conv_layers.txt: Conv (NCHW,
padding r/2, bias, the optional groups column) followed by Relu, random float32 weights, opset 13. ONNX
Runtime fuses the pair, as Tessera fuses the activation. Run with Debian's
/usr/bin/python3 (python3-onnx, python3-numpy).

    make_conv_models.py LAYERS_TXT OUT_DIR
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def model(h, w, c, k, r, stride, groups):
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array((rng.standard_normal((k, c // groups, r, r)) * 0.05).astype(np.float32), "W")
    bias = numpy_helper.from_array(rng.standard_normal(k).astype(np.float32), "B")
    pad = r // 2
    conv = helper.make_node("Conv", ["x", "W", "B"], ["c"], kernel_shape=[r, r], strides=[stride, stride],
                            pads=[pad, pad, pad, pad], group=groups)
    relu = helper.make_node("Relu", ["c"], ["y"])
    oh, ow = (h + 2 * pad - r) // stride + 1, (w + 2 * pad - r) // stride + 1
    graph = helper.make_graph([conv, relu], "layer",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, w])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, k, oh, ow])],
                              initializer=[weight, bias])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(m)
    return m


def main():
    layers, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    for line in open(layers):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        f = line.split()
        s, name = f[0], f[1]
        h, w, c, k, r, stride = map(int, f[2:8])
        groups = int(f[9]) if len(f) > 9 else 1
        onnx.save(model(h, w, c, k, r, stride, groups), os.path.join(out, f"{s}.{name}.onnx"))


if __name__ == "__main__":
    main()
