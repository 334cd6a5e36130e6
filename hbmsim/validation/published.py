"""Published GPU timings of attention and how well the simulator predicts them.

The set ships in the package (`data/published_attention.json`): timings transcribed from the
FlashAttention, FlashAttention-2 and FlashAttention-3 papers, each point with its citation,
GPU, problem and the implementation that was measured. It is the test set hbmsim has without a
GPU of its own: every point that names an implementation is simulated with that
implementation's mirror (hbmsim.libraries) on the point's GPU preset, and the prediction is
compared with the measurement. Nothing here feeds back into the model: no constant is set from
these timings (DESIGN.md, "Physics, not fitting").

Report: per point, predicted vs measured; per (source, implementation), the count, the median
and worst error and the rank correlation inside each series (one series = one table or panel
of a paper, varying the sequence length); and the speedup of each flash implementation over
eager PyTorch, predicted vs measured, wherever both were timed on the same problem.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .. import fmt
from ..engine.limits import BATCH_ENGINE_MAX_STEPS
from ..errors import HbmsimError
from ..files.places import DATA_DIR
from ..files.reader import FileChecker, read_json_file
from ..gpu.presets import PRESETS, get_hardware
from ..problem.attention import Problem
from .gpu_runs import MAX_TIME_S, MIN_TIME_S, RESULTS_DIR, spearman

DEFAULT_PATH = DATA_DIR / "published_attention.json"
# The packaged set's comparison, as `hbmsim validate --published --report FILE` writes it: the
# app shows it at once (simulating all points takes minutes); a test re-simulates a few of its
# points so it cannot drift from the model unnoticed.
RECORDED_PATH = DEFAULT_PATH.with_name("published_predictions.json")
MAX_FILE_BYTES = 16 * 1024 * 1024
WHAT = "published set"
TARGET_MEDIAN = 0.10  # the fidelity goal: median |error| per group of 10 or more points
TARGET_WORST = 0.40  # ... no point off by more than this
TARGET_RANK = 0.95  # ... rank correlation inside every series
TARGET_SPEEDUP = 0.10  # ... and FlashAttention-3's speedup over FlashAttention-2 on every point
# The whole published set is a batch run (limits.BATCH_ENGINE_MAX_STEPS), so the long causal
# points of the FlashAttention-2 paper get a time.
PUBLISHED_ENGINE_MAX_STEPS = BATCH_ENGINE_MAX_STEPS
_PROBLEM_FIELDS = ("batch", "heads", "kv_heads", "seq_q", "seq_k", "head_dim", "dtype")
# The release of a library a source timed, where the mirror models more than one: the
# FlashAttention paper (arXiv:2205.14135, May 2022) timed flash-attn before its 1.0 split
# heuristics (dated 2022-11-25 in fmha_fwd_launch_template.h), so its points run release 0.1;
# the FlashAttention-3 paper (arXiv:2407.08608, July 2024) timed the hopper/ beta of that month
# (its bar labels in the panels found later too: FA3-fig5-bf); the Flash-Decoding blog post and
# the xformers benchmark it took its rows from timed flash-attn 2.0.9 (their column labels),
# before split-KV and GQA packing.
SOURCE_RELEASES = {
    "FD-blog": {"flash-attn-2": "2.0"},
    "xformers-d3656d5": {"flash-attn-2": "2.0"},
    "FA1-appE": {"flash-attn-1": "0.1"},
    "FA1-fig2": {"flash-attn-1": "0.1"},
    "FA3-fig5": {"flash-attn-3": "2024-07"},
    "FA3-fig5-bf": {"flash-attn-3": "2024-07"},
}


@dataclass(frozen=True)
class PublishedPoint:
    id: int
    source: str
    impl: str | None  # None: recorded for context only (xformers, Triton, ...)
    label: str
    preset: str
    problem: Problem
    measured_time_s: float
    citation: str
    series: str  # the table or panel the point belongs to, with what varies held fixed
    # how the time was taken: "loop", many calls between two synchronisations (the papers'
    # benchmarks), "synchronized", each call timed alone (kernels/torch_timings.py), or
    # "kernel", the GPU's time alone (a CUDA-graph replay, a profiler's kernel rows); the
    # prediction is the engine's steady-state call, a call by itself (host.py) or its GPU time
    # (engine/timing.py)
    timing: str = "loop"
    # the host's cost per framework op and launch measured where the points were timed (a
    # file's calibration.host_op_s, kernels/torch_timings.py); None: the preset's
    host_op_s: float | None = None


TIMINGS = ("loop", "synchronized", "kernel")
MAX_HOST_OP_S = 0.01  # a host op of 10 ms is no host op: refused as a misread file


def load_published(path: str | Path | None = None) -> tuple[list[PublishedPoint], dict]:
    """Every point of a published set (the packaged one by default), read through the one
    reader of user files and checked field by field, and the set's `sources` (citation and
    setup per source)."""
    path = Path(path) if path is not None else DEFAULT_PATH
    data = read_json_file(path, WHAT, MAX_FILE_BYTES)
    check = FileChecker(WHAT, path)
    check.obj(data, None, ("points",))
    points = check.list(data["points"], "points", 1, 100_000)
    sources = check.obj(data.get("sources", {}), "sources")
    calibration = check.obj(data.get("calibration", {}), "calibration")
    host_op_s = None
    if "host_op_s" in calibration:
        host_op_s = check.num(
            calibration["host_op_s"], "calibration.host_op_s", 0, MAX_HOST_OP_S, lo_open=True
        )
    return [_point(check, i, p, host_op_s) for i, p in enumerate(points)], sources


def _point(check: FileChecker, i: int, p, host_op_s: float | None = None) -> PublishedPoint:
    at = f"points[{i}]"
    check.obj(p, at, _PROBLEM_FIELDS + ("causal", "dropout", "pass", "preset", "source"))
    for name in ("source", "citation", "label"):
        if not check.str(p.get(name), f"{at}.{name}"):
            raise check.error(f"{at}.{name}", "must not be empty")
    if p.get("impl") is not None:
        check.str(p["impl"], f"{at}.impl", max_len=100)
    check.str(p["preset"], f"{at}.preset", choices=tuple(PRESETS))
    t = check.num(p.get("measured_time_s"), f"{at}.measured_time_s", MIN_TIME_S, MAX_TIME_S)
    timing = check.str(p.get("timing", "loop"), f"{at}.timing", choices=TIMINGS)
    with check.fields_of(at):
        problem = Problem(
            **{name: p[name] for name in _PROBLEM_FIELDS},
            causal=p["causal"],
            dropout=p["dropout"],
            pass_=p["pass"],
        )
    group = p.get("table") or p.get("panel") or ""
    words = [p["source"], str(group), str(p.get("impl")), p["pass"], f"d{p['head_dim']}"]
    words += ["causal"] if p["causal"] else []
    words += [f"dropout {p['dropout']}"] if p["dropout"] else []
    return PublishedPoint(
        int(p["id"]) if isinstance(p.get("id"), int) else i,
        p["source"],
        p.get("impl"),
        p["label"],
        p["preset"],
        problem,
        t,
        p["citation"],
        " ".join(w for w in words if w),
        timing,
        host_op_s,
    )


def run_as(pt: PublishedPoint) -> str:
    """The mirror a point runs: its implementation, at the release its source timed."""
    release = SOURCE_RELEASES.get(pt.source, {}).get(pt.impl or "")
    return f"{pt.impl}@{release}" if release else str(pt.impl)


def predict(
    points: list[PublishedPoint],
    progress: Callable[[int, int, PublishedPoint], None] | None = None,
) -> list[dict]:
    """Simulate every point that names an implementation; one row per point. A point the
    model cannot run (an implementation not modelled yet, a plan too large for the engine)
    keeps its row with the reason."""
    from ..api import simulate  # deferred: SimPy (api loads the engine), loaded to predict only

    rows = []
    todo = [pt for pt in points if pt.impl is not None]
    for n, pt in enumerate(todo):
        if progress:
            progress(n, len(todo), pt)
        row = {
            "id": pt.id,
            "source": pt.source,
            "impl": pt.impl,
            "run_as": run_as(pt),
            "series": pt.series,
            "gpu": pt.preset,
            "problem": pt.problem.to_dict(),
            "measured_time_s": pt.measured_time_s,
            "predicted_time_s": None,
            "error": None,
            "reason": "",
            "citation": pt.citation,
            "timing": pt.timing,
            **({} if pt.host_op_s is None else {"host_op_s": pt.host_op_s}),
        }
        try:
            hw = get_hardware(pt.preset)
            if pt.host_op_s is not None:  # measured beside the points
                hw = hw.with_overrides(host_op_s=pt.host_op_s)
            r = simulate(
                pt.problem,
                hw,
                impl=run_as(pt),
                engine_max_steps=PUBLISHED_ENGINE_MAX_STEPS,
            )
        except HbmsimError as exc:
            row["reason"] = str(exc)
        else:
            if "time_s" in r.extra:
                row["predicted_time_s"] = float(_predicted_time(r.extra, pt.timing))
                row["error"] = row["predicted_time_s"] / pt.measured_time_s - 1
                row.update(host_flip(r.extra["engine"], hw.host_op_s, pt.timing))
            else:
                row["reason"] = r.extra.get("engine", {}).get("skipped", "not simulated")
        rows.append(row)
    return rows


def host_flip(engine: dict, host_op_s: float, timing: str) -> dict:
    """Which side bounds a call timed in a loop (`bound`), and the cost per host operation at
    which it would change sides (`host_op_flip_s`): the host's time is its operations x
    host_op_s, so a call whose GPU takes g and whose host takes h at host_op_s turns
    host-bound above host_op_s x g / h. Other timings say nothing here: a kernel's time has no
    host in it, and a call timed alone adds the two rather than taking the longer."""
    host, gpu = engine.get("host_time_s") or 0.0, engine.get("gpu_time_s")
    if timing != "loop" or not host or gpu is None:
        return {}
    return {"bound": engine["bound"], "host_op_flip_s": host_op_s * gpu / host}


def _predicted_time(extra: dict, timing: str) -> float:
    """The engine's time of a call measured the way the point was (PublishedPoint.timing)."""
    if timing == "synchronized":
        return extra["engine"]["synchronized_call_s"]
    if timing == "kernel":
        return extra["engine"]["times_s"]["kernel"]
    return extra["time_s"]


