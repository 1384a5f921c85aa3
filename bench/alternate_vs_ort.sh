#!/usr/bin/env bash
# One model, Tessera and ONNX Runtime (float32, 2 threads) alternating in
# short rounds, so that both see the same phases of the VM's drifting speed
# (same-layer times move 20-40% within minutes here). Each round times
# REPS runs of each; the line per round gives both medians (batch 1: p50
# latency, one batch at a time; batch 8: ms per batch end to end) and
# their ratio (above 1: Tessera faster). The last line: the median over
# the rounds of each, and of the ratios.
#
# With TESSERA_ALSO set (say "--math-fidelity LoFi"), each round also times
# Tessera with those options added, after the first two, and the lines give
# its time and ratio too.
#
#   bash bench/alternate_vs_ort.sh MODEL [BATCH] [ROUNDS] [REPS] [-- TESSERA BENCH OPTIONS]
#   e.g. bash bench/alternate_vs_ort.sh mobilenet_v2 1 15 30
#        TESSERA_ALSO="--math-fidelity LoFi" bash bench/alternate_vs_ort.sh resnet50 1 7 20
set -euo pipefail
cd "$(dirname "$0")/.."
m=${1:?usage: alternate_vs_ort.sh MODEL [BATCH] [ROUNDS] [REPS] [-- OPTIONS]}
b=${2:-1}; rounds=${3:-10}; reps=${4:-20}
shift $(($# < 4 ? $# : 4)); [ "${1:-}" = "--" ] && shift
d=build/models
[ -f "$d/$m.onnx" ] || bash scripts/prepare_models.sh "$d" >/dev/null
in="$d/${m}_input_b1.npy"; [ "$b" = 8 ] && in="$d/${m}_input.npy"
also=${TESSERA_ALSO:-}
ratios=(); orts=(); tess=(); also_t=(); also_r=()
tessera_ms() {  # tessera_ms OPTIONS...: the batch's ms (p50 latency at batch 1)
  local out t
  out=$(./build/release/tessera bench "$d/$m.onnx" --iterations "$reps" --input "$in" "$@" 2>&1)
  if [ "$b" = 1 ]; then t=$(echo "$out" | awk '/latency: +p50/ {print $3}')
  else t=$(echo "$out" | awk '/end to end:/ {gsub(/\(/, "", $6); print $6}'); fi
  [ -n "$t" ] || { echo "$out" >&2; return 1; }
  echo "$t"
}
for r in $(seq "$rounds"); do
  o=$(node bench/ort/run_model.js "$d/$m.onnx" "$in" /tmp/tessera_alt_ort.npy "$reps" | awk '{print $3}')
  t=$(tessera_ms "$@")
  ratio=$(awk -v o="$o" -v t="$t" 'BEGIN {printf "%.3f", o / t}')
  line="round $r: ORT $o ms, Tessera $t ms, ORT/Tessera $ratio"
  if [ -n "$also" ]; then
    # shellcheck disable=SC2086  # the options split into words
    a=$(tessera_ms "$@" $also)
    ar=$(awk -v o="$o" -v t="$a" 'BEGIN {printf "%.3f", o / t}')
    line+="; with $also $a ms, ORT/Tessera $ar"
    also_t+=("$a"); also_r+=("$ar")
  fi
  echo "$line"
  orts+=("$o"); tess+=("$t"); ratios+=("$ratio")
done
med() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
range() { echo "$(printf '%s\n' "$@" | sort -g | head -1)-$(printf '%s\n' "$@" | sort -g | tail -1)"; }
echo "$m batch $b, $rounds rounds of $reps: median ORT $(med "${orts[@]}") ms, Tessera $(med "${tess[@]}") ms, ORT/Tessera $(med "${ratios[@]}") (range $(range "${ratios[@]}"))"
if [ -n "$also" ]; then
  echo "  with $also: Tessera $(med "${also_t[@]}") ms, ORT/Tessera $(med "${also_r[@]}") (range $(range "${also_r[@]}"))"
fi
