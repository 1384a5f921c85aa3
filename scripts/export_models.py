#!/usr/bin/python3
"""Exports the models Tessera's model tests and benchmarks run, with PyTorch
from Debian (python3-torch, python3-torchvision; run with /usr/bin/python3).

Every model gets fixed-seed random weights (no pretrained weights exist
offline), batch-norm statistics randomised so folding them is not a no-op,
and a dynamic batch dim. For each NAME the output directory receives:

  NAME.onnx          the model (opset 13)
  NAME_input.npy     8 fixed-seed inputs, float32 NCHW (NAME_input_b1.npy: the first)
  NAME_torch_b1.npy  PyTorch's output for the first input
  NAME_torch_b8.npy  PyTorch's output for all 8 (the independent reference)

  /usr/bin/python3 scripts/export_models.py OUT_DIR [NAME ...]

NAMEs: resnet50, mobilenet_v2, unet (the Vanilla UNet, 480x640), yolo (a
YOLOv5s-style detector with SiLU, C3 blocks, SPPF, nearest upsampling,
concats and strided convs, 640x640).
"""
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torchvision


def conv_bn_relu(cin, cout):
    return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]


class VanillaUNet(nn.Module):
    """The brain-segmentation UNet (in 3, out 1, 32 features) of Tessera's models/vanilla_unet."""

    def __init__(self, cin=3, cout=1, f=32):
        super().__init__()
        block = lambda a, b: nn.Sequential(*conv_bn_relu(a, b), *conv_bn_relu(b, b))
        self.enc = nn.ModuleList([block(cin, f), block(f, 2 * f), block(2 * f, 4 * f), block(4 * f, 8 * f)])
        self.pool = nn.MaxPool2d(2, 2)
        self.bottleneck = block(8 * f, 16 * f)
        self.up = nn.ModuleList([nn.ConvTranspose2d(16 * f, 8 * f, 2, 2), nn.ConvTranspose2d(8 * f, 4 * f, 2, 2),
                                 nn.ConvTranspose2d(4 * f, 2 * f, 2, 2), nn.ConvTranspose2d(2 * f, f, 2, 2)])
        self.dec = nn.ModuleList([block(16 * f, 8 * f), block(8 * f, 4 * f), block(4 * f, 2 * f), block(2 * f, f)])
        self.head = nn.Conv2d(f, cout, 1)

    def forward(self, x):
        skips = []
        for enc in self.enc:
            x = enc(x)
            skips.append(x)
            x = self.pool(x)
        x = self.bottleneck(x)
        for up, dec, skip in zip(self.up, self.dec, reversed(skips)):
            x = dec(torch.cat([up(x), skip], dim=1))
        return torch.sigmoid(self.head(x))


class Conv(nn.Module):
    def __init__(self, cin, cout, k=1, s=1, p=None):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, s, k // 2 if p is None else p, bias=False)
        self.bn = nn.BatchNorm2d(cout)
        self.act = nn.SiLU()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class Bottleneck(nn.Module):
    def __init__(self, c, shortcut=True):
        super().__init__()
        self.cv1, self.cv2, self.add = Conv(c, c, 1), Conv(c, c, 3), shortcut

    def forward(self, x):
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C3(nn.Module):
    def __init__(self, cin, cout, n=1, shortcut=True):
        super().__init__()
        c = cout // 2
        self.cv1, self.cv2, self.cv3 = Conv(cin, c), Conv(cin, c), Conv(2 * c, cout)
        self.m = nn.Sequential(*[Bottleneck(c, shortcut) for _ in range(n)])

    def forward(self, x):
        return self.cv3(torch.cat([self.m(self.cv1(x)), self.cv2(x)], 1))


