#!/usr/bin/env python3
"""Summarise a `tessera bench --profile FILE.json` Chrome trace.

Groups launches by kernel and prints each conv launch with its FLOPs and
GFLOP/s, so a model's slow layers stand out. A trace of several replays of
one model is folded into one: each launch's median over the replays.

    python3 bench/profile_summary.py /tmp/r50.json [--top N] [--in-order]

--in-order lists every launch in the order the model runs them (to set
beside ONNX Runtime's per-node profile), instead of the longest N.
"""
import json
import re
import sys
from collections import defaultdict

CONV = re.compile(r"^conv(?:_transpose)?2d:n(\d+)h(\d+)w(\d+)c(\d+)k(\d+):r(\d+)x(\d+)s(\d+)x(\d+).*?g(\d+)")
OUT = re.compile(r"->f32\[([\d,]+)\]|->\w+\[([\d,]+)\]")


def conv_flops(desc):
    m = CONV.match(desc)
    if not m:
        return 0
    n, h, w, c, k, r, s, sy, sx, g = map(int, m.groups())
    if desc.startswith("conv_transpose2d"):
        return 2 * n * h * w * c * k * r * s // g
    oh, ow = -(-h // sy), -(-w // sx)
    shp = OUT.search(desc)
    if shp:
        dims = [int(x) for x in (shp.group(1) or shp.group(2)).split(",")]
        pix = 1
        for d in dims[:-1]:
            pix *= d
        return 2 * pix * c * k * r * s // g
    return 2 * n * oh * ow * c * k * r * s // g


def replay_length(events):
    """The shortest period of the launch sequence that divides it: one replay."""
    keys = [(e["name"], e.get("args", {}).get("op", "")) for e in events]
    for n in range(1, len(keys) + 1):
        if len(keys) % n == 0 and all(keys[i] == keys[i - n] for i in range(n, len(keys))):
            return n
    return len(keys)


def main():
    args = sys.argv[1:]
    top = 25
    in_order = "--in-order" in args
    if in_order:
        args.remove("--in-order")
    if "--top" in args:
        i = args.index("--top")
        top = int(args[i + 1])
        del args[i:i + 2]
    if len(args) != 1:
        sys.exit("usage: profile_summary.py TRACE.json [--top N] [--in-order]")
    events = [e for e in json.load(open(args[0]))["traceEvents"] if e.get("ph") == "X"]
    events.sort(key=lambda e: e["ts"])
    n = replay_length(events)
    if n < len(events):
        print(f"{len(events) // n} replays of {n} launches; each launch's median")
        folded = []
        for i in range(n):
            durs = sorted(events[r * n + i]["dur"] for r in range(len(events) // n))
            folded.append(dict(events[i], dur=durs[len(durs) // 2]))
        events = folded
    total = sum(e["dur"] for e in events)
    by_kernel = defaultdict(lambda: [0.0, 0, 0])
    rows = []
    for e in events:
        desc = e.get("args", {}).get("op", "")
        f = conv_flops(desc)
        k = by_kernel[e["name"]]
        k[0] += e["dur"]
        k[1] += 1
        k[2] += f
        rows.append((e["dur"], f, e["name"], desc.split(":RM")[0] if f else desc[:90]))
    print(f"total {total / 1e3:.2f} ms over {len(events)} launches")
    print(f"{'kernel':48} {'ms':>9} {'%':>6} {'n':>4} {'GFLOP/s':>8}")
    for name, (us, n, f) in sorted(by_kernel.items(), key=lambda kv: -kv[1][0]):
        gf = f"{f / us / 1e3:8.1f}" if f else ""
        print(f"{name:48} {us / 1e3:9.3f} {100 * us / total:6.1f} {n:4d} {gf}")
    if in_order:
        print("\nevery launch, in order:")
    else:
        print(f"\nlongest {top} launches:")
    for us, f, name, desc in rows if in_order else sorted(rows, reverse=True)[:top]:
        gf = f"{f / us / 1e3:7.1f} GF/s" if f else " " * 12
        print(f"{us / 1e3:8.3f} ms {gf}  {name:36} {desc}")


if __name__ == "__main__":
    main()
