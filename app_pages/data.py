"""Cached hbmsim calls for the pages. Each takes the frozen Settings, so a URL reproduces it.

st.cache_resource for results that hold their plan's tile programs (functions do not pickle;
results are frozen, so sharing is safe); st.cache_data for plain data and figures.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import streamlit as st

from hbmsim import figures, make_plan, save_trace, simulate, trace_plan
from hbmsim.animation import tile_animation
from hbmsim.counts import count
from hbmsim.engine import run_engine
from hbmsim.explain import follow_row
from hbmsim.sweep import SweepSpec, run_sweep
from hbmsim.timeline import write_timeline

from .state import Settings

WALK_MAX_SEQ = 2048  # the walkthrough animates one head of at most this many tokens
SWEEP_TILES = (16, 32, 64, 128, 256)
SWEEP_ENGINE_MAX_TRIPS = 200_000  # tile-sweep cells above this show no simulated time
SCALING_SEQS = (256, 512, 1024, 2048, 4096, 8192, 16384)
SCALING_ENGINE_MAX_TRIPS = 100_000  # beyond this the time plot leaves the point out
SRAM_KIB = (32, 64, 128, 256, 512, 1024)


APP_ENGINE_MAX_TRIPS = 2_000_000  # whole-problem simulations the app runs interactively


@st.cache_resource(show_spinner="Simulating...", max_entries=64)
def result(s: Settings, algo: str):
    """Counts, and the engine's timing when the plan is small enough to stay interactive."""
    return simulate(
        s.problem(), s.hardware(), algo, engine_max_trips=APP_ENGINE_MAX_TRIPS, **s.plan_args(algo)
    )


def walk_problem(s: Settings):
    p = s.problem()
    return dataclasses.replace(
        p,
        batch=1,
        heads=1,
        kv_heads=1,
        seq_q=min(p.seq_q, WALK_MAX_SEQ),
        seq_k=min(p.seq_k, WALK_MAX_SEQ),
    )


@st.cache_data(show_spinner="Simulating one head op by op...", max_entries=16)
def walkthrough(s: Settings) -> dict:
    p, hw = walk_problem(s), s.hardware()
    out = {"problem": p.to_dict()}
    for side, algo in (("standard", "standard"), ("flash", s.algo)):
        plan = make_plan(algo, p, hw, **s.plan_args(algo))
        timing = run_engine(plan, exact=True, timeline=True)
        fig, info = tile_animation(timing, plan, f"{algo}: {timing.time_s * 1e6:.3g} µs simulated")
        out[side] = {
            "figure": fig,
            "info": dataclasses.asdict(info),
            "algo": algo,
            "time_s": timing.time_s,
            "tiles": plan.tiles.to_dict(),
        }
        if side == "flash":
            with tempfile.TemporaryDirectory() as d:
                save_trace(trace_plan(plan), Path(d) / "t.hbmtrace")
                out["trace_file"] = (Path(d) / "t.hbmtrace").read_bytes()
                write_timeline(timing, Path(d) / "timeline.csv")
                out["timeline_csv"] = (Path(d) / "timeline.csv").read_text()
    return out


@st.cache_data(show_spinner=False, max_entries=64)
def row_figure(s: Settings, row: int):
    p, hw = walk_problem(s), s.hardware()
    args = s.plan_args("fa2") if s.algo == "fa2" else {}
    forward = dataclasses.replace(p, pass_="fwd")  # the row is followed through the forward
    trace = follow_row(make_plan("fa2", forward, hw, **args), row)
    return figures.online_softmax(trace), dataclasses.asdict(trace)


@st.cache_data(show_spinner="Sweeping tile sizes...", max_entries=16)
def tile_sweep(s: Settings) -> list[dict]:
    spec = SweepSpec(
        s.problem(),
        s.hardware(),
        (s.algo,),
        None,
        SWEEP_TILES,
        SWEEP_TILES,
        engine_max_trips=SWEEP_ENGINE_MAX_TRIPS,
    )
    return run_sweep(spec)


@st.cache_data(show_spinner="Scaling over sequence length...", max_entries=16)
def scaling_rows(s: Settings) -> list[dict]:
    base = dataclasses.replace(s.problem(), seq_q=SCALING_SEQS[0], seq_k=SCALING_SEQS[0])
    counted = run_sweep(
        SweepSpec(base, s.hardware(), ("standard", "fa1", "fa2"), SCALING_SEQS, engine=False)
    )
    for row in counted:  # time where the engine stays interactive
        if row["feasible"] and row["trips"] <= SCALING_ENGINE_MAX_TRIPS:
            p = dataclasses.replace(base, seq_q=row["seq_q"], seq_k=row["seq_k"])
            row["time_s"] = run_engine(make_plan(row["algo"], p, s.hardware())).time_s
    return counted


@st.cache_data(show_spinner=False, max_entries=16)
def sram_points(s: Settings) -> list[tuple[int, int]]:
    points = []
    for kib in SRAM_KIB:
        hw = s.hardware().with_overrides(sram_bytes_per_sm=kib * 1024)
        try:
            points.append((kib * 1024, count(s.problem(), hw, "fa1").hbm_bytes))
        except Exception:  # noqa: BLE001 - a size where nothing fits is simply not plotted
            continue
    return points


def rows_csv(rows: list[dict]) -> str:
    from hbmsim.sweep import to_csv

    return to_csv(rows)