class SPPF(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        c = cin // 2
        self.cv1, self.cv2, self.m = Conv(cin, c), Conv(4 * c, cout), nn.MaxPool2d(5, 1, 2)

    def forward(self, x):
        x = self.cv1(x)
        y1 = self.m(x)
        y2 = self.m(y1)
        return self.cv2(torch.cat([x, y1, y2, self.m(y2)], 1))


class YoloV5s(nn.Module):
    """YOLOv5s's layout (width 0.5, depth 0.33, 80 classes, 3 anchors per cell)."""

    def __init__(self, nc=80):
        super().__init__()
        self.no = nc + 5
        self.b0 = nn.Sequential(Conv(3, 32, 6, 2, 2), Conv(32, 64, 3, 2), C3(64, 64, 1), Conv(64, 128, 3, 2),
                                C3(128, 128, 2))
        self.b1 = nn.Sequential(Conv(128, 256, 3, 2), C3(256, 256, 3))
        self.b2 = nn.Sequential(Conv(256, 512, 3, 2), C3(512, 512, 1), SPPF(512, 512))
        self.h0, self.up = Conv(512, 256), nn.Upsample(scale_factor=2, mode="nearest")
        self.h1, self.h2 = C3(512, 256, 1, False), Conv(256, 128)
        self.h3 = C3(256, 128, 1, False)
        self.h4, self.h5 = Conv(128, 128, 3, 2), C3(256, 256, 1, False)
        self.h6, self.h7 = Conv(256, 256, 3, 2), C3(512, 512, 1, False)
        self.detect = nn.ModuleList([nn.Conv2d(c, 3 * self.no, 1) for c in (128, 256, 512)])

    def forward(self, x):
        p3 = self.b0(x)
        p4 = self.b1(p3)
        p5 = self.b2(p4)
        t5 = self.h0(p5)
        t4 = self.h2(self.h1(torch.cat([self.up(t5), p4], 1)))
        o3 = self.h3(torch.cat([self.up(t4), p3], 1))
        o4 = self.h5(torch.cat([self.h4(o3), t4], 1))
        o5 = self.h7(torch.cat([self.h6(o4), t5], 1))
        outs = []
        for conv, f in zip(self.detect, (o3, o4, o5)):
            y = conv(f)
            bs, _, ny, nx = y.shape
            y = y.view(bs, 3, self.no, ny, nx).permute(0, 1, 3, 4, 2).sigmoid()
            outs.append(y.reshape(bs, 3 * ny * nx, self.no))
        return torch.cat(outs, 1)


def randomise_batch_norms(model, gen):
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            c = m.num_features
            m.weight.data = torch.rand(c, generator=gen) * 0.5 + 0.75
            m.bias.data = (torch.rand(c, generator=gen) - 0.5) * 0.2
            m.running_mean = (torch.rand(c, generator=gen) - 0.5) * 0.2
            m.running_var = torch.rand(c, generator=gen) * 0.5 + 0.75


MODELS = {
    "resnet50": (lambda: torchvision.models.resnet50(weights=None), (3, 224, 224)),
    "mobilenet_v2": (lambda: torchvision.models.mobilenet_v2(weights=None), (3, 224, 224)),
    "unet": (VanillaUNet, (3, 480, 640)),
    "yolo": (YoloV5s, (3, 640, 640)),
}


def export(name, out_dir):
    make, chw = MODELS[name]
    torch.manual_seed(0)
    model = make().eval()
    randomise_batch_norms(model, torch.Generator().manual_seed(1))
    x = torch.rand((8,) + chw, generator=torch.Generator().manual_seed(2)) * 2 - 1
    path = os.path.join(out_dir, name + ".onnx")
    torch.onnx.export(model, x[:1], path, opset_version=13, input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "N"}, "output": {0: "N"}}, do_constant_folding=True)
    with torch.no_grad():
        b1 = model(x[:1]).numpy()
        b8 = model(x).numpy()
    np.save(os.path.join(out_dir, name + "_input.npy"), x.numpy().astype(np.float32))
    np.save(os.path.join(out_dir, name + "_input_b1.npy"), x[:1].numpy().astype(np.float32))
    np.save(os.path.join(out_dir, name + "_torch_b1.npy"), b1.astype(np.float32))
    np.save(os.path.join(out_dir, name + "_torch_b8.npy"), b8.astype(np.float32))
    print(f"{name}: {path} ({os.path.getsize(path) / 1e6:.1f} MB), output {tuple(b8.shape)}")


