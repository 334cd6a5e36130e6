"""Sweeps drawn: tile-size heatmaps, scaling with the sequence length, SRAM sweeps."""

from __future__ import annotations

import textwrap

import numpy as np
import plotly.graph_objects as go

from .. import fmt
from .axes import loglog
from .palette import algo_color


def metric_text(metric: str, value: float) -> str:
    """A sweep column's value with its unit."""
    if metric.endswith("_s"):
        return fmt.seconds(value)
    if metric.endswith("bytes"):
        return fmt.bytes_(value)
    if metric == "trips":
        return f"{value:,.0f} trips"
    return f"{value:.4g}"


def _wrap(text: str, width: int = 48) -> str:
    """Hover text broken into lines: a long reason would run past the chart's edge."""
    return "<br>".join(textwrap.wrap(text, width)) or text


def sweep_heatmap(
    rows: list[dict],
    metric: str,
    title: str,
    scale: float = 1.0,
    unit: str = "",
    missing: str = "not simulated at this size",
) -> go.Figure:
    """bq x bk heatmap of one metric. Tiles that do not fit are blank with the reason on hover,
    cells without a value (`missing` says why) blank too; the best (lowest) of the cells that
    have a value is starred, unless every cell has the same value (decoding's one query row
    makes every bq alike): then the title says so and the colour scale runs from 0 to it
    (Plotly's own range around a single value reaches below zero)."""
    bqs = sorted({r["bq"] for r in rows})
    bks = sorted({r["bk"] for r in rows})
    z = [[None] * len(bks) for _ in bqs]
    hover = [[""] * len(bks) for _ in bqs]
    best = None
    for r in rows:
        i, j = bqs.index(r["bq"]), bks.index(r["bk"])
        value = r.get(metric)
        if not r["feasible"]:
            hover[i][j] = _wrap(f"does not run: {r['reason']}")
            continue
        if value is None:
            hover[i][j] = _wrap(missing)
            continue
        z[i][j] = value * scale
        hover[i][j] = metric_text(metric, value)
        if best is None or value < best[0]:
            best = (value, j, i)
    values = {v for line in z for v in line if v is not None}
    flat = len(values) == 1 and len([v for line in z for v in line if v is not None]) > 1
    span = {}
    if flat:
        (v,) = values
        span = dict(zmin=min(0.0, v), zmax=max(0.0, v) or 1.0)
        title = f"{title} (every cell equal)"
        best = None
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=[str(b) for b in bks],
            y=[str(b) for b in bqs],
            text=hover,
            hovertemplate="bq %{y}, bk %{x}<br>%{text}<extra></extra>",
            colorscale="Viridis",
            colorbar=dict(title=unit),
            **span,
        )
    )
    if best is not None:
        fig.add_scatter(
            x=[str(bks[best[1]])],
            y=[str(bqs[best[2]])],
            mode="markers+text",
            text=["best"],
            textposition="top center",
            showlegend=False,
            hoverinfo="skip",
            marker=dict(symbol="star", size=16, color="white", line=dict(color="black", width=1)),
        )
    fig.update_layout(
        title=title,
        xaxis_title="bk (rows of K/V per tile)",
        yaxis_title="bq (rows of Q per tile)",
        height=360,
        margin=dict(t=50, b=40),
        hoverlabel=dict(align="left"),
    )
    fig.update_xaxes(type="category")
    fig.update_yaxes(type="category")
    return fig


def _slope(xs, ys) -> float | None:
    pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y]
    if len(pts) < 2:
        return None
    lx, ly = np.log([p[0] for p in pts]), np.log([p[1] for p in pts])
    return float(np.polyfit(lx, ly, 1)[0])


def scaling(rows: list[dict], metric: str, title: str, unit: str, scale: float = 1.0) -> go.Figure:
    """Log-log metric vs sequence length per algorithm, with the fitted slope in the legend."""
    fig = go.Figure()
    all_x: list = []
    all_y: list = []
    for algo in dict.fromkeys(r["algo"] for r in rows):
        pts = [
            (r["seq_k"], r[metric] * scale)
            for r in rows
            if r["algo"] == algo and r["feasible"] and r.get(metric) is not None
        ]
        if not pts:
            continue
        xs, ys = zip(*pts, strict=True)
        slope = _slope(xs, ys)
        name = f"{algo} (slope {slope:.2f})" if slope is not None else algo
        fig.add_scatter(
            x=xs, y=ys, mode="lines+markers", name=name, line=dict(color=algo_color(algo))
        )
        all_x += xs
        all_y += ys
    loglog(fig, title, "sequence length", unit, 360, all_x, all_y)
    return fig


def sram_sweep(points: list[tuple[int, int]], reference: list[float]) -> go.Figure:
    """FA1's HBM traffic against the SRAM size M, with N² d² / M scaled to the first point."""
    kib = [p[0] / 1024 for p in points]
    fig = go.Figure()
    fig.add_scatter(
        x=kib,
        y=[p[1] / 1e9 for p in points],
        mode="lines+markers",
        name="fa1 counted HBM traffic",
        line=dict(color=algo_color("fa1")),
    )
    fig.add_scatter(
        x=kib, y=reference, mode="lines", line=dict(dash="dot"), name="∝ N² d² / M (Theorem 2)"
    )
    ys = [p[1] / 1e9 for p in points] + list(reference)
    loglog(fig, "FA1 traffic vs SRAM per SM", "SRAM per SM (KiB)", "GB", 360, kib, ys)
    return fig
