#!/usr/bin/env bash
# Non-conv2d layers (bench/layers/op_layers.txt), Tessera beside ONNX Runtime in
# the same run, as bench/conv_vs_ort.sh does for convolutions.
#
#   bash bench/ops_vs_ort.sh [--quick]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
dpkg-query -W python3-onnx python3-numpy >/dev/null 2>&1 ||
  { $SUDO apt-get update -qq; $SUDO apt-get install -y -qq python3-onnx python3-numpy; }
# A Node.js from elsewhere (no Debian npm beside it) stays as it is.
command -v node >/dev/null || $SUDO apt-get install -y -qq nodejs npm
(cd bench/ort && [ -d node_modules/onnxruntime-node ] || npm install --ignore-scripts --no-package-lock --no-audit --no-fund --silent)
cmake --preset release >/dev/null && cmake --build --preset release --target bench_ops
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 bench/ort/make_op_models.py bench/layers/op_layers.txt "$work/models"
reps=15; [ "${1:-}" = "--quick" ] && reps=5
node bench/ort/time_op_models.js "$work/models" "$reps" > "$work/ort.txt"
./build/release/bench_ops --layers bench/layers/op_layers.txt --ort "$work/ort.txt" "$@"
