#!/usr/bin/python3
"""Predicted against measured kernel time (log-log), one panel per op family, from the
held-out rows `tessera train-predictor --test-csv T.csv` writes.

    /usr/bin/python3 scripts/predictor_scatter.py T.csv OUT.png [--title TEXT]
"""
import argparse
import csv
import math
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("png")
    ap.add_argument("--title", default="")
    a = ap.parse_args()
    rows = defaultdict(list)
    with open(a.csv) as f:
        for r in csv.DictReader(f):
            rows[r["family"]].append((float(r["measured_ns"]) / 1e3, float(r["predicted_ns"]) / 1e3))
    families = sorted(rows)
    cols = min(4, len(families))
    n_rows = math.ceil(len(families) / cols)
    fig, axes = plt.subplots(n_rows, cols, figsize=(4 * cols, 4 * n_rows), squeeze=False)
    for ax, fam in zip(axes.flat, families):
        pts = rows[fam]
        m, p = [x for x, _ in pts], [y for _, y in pts]
        lo, hi = min(m + p) * 0.8, max(m + p) * 1.25
        ax.fill_between([lo, hi], [lo * 0.75, hi * 0.75], [lo * 1.25, hi * 1.25], color="0.92", label="±25%")
        ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="0.82", label="±10%")
        ax.plot([lo, hi], [lo, hi], color="0.4", lw=0.8)
        ax.scatter(m, p, s=6, alpha=0.6)
        within10 = sum(abs(y - x) <= 0.1 * x for x, y in pts) / len(pts)
        ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="measured (µs)",
               ylabel="predicted (µs)", title=f"{fam}: {len(pts)} test configs, {100 * within10:.0f}% within ±10%")
        ax.title.set_fontsize(9)
        ax.legend(loc="upper left", fontsize=7)
    for ax in list(axes.flat)[len(families):]:
        ax.axis("off")
    if a.title:
        fig.suptitle(a.title)
    fig.tight_layout()
    fig.savefig(a.png, dpi=110)


if __name__ == "__main__":
    main()
