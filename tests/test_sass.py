"""The compiled kernels' loop counts (kernels/sass_mix.py, hbmsim/data/kernel_sass.json) and
the issue model of one warp scheduler (hbmsim/gpu/issue.py) the engine runs scalar kernels
with. The cached counts are checked against the sources' hand counts and Nsight Compute's
instruction count of the H200 run; the cache is regenerated where NVRTC and nvdisasm are
installed (the dev extra installs both; outside CI a missing one skips with the reason)."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hbmsim import Problem, get_hardware, make_plan
from hbmsim.algorithms import loop_costs
from hbmsim.gpu.issue import LATENCY, PIPES, Instr, busy_fraction, cycles_per_iteration

ROOT = Path(__file__).resolve().parent.parent
IN_CI = os.environ.get("CI") == "true"
NCU_SECTIONS = ROOT / "kernels" / "results" / "raw" / "h200-2026-11-30-ncu-sections.csv"


# --- the issue model ---------------------------------------------------------------------


def test_one_warp_issuing_every_cycle_keeps_its_scheduler_busy():
    body = [Instr("fma", stall=1)] * 16
    assert busy_fraction(body, 1) == pytest.approx(1.0)


def test_a_warp_that_stalls_four_cycles_each_needs_four_warps_to_fill_its_scheduler():
    """FFMAs each waiting 4 cycles for the one before (stall count 4): one warp issues in a
    quarter of the cycles, two in half, four in all."""
    body = [Instr("fma", stall=4)] * 16
    assert [round(busy_fraction(body, w), 3) for w in (1, 2, 4, 8)] == [0.25, 0.5, 1.0, 1.0]


def test_a_shared_load_holds_its_consumer_until_the_load_latency_has_passed():
    """A load sets scoreboard barrier 0 and the next instruction waits on it: one warp's
    iteration takes the shared-memory latency; warps enough hide it."""
    body = [Instr("shared", stall=1, write_barrier=0), Instr("fma", stall=1, wait_mask=1)]
    assert cycles_per_iteration(body, 1) == pytest.approx(LATENCY["shared"] + 1)
    many = 64
    assert cycles_per_iteration(body, many) == pytest.approx(many * PIPES["shared"], rel=0.05)


def test_a_half_rate_pipe_binds_however_many_warps_issue():
    """fp16-to-fp32 conversions (half rate, sharing the FP32 datapaths) beside FFMAs: the FMA
    pipe takes 2 + 1 cycles per pair, so schedulers issue in at most 2 of 3 cycles."""
    body = [Instr("fma_half", stall=1), Instr("fma", stall=1)]
    assert busy_fraction(body, 8) == pytest.approx(2 / 3, rel=0.02)


instrs = st.builds(
    Instr,
    pipe=st.sampled_from(sorted(PIPES)),
    stall=st.integers(1, 15),
    wait_mask=st.integers(0, 63),
    write_barrier=st.integers(-1, 5),
    read_barrier=st.integers(-1, 5),
    latency=st.sampled_from(sorted(LATENCY)),
)


@settings(max_examples=60, deadline=None)
@given(body=st.lists(instrs, min_size=1, max_size=12), warps=st.integers(1, 6))
def test_more_warps_never_issue_less_and_never_past_one_per_cycle(body, warps):
    """A scheduler issues at most one instruction per cycle, and w warps never take longer
    than running them one after another; one warp takes at least its stall counts."""
    one = cycles_per_iteration(body, 1)
    many = cycles_per_iteration(body, warps)
    assert one >= sum(i.stall for i in body) - 1e-9
    assert many >= warps * len(body) - 1e-9
    assert many <= warps * one + 1e-9


# --- the cached counts -------------------------------------------------------------------


def _cache() -> dict:
    return json.loads((ROOT / "hbmsim" / "data" / "kernel_sass.json").read_text())


def test_the_cache_names_its_compiler_and_the_issue_models_constants():
    doc = _cache()
    assert doc["arch"] == "sm_90" and doc["compiler"].startswith("NVRTC ")
    assert doc["disassembler"].startswith("nvdisasm ")
    assert doc["latency_cycles"] == LATENCY and doc["pipe_cycles"] == PIPES


@pytest.mark.parametrize(
    "bq,bk,d,causal", [(64, 64, 64, False), (64, 64, 128, True), (32, 128, 64, False)]
)
def test_flash_fwd_loops_compile_to_what_the_source_says(bq, bk, d, causal):
    """flash_fwd.cuh, fp16: per 8 keys (kJ) the score loop does 8·d FMAs, reads d Qt elements
    and 8·d/8 K vectors, and converts 8·d + d elements; per key the P V loop does d FMAs,
    reads one score and d/8 V vectors and converts d elements (the hand counts in
    loop_costs.flash_fwd). The compiled count adds index, loop and tile-copy instructions:
    up to 15% more per FMA than the hand count, never less."""
    entry = _cache()["kernels"][loop_costs.sass_key_flash(bq, bk, d, causal, "fp16")]
    qk, pv = entry["loops"]["qk"], entry["loops"]["pv"]
    kj, kc = 8, 8
    per_qk, per_pv = qk["source_iterations"], pv["source_iterations"]
    assert qk["mix"]["ffma"] == kj * d * per_qk
    assert qk["mix"]["lds"] == (d + kj * d // kc) * per_qk
    assert qk["mix"]["convert"] == (kj * d + d) * per_qk
    assert pv["mix"]["ffma"] == d * per_pv and pv["mix"]["mufu"] == per_pv
    assert pv["mix"]["lds"] == (1 + d // kc) * per_pv
    assert pv["mix"]["convert"] == d * per_pv
    hand = loop_costs.flash_fwd(bk, d, 2)
    assert hand < entry["instructions_per_fma"] < 1.15 * hand


def test_the_naive_matmuls_loop_and_copies_compile_to_what_the_source_says():
    """naive.cuh, 128 x 128 tiles, fp16: per k step a thread does 8 x 8 FMAs from one 16-byte
    vector of A and one of B, converting 16 elements (loop_costs.naive_matmul); the chunk
    copies move one element per store, 16 of A and 16 of B per thread per 32-deep chunk, and
    their index arithmetic is what the hand count leaves out."""
    for name in ("matmul_nt", "matmul_nn"):
        entry = _cache()["kernels"][loop_costs.sass_key_matmul(name, 128, 128, 32, "fp16")]
        prod = entry["loops"]["product"]
        n = prod["source_iterations"]
        assert prod["mix"]["ffma"] == 64 * n and prod["mix"]["lds"] == 2 * n
        assert prod["mix"]["convert"] == 16 * n
        for copy in ("copy_a", "copy_b"):
            c = entry["loops"][copy]
            assert (
                c["mix"]["sts"] * c["trips_per_step"] == 16 and c["mix"]["ldg"] == c["mix"]["sts"]
            )
        assert entry["instructions_per_fma"] > 1.2 * loop_costs.naive_matmul(128, 128, 2)


@pytest.mark.parametrize("bq,bk,d", [(64, 64, 64), (32, 128, 64), (64, 64, 128), (128, 32, 64)])
def test_the_wmma_kernels_step_holds_the_mmas_its_source_asks_for(bq, bk, d):
    """flash_fwd_wmma.cuh, fp16: per K/V step each warp runs (bk/16)·(d/16) 16 x 16 x 16
    mma_syncs for S = Q Kᵀ and as many for O += P V, each two HMMA.16816 on sm_90."""
    from kernels.sass_mix import wmma_key

    step = _cache()["wmma"][wmma_key(bq, bk, d, False, "fp16")]["step"]
    assert step["mix"]["hmma"] == 2 * 2 * (bk // 16) * (d // 16)
    assert step["mix"]["barrier"] >= 2  # the tile's loads and the step's end


def test_warps_past_the_last_column_copy_but_do_not_multiply():
    """naive.cuh's O = P V at head dim 64 with 128-column tiles: thread columns tx = tid / 16
    hold 8 columns each, so only tx < 8 (warps 0-3 of 8) have columns and multiply, while all
    8 warps copy the chunks. Per FMA that is twice the copies: 2.14 instructions, where
    Nsight Compute counted 2.18 for matmul_nn at seq 4096, d 64 (epilogue included); and the
    products issue from half the warps."""
    assert loop_costs.computing_warps(128, 64) == 0.5
    assert loop_costs.computing_warps(128, 4096) == 1.0
    assert loop_costs.computing_warps(128, 300) == pytest.approx((8 + 8 + 3) / 24)
    full_ipf, full = loop_costs.naive_matmul_compiled("matmul_nn", 128, 128, 32, "fp16", 2, 128)
    half_ipf, half = loop_costs.naive_matmul_compiled("matmul_nn", 128, 128, 32, "fp16", 2, 64)
    issued = _ncu_issued("matmul_nn", "(256, 1, 1)")
    warp_fmas = 4 * 16 * 4096 * 64 * 4096 / 32
    assert half_ipf * warp_fmas == pytest.approx(issued, rel=0.05)
    assert full_ipf * warp_fmas < 0.85 * issued  # all warps multiplying would undercount
    assert all(h > f for h, f in zip(half, full, strict=True))
    p = Problem(batch=4, heads=16, seq_q=4096, seq_k=4096, head_dim=64)
    qk, _softmax, pv = make_plan("standard-kernel", p, get_hardware("h200"), 128, 128, 32).kernels
    assert pv.instructions_per_fma == half_ipf and qk.instructions_per_fma == full_ipf


def _ncu_issued(kernel: str, block: str) -> float:
    """Issued warp instructions of the first profiled launch of `kernel` with `block` threads
    in the H200 run's Nsight Compute sections."""
    with open(NCU_SECTIONS) as f:
        rows = [r for r in csv.reader(f) if len(r) > 14]
    for r in rows:
        if r[4] == kernel and r[7] == block and r[12] == "Issued Instructions":
            return float(r[14].replace(",", ""))
    raise AssertionError(f"{kernel} not in {NCU_SECTIONS.name}")


