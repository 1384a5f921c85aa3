#!/usr/bin/env python3
"""Sums of per-launch medians by layer shape, from a `tessera bench --profile` trace.

Folds the trace's replays into each launch's median (as profile_summary.py
does), then sums the launches of each shape key: for convs
"H:CIN-COUT:rKsS" (input height, channels, kernel size, stride), else the
op's name ("max_pool2d"). Prints the requested keys (default: the eight
largest) and the total, on one line, so that alternated runs line up:

    python3 bench/launch_sums.py TRACE.json 14:256-1024:r1s1,max_pool2d
"""
import json
import re
import sys

from profile_summary import replay_length

CONV = re.compile(r"conv2d:n(\d+)h(\d+)w(\d+)c(\d+)k(\d+):r(\d+)x\d+s(\d+)")


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: launch_sums.py TRACE.json [KEY,KEY,...]")
    events = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
    events.sort(key=lambda e: e["ts"])
    n = replay_length(events)
    replays = len(events) // n
    sums, total = {}, 0.0
    for i in range(n):
        dur = sorted(events[r * n + i]["dur"] for r in range(replays))[replays // 2]
        op = events[i].get("args", {}).get("op", "")
        m = CONV.match(op)
        key = f"{m.group(2)}:{m.group(4)}-{m.group(5)}:r{m.group(6)}s{m.group(7)}" if m else op.split(":")[0]
        sums[key] = sums.get(key, 0.0) + dur
        total += dur
    keys = sys.argv[2].split(",") if len(sys.argv) == 3 and sys.argv[2] else sorted(sums, key=lambda k: -sums[k])[:8]
    print(" ".join(f"{k}={sums.get(k, 0.0) / 1e3:.3f}" for k in keys), f"total={total / 1e3:.2f}")


if __name__ == "__main__":
    main()
