"""Where one run's bytes and time go: traffic per tensor, time per kernel, and one query row
through the online softmax.
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..result import Result
from .palette import algo_color

TENSOR_COLORS = {
    "Q": "#4C78A8",
    "K": "#F58518",
    "V": "#E45756",
    "O": "#54A24B",
    "S": "#B279A2",
    "P": "#FF9DA6",
    "lse": "#9D755D",
    "l": "#9D755D",
    "m": "#BAB0AC",
    "causal_mask": "#72B7B2",
    "window_mask": "#72B7B2",  # the same stored mask, a band
    "dropout_mask": "#EECA3B",
}


def traffic_by_tensor(results: list[Result]) -> go.Figure:
    """Stacked bars: HBM bytes (read + written) per tensor, one bar per algorithm."""
    fig = go.Figure()
    names: list[str] = []
    for r in results:
        names += [n for n in r.by_tensor if n not in names]
    labels = [r.plan.algo for r in results]
    for name in names:
        values = []
        for r in results:
            t = r.by_tensor.get(name)
            values.append((t.read_bytes + t.write_bytes) / 1e9 if t else 0.0)
        fig.add_bar(
            name=name,
            x=labels,
            y=values,
            marker_color=TENSOR_COLORS.get(name),
            hovertemplate="%{x}: " + name + " %{y:.4g} GB<extra></extra>",
        )
    fig.update_layout(
        barmode="stack",
        yaxis_title="HBM traffic (GB, read + write)",
        legend_title="tensor",
        margin=dict(t=30, b=30),
        height=380,
    )
    return fig


def kernel_times(results: list[Result]) -> go.Figure:
    """Roofline time per kernel, memory vs compute bound, grouped by algorithm."""
    fig = go.Figure()
    for bound, color in (("memory", "#E45756"), ("compute", "#4C78A8")):
        xs, ys, text = [], [], []
        for r in results:
            for k in r.kernels:
                if k.bound == bound:
                    xs.append(f"{r.plan.algo}/{k.name}")
                    ys.append(k.roofline_time_s * 1e6)
                    text.append(f"{k.read_bytes + k.write_bytes:,} B, {k.flops:,} flops")
        fig.add_bar(
            name=f"{bound}-bound",
            x=xs,
            y=ys,
            marker_color=color,
            text=text,
            hovertemplate="%{x}: %{y:.4g} µs<br>%{text}<extra></extra>",
            textposition="none",
        )
    fig.update_layout(yaxis_title="roofline time (µs)", margin=dict(t=30, b=30), height=380)
    return fig


def online_softmax(trace) -> go.Figure:
    """Running max m, running sum l and the rescale factor after each K/V block of one row."""
    labels = [f"{a}:{b}" for a, b in trace.tiles]
    fig = make_subplots(
        rows=1,
        cols=3,
        subplot_titles=("running max m", "running sum ℓ", "rescale exp(m_old - m_new)"),
    )
    color = algo_color("fa2")  # the row is followed through FA2's program
    line = dict(color=color)
    fig.add_scatter(x=labels, y=trace.m, mode="lines+markers", name="m", line=line, row=1, col=1)
    fig.add_hline(y=trace.naive_max, line_dash="dot", annotation_text="naive row max", row=1, col=1)
    fig.add_scatter(x=labels, y=trace.l, mode="lines+markers", name="ℓ", line=line, row=1, col=2)
    fig.add_bar(x=labels, y=trace.rescale, name="rescale", marker_color=color, row=1, col=3)
    fig.update_xaxes(title_text="K/V block (key columns)")
    fig.update_layout(height=300, showlegend=False, margin=dict(t=40, b=40))
    return fig
