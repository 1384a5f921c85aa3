#!/usr/bin/python3
"""Exports small models, one per construct users write that is not a
torchvision architecture: attention written with einsum, a detection head's
top-k and gather, a detector's non-maximum suppression (output shapes that
depend on the data) and a two-stage detector's RoiAlign after it, a segmentation head's argmax, a CRNN recogniser's
bidirectional LSTM, a GRU, grid_sample (a flow warp), bicubic upsampling,
3-D convolution, normalize / std / cumsum / flip / where / clamp /
pixel_unshuffle, and a statically quantized net (PyTorch's eager-mode
quantization, exported as QuantizeLinear / DequantizeLinear). Fixed-seed weights, exported by Debian's PyTorch (run with
/usr/bin/python3); each is checked against PyTorch's outputs.

For each NAME the output directory receives NAME.onnx, NAME_input.npy (a
batch of 2) and NAME_torch.npz (PyTorch's outputs, keyed out0, out1, ...).

  /usr/bin/python3 scripts/export_constructs.py OUT_DIR [NAME ...]
"""
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision


class EinsumAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv, self.proj = nn.Conv2d(16, 48, 1), nn.Conv2d(16, 8, 1)

    def forward(self, x):
        b, c, h, w = x.shape
        q, k, v = self.qkv(x).reshape(b, 3, 2, 8, h * w).unbind(1)
        a = torch.einsum("bhdn,bhdm->bhnm", q, k).mul(8 ** -0.5).softmax(-1)
        return self.proj(torch.einsum("bhnm,bhdm->bhdn", a, v).reshape(b, 16, h, w))


class TopKHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(16, 5, 1)

    def forward(self, x):
        p = self.c(x).flatten(2).transpose(1, 2)
        scores, idx = p[..., 4].sigmoid().topk(10, dim=1)
        return scores, torch.gather(p[..., :4], 1, idx.unsqueeze(-1).expand(-1, -1, 4))


