#!/usr/bin/env bash
# The whole GPU half of the validation in one call, for a machine with CuPy and NumPy but not
# hbmsim's other dependencies: measures everything and leaves it under $OUT (default ./run).
# BUDGET_S (default 420) bounds the sweep; measurements.json is rewritten after every step.
# Afterwards, anywhere: hbmsim validate --measurements "$OUT/measurements.json"
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-run}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv \
    > "$out/gpu.csv" || true
"${PYTHON:-python3}" -m kernels.validate --out "$out" --preset "${PRESET:-h200}" \
    --budget-s "${BUDGET_S:-420}" --measure-only 2>&1 | tee "$out/log.txt"
