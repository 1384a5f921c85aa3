#!/usr/bin/env bash
# The predictor's regeneration workflow on a tiny budget (ctest predictor_round_trip):
# sweep two spaces for a few seconds, resume the sweep, export CSV, train, check the
# error table, predict the documented short form and refuse bad input.
#   scripts/predictor_round_trip.sh TESSERA_CLI WORK_DIR [MODEL.onnx]
set -euo pipefail
cli=$(realpath "$1") dir=$2 model=${3:+$(realpath "$3")}
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir"
# Budgets generous enough for a sanitizer build on a slow machine; training needs a few dozen points a family.
"$cli" sweep --db perf.sqlite --ops linear --budget 10s --batch 8 --passes 2 | tee sweep.txt
grep -Eq "[1-9][0-9]* measured" sweep.txt
# Resumed with the same seed: the points already measured are skipped, not measured again.
"$cli" sweep --db perf.sqlite --ops linear --budget 3s --batch 8 --passes 2 | tee resume.txt
grep -Eq "[1-9][0-9]* already in perf.sqlite" resume.txt
"$cli" sweep --db perf.sqlite --ops eltwise_unary --budget 10s --batch 8 --passes 2
"$cli" sweep --db perf.sqlite --export csv -o perf.csv
head -1 perf.csv | grep -q "time_ns"
[ "$(wc -l < perf.csv)" -gt 40 ]
"$cli" train-predictor --db perf.sqlite -o predictor.json --min-rows 12 --report report.md --test-csv test.csv |
  tee train.txt
grep -q "| \*\*eltwise_unary\*\*" report.md
grep -q "| \*\*matmul\*\*" report.md
"$cli" predict --predictor predictor.json --op '{"op":"linear","input":{"logical_shape":[64,512]},"out_features":256}' \
  | tee predict.txt
grep -Eq "^linear: [0-9.]+ us predicted" predict.txt
# Unknown ops, bad JSON, a family the model lacks and a corrupt model file are errors that say so.
! "$cli" predict --predictor predictor.json --op '{"op":"conv5d"}' 2> err.txt && grep -q "unknown op 'conv5d'" err.txt
! "$cli" predict --predictor predictor.json --op '{"op":' 2> err.txt && grep -q "not valid JSON" err.txt
! "$cli" predict --predictor predictor.json \
  --op '{"op":"conv2d","input":{"logical_shape":[1,64,56,56]},"out_channels":64,"kernel_size":[3,3]}' 2> err.txt &&
  grep -q "NOT_FOUND: predictor: no model for op family 'conv2d'" err.txt
head -c 1000 predictor.json > corrupt.json
! "$cli" predict --predictor corrupt.json --op '{"op":"relu","input":{"logical_shape":[8]}}' 2> err.txt &&
  grep -q "not a predictor model" err.txt
! "$cli" sweep --db perf.sqlite --ops conv3d --budget 1s 2> err.txt && grep -q "no sweep space 'conv3d'" err.txt
! "$cli" sweep --db perf.sqlite --budget 5x 2> err.txt && grep -q "units are h, m, s" err.txt
if [ -n "$model" ]; then
  # A whole model: its linear layers predicted, its convs not (this model has no conv2d family), and said so.
  "$cli" predict "$model" --predictor predictor.json --explain | tee model.txt
  grep -Eq "predicted [0-9.]+ ms per batch of device kernels" model.txt
  grep -q "not modeled: Conv" model.txt
  # --select predicted asks this model for each conv's kernels: it has no conv2d family, and says so.
  ! "$cli" run "$model" --select predicted --predictor predictor.json 2> err.txt &&
    grep -q "no model for op family 'conv2d'" err.txt
  ! "$cli" run "$model" --select predicted 2> err.txt && grep -q "needs --predictor" err.txt
  ! "$cli" run "$model" --predictor predictor.json 2> err.txt && grep -q "read by --select predicted only" err.txt
fi
echo "predictor round trip: ok"
