#!/usr/bin/python3
"""Exports Tessera's model zoo: torchvision architectures a user might bring,
chosen for the constructs that stress a compiler, with PyTorch from Debian
(python3-torch, python3-torchvision; run with /usr/bin/python3).

No pretrained weights exist offline, so every model gets torchvision's own
fixed-seed initialisation, and its batch-norm statistics are calibrated on
random inputs (each BatchNorm's running mean and variance become those of
the activations it sees). With raw random weights a classifier's outputs for
two different inputs correlate at PCC 0.85-0.9997, which would make a PCC
check against a reference meaningless; calibrated, they depend on the input.
Each model's "input dependence" (the PCC between its outputs for two
different inputs) is recorded in the manifest so that this stays checked.

For each NAME the output directory receives:

  NAME.onnx               the model (opset 13, dynamic batch dim)
  NAME_input_b1.npy       a fixed-seed input, float32 NCHW (NAME_input_b8.npy: 8 of them)
  NAME_torch_b1.npz       PyTorch's outputs for it, keyed by output name (and _b8)
  manifest.tsv            one line per model: name, task, input shape, outputs,
                          input dependence, constructs

  /usr/bin/python3 scripts/export_zoo.py OUT_DIR [NAME ...]

With no NAME, every model the manifest does not list yet (or whose files are
gone) is exported; NAMEs are exported again. The EXTRA architectures (ViT-B/16,
MaxViT-T, RegNetY-800MF, the whole Faster R-CNN: benchmarks, not tests) are
exported only when named; the whole detector takes one image (batch 1 files
only).
"""
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torchvision.models as tvm
import torchvision.models.detection as tvd
import torchvision.models.segmentation as tvs


class Outputs(nn.Module):
    """Runs a model and returns its outputs as a tuple, taking dict outputs
    (segmentation, detection heads) apart in a fixed key order."""

    def __init__(self, model, keys=None):
        super().__init__()
        self.model, self.keys = model, keys

    def forward(self, x):
        y = self.model(x)
        return tuple(y[k] for k in self.keys) if self.keys else y


class SsdLiteHead(nn.Module):
    """SSDlite's network without its box decoding and NMS (data-dependent
    host work, not a network): the MobileNetV3 backbone with its extra
    blocks and the class and box heads over all six feature maps."""

    def __init__(self):
        super().__init__()
        m = tvd.ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None)
        self.backbone, self.head = m.backbone, m.head

    def forward(self, x):
        out = self.head(list(self.backbone(x).values()))
        return out["bbox_regression"], out["cls_logits"]


class FpnRpn(nn.Module):
    """Faster R-CNN's MobileNetV3 FPN backbone and region proposal head, up to
    the per-level objectness and box deltas (proposal selection is host work)."""

    def __init__(self):
        super().__init__()
        m = tvd.fasterrcnn_mobilenet_v3_large_fpn(weights=None, weights_backbone=None)
        self.backbone, self.head = m.backbone, m.rpn.head

    def forward(self, x):
        logits, deltas = self.head(list(self.backbone(x).values()))
        return tuple(logits) + tuple(deltas)