def summarize(rows: list[dict]) -> dict:
    """Per (source, implementation): n, median |error|, worst error, rank correlation of each
    series; the flash-over-eager speedups; and whether the fidelity targets are met."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["source"], r["impl"]), []).append(r)
    out = []
    for (source, impl), members in sorted(groups.items()):
        done = [r for r in members if r["error"] is not None]
        errors = [r["error"] for r in done]
        series: dict[str, list[dict]] = {}
        for r in done:
            series.setdefault(r["series"], []).append(r)
        ranks = {
            name: spearman([r["measured_time_s"] for r in s], [r["predicted_time_s"] for r in s])
            for name, s in series.items()
            if len(s) >= 3
        }
        worst = max(errors, key=abs) if errors else None
        out.append(
            {
                "source": source,
                "impl": impl,
                "n": len(members),
                "simulated": len(done),
                "median_abs_error": statistics.median(abs(e) for e in errors) if errors else None,
                "worst_error": worst,
                "within_40pct": int(sum(abs(e) <= TARGET_WORST for e in errors)),
                "min_rank_correlation": min(ranks.values()) if ranks else None,
                "series_rank_correlation": ranks,
            }
        )
    sp = speedups(rows)
    return {"groups": out, "speedups": sp, "targets": _targets(out, rows, sp)}


# Speedups the summary pairs on one problem: (baseline, the implementations compared with it).
# Flash over PyTorch eager, and FlashAttention-3 over FlashAttention-2 (what the FA3 paper
# claims: the fidelity goal asks that ratio within 10% on every point).
SPEEDUP_PAIRS = (("torch-eager", None), ("flash-attn-2", ("flash-attn-3",)))


def speedups(rows: list[dict]) -> list[dict]:
    """Baseline time / implementation time, measured and predicted, for each problem both were
    timed on in one source, for the pairs of SPEEDUP_PAIRS (None: every other
    implementation)."""
    by_problem: dict[tuple, dict[str, dict]] = {}
    for r in rows:
        key = (r["source"], json.dumps(r["problem"], sort_keys=True))
        by_problem.setdefault(key, {})[r["impl"]] = r
    out = []
    for baseline, against in SPEEDUP_PAIRS:
        for (source, problem), impls in sorted(by_problem.items()):
            base = impls.get(baseline)
            if base is None:
                continue
            for impl, r in sorted(impls.items()):
                if impl == baseline or (against is not None and impl not in against):
                    continue
                row = {
                    "source": source,
                    "impl": impl,
                    "baseline": baseline,
                    "problem": json.loads(problem),
                    "measured": base["measured_time_s"] / r["measured_time_s"],
                    "predicted": None,
                    "error": None,
                }
                if base["predicted_time_s"] and r["predicted_time_s"]:
                    row["predicted"] = base["predicted_time_s"] / r["predicted_time_s"]
                    row["error"] = row["predicted"] / row["measured"] - 1
                out.append(row)
    return out


def speedup_problem(problem: dict) -> str:
    """A speedup row's problem in a few words: pass, batch x heads, tokens, head dim, mask."""
    return (
        f"{problem['pass']}, {problem['batch']} x {problem['heads']}, {problem['seq_k']:,}, "
        f"{problem['head_dim']}" + (" causal" if problem["causal"] else "")
    )


