"""Recorded GPU measurements (kernels/results/*.json) and how well the simulator predicts them.

A results file is one validation run on one GPU:

    {"gpu": "NVIDIA H200", "date": "2026-11-29", "versions": {...},
     "configs": [{"name": ..., "algo": ..., "problem": {...}, "tiles": {...},
                  "measured_time_s": ..., "predicted_time_s": ...,
                  "measured_dram_bytes": ... (optional), "predicted_dram_bytes": ...}, ...]}

The app's Validate page reads every file; a malformed file is reported by name and skipped,
never a crash. Results and measurements files are read as hostile inputs (files/reader.py): size,
encoding, syntax, then every field used.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import fmt
from ..algorithms.names import ALGOS
from ..errors import HbmsimError
from ..files.places import RESULTS_DIR
from ..files.reader import FileChecker, read_json_file
from ..gpu.presets import PRESETS
from ..problem.attention import Problem

REQUIRED = ("name", "algo", "measured_time_s", "predicted_time_s")
# The shortest time a measurement may record: one nanosecond, a couple of GPU clocks and a
# thousandth of one kernel launch. A time of 1e-320 s would pass "> 0" and make every error
# and speedup computed from it infinite.
MIN_TIME_S = 1e-9
MAX_TIME_S = 1e6


@dataclass(frozen=True)
class ResultsFile:
    path: Path
    gpu: str
    date: str
    configs: list[dict]


MAX_RESULTS_BYTES = 16 * 1024 * 1024  # a results file of 200 configurations is ~0.5 MB
MAX_CONFIGS = 10_000


def load_results(directory: Path | None = None) -> tuple[list[ResultsFile], list[str]]:
    """Every readable results file, and one message per file that could not be used."""
    files, problems = [], []
    for path in sorted(Path(directory or RESULTS_DIR).glob("*.json")):
        try:
            files.append(read_results(path))
        except HbmsimError as exc:
            problems.append(f"not a usable results file: {exc}")
    return files, problems


def read_results(path: Path) -> ResultsFile:
    """One results file, read as a hostile input: every field the Validate page uses checked."""
    chk = FileChecker("results", path.name)
    data = chk.obj(read_json_file(path, "results", MAX_RESULTS_BYTES, allow_nan=True), "results")
    configs = chk.list(data.get("configs"), "configs", 0, MAX_CONFIGS)
    for i, c in enumerate(configs):
        chk.obj(c, f"configs[{i}]", required=REQUIRED)
        chk.str(c["name"], f"configs[{i}].name")
        chk.str(c["algo"], f"configs[{i}].algo")
        for key in ("measured_time_s", "predicted_time_s"):
            chk.num(c[key], f"configs[{i}].{key}", MIN_TIME_S, MAX_TIME_S)
        for key in ("measured_dram_bytes", "predicted_dram_bytes"):
            if c.get(key) is not None:
                chk.num(c[key], f"configs[{i}].{key}", 0, 1e18)
        if "kind" in c:
            chk.str(c["kind"], f"configs[{i}].kind")
    return ResultsFile(
        path, str(data.get("gpu", "unknown GPU")), str(data.get("date", "")), configs
    )


MAX_MEASUREMENTS_BYTES = 16 * 1024 * 1024
DATE = re.compile(r"\d{4}-\d{2}-\d{2}")  # names the results file: nothing else may get in


def read_measurements(path) -> dict:
    """A measurements.json (kernels/validate.py) checked field by field before predicting:
    what the prediction reads, by type and range, and the plan of every measured
    configuration made (so a bad tile or problem is named by its configuration)."""
    chk = FileChecker("measurements", path)
    doc = chk.obj(
        read_json_file(path, "measurements", MAX_MEASUREMENTS_BYTES, allow_nan=True),
        "measurements",
        required=("device", "preset", "calibration", "correctness", "configs"),
    )
    chk.str(doc["preset"], "preset", choices=tuple(PRESETS))
    dev = chk.obj(
        doc["device"],
        "device",
        required=("gpu", "date", "l2_bytes", "sm_count", "driver", "cuda_runtime", "cupy"),
    )
    chk.str(dev["gpu"], "device.gpu", max_len=200)
    if not DATE.fullmatch(chk.str(dev["date"], "device.date")):
        raise chk.error("device.date", f"must be a date YYYY-MM-DD (got {dev['date'][:40]!r})")
    chk.int(dev["l2_bytes"], "device.l2_bytes", 0, 1 << 40)
    chk.int(dev["sm_count"], "device.sm_count", 1, 100_000)
    for key, value in chk.obj(doc["calibration"], "calibration").items():
        if key in CALIBRATED or key in RECORDED:
            chk.num(value, f"calibration.{key}", 0, 1e18)
        elif key == OVERLAP:
            found = chk.obj(value, f"calibration.{key}")
            for pipe in ("vector", "exp"):
                if pipe in found:
                    chk.num(found[pipe], f"calibration.{key}.{pipe}", -1, 2)
            for loop, t in chk.obj(found.get("alone_s", {}), f"calibration.{key}.alone_s").items():
                chk.num(t, f"calibration.{key}.alone_s.{loop[:20]}", 0, 1e6)
        elif key == LATENCIES:
            for name, cycles in chk.obj(value, f"calibration.{key}").items():
                if name not in LATENCY_CHAINS:
                    field = f"calibration.{key}"
                    raise chk.error(
                        field, f"keys are {', '.join(LATENCY_CHAINS)} (got {name[:20]!r})"
                    )
                chk.num(cycles, f"calibration.{key}.{name}", 0, 1e5)
        elif key in RECORDED_BY_WARPS:
            for w, rate in chk.obj(value, f"calibration.{key}").items():
                if not w.isdigit() or not 1 <= int(w) <= 64:
                    field = f"calibration.{key}"
                    raise chk.error(field, f"keys are warps per SM, 1-64 (got {w[:20]!r})")
                chk.num(rate, f"calibration.{key}.{w}", 0, 1e18)
    for i, row in enumerate(chk.list(doc["configs"], "configs", 0, MAX_CONFIGS)):
        f = f"configs[{i}]"
        chk.obj(row, f)
        if "measured_time_s" not in row:
            continue  # recorded as failed, not predicted
        chk.obj(row, f, required=("kind", "algo", "problem", "tiles"))
        chk.num(row["measured_time_s"], f"{f}.measured_time_s", MIN_TIME_S, MAX_TIME_S)
        chk.str(row["kind"], f"{f}.kind")
        chk.str(row["algo"], f"{f}.algo", choices=ALGOS)
        problem = chk.obj(row["problem"], f"{f}.problem", required=("seq_q", "head_dim", "causal"))
        if "dtype" in problem:  # Problem looks it up in a dict
            chk.str(problem["dtype"], f"{f}.problem.dtype", max_len=20)
        with chk.fields_of(f"{f}.problem"):
            Problem.from_dict(problem)
        tiles = chk.obj(row["tiles"], f"{f}.tiles", required=("bq", "bk"))
        for key in ("bq", "bk", "bd"):
            if tiles.get(key) is not None or key != "bd":
                chk.int(tiles.get(key), f"{f}.tiles.{key}", 1, 4096)
        for name, res in chk.obj(row.get("resources", {}), f"{f}.resources").items():
            if "registers" in chk.obj(res, f"{f}.resources.{name}"):
                chk.int(res["registers"], f"{f}.resources.{name}.registers", 1, 255)
        if "measured_dram_bytes" in row:
            chk.num(row["measured_dram_bytes"], f"{f}.measured_dram_bytes", 0, 1e18)
        if "smem_bytes" in row:  # an occupancy point (kernels/validate.py Point.ctas_per_sm)
            chk.int(row["smem_bytes"], f"{f}.smem_bytes", 0, 1 << 30)
            chk.int(row.get("ctas_per_sm"), f"{f}.ctas_per_sm", 1, 64)
    for i, r in enumerate(chk.list(doc.get("sdpa", []), "sdpa", 0, MAX_CONFIGS)):
        chk.obj(r, f"sdpa[{i}]")
        if "time_s" in r:
            chk.obj(r, f"sdpa[{i}]", required=("seq", "head_dim", "causal"))
            chk.num(r["time_s"], f"sdpa[{i}].time_s", MIN_TIME_S, MAX_TIME_S)
    return doc


CALIBRATED = (  # calibration numbers the prediction uses (kernels/validate.calibrated_hardware)
    "hbm_bytes_per_s",
    "l2_bytes_per_s",
    "hbm_latency_s",
    "l2_latency_s",
    "launch_overhead_s",
    "scalar_fma_flops_per_s",
    "wmma_fp16_flops_per_s",
)
# measured and kept, not used yet: L2's fp32 atomic-add throughput (the engine's atomics), and
# the SM-seconds an SM spends per empty CTA it starts and retires
RECORDED = ("l2_atomic_bytes_per_s", "cta_seconds_per_sm")
# ... and the math rates w warps per SM reach, {"w": FLOP/s}
RECORDED_BY_WARPS = ("fma_flops_per_s_by_warps_per_sm", "wmma_flops_per_s_by_warps_per_sm")
# ... and clocks per step of dependent FFMA, shared-load and MUFU.EX2 chains (calibrate.cu
# `latency_chain`): the latencies gpu/issue.py cites, measured
LATENCIES = "latency_cycles"
LATENCY_CHAINS = ("ffma", "shared", "mufu")
# used: which pipes run beside asynchronous warpgroup MMA (kernels/pipes_probe.cu), the
# fraction of the shorter loop hidden per pipe, and each loop's time alone
OVERLAP = "async_mma_overlap"


def spearman(x, y) -> float:
    """Rank correlation (average ranks for ties); nan for fewer than two points."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 2:
        return float("nan")

    def ranks(a):
        order = a.argsort()
        r = np.empty(len(a))
        r[order] = np.arange(len(a))
        for v in np.unique(a):  # ties share their average rank
            same = a == v
            r[same] = r[same].mean()
        return r

    rx, ry = ranks(x), ranks(y)
    if rx.std() == 0 or ry.std() == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])


