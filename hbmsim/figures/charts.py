"""Plotly figure builders: pure functions from results to figures.

The app and the CLI both draw through these and never build figures themselves, so a chart
looks the same wherever it appears and can be tested without a browser.
"""

from __future__ import annotations

import math
import textwrap

import plotly.graph_objects as go

from .. import fmt
from ..result import Result
from ..validation.gpu_runs import by_kind
from .palette import algo_color
from .roofline import ridge, roofline, roofline_table  # noqa: F401 - one place for figures

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


def log_ticks(values) -> dict:
    """Tick values and labels for a log axis spanning `values`: decades when the data spans
    two or more, else 1-2-5 steps. Why not Plotly's own: on short ranges it labels the minor
    ticks too ("2 5 2 5"), which reads as noise."""
    vals = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not vals:
        return {}
    lo, hi = min(vals), max(vals)
    k0, k1 = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    steps = (1,) if hi / lo >= 100 else (1, 2, 5)
    ticks = [m * 10.0**k for k in range(k0, k1 + 1) for m in steps]
    ticks = [t for t in ticks if lo / 1.5 <= t <= hi * 1.5] or [lo, hi]
    return dict(tickvals=ticks, ticktext=[_tick_text(t) for t in ticks], minor=dict(ticks=""))


def _tick_text(v: float) -> str:
    if v >= 1e6 or v < 1e-3:
        return f"{v:.0e}".replace("e+0", "e").replace("e-0", "e-")
    return f"{v:,.0f}" if v >= 1 else f"{v:g}"


def _loglog(
    fig: go.Figure, title: str, x_title: str, y_title: str, height: int, xs=(), ys=()
) -> None:
    """The layout every log-log chart here shares: major ticks only, labelled in plain numbers."""
    fig.update_layout(
        title=title,
        xaxis=dict(type="log", title=x_title, **log_ticks(xs)),
        yaxis=dict(type="log", title=y_title, **log_ticks(ys)),
        height=height,
        margin=dict(t=50, b=40),
    )


def online_softmax(trace) -> go.Figure:
    """Running max m, running sum l and the rescale factor after each K/V block of one row."""
    from plotly.subplots import make_subplots

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
    import numpy as np

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
    _loglog(fig, title, "sequence length", unit, 360, all_x, all_y)
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
    _loglog(fig, "FA1 traffic vs SRAM per SM", "SRAM per SM (KiB)", "GB", 360, kib, ys)
    return fig


def validation_scatter(configs: list[dict]) -> go.Figure:
    """Predicted vs measured time, one point per configuration (a colour per kernel kind), with
    the y = x line."""
    fig = go.Figure()
    measured = [c["measured_time_s"] * 1e6 for c in configs]
    predicted = [c["predicted_time_s"] * 1e6 for c in configs]
    if measured:
        lo, hi = min(measured + predicted), max(measured + predicted)
        fig.add_scatter(
            x=[lo, hi], y=[lo, hi], mode="lines", name="y = x", line=dict(color="gray", dash="dot")
        )
    for kind, group in by_kind(configs).items():  # one trace per kernel kind
        fig.add_scatter(
            x=[c["measured_time_s"] * 1e6 for c in group],
            y=[c["predicted_time_s"] * 1e6 for c in group],
            mode="markers",
            name=kind,
            marker=dict(color=algo_color(kind)),
            text=[c["name"] for c in group],
            hovertemplate="%{text}<br>measured %{x:.4g} µs<br>predicted %{y:.4g} µs<extra></extra>",
        )
    _loglog(
        fig,
        "Predicted vs measured time",
        "measured (µs)",
        "predicted (µs)",
        420,
        measured,
        predicted,
    )
    return fig


def published_scatter(
    rows: list[dict], title: str = "Published timings: predicted vs measured"
) -> go.Figure:
    """Published timings (or timings in their format: the extra checks): predicted vs
    measured, a colour per implementation, the y = x line and a ±40% band; hover names the
    series and the paper or run it comes from."""
    fig = go.Figure()
    done = [r for r in rows if r["predicted_time_s"]]
    if done:
        values = [r["measured_time_s"] * 1e3 for r in done]
        values += [r["predicted_time_s"] * 1e3 for r in done]
        lo, hi = min(values) / 1.5, max(values) * 1.5
        for factor, name in ((1.0, "y = x"), (1.4, "+40%"), (0.6, "-40%")):
            fig.add_scatter(
                x=[lo, hi],
                y=[lo * factor, hi * factor],
                mode="lines",
                name=name,
                line=dict(color="gray", dash="dot" if factor == 1 else "dash", width=1),
                hoverinfo="skip",
            )
    impls: dict[str, list[dict]] = {}
    for r in done:
        impls.setdefault(r["impl"], []).append(r)
    for impl, group in sorted(impls.items()):
        fig.add_scatter(
            x=[r["measured_time_s"] * 1e3 for r in group],
            y=[r["predicted_time_s"] * 1e3 for r in group],
            mode="markers",
            name=impl,
            marker=dict(color=algo_color(impl)),
            text=[
                f"{r['series']}, seq {r['problem']['seq_k']:,}, batch {r['problem']['batch']}"
                f"<br>error {100 * r['error']:+.0f}%<br>{r['citation'][:90]}"
                for r in group
            ],
            hovertemplate="%{text}<br>measured %{x:.4g} ms<br>predicted %{y:.4g} ms<extra></extra>",
        )
    ms = [r[k] * 1e3 for r in done for k in ("measured_time_s", "predicted_time_s")]
    _loglog(
        fig,
        title,
        "measured (ms)",
        "predicted (ms)",
        480,
        ms,
        ms,
    )
    return fig