def _targets(groups: list[dict], rows: list[dict], speedup_rows: list[dict]) -> dict:
    big = [g for g in groups if g["n"] >= 10]
    errors = [r["error"] for r in rows if r["error"] is not None]
    ranks = [v for g in groups for v in g["series_rank_correlation"].values()]
    return {
        "median_within_10pct_in_every_group_of_10": all(
            g["median_abs_error"] is not None
            and g["simulated"] == g["n"]
            and g["median_abs_error"] <= TARGET_MEDIAN
            for g in big
        ),
        "rank_correlation_at_least_0.95_in_every_series": bool(ranks)
        and all(v >= TARGET_RANK for v in ranks),
        "points_off_by_more_than_40pct": int(sum(abs(e) > TARGET_WORST for e in errors)),
        "fa3_over_fa2_speedups_off_by_more_than_10pct": int(
            sum(
                s["error"] is not None and abs(s["error"]) > TARGET_SPEEDUP
                for s in speedup_rows
                if s["baseline"] == "flash-attn-2"
            )
        ),
        "points_not_simulated": sum(r["error"] is None for r in rows),
    }


def load_recorded(path: Path | None = None) -> dict | None:
    """The recorded comparison (see RECORDED_PATH), or None when there is none; read field by
    field like the extra checks, which are comparisons of the same format."""
    path = path or RECORDED_PATH
    if not path.exists():
        return None
    return _read_comparison(path)