# name: (constructor, input CHW, task, the constructs it brings)
ZOO = {
    "resnet18": (lambda: tvm.resnet18(), (3, 224, 224), "classification", "basic residual blocks"),
    "resnext50_32x4d": (lambda: tvm.resnext50_32x4d(), (3, 224, 224), "classification", "grouped 3x3 convs (32 groups)"),
    "densenet121": (lambda: tvm.densenet121(), (3, 224, 224), "classification",
                    "dense connectivity (Concat of up to 25 inputs), BN-ReLU before conv, avg-pool transitions"),
    "mobilenet_v3_small": (lambda: tvm.mobilenet_v3_small(), (3, 224, 224), "classification",
                           "inverted residuals, hard-swish, squeeze-excitation with hard-sigmoid"),
    "mobilenet_v3_large": (lambda: tvm.mobilenet_v3_large(), (3, 224, 224), "classification",
                           "inverted residuals, hard-swish, squeeze-excitation with hard-sigmoid, 5x5 depthwise"),
    "shufflenet_v2_x1_0": (lambda: tvm.shufflenet_v2_x1_0(), (3, 224, 224), "classification",
                           "channel shuffle (Reshape-Transpose-Reshape), chunk (Split), strided depthwise"),
    "squeezenet1_1": (lambda: tvm.squeezenet1_1(), (3, 224, 224), "classification",
                      "fire modules (1x1 and 3x3 expand concatenated), ceil-mode max pools, no batch norm"),
    "efficientnet_b0": (lambda: tvm.efficientnet_b0(), (3, 224, 224), "classification",
                        "SiLU, squeeze-excitation, 5x5 depthwise, inverted residuals"),
    "efficientnet_v2_s": (lambda: tvm.efficientnet_v2_s(), (3, 224, 224), "classification",
                          "fused MBConv (3x3 expand), SiLU, squeeze-excitation"),
    "regnet_y_400mf": (lambda: tvm.regnet_y_400mf(), (3, 224, 224), "classification",
                       "grouped convs (group width 8), squeeze-excitation with ReLU and sigmoid"),
    "regnet_x_400mf": (lambda: tvm.regnet_x_400mf(), (3, 224, 224), "classification", "grouped convs (group width 16)"),
    "mnasnet1_0": (lambda: tvm.mnasnet1_0(), (3, 224, 224), "classification", "inverted residuals, 5x5 depthwise"),
    "googlenet": (lambda: tvm.googlenet(aux_logits=False, init_weights=True), (3, 224, 224), "classification",
                  "inception branches (1x1, 3x3, 3x3, pool-proj concatenated), ceil-mode pools"),
    "inception_v3": (lambda: tvm.inception_v3(aux_logits=False, init_weights=True), (3, 299, 299), "classification",
                     "inception branches with 1x7 / 7x1 factorised convs, 299x299 input"),
    "convnext_tiny": (lambda: tvm.convnext_tiny(), (3, 224, 224), "classification",
                      "transformer-style blocks: 7x7 depthwise, LayerNorm (channels-last and 2d), GELU, "
                      "Linear (MatMul), Permute, layer scale"),
    "swin_t": (lambda: tvm.swin_t(), (3, 224, 224), "classification",
               "shifted-window attention: torch.roll (Slices to the end, Concat), window partition (Reshape, "
               "Permute), attention masks built by ScatterND, MatMul attention and Softmax, relative position bias "
               "(Gather), LayerNorm, GELU, Dropout(p=0)"),
    "alexnet": (lambda: tvm.alexnet(), (3, 224, 224), "classification",
                "11x11 stride-4 stem, adaptive avg pool to 6x6, large Linear layers"),
    "vgg11_bn": (lambda: tvm.vgg11_bn(), (3, 224, 224), "classification", "plain 3x3 conv stacks, 25088-wide Linear"),
    "deeplabv3_mobilenet_v3_large": (lambda: Outputs(tvs.deeplabv3_mobilenet_v3_large(
        weights=None, weights_backbone=None, aux_loss=False), ["out"]), (3, 256, 256), "segmentation",
        "dilated depthwise convs, ASPP (dilations 12/24/36 and image pooling), bilinear Resize to a size from Shape"),
    "lraspp_mobilenet_v3_large": (lambda: Outputs(tvs.lraspp_mobilenet_v3_large(
        weights=None, weights_backbone=None), ["out"]), (3, 256, 256), "segmentation",
        "LR-ASPP: global-pooled sigmoid gate, two bilinear Resizes to sizes from Shape"),
    "ssdlite320_mobilenet_v3_large": (SsdLiteHead, (3, 320, 320), "detection",
                                      "SSDlite heads over six maps (depthwise-separable), Reshape/Concat of boxes"),
    "fasterrcnn_mobilenet_v3_fpn_rpn": (FpnRpn, (3, 320, 320), "detection",
                                        "feature pyramid (nearest Resize to sizes from Shape), RPN heads, 6 outputs"),
}

class WholeDetector(nn.Module):
    """A two-stage detector as a user ships it: torchvision's transform,
    backbone, region proposals (NMS), RoI pooling (RoiAlign), box head and
    post-processing (per-class NMS), one image in, its boxes, labels and
    scores out. Every score kept (box_score_thresh 0): untrained class
    scores sit near 1/91, below the default threshold of 0.05."""

    def __init__(self):
        super().__init__()
        self.model = tvd.fasterrcnn_mobilenet_v3_large_320_fpn(weights=None, weights_backbone=None,
                                                                box_score_thresh=0.0)

    def forward(self, x):
        d = self.model(list(x))[0]
        return d["boxes"], d["labels"], d["scores"]


