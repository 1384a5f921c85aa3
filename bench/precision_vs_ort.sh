#!/usr/bin/env bash
# Precision against speed: each AMP level, bfloat8_b weights and the seed's
# Vanilla UNet configuration (bench/unet_seed_precision.json: bfloat16
# activations, bfloat8_b weights, LoFi, the final 1x1 conv with bfloat16
# weights at HiFi2, the last decoder stage accumulating in bfloat16 under
# --numerics tt), against ONNX Runtime float32 (2 threads) in the same run:
# batch-1 latency (p50 through the two-queue traced Pipeline) and PCC
# against ONNX Runtime's float32 output on the same input. Then ResNet-50
# under --numerics tt (the emulated matrix engine) at each fidelity.
#
#   bash bench/precision_vs_ort.sh [MODEL ...]    (default: resnet50 mobilenet_v2 unet yolo)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
cmake --preset release >/dev/null && cmake --build --preset release --target tessera_cli >/dev/null
bash scripts/prepare_models.sh build/models >/dev/null
d=build/models
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
models=("$@"); ((${#models[@]})) || models=(resnet50 mobilenet_v2 unet yolo)
# The seed's configuration without what only --numerics tt takes (a bfloat16 destination).
/usr/bin/python3 -c "
import json, sys
c = json.load(open('bench/unet_seed_precision.json'))
c['rules'] = [r for r in c['rules'] if 'accumulate_df' not in r]
json.dump(c, open('$tmp/unet_seed_fast.json', 'w'))"
# "ms pcc" of one tessera bench run (pcc: the first output's against ORT).
tessera_bench() {
  local out ms pcc
  out=$(./build/release/tessera bench "$@" 2>&1 || true)
  ms=$(echo "$out" | awk '/latency: +p50/ {print $3}')
  pcc=$(echo "$out" | awk '/^PCC/ {print $(NF-3); exit} /PCC .* is below/ {for (i = 1; i < NF; i++) if ($i == "PCC") print $(i + 1); exit}')
  echo "${ms:-error} ${pcc:-?}"
}
echo "| model | run | Tessera ms | x Tessera f32 | x ORT f32 | PCC vs ORT f32 |"
echo "|---|---|---|---|---|---|"
for m in "${models[@]}"; do
  n=30; [ "$m" = unet ] && n=8
  in="$d/${m}_input_b1.npy"
  ort=$(node bench/ort/run_model.js "$d/$m.onnx" "$in" "$tmp/ort.npy" "$n" | awk '{print $3}')
  echo "| $m | ONNX Runtime float32 | $ort | | 1.00 | 1.000000 |"
  runs=("float32|--dtype float32" "AMP level 1|--amp-level 1" "AMP level 2|--amp-level 2"
        "bfloat8_b weights|--dtype bfloat8_b")
  [ "$m" = unet ] && runs+=("seed table (fast)|--dtype bfloat8_b --math-fidelity LoFi --precision-config $tmp/unet_seed_fast.json"
                            "seed table (--numerics tt)|--dtype bfloat8_b --math-fidelity LoFi --numerics tt --precision-config bench/unet_seed_precision.json")
  f32=""
  for r in "${runs[@]}"; do
    name=${r%%|*}; args=${r#*|}
    iters=$n; [[ "$args" == *"numerics tt"* ]] && iters=2
    read -r ms pcc < <(tessera_bench "$d/$m.onnx" $args --iterations "$iters" --input "$in" --reference "$tmp/ort.npy")
    [ -z "$f32" ] && f32=$ms
    echo "| $m | $name | $ms | $(awk -v a="$f32" -v b="$ms" 'BEGIN {printf "%.2f", a / b}') | $(awk -v a="$ort" -v b="$ms" 'BEGIN {printf "%.2f", a / b}') | $pcc |"
  done
done
echo
echo "| ResNet-50 --numerics tt | ms per run | x fast (same formats) | PCC vs ORT f32 |"
echo "|---|---|---|---|"
in="$d/resnet50_input_b1.npy"
node bench/ort/run_model.js "$d/resnet50.onnx" "$in" "$tmp/ort.npy" 0 >/dev/null
read -r fast _ < <(tessera_bench "$d/resnet50.onnx" --dtype bfloat16 --iterations 20 --input "$in" --reference "$tmp/ort.npy")
echo "| fast kernels, bfloat16 | $fast | 1.00 | |"
for f in LoFi HiFi2 HiFi3 HiFi4; do
  read -r ms pcc < <(tessera_bench "$d/resnet50.onnx" --dtype bfloat16 --numerics tt --math-fidelity "$f" --iterations 3 --input "$in" --reference "$tmp/ort.npy")
  echo "| tt $f, bfloat16 destination | $ms | $(awk -v a="$fast" -v b="$ms" 'BEGIN {printf "%.3f", a / b}') | $pcc |"
done
