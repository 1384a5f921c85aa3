#!/usr/bin/env bash
# Two or more builds of `tessera` (or one build under different environment
# settings) alternating on one model, so that each sees the same phases of
# the VM's drifting speed: per round and variant, the sums of per-launch
# medians by layer shape (bench/launch_sums.py). A variant is a path to a
# tessera binary, optionally followed by VAR=VALUE settings joined with '+'
# ("build/release/tessera+TESSERA_X=1").
#
#   bash bench/alternate_builds.sh MODEL BATCH ROUNDS KEYS VARIANT... [-- BENCH_OPTION...]
#   e.g. cp build/release/tessera /tmp/tessera_old   # before the change, then rebuild
#        bash bench/alternate_builds.sh resnet50 1 4 14:256-1024:r1s1,max_pool2d /tmp/tessera_old build/release/tessera
set -euo pipefail
cd "$(dirname "$0")/.."
m=$1 b=$2 rounds=$3 keys=$4
shift 4
variants=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do variants+=("$1"); shift; done
[ $# -gt 0 ] && shift  # the rest: options for `tessera bench` (e.g. --dtype bfloat16)
d=build/models
in="$d/${m}_input_b1.npy"; [ "$b" = 1 ] || in="$d/${m}_input.npy"
iters=20; [ "$b" = 1 ] || iters=5
trace=$(mktemp --suffix=.json)
trap 'rm -f "$trace"' EXIT
for ((r = 1; r <= rounds; ++r)); do
  for v in "${variants[@]}"; do
    IFS=+ read -r -a parts <<< "$v"
    env "${parts[@]:1}" "${parts[0]}" bench "$d/$m.onnx" --iterations "$iters" --input "$in" --profile "$trace" "$@" >/dev/null
    echo "round $r $v $(python3 bench/launch_sums.py "$trace" "$keys")"
  done
done
