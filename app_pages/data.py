"""Cached hbmsim calls for the pages. Each takes the frozen Settings, so a URL reproduces it.

st.cache_resource for results that hold their plan's tile programs (functions do not pickle;
results are frozen, so sharing is safe); st.cache_data for plain data and figures. The
walkthrough's animated figure is also kept built (`walk_chart`): Streamlit validates a figure
given as a dict on every rerun (about half a second for its 120 frames) but only serialises a
built one; nothing mutates it after it is built, so sharing it is safe. It is built as a
`SpecFigure`, which skips plotly's validation of the dict hbmsim built (tests check that the
validation accepts it and that the same dict reaches the browser).
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
import streamlit as st

from hbmsim import HbmsimError, fmt, make_plan, save_trace, simulate, trace_plan
from hbmsim.api import build_plan
from hbmsim.engine.simulation import run_engine
from hbmsim.engine.timeline import write_timeline
from hbmsim.errors import TooLargeToExecuteError
from hbmsim.explore.sweep import SweepSpec, run_sweep
from hbmsim.figures import traffic
from hbmsim.figures import warpgroups as rolefig
from hbmsim.figures.walkthrough.animation import side_frames
from hbmsim.figures.walkthrough.figure import WIDTH_PX, Side, frame_times, walk_figure
from hbmsim.interpret.counts import count, count_plan
from hbmsim.interpret.explain import follow_row

from .fields import FLASH_ALGOS, Settings

WALK_MAX_SEQ = 1024  # one head of at most this many tokens: the exact replay stays under ~2 s
# ... at the default tiles. Tiny tiles (a few KiB of SRAM) multiply the ops: the replay costs
# about 20-45 µs a load or store with its timeline (standard attention at 2 KiB of SRAM per SM:
# 36 s), so the walkthrough animates at most this many and says so past it
WALK_MAX_TRIPS = 200_000
WALK_FRAMES = 120  # frames on the shared clock (80 ms each: about 10 s of playback)
MIN_WIDTH_PX, MAX_WIDTH_PX = 320, 1400  # the figure's width, whatever the page reports
WIDTH_STEP_PX = 20
SWEEP_TILES = (16, 32, 64, 128, 256)
SWEEP_ENGINE_MAX_TRIPS = 200_000  # tile-sweep cells above this show no simulated time
SCALING_SEQS = (256, 512, 1024, 2048, 4096, 8192, 16384)
SCALING_ENGINE_MAX_TRIPS = 100_000  # beyond this the time plot leaves the point out
SRAM_KIB = (32, 64, 128, 256, 512, 1024)


def result(s: Settings, algo: str):
    """Counts and the engine's timing of the whole problem, with a spinner naming what is
    being simulated while it runs (the engine's own bounds decide how: every step replayed,
    or its long kernels stretched, hbmsim.engine.limits)."""
    p = s.problem()
    what = (
        f"Simulating {algo} on {s.hardware().name}: batch {p.batch} x {p.heads} heads, "
        f"{p.seq_q:,} x {p.seq_k:,} tokens, {p.pass_}..."
    )
    with st.spinner(what):
        return _result(s, algo)


@st.cache_resource(show_spinner=False, max_entries=64)
def _result(s: Settings, algo: str):
    return simulate(s.problem(), s.hardware(), timing=s.timing, **s.plan_args(algo))


def walk_problem(s: Settings):
    """One head of the problem, each length cut to WALK_MAX_SEQ (the page says when)."""
    p = s.problem()
    return dataclasses.replace(
        p,
        batch=1,
        heads=1,
        kv_heads=1,
        seq_q=min(p.seq_q, WALK_MAX_SEQ),
        seq_k=min(p.seq_k, WALK_MAX_SEQ),
    )


def _side_key(s: Settings, algo: str) -> Settings:
    """Settings that do not change `algo`'s plan are blanked, so that changing the flash tiles
    does not re-simulate standard attention."""
    if algo == s.algo:
        return s
    return dataclasses.replace(s, algo=FLASH_ALGOS[0], bq=0, bk=0, splits=0)


@st.cache_resource(show_spinner="Simulating one head op by op...", max_entries=16)
def _walk_run(s: Settings, algo: str):
    """A library mirror's call also costs its host (launches, framework ops), which for one
    head dwarfs its kernels: the walkthrough compares what the GPUs do, so its time is the
    kernels' own (the notes say what the host would add)."""
    plan = build_plan(walk_problem(s), s.hardware(), **walk_args(s, algo))
    counts = count_plan(plan)
    trips = counts.trips
    if trips > WALK_MAX_TRIPS:
        raise TooLargeToExecuteError(
            f"the animation replays every load and store of one head, at most "
            f"{WALK_MAX_TRIPS:,} here to stay interactive, and this one has {trips:,} (tiles "
            f"{fmt.tiles(plan.tiles.to_dict())}): larger tiles or more SRAM per SM animate it; "
            "the Roofline page times the whole problem"
        )
    timing = run_engine(plan, exact=True, timeline=True, counts=counts)
    if timing.gpu_time_s is not None and timing.gpu_time_s < timing.time_s:
        timing = dataclasses.replace(timing, time_s=timing.gpu_time_s)
    return plan, timing