def summary(configs: list[dict]) -> dict:
    """Median and max absolute % error of time (and DRAM bytes where recorded), rank
    correlation of predicted vs measured time."""
    measured = np.array([c["measured_time_s"] for c in configs], float)
    predicted = np.array([c["predicted_time_s"] for c in configs], float)
    err = np.abs(predicted / measured - 1) * 100 if len(configs) else np.zeros(0)
    out = {
        "configs": len(configs),
        "time_median_abs_pct_error": float(np.median(err)) if len(err) else float("nan"),
        "time_max_abs_pct_error": float(np.max(err)) if len(err) else float("nan"),
        "time_spearman": spearman(measured, predicted),
    }
    with_bytes = [c for c in configs if c.get("measured_dram_bytes")]
    if with_bytes:
        b_err = np.array(
            [
                abs(c["predicted_dram_bytes"] / c["measured_dram_bytes"] - 1) * 100
                for c in with_bytes
            ]
        )
        out["dram_median_abs_pct_error"] = float(np.median(b_err))
        out["dram_max_abs_pct_error"] = float(np.max(b_err))
    return out


def by_kind(configs: list[dict]) -> dict[str, list[dict]]:
    """Configurations grouped by kernel kind ("kind", else "algo"), in first-seen order."""
    kinds: dict[str, list[dict]] = {}
    for c in configs:
        kinds.setdefault(c.get("kind", c["algo"]), []).append(c)
    return kinds


