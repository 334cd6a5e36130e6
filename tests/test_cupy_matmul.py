"""The cupy.matmul baseline's mirror (hbmsim/libraries/cupy/matmul.py): the kernels Nsight Compute
recorded on the H200 run, exactness, bytes equal to CuPy's sequence written out by hand, and
the validation's prediction using it.

Expected kernel sequences come from the recorded profile (kernels/results/raw/), expected
bytes from the CuPy source lines quoted in the mirror's docstring, never from the code under
test.
"""

import csv
import json
from pathlib import Path

import pytest

from hbmsim import Problem, execute_plan, get_hardware
from hbmsim.interpret.counts import count_plan
from hbmsim.libraries.cupy import matmul as cupy_matmul

RAW = Path(__file__).resolve().parent.parent / "kernels" / "results" / "raw"
H200 = get_hardware("h200")


def _recorded_cupy_kernels() -> list[str]:
    """The kernel names, in launch order, of the profiled cuBLAS-baseline configuration (the
    child process whose kernels include CuPy's multiply)."""
    rows = [r for r in csv.reader((RAW / "h200-2026-11-30-ncu-sections.csv").open()) if len(r) > 5]
    (pid,) = {r[1] for r in rows if r[4].startswith("cupy_multiply")}
    seen: dict[str, str] = {}
    for r in rows:
        if r[1] == pid:
            seen.setdefault(r[0], r[4])
    return [seen[i] for i in sorted(seen, key=int)]


def _kind(recorded: str) -> str:
    if recorded.startswith("cupy_multiply"):
        return "scale"
    if recorded.startswith("cupy_copy__float16_float32"):
        return "up"
    if recorded.startswith("cupy_copy__float32_float16"):
        return "down"
    if "gemm" in recorded:
        return "gemm"
    return recorded


MIRROR_KIND = {
    "scale_q": "scale",
    "cast_q": "up",
    "cast_kt": "up",
    "cast_p": "up",
    "cast_v": "up",
    "cast_s": "down",
    "cast_o": "down",
    "sgemm_qk": "gemm",
    "sgemm_pv": "gemm",
    "softmax": "softmax_rows",
}


def test_fp16_runs_the_ten_kernels_nsight_compute_recorded():
    """The profiled configuration (seq 4096, d 64, fp16): multiply, two casts up, the GEMM,
    a cast down, the softmax, two casts up, the GEMM, a cast down; the GEMMs' output tiles are
    the widths in their kernel names."""
    recorded = _recorded_cupy_kernels()
    p = Problem(batch=4, heads=16, seq_q=4096, seq_k=4096, head_dim=64, dtype="fp16")
    plan = cupy_matmul.make_plan(p, H200)
    assert [MIRROR_KIND[k.name] for k in plan.kernels] == [_kind(r) for r in recorded]
    widths = [int(r.split("tilesize128x")[1].split("x")[0]) for r in recorded if "gemm" in r]
    gemms = [k for k in plan.kernels if k.name.startswith("sgemm")]
    assert [k.buffers[1].shape[-1] for k in gemms] == widths == [128, 64]
    assert not any(k.tensor_cores for k in gemms)  # ffma in the kernel names


def test_fp32_needs_no_casts():
    """float32 operands are already the computed dtype: CuPy copies only K's transposed view,
    and the products write their outputs directly."""
    p = Problem(batch=1, heads=2, seq_q=256, seq_k=256, head_dim=64, dtype="fp32")
    names = [k.name for k in cupy_matmul.make_plan(p, H200).kernels]
    assert names == ["scale_q", "cast_kt", "sgemm_qk", "softmax", "sgemm_pv"]


@pytest.mark.parametrize(
    "problem",
    [
        Problem(batch=1, heads=2, seq_q=150, seq_k=200, head_dim=64, dtype="fp16", causal=True),
        Problem(batch=2, heads=4, kv_heads=2, seq_q=130, seq_k=130, head_dim=32, dtype="fp32"),
        Problem(batch=1, heads=2, seq_q=70, seq_k=300, head_dim=128, dtype="fp16"),
    ],
)
def test_the_baseline_computes_attention_exactly(problem):
    assert execute_plan(cupy_matmul.make_plan(problem, H200)).rel_err < 1e-12


