#!/usr/bin/env python3
"""Per-layer float32 conv2d, Tessera beside ONNX Runtime, alternated layer by layer.

bench/conv_vs_ort.sh times ONNX Runtime's one-layer models first and Tessera's
layers after, minutes apart; on this VM a layer's speed drifts by several
percent between such windows (and the whole VM runs up to twice as slow for
seconds at a time), as much as the two engines differ on layers that both run
at the FMA peak. So this script times each layer with both engines back to
back, within about a second, in an order that alternates from layer to layer
and round to round, ROUNDS times, and prints per layer the median over rounds
of each engine's GFLOP/s and of their ratio, with its range (each ratio from
one pair of back-to-back timings), and a distribution-free confidence interval
for that median ratio (order statistics of the rounds' ratios, at least 95%
coverage by the binomial sign test; 6 rounds or more): a layer counts as
slower than ONNX Runtime beyond the VM's drift only where the whole interval
lies under 1.00. Both engines' times are kernel-only, by
their own profilers: ONNX Runtime's median Conv node time over REPS runs
(bench/ort/time_models.js; its binding's per-run overhead is not the
layer's), and Tessera's median launch time per call over 150 back-to-back
calls (bench_conv_f32 --kernel-time; the host's dispatch, 3-5 us per call,
is not counted either).

    /usr/bin/python3 bench/conv_vs_ort_rounds.py [ROUNDS] [SET | SET.LAYER ...]
    e.g. /usr/bin/python3 bench/conv_vs_ort_rounds.py 5 resnet50 unet
         /usr/bin/python3 bench/conv_vs_ort_rounds.py 9 unet.dec3_256-128 unet.dec4_512-256

Needs what bench/conv_vs_ort.sh sets up (run it once first): python3-onnx,
node with bench/ort/node_modules, build/release/bench_conv_f32.
"""
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROW = re.compile(r"^\| (\S+) \| ([\d.]+) \| (\d+) \| ([\d.]+) \|$")
REPS = "15"


def ort_ms(layer_file, models):
    out = subprocess.run(["node", "bench/ort/time_models.js", layer_file, models, REPS], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    return float(out.split()[1])


def tessera_ms(layer_file):
    out = subprocess.run(["./build/release/bench_conv_f32", layer_file, "--kernel-time"], cwd=ROOT, check=True, capture_output=True,
                         text=True).stdout
    for line in out.splitlines():
        m = ROW.match(line)
        if m:
            return float(m.group(2))
    sys.exit(f"bench_conv_f32 printed no layer row:\n{out}")


def median_ci(values, alpha=0.05):
    """The sign test's distribution-free interval for the median of `values`:
    (low, high, coverage), the k-th smallest and k-th largest values for the
    largest k whose two tails each hold at most alpha / 2 of Binomial(n, 1/2);
    None below 6 values (no k keeps 95%)."""
    n, xs = len(values), sorted(values)
    tail, k = 0.0, 0  # tail: P(B <= k - 1)
    while True:
        nxt = tail + math.comb(n, k) / 2 ** n  # P(B <= k)
        if nxt > alpha / 2:
            break
        tail, k = nxt, k + 1
    if k == 0:
        return None
    return xs[k - 1], xs[n - k], 1 - 2 * tail


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    sets = set(sys.argv[2:]) or {"resnet50", "unet"}
    with tempfile.TemporaryDirectory() as work:
        lines = [line for line in open(os.path.join(ROOT, "bench/layers/conv_layers.txt"))
                 if line.strip() and not line.startswith("#")
                 and (line.split()[0] in sets or ".".join(line.split()[:2]) in sets)]
        if not lines:
            sys.exit(f"no layer of bench/layers/conv_layers.txt matches {sorted(sets)}")
        layers = os.path.join(work, "layers.txt")
        with open(layers, "w") as out:
            out.writelines(lines)
        models = os.path.join(work, "models")
        subprocess.run(["/usr/bin/python3", "bench/ort/make_conv_models.py", layers, models], cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL)
        gflop, files = {}, {}
        for i, line in enumerate(lines):
            p = line.split()
            h, w, c, k, r, s = map(int, p[2:8])
            groups = int(p[9]) if len(p) > 9 else 1
            oh, ow = (h + 2 * (r // 2) - r) // s + 1, (w + 2 * (r // 2) - r) // s + 1
            key = f"{p[0]}.{p[1]}"
            gflop[key] = 2.0 * oh * ow * k * (c // groups) * r * r / 1e9
            files[key] = os.path.join(work, f"layer{i}.txt")
            with open(files[key], "w") as f:
                f.write(line)
        tess, ort = {}, {}
        for i in range(rounds):
            for j, key in enumerate(gflop):
                # Which engine goes first alternates by layer and by round.
                engines = [("ort", lambda: ort_ms(files[key], models)), ("tessera", lambda: tessera_ms(files[key]))]
                if (i + j) % 2:
                    engines.reverse()
                for name, run in engines:
                    (ort if name == "ort" else tess).setdefault(key, []).append(gflop[key] / (run() / 1e3))
            print(f"round {i + 1} of {rounds} done", file=sys.stderr)
    print(f"| layer | Tessera f32 GFLOP/s | ONNX Runtime f32 GFLOP/s | Tessera / ORT, median (range) over {rounds} rounds "
          "| confidence interval of the median ratio | Tessera faster in |")
    print("|---|---|---|---|---|---|")
    below, slower, faster, coverage = 0, 0, 0, None
    for key in gflop:
        if key not in tess or key not in ort:
            continue
        ratios = [t / o for t, o in zip(tess[key], ort[key])]
        med = statistics.median(ratios)
        below += med < 1.0
        ci = median_ci(ratios)
        interval = "-"
        if ci:
            low, high, coverage = ci
            slower += high < 1.0
            faster += low > 1.0
            interval = f"{low:.3f}-{high:.3f}" + (" (slower)" if high < 1.0 else " (faster)" if low > 1.0 else "")
        wins = sum(r > 1.0 for r in ratios)
        print(f"| {key} | {statistics.median(tess[key]):.0f} | {statistics.median(ort[key]):.0f} | "
              f"{med:.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) | {interval} | {wins} of {len(ratios)} rounds |")
    print(f"\n{below} layer(s) with a median ratio under 1.00x")
    if coverage is None:
        print("(6 rounds or more give each median ratio a 95% confidence interval)")
    else:
        print(f"{slower} layer(s) slower than ONNX Runtime and {faster} faster beyond the rounds' spread "
              f"(the {coverage:.1%} interval of the median ratio wholly under, or over, 1.00)")


if __name__ == "__main__":
    main()
