#!/usr/bin/env bash
# Compiles MODEL.onnx into an image for TARGET, runs the ONNX file and the
# image on INPUT, and requires every output bit-identical (the image tests).
#
#   bash scripts/image_roundtrip.sh TESSERA MODEL.onnx INPUT.npy WORKDIR TARGET [--dtype D ...]
set -euo pipefail
tessera=$1 model=$2 input=$3 dir=$4 target=$5
shift 5
rm -rf "$dir"
mkdir -p "$dir/onnx" "$dir/image"
"$tessera" compile "$model" -o "$dir/model.tsi" --target "$target" "$@"
"$tessera" run "$model" --input "$input" --output-dir "$dir/onnx" --device "$target" "$@"
"$tessera" run "$dir/model.tsi" --input "$input" --output-dir "$dir/image" --device "$target"
n=0
for f in "$dir"/onnx/*.npy; do
  cmp "$f" "$dir/image/$(basename "$f")"
  n=$((n + 1))
done
echo "bit-identical: $n output(s) of the image and the ONNX file"
