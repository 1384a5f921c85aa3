#!/usr/bin/python3
"""Exports randomly generated architectures, as a user's own models would
be: a fixed seed per model draws its input size, stem, stages of blocks
(residual, inverted residual with squeeze-excitation, inception branches,
fire modules, channel shuffle with chunk, dilated convs, LayerNorm + GELU
MLPs over channels with layer scale), its activation kinds and its head
(classification, or a UNet-style segmentation head up-sampling by
transposed convs or by bilinear Resize to sizes taken from the skip
connections). Nothing here was tuned for: the generator draws, Tessera must
run what it draws.

Weights and batch-norm calibration, file names and the manifest are the
zoo's (scripts/export_zoo.py), so bench/zoo_vs_ort.sh --dir times them.

  /usr/bin/python3 scripts/export_random_archs.py OUT_DIR [COUNT] [NAME ...]
"""
import random
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import export_zoo

ACTIVATIONS = {
    "relu": nn.ReLU, "relu6": nn.ReLU6, "silu": nn.SiLU, "gelu": nn.GELU, "hardswish": nn.Hardswish,
    "mish": nn.Mish, "elu": nn.ELU, "selu": nn.SELU, "leaky_relu": lambda: nn.LeakyReLU(0.1),
    "softplus": nn.Softplus, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid, "celu": nn.CELU,
    "hardtanh": nn.Hardtanh, "prelu": nn.PReLU, "gelu_tanh": lambda: nn.GELU(approximate="tanh"),
}


