#!/usr/bin/env bash
# The Vanilla UNet (480x640, batch 1) in Tessera beside ONNX Runtime running
# the same ONNX file, in the same run: accuracy (PCC against ORT's float32
# output) and speed (device-only, kernel-only and end-to-end FPS) for each
# Tessera configuration. ONNX Runtime comes from npm (onnxruntime-node,
# installed here with --ignore-scripts: it ships its linux-x64 library).
#
#   bash bench/unet_vs_ort.sh [FRAMES]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
command -v node >/dev/null || { $SUDO apt-get update -qq; $SUDO apt-get install -y -qq nodejs npm; }
(cd bench/ort && [ -d node_modules/onnxruntime-node ] || npm install --ignore-scripts --no-package-lock --no-audit --no-fund --silent)
cmake --preset release >/dev/null && cmake --build --preset release --target bench_unet
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
./build/release/bench_unet export "$work"
node bench/ort/run_unet.js "$work" 10
./build/release/bench_unet compare "$work" "${1:-8}"
