#!/usr/bin/env bash
# The whole GPU half of the validation in one call, for a machine with CuPy and NumPy but not
# hbmsim's other dependencies: measures everything and leaves it under $OUT (default ./run).
# BUDGET_S (default 420) bounds the sweep; measurements.json is rewritten after every step.
# Then, each skipped with a line saying why when its tool is missing:
# - TORCH=1 (default): PyTorch eager and FlashAttention-2 timings, decoding first (and
#   flash_attn_with_kvcache where flash_attn is installed), in the published set's format
#   (kernels/torch_timings.py, TORCH_BUDGET_S, default 150 s; needs torch and einops);
# - PROFILE=1 (default 0, about 90 s): Nsight Compute sections of chosen configurations
#   (kernels/profile_run.sh, into $OUT/ncu.csv).
# Afterwards, anywhere: hbmsim validate --measurements "$OUT/measurements.json", and
# hbmsim validate --published "$OUT/<preset>-torch-<date>.json".
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-run}"
py="${PYTHON:-python3}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv \
    > "$out/gpu.csv" || true
"$py" -m kernels.validate --out "$out" --preset "${PRESET:-h200}" \
    --budget-s "${BUDGET_S:-420}" --measure-only 2>&1 | tee "$out/log.txt"
if [ "${TORCH:-1}" = 1 ]; then
    if "$py" -c "import torch, einops" 2>/dev/null; then
        "$py" -m kernels.torch_timings --out "$out" --preset "${PRESET:-h200}" \
            --budget-s "${TORCH_BUDGET_S:-150}" 2>&1 | tee -a "$out/log.txt" \
            || echo "torch timings: failed (see above)" | tee -a "$out/log.txt"
    else
        echo "torch timings: skipped (torch or einops is not importable)" | tee -a "$out/log.txt"
    fi
fi
if [ "${PROFILE:-0}" = 1 ]; then
    if command -v ncu > /dev/null; then
        OUT="$out" bash kernels/profile_run.sh 2>&1 | tee -a "$out/log.txt"
    else
        echo "profile: skipped (ncu is not on PATH)" | tee -a "$out/log.txt"
    fi
fi
