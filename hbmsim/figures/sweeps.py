"""Sweeps drawn: tile-size heatmaps, scaling with the sequence length, SRAM sweeps.

Every axis, colour bar and hover carries its unit, chosen by size (axes.unit_for), and the
tile sweep has one meaning of "best": the fastest tiles, starred at the same cell on every
heatmap (`fastest_cell`).
"""

from __future__ import annotations

import math
import textwrap

import numpy as np
import plotly.graph_objects as go

from .. import fmt
from .axes import FORMATTERS, loglog, metric_kind, unit_for
from .palette import algo_color

TIE_REL = 1e-9  # times this close are one time: a tie, not a winner


def metric_text(metric: str, value: float) -> str:
    """A sweep column's value with its unit."""
    if metric == "trips":
        return f"{value:,.0f} trips"
    return FORMATTERS[metric_kind(metric)](value)


def _wrap(text: str, width: int = 48) -> str:
    """Hover text broken into lines: a long reason would run past the chart's edge."""
    return "<br>".join(textwrap.wrap(text, width)) or text


def fastest_row(rows: list[dict], metric: str) -> dict | None:
    """The row with the lowest `metric` (a time) among those that have one, or None when there
    is none or every such row takes the same time (then none is better than another:
    decoding's one query row makes every bq alike)."""
    timed = [r for r in rows if r["feasible"] and r.get(metric) is not None]
    if not timed:
        return None
    best = min(timed, key=lambda r: r[metric])
    if all(math.isclose(r[metric], best[metric], rel_tol=TIE_REL) for r in timed):
        return None
    return best


def fastest_cell(rows: list[dict], metric: str) -> tuple[int, int] | None:
    """(bq, bk) of the fastest tiles (`fastest_row`), or None."""
    best = fastest_row(rows, metric)
    return None if best is None else (best["bq"], best["bk"])


def sweep_heatmap(
    rows: list[dict],
    metric: str,
    title: str,
    star: tuple[int, int] | None = None,
    missing: str = "not simulated at this size",
) -> go.Figure:
    """bq x bk heatmap of one metric, in a unit chosen by its size. Tiles that do not fit are
    blank with the reason on hover, cells without a value (`missing` says why) blank too.
    `star` marks one cell (the fastest tiles: the same cell on every heatmap of a sweep).
    When every cell has the same value the title says so and the colour scale runs from 0 to
    it (Plotly's own range around a single value reaches below zero)."""
    bqs = sorted({r["bq"] for r in rows})
    bks = sorted({r["bk"] for r in rows})
    unit, factor = unit_for(metric_kind(metric), [r.get(metric) for r in rows if r["feasible"]])
    if metric == "trips":
        unit = f"{unit} trips".strip()
    z = [[None] * len(bks) for _ in bqs]
    hover = [[""] * len(bks) for _ in bqs]
    for r in rows:
        i, j = bqs.index(r["bq"]), bks.index(r["bk"])
        value = r.get(metric)
        if not r["feasible"]:
            hover[i][j] = _wrap(f"does not run: {r['reason']}")
        elif value is None:
            hover[i][j] = _wrap(missing)
        else:
            z[i][j] = value * factor
            hover[i][j] = metric_text(metric, value)
    values = [v for line in z for v in line if v is not None]
    span = {}
    if len(set(values)) == 1 and len(values) > 1:
        span = dict(zmin=min(0.0, values[0]), zmax=max(0.0, values[0]) or 1.0)
        title = f"{title} (every cell equal)"
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
    if star is not None and star[0] in bqs and star[1] in bks:
        fig.add_scatter(
            x=[str(star[1])],
            y=[str(star[0])],
            mode="markers+text",
            text=["fastest"],
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


def splits_chart(rows: list[dict], picked: int | None = None) -> go.Figure:
    """split-kv's time against its number of K/V splits (rows of a sweep, each with its
    `splits`), log2 x axis: the fastest count starred (none where every count ties), the
    count split-kv picks by itself (`picked`) ringed; hovers give time, DRAM bytes and the
    combine's share of the trips in units."""
    pts = [r for r in rows if r["feasible"] and r.get("time_s") is not None]
    fig = go.Figure()
    fig.add_scatter(
        x=[r["splits"] for r in pts],
        y=[r["time_s"] for r in pts],
        mode="lines+markers",
        name="split-kv",
        line=dict(color=algo_color("split-kv")),
        text=[
            f"{r['splits']:,} split{'s' * (r['splits'] > 1)}: {fmt.seconds(r['time_s'])}, "
            f"DRAM {fmt.bytes_(r['dram_bytes'])}, {r['trips']:,} trips"
            for r in pts
        ],
        hovertemplate="%{text}<extra></extra>",
    )
    best = fastest_row(rows, "time_s")
    if best is not None:
        fig.add_scatter(
            x=[best["splits"]],
            y=[best["time_s"]],
            mode="markers",
            name=f"fastest: {best['splits']:,}",
            marker=dict(symbol="star", size=16, color="gold", line=dict(width=1, color="black")),
            hoverinfo="skip",
        )
    mine = [r for r in pts if r["splits"] == picked]
    if mine:
        fig.add_scatter(
            x=[picked],
            y=[mine[0]["time_s"]],
            mode="markers",
            name=f"split-kv's own choice: {picked:,}",
            marker=dict(symbol="circle-open", size=18, color="black", line=dict(width=2)),
            hoverinfo="skip",
        )
    fig.update_layout(
        title="split-kv: predicted time against K/V splits",
        height=360,
        margin=dict(l=10, r=10, t=50, b=10),
        legend=dict(orientation="h", y=-0.25),
    )
    powers = [r["splits"] for r in pts if r["splits"] & (r["splits"] - 1) == 0]  # 33 beside 32
    fig.update_xaxes(type="log", title="K/V splits", tickvals=powers, tickangle=0)
    # seconds with SI prefixes ("30µs"): d3's own, so the ticks fall on round values
    fig.update_yaxes(title="predicted time", tickformat="~s", ticksuffix="s", rangemode="tozero")
    return fig


def _slope(xs, ys) -> float | None:
    pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y]
    if len(pts) < 2:
        return None
    lx, ly = np.log([p[0] for p in pts]), np.log([p[1] for p in pts])
    return float(np.polyfit(lx, ly, 1)[0])


