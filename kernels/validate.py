"""The validation run: measure the kernels on a GPU, then predict them with the simulator.

    python -m kernels.validate --out DIR            # on a GPU machine: measure, then predict
    python -m kernels.validate --out DIR --measure-only
    hbmsim validate --measurements DIR/measurements.json   # predict later, anywhere

The measuring half needs only CuPy and NumPy (the GPU machine may lack SimPy, Streamlit and
Plotly); the predicting half needs hbmsim. Kernels are compiled by NVRTC to cubins exactly as
CI compiles them (kernels/nvrtc.py). Steps:
1. correctness of every kernel (flash_fwd, flash_fwd_wmma, the naive path and its cuBLAS
   baseline, each in the element types it takes) against float64 naive attention on fresh
   random inputs, outputs poisoned with NaN before each run;
2. calibration microbenchmarks, never the attention kernels: device-to-device copy bandwidth
   (bytes read + written), L2 bandwidth (copies of a buffer that fits L2), load latency
   (pointer chase, in DRAM and in L2), the scalar FMA and the WMMA tensor-core rates the
   kernels' inner loops run on, and launch overhead (empty kernels);
3. a timed sweep (median of CUDA events, L2 flushed before each run) of the scalar and WMMA
   flash kernels, the naive path and its cuBLAS baseline: seq 512..16384, tiles 32/64/128,
   head dim 64 and 128, causal on and off; each configuration records its kernels' registers
   and local memory per thread, as the loaded cubin reports them;
4. Nsight Compute DRAM bytes (`--clock-control none`) for one configuration of each kernel
   kind when `ncu` is on PATH, each launched once in a child process (recorded as unavailable,
   with the reason, otherwise);
5. torch's scaled_dot_product_attention timings when torch is importable.
A step or configuration that fails is recorded with its error and the run goes on;
measurements.json is rewritten after every step. The prediction writes
kernels/results/<gpu>-<date>.json (see hbmsim/validation.py): measured and predicted time and
DRAM bytes per configuration, errors per kernel kind, rank correlation across tile sizes,
flash-vs-naive and flash-vs-cuBLAS speedups, flash TFLOP/s and its fraction of SDPA.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from hbmsim import Problem  # noqa: E402  (hbmsim.problem needs only NumPy)
from hbmsim.errors import ConfigError  # noqa: E402
from hbmsim.files.writer import write_atomic  # noqa: E402  (the standard library only)

KINDS = {  # sweep kind -> (the simulator's mirror, what runs)
    "flash": ("fa2-kernel", "flash_fwd.cu: scalar FMA"),
    "flash-wmma": ("fa2-wmma-kernel", "flash_fwd_wmma.cu: tensor cores (WMMA)"),
    "naive": ("standard-kernel", "naive.cu: tiled matmul, row softmax, tiled matmul"),
    # its plan is hbmsim/libraries/cupy/matmul.py's (what cupy.matmul runs), not the algo's
    "cublas": ("standard-kernel", "cupy.matmul (cuBLAS) products around naive.cu's softmax"),
    # the same two flash kernels, their shared memory padded so an SM holds fewer of them
    "flash-occupancy": ("fa2-kernel", "flash_fwd.cu, padded to k CTAs per SM"),
    "flash-wmma-occupancy": ("fa2-wmma-kernel", "flash_fwd_wmma.cu, padded to k CTAs per SM"),
}


class Point(NamedTuple):
    """One configuration of the timed sweep. `ctas_per_sm`: the launch asks for shared memory
    such that an SM holds exactly that many of its CTAs (None: what the kernel needs)."""

    kind: str
    seq: int
    head_dim: int
    causal: bool
    bq: int
    bk: int
    ctas_per_sm: int | None = None


# The occupancy points. The engine runs a one-template kernel's waves in lockstep: the CTAs
# sharing an SM load, compute and store together, so a wave's first load and last store are
# exposed in every wave (flash-attn 2 at 512 tokens on the H100: 4.9 and 3.2 us of a 35.5 us
# wave, docs/limits.md "Caveats"). Real CTAs drift out of step, and co-resident ones hide part of
# each other's prologue and epilogue: how much is what these measure. The same kernels and
# problems as the 64 x 64 rows, at fewer CTAs per SM than they hold unpadded (flash_fwd_wmma
# at d 64: 3 on the H200, flash_fwd: 5), so the waves are more and shorter; the prediction
# pads its plan alike (_plan_of), and the rows' errors beside the unpadded ones' say whether
# lockstep waves hold as co-residency changes.
OCCUPANCY_POINTS = [
    Point(kind, s, 64, False, 64, 64, k)
    for kind, ks in (("flash-wmma-occupancy", (1, 2)), ("flash-occupancy", (1, 2, 3)))
    for s in (1024, 4096)
    for k in ks
]
SWEEP = tuple(
    Point(*point)
    for point in [
        (kind, s, d, c, 64, 64)
        for kind in ("flash", "flash-wmma")
        for s in (1024, 4096, 16384)
        for d in (64, 128)
        for c in (False, True)
    ]
    + [
        (kind, 4096, 64, False, bq, bk)
        for kind in ("flash", "flash-wmma")
        for bq in (32, 64, 128)
        for bk in (32, 64, 128)
        if (bq, bk) != (64, 64)  # already above
    ]
    + [
        (kind, s, d, c, 128, 128)
        for kind in ("naive", "cublas")
        for s in (512, 1024, 4096)
        for d in (64, 128)
        for c in (False, True)
    ]
    + OCCUPANCY_POINTS
)
BATCH, HEADS = 4, 16


def _problem(seq: int, d: int, causal: bool) -> Problem:
    return Problem(
        batch=BATCH, heads=HEADS, seq_q=seq, seq_k=seq, head_dim=d, dtype="fp16", causal=causal
    )


# --- measuring (GPU) -------------------------------------------------------------------------


def device_info() -> dict:
    import cupy as cp

    props = cp.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return {
        "gpu": name,
        "sm_count": props["multiProcessorCount"],
        "l2_bytes": props["l2CacheSize"],
        "driver": cp.cuda.runtime.driverGetVersion(),
        "cuda_runtime": cp.cuda.runtime.runtimeGetVersion(),
        "cupy": cp.__version__,
        "date": datetime.date.today().isoformat(),
    }


def _error(exc: BaseException) -> str:
    """One line for a step that failed on the device: recorded, and the run goes on."""
    return f"{type(exc).__name__}: {str(exc).strip()[-500:]}"


def check_correctness(hw_name: str) -> list[dict]:
    """Every kernel against float64 naive attention on fresh random inputs (ragged, GQA, both
    masks, each element type it takes), outputs poisoned with NaN before each run."""
    from hbmsim import get_hardware
    from hbmsim.interpret.reference import naive_attention

    from .runner import run_cublas, run_flash, run_naive

    hw = get_hardware(hw_name)
    out = []
    rng = np.random.default_rng()
    tolerance = {"fp16": 2e-3, "bf16": 2e-2, "fp32": 1e-5}
    kernels = {  # name -> (dtypes it takes, run)
        "flash": (
            ("fp16", "bf16", "fp32"),
            lambda q, k, v, p: run_flash(q, k, v, p, 64, 64, p.dtype)[0],
        ),
        "flash-wmma": (
            ("fp16", "bf16"),
            lambda q, k, v, p: run_flash(q, k, v, p, 64, 64, p.dtype, wmma=True)[0],
        ),
        "naive": (
            ("fp16", "bf16", "fp32"),
            lambda q, k, v, p: run_naive(q, k, v, p, hw, 64, 64, 32, p.dtype),
        ),
        "cublas": (("fp16", "fp32"), lambda q, k, v, p: run_cublas(q, k, v, p, hw, p.dtype)),
    }
    for dtype in ("fp16", "bf16", "fp32"):
        for causal in (False, True):
            p = Problem(
                batch=2,
                heads=4,
                kv_heads=2,
                seq_q=333,
                seq_k=517,
                head_dim=64,
                causal=causal,
                dtype=dtype,
            )
            q, k, v = (
                rng.standard_normal(s) for s in ((2, 4, 333, 64), (2, 2, 517, 64), (2, 2, 517, 64))
            )
            ref, _ = naive_attention(q, k, v, p)
            for name, (dtypes, run) in kernels.items():
                if dtype not in dtypes:
                    continue
                row = {"kernel": name, "dtype": dtype, "causal": causal}
                try:
                    o = run(q, k, v, p)
                except Exception as exc:  # noqa: BLE001 - recorded; the other kernels still run
                    out.append({**row, "error": _error(exc), "passed": False})
                    continue
                rel = (
                    float(np.linalg.norm(o - ref) / np.linalg.norm(ref))
                    if np.all(np.isfinite(o))
                    else float("inf")
                )
                out.append({**row, "rel_err": rel, "passed": rel <= tolerance[dtype]})
    return out


def calibrate(info: dict) -> dict:
    """The hardware numbers the simulator's profile takes, each from its own microbenchmark.
    A benchmark that fails is recorded under "errors" (the preset's value stands in for it)."""
    import cupy as cp

    from .runner import module, time_median

    mod = module("calibrate.cu", ())

    def copy_bandwidth() -> float:  # bytes read + written per second
        big = cp.empty(1 << 28, dtype=cp.float32)  # 1 GiB
        dst = cp.empty_like(big)
        return 2 * big.nbytes / time_median(lambda: cp.copyto(dst, big), 0, reps=10)

    def l2_bandwidth() -> float:
        small = cp.empty(info["l2_bytes"] // 8, dtype=cp.float32)  # a quarter of L2 per buffer
        small_dst = cp.empty_like(small)
        t = time_median(lambda: [cp.copyto(small_dst, small) for _ in range(20)], 0, reps=10)
        return 20 * 2 * small.nbytes / t

    def latency(n_elems: int, flush: bool) -> float:
        """Seconds per step of a pointer chase over n_elems indices. The chase touches only
        `steps` lines, which its warm-up leaves in L2: the DRAM chase flushes L2 before each
        timed run (`flush`), or it would time L2 hits."""
        perm = np.random.default_rng(0).permutation(n_elems).astype(np.uint32)
        nxt = np.empty(n_elems, dtype=np.uint32)
        nxt[perm] = np.roll(perm, -1)  # one cycle through all elements
        d_next, out = cp.asarray(nxt), cp.zeros(1, dtype=cp.uint32)
        steps = 20000
        fn = mod.get_function("chase")
        t = time_median(
            lambda: fn((1,), (1,), (d_next, np.uint32(0), np.int32(steps), out)),
            2 * info["l2_bytes"] if flush else 0,
            reps=5,
        )
        return t / steps

    def launch_overhead() -> float:  # back-to-back empty launches from Python, as the runs
        empty = mod.get_function("empty")
        launches = 200
        t = time_median(lambda: [empty((1,), (1,), ()) for _ in range(launches)], 0, reps=5)
        return t / launches

    # the math loops: (kernel, flops per warp per iteration, iterations, floats out per warp);
    # fma_loop: 4 flops per thread per iteration, wmma_loop: 4 16 x 16 x 16 MMAs per warp
    fma_loop = ("fma_loop", 32 * 4, 4096, 32)
    wmma_loop = ("wmma_loop", 4 * 2 * 16**3, 1024, 256)

    def loop_rate(loop: tuple, blocks: int, warps: int) -> float:
        """FLOP/s of one math loop launched as `blocks` blocks of `warps` warps."""
        kernel, flops_per_warp_iter, iters, per_warp_out = loop
        fn = mod.get_function(kernel)
        out = cp.empty(blocks * warps * per_warp_out, dtype=cp.float32)
        args = (out, np.int32(iters))
        t = time_median(lambda: fn((blocks,), (32 * warps,), args), 0, reps=5)
        return blocks * warps * iters * flops_per_warp_iter / t

    def l2_atomic_rate() -> float:  # bytes added per second by fp32 atomics that hit L2
        red = mod.get_function("red_add_loop")
        n, iters = info["l2_bytes"] // 16, 8  # a quarter of L2
        buf = cp.zeros(n, dtype=cp.float32)
        grid, args = (info["sm_count"] * 8,), (buf, np.int32(n), np.int32(iters))
        t = time_median(lambda: red(grid, (256,), args), 0, reps=5)
        return iters * n * 4 / t

    def cta_seconds_per_sm() -> float:
        """SM-seconds per CTA of 128 threads that does nothing: the rate an SM starts and
        retires CTAs. CuPy's elementwise kernels run one element per thread in CTAs of 128
        (the H200 run's casts moved 210 G elements/s, a quarter of the copy bandwidth): if
        this rate binds them, a CTA's start costs more than its work."""
        empty = mod.get_function("empty")
        blocks = info["sm_count"] * 4096
        t = time_median(lambda: empty((blocks,), (128,), ()), 0, reps=5)
        return t * info["sm_count"] / blocks

    def pipes_overlap() -> dict:
        """How much of the shorter of two loops hides under the other when one CTA per SM
        runs asynchronous warpgroup MMA beside exponentials ("exp") or FP32 FMAs ("vector") in
        other warpgroups (pipes_probe.cu): (alone + alone - together) / the shorter alone, 1 if
        they overlap, 0 if they take turns. Hopper only; the loops are sized to a few ms."""
        cc = cp.cuda.Device().compute_capability
        if cc != "90":
            raise RuntimeError(f"wgmma needs sm_90 (this GPU is sm_{cc})")
        probe = module("pipes_probe.cu", (), "a").get_function("pipes_probe")
        blocks = info["sm_count"]
        out = cp.empty(blocks * 384, dtype=cp.float32)
        iters = (np.int32(2000), np.int32(30000), np.int32(240000))  # mma, ex2, fma

        def timed(mode: int) -> float:
            args = (out, np.int32(mode), *iters)
            return time_median(lambda: probe((blocks,), (384,), args), 0, reps=5)

        mma, ex2, fma = timed(1), timed(2), timed(4)
        result = {"alone_s": {"mma": mma, "exp": ex2, "vector": fma}}
        for name, alone, mode in (("exp", ex2, 3), ("vector", fma, 5)):
            together = timed(mode)
            result[name] = (mma + alone - together) / min(mma, alone)
        return result

    def latency_cycles() -> dict:
        """Clocks per step of a dependent chain of FFMAs, shared-memory loads and MUFU.EX2
        (calibrate.cu `latency_chain`, one thread): the latencies hbmsim/gpu/issue.py takes
        from published microbenchmarks, measured on this GPU for the next comparison."""
        fn = mod.get_function("latency_chain")
        cycles, out = cp.zeros(1, dtype=cp.int64), cp.zeros(1, dtype=cp.float32)
        steps = 4096
        found = {}
        for mode, name in ((0, "ffma"), (1, "shared"), (2, "mufu")):
            args = (np.int32(mode), np.int32(steps), np.float32(0.0), cycles, out)
            fn((1,), (1,), args, shared_mem=1024)
            cp.cuda.Device().synchronize()
            found[name] = float(cycles.get()[0]) / steps
        return found

    def by_warps(loop: tuple) -> dict:
        """The rate of a math loop with w warps on each SM (one block of w warps per SM), w
        from 1 to 32: how much of an SM's math a few warps keep busy, which the engine assumes
        is all of it (the scalar kernels' schedulers were 49-71% busy with 1-3 warps each)."""
        return {str(w): loop_rate(loop, info["sm_count"], w) for w in (1, 2, 4, 8, 16, 32)}

    benchmarks = {
        "hbm_bytes_per_s": copy_bandwidth,
        "l2_bytes_per_s": l2_bandwidth,
        "hbm_latency_s": lambda: latency(1 << 26, flush=True),  # 256 MiB of indices: DRAM
        "l2_latency_s": lambda: latency(info["l2_bytes"] // 16, flush=False),  # a quarter of L2
        "launch_overhead_s": launch_overhead,
        # 16 blocks of 8 warps per SM's worth: more than an SM holds at once, so it stays full
        "scalar_fma_flops_per_s": lambda: loop_rate(fma_loop, info["sm_count"] * 16, 8),
        "wmma_fp16_flops_per_s": lambda: loop_rate(wmma_loop, info["sm_count"] * 16, 8),
        # recorded, not used by the prediction yet: the engine's atomic adds (hbmsim/engine/), an
        # SM's rate of starting CTAs, and the math rates a few warps per SM reach
        "l2_atomic_bytes_per_s": l2_atomic_rate,
        "cta_seconds_per_sm": cta_seconds_per_sm,
        "fma_flops_per_s_by_warps_per_sm": lambda: by_warps(fma_loop),
        "latency_cycles": latency_cycles,
        "wmma_flops_per_s_by_warps_per_sm": lambda: by_warps(wmma_loop),
        # which pipes run beside asynchronous warpgroup MMA: Hardware.async_mma_overlaps
        "async_mma_overlap": pipes_overlap,
    }
    out: dict = {}
    errors = {}
    for key, bench in benchmarks.items():
        try:
            out[key] = bench()
        except Exception as exc:  # noqa: BLE001 - recorded; the preset's value stands in
            errors[key] = _error(exc)
    if errors:
        out["errors"] = errors
    return out


def _label(seq: int, d: int, causal: bool) -> str:
    return f"seq{seq} d{d}{' causal' if causal else ''}"


def _config_name(index: int) -> str:
    pt = SWEEP[index]
    k = f" {pt.ctas_per_sm} per SM" if pt.ctas_per_sm else ""
    return f"{pt.kind} {_label(pt.seq, pt.head_dim, pt.causal)} {pt.bq}x{pt.bk}{k}"


def _config_launch(index: int, hw, rng):
    """(launch, row) for SWEEP[index]: a no-argument function running that configuration once
    on fresh random fp16 inputs with poisoned outputs, and its row of measurements.json."""
    import cupy as cp

    from .runner import (
        cublas_launcher,
        device_smem,
        flash_launcher,
        flash_smem_bytes,
        naive_launcher,
        padded_smem_bytes,
        poisoned,
        to_device,
    )

    kind, seq, d, causal, bq, bk, ctas_per_sm = SWEEP[index]
    p = _problem(seq, d, causal)
    shape = (p.batch, p.heads, seq, d)
    q, k, v = (to_device(rng.standard_normal(shape), "fp16") for _ in range(3))
    o = poisoned(shape, "fp16")
    tiles = {"bq": bq, "bk": bk}
    padded = None
    if kind.startswith("flash"):
        lse = cp.empty(shape[:3], dtype=cp.float32)
        wmma = kind.startswith("flash-wmma")
        if ctas_per_sm:
            padded = padded_smem_bytes(
                ctas_per_sm, flash_smem_bytes(bq, bk, d, 2, wmma), *device_smem(hw)
            )
        flash = flash_launcher(p, bq, bk, "fp16", wmma=wmma, smem=padded)

        def launch():
            flash(q, k, v, o, lse)

        launched = flash
    else:
        nn = (p.batch, p.heads, seq, seq)
        s, pm = poisoned(nn, "fp16"), poisoned(nn, "fp16")
        unfused = (
            naive_launcher(p, hw, bq, bk, 32, "fp16")
            if kind == "naive"
            else cublas_launcher(p, hw, "fp16")
        )
        tiles["bd"] = 32

        def launch():
            unfused(q, k, v, s, pm, o)

        launched = unfused
    row = {
        "name": _config_name(index),
        "kind": kind,
        "algo": KINDS[kind][0],
        "problem": p.to_dict(),
        "tiles": tiles,
        "resources": launched.resources,  # registers (and spills) per CUDA kernel
    }
    if padded is not None:  # what the launch asked for: the prediction pads its plan alike
        row["smem_bytes"] = padded
        row["ctas_per_sm"] = ctas_per_sm
    if kind == "cublas":
        row["matmul"] = "cublas"
    return launch, row


def time_sweep(hw_name: str, l2_bytes: int, deadline: float = float("inf")) -> list[dict]:
    """Every SWEEP configuration timed; those not started by `deadline` (time.monotonic())
    are recorded as skipped, so the run ends within its time budget."""
    from hbmsim import get_hardware

    from .runner import time_median

    hw = get_hardware(hw_name)
    rng = np.random.default_rng()
    rows = []
    for index in range(len(SWEEP)):
        try:
            if time.monotonic() > deadline:
                raise TimeoutError("skipped: the run's time budget was spent")
            launch, row = _config_launch(index, hw, rng)
            row["measured_time_s"] = time_median(launch, 2 * l2_bytes)
        except Exception as exc:  # noqa: BLE001 - recorded; the sweep goes on
            row = {"name": _config_name(index), "kind": SWEEP[index][0], "error": _error(exc)}
            print(f"  {row['name']}: FAILED {row['error']}", flush=True)
        else:
            print(f"  {row['name']}: {row['measured_time_s'] * 1e6:.1f} us", flush=True)
        row["index"] = index
        rows.append(row)
    return rows


NCU_METRICS = "dram__bytes_read.sum,dram__bytes_write.sum"
NCU_SUBSET = 4  # configurations profiled: ncu replays each kernel and is slow
NCU_MIN_S = 20.0  # no ncu child starts with less of the budget left
RESERVE_S = 90.0  # the end of the budget the sweep leaves to ncu and SDPA


def budget_problem(budget_s: float) -> str | None:
    """What is wrong with a time budget for the GPU run, or None: it must leave the sweep
    something before RESERVE_S. Both command lines (hbmsim validate and this module's) ask."""
    if budget_s > RESERVE_S:
        return None
    return f"must be more than {RESERVE_S:g} seconds (got {budget_s:g})"


NCU_UNITS = {
    **{u: 1 for u in ("byte", "B")},
    **{u: 1e3 for u in ("Kbyte", "KB")},
    **{u: 1e6 for u in ("Mbyte", "MB")},
    **{u: 1e9 for u in ("Gbyte", "GB")},
    **{u: 1e12 for u in ("Tbyte", "TB")},
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
}


def run_one(index: int, preset: str) -> None:
    """Launch configuration `index` of SWEEP once (what ncu profiles in a child process)."""
    import cupy as cp
    from cupy.cuda import profiler

    from hbmsim import get_hardware

    launch, _ = _config_launch(index, get_hardware(preset), np.random.default_rng())
    cp.cuda.Device().synchronize()  # inputs ready; ncu profiles only what follows
    profiler.start()
    launch()
    cp.cuda.Device().synchronize()
    profiler.stop()


def parse_ncu_csv(stdout: str) -> tuple[dict[str, float], list[str]]:
    """(bytes per NCU_METRICS metric summed over the profiled kernels, their names) from the
    stdout of `ncu --csv`: quoted CSV rows, one per kernel and metric, among ==PROF== lines and
    the program's own output. Raises ValueError on a unit it does not know."""
    import csv
    import io

    lines = [ln for ln in stdout.splitlines() if ln.startswith('"')]
    totals = dict.fromkeys(NCU_METRICS.split(","), 0.0)
    kernels: list[str] = []
    for row in csv.DictReader(io.StringIO("\n".join(lines))):
        name, unit = row.get("Metric Name"), row.get("Metric Unit", "byte")
        if name not in totals:
            continue
        if unit not in NCU_UNITS:
            raise ValueError(f"ncu reported unknown unit {unit!r} for {name}")
        totals[name] += float(row["Metric Value"].replace(",", "")) * NCU_UNITS[unit]
        if name == "dram__bytes_read.sum":
            kernels.append(row.get("Kernel Name", "?"))
    return totals, kernels


def ncu_bytes(rows: list[dict], preset: str, deadline: float = float("inf")) -> dict:
    """DRAM bytes read and written, from Nsight Compute, for one configuration of each kind:
    each is launched once in a child process under `ncu --clock-control none
    --profile-from-start off`, which profiles only the kernels between the child's profiler
    start and stop (the timed launch; not the input conversions or the NaN poisoning), and
    the metrics of those kernels are summed. Any failure is recorded with its reason instead
    of failing the run."""
    if shutil.which("ncu") is None:
        return {"available": False, "reason": "ncu is not on PATH"}
    picked = [  # each kind at seq 4096, d 64, no mask: comparable side by side
        i
        for i, (kind, seq, d, causal, bq, bk, ctas_per_sm) in enumerate(SWEEP)
        if seq == 4096
        and d == 64
        and not causal
        and not ctas_per_sm
        and bq == bk == (64 if "flash" in kind else 128)
    ][:NCU_SUBSET]
    out = {}
    for index in picked:
        if "measured_time_s" not in rows[index]:
            continue  # it failed in the sweep already
        left = deadline - time.monotonic()
        if left < NCU_MIN_S:
            out[rows[index]["name"]] = {"skipped": "the run's time budget was spent"}
            continue
        cmd = [
            "ncu",
            "--clock-control",
            "none",
            "--profile-from-start",
            "off",
            "--print-units",
            "base",
            "--metrics",
            NCU_METRICS,
            "--csv",
            sys.executable,
            "-m",
            "kernels.validate",
            "--run-one",
            str(index),
            "--preset",
            preset,
            "--out",
            ".",
        ]
        timeout = min(180.0, left)
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {
                "available": False,
                "reason": f"ncu timed out on configuration {index} ({timeout:.0f} s)",
            }
        if done.returncode:
            return {"available": False, "reason": f"ncu failed: {done.stderr[-500:]}"}
        try:
            totals, kernels = parse_ncu_csv(done.stdout)
        except ValueError as exc:
            return {"available": False, "reason": str(exc)}
        if not kernels:
            return {"available": False, "reason": f"ncu profiled no kernel: {done.stdout[-500:]}"}
        rows[index]["measured_dram_bytes"] = int(sum(totals.values()))
        out[rows[index]["name"]] = {**totals, "kernels": kernels}
    return {"available": True, "metrics": NCU_METRICS, "configs": out}


def sdpa_times(l2_bytes: int, deadline: float = float("inf")) -> list[dict]:
    """torch's scaled_dot_product_attention on the flash sweep's 64 x 64 problems (fp16), as
    an outside reference; empty when torch is not importable. Shapes not started by
    `deadline` are recorded as skipped."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return []
    import cupy as cp

    from .runner import time_median

    out = []
    shapes = sorted({(pt.seq, pt.head_dim, pt.causal) for pt in SWEEP if pt.kind == "flash-wmma"})
    for seq, d, causal in shapes:
        row = {"seq": seq, "head_dim": d, "causal": causal}
        if time.monotonic() > deadline:
            out.append({**row, "error": "skipped: the run's time budget was spent"})
            continue
        try:
            q, k, v = (
                torch.randn(BATCH, HEADS, seq, d, device="cuda", dtype=torch.float16)
                for _ in range(3)
            )
            row["time_s"] = time_median(
                lambda q=q, k=k, v=v, c=causal: F.scaled_dot_product_attention(
                    q, k, v, is_causal=c
                ),
                2 * l2_bytes,
            )
        except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
            row["error"] = _error(exc)
        out.append(row)
    cp.cuda.Device().synchronize()
    return out


def measure(out_dir: Path, preset: str, budget_s: float = 420.0) -> Path:
    """Every measuring step in turn; measurements.json is rewritten after each, so a run cut
    short still leaves what it measured. The run keeps within `budget_s` seconds (plus the
    one configuration, ncu child or SDPA shape under way): the sweep starts no configuration in
    the last RESERVE_S of it, which it leaves to ncu and SDPA, and those start nothing once it
    is spent (what they skip is said so in the file)."""
    deadline = time.monotonic() + budget_s
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "measurements.json"
    info = device_info()
    doc: dict = {"device": info, "preset": preset, "batch": BATCH, "heads": HEADS}
    steps = (
        ("correctness", lambda: check_correctness(preset)),
        ("calibration", lambda: calibrate(info)),
        ("configs", lambda: time_sweep(preset, info["l2_bytes"], deadline - RESERVE_S)),
        ("ncu", lambda: ncu_bytes(doc["configs"], preset, deadline)),
        ("sdpa", lambda: sdpa_times(info["l2_bytes"], deadline)),
    )
    for key, step in steps:
        if key in ("ncu", "sdpa") and time.monotonic() > deadline:
            doc[key] = {"available": False, "reason": "skipped: the run's time budget was spent"}
            if key == "sdpa":
                doc[key] = []
        else:
            print(f"{key} ...", flush=True)
            doc[key] = step()
        write_atomic(path, json.dumps(doc, indent=1), "out")
    return path


# --- predicting (anywhere) -------------------------------------------------------------------


OVERLAP_HIDDEN = 0.5  # of the shorter loop hidden under wgmma: the pipes run at once


def calibrated_hardware(doc: dict):
    """The preset named in the measurements with the measured numbers in place of its own.

    The scalar kernels' matmuls and every kernel's softmax run on the FMA units: the measured
    FMA rate is the fp32 vector rate (the engine charges kernels without tensor cores there).
    The WMMA loop's rate is the tensor-core rate of fp16 and bf16 (the same units on these
    GPUs), and of warp-level MMA (`warp_mma_flops_per_s`: it is what WMMA runs). The issue
    rate stays the preset's clock x schedulers (Nsight Compute read 1.98 GHz under the scalar
    kernels on the H200, its boost clock). A number the run could not measure keeps the
    preset's value.
    """
    from hbmsim import get_hardware

    base = get_hardware(doc["preset"])
    c = doc["calibration"]
    changes = {
        key: c[key]
        for key in (
            "hbm_bytes_per_s",
            "l2_bytes_per_s",
            "hbm_latency_s",
            "l2_latency_s",
            "launch_overhead_s",
        )
        if key in c
    }
    if "scalar_fma_flops_per_s" in c:
        rate = c["scalar_fma_flops_per_s"]
        changes["vector_flops_per_s"] = {**base.vector_flops_per_s, "fp32": rate}
        changes["matrix_flops_per_s"] = {**base.matrix_flops_per_s, "fp32": rate}
    if "wmma_fp16_flops_per_s" in c:
        tc = c["wmma_fp16_flops_per_s"]
        changes["matrix_flops_per_s"] = {
            **changes.get("matrix_flops_per_s", base.matrix_flops_per_s),
            "fp16": tc,
            "bf16": tc,
        }
        changes["warp_mma_flops_per_s"] = {**changes["matrix_flops_per_s"]}
    if "async_mma_overlap" in c:  # a pipe runs beside wgmma when most of it hid under it
        overlap = c["async_mma_overlap"]
        changes["async_mma_overlaps"] = tuple(
            pipe for pipe in ("vector", "exp") if overlap.get(pipe, 0.0) >= OVERLAP_HIDDEN
        )
    return base.with_overrides(
        name=f"{doc['preset']}+calibrated",
        l2_bytes=doc["device"]["l2_bytes"],
        sm_count=doc["device"]["sm_count"],
        source=f"calibrated on {doc['device']['gpu']} {doc['device']['date']}",
        **changes,
    )


def _plan_of(row: dict, hw):
    """The simulator's plan of one measured configuration, each kernel with the register
    count the GPU's loaded cubin reported (it limits occupancy). The cuBLAS baseline is the
    mirror of what `cupy.matmul` runs around naive.cu's softmax (hbmsim/libraries/cupy/matmul.py:
    half precision cast to float32 and multiplied on the FMA units); its GEMMs' registers are
    cuBLAS's and not known, so only the softmax's limit occupancy."""
    from hbmsim import make_plan
    from hbmsim.algorithms.kernel_naive import CUDA_NAMES
    from hbmsim.libraries.cupy import matmul as cupy_matmul

    t = row["tiles"]
    problem = Problem.from_dict(row["problem"])
    if row.get("matmul") == "cublas":
        plan = cupy_matmul.make_plan(problem, hw)
    else:
        plan = make_plan(row["algo"], problem, hw, t["bq"], t["bk"], t.get("bd"))
    registers = {n: r["registers"] for n, r in row.get("resources", {}).items() if "registers" in r}
    kernels = tuple(
        dataclasses.replace(k, registers_per_thread=registers.get(CUDA_NAMES.get(k.name, k.name)))
        for k in plan.kernels
    )
    if "smem_bytes" in row:  # an occupancy point: the launch asked for more than it needs
        kernels = tuple(_padded(k, row["smem_bytes"]) for k in kernels)
    return dataclasses.replace(plan, kernels=kernels)


def _padded(kernel, smem_bytes: int):
    """The kernel with an unused shared-memory buffer making its footprint `smem_bytes`, as an
    occupancy point's launch asked for (Point.ctas_per_sm); ConfigError where that is less
    than the kernel's own buffers."""
    from hbmsim.program.plan import Buffer

    pad = smem_bytes - kernel.sram_bytes
    if pad < 0:
        raise ConfigError(
            "smem_bytes",
            f"must be at least {kernel.name}'s own {kernel.sram_bytes:,} bytes "
            f"(got {smem_bytes:,})",
        )
    if not pad:
        return kernel
    return dataclasses.replace(
        kernel, buffers=(*kernel.buffers, Buffer("occupancy_pad", (pad,), 1))
    )


