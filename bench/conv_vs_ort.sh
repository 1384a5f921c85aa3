#!/usr/bin/env bash
# conv2d layers of ResNet-50 and the UNet, Tessera beside ONNX Runtime in the
# same run: writes one-layer ONNX models (Debian's python3-onnx), times them
# with onnxruntime-node (installed here, from npm, with --ignore-scripts: the
# package ships its linux-x64 library), then runs bench_conv with the ORT times.
#
#   bash bench/conv_vs_ort.sh [--quick]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
dpkg-query -W python3-onnx python3-numpy nodejs >/dev/null 2>&1 ||
  { $SUDO apt-get update -qq; $SUDO apt-get install -y -qq python3-onnx python3-numpy; }
command -v node >/dev/null || $SUDO apt-get install -y -qq nodejs npm
(cd bench/ort && [ -d node_modules/onnxruntime-node ] || npm install --ignore-scripts --no-package-lock --no-audit --no-fund --silent)
cmake --preset release >/dev/null && cmake --build --preset release --target bench_conv
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 bench/ort/make_conv_models.py bench/layers/conv_layers.txt "$work/models"
reps=15; [ "${1:-}" = "--quick" ] && reps=5
node bench/ort/time_models.js bench/layers/conv_layers.txt "$work/models" "$reps" > "$work/ort.txt"
./build/release/bench_conv --layers bench/layers/conv_layers.txt --ort "$work/ort.txt" "$@"
