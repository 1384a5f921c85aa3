#!/usr/bin/python3
"""Exports statically quantized torchvision models as QDQ ONNX files
(QuantizeLinear / Cast / DequantizeLinear around float ops, as PyTorch 1.13
writes its quantized models): fixed-seed weights, batch norms given
statistics, fused, calibrated on random batches with the fbgemm qconfig
(int8 per-channel weights, uint8 activations), converted. For each NAME the
output directory receives NAME.onnx, NAME_input_b1.npy, NAME_torch_b1.npy
(the quantized PyTorch model's output) and a manifest.tsv, as
bench/zoo_vs_ort.sh reads a model directory.

  /usr/bin/python3 scripts/export_quantized.py OUT_DIR [NAME ...]
  bash bench/zoo_vs_ort.sh --batches 1 --dir OUT_DIR
"""
import os
import sys

import numpy as np
import torch
import torchvision.models.quantization as q

# (ShuffleNetV2's quantized channel split does not export from PyTorch 1.13.)
MODELS = {
    "resnet18_qdq": lambda: q.resnet18(weights=None, quantize=False),
    "mobilenet_v2_qdq": lambda: q.mobilenet_v2(weights=None, quantize=False),
}


def export(name, out_dir):
    torch.manual_seed(0)
    m = MODELS[name]().eval()
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.1, 0.1), mod.running_var.uniform_(0.5, 2), mod.weight.uniform_(0.5, 1.5)
    m.fuse_model()
    m.qconfig = torch.ao.quantization.get_default_qconfig("fbgemm")
    torch.ao.quantization.prepare(m, inplace=True)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _ in range(4):
            m(torch.randn(4, 3, 224, 224, generator=g))
    torch.ao.quantization.convert(m, inplace=True)
    x = torch.randn(1, 3, 224, 224, generator=g)
    with torch.no_grad():
        y = m(x)
    torch.onnx.export(m, x, os.path.join(out_dir, name + ".onnx"), opset_version=13, input_names=["x"],
                      output_names=["y"])
    np.save(os.path.join(out_dir, name + "_input_b1.npy"), x.numpy())
    np.save(os.path.join(out_dir, name + "_torch_b1.npy"), y.numpy())
    print("exported", name)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    names = sys.argv[2:] or list(MODELS)
    for name in names:
        if name not in MODELS:
            sys.exit(f"unknown model '{name}'; known: {', '.join(MODELS)}")
        export(name, out_dir)
    with open(os.path.join(out_dir, "manifest.tsv"), "w") as f:
        for name in MODELS:
            if os.path.exists(os.path.join(out_dir, name + ".onnx")):
                f.write(f"{name}\tclassification\n")


if __name__ == "__main__":
    main()