def walk_args(s: Settings, algo: str) -> dict:
    """The plan arguments of `algo` for the animated head: the sidebar's, but split-kv's
    splits at most the head's K/V blocks (the sidebar allows one split per K/V block of the
    whole problem; the head's cut lengths may hold fewer, and the page says so)."""
    args = s.plan_args(algo)
    if args.get("splits"):
        try:
            plan = build_plan(walk_problem(s), s.hardware(), **{**args, "splits": None})
        except HbmsimError:  # refused for another reason: the run below says which
            return args
        args["splits"] = min(args["splits"], math.ceil(plan.problem.seq_k / plan.tiles.bk))
    return args


def walk_run(s: Settings, algo: str):
    """(plan, exact engine result with its timeline) of one head; raises HbmsimError."""
    return _walk_run(_side_key(s, algo), algo)


@st.cache_resource(show_spinner="Drawing the frames...", max_entries=16)
def walk_sides(s: Settings) -> tuple[list[Side], np.ndarray, dict]:
    """Standard attention and the flash algorithm on one clock, or whichever of them can run:
    (each side's frames, the clock, the summary `walkthrough` returns). A side that cannot
    run (tiles that do not fit, a pass an algorithm lacks) is reported by its error message
    and the other is still drawn. Kept built (frames hold arrays: no copy per rerun)."""
    out: dict = {"problem": walk_problem(s).to_dict(), "sides": [], "errors": {}}
    runs = []
    for algo in ("standard", s.algo):
        try:
            runs.append((algo, *walk_run(s, algo)))
        except HbmsimError as exc:
            out["errors"][algo] = str(exc)
    if not runs:
        return [], np.zeros(0), out
    times = frame_times(max(timing.time_s for _, _, timing in runs), WALK_FRAMES)
    sides = []
    for algo, plan, timing in runs:
        frames = side_frames(timing, plan, times)
        sides.append(Side(algo, frames, plan.problem))
        out["sides"].append(
            {
                "algo": algo,
                "time_s": timing.time_s,
                "tiles": plan.tiles.to_dict(),
                "splits": walk_args(s, algo).get("splits"),
                "kernels": [k.name for k in timing.kernels],
                "ctas": [k.ctas for k in timing.kernels],
                "row_block": frames.grids.row_block,
                "col_block": frames.grids.col_block,
                "dram_bytes": timing.dram_read_bytes + timing.dram_write_bytes,
                "l2_hit_bytes": timing.l2_hit_bytes,
                "timeline_truncated": timing.timeline_truncated,
                "host_time_s": timing.host_time_s,
            }
        )
    end = float(times[-1])
    out["info"] = {"frames": len(times), "frame_s": end / (len(times) - 1), "end_s": end}
    return sides, times, out


def walkthrough(s: Settings) -> dict:
    """What the Walkthrough page says about its animation: the animated problem, each side's
    algorithm, time, tiles and kernels, each side's error, the clock (see walk_sides)."""
    return walk_sides(s)[2]


