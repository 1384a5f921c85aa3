#!/usr/bin/env bash
# The embedded runtime as a user gets it: installs BUILD_DIR into a fresh
# prefix, builds examples/embedded against the installed package (CMake and
# pkg-config), checks that nothing there links protobuf or ONNX, and runs an
# image of each model through it: its outputs must be bit-identical to
# `tessera run`'s.
#
#   bash scripts/test_embedded.sh BUILD_DIR MODEL.onnx INPUT.npy [MODEL.onnx INPUT.npy ...]
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$1" && pwd)
work=$build/embedded_test
rm -rf "$work"
mkdir -p "$work/out_cli" "$work/out_embedded" "$work/out_pkgconfig"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$src/examples/embedded" -B "$work/build" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/build" >/dev/null
pc=$(find "$work/prefix" -name tessera.pc)
lib=$(find "$work/prefix" -name libtessera_embedded.so)
g++ -O2 "$src/examples/embedded/main.cc" -o "$work/embedded_pkgconfig" \
  $(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --cflags --libs tessera) -Wl,-rpath,"$(dirname "$lib")"
if ldd "$lib" "$work/build/embedded_run" | grep -Ei "protobuf|onnx"; then
  echo "FAIL: the embedded runtime links protobuf or ONNX"; exit 1
fi
if nm -DC "$lib" | grep -Eq "google::protobuf|onnx::"; then
  echo "FAIL: the embedded runtime defines or needs protobuf / ONNX symbols"; exit 1
fi
# Each MODEL INPUT pair: compiled, run by the CLI and by both builds of the example.
n=0
set -- "${@:2}"
while [ $# -ge 2 ]; do
  model=$1 input=$2
  shift 2
  rm -rf "$work"/out_*/ && mkdir -p "$work/out_cli" "$work/out_embedded" "$work/out_pkgconfig"
  "$work/prefix/bin/tessera" compile "$model" -o "$work/model.tsi" >/dev/null
  "$work/prefix/bin/tessera" run "$work/model.tsi" --input "$input" --output-dir "$work/out_cli" >/dev/null
  "$work/build/embedded_run" "$work/model.tsi" "$work/out_embedded" "$input"
  "$work/embedded_pkgconfig" "$work/model.tsi" "$work/out_pkgconfig" "$input" >/dev/null
  for f in "$work"/out_cli/*.npy; do
    cmp "$f" "$work/out_embedded/$(basename "$f")"
    cmp "$f" "$work/out_pkgconfig/$(basename "$f")"
    n=$((n + 1))
  done
done
echo "embedded runtime: installed, built with CMake and pkg-config, no protobuf; $n output(s) bit-identical to tessera run"