def vit_b_16():
    """torchvision zero-initialises ViT's head: its outputs would not depend
    on the input. A random head (before calibration) makes them."""
    m = tvm.vit_b_16()
    nn.init.normal_(m.heads.head.weight, std=0.02)
    return m


# Architectures exported only when named (`export_zoo.py DIR vit_b_16 ...`):
# timed against ONNX Runtime (`bench/zoo_vs_ort.sh --dir DIR`), too large or
# slow for the tests' share of CI.
EXTRA = {
    "vit_b_16": (vit_b_16, (3, 224, 224), "classification",
                 "plain transformer: 16x16 patch conv, class token Concat, 12 blocks of MultiheadAttention "
                 "(MatMul, Softmax, Transpose), LayerNorm, GELU MLP (768 -> 3072 -> 768)"),
    "maxvit_t": (lambda: tvm.maxvit_t(), (3, 224, 224), "classification",
                 "MBConv with squeeze-excitation, block and grid attention (window partitions by Reshape / "
                 "Permute), relative position bias, LayerNorm, GELU"),
    "regnet_y_800mf": (lambda: tvm.regnet_y_800mf(), (3, 224, 224), "classification",
                       "grouped convs, squeeze-excitation"),
    "fasterrcnn_mobilenet_v3_large_320_fpn": (WholeDetector, (3, 320, 320), "detection",
                                              "the whole two-stage detector: transform, FPN, RPN with NMS, "
                                              "RoiAlign, box head (Gemm), per-class NMS (a host tail)"),
}
# Models that take one image (no batch dim in their outputs): batch 1 only.
SINGLE_IMAGE = {"fasterrcnn_mobilenet_v3_large_320_fpn"}


def calibrate_batch_norms(model, chw, gen):
    """Randomises each BatchNorm's affine parameters a little and sets its
    running statistics to those of the activations random inputs produce."""
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    for m in bns:
        c = m.num_features
        m.weight.data = torch.rand(c, generator=gen) * 0.5 + 0.75
        m.bias.data = (torch.rand(c, generator=gen) - 0.5) * 0.2
        m.reset_running_stats()
        m.momentum = None  # a cumulative average over the calibration batches
    model.eval()
    for m in bns:
        m.train()
    with torch.no_grad():
        for _ in range(2):
            model(torch.rand((4,) + chw, generator=gen) * 2 - 1)
    model.eval()