class TwoInTwoOut(torch.nn.Module):
    """The command line's multi-input, multi-output fixture: an image and a
    bias map in, logits and probabilities out."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.b = torch.nn.Conv2d(8, 4, 1)
        self.c = torch.nn.Conv2d(8, 2, 1)

    def forward(self, image, bias_map):
        h = torch.relu(self.a(image)) + bias_map
        return self.b(h), torch.sigmoid(self.c(h))


def export_io_fixture(out_dir):
    """two_io.onnx (static 1x3x16x16 and 1x8x16x16 inputs), its inputs as
    .npz and .npy (one in float64), its PyTorch outputs as .npz, and an image
    of the wrong size."""
    torch.manual_seed(0)
    m = TwoInTwoOut().eval()
    gen = np.random.default_rng(5)
    image = gen.standard_normal((1, 3, 16, 16)).astype(np.float32)
    bias_map = gen.standard_normal((1, 8, 16, 16)).astype(np.float32)
    args = (torch.from_numpy(image), torch.from_numpy(bias_map))
    torch.onnx.export(m, args, os.path.join(out_dir, "two_io.onnx"), opset_version=13,
                      input_names=["image", "bias_map"], output_names=["logits", "probs"])
    with torch.no_grad():
        logits, probs = m(*args)
    np.savez(os.path.join(out_dir, "two_io_inputs.npz"), image=image, bias_map=bias_map)
    np.save(os.path.join(out_dir, "two_io_image_f64.npy"), image.astype(np.float64))
    np.save(os.path.join(out_dir, "two_io_bias_map.npy"), bias_map)
    np.save(os.path.join(out_dir, "two_io_image_8x8.npy"), image[:, :, :8, :8].copy())
    np.savez(os.path.join(out_dir, "two_io_torch.npz"), logits=logits.numpy(), probs=probs.numpy())
    print(f"two_io: {out_dir}/two_io.onnx")


class ConvNeXtBlock(nn.Module):
    """7x7 depthwise conv, LayerNorm over channels (NHWC), Linear, GELU, Linear, layer scale, residual."""

    def __init__(self, c=32):
        super().__init__()
        self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.ln = nn.LayerNorm(c)
        self.fc1, self.act, self.fc2 = nn.Linear(c, 4 * c), nn.GELU(), nn.Linear(4 * c, c)
        self.gamma = nn.Parameter(torch.full((c,), 0.5))

    def forward(self, x):
        y = self.ln(self.dw(x).permute(0, 2, 3, 1))
        y = self.gamma * self.fc2(self.act(self.fc1(y)))
        return x + y.permute(0, 3, 1, 2)


class ConvNeXtProbe(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem, self.b1, self.b2 = nn.Conv2d(3, 32, 4, stride=4), ConvNeXtBlock(), ConvNeXtBlock()

    def forward(self, x):
        return self.b2(self.b1(self.stem(x))).mean((2, 3))


class DenseProbe(nn.Module):
    """A densely connected block: 20 layers, each reading the concatenation of all before it."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.convs = nn.ModuleList([nn.Conv2d(8 + 4 * i, 4, 3, padding=1) for i in range(20)])

    def forward(self, x):
        feats = [torch.relu(self.stem(x))]
        for c in self.convs:
            feats.append(torch.relu(c(torch.cat(feats, 1))))
        return torch.cat(feats, 1).mean((2, 3))


def export_probes(out_dir):
    """Small architectures the compiler must run with no host fallback: a
    ConvNeXt-style net (LayerNorm, GELU and Linear written out by the export)
    and a densely connected block (a 21-input Concat, ReduceMean), with
    their PyTorch outputs."""
    for name, m in (("probe_convnext", ConvNeXtProbe()), ("probe_dense", DenseProbe())):
        torch.manual_seed(0)
        m = type(m)().eval()
        x = torch.from_numpy(np.random.default_rng(7).standard_normal((1, 3, 64, 64)).astype(np.float32))
        torch.onnx.export(m, x, os.path.join(out_dir, name + ".onnx"), opset_version=13,
                          input_names=["x"], output_names=["y"])
        with torch.no_grad():
            np.save(os.path.join(out_dir, name + "_torch.npy"), m(x).numpy())
        np.save(os.path.join(out_dir, name + "_input.npy"), x.numpy())
        print(f"{name}: {out_dir}/{name}.onnx")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    torch.set_num_threads(2)
    for name in sys.argv[2:] or MODELS:
        if name == "two_io":
            export_io_fixture(out_dir)
            continue
        if name == "probes":
            export_probes(out_dir)
            continue
        if name not in MODELS:
            sys.exit(f"unknown model {name}; expected one of {', '.join(MODELS)}")
        export(name, out_dir)


if __name__ == "__main__":
    main()
