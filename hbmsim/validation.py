"""Recorded GPU measurements (kernels/results/*.json) and how well the simulator predicts them.

A results file is one validation run on one GPU:

    {"gpu": "NVIDIA H200", "date": "2026-11-29", "versions": {...},
     "configs": [{"name": ..., "algo": ..., "problem": {...}, "tiles": {...},
                  "measured_time_s": ..., "predicted_time_s": ...,
                  "measured_dram_bytes": ... (optional), "predicted_dram_bytes": ...}, ...]}

The app's Validate page reads every file; a malformed file is reported by name and skipped,
never a crash.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

RESULTS_DIR = Path(__file__).resolve().parent.parent / "kernels" / "results"
REQUIRED = ("name", "algo", "measured_time_s", "predicted_time_s")


@dataclass(frozen=True)
class ResultsFile:
    path: Path
    gpu: str
    date: str
    configs: list[dict]


def load_results(directory: Path | None = None) -> tuple[list[ResultsFile], list[str]]:
    """Every readable results file, and one message per file that could not be used."""
    files, problems = [], []
    for path in sorted(Path(directory or RESULTS_DIR).glob("*.json")):
        try:
            data = json.loads(path.read_text())
            configs = data["configs"]
            for c in configs:
                missing = [k for k in REQUIRED if k not in c]
                if missing:
                    raise KeyError(", ".join(missing))
            files.append(
                ResultsFile(
                    path, str(data.get("gpu", "unknown GPU")), str(data.get("date", "")), configs
                )
            )
        except (OSError, json.JSONDecodeError, KeyError, TypeError) as exc:
            problems.append(f"{path.name}: not a usable results file ({exc})")
    return files, problems


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