def summary_by_kind(configs: list[dict]) -> dict:
    """The summary per kernel kind, with the rank correlation across tile sizes: for each
    problem measured at three or more tile settings, predicted vs measured."""
    out = {}
    for kind, group in by_kind(configs).items():
        by_problem: dict[str, list[dict]] = {}
        for c in group:
            by_problem.setdefault(json.dumps(c.get("problem"), sort_keys=True), []).append(c)
        tiles = [
            spearman([c["measured_time_s"] for c in g], [c["predicted_time_s"] for c in g])
            for g in by_problem.values()
            if len(g) >= 3
        ]
        out[kind] = {**summary(group), "tile_sweep_spearman": tiles}
    return out


def occupancy_ratios(configs: list[dict]) -> dict:
    """Per occupancy kind and problem, each padded point's time over its unpadded kernel's on
    the same problem and tiles, measured and predicted: how much longer a kernel takes with
    fewer CTAs per SM, on the GPU and in the lockstep waves of the engine (kernels/validate.py,
    Point.ctas_per_sm). Keyed by kind, "seq<n> d<d>[ causal]", then the CTAs per SM."""

    def key(kind: str, c: dict) -> tuple:  # the same problem and tiles
        return kind, json.dumps(c["problem"], sort_keys=True), c["tiles"]["bq"], c["tiles"]["bk"]

    base = {key(c["kind"], c): c for c in configs if "ctas_per_sm" not in c}
    out: dict = {}
    for c in configs:
        if "ctas_per_sm" not in c:
            continue
        ref = base.get(key(c["kind"].removesuffix("-occupancy"), c))
        if ref is None:
            continue
        natural = next(iter(ref.get("predicted_ctas_per_sm", {}).values()), None)
        point = {
            "measured": c["measured_time_s"] / ref["measured_time_s"],
            "unpadded_ctas_per_sm": natural,
        }
        if "predicted_time_s" in c and "predicted_time_s" in ref:
            point["predicted"] = c["predicted_time_s"] / ref["predicted_time_s"]
        p = c["problem"]
        shape = f"seq{p['seq_q']} d{p['head_dim']}{' causal' if p['causal'] else ''}"
        out.setdefault(c["kind"], {}).setdefault(shape, {})[str(c["ctas_per_sm"])] = point
    return out