# Comparisons like the recorded one for timings measured with this repository
# (kernels/torch_timings.py on a lent GPU, then `validate --published FILE --report`): extra
# checks of the same model, shown beside the published set, never a source of constants.
EXTRA_DIR = RESULTS_DIR / "extra"
_ROW_FIELDS = {  # field -> (JSON type, its name in an error)
    "source": (str, "a string"),
    "impl": (str, "a string"),
    "series": (str, "a string"),
    "citation": (str, "a string"),
    "measured_time_s": ((int, float), "a number"),
    "problem": (dict, "a JSON object"),
}


def load_extra_checks(directory: Path | None = None) -> tuple[list[tuple[Path, dict]], list[str]]:
    """Every readable comparison in `directory` (EXTRA_DIR), with one message per file that
    could not be used. Each is read as a hostile input: every field the page uses checked."""
    found, problems = [], []
    for path in sorted(Path(directory or EXTRA_DIR).glob("*.json")):
        try:
            found.append((path, _read_comparison(path)))
        except HbmsimError as exc:
            problems.append(f"not a usable comparison: {exc}")
    return found, problems


def _read_comparison(path: Path) -> dict:
    chk = FileChecker("comparison", path.name)
    data = chk.obj(read_json_file(path, "comparison", MAX_FILE_BYTES), None, ("points",))
    rows = chk.list(data["points"], "points", 1, 100_000)
    for i, r in enumerate(rows):
        at = f"points[{i}]"
        chk.obj(r, at, (*_ROW_FIELDS, "predicted_time_s", "error", "reason"))
        for name, (kind, want) in _ROW_FIELDS.items():
            if isinstance(r[name], bool) or not isinstance(r[name], kind):
                raise chk.error(f"{at}.{name}", f"must be {want} (got {r[name]!r:.40})")
        chk.obj(r["problem"], f"{at}.problem", ("seq_k", "batch"))
        for name in ("predicted_time_s", "error"):
            if r[name] is not None:
                chk.num(r[name], f"{at}.{name}", -1e6, 1e6)
    return data


