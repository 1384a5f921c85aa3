#!/usr/bin/env bash
# Compiles MODEL.onnx into an image for TARGET, runs the ONNX file and the
# image on INPUT, and requires every output bit-identical (the image tests).
#
#   bash scripts/image_roundtrip.sh TESSERA MODEL.onnx INPUT.npy WORKDIR TARGET [--dtype D ...] [--portable]
set -euo pipefail
tessera=$1 model=$2 input=$3 dir=$4 target=$5
shift 5
# --portable is the image's alone; the other options go to both.
compile_only=() both=()
for a in "$@"; do if [ "$a" = --portable ]; then compile_only+=("$a"); else both+=("$a"); fi; done
rm -rf "$dir"
mkdir -p "$dir/onnx" "$dir/image"
"$tessera" compile "$model" -o "$dir/model.tsi" --target "$target" ${compile_only[@]+"${compile_only[@]}"} ${both[@]+"${both[@]}"}
"$tessera" run "$model" --input "$input" --output-dir "$dir/onnx" --device "$target" ${both[@]+"${both[@]}"}
"$tessera" run "$dir/model.tsi" --input "$input" --output-dir "$dir/image" --device "$target"
n=0
for f in "$dir"/onnx/*.npy; do
  cmp "$f" "$dir/image/$(basename "$f")"
  n=$((n + 1))
done
echo "bit-identical: $n output(s) of the image and the ONNX file"
