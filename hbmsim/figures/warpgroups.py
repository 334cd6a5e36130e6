"""What the warpgroups of one warp-specialised CTA do over time: a chart from the timeline.

Why: in a warp-specialised kernel (FlashAttention-3) the thing to see is the overlap, the
producer's TMA loads running ahead of the consumers' GEMMs and the consumer warpgroups taking
the tensor cores in turn while another one runs its softmax. The walkthrough's tile grids show
where bytes are, not who in the CTA is busy; this chart draws one CTA's rows of the engine's
timeline (engine.result's roles) as bars on a clock, so it is read off the simulation, never
drawn separately.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from ..engine.result import ROLE_CTA, ROLE_PRODUCER, EngineResult, role_parts
from ..interpret.trace import OP_COMPUTE, OP_LOAD

PHASE_COLORS = {"TMA load": "#4C78A8", "MMA (tensor cores)": "#F58518", "softmax": "#54A24B"}


def warp_specialised(result: EngineResult) -> bool:
    """Whether the result's timeline has per-warpgroup rows to draw."""
    t = result.timeline
    return t is not None and bool(np.any(t["role"] > ROLE_PRODUCER))


def warpgroup_chart(result: EngineResult, max_steps: int = 12) -> go.Figure:
    """The first warp-specialised CTA on SM 0: its producer's loads and each consumer
    warpgroup's MMA and softmax phases, over its first `max_steps` compute steps' span.
    Raises ValueError when the timeline has no such rows."""
    t = result.timeline
    if t is None or not warp_specialised(result):
        raise ValueError("warpgroup_chart needs a timeline of a warp-specialised kernel")
    ws = t[t["role"] > ROLE_PRODUCER]
    if np.any(ws["sm"] == 0):
        ws = ws[ws["sm"] == 0]
    first = ws[np.argmin(ws["start_s"])]
    mine = t[(t["kernel"] == first["kernel"]) & (t["cta"] == first["cta"])]
    comp = mine[(mine["op"] == OP_COMPUTE) & (mine["role"] > ROLE_PRODUCER)]
    ends = np.sort(np.unique(comp["end_s"]))
    n_wg = role_parts(int(comp["role"].max()))[0] + 1
    horizon = ends[min(len(ends), max_steps * n_wg * 2) - 1]
    start = float(mine["start_s"].min())
    rows = ["producer (TMA)"] + [f"consumer warpgroup {w}" for w in range(n_wg)]
    bars: dict[str, list] = {name: [] for name in PHASE_COLORS}
    for r in mine:
        if r["start_s"] > horizon:
            continue
        role = int(r["role"])
        if r["op"] == OP_LOAD and role in (ROLE_PRODUCER, ROLE_CTA):
            kind, row = "TMA load", rows[0]
        elif r["op"] == OP_COMPUTE and role > ROLE_PRODUCER:
            w, phase = role_parts(role)
            kind = "softmax" if phase == "softmax" else "MMA (tensor cores)"
            row = rows[1 + w]
        else:
            continue
        a, b = (float(r["start_s"]) - start) * 1e6, (float(r["end_s"]) - start) * 1e6
        bars[kind].append((row, a, b - a))
    fig = go.Figure()
    for kind, items in bars.items():
        if not items:
            continue
        fig.add_bar(
            name=kind,
            y=[i[0] for i in items],
            base=[i[1] for i in items],
            x=[i[2] for i in items],
            orientation="h",
            marker_color=PHASE_COLORS[kind],
            marker_line_width=0.5,
            marker_line_color="white",
            hovertemplate="%{y}: " + kind + " from %{base:.3f} µs for %{x:.3f} µs<extra></extra>",
        )
    kernel = result.kernels[int(first["kernel"])].name if result.kernels else ""
    fig.update_layout(
        barmode="overlay",
        title=f"{kernel}: one CTA's warpgroups on SM 0 (engine timeline)",
        xaxis_title="µs since the CTA started",
        yaxis=dict(categoryorder="array", categoryarray=rows[::-1]),
        legend_title="what runs",
        margin=dict(t=50, b=40),
        height=120 + 45 * len(rows),
    )
    return fig
