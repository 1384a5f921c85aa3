#!/usr/bin/env bash
# Set up, build (release) and run the main job: the Tessera demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release --target tessera_demo
./build/release/tessera_demo "$@"
