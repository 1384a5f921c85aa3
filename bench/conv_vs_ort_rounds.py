#!/usr/bin/env python3
"""Per-layer float32 conv2d, Tessera beside ONNX Runtime, in alternating rounds.

bench/conv_vs_ort.sh times ONNX Runtime's one-layer models first and Tessera's
layers after, minutes apart; on this VM a layer's speed drifts by several
percent between such windows, as much as the two engines differ on layers
that both run at the FMA peak. This script alternates the two passes ROUNDS
times (ONNX Runtime, Tessera, ONNX Runtime, ...), each pass over the whole
layer file, and prints per layer the median over rounds of each engine's
GFLOP/s and of their ratio, with its range.

    /usr/bin/python3 bench/conv_vs_ort_rounds.py [ROUNDS] [SET ...]
    e.g. /usr/bin/python3 bench/conv_vs_ort_rounds.py 3 resnet50 unet

Needs what bench/conv_vs_ort.sh sets up (run it once first): python3-onnx,
node with bench/ort/node_modules, build/release/bench_conv.
"""
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROW = re.compile(r"^\| (\S+) \(x\d+\) \| [\d.]+ \| (\d+) \(")


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    sets = set(sys.argv[2:]) or {"resnet50", "unet"}
    with tempfile.TemporaryDirectory() as work:
        layers = os.path.join(work, "layers.txt")
        with open(os.path.join(ROOT, "bench/layers/conv_layers.txt")) as f, open(layers, "w") as out:
            for line in f:
                if line.startswith("#") or not line.strip() or line.split()[0] in sets:
                    out.write(line)
        models = os.path.join(work, "models")
        subprocess.run(["/usr/bin/python3", "bench/ort/make_conv_models.py", layers, models], cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL)
        gflop = {}
        for line in open(layers):
            p = line.split()
            if line.startswith("#") or len(p) < 9:
                continue
            h, w, c, k, r, s = map(int, p[2:8])
            groups = int(p[9]) if len(p) > 9 else 1
            oh, ow = (h + 2 * (r // 2) - r) // s + 1, (w + 2 * (r // 2) - r) // s + 1
            gflop[f"{p[0]}.{p[1]}"] = 2.0 * oh * ow * k * (c // groups) * r * r / 1e9
        tess, ort = {}, {}
        for i in range(rounds):
            ort_file = os.path.join(work, f"ort{i}.txt")
            with open(ort_file, "w") as f:
                subprocess.run(["node", "bench/ort/time_models.js", layers, models, "15"], cwd=ROOT, check=True,
                               stdout=f)
            for line in open(ort_file):
                key, ms = line.split()
                ort.setdefault(key, []).append(gflop[key] / (float(ms) / 1e3))
            out = subprocess.run(["./build/release/bench_conv", "--layers", layers], cwd=ROOT, check=True,
                                 capture_output=True, text=True).stdout
            current = None
            for line in out.splitlines():
                if line.startswith("## "):
                    current = {"ResNet-50": "resnet50", "Vanilla UNet": "unet", "MobileNetV2": "mobilenet_v2"}.get(
                        line[3:].split(",")[0])
                m = ROW.match(line)
                if m and current:
                    tess.setdefault(f"{current}.{m.group(1)}", []).append(float(m.group(2)))
            print(f"round {i + 1} of {rounds} done", file=sys.stderr)
    print(f"| layer | Tessera f32 GFLOP/s | ONNX Runtime f32 GFLOP/s | Tessera / ORT, median (range) over {rounds} rounds |")
    print("|---|---|---|---|")
    below = 0
    for key in gflop:
        if key not in tess or key not in ort:
            continue
        ratios = [t / o for t, o in zip(tess[key], ort[key])]
        med = statistics.median(ratios)
        below += med < 1.0
        print(f"| {key} | {statistics.median(tess[key]):.0f} | {statistics.median(ort[key]):.0f} | "
              f"{med:.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) |")
    print(f"\n{below} layer(s) with a median ratio under 1.00x")


if __name__ == "__main__":
    main()