def chart_width(reported: int | None) -> int:
    """The width the figure is built for: the page's, in steps of WIDTH_STEP_PX (a resize by
    a few pixels reuses the figure), from MIN_WIDTH_PX to MAX_WIDTH_PX; WIDTH_PX before the
    page has said."""
    if not reported:
        return WIDTH_PX
    return max(MIN_WIDTH_PX, min(MAX_WIDTH_PX, reported // WIDTH_STEP_PX * WIDTH_STEP_PX))


class SpecFigure(go.Figure):
    """A figure that hands Streamlit the dict hbmsim built, as `go.Figure(spec).to_dict()`
    would give it (with plotly's default template, which validation adds), without validating
    it again.

    Why: building a `go.Figure` validates every trace of every animation frame, 0.2 s of the
    walkthrough's first load for its 120 frames (measured in a fresh process: 0.26 s to build
    and serialise, 0.06 s as a SpecFigure, plus 0.04 s for the template), and Streamlit only
    asks the figure for its dict. The spec comes from hbmsim's own figure builders, never
    from a user; tests run it through the validation instead.
    """

    def __init__(self, spec: dict):
        super().__init__()
        layout = dict(spec.get("layout", {}))
        layout.setdefault("template", pio.templates[pio.templates.default].to_plotly_json())
        self._spec = {**spec, "layout": layout}

    def to_dict(self) -> dict:
        return self._spec


@st.cache_resource(show_spinner=False, max_entries=32)
def walk_chart(s: Settings, width: int = WIDTH_PX) -> go.Figure | None:
    """The walkthrough's figure `width` pixels wide, built once per setting and width (None
    when no side could run)."""
    sides, times, _ = walk_sides(s)
    return SpecFigure(walk_figure(sides, times, width)[0]) if sides else None


@st.cache_resource(show_spinner=False, max_entries=16)
def warpgroup_chart(s: Settings) -> go.Figure | None:
    """The flash side's warpgroups over time when its kernel is warp-specialised (FA3), else
    None; the walkthrough's run (one head, exact, with its timeline) is reused."""
    try:
        _, timing = walk_run(s, s.algo)
    except HbmsimError:
        return None
    return rolefig.warpgroup_chart(timing) if rolefig.warp_specialised(timing) else None


def trace_file(s: Settings) -> bytes:
    """The flash side's trace file (built when the download is asked for)."""
    plan, _ = walk_run(s, s.algo)
    with tempfile.TemporaryDirectory() as d:
        save_trace(trace_plan(plan), Path(d) / "t.hbmtrace")
        return (Path(d) / "t.hbmtrace").read_bytes()


def timeline_csv(s: Settings) -> str:
    _, timing = walk_run(s, s.algo)
    with tempfile.TemporaryDirectory() as d:
        write_timeline(timing, Path(d) / "timeline.csv")
        return (Path(d) / "timeline.csv").read_text()


@st.cache_data(show_spinner=False, max_entries=64)
def row_figure(s: Settings, row: int):
    """(figure, row trace, FA2 tiles used, note): the row followed through FA2's program, with
    the sidebar's tiles when FA2 is the chosen algorithm and they fit, else FA2's defaults
    (the note says why)."""
    forward = dataclasses.replace(walk_problem(s), pass_="fwd")  # followed through the forward
    hw, note = s.hardware(), ""
    try:
        plan = build_plan(forward, hw, **s.plan_args("fa2"))
    except HbmsimError as exc:
        plan = make_plan("fa2", forward, hw)
        note = f"The sidebar's tiles cannot run ({exc}); this row uses FA2's default tiles."
    trace = follow_row(plan, row)
    return traffic.online_softmax(trace), dataclasses.asdict(trace), plan.tiles.to_dict(), note


def tile_sweep(s: Settings, progress=None) -> list[dict]:
    """The Sweep page's bq x bk table, a cached cell at a time so that `progress(done, total,
    what)` can be told before each (a cached function may not draw: Streamlit replays what
    it drew on a cache hit, and a progress bar made outside it is gone by then)."""
    cells = [(bq, bk) for bq in SWEEP_TILES for bk in SWEEP_TILES]
    rows = []
    for i, (bq, bk) in enumerate(cells):
        if progress is not None:
            progress(i, len(cells), f"{s.algo}, bq {bq} x bk {bk}")
        rows.append(_sweep_cell(s, bq, bk))
    return rows


@st.cache_data(show_spinner=False, max_entries=16 * len(SWEEP_TILES) ** 2)
def _sweep_cell(s: Settings, bq: int, bk: int) -> dict:
    spec = SweepSpec(
        s.problem(),
        s.hardware(),
        (s.algo,),
        None,
        (bq,),
        (bk,),
        engine_max_trips=SWEEP_ENGINE_MAX_TRIPS,
        splits=s.plan_args(s.algo).get("splits"),
    )
    return run_sweep(spec)[0]


SPLIT_SWEEP = (1, 2, 4, 8, 16, 32, 64, 128, 256)  # split-kv's K/V splits on the Sweep page


def split_sweep(s: Settings, progress=None) -> tuple[list[dict], int]:
    """split-kv (the textbook Flash-Decoding) over its K/V splits on the whole problem: (one
    sweep row per split count in SPLIT_SWEEP up to the K/V blocks, each with its `splits`;
    the count split-kv picks by itself). The sidebar's tiles apply when its algorithm is
    split-kv; `progress` as tile_sweep's."""
    args = s.plan_args("split-kv")
    plan = build_plan(s.problem(), s.hardware(), **{**args, "splits": None})
    blocks = math.ceil(plan.problem.seq_k / plan.tiles.bk)
    counts = sorted({n for n in SPLIT_SWEEP if n <= blocks} | {plan.tiles.splits})
    rows = []
    for i, n in enumerate(counts):
        if progress is not None:
            progress(i, len(counts), f"split-kv, {n} split{'s' * (n > 1)}")
        rows.append(_split_cell(s, n))
    return rows, plan.tiles.splits


@st.cache_data(show_spinner=False, max_entries=16 * len(SPLIT_SWEEP))
def _split_cell(s: Settings, splits: int) -> dict:
    args = s.plan_args("split-kv")
    spec = SweepSpec(
        s.problem(),
        s.hardware(),
        ("split-kv",),
        None,
        (args["bq"],) if args.get("bq") else (),
        (args["bk"],) if args.get("bk") else (),
        engine_max_trips=SWEEP_ENGINE_MAX_TRIPS,
        splits=splits,
    )
    return {**run_sweep(spec)[0], "splits": splits}


def scaling_rows(s: Settings, progress=None) -> list[dict]:
    """Counts of the three algorithms over SCALING_SEQS, timed where the engine stays
    interactive, a cached simulation at a time (`progress` as tile_sweep's)."""
    rows = [dict(r) for r in _scaling_counts(s)]
    timed = [r for r in rows if r["feasible"] and r["trips"] <= SCALING_ENGINE_MAX_TRIPS]
    for i, row in enumerate(timed):
        if progress is not None:
            progress(i, len(timed), f"{row['algo']} at {row['seq_k']:,} tokens")
        row["time_s"] = _scaling_time(s, row["algo"], row["seq_q"], row["seq_k"])
    return rows


def _scaling_base(s: Settings):
    """The sidebar's problem at the first length; a decoding problem keeps its one query row
    (run_sweep varies the KV cache alone)."""
    p = s.problem()
    seq_q = 1 if p.seq_q == 1 else SCALING_SEQS[0]
    return dataclasses.replace(p, seq_q=seq_q, seq_k=SCALING_SEQS[0])


@st.cache_data(show_spinner=False, max_entries=16)
def _scaling_counts(s: Settings) -> list[dict]:
    spec = SweepSpec(
        _scaling_base(s), s.hardware(), ("standard", "fa1", "fa2"), SCALING_SEQS, engine=False
    )
    return run_sweep(spec)


@st.cache_data(show_spinner=False, max_entries=16 * 3 * len(SCALING_SEQS))
def _scaling_time(s: Settings, algo: str, seq_q: int, seq_k: int) -> float:
    p = dataclasses.replace(_scaling_base(s), seq_q=seq_q, seq_k=seq_k)
    return run_engine(make_plan(algo, p, s.hardware())).time_s


def sram_points(s: Settings, progress=None) -> tuple[list[tuple[int, int]], list[tuple[int, str]]]:
    """(SRAM bytes, FA1's counted HBM bytes) per size, and the sizes left out with the reason;
    a cached count at a time (`progress` as tile_sweep's: counting causal FA1 at millions of
    tokens takes seconds a size)."""
    points, skipped = [], []
    for i, kib in enumerate(SRAM_KIB):
        if progress is not None:
            progress(i, len(SRAM_KIB), f"FA1 with {kib:,} KiB of SRAM per SM")
        hbm, why = _sram_point(s, kib)
        if why is None:
            points.append((kib * 1024, hbm))
        else:  # a size where FA1's tiles do not fit: said, not plotted
            skipped.append((kib, why))
    return points, skipped


@st.cache_data(show_spinner=False, max_entries=16 * len(SRAM_KIB))
def _sram_point(s: Settings, kib: int) -> tuple[int, str | None]:
    hw = s.hardware().with_overrides(sram_bytes_per_sm=kib * 1024)
    try:
        return count(s.problem(), hw, "fa1").hbm_bytes, None
    except HbmsimError as exc:
        return 0, str(exc)


def rows_csv(rows: list[dict]) -> str:
    from hbmsim.explore.sweep import to_csv

    return to_csv(rows)
