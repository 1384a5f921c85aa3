#!/usr/bin/env bash
# The model zoo (scripts/export_zoo.py: torchvision architectures with
# calibrated batch norms), Tessera float32 beside ONNX Runtime float32 (2
# threads), alternating in ROUNDS short rounds so that both see the same
# phases of the machine's drifting speed. Per model and batch: both medians
# (batch 1: p50 latency, one frame at a time; batch 8: ms per batch end to
# end), the median of the per-round ratios ORT/Tessera (above 1: Tessera
# faster) and their range, the lowest PCC over the outputs of Tessera's
# against ONNX Runtime's on the same input, and Tessera's host fallbacks.
# Prints a markdown table for bench/RESULTS.md.
#
#   bash bench/zoo_vs_ort.sh [--rounds R] [--batches "1 8"] [--dir DIR] [MODEL ...]   (default: the whole zoo)
#
# --dir build/models/random times the random architectures
# (scripts/export_random_archs.py) the same way.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=3; batches="1 8"; d=build/models/zoo
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) rounds=$2; shift 2;;
    --batches) batches=$2; shift 2;;
    --dir) d=$2; shift 2;;
    *) break;;
  esac
done
[ -f "$d/manifest.tsv" ] || bash scripts/prepare_models.sh build/models >/dev/null
[ -x build/release/tessera ] || { cmake --preset release >/dev/null && cmake --build --preset release --target tessera_cli >/dev/null; }
models=("$@"); ((${#models[@]})) || mapfile -t models < <(grep -v '^#' "$d/manifest.tsv" | cut -f1)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
med() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
range() { echo "$(printf '%s\n' "$@" | sort -g | head -1)-$(printf '%s\n' "$@" | sort -g | tail -1)"; }
echo "| model | task | batch | ORT f32 ms | Tessera f32 ms | ORT/Tessera (range) | min PCC vs ORT | host fallbacks |"
echo "|---|---|---|---|---|---|---|---|"
for m in "${models[@]}"; do
  task=$(awk -F'\t' -v m="$m" '$1 == m {print $2}' "$d/manifest.tsv")
  for b in $batches; do
    in="$d/${m}_input_b$b.npy"
    # Few repetitions for heavy models: about a second of work per timing.
    gflop=$(./build/release/tessera bench "$d/$m.onnx" --input "$in" --iterations 1 2>&1 |
            awk '/GFLOP per run/ {for (i = 1; i < NF; ++i) if ($(i + 1) == "GFLOP") print $i}')
    reps=$(awk -v g="${gflop:-1}" -v b="$b" 'BEGIN {r = int(15 / (g * b + 0.2)); print (r < 3) ? 3 : (r > 30 ? 30 : r)}')
    orts=(); tess=(); ratios=(); pcc=""; fallbacks=""
    for r in $(seq "$rounds"); do
      o=$(node bench/ort/run_model.js "$d/$m.onnx" "$in" "$tmp/ort" "$reps" | awk '{print $3}')
      # (a PCC below the bar fails the command but is still a timing: the table shows the PCC)
      out=$(./build/release/tessera bench "$d/$m.onnx" --iterations "$reps" --input "$in" --reference "$tmp/ort" 2>&1) ||
        echo "$out" | grep -q 'latency: *p50' || { echo "$out" >&2; echo "| $m | $task | $b | $o | error | | | |"; continue 2; }
      if [ "$b" = 1 ]; then t=$(echo "$out" | awk '/latency: +p50/ {print $3}')
      else t=$(echo "$out" | awk '/end to end:/ {gsub(/\(/, "", $6); print $6}'); fi
      p=$(echo "$out" | awk '/^PCC of/ {for (i = 1; i <= NF; ++i) if ($i ~ /^[-0-9.]+$/ && $(i + 1) ~ /^\(/) print $i}' | sort -g | head -1)
      fallbacks=$(echo "$out" | awk '/host fallback/ {for (i = 1; i < NF; ++i) if ($(i + 1) ~ /^host/) print $i}' | head -1)
      pcc=$(printf '%s\n' $pcc $p | sort -g | head -1)
      orts+=("$o"); tess+=("$t"); ratios+=("$(awk -v o="$o" -v t="$t" 'BEGIN {printf "%.3f", o / t}')")
    done
    echo "| $m | $task | $b | $(med "${orts[@]}") | $(med "${tess[@]}") | $(med "${ratios[@]}") ($(range "${ratios[@]}")) | $pcc | $fallbacks |"
  done
done