def test_the_compiled_count_matches_what_nsight_compute_counted_on_the_h200():
    """flash_fwd, seq 4096, d 64, 64 x 64, batch 4 x 16 heads: Nsight Compute counted the
    warp instructions it issued; the cache's instructions per FMA times its warp FMAs (both
    products: 2·b·h·n²·d / 32) come within 5%: the counted loops are nearly all it runs."""
    entry = _cache()["kernels"][loop_costs.sass_key_flash(64, 64, 64, False, "fp16")]
    warp_fmas = 2 * 4 * 16 * 4096 * 4096 * 64 / 32
    measured = _ncu_issued("flash_fwd", "(64, 1, 1)")
    assert entry["instructions_per_fma"] * warp_fmas == pytest.approx(measured, rel=0.05)


def test_the_scalar_mirrors_carry_the_compiled_counts_and_slow_down_with_few_warps(capsys):
    """fa2-kernel on an H200 at 64 x 64: its kernel carries the cache's counts, and
    `hbmsim simulate --json` says its schedulers hold 2.5 warps (5 CTAs of 2 warps per SM)
    and issue in part of their cycles: the matmul rate falls below the full-issue one."""
    from hbmsim.cli.commands import main

    hw = get_hardware("h200")
    p = Problem(batch=4, heads=16, seq_q=4096, seq_k=4096, head_dim=64)
    (k,) = make_plan("fa2-kernel", p, hw, 64, 64).kernels
    entry = _cache()["kernels"][loop_costs.sass_key_flash(64, 64, 64, False, "fp16")]
    assert k.instructions_per_fma == entry["instructions_per_fma"]
    assert list(k.cycles_per_fma_by_warps) == entry["cycles_per_fma_by_warps"]
    args = ["simulate", "--algo", "fa2-kernel", "--gpu", "h200", "--seq", "4096"]
    assert main([*args, "--batch", "4", "--heads", "16", "--no-engine", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["by_kernel"]
    assert "2.5 warps per scheduler" in row["matmul_units"]
    full_issue = 2 * hw.issue_rate() / k.instructions_per_fma
    assert row["matmul_rate_flops_per_s"] < 0.8 * full_issue


# --- regenerating -------------------------------------------------------------------------


def _require_tools():
    from kernels.sass_mix import nvdisasm

    missing = []
    if nvdisasm() is None:
        missing.append("nvdisasm (pip install nvidia-cuda-nvdisasm)")
    try:
        from cupy.cuda import nvrtc  # noqa: F401

        from kernels.nvrtc import cuda_include_dirs

        if not cuda_include_dirs():
            missing.append("the CUDA headers (cuda_fp16.h)")
    except ImportError:
        missing.append("CuPy's NVRTC binding")
    if missing:
        if IN_CI:
            pytest.fail(f"{', '.join(missing)} required in CI")
        pytest.skip(f"{', '.join(missing)} not installed")


def test_regenerating_the_cache_counts_the_same_loops():
    """The script's counts for one flash_fwd variant and both matmuls, fresh from the
    compiler: the same as the cache with the cache's compiler, and with another release the
    same FMAs, loads and conversions (the hand-countable classes) and within 5% of its
    instructions per FMA."""
    _require_tools()
    from kernels.sass_mix import generate, wmma_key

    keys = {
        loop_costs.sass_key_flash(64, 64, 64, False, "fp16"),
        loop_costs.sass_key_matmul("matmul_nt", 128, 128, 32, "fp16"),
    }
    fresh, cached = generate(keys | {wmma_key(64, 64, 64, False, "fp16")}), _cache()
    (wkey,) = fresh["wmma"]
    assert fresh["wmma"][wkey]["step"]["mix"]["hmma"] == cached["wmma"][wkey]["step"]["mix"]["hmma"]
    for key in keys:
        new, old = fresh["kernels"][key], cached["kernels"][key]
        if fresh["compiler"] == cached["compiler"]:
            assert new == old
            continue
        for loop in ("qk", "pv", "product"):
            if loop in old["loops"]:
                for cls in ("ffma", "lds", "convert"):
                    per = old["loops"][loop]["source_iterations"]
                    per_new = new["loops"][loop]["source_iterations"]
                    assert new["loops"][loop]["mix"][cls] / per_new == pytest.approx(
                        old["loops"][loop]["mix"][cls] / per
                    )
        assert new["instructions_per_fma"] == pytest.approx(old["instructions_per_fma"], rel=0.05)


def test_a_trace_file_of_the_scalar_kernel_replays_at_the_same_time(tmp_path, capsys):
    """`hbmsim trace` writes the kernel's scheduler cycles per FMA into the file's header, and
    `hbmsim replay` times it as `simulate` does: the issue model travels with the trace."""
    from hbmsim.cli.commands import main

    path = tmp_path / "k.hbmtrace"
    args = ["--algo", "fa2-kernel", "--gpu", "h200", "--seq", "512", "--heads", "4"]
    assert main(["trace", *args, "-o", str(path)]) == 0
    capsys.readouterr()
    assert main(["replay", str(path), "--gpu", "h200", "--json"]) == 0
    replayed = json.loads(capsys.readouterr().out)
    assert main(["simulate", *args, "--json"]) == 0
    direct = json.loads(capsys.readouterr().out)
    assert replayed["time_s"] == pytest.approx(direct["time_s"], rel=1e-9)
    from hbmsim.interpret.tracefile import load_trace

    (kmeta,) = load_trace(path).meta["kernels"]
    entry = _cache()["kernels"][loop_costs.sass_key_flash(64, 64, 64, False, "fp16")]
    assert kmeta["cycles_per_fma_by_warps"] == entry["cycles_per_fma_by_warps"]
