"""Axes shared by the charts: log-scale ticks with readable labels, log-log layouts, and units
chosen by size (a time axis reads "10 µs ... 1 ms", never "1.2M µs").
"""

from __future__ import annotations

import math
from collections.abc import Callable

import plotly.graph_objects as go

from .. import fmt

TIME_UNITS = (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9))
BYTE_UNITS = (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3), ("B", 1.0))
COUNT_UNITS = (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3), ("", 1.0))


def unit_for(kind: str, values) -> tuple[str, float]:
    """(unit, factor) that shows `values` (in seconds, bytes or a plain count: `kind` "time",
    "bytes" or "count") as numbers below 1,000: the unit of the largest magnitude. A value
    times the factor is in that unit."""
    units = {"time": TIME_UNITS, "bytes": BYTE_UNITS, "count": COUNT_UNITS}[kind]
    finite = [abs(v) for v in values if v is not None and math.isfinite(v) and v != 0]
    top = max(finite, default=0.0)
    for unit, size in units:
        if top >= size:
            return unit, 1.0 / size
    return units[-1][0], 1.0 / units[-1][1]


def metric_kind(metric: str) -> str:
    """A result column's kind of quantity: seconds (`..._s`), bytes (`...bytes...`), else a
    count."""
    if metric.endswith("_s"):
        return "time"
    if "bytes" in metric:
        return "bytes"
    return "count"


FORMATTERS: dict[str, Callable[[float], str]] = {
    "time": fmt.seconds,
    "bytes": fmt.bytes_,
    "count": fmt.count,
}


def log_ticks(values, text: Callable[[float], str] | None = None) -> dict:
    """Tick values and labels for a log axis spanning `values`: decades when the data spans
    two or more, else 1-2-5 steps. Why not Plotly's own: on short ranges it labels the minor
    ticks too ("2 5 2 5"), which reads as noise. `text` writes each label (fmt.seconds puts
    the unit on every tick: "100 µs", "1 ms"); plain numbers without it."""
    vals = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not vals:
        return {}
    lo, hi = min(vals), max(vals)
    k0, k1 = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    steps = (1,) if hi / lo >= 100 else (1, 2, 5)
    ticks = [m * 10.0**k for k in range(k0, k1 + 1) for m in steps]
    ticks = [t for t in ticks if lo / 1.5 <= t <= hi * 1.5] or [lo, hi]
    label = text or _tick_text
    return dict(tickvals=ticks, ticktext=[label(t) for t in ticks], minor=dict(ticks=""))


def _tick_text(v: float) -> str:
    if v >= 1e6 or v < 1e-3:
        return f"{v:.0e}".replace("e+0", "e").replace("e-0", "e-")
    return f"{v:,.0f}" if v >= 1 else f"{v:g}"


def loglog(
    fig: go.Figure,
    title: str,
    x_title: str,
    y_title: str,
    height: int,
    xs=(),
    ys=(),
    x_text: Callable[[float], str] | None = None,
    y_text: Callable[[float], str] | None = None,
) -> None:
    """The layout every log-log chart here shares: major ticks only, labelled in plain numbers
    or by `x_text` / `y_text` (a formatter that writes the unit on each tick)."""
    fig.update_layout(
        title=title,
        xaxis=dict(type="log", title=x_title, **log_ticks(xs, x_text)),
        yaxis=dict(type="log", title=y_title, **log_ticks(ys, y_text)),
        height=height,
        margin=dict(t=50, b=40),
        hoverlabel=dict(namelength=-1),
    )