class SegArgmax(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(16, 6, 3, padding=1)

    def forward(self, x):
        return self.c(x).argmax(1)


class Misc(nn.Module):
    def __init__(self):
        super().__init__()
        self.c, self.pu, self.c2 = nn.Conv2d(16, 16, 3, padding=1), nn.PixelUnshuffle(2), nn.Conv2d(64, 8, 1)

    def forward(self, x):
        y = F.normalize(self.c(x), dim=1) * 4
        y = y - y.std(dim=(2, 3), keepdim=True)
        y = torch.where(y > 0.1, y, y * 0.5) + torch.cumsum(y, dim=3) * 0.01
        return self.c2(self.pu(torch.flip(y, dims=[3]).clamp(-2, 2)))


class CrnnHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(16, 32, 3, padding=1)
        self.rnn = nn.LSTM(32, 24, bidirectional=True, batch_first=True)
        self.fc = nn.Linear(48, 11)

    def forward(self, x):
        y, _ = self.rnn(F.relu(self.c(x)).mean(2).transpose(1, 2))
        return self.fc(y).log_softmax(-1)


class GruHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn, self.fc = nn.GRU(16, 20, num_layers=2, batch_first=True), nn.Linear(20, 7)

    def forward(self, x):
        y, _ = self.rnn(x.mean(2).transpose(1, 2))
        return self.fc(y)


class FlowWarp(nn.Module):
    def __init__(self):
        super().__init__()
        self.c, self.c2 = nn.Conv2d(16, 2, 3, padding=1), nn.Conv2d(16, 4, 1)

    def forward(self, x):
        flow = torch.tanh(self.c(x)).permute(0, 2, 3, 1)
        return self.c2(F.grid_sample(x, flow, mode="bilinear", padding_mode="border", align_corners=False))


class Bicubic(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(16, 4, 3, padding=1)

    def forward(self, x):
        return F.interpolate(self.c(x), scale_factor=2, mode="bicubic", align_corners=False)


class Conv3d(nn.Module):
    def __init__(self):
        super().__init__()
        self.c, self.bn = nn.Conv3d(16, 8, 3, padding=1), nn.BatchNorm3d(8)

    def forward(self, x):
        return F.relu(self.bn(self.c(torch.stack([x, x.flip(3), x * 0.5, -x], 2)))).mean(2)


class Quantized(nn.Module):
    """Conv + ReLU, a strided conv, max pool, a quantized residual add, a 1x1
    conv: int8 per-channel weights and uint8 activations (fbgemm), calibrated
    on random batches (prepare_for_export)."""

    def __init__(self):
        super().__init__()
        q = torch.ao.quantization
        self.q, self.dq = q.QuantStub(), q.DeQuantStub()
        self.c1, self.r1 = nn.Conv2d(16, 16, 3, padding=1), nn.ReLU()
        self.c2, self.r2 = nn.Conv2d(16, 16, 3, stride=2, padding=1), nn.ReLU()
        self.pool, self.add = nn.MaxPool2d(2, ceil_mode=True), nn.quantized.FloatFunctional()
        self.c3 = nn.Conv2d(16, 8, 1)

    def forward(self, x):
        x = self.r1(self.c1(self.q(x)))
        y = self.r2(self.c2(x))
        return self.dq(self.c3(self.add.add(self.pool(x), y)))

    def prepare_for_export(self):
        q = torch.ao.quantization
        self.qconfig = q.get_default_qconfig("fbgemm")
        q.fuse_modules(self, [["c1", "r1"], ["c2", "r2"]], inplace=True)
        q.prepare(self, inplace=True)
        g = torch.Generator().manual_seed(2)
        for _ in range(8):
            self(torch.randn(2, 16, 8, 12, generator=g))
        return q.convert(self)


class DetNms(nn.Module):
    """A detector's post-processing: boxes and scores from conv heads, then
    non-maximum suppression over the batch's images (torchvision's
    batched_nms: NonMaxSuppression) and the kept boxes, scores and indices,
    whose count depends on the data (Tessera runs them in a host tail)."""

    def __init__(self):
        super().__init__()
        self.box, self.cls = nn.Conv2d(16, 4, 3, padding=1), nn.Conv2d(16, 1, 3, padding=1)
        self.register_buffer("image", torch.arange(2).repeat_interleave(8 * 12))  # each box's image

    def forward(self, x):
        b = self.box(x).flatten(2).transpose(1, 2).reshape(-1, 4)
        xy, wh = b[:, :2] * 4.0, b[:, 2:].abs() * 4.0 + 1.0
        boxes = torch.cat([xy, xy + wh], 1)
        scores = self.cls(x).flatten().sigmoid()
        keep = torchvision.ops.batched_nms(boxes, scores, self.image, 0.3)
        return boxes[keep], scores[keep], keep


class DetRoi(nn.Module):
    """A two-stage detector's second stage: the proposals NMS keeps (a count
    that depends on the data), their features pooled from the backbone's map
    by RoiAlign (regions partly off the map included) and a Linear box head
    over them, all after the NMS (Tessera's host tail)."""

    def __init__(self):
        super().__init__()
        self.feat = nn.Conv2d(16, 8, 3, padding=1)
        self.box, self.cls = nn.Conv2d(16, 4, 3, padding=1), nn.Conv2d(16, 1, 3, padding=1)
        self.head = nn.Linear(8 * 3 * 3, 5)
        self.register_buffer("image", torch.arange(2).repeat_interleave(8 * 12))  # each box's image

    def forward(self, x):
        f = torch.relu(self.feat(x))
        b = self.box(x).flatten(2).transpose(1, 2).reshape(-1, 4)
        xy, wh = b[:, :2] * 4.0, b[:, 2:].abs() * 4.0 + 1.0
        boxes = torch.cat([xy, xy + wh], 1)
        scores = self.cls(x).flatten().sigmoid()
        keep = torchvision.ops.batched_nms(boxes, scores, self.image, 0.3)
        rois = torch.cat([self.image[keep].unsqueeze(1).to(boxes.dtype), boxes[keep]], 1)
        pooled = torchvision.ops.roi_align(f, rois, output_size=3, spatial_scale=1.0, sampling_ratio=2)
        return self.head(pooled.flatten(1)), rois


# name: (model, opset)
CONSTRUCTS = {
    "einsum_attention": (EinsumAttention, 13),
    "topk_head": (TopKHead, 13),
    "seg_argmax": (SegArgmax, 13),
    "misc_ops": (Misc, 13),
    "crnn_lstm": (CrnnHead, 13),
    "gru_head": (GruHead, 13),
    "flow_warp": (FlowWarp, 16),  # (GridSample is opset 16)
    "bicubic_up": (Bicubic, 13),
    "conv3d": (Conv3d, 13),
    "quantized": (Quantized, 13),
    "det_nms": (DetNms, 13),
    "det_roi": (DetRoi, 13),
}


def export(name, out_dir):
    cls, opset = CONSTRUCTS[name]
    torch.manual_seed(0)
    m = cls().eval()
    with torch.no_grad():
        for mod in m.modules():  # batch norms that do something
            if isinstance(mod, nn.modules.batchnorm._BatchNorm):
                mod.running_mean.uniform_(-0.5, 0.5), mod.running_var.uniform_(0.5, 2)
        if hasattr(m, "prepare_for_export"):
            m = m.prepare_for_export()
        x = torch.randn(2, 16, 8, 12, generator=torch.Generator().manual_seed(1))
        y = m(x)
    ys = y if isinstance(y, tuple) else (y,)
    names = [f"out{k}" for k in range(len(ys))]
    torch.onnx.export(m, x, os.path.join(out_dir, name + ".onnx"), opset_version=opset, input_names=["input"],
                      output_names=names)
    np.save(os.path.join(out_dir, name + "_input.npy"), x.numpy())
    np.savez(os.path.join(out_dir, name + "_torch.npz"), **{k: v.numpy() for k, v in zip(names, ys)})
    print("exported", name)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    for name in sys.argv[2:] or CONSTRUCTS:
        if name not in CONSTRUCTS:
            sys.exit(f"unknown construct '{name}'; known: {', '.join(CONSTRUCTS)}")
        export(name, out_dir)


if __name__ == "__main__":
    main()
