"""The validation run: measure the kernels on a GPU, then predict them with the simulator.

    python -m kernels.validate --out DIR            # on a GPU machine: measure, then predict
    python -m kernels.validate --out DIR --measure-only
    hbmsim validate --measurements DIR/measurements.json   # predict later, anywhere

The measuring half needs only CuPy and NumPy (the GPU machine may lack SimPy, Streamlit and
Plotly); the predicting half needs hbmsim. Steps:
1. correctness of every kernel against a float64 reference on fresh random inputs, outputs
   poisoned with NaN before each run;
2. calibration microbenchmarks, never the attention kernels: device-to-device copy bandwidth
   (bytes read + written), L2 bandwidth (copies of a buffer that fits L2), load latency
   (pointer chase, in DRAM and in L2), the scalar FMA rate the kernels' inner loops run on,
   and launch overhead (empty kernel);
3. a timed sweep (median of CUDA events, L2 flushed before each run) of naive and flash
   configurations: seq 512..16384, tiles 32/64/128, head dim 64 and 128, causal on and off;
4. Nsight Compute DRAM bytes (`--clock-control none`) for a few configurations when `ncu` is
   on PATH, each launched once in a child process (recorded as unavailable, with the reason,
   otherwise);
5. torch's scaled_dot_product_attention timings when torch is importable.
The prediction writes kernels/results/<gpu>-<date>.json (see hbmsim/validation.py).
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from hbmsim import Problem  # noqa: E402  (hbmsim.problem needs only NumPy)

SWEEP = (  # (algo, seq, head_dim, causal, bq, bk)
    [
        ("flash", s, d, c, bq, bk)
        for s in (1024, 4096, 16384)
        for d in (64, 128)
        for c in (False, True)
        for bq, bk in ((64, 64),)
    ]
    + [("flash", 4096, 64, False, bq, bk) for bq in (32, 64, 128) for bk in (32, 64, 128)]
    + [
        ("naive", s, d, c, 128, 128)
        for s in (512, 1024, 4096)
        for d in (64, 128)
        for c in (False, True)
    ]
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


def check_correctness(hw_name: str) -> list[dict]:
    from hbmsim import get_hardware
    from hbmsim.reference import naive_attention

    from .runner import run_flash, run_naive

    hw = get_hardware(hw_name)
    out = []
    rng = np.random.default_rng()
    tolerance = {"fp16": 2e-3, "bf16": 2e-2, "fp32": 1e-5}
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
            for name, o in (
                ("flash", run_flash(q, k, v, p, 64, 64, dtype)[0]),
                ("naive", run_naive(q, k, v, p, hw, 64, 64, 32, dtype)),
            ):
                rel = (
                    float(np.linalg.norm(o - ref) / np.linalg.norm(ref))
                    if np.all(np.isfinite(o))
                    else float("inf")
                )
                out.append(
                    {
                        "kernel": name,
                        "dtype": dtype,
                        "causal": causal,
                        "rel_err": rel,
                        "passed": rel <= tolerance[dtype],
                    }
                )
    return out


def calibrate(info: dict) -> dict:
    import cupy as cp

    from .runner import module, time_median

    mod = module("calibrate.cu", ())
    big = cp.empty(1 << 28, dtype=cp.float32)  # 1 GiB
    dst = cp.empty_like(big)
    copy_s = time_median(lambda: cp.copyto(dst, big), 0, reps=10)
    small = cp.empty(info["l2_bytes"] // 8, dtype=cp.float32)  # a quarter of L2 per buffer
    small_dst = cp.empty_like(small)
    l2_s = time_median(lambda: [cp.copyto(small_dst, small) for _ in range(20)], 0, reps=10)

    def latency(n_elems: int) -> float:
        perm = np.random.default_rng(0).permutation(n_elems).astype(np.uint32)
        nxt = np.empty(n_elems, dtype=np.uint32)
        nxt[perm] = np.roll(perm, -1)  # one cycle through all elements
        d_next, out = cp.asarray(nxt), cp.zeros(1, dtype=cp.uint32)
        steps = 20000
        fn = mod.get_function("chase")
        t = time_median(
            lambda: fn((1,), (1,), (d_next, np.uint32(0), np.int32(steps), out)), 0, reps=5
        )
        return t / steps

    empty = mod.get_function("empty")
    launches = 200
    launch_s = time_median(lambda: [empty((1,), (1,), ()) for _ in range(launches)], 0, reps=5)
    fma = mod.get_function("fma_loop")
    blocks, threads, iters = info["sm_count"] * 16, 256, 4096
    out = cp.empty(blocks * threads, dtype=cp.float32)
    fma_s = time_median(lambda: fma((blocks,), (threads,), (out, np.int32(iters))), 0, reps=5)
    fma_flops = blocks * threads * iters * 4 / fma_s
    wmma = mod.get_function("wmma_loop")
    warps, wmma_iters = info["sm_count"] * 16 * 8, 1024
    wmma_out = cp.empty(warps * 256, dtype=cp.float32)
    wmma_s = time_median(
        lambda: wmma((warps // 8,), (256,), (wmma_out, np.int32(wmma_iters))), 0, reps=5
    )
    wmma_flops = warps * wmma_iters * 4 * 2 * 16**3 / wmma_s
    return {
        "hbm_bytes_per_s": 2 * big.nbytes / copy_s,  # read + write
        "l2_bytes_per_s": 20 * 2 * small.nbytes / l2_s,
        "hbm_latency_s": latency(1 << 26),  # 256 MiB of indices: DRAM
        "l2_latency_s": latency(info["l2_bytes"] // 16),  # a quarter of L2
        "launch_overhead_s": launch_s / launches,
        "scalar_fma_flops_per_s": fma_flops,
        "wmma_fp16_flops_per_s": wmma_flops,
    }


def time_sweep(hw_name: str, l2_bytes: int) -> list[dict]:
    import cupy as cp

    from hbmsim import get_hardware

    from .runner import flash_launcher, naive_launcher, poisoned, time_median, to_device

    hw = get_hardware(hw_name)
    rng = np.random.default_rng()
    rows = []
    for algo, seq, d, causal, bq, bk in SWEEP:
        p = _problem(seq, d, causal)
        shape = (p.batch, p.heads, seq, d)
        q, k, v = (to_device(rng.standard_normal(shape), "fp16") for _ in range(3))
        o = poisoned(shape, "fp16")
        if algo == "flash":
            lse = cp.empty(shape[:3], dtype=cp.float32)
            launch = flash_launcher(p, bq, bk, "fp16")
            t = time_median(
                lambda launch=launch, o=o, lse=lse, q=q, k=k, v=v: launch(q, k, v, o, lse),
                2 * l2_bytes,
            )
            tiles = {"bq": bq, "bk": bk}
        else:
            nn = (p.batch, p.heads, seq, seq)
            s, pm = poisoned(nn, "fp16"), poisoned(nn, "fp16")
            launch = naive_launcher(p, hw, bq, bk, 32, "fp16")
            t = time_median(
                lambda launch=launch, s=s, pm=pm, o=o, q=q, k=k, v=v: launch(q, k, v, s, pm, o),
                2 * l2_bytes,
            )
            tiles = {"bq": bq, "bk": bk, "bd": 32}
        rows.append(
            {
                "name": f"{algo} seq{seq} d{d}{' causal' if causal else ''} {bq}x{bk}",
                "algo": "fa2-kernel" if algo == "flash" else "standard-kernel",
                "problem": p.to_dict(),
                "tiles": tiles,
                "measured_time_s": t,
            }
        )
    return rows


NCU_METRICS = "dram__bytes_read.sum,dram__bytes_write.sum"
NCU_SUBSET = 4  # configurations profiled: ncu replays each kernel and is slow


def run_one(index: int, preset: str) -> None:
    """Launch configuration `index` of SWEEP once (what ncu profiles in a child process)."""
    import cupy as cp

    from hbmsim import get_hardware

    from .runner import flash_launcher, naive_launcher, poisoned, to_device

    algo, seq, d, causal, bq, bk = SWEEP[index]
    p = _problem(seq, d, causal)
    shape = (p.batch, p.heads, seq, d)
    rng = np.random.default_rng()
    q, k, v = (to_device(rng.standard_normal(shape), "fp16") for _ in range(3))
    o = poisoned(shape, "fp16")
    if algo == "flash":
        flash_launcher(p, bq, bk, "fp16")(q, k, v, o, cp.empty(shape[:3], dtype=cp.float32))
    else:
        nn = (p.batch, p.heads, seq, seq)
        naive_launcher(p, get_hardware(preset), bq, bk, 32, "fp16")(
            q, k, v, poisoned(nn, "fp16"), poisoned(nn, "fp16"), o
        )
    cp.cuda.Device().synchronize()


def ncu_bytes(rows: list[dict], preset: str) -> dict:
    """DRAM bytes read and written, from Nsight Compute, for a few configurations: each is
    launched once in a child process under `ncu --clock-control none` and the metrics of its
    kernels are summed. Any failure is recorded with its reason instead of failing the run."""
    if shutil.which("ncu") is None:
        return {"available": False, "reason": "ncu is not on PATH"}
    import csv
    import io

    picked = sorted({0, len(SWEEP) // 3, 2 * len(SWEEP) // 3, len(SWEEP) - 1})[:NCU_SUBSET]
    out = {}
    for index in picked:
        cmd = [
            "ncu",
            "--clock-control",
            "none",
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
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)
        except subprocess.TimeoutExpired:
            return {"available": False, "reason": f"ncu timed out on configuration {index}"}
        if done.returncode:
            return {"available": False, "reason": f"ncu failed: {done.stderr[-500:]}"}
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith('"')]
        totals = {"dram__bytes_read.sum": 0.0, "dram__bytes_write.sum": 0.0}
        for row in csv.DictReader(io.StringIO("\n".join(lines))):
            name, unit = row.get("Metric Name"), row.get("Metric Unit", "byte")
            if name in totals:
                value = float(row["Metric Value"].replace(",", ""))
                scale = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9}.get(unit, 1)
                totals[name] += value * scale
        rows[index]["measured_dram_bytes"] = int(sum(totals.values()))
        out[rows[index]["name"]] = totals
    return {"available": True, "metrics": NCU_METRICS, "configs": out}


def sdpa_times(l2_bytes: int) -> list[dict]:
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return []
    import cupy as cp

    from .runner import time_median

    out = []
    for seq, d, causal in (
        (1024, 64, False),
        (4096, 64, False),
        (4096, 64, True),
        (16384, 128, True),
    ):
        q, k, v = (
            torch.randn(BATCH, HEADS, seq, d, device="cuda", dtype=torch.float16) for _ in range(3)
        )
        t = time_median(
            lambda q=q, k=k, v=v, c=causal: F.scaled_dot_product_attention(q, k, v, is_causal=c),
            2 * l2_bytes,
        )
        out.append({"seq": seq, "head_dim": d, "causal": causal, "time_s": t})
    cp.cuda.Device().synchronize()
    return out


def measure(out_dir: Path, preset: str) -> Path:
    info = device_info()
    correctness = check_correctness(preset)
    calibration = calibrate(info)
    rows = time_sweep(preset, info["l2_bytes"])
    doc = {
        "device": info,
        "preset": preset,
        "batch": BATCH,
        "heads": HEADS,
        "correctness": correctness,
        "calibration": calibration,
        "configs": rows,
        "ncu": ncu_bytes(rows, preset),
        "sdpa": sdpa_times(info["l2_bytes"]),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "measurements.json"
    path.write_text(json.dumps(doc, indent=1))
    return path


# --- predicting (anywhere) -------------------------------------------------------------------


def calibrated_hardware(doc: dict):
    """The preset named in the measurements with the measured numbers in place of its own.

    The scalar kernels' matmuls and every kernel's softmax run on the FMA units: the measured
    FMA rate is the fp32 vector rate (the engine charges kernels without tensor cores there).
    The WMMA loop's rate is the tensor-core rate of fp16 and bf16 (the same units on these
    GPUs); files measured before that loop existed keep the preset's.
    """
    from hbmsim import get_hardware

    base = get_hardware(doc["preset"])
    c = doc["calibration"]
    rate = c["scalar_fma_flops_per_s"]
    matrix = {**base.matrix_flops_per_s, "fp32": rate}
    if "wmma_fp16_flops_per_s" in c:
        matrix.update(fp16=c["wmma_fp16_flops_per_s"], bf16=c["wmma_fp16_flops_per_s"])
    return base.with_overrides(
        name=f"{doc['preset']}+calibrated",
        hbm_bytes_per_s=c["hbm_bytes_per_s"],
        l2_bytes_per_s=c["l2_bytes_per_s"],
        hbm_latency_s=c["hbm_latency_s"],
        l2_latency_s=c["l2_latency_s"],
        launch_overhead_s=c["launch_overhead_s"],
        l2_bytes=doc["device"]["l2_bytes"],
        sm_count=doc["device"]["sm_count"],
        matrix_flops_per_s=matrix,
        vector_flops_per_s={**base.vector_flops_per_s, "fp32": rate},
        source=f"calibrated on {doc['device']['gpu']} {doc['device']['date']}",
    )


def predict(measurements: Path, results_dir: Path) -> Path:
    """Simulate every measured configuration with the calibrated profile; write the results."""
    from hbmsim import make_plan
    from hbmsim.engine import run_engine
    from hbmsim.validation import summary

    doc = json.loads(Path(measurements).read_text())
    hw = calibrated_hardware(doc)
    configs = []
    for row in doc["configs"]:
        p = Problem.from_dict(row["problem"])
        t = row["tiles"]
        plan = make_plan(row["algo"], p, hw, t["bq"], t["bk"], t.get("bd"))
        timing = run_engine(plan)
        configs.append(
            {
                **row,
                "predicted_time_s": timing.time_s,
                "predicted_dram_bytes": timing.dram_read_bytes + timing.dram_write_bytes,
            }
        )
    flash = [c for c in configs if c["algo"] == "fa2-kernel"]
    naive = {
        (c["problem"]["seq_q"], c["problem"]["head_dim"], c["problem"]["causal"]): c[
            "measured_time_s"
        ]
        for c in configs
        if c["algo"] == "standard-kernel"
    }
    speedups = [
        naive[key] / c["measured_time_s"]
        for c in flash
        if (key := (c["problem"]["seq_q"], c["problem"]["head_dim"], c["problem"]["causal"]))
        in naive
        and c["tiles"]["bq"] == 64
        and c["tiles"]["bk"] == 64
    ]
    doc_out = {
        "gpu": doc["device"]["gpu"],
        "date": doc["device"]["date"],
        "versions": {k: doc["device"][k] for k in ("driver", "cuda_runtime", "cupy")},
        "hardware_profile": hw.to_dict(),
        "correctness": doc["correctness"],
        "ncu": doc["ncu"],
        "sdpa": doc["sdpa"],
        "configs": configs,
        "summary": {
            **summary(configs),
            "flash_vs_naive_speedup": {"min": min(speedups), "max": max(speedups)}
            if speedups
            else None,
        },
    }
    results_dir.mkdir(parents=True, exist_ok=True)
    slug = "".join(ch if ch.isalnum() else "-" for ch in doc["device"]["gpu"].lower()).strip("-")
    path = results_dir / f"{slug}-{doc['device']['date']}.json"
    path.write_text(json.dumps(doc_out, indent=1))
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
    if args.run_one is not None:
        run_one(args.run_one, args.preset)
        return 0
    path = measure(args.out, args.preset)
    print(f"measurements: {path}")
    if not args.measure_only:
        print(f"results: {predict(path, args.results_dir)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
