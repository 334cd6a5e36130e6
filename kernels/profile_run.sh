#!/usr/bin/env bash
# Where the time goes inside the repository's kernels: Nsight Compute sections (issue slots,
# warp stalls, pipes, shared-memory wavefronts, occupancy) for chosen configurations of
# kernels.validate's sweep, each launched once in its own process; all
# of them into $OUT/ncu.csv (a '### configuration N' line before each). For understanding the
# model's gaps, never for setting a constant. Usage: OUT=DIR kernels/profile_run.sh [INDEX...]
# (default: the flash, WMMA and naive kernels at seq 4096, the configurations the notes cite).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-run}"
mkdir -p "$out"
indices=("${@:-4 6 26 5 24 16 38 48 60}")
for i in ${indices[*]}; do
    echo "configuration $i ..."
    echo "### configuration $i" >> "$out/ncu.csv"
    timeout 120 ncu --clock-control none --profile-from-start off --print-units base --csv \
        --page details \
        --section SpeedOfLight --section ComputeWorkloadAnalysis --section Occupancy \
        --section WarpStateStats --section InstructionStats --section MemoryWorkloadAnalysis \
        --section LaunchStats \
        "${PYTHON:-python3}" -m kernels.validate --run-one "$i" --preset "${PRESET:-h200}" \
        --out . >> "$out/ncu.csv" 2>> "$out/ncu.err" || echo "configuration $i failed: $?"
done
