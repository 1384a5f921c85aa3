#!/usr/bin/env bash
# Conv kernel selection: the hand-set thresholds (--select heuristic)
# against each conv's candidates measured once on this machine (--select
# measured) and, with PREDICTOR set, ranked by the op runtime predictor
# (--select predicted), alternating in rounds so that every mode sees the
# same phases of the VM's drifting speed (the order reversed every other
# round). The measured choices are cached
# first (one compile, not timed); each round then times REPS runs of each
# mode: p50 latency at batch 1, ms per batch end to end at batch 8. The
# last line per model: the median of each mode over the rounds, and the
# median and range of the per-round ratios heuristic / mode (above 1: the
# mode is faster).
#
#   bash bench/select_vs_heuristic.sh BATCH ROUNDS REPS MODEL.onnx...
#   PREDICTOR=predictor.json bash bench/select_vs_heuristic.sh 1 5 20 build/models/resnet50.onnx
set -euo pipefail
cd "$(dirname "$0")/.."
b=${1:?usage: select_vs_heuristic.sh BATCH ROUNDS REPS MODEL.onnx...}; rounds=${2:?}; reps=${3:?}; shift 3
cache=$(mktemp /tmp/tessera_select_cache.XXXXXX.json); rm -f "$cache"
trap 'rm -f "$cache"' EXIT
modes=(heuristic measured); [ -n "${PREDICTOR:-}" ] && modes+=(predicted)
med() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
range() { echo "$(printf '%s\n' "$@" | sort -g | head -1)-$(printf '%s\n' "$@" | sort -g | tail -1)"; }
input_for() {  # the model's input at this batch, when prepare_models.sh made one
  local base=${1%.onnx} f
  for f in "${base}_input_b$b.npy" "${base}_input.npy"; do
    [ "$b" = 1 ] && [ "$f" = "${base}_input.npy" ] && continue
    [ -f "$f" ] && { echo "--input $f"; return; }
  done
}
ms() {  # ms MODEL MODE: the batch's ms
  local out t
  # shellcheck disable=SC2046  # --input FILE splits into two words
  local extra=()
  [ "$2" = measured ] && extra=(--select-cache "$cache")
  [ "$2" = predicted ] && extra=(--predictor "$PREDICTOR")
  out=$(./build/release/tessera bench "$1" --batch "$b" --iterations "$reps" --select "$2" "${extra[@]}" \
        $(input_for "$1") 2>&1)
  if [ "$b" = 1 ]; then t=$(echo "$out" | awk '/latency: +p50/ {print $3}')
  else t=$(echo "$out" | awk '/end to end:/ {gsub(/\(/, "", $6); print $6}'); fi
  [ -n "$t" ] || { echo "$out" >&2; return 1; }
  echo "$t"
}
for m in "$@"; do
  ./build/release/tessera bench "$m" --batch "$b" --iterations 1 --select measured --select-cache "$cache" >/dev/null
  # How many convs each mode moved off the thresholds' kernel (0: it times the same program as heuristic).
  declare -A switched=()
  for mode in "${modes[@]:1}"; do
    extra=(--select-cache "$cache"); [ "$mode" = predicted ] && extra=(--predictor "$PREDICTOR")
    switched[$mode]=$(./build/release/tessera run "$m" --batch "$b" --select "$mode" "${extra[@]}" --explain 2>&1 |
                      grep -c "(Conv2dConfig::algorithm)" || true)
  done
  declare -A times=() ratios=()
  for r in $(seq "$rounds"); do
    line="round $r:"
    # Odd rounds in order, even rounds reversed: no mode always runs first.
    order=("${modes[@]}")
    if [ $((r % 2)) = 0 ]; then order=(); for ((i = ${#modes[@]} - 1; i >= 0; i--)); do order+=("${modes[$i]}"); done; fi
    for mode in "${order[@]}"; do
      t=$(ms "$m" "$mode"); times[$mode]+="$t "; line+=" $mode $t ms"
    done
    h=$(echo "${times[heuristic]}" | awk '{print $NF}')
    for mode in "${modes[@]:1}"; do
      t=$(echo "${times[$mode]}" | awk '{print $NF}')
      ratios[$mode]+="$(awk -v h="$h" -v t="$t" 'BEGIN {printf "%.3f", h / t}') "
    done
    echo "$line"
  done
  # shellcheck disable=SC2086  # the lists split into words
  summary="$(basename "$m" .onnx) batch $b, $rounds rounds of $reps: heuristic $(med ${times[heuristic]}) ms"
  for mode in "${modes[@]:1}"; do
    # shellcheck disable=SC2086
    summary+=", $mode $(med ${times[$mode]}) ms (${switched[$mode]} convs switched; heuristic/$mode $(med ${ratios[$mode]}), range $(range ${ratios[$mode]}))"
  done
  echo "$summary"
  unset times ratios switched
done
