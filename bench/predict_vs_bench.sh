#!/usr/bin/env bash
# Whole-model predicted latency (tessera predict MODEL, nothing run) beside the measured kernel
# time of the same compiled model (tessera bench --profile: the median over trace replays of the
# sum of its launches' kernel times; the median of REPEATS such runs, default 3, as a shared
# machine's runs differ by 10-40%), and their ratio, per model.
#   REPEATS=3 bash bench/predict_vs_bench.sh PREDICTOR.json [--dtype D] [--batch B] MODEL.onnx ...
set -euo pipefail
cli=${TESSERA_CLI:-./build/release/tessera}
predictor=$1; shift
opts=()
while [[ $# -gt 0 && $1 == --* ]]; do opts+=("$1" "$2"); shift 2; done
export TESSERA_CPU_L1_SIZE=${TESSERA_CPU_L1_SIZE:-1048576}
echo "| model | predicted ms | measured kernel ms | predicted / measured | ops predicted | not modeled |"
echo "|---|---|---|---|---|---|"
for m in "$@"; do
  p=$("$cli" predict "$m" --predictor "$predictor" "${opts[@]}" 2>/dev/null)
  pred=$(sed -nE 's/.*predicted ([0-9.]+) ms per batch.*/\1/p' <<<"$p")
  counts=$(sed -nE 's/^  ([0-9]+) ops predicted, ([0-9]+) views \(no launch\), ([0-9]+) not modeled.*/\1 \3/p' <<<"$p")
  runs=()
  for ((r = 0; r < ${REPEATS:-3}; r++)); do
    b=$("$cli" bench "$m" --iterations 20 --profile - "${opts[@]}" 2>/dev/null)
    runs+=("$(sed -nE 's/.*kernel time per op \(median of [0-9]+ replays, [0-9]+ launches, ([0-9.]+) ms\).*/\1/p' <<<"$b")")
  done
  meas=$(printf '%s\n' "${runs[@]}" | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
  ratio=$(python3 -c "print(f'{$pred / $meas:.3f}')")
  echo "| $(basename "$m" .onnx) | $pred | $meas | $ratio | ${counts% *} | ${counts#* } |"
done
