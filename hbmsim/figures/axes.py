"""Axes shared by the charts: log-scale ticks with readable labels, log-log layouts."""

from __future__ import annotations

import math

import plotly.graph_objects as go


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


def loglog(
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