def calibrate_layers(model, chw, gen):
    """The same for a model with no batch norm (data-dependent
    initialisation): each Conv2d's and Linear's weights and bias are rescaled
    so that its outputs have zero mean and unit variance per channel on
    random inputs. One forward pass does it in forward order: each layer's
    hook rescales the layer, then hands on the output the rescaled layer
    gives, so the layers after it see it."""
    # Layer scales start at 1e-6 (ConvNeXt), which would mute every residual
    # branch and leave its ops untested: give them weights of order 0.1.
    for name, p in model.named_parameters():
        if name.endswith("layer_scale"):
            p.data = torch.rand(p.shape, generator=gen) * 0.2 + 0.05
    done = set()

    def rescale(m, inputs, o):
        if m in done:  # a layer called twice keeps its first calibration
            return None
        done.add(m)
        # Channels are dim 1 of a conv's output and the last dim of a linear
        # layer's (ConvNeXt applies its linears to channels-last values).
        c = o if isinstance(m, nn.Conv2d) else o.movedim(-1, 1)
        y = c.transpose(0, 1).reshape(c.shape[1], -1)
        mean, std = y.mean(1), y.std(1).clamp_min(1e-3)
        m.weight.data /= std.reshape((-1,) + (1,) * (m.weight.dim() - 1))
        if m.bias is not None:
            m.bias.data = (m.bias.data - mean) / std
        else:
            mean = torch.zeros_like(mean)
        shape = (1, -1) + (1,) * (c.dim() - 2)
        c = (c - mean.reshape(shape)) / std.reshape(shape)
        return c if isinstance(m, nn.Conv2d) else c.movedim(1, -1)

    hooks = [m.register_forward_hook(rescale) for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    with torch.no_grad():
        model(torch.rand((4,) + chw, generator=gen) * 2 - 1)
    for h in hooks:
        h.remove()


def pcc(a, b):
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    a, b = a - a.mean(), b - b.mean()
    d = np.sqrt((a * a).sum() * (b * b).sum())
    return float((a * b).sum() / d) if d > 0 else 1.0


def export(name, out_dir):
    make, chw, task, constructs = {**ZOO, **EXTRA}[name]
    torch.manual_seed(0)
    model = make().eval()
    gen = torch.Generator().manual_seed(1)
    has_bn = any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
    (calibrate_batch_norms if has_bn else calibrate_layers)(model, chw, gen)
    x = torch.rand((8,) + chw, generator=torch.Generator().manual_seed(2)) * 2 - 1
    single = name in SINGLE_IMAGE
    if single:
        x = (x + 1) / 2  # (an image in [0, 1], as the detector's transform expects)
    with torch.no_grad():
        y1 = model(x[:1])
        y8 = tuple(model(x[:1] + 0.1 * x[1:2])) if single else model(x)  # (another image, for the dependence)
    y1 = y1 if isinstance(y1, tuple) else (y1,)
    y8 = y8 if isinstance(y8, tuple) else (y8,)
    names = (["boxes", "labels", "scores"] if single else
             ["output"] if len(y1) == 1 else [f"output{i}" for i in range(len(y1))])
    path = os.path.join(out_dir, name + ".onnx")
    dyn = None if single else {n: {0: "N"} for n in ["input"] + names}
    torch.onnx.export(model, x[:1], path, opset_version=13, input_names=["input"], output_names=names,
                      dynamic_axes=dyn, do_constant_folding=True)
    np.save(os.path.join(out_dir, name + "_input_b1.npy"), x[:1].numpy())
    np.savez(os.path.join(out_dir, name + "_torch_b1.npz"), **{n: t.numpy() for n, t in zip(names, y1)})
    if single:
        dependence = pcc(y1[2].numpy(), y8[2].numpy()) if y1[2].shape == y8[2].shape else 0.0
    else:
        np.save(os.path.join(out_dir, name + "_input_b8.npy"), x.numpy())
        np.savez(os.path.join(out_dir, name + "_torch_b8.npz"), **{n: t.numpy() for n, t in zip(names, y8)})
        dependence = min(pcc(t[0].numpy(), t[1].numpy()) for t in y8)
    shapes = ",".join("x".join(map(str, t.shape if single else t.shape[1:])) for t in y1)
    print(f"{name}: {os.path.getsize(path) / 1e6:.1f} MB, outputs {shapes}, input dependence PCC {dependence:.4f}")
    return "\t".join([name, task, "x".join(map(str, chw)), shapes, f"{dependence:.4f}", constructs])


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    torch.set_num_threads(2)
    for name in sys.argv[2:]:
        if name not in ZOO and name not in EXTRA:
            sys.exit(f"unknown zoo model {name}; expected one of {', '.join(list(ZOO) + list(EXTRA))}")
    manifest = os.path.join(out_dir, "manifest.tsv")
    lines = {}
    if os.path.exists(manifest):
        with open(manifest) as f:
            lines = {l.split("\t")[0]: l.rstrip("\n") for l in f if l.strip() and not l.startswith("#")}
    files = ("{}.onnx", "{}_input_b1.npy", "{}_input_b8.npy", "{}_torch_b1.npz", "{}_torch_b8.npz")
    done = [n for n in lines if all(os.path.exists(os.path.join(out_dir, f.format(n))) for f in files)]
    todo = sys.argv[2:] or [n for n in ZOO if n not in done]
    if not todo:
        return
    for name in todo:
        lines[name] = export(name, out_dir)
    with open(manifest, "w") as f:
        f.write("# name\ttask\tinput CHW\toutputs (per sample)\tinput dependence PCC\tconstructs\n")
        for name in list(ZOO) + list(EXTRA):
            if name in lines:
                f.write(lines[name] + "\n")


if __name__ == "__main__":
    main()