def occupancy_rows(configs: list[dict]) -> list[dict]:
    """occupancy_ratios as table rows (kernel, problem, CTAs per SM of the unpadded kernel's,
    measured, predicted), as `render` prints them and the app's Validate page shows them."""
    return [
        {
            "kernel": kind,
            "problem": shape,
            "CTAs per SM": f"{k} (of {r.get('unpadded_ctas_per_sm') or '?'})",
            "measured": f"{r['measured']:.2f}x",
            "predicted": f"{r['predicted']:.2f}x" if "predicted" in r else "-",
        }
        for kind, shapes in occupancy_ratios(configs).items()
        for shape, points in shapes.items()
        for k, r in points.items()
    ]


def render(results: dict) -> str:
    """A results file as text (what `hbmsim validate --measurements` prints after writing it):
    one row per kernel kind and one for all, then what was measured but not simulated."""

    def pct(value) -> str:
        return "-" if value is None or value != value else f"{value:.0f}%"

    def row(name: str, s: dict) -> list[str]:
        rank = s["time_spearman"]
        return [
            name,
            str(s["configs"]),
            pct(s["time_median_abs_pct_error"]),
            pct(s["time_max_abs_pct_error"]),
            "-" if rank != rank else f"{rank:.2f}",
            pct(s.get("dram_median_abs_pct_error")),
        ]

    configs = results["configs"]
    rows = [row(kind, s) for kind, s in summary_by_kind(configs).items()]
    rows.append(row("all", summary(configs)))
    head = ["kernel", "n", "median |time error|", "worst", "rank corr.", "median |DRAM error|"]
    lines = [f"{results.get('gpu', 'GPU')} ({results.get('date', '')})", fmt.table(head, rows)]
    occupancy = occupancy_rows(configs)
    if occupancy:  # kernels/validate.py Point.ctas_per_sm: lockstep waves at each occupancy
        lines.append("fewer CTAs per SM (shared memory padded): time over the unpadded kernel's")
        lines.append(fmt.table(list(occupancy[0]), [list(r.values()) for r in occupancy]))
    skipped = results.get("not_simulated", [])
    if skipped:
        lines.append(f"not simulated ({len(skipped)}: too large for the engine in a batch run):")
        lines += [f"  {c['name']}" for c in skipped]
    return "\n".join(lines)