def _shape(c: dict) -> tuple:
    p = c["problem"]
    return p["seq_q"], p["head_dim"], p["causal"]


def comparisons(configs: list[dict], sdpa: list[dict]) -> dict:
    """Measured ratios: each flash kernel against the naive path (its own kernels and cuBLAS)
    at 64 x 64 tiles, the flash kernels' TFLOP/s and their fraction of SDPA's speed."""
    by = {
        (c["kind"], _shape(c)): c
        for c in configs
        if "flash" not in c["kind"] or (c["tiles"]["bq"], c["tiles"]["bk"]) == (64, 64)
    }
    sdpa_time = {(r["seq"], r["head_dim"], r["causal"]): r["time_s"] for r in sdpa if "time_s" in r}
    out: dict = {}
    for flash in ("flash", "flash-wmma"):
        for base in ("naive", "cublas"):
            ratios = {
                _label(*shape): by[(base, shape)]["measured_time_s"] / c["measured_time_s"]
                for (kind, shape), c in by.items()
                if kind == flash and (base, shape) in by
            }
            if ratios:
                out[f"{flash}_vs_{base}_speedup"] = ratios
        tflops = {  # the papers' count: 4 b h n² d, causal counting the visible half
            _label(*shape): Problem.from_dict(c["problem"]).attention_flops
            / c["measured_time_s"]
            / 1e12
            for (kind, shape), c in by.items()
            if kind == flash
        }
        if tflops:
            out[f"{flash}_tflops"] = tflops
        fraction = {
            _label(*shape): t / by[(flash, shape)]["measured_time_s"]
            for shape, t in sdpa_time.items()
            if (flash, shape) in by
        }
        if fraction:
            out[f"{flash}_fraction_of_sdpa"] = fraction
    return out


