#!/usr/bin/env bash
# One model, Tessera and ONNX Runtime (float32, 2 threads) alternating in
# short rounds, so that both see the same phases of the VM's drifting speed
# (same-layer times move 20-40% within minutes here). Each round times
# REPS runs of each; the line per round gives both medians (batch 1: p50
# latency, one batch at a time; batch 8: ms per batch end to end) and
# their ratio (above 1: Tessera faster). The last line: the median over
# the rounds of each, and of the ratios.
#
#   bash bench/alternate_vs_ort.sh MODEL [BATCH] [ROUNDS] [REPS] [-- TESSERA BENCH OPTIONS]
#   e.g. bash bench/alternate_vs_ort.sh mobilenet_v2 1 15 30
set -euo pipefail
cd "$(dirname "$0")/.."
m=${1:?usage: alternate_vs_ort.sh MODEL [BATCH] [ROUNDS] [REPS] [-- OPTIONS]}
b=${2:-1}; rounds=${3:-10}; reps=${4:-20}
shift $(($# < 4 ? $# : 4)); [ "${1:-}" = "--" ] && shift
d=build/models
[ -f "$d/$m.onnx" ] || bash scripts/prepare_models.sh "$d" >/dev/null
in="$d/${m}_input_b1.npy"; [ "$b" = 8 ] && in="$d/${m}_input.npy"
ratios=(); orts=(); tess=()
for r in $(seq "$rounds"); do
  o=$(node bench/ort/run_model.js "$d/$m.onnx" "$in" /tmp/tessera_alt_ort.npy "$reps" | awk '{print $3}')
  out=$(./build/release/tessera bench "$d/$m.onnx" --iterations "$reps" --input "$in" "$@" 2>&1)
  if [ "$b" = 1 ]; then t=$(echo "$out" | awk '/latency: +p50/ {print $3}')
  else t=$(echo "$out" | awk '/end to end:/ {gsub(/\(/, "", $6); print $6}'); fi
  [ -n "$t" ] || { echo "$out" >&2; exit 1; }
  ratio=$(awk -v o="$o" -v t="$t" 'BEGIN {printf "%.3f", o / t}')
  echo "round $r: ORT $o ms, Tessera $t ms, ORT/Tessera $ratio"
  orts+=("$o"); tess+=("$t"); ratios+=("$ratio")
done
med() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
echo "$m batch $b, $rounds rounds of $reps: median ORT $(med "${orts[@]}") ms, Tessera $(med "${tess[@]}") ms, ORT/Tessera $(med "${ratios[@]}") (range $(printf '%s\n' "${ratios[@]}" | sort -g | head -1)-$(printf '%s\n' "${ratios[@]}" | sort -g | tail -1))"