def cbr(cin, cout, act, k=3, s=1, g=1, d=1):
    return nn.Sequential(nn.Conv2d(cin, cout, k, s, d * (k // 2), dilation=d, groups=g, bias=False),
                         nn.BatchNorm2d(cout), ACTIVATIONS[act]())


class Residual(nn.Module):
    def __init__(self, c, act, d=1):
        super().__init__()
        self.a, self.b = cbr(c, c, act, d=d), nn.Sequential(nn.Conv2d(c, c, 3, 1, d, dilation=d, bias=False),
                                                             nn.BatchNorm2d(c))
        self.act = ACTIVATIONS[act]()

    def forward(self, x):
        return self.act(x + self.b(self.a(x)))


class SqueezeExcite(nn.Module):
    def __init__(self, c, gate):
        super().__init__()
        self.f1, self.f2, self.gate = nn.Conv2d(c, max(8, c // 4), 1), nn.Conv2d(max(8, c // 4), c, 1), gate

    def forward(self, x):
        s = F.relu(self.f1(F.adaptive_avg_pool2d(x, 1)))
        return x * (F.hardsigmoid(self.f2(s)) if self.gate == "hard" else torch.sigmoid(self.f2(s)))


class InvertedResidual(nn.Module):
    def __init__(self, c, act, rng):
        super().__init__()
        e, k = c * rng.choice([2, 4, 6]), rng.choice([3, 5])
        se = SqueezeExcite(e, rng.choice(["hard", "sigmoid"])) if rng.random() < 0.5 else nn.Identity()
        self.body = nn.Sequential(cbr(c, e, act, k=1), cbr(e, e, act, k=k, g=e), se,
                                  nn.Conv2d(e, c, 1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        return x + self.body(x)


class Inception(nn.Module):
    def __init__(self, c, act):
        super().__init__()
        q = c // 4
        self.b1, self.b3 = cbr(c, q, act, k=1), nn.Sequential(cbr(c, q, act, k=1), cbr(q, q, act))
        self.b5 = nn.Sequential(cbr(c, q, act, k=1), cbr(q, q, act), cbr(q, q, act))
        self.bp = cbr(c, c - 3 * q, act, k=1)

    def forward(self, x):
        p = F.avg_pool2d(x, 3, 1, 1, count_include_pad=False)
        return torch.cat([self.b1(x), self.b3(x), self.b5(x), self.bp(p)], 1)


class Fire(nn.Module):
    def __init__(self, c, act):
        super().__init__()
        self.s, self.e1, self.e3 = cbr(c, c // 4, act, k=1), cbr(c // 4, c // 2, act, k=1), cbr(c // 4, c - c // 2, act)

    def forward(self, x):
        s = self.s(x)
        return torch.cat([self.e1(s), self.e3(s)], 1)


class ShuffleBlock(nn.Module):
    def __init__(self, c, act):
        super().__init__()
        h = c // 2
        self.body = nn.Sequential(cbr(h, h, act, k=1), cbr(h, h, "relu", g=h), cbr(h, h, act, k=1))

    def forward(self, x):
        a, b = x.chunk(2, dim=1)
        y = torch.cat([a, self.body(b)], 1)
        n, c, h, w = y.shape
        return y.reshape(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w)


class ChannelMlp(nn.Module):  # ConvNeXt-style: depthwise conv, LayerNorm and GELU MLP over channels, layer scale
    def __init__(self, c, act):
        super().__init__()
        self.dw, self.ln = nn.Conv2d(c, c, 7, 1, 3, groups=c), nn.LayerNorm(c)
        self.f1, self.f2, self.act = nn.Linear(c, 4 * c), nn.Linear(4 * c, c), ACTIVATIONS[act]()
        self.scale = nn.Parameter(torch.full((c,), 0.3))

    def forward(self, x):
        y = self.ln(self.dw(x).permute(0, 2, 3, 1))
        return x + (self.f2(self.act(self.f1(y))) * self.scale).permute(0, 3, 1, 2)


def block(kind, c, act, rng):
    if kind == "residual":
        return Residual(c, act)
    if kind == "dilated":
        return Residual(c, act, d=rng.choice([2, 3]))
    if kind == "inverted":
        return InvertedResidual(c, act, rng)
    if kind == "inception":
        return Inception(c, act)
    if kind == "fire":
        return Fire(c, act)
    if kind == "shuffle":
        return ShuffleBlock(c, act)
    return ChannelMlp(c, "gelu" if rng.random() < 0.7 else act)


class RandomNet(nn.Module):
    def __init__(self, seed):
        super().__init__()
        rng = random.Random(seed)
        self.task = rng.choice(["classification", "classification", "segmentation"])
        acts = rng.sample(sorted(ACTIVATIONS), 2)
        kinds = rng.sample(["residual", "dilated", "inverted", "inception", "fire", "shuffle", "mlp"], 3)
        self.kinds, self.acts = kinds, acts
        c = rng.choice([16, 24, 32])
        self.stem = cbr(3, c, acts[0], s=2) if rng.random() < 0.6 else nn.Sequential(
            nn.Conv2d(3, c, 4, 4), nn.BatchNorm2d(c))
        self.stages, self.downs, widths = nn.ModuleList(), nn.ModuleList(), []
        for s in range(rng.choice([3, 4])):
            cout = c * 2 if s else c
            down = rng.choice(["conv", "maxpool", "avgpool"]) if s else "none"
            self.downs.append(cbr(c, cout, acts[s % 2], s=2) if down == "conv" else nn.Sequential(
                nn.MaxPool2d(2) if down == "maxpool" else nn.AvgPool2d(2), cbr(c, cout, acts[s % 2], k=1))
                if down != "none" else nn.Identity())
            c = cout
            self.stages.append(nn.Sequential(*[block(rng.choice(kinds), c, acts[(s + b) % 2], rng)
                                               for b in range(rng.choice([1, 2, 3]))]))
            widths.append(c)
        if self.task == "classification":
            self.head = nn.Linear(c, rng.choice([10, 100, 1000]))
        else:
            self.transposed = rng.random() < 0.5
            self.ups, self.fuse = nn.ModuleList(), nn.ModuleList()
            for w in reversed(widths[:-1]):
                self.ups.append(nn.ConvTranspose2d(c, w, 2, 2) if self.transposed else nn.Conv2d(c, w, 1))
                self.fuse.append(cbr(2 * w, w, acts[0]))
                c = w
            self.head = nn.Conv2d(c, rng.choice([2, 5, 21]), 1)
        self.size = rng.choice([96, 128, 160, 192])
        self.constructs = "+".join(kinds + acts) + ("" if self.task == "classification" else
                                                    "+unet " + ("convtranspose" if self.transposed else "resize"))

    def forward(self, x):
        x, skips = self.stem(x), []
        for down, stage in zip(self.downs, self.stages):
            x = stage(down(x))
            skips.append(x)
        if self.task == "classification":
            return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))
        for up, fuse, skip in zip(self.ups, self.fuse, reversed(skips[:-1])):
            x = up(x) if self.transposed else F.interpolate(up(x), size=skip.shape[-2:], mode="bilinear",
                                                            align_corners=False)
            x = fuse(torch.cat([x, skip], 1))
        return self.head(x)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    names = sys.argv[2:]
    count = int(names.pop(0)) if names and names[0].isdigit() else 12
    zoo = {}
    for k in range(count):
        net = RandomNet(1000 + k)
        zoo[f"random{k:02d}"] = (lambda k=k: RandomNet(1000 + k), (3, net.size, net.size), net.task, net.constructs)
    export_zoo.ZOO = zoo  # the zoo's export, manifest and checks, over these models
    sys.argv = sys.argv[:2] + names
    export_zoo.main()


if __name__ == "__main__":
    main()
