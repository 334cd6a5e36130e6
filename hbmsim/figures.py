"""Plotly figure builders: pure functions from results to figures.

The app and the CLI both draw through these and never build figures themselves, so a chart
looks the same wherever it appears and can be tested without a browser.
"""

from __future__ import annotations

import plotly.graph_objects as go

from .result import Result

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
