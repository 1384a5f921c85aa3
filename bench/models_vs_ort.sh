#!/usr/bin/env bash
# Whole models, Tessera beside ONNX Runtime (float32, 2 threads) and PyTorch
# (Debian's, 2 threads), in the same run: batch-1 latency and batch-8
# throughput of ResNet-50, MobileNetV2, the Vanilla UNet (480x640), the
# YOLOv5s-style detector (640x640) and PP-OCRv4 det (480x640). Tessera runs
# float32, bfloat16 and bfloat8_b weights through the two-queue traced
# pipeline (`tessera bench`: end to end, one batch at a time for latency,
# all batches enqueued at once for throughput), and checks PCC against the
# float32 reference each time.
#
#   bash bench/models_vs_ort.sh [MODEL ...]      (default: all five)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset release >/dev/null && cmake --build --preset release --target tessera_cli >/dev/null
bash scripts/prepare_models.sh build/models >/dev/null
d=build/models
models=("$@"); ((${#models[@]})) || models=(resnet50 mobilenet_v2 unet yolo ppocr_det)
reps() { case $1 in unet|ppocr_det) echo "$2";; *) echo "$3";; esac; }
echo "| model | batch | ORT f32 ms | PyTorch ms | Tessera f32 ms (PCC) | Tessera f32 HiFi2 ms (PCC) | Tessera bf16 ms (PCC) | Tessera bf16 HiFi2 ms (PCC) | Tessera bfp8 ms (PCC) |"
echo "|---|---|---|---|---|---|---|---|---|"
for m in "${models[@]}"; do
  ref=torch; [ "$m" = ppocr_det ] && ref=ort
  for b in 1 8; do
    n=$(reps "$m" $((b == 1 ? 10 : 3)) $((b == 1 ? 30 : 10)))
    in="$d/${m}_input_b1.npy"; [ "$b" = 8 ] && in="$d/${m}_input.npy"
    ort=$(node bench/ort/run_model.js "$d/$m.onnx" "$in" /tmp/tessera_ort_out.npy "$n" | awk '{print $3}')
    if [ "$ref" = torch ]; then
      pt=$(/usr/bin/python3 bench/torch_time.py "$m" "$b" "$n" 2>/dev/null | awk '{print $4}')
      want="$d/${m}_torch_b$b.npy"
    else
      pt="n/a (Paddle model)"
      want="$d/${m}_ort_b$b.npy"
    fi
    row="| $m | $b | $ort | $pt |"
    # DTYPE:HiFi2 = that dtype with --math-fidelity HiFi2 (Winograd 3x3 convs).
    for run in float32 float32:HiFi2 bfloat16 bfloat16:HiFi2 bfloat8_b; do
      dt=${run%%:*}; mf=HiFi4; [ "$run" != "$dt" ] && mf=${run#*:}
      out=$(./build/release/tessera bench "$d/$m.onnx" --dtype "$dt" --math-fidelity "$mf" --iterations "$n" --input "$in" --reference "$want" 2>&1 || true)
      if [ "$b" = 1 ]; then ms=$(echo "$out" | awk '/latency: +p50/ {print $3}')
      else ms=$(echo "$out" | awk '/end to end:/ {gsub(/\(/, "", $6); print $6}'); fi
      pcc=$(echo "$out" | awk '/^PCC/ {print $(NF-3)}')
      row="$row ${ms:-error} (${pcc:-?}) |"
    done
    echo "$row"
  done
done