__all__ = [
    "EXTRA_DIR",
    "PublishedPoint",
    "load_extra_checks",
    "load_published",
    "load_recorded",
    "predict",
    "render",
    "speedups",
    "summarize",
]


def render(rows: list[dict], summary: dict) -> str:
    """The report as text: per point, per group, speedups, targets."""

    def pct(e):
        return "-" if e is None else f"{100 * e:+.0f}%"

    points = fmt.table(
        ["id", "series", "seq", "measured", "predicted", "error"],
        [
            [
                str(r["id"]),
                r["series"],
                f"{r['problem']['seq_k']:,}",
                fmt.seconds(r["measured_time_s"]),
                fmt.seconds(r["predicted_time_s"]) if r["predicted_time_s"] else r["reason"][:60],
                pct(r["error"]),
            ]
            for r in rows
        ],
    )
    groups = fmt.table(
        ["source", "implementation", "n", "median |error|", "worst", "within 40%", "rank corr."],
        [
            [
                g["source"],
                g["impl"],
                f"{g['simulated']}/{g['n']}",
                "-" if g["median_abs_error"] is None else f"{100 * g['median_abs_error']:.0f}%",
                pct(g["worst_error"]),
                str(g["within_40pct"]),
                "-" if g["min_rank_correlation"] is None else f"{g['min_rank_correlation']:.2f}",
            ]
            for g in summary["groups"]
        ],
    )
    sp = fmt.table(
        ["source", "implementation", "over", "problem", "measured", "predicted", "error"],
        [
            [
                s["source"],
                s["impl"],
                s["baseline"],
                speedup_problem(s["problem"]),
                f"{s['measured']:.2f}x",
                "-" if s["predicted"] is None else f"{s['predicted']:.2f}x",
                pct(s["error"]),
            ]
            for s in summary["speedups"]
        ],
    )
    host = host_table(rows)
    t = summary["targets"]
    targets = "\n".join(
        [
            "targets: median |error| <= 10% in every group of 10 or more points: "
            + ("met" if t["median_within_10pct_in_every_group_of_10"] else "not met"),
            "         rank correlation >= 0.95 in every series: "
            + ("met" if t["rank_correlation_at_least_0.95_in_every_series"] else "not met"),
            f"         points off by more than 40%: {t['points_off_by_more_than_40pct']}; "
            f"not simulated: {t['points_not_simulated']}",
            "         FlashAttention-3 over FlashAttention-2 speedups off by more than 10%: "
            f"{t['fa3_over_fa2_speedups_off_by_more_than_10pct']}",
        ]
    )
    return "\n\n".join(
        [
            "per point (predicted vs measured; error = predicted / measured - 1)",
            points,
            "per source and implementation",
            groups,
            "speedups on the same problem (pass, batch x heads, seq, d): flash over PyTorch "
            "eager, FlashAttention-3 over FlashAttention-2",
            sp,
            *host,
            targets,
        ]
    )


def host_table(rows: list[dict]) -> list[str]:
    """Where an unmeasured host cost decides a prediction: per source and implementation, of
    the points timed in a loop without a measured host_op_s beside them, how many the preset's
    cost per host operation makes host-bound, and the costs at which they would change sides
    (`host_flip`). Empty when no such point was predicted."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        if r.get("host_op_flip_s") is not None and "host_op_s" not in r:
            groups.setdefault((r["source"], r["impl"]), []).append(r)
    if not groups:
        return []
    table = fmt.table(
        ["source", "implementation", "host-bound", "flips at host_op_s (min - max)"],
        [
            [
                source,
                impl,
                f"{sum(r['bound'] == 'host' for r in members)}/{len(members)}",
                f"{fmt.seconds(min(r['host_op_flip_s'] for r in members))} - "
                f"{fmt.seconds(max(r['host_op_flip_s'] for r in members))}",
            ]
            for (source, impl), members in sorted(groups.items())
        ],
    )
    return [
        "the host's cost per operation (host_op_s, each preset's [approx] value: no measurement "
        "beside these points) decides which side bounds a call in a loop: a point turns "
        "host-bound above its flip value",
        table,
    ]
