"""The roofline chart: each kernel at its arithmetic intensity and achieved FLOP/s.

Labels are placed so they do not overlap: kernels of one algorithm often sit on top of each
other (qk and pv; a backward pass's six kernels), so each label gets the first of several
offsets, with a leader line, whose box is clear of the labels and points already placed.
"""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go

from .. import fmt
from .axes import log_ticks, unit_for
from .palette import algo_color

WIDTH_PX, HEIGHT_PX = 1000, 330  # the plot area the placement assumes (a wide page)
OFFSETS_PX = [
    (dx, dy)
    for r in (28, 52, 80)
    for dx, dy in ((0, -r), (0, r), (r, -r // 2), (-r, -r // 2), (r, r // 2), (-r, r // 2))
]


def ridge(peak_flops: float, peak_bw: float) -> float:
    """Flops per byte where the HBM roof meets the compute roof: left of it, memory-bound."""
    return peak_flops / peak_bw


def _place(points_px: list[tuple[float, float]], labels: list[str]) -> list[tuple[int, int]]:
    boxes: list[tuple[float, float, float, float]] = []
    marks = [(x - 7, y - 7, x + 7, y + 7) for x, y in points_px]

    def clear(b):
        return all(b[2] < o[0] or b[0] > o[2] or b[3] < o[1] or b[1] > o[3] for o in boxes + marks)

    out = []
    for (x, y), text in zip(points_px, labels, strict=True):
        w, h = 7.0 * len(text) + 6, 16.0
        choice = OFFSETS_PX[0]
        for dx, dy in OFFSETS_PX:
            cx, cy = x + dx, y + dy
            box = (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)
            if clear(box):
                choice = (dx, dy)
                break
        cx, cy = x + choice[0], y + choice[1]
        boxes.append((cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2))
        out.append(choice)
    return out


def roofline(points: list[dict], peak_flops: float, peak_bw: float, l2_bw: float) -> go.Figure:
    """Kernels on the roofline: arithmetic intensity (flops per DRAM byte) vs achieved FLOP/s,
    under the HBM and L2 roofs, with the ridge point marked."""

    pts = [  # a kernel with no DRAM traffic has no intensity (None) and no point
        p
        for p in points
        if p["intensity"] and math.isfinite(p["intensity"]) and p["flops_per_s"] > 0
    ]
    xs_all = [p["intensity"] for p in pts] + [ridge(peak_flops, peak_bw)]
    x_lo, x_hi = min([0.1] + [x / 3 for x in xs_all]), max([1e4] + [x * 3 for x in xs_all])
    ys_all = [p["flops_per_s"] / 1e12 for p in pts] + [peak_flops / 1e12]
    y_lo, y_hi = min(ys_all) / 4, peak_flops / 1e12 * 3
    fig = go.Figure()
    _roofs(fig, (x_lo, x_hi), peak_flops, peak_bw, l2_bw)

    def to_px(x, y):
        fx = (math.log10(x) - math.log10(x_lo)) / (math.log10(x_hi) - math.log10(x_lo))
        fy = (math.log10(y) - math.log10(y_lo)) / (math.log10(y_hi) - math.log10(y_lo))
        return fx * WIDTH_PX, (1 - fy) * HEIGHT_PX

    offsets = _place(
        [to_px(p["intensity"], p["flops_per_s"] / 1e12) for p in pts], [p["kernel"] for p in pts]
    )
    for algo in dict.fromkeys(p["algo"] for p in pts):
        group = [p for p in pts if p["algo"] == algo]
        fig.add_scatter(
            x=[p["intensity"] for p in group],
            y=[p["flops_per_s"] / 1e12 for p in group],
            mode="markers",
            name=algo,
            text=[p["kernel"] for p in group],
            customdata=[f"time {fmt.seconds(p.get('time_s') or 0)}" for p in group],
            hovertemplate=f"{algo}: %{{text}}<br>%{{customdata}}, %{{x:.3g}} flops per DRAM "
            "byte, %{y:.3g} TFLOP/s<extra></extra>",
            marker=dict(
                size=11,
                color=algo_color(algo),
                symbol="circle-open" if "counted" in algo else "circle",
                line=dict(width=2),
            ),
        )
    _labels(fig, pts, offsets)
    fig.update_layout(
        title="Roofline",
        height=HEIGHT_PX + 110,
        margin=dict(t=50, b=50),
        xaxis=dict(
            type="log",
            title="arithmetic intensity (flops per DRAM byte)",
            range=[math.log10(x_lo), math.log10(x_hi)],
            **log_ticks([x_lo, x_hi]),
        ),
        yaxis=dict(
            type="log",
            title="achieved TFLOP/s",
            range=[math.log10(y_lo), math.log10(y_hi)],
            **log_ticks([y_lo, y_hi]),
        ),
    )
    return fig


def _roofs(fig: go.Figure, x_range: tuple[float, float], peak_flops, peak_bw, l2_bw) -> None:
    """The HBM and L2 roofs over `x_range` (flops per byte) and the HBM ridge marked."""
    x_lo, x_hi = x_range
    xs = np.logspace(math.log10(x_lo), math.log10(x_hi), 80)
    for name, bw, style in (("HBM roof", peak_bw, "solid"), ("L2 roof", l2_bw, "dot")):
        fig.add_scatter(
            x=xs,
            y=np.minimum(peak_flops, xs * bw) / 1e12,
            mode="lines",
            name=name,
            line=dict(color="black" if style == "solid" else "gray", dash=style),
            hoverinfo="skip",
        )
    r = ridge(peak_flops, peak_bw)
    fig.add_vline(x=r, line=dict(color="gray", dash="dash", width=1))
    fig.add_annotation(  # annotations on a log axis take log10 of the value
        x=math.log10(r),
        y=0.02,
        yref="paper",
        text=f"ridge {r:,.0f} flops/byte: memory-bound to the left",
        showarrow=False,
        xanchor="left",
        font=dict(color="gray"),
    )


def _labels(fig: go.Figure, pts: list[dict], offsets) -> None:
    """Each kernel's name beside its point, moved by its offset (in pixels) off the others."""
    for p, (dx, dy) in zip(pts, offsets, strict=True):
        fig.add_annotation(
            x=math.log10(p["intensity"]),
            y=math.log10(p["flops_per_s"] / 1e12),
            text=p["kernel"],
            ax=dx,
            ay=dy,
            showarrow=True,
            arrowhead=0,
            arrowwidth=1,
            arrowcolor=algo_color(p["algo"]),
            font=dict(size=12, color=algo_color(p["algo"])),
            bgcolor="rgba(255,255,255,0.8)",
        )


def roofline_table(points: list[dict]) -> list[dict]:
    """The roofline's points as a table a person reads: headers in words with their units
    (the time's chosen by its size: µs, ms or s), numbers as floats (so counts past 64-bit
    integers fit a dataframe column too)."""
    unit, factor = unit_for("time", [p["time_s"] for p in points])
    return [
        {
            "algorithm": p["algo"],
            "kernel": p["kernel"],
            "flops": float(p["flops"]),
            "DRAM bytes": float(p["dram_bytes"]),
            f"time ({unit})": p["time_s"] * factor,
            "flops per DRAM byte": None if p["intensity"] is None else float(p["intensity"]),
            "achieved TFLOP/s": p["flops_per_s"] / 1e12,
        }
        for p in points
    ]