def scaling(rows: list[dict], metric: str, title: str) -> go.Figure:
    """Log-log metric (seconds or bytes, ticks labelled in units by size) vs sequence length
    per algorithm, with the fitted slope in the legend; hover names the algorithm in full and
    the value with its unit."""
    fig = go.Figure()
    all_x: list = []
    all_y: list = []
    text = FORMATTERS[metric_kind(metric)]
    for algo in dict.fromkeys(r["algo"] for r in rows):
        pts = [
            (r["seq_k"], r[metric])
            for r in rows
            if r["algo"] == algo and r["feasible"] and r.get(metric) is not None
        ]
        if not pts:
            continue
        xs, ys = zip(*pts, strict=True)
        slope = _slope(xs, ys)
        name = f"{algo} (slope {slope:.2f})" if slope is not None else algo
        fig.add_scatter(
            x=xs,
            y=ys,
            mode="lines+markers",
            name=name,
            line=dict(color=algo_color(algo)),
            text=[f"{x:,} tokens: {text(y)}" for x, y in pts],
            hovertemplate=f"{name}<br>%{{text}}<extra></extra>",
        )
        all_x += xs
        all_y += ys
    loglog(fig, title, "sequence length (tokens)", "", 360, all_x, all_y, fmt.count, text)
    return fig


def sram_sweep(points: list[tuple[int, int]], reference: list[float]) -> go.Figure:
    """FA1's HBM traffic (bytes) against the SRAM size M, with N² d² / M scaled to the first
    point; ticks and hovers in units by size."""
    kib = [p[0] / 1024 for p in points]
    counted = [p[1] for p in points]
    fig = go.Figure()
    fig.add_scatter(
        x=kib,
        y=counted,
        mode="lines+markers",
        name="fa1 counted HBM traffic",
        line=dict(color=algo_color("fa1")),
        text=[
            f"{k:,.0f} KiB of SRAM per SM: {fmt.bytes_(b)}"
            for k, b in zip(kib, counted, strict=True)
        ],
        hovertemplate="fa1 counted HBM traffic<br>%{text}<extra></extra>",
    )
    fig.add_scatter(
        x=kib,
        y=reference,
        mode="lines",
        line=dict(dash="dot"),
        name="∝ N² d² / M (Theorem 2)",
        text=[f"{k:,.0f} KiB: {fmt.bytes_(b)}" for k, b in zip(kib, reference, strict=True)],
        hovertemplate="∝ N² d² / M (Theorem 2)<br>%{text}<extra></extra>",
    )
    ys = counted + list(reference)
    loglog(
        fig,
        "FA1 traffic vs SRAM per SM",
        "SRAM per SM (KiB)",
        "HBM traffic",
        360,
        kib,
        ys,
        y_text=fmt.bytes_,
    )
    return fig
