#!/usr/bin/env bash
# A compiled image against its ONNX file, alternating in ROUNDS rounds, each
# a fresh `tessera run` process on the same input: the median wall time of
# the whole process, of getting ready to run (ONNX: import + compile; image:
# read + verify + map the prepared weights + lower), of the first run through
# the pipeline (its compile run and the traced run), and the image's size
# against the model's weights in their chosen dtypes (a --portable image's
# constants). bench_image_load splits load and first run in one process. Prints a markdown table for
# bench/RESULTS.md.
#
#   bash bench/image_vs_onnx.sh [--rounds R] MODEL.onnx INPUT.npy [MODEL2.onnx INPUT2.npy ...]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=5
[ "${1:-}" = --rounds ] && { rounds=$2; shift 2; }
t=build/release/tessera
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
med() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
echo "| model | ONNX: process ms | image: process ms | ONNX: import + compile ms | image: load ms | ONNX: 1st run ms | image: 1st run ms | image MiB | weights MiB |"
echo "|---|---|---|---|---|---|---|---|---|"
while [ $# -ge 2 ]; do
  model=$1 input=$2; shift 2
  name=$(basename "$model" .onnx)
  "$t" compile "$model" -o "$tmp/$name.tsi" >/dev/null
  # The weights in their chosen dtypes: a portable image's constants.
  "$t" compile "$model" -o "$tmp/${name}_portable.tsi" --portable >/dev/null
  po=(); pi=(); ro=(); ri=(); fo=(); fi=()
  for ((r = 0; r < rounds; r++)); do
    for kind in onnx tsi; do
      file=$model; [ $kind = tsi ] && file=$tmp/$name.tsi
      s=$(date +%s%N)
      out=$("$t" run "$file" --input "$input")
      e=$(( ($(date +%s%N) - s) / 1000000 ))
      # "compiled in 10 ms (import 32 ms)" / "loaded in 104 ms (reading the image 24 ms)"
      ready=$(echo "$out" | sed -n 's/^\(compiled\|loaded\) in \([0-9]*\) ms ([a-z ]* \([0-9]*\) ms).*/\2 \3/p' | awk '{print $1 + $2}')
      first=$(echo "$out" | sed -n 's/^1 run[a-z ]*: \([0-9]*\) ms/\1/p')
      if [ $kind = onnx ]; then po+=("$e"); ro+=("$ready"); fo+=("$first"); else pi+=("$e"); ri+=("$ready"); fi+=("$first"); fi
    done
  done
  size=$(stat -c %s "$tmp/$name.tsi")
  weights=$("$t" info "$tmp/${name}_portable.tsi" --json | sed -n 's/^  "weights_bytes": \([0-9]*\).*/\1/p')
  echo "| $name | $(med "${po[@]}") | $(med "${pi[@]}") | $(med "${ro[@]}") | $(med "${ri[@]}") | $(med "${fo[@]}") | $(med "${fi[@]}") | $(awk -v b="$size" 'BEGIN{printf "%.1f", b/1048576}') | $(awk -v b="$weights" 'BEGIN{printf "%.1f", b/1048576}') |"
done
