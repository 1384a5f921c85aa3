#!/usr/bin/env bash
# Merged images: two models compiled apart and merged run each bit-identically
# to its own image; the same model merged twice is renamed and its weights
# stored once.
#
#   bash scripts/image_merge_test.sh TESSERA WORKDIR A.onnx A_INPUT.npy B.onnx B_INPUT.npy
set -euo pipefail
t=$1 dir=$2 a=$3 ain=$4 b=$5 bin=$6
rm -rf "$dir"
mkdir -p "$dir"
"$t" compile "$a" -o "$dir/a.tsi" --name a >/dev/null
"$t" compile "$b" -o "$dir/b.tsi" --name b >/dev/null
"$t" merge "$dir/a.tsi" "$dir/b.tsi" -o "$dir/ab.tsi"
"$t" info "$dir/ab.tsi" | grep -E "^model '(a|b)'"
for m in a b; do
  in=$ain; [ $m = b ] && in=$bin
  "$t" run "$dir/$m.tsi" --input "$in" --output-dir "$dir/$m" >/dev/null
  "$t" run "$dir/ab.tsi" --model $m --input "$in" --output-dir "$dir/ab_$m" >/dev/null
  for f in "$dir/$m"/*.npy; do cmp "$f" "$dir/ab_$m/$(basename "$f")"; done
done
# Without --model, a merged image names its models.
if "$t" run "$dir/ab.tsi" --input "$ain" 2>"$dir/err.txt"; then echo "FAIL: ran a merged image without --model"; exit 1; fi
grep -q "the image holds 2 models ('a', 'b'): choose one with --model" "$dir/err.txt"
# The same model twice: renamed, its weights stored once.
"$t" merge "$dir/a.tsi" "$dir/a.tsi" -o "$dir/aa.tsi" | grep -q "model 'a' renamed 'a_2'"
w1=$("$t" info "$dir/a.tsi" --json | sed -n 's/^  "weights_bytes": \([0-9]*\).*/\1/p')
w2=$("$t" info "$dir/aa.tsi" --json | sed -n 's/^  "weights_bytes": \([0-9]*\).*/\1/p')
[ "$w1" = "$w2" ] || { echo "FAIL: weights $w1 B alone, $w2 B merged twice"; exit 1; }
"$t" merge "$dir/a.tsi" "$dir/a.tsi" -o "$dir/aa_sep.tsi" --separate >/dev/null
w3=$("$t" info "$dir/aa_sep.tsi" --json | sed -n 's/^  "weights_bytes": \([0-9]*\).*/\1/p')
[ "$w3" -gt "$w1" ] || { echo "FAIL: --separate stored $w3 B, one copy is $w1 B"; exit 1; }
echo "merged images: each model bit-identical to its own image; shared weights stored once ($w1 B, $w3 B kept separate)"
