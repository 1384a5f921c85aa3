#!/usr/bin/python3
"""PCC per op from `tessera compare --csv`, as a PNG.

    /usr/bin/python3 scripts/plot_compare.py compare.csv compare.png [THRESHOLD]

One point per op in execution order (x), its output's PCC against float32
(y, log scale of 1 - PCC so that 0.9999 and 0.99 are far apart), coloured by
the op's output format; the threshold as a line; the time share of each op as
bars below. Needs Debian's python3-matplotlib (it imports under
/usr/bin/python3).
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    path, png = sys.argv[1], sys.argv[2]
    threshold = float(sys.argv[3]) if len(sys.argv) > 3 else 0.999
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"{path}: no rows")
    x = list(range(len(rows)))
    gap = [max(1.0 - float(r["pcc"]), 1e-9) for r in rows]
    share = [100 * float(r["time_share"]) for r in rows]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(max(8, len(rows) * 0.12), 6), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 1]})
    colours = {"float32": "tab:blue", "bfloat16": "tab:orange"}
    for fmt in sorted({r["output_df"] for r in rows}):
        pts = [(i, g) for i, (r, g) in enumerate(zip(rows, gap)) if r["output_df"] == fmt]
        top.scatter([p[0] for p in pts], [p[1] for p in pts], s=12, label=f"output {fmt}",
                    color=colours.get(fmt, "tab:gray"))
    top.plot(x, gap, color="lightgray", linewidth=0.8, zorder=0)
    top.axhline(1.0 - threshold, color="tab:red", linestyle="--", linewidth=1, label=f"PCC {threshold}")
    top.set_yscale("log")
    top.invert_yaxis()
    top.set_ylabel("1 - PCC against float32\n(log; up is closer)")
    top.legend(loc="lower left", fontsize=8)
    top.grid(True, which="both", alpha=0.3)
    bottom.bar(x, share, color="tab:gray")
    bottom.set_ylabel("time %")
    bottom.set_xlabel("op (execution order)")
    fig.tight_layout()
    fig.savefig(png, dpi=120)


if __name__ == "__main__":
    main()