def test_bytes_are_cupys_sequence_written_out():
    """Per (batch, head), fp16 (e = 2) and float32 (f = 4), N = nq x nk: q * scale reads and
    writes e·nq·d; the casts of Qs, Kᵀ and V read e and write f per element, of S and O read f
    and write e, of P read e and write f; the softmax reads and writes e·N; a GEMM reads its A
    rows once per output column tile and its B columns once per output row tile (128-row
    tiles; 128 columns for S, 64 for O at d 64) and writes f per output element."""
    b, h, nq, nk, d, e, f = 2, 3, 300, 260, 64, 2, 4
    p = Problem(batch=b, heads=h, seq_q=nq, seq_k=nk, head_dim=d, dtype="fp16")
    n = nq * nk
    tiles = lambda x, t: -(-x // t)  # noqa: E731
    read = (
        e * nq * d  # q * scale
        + e * nq * d  # cast Qs
        + e * nk * d  # cast Kᵀ
        + f * nq * d * tiles(nk, 128)
        + f * d * nk * tiles(nq, 128)  # S GEMM
        + f * n  # cast S
        + e * n  # softmax
        + e * n  # cast P
        + e * nk * d  # cast V
        + f * n * tiles(d, 64)
        + f * nk * d * tiles(nq, 128)  # O GEMM
        + f * nq * d  # cast O
    )
    write = (e * nq * d + f * nq * d + f * nk * d + f * n + e * n + e * n + f * n + f * nk * d) + (
        f * nq * d + e * nq * d
    )
    counts = count_plan(cupy_matmul.make_plan(p, H200))
    assert counts.hbm_read_bytes == b * h * read
    assert counts.hbm_write_bytes == b * h * write


def test_validation_predicts_the_recorded_cublas_dram_bytes():
    """The H200 run's Nsight Compute DRAM bytes for the cuBLAS baseline (seq 4096, d 64) and
    the prediction with the run's calibrated profile agree within 2% (the tensor-core
    stand-in the validation used before predicted a third of them)."""
    from hbmsim.engine.simulation import run_engine
    from kernels.validate import _plan_of, calibrated_hardware

    doc = json.loads((RAW / "h200-2026-11-30-measurements.json").read_text())
    (row,) = [
        c
        for c in doc["configs"]
        if c.get("kind") == "cublas" and c.get("measured_dram_bytes") is not None
    ]
    plan = _plan_of(row, calibrated_hardware(doc))
    r = run_engine(plan)
    predicted = r.dram_read_bytes + r.dram_write_bytes
    assert predicted == pytest.approx(row["measured_dram_bytes"], rel=0.02)


@pytest.mark.parametrize(
    "measured, pipes",
    [
        ({"vector": 0.92, "exp": 0.04}, ("vector",)),
        ({"vector": 0.95, "exp": 0.88}, ("vector", "exp")),
        ({"vector": 0.1, "exp": 0.0}, ()),
    ],
)
def test_the_calibrated_profile_takes_the_pipes_the_probe_saw_overlap_wgmma(measured, pipes):
    """pipes_probe.cu's overlap fractions set Hardware.async_mma_overlaps: a pipe most of whose
    loop hid under the wgmma loop runs beside it; without the measurement the preset's
    assumption stands."""
    from kernels.validate import calibrated_hardware

    doc = json.loads((RAW / "h200-2026-11-30-measurements.json").read_text())
    assert calibrated_hardware(doc).async_mma_overlaps == ("vector",)  # the preset's
    doc["calibration"]["async_mma_overlap"] = {**measured, "alone_s": {"mma": 1e-3}}
    assert calibrated_hardware(doc).async_mma_overlaps == pipes
