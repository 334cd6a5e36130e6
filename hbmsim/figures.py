"""Plotly figure builders: pure functions from results to figures.

The app and the CLI both draw through these and never build figures themselves, so a chart
looks the same wherever it appears and can be tested without a browser.
"""

from __future__ import annotations

import plotly.graph_objects as go

from .result import Result
from .validation import by_kind

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


def _loglog(fig: go.Figure, title: str, x_title: str, y_title: str, height: int) -> None:
    """The layout every log-log chart here shares."""
    fig.update_layout(
        title=title,
        xaxis_type="log",
        yaxis_type="log",
        xaxis_title=x_title,
        yaxis_title=y_title,
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
    fig.add_scatter(x=labels, y=trace.m, mode="lines+markers", name="m", row=1, col=1)
    fig.add_hline(y=trace.naive_max, line_dash="dot", annotation_text="naive row max", row=1, col=1)
    fig.add_scatter(x=labels, y=trace.l, mode="lines+markers", name="ℓ", row=1, col=2)
    fig.add_bar(x=labels, y=trace.rescale, name="rescale", row=1, col=3)
    fig.update_xaxes(title_text="K/V block (key columns)")
    fig.update_layout(height=300, showlegend=False, margin=dict(t=40, b=40))
    return fig


def sweep_heatmap(
    rows: list[dict], metric: str, title: str, scale: float = 1.0, unit: str = ""
) -> go.Figure:
    """bq x bk heatmap of one metric; infeasible tiles blank with the reason on hover; the best
    (lowest) feasible cell marked."""
    bqs = sorted({r["bq"] for r in rows})
    bks = sorted({r["bk"] for r in rows})
    z = [[None] * len(bks) for _ in bqs]
    hover = [[""] * len(bks) for _ in bqs]
    best = None
    for r in rows:
        i, j = bqs.index(r["bq"]), bks.index(r["bk"])
        value = r.get(metric)
        if not r["feasible"] or value is None:
            hover[i][j] = r["reason"] or f"{metric} not simulated at this size"
            continue
        z[i][j] = value * scale
        hover[i][j] = f"{value * scale:.4g} {unit}"
        if best is None or value < best[0]:
            best = (value, j, i)
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=[str(b) for b in bks],
            y=[str(b) for b in bqs],
            text=hover,
            hovertemplate="bq %{y}, bk %{x}<br>%{text}<extra></extra>",
            colorscale="Viridis",
            colorbar=dict(title=unit),
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
            marker=dict(symbol="star", size=16, color="white", line=dict(color="black", width=1)),
        )
    fig.update_layout(
        title=title,
        xaxis_title="bk (rows of K/V per tile)",
        yaxis_title="bq (rows of Q per tile)",
        height=360,
        margin=dict(t=50, b=40),
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
        fig.add_scatter(x=xs, y=ys, mode="lines+markers", name=name)
    _loglog(fig, title, "sequence length", unit, 360)
    return fig


def sram_sweep(points: list[tuple[int, int]], reference: list[float]) -> go.Figure:
    """FA1's HBM traffic against the SRAM size M, with N² d² / M scaled to the first point."""
    kib = [p[0] / 1024 for p in points]
    fig = go.Figure()
    fig.add_scatter(
        x=kib, y=[p[1] / 1e9 for p in points], mode="lines+markers", name="fa1 counted HBM traffic"
    )
    fig.add_scatter(
        x=kib, y=reference, mode="lines", line=dict(dash="dot"), name="∝ N² d² / M (Theorem 2)"
    )
    _loglog(fig, "FA1 traffic vs SRAM per SM", "SRAM per SM (KiB)", "GB", 360)
    return fig


def roofline(points: list[dict], peak_flops: float, peak_bw: float, l2_bw: float) -> go.Figure:
    """Kernels on the roofline: arithmetic intensity (flops per DRAM byte) vs achieved FLOP/s."""
    import numpy as np

    fig = go.Figure()
    xs = np.logspace(-1, 4, 60)
    fig.add_scatter(
        x=xs,
        y=np.minimum(peak_flops, xs * peak_bw) / 1e12,
        mode="lines",
        name="HBM roof",
        line=dict(color="black"),
    )
    fig.add_scatter(
        x=xs,
        y=np.minimum(peak_flops, xs * l2_bw) / 1e12,
        mode="lines",
        name="L2 roof",
        line=dict(color="gray", dash="dot"),
    )
    for algo in dict.fromkeys(p["algo"] for p in points):
        pts = [p for p in points if p["algo"] == algo]
        fig.add_scatter(
            x=[p["intensity"] for p in pts],
            y=[p["flops_per_s"] / 1e12 for p in pts],
            mode="markers+text",
            text=[p["kernel"] for p in pts],
            textposition="top center",
            name=algo,
            marker=dict(size=12),
        )
    _loglog(fig, "Roofline", "arithmetic intensity (flops per DRAM byte)", "achieved TFLOP/s", 420)
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
            text=[c["name"] for c in group],
            hovertemplate="%{text}<br>measured %{x:.4g} µs<br>predicted %{y:.4g} µs<extra></extra>",
        )
    _loglog(fig, "Predicted vs measured time", "measured (µs)", "predicted (µs)", 420)
    return fig


def published_scatter(rows: list[dict]) -> go.Figure:
    """Published timings: predicted vs measured, a colour per implementation, the y = x line
    and a ±40% band; hover names the series and the paper it comes from."""
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
            text=[
                f"{r['series']}, seq {r['problem']['seq_k']:,}, batch {r['problem']['batch']}"
                f"<br>error {100 * r['error']:+.0f}%<br>{r['citation'][:90]}"
                for r in group
            ],
            hovertemplate="%{text}<br>measured %{x:.4g} ms<br>predicted %{y:.4g} ms<extra></extra>",
        )
    _loglog(fig, "Published timings: predicted vs measured", "measured (ms)", "predicted (ms)", 480)
    return fig
