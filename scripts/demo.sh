#!/usr/bin/env bash
# The main job: set up, build (release), then compile the Vanilla UNet ONNX
# model (480x640) and ResNet-50 (224x224), both exported from PyTorch with
# fixed-seed weights (scripts/prepare_models.sh), and run them through the
# two-queue traced pipeline on the CPU device in float32 and bfloat16,
# printing FPS (end to end, latency, device only) and the PCC of the output
# against PyTorch's float32 output.
#
#   bash scripts/demo.sh [ITERATIONS]       (the runtime demo: build/release/tessera_demo)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release --target tessera_cli tessera_demo
bash scripts/prepare_models.sh build/models
n=${1:-20}
for model in unet resnet50; do
  for dtype in float32 bfloat16; do
    echo
    ./build/release/tessera bench "build/models/$model.onnx" --dtype "$dtype" --iterations "$n" \
      --input "build/models/${model}_input_b1.npy" --reference "build/models/${model}_torch_b1.npy"
  done
done