def predict(measurements: Path, results_dir: Path) -> Path:
    """Simulate every measured configuration with the calibrated profile; write the results.

    The measurements file is read as a hostile input (hbmsim.validation.read_measurements);
    a configuration the simulator cannot take is named by its index before anything is
    written. This is a batch run: each engine may take limits.BATCH_ENGINE_MAX_STEPS; a
    configuration past even that keeps its measurement under `not_simulated`, with the
    reason, and is said so on stderr (never dropped in silence)."""
    from hbmsim.engine.limits import BATCH_ENGINE_MAX_STEPS, engine_problem
    from hbmsim.engine.simulation import run_engine
    from hbmsim.errors import HbmsimError, InputFileError
    from hbmsim.files.reader import FileChecker
    from hbmsim.interpret.counts import count_plan
    from hbmsim.validation.gpu_runs import (
        occupancy_ratios,
        read_measurements,
        summary,
        summary_by_kind,
    )

    doc = read_measurements(measurements)
    with FileChecker("measurements", measurements).fields_of("calibration"):
        hw = calibrated_hardware(doc)
    plans, failed, not_simulated = [], [], []

    def too_large(row: dict, reason: str) -> None:  # said and kept, never dropped
        not_simulated.append({**row, "reason": reason})
        print(f"not simulated: {row['name']}: {reason}", file=sys.stderr)

    for i, row in enumerate(doc["configs"]):
        if "measured_time_s" not in row:
            failed.append(row)
            continue
        try:
            plan = _plan_of(row, hw)
        except HbmsimError as exc:
            raise InputFileError("measurements", measurements, str(exc), f"configs[{i}]") from None
        if too_long := engine_problem(plan, count_plan(plan), BATCH_ENGINE_MAX_STEPS):
            too_large(row, too_long)
            continue
        plans.append((row, plan))
    configs = []
    for row, plan in plans:
        try:
            timing = run_engine(plan)
        except HbmsimError as exc:  # the engine's memory bound
            too_large(row, str(exc))
            continue
        configs.append(
            {
                **row,
                "predicted_time_s": timing.time_s,
                "predicted_dram_bytes": timing.dram_read_bytes + timing.dram_write_bytes,
                "predicted_ctas_per_sm": {k.name: k.ctas_per_sm for k in timing.kernels},
            }
        )
    doc_out = {
        "gpu": doc["device"]["gpu"],
        "date": doc["device"]["date"],
        "versions": {k: doc["device"][k] for k in ("driver", "cuda_runtime", "cupy")},
        "hardware_profile": hw.to_dict(),
        "calibration": doc["calibration"],
        "correctness": doc["correctness"],
        "ncu": doc.get("ncu", {"available": False, "reason": "the run ended before ncu"}),
        "sdpa": doc.get("sdpa", []),
        "configs": configs,
        "failed_configs": failed,
        "not_simulated": not_simulated,
        "summary": {
            **summary(configs),
            "by_kind": summary_by_kind(configs),
            **comparisons(configs, doc.get("sdpa", [])),
            "occupancy_ratios": occupancy_ratios(configs),
        },
    }
    slug = "".join(ch if ch.isalnum() else "-" for ch in doc["device"]["gpu"].lower()).strip("-")
    path = results_dir / f"{slug or 'gpu'}-{doc['device']['date']}.json"  # date: YYYY-MM-DD
    try:
        results_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError("results-dir", f"cannot create {results_dir}: {exc.strerror}") from None
    write_atomic(path, json.dumps(doc_out, indent=1), "results-dir")
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m kernels.validate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--out", type=Path, required=True, help="directory for measurements.json")
    ap.add_argument("--preset", default="h200", help="hbmsim preset of this GPU (default h200)")
    ap.add_argument(
        "--budget-s",
        type=float,
        default=420.0,
        help="the run's time budget in seconds: the sweep leaves the last 90 to ncu and SDPA, "
        "which start nothing once it is spent (default 420)",
    )
    ap.add_argument(
        "--measure-only",
        action="store_true",
        help="skip the prediction (for machines without hbmsim's dependencies)",
    )
    ap.add_argument("--results-dir", type=Path, default=ROOT / "kernels" / "results")
    ap.add_argument(
        "--run-one",
        type=int,
        metavar="INDEX",
        help="launch one sweep configuration once and exit (for ncu)",
    )
    args = ap.parse_args(argv)
    if problem := budget_problem(args.budget_s):
        ap.error(f"--budget-s: {problem}")
    if args.run_one is not None:
        run_one(args.run_one, args.preset)
        return 0
    path = measure(args.out, args.preset, args.budget_s)
    print(f"measurements: {path}")
    if not args.measure_only:
        print(f"results: {predict(path, args.results_dir)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
