"""The walkthrough animation: tile grids of Q, K, V, S and O coloured by where each tile is,
frame by frame, from the engine's timeline (never a separately scripted story).

A tile is *moving* while a transfer of it is in flight (from DRAM, or an L2 hit), *in SRAM*
from the end of its load until its CTA loads something else into that buffer or finishes,
*written* once a store of it has completed, and *in HBM only* otherwise. A gauge shows the SRAM
held on SM 0 against the SM's capacity; counters show bytes, trips and simulated time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from . import fmt
from .engine import LEVEL_DRAM, EngineResult
from .program import Plan
from .trace import OP_ATOMIC, OP_COMPUTE, OP_LOAD, OP_STORE

STATES = ("in HBM only", "written to HBM", "in SRAM", "moving from DRAM", "L2 hit")
COLORS = ("#e8e8e8", "#d9b26f", "#54a24b", "#e45756", "#4c78a8")
MAX_GRID = 32  # tiles per grid side: larger problems show coarser display tiles
# tensor -> the grid it is drawn on: the N x N tables (and their gradients) share S's grid,
# the fp32 accumulators and per-head copies share their result's grid
GRID_TENSORS = {
    "Q": "Q",
    "K": "K",
    "V": "V",
    "S": "S",
    "P": "S",
    "P_drop": "S",
    "O": "O",
    "dO": "dO",
    "dQ": "dQ",
    "dQ_accum": "dQ",
    "dK": "dK",
    "dK_rep": "dK",
    "dV": "dV",
    "dV_rep": "dV",
    "dS": "S",
    "dP": "S",
    "dP_drop": "S",
}
KEY_GRIDS = ("K", "V", "dK", "dV")  # grids whose rows are key positions


@dataclass(frozen=True)
class AnimationInfo:
    frames: int
    events: int  # distinct moments in the timeline (starts and ends of ops)
    downsampled: bool
    row_block: int  # query rows per displayed tile
    col_block: int  # key rows per displayed tile


def _grids(plan: Plan) -> tuple[dict[str, tuple[int, int]], int, int]:
    """Displayed grids (rows x cols of tiles) and the rows/cols each tile stands for."""
    p = plan.problem
    rb = max(plan.tiles.bq, math.ceil(p.seq_q / MAX_GRID))
    cb = max(plan.tiles.bk, math.ceil(p.seq_k / MAX_GRID))
    tr, tc = math.ceil(p.seq_q / rb), math.ceil(p.seq_k / cb)
    grids = {"Q": (tr, 1), "K": (tc, 1), "V": (tc, 1)}
    if "S" in plan.tensors:
        grids["S"] = (tr, tc)
    grids["O"] = (tr, 1)
    if "dO" in plan.tensors:  # a backward pass
        grids.update({"dO": (tr, 1), "dQ": (tr, 1), "dK": (tc, 1), "dV": (tc, 1)})
    return grids, rb, cb


def tile_animation(
    result: EngineResult, plan: Plan, title: str, max_frames: int = 300
) -> tuple[dict, AnimationInfo]:
    """An animated figure of one head's tiles (batch 0, head 0), from an exact timeline.

    Returned as a figure dict (Plotly, plotly.io and st.plotly_chart take it as they take a
    Figure), because building hundreds of validated frame objects costs over a second.
    """
    grids, rb, cb = _grids(plan)
    tensor_names = [t["name"] for t in result.meta["tensors"]]
    t = result.timeline
    rows = t[(t["op"] != OP_COMPUTE)]
    rows = rows[(rows["start"][:, 0] == 0) & (rows["start"][:, 1] == 0)]  # batch 0, head 0
    grid_of = (
        np.array(
            [
                list(grids).index(GRID_TENSORS[tensor_names[x]])
                if tensor_names[x] in GRID_TENSORS and GRID_TENSORS[tensor_names[x]] in grids
                else -1
                for x in rows["tensor"]
            ],
            dtype=np.int64,
        )
        if len(rows)
        else np.zeros(0, np.int64)
    )
    keep = grid_of >= 0
    rows, grid_of = rows[keep], grid_of[keep]
    names = list(grids)
    # cell rectangles [r0, r1) x [c0, c1) of each transfer on its grid
    is_s = np.array([names[g] == "S" for g in grid_of], dtype=bool)
    is_kv = np.array([names[g] in KEY_GRIDS for g in grid_of], dtype=bool)
    row_unit = np.where(is_kv, cb, rb)
    r0 = rows["start"][:, 2] // row_unit
    r1 = (rows["stop"][:, 2] - 1) // row_unit + 1
    c0 = np.where(is_s, rows["start"][:, 3] // cb, 0)
    c1 = np.where(is_s, (rows["stop"][:, 3] - 1) // cb + 1, 1)
    held_until = _held_until(t, rows)
    times = np.unique(np.concatenate([t["start_s"], t["end_s"]])) if len(t) else np.zeros(1)
    frames_t = times if len(times) <= max_frames else np.linspace(0.0, float(times[-1]), max_frames)
    info = AnimationInfo(len(frames_t), len(times), len(times) > max_frames, rb, cb)

    fig = make_subplots(
        rows=2,
        cols=len(names),
        row_heights=[0.84, 0.16],
        vertical_spacing=0.1,
        column_widths=[grids[n][1] + 1 for n in names],
        specs=[[{} for _ in names], [{"colspan": len(names)}] + [None] * (len(names) - 1)],
        subplot_titles=names + [""],
    )
    written = {n: np.zeros(grids[n]) for n in names}
    footprint = {k: kk["sram_bytes"] for k, kk in enumerate(result.meta["kernels"])}
    ctas = _cta_intervals(t)
    cap = plan.hardware.sram_bytes_per_sm
    loads = rows["op"] == OP_LOAD
    stores = (rows["op"] == OP_STORE) | (rows["op"] == OP_ATOMIC)
    ends = rows["end_s"]
    done_store = np.zeros(len(rows), bool)
    frame_data = []
    for ft in frames_t:
        newly = stores & (ends <= ft) & ~done_store
        for i in np.flatnonzero(newly):
            written[names[grid_of[i]]][r0[i] : r1[i], c0[i] : c1[i]] = 1
        done_store |= newly
        z = {n: written[n].copy() for n in names}
        held = loads & (ends <= ft) & (held_until > ft)
        moving = (rows["start_s"] <= ft) & (ends > ft)
        # later states paint over earlier ones: a DRAM fill shows even if others hit that tile
        for mask, state in (
            (held, 2),
            (moving & (rows["level"] != LEVEL_DRAM), 4),
            (moving & (rows["level"] == LEVEL_DRAM), 3),
        ):
            for i in np.flatnonzero(mask):
                z[names[grid_of[i]]][r0[i] : r1[i], c0[i] : c1[i]] = state
        sram = sum(footprint[k] for k, s, e, sm in ctas if sm == 0 and s <= ft < e)
        done = ends <= ft
        counters = (
            f"t = {fmt.seconds(ft)}   read {fmt.bytes_(rows['bytes'][done & loads].sum())}"
            f"   written {fmt.bytes_(rows['bytes'][done & stores].sum())}"
            f"   trips {int(done.sum()):,}   SRAM on SM 0: {fmt.bytes_(sram)} of "
            f"{fmt.bytes_(cap)}"
        )
        frame_data.append(([z[n].astype(int).tolist() for n in names], sram, counters))

    colorscale = []
    for k, c in enumerate(COLORS):
        colorscale += [[k / len(COLORS), c], [(k + 1) / len(COLORS), c]]
    first_z, first_sram, first_text = frame_data[0]

    def heatmap(zz, n):  # every attribute in every frame: animations must not lose the colours
        return dict(
            type="heatmap",
            z=zz,
            zmin=-0.5,
            zmax=len(COLORS) - 0.5,
            colorscale=colorscale,
            showscale=False,
            xgap=1,
            ygap=1,
            hovertemplate=n + " tile %{y},%{x}<extra></extra>",
        )

    for col, (n, zz) in enumerate(zip(names, first_z, strict=True), start=1):
        fig.add_trace(go.Heatmap(heatmap(zz, n)), 1, col)
        fig.update_yaxes(autorange="reversed", showticklabels=False, row=1, col=col)
        fig.update_xaxes(showticklabels=False, row=1, col=col)
    fig.add_trace(
        go.Bar(
            x=[first_sram],
            y=["SRAM"],
            orientation="h",
            marker_color="#54a24b",
            text=[first_text],
            textposition="outside",
            showlegend=False,
            hoverinfo="skip",
            textfont=dict(size=12),
        ),
        2,
        1,
    )
    # the gauge fills a quarter of the row at full SRAM, leaving room for the counters
    fig.update_xaxes(range=[0, cap * 4], showticklabels=False, showgrid=False, row=2, col=1)
    fig.update_yaxes(showgrid=False, showticklabels=False, row=2, col=1)
    for state, color in zip(STATES, COLORS, strict=True):
        fig.add_trace(
            go.Scatter(
                x=[None],
                y=[None],
                mode="markers",
                name=state,
                marker=dict(size=12, color=color, symbol="square"),
            )
        )
    n_traces = len(names) + 1
    frames = [  # plain dicts: validating hundreds of frames would cost over a second
        dict(
            name=str(i),
            traces=list(range(n_traces)),
            data=[heatmap(zz, n) for zz, n in zip(zs, names, strict=True)]
            + [dict(type="bar", x=[s], text=[txt])],
        )
        for i, (zs, s, txt) in enumerate(frame_data)
    ]
    play = dict(frame=dict(duration=60, redraw=True), fromcurrent=True, transition=dict(duration=0))
    pause = dict(mode="immediate", frame=dict(duration=0, redraw=False))
    step = dict(mode="immediate", frame=dict(duration=0, redraw=True))
    fig.update_layout(
        title=dict(text=title, x=0.01, y=0.99, yanchor="top"),
        height=540,
        margin=dict(t=110, b=80, l=10, r=10),
        legend=dict(orientation="h", x=0.0, y=1.13, yanchor="bottom", font=dict(size=11)),
        # buttons mid-way: the title holds the left, Plotly's toolbar the right
        updatemenus=[
            dict(
                type="buttons",
                direction="left",
                x=0.48,
                xanchor="left",
                y=1.22,
                yanchor="bottom",
                showactive=False,
                buttons=[
                    dict(label="▶ play", method="animate", args=[None, play]),
                    dict(label="❚❚ pause", method="animate", args=[[None], pause]),
                ],
            )
        ],
        sliders=[
            dict(
                active=0,
                y=-0.04,
                len=1.0,
                pad=dict(t=10),
                currentvalue=dict(prefix="step ", font=dict(size=12)),
                steps=[
                    dict(label=str(i), method="animate", args=[[str(i)], step])
                    for i in range(len(frame_data))
                ],
            )
        ],
    )
    figure = fig.to_dict()
    figure["frames"] = frames
    return figure, info


def _held_until(t: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """For each load: when its tile leaves SRAM (next load into that buffer, or CTA end)."""
    cta_end: dict[tuple[int, int], float] = {}
    for k, c, e in zip(t["kernel"].tolist(), t["cta"].tolist(), t["end_s"].tolist(), strict=True):
        cta_end[(k, c)] = max(cta_end.get((k, c), 0.0), e)
    out = np.zeros(len(rows))
    last: dict[tuple[int, int, int], int] = {}
    order = np.argsort(rows["start_s"], kind="stable")
    for i in order.tolist():
        r = rows[i]
        out[i] = cta_end[(int(r["kernel"]), int(r["cta"]))]
        if r["op"] != OP_LOAD:
            continue
        key = (int(r["kernel"]), int(r["cta"]), int(r["buffer"]))
        if key in last:
            out[last[key]] = min(out[last[key]], float(r["start_s"]))
        last[key] = i
    return out


def _cta_intervals(t: np.ndarray) -> list[tuple[int, float, float, int]]:
    spans: dict[tuple[int, int], list] = {}
    for k, c, s, e, sm in zip(
        t["kernel"].tolist(),
        t["cta"].tolist(),
        t["start_s"].tolist(),
        t["end_s"].tolist(),
        t["sm"].tolist(),
        strict=True,
    ):
        v = spans.setdefault((k, c), [s, e, sm])
        v[0], v[1] = min(v[0], s), max(v[1], e)
    return [(k, s, e, sm) for (k, _c), (s, e, sm) in spans.items()]
