"""The walkthrough's running totals and its headline ratio.

Five small panels, a bar per algorithm each: the paper's HBM accesses (every load and store),
what reached DRAM after the L2, what the L2 served, trips and time. Bars grow with the frames
(scaled to the larger final value), so the gap opens as the algorithms play; the headline
appears on the last frame.
"""

from __future__ import annotations

from ... import fmt
from ..canvas import Canvas
from ..palette import algo_color
from .animation import SideFrames

TOTALS = (
    ("hbm", "HBM accesses (paper)"),
    ("dram", "DRAM bytes (after L2)"),
    ("l2", "L2 hits"),
    ("trips", "trips"),
    ("time", "time"),
)
TITLE_PX, PANEL_PX = 20, 96
X_MAX = 1.9  # a full bar is 1; the rest of the panel holds its label


def value(f: SideFrames, key: str, t: int) -> float:
    """Quantity `key` of one algorithm at frame t."""
    if key == "time":
        return min(float(f.times_s[t]), f.time_s)
    series = {"hbm": f.hbm_bytes, "dram": f.dram_bytes, "l2": f.l2_hit_bytes, "trips": f.trips}
    return float(series[key][t])


def text(key: str, v: float) -> str:
    if key == "time":
        return fmt.seconds(v)
    if key == "trips":
        return f"{fmt.count(v)} trips"
    return fmt.bytes_(v)


def add_totals(c: Canvas, sides: list, top_px: float) -> list[tuple[int, str, int, float]]:
    """Draws the panels from top_px down; returns (trace, quantity, side, scale) per bar."""
    bars = []
    panel_w = c.width_px / len(TOTALS)
    for q, (key, title) in enumerate(TOTALS):
        left = q * panel_w + 4
        c.text(f"<b>{title}</b>", left, top_px + TITLE_PX - 2, anchor="left")
        xa, ya = c.axes(
            left, top_px + TITLE_PX, panel_w - 12, PANEL_PX, [0, X_MAX], [len(sides) - 0.5, -0.5]
        )
        scale = max(value(s.frames, key, len(s.frames.times_s) - 1) for s in sides) or 1.0
        for i, s in enumerate(sides):
            v = value(s.frames, key, 0)
            index = c.add(
                dict(
                    type="scatter",
                    mode="lines+text",
                    x=[0.0, v / scale],
                    y=[i, i],
                    text=["", text(key, v)],
                    textposition="middle right",
                    line=dict(width=14, color=algo_color(s.label)),
                    xaxis=xa,
                    yaxis=ya,
                    showlegend=False,
                    hoverinfo="skip",
                )
            )
            bars.append((index, key, i, scale))
    return bars


def frame_update(sides: list, bar: tuple[int, str, int, float], t: int) -> dict:
    _, key, i, scale = bar
    v = value(sides[i].frames, key, t)
    return dict(type="scatter", x=[0.0, v / scale], text=["", text(key, v)])


def headline(sides: list) -> str:
    """'fa2 against standard: 4.36x less time, 14.2x fewer DRAM bytes, 2.57x fewer trips'."""
    if len(sides) < 2:
        return ""
    a, b = sides[0].frames, sides[1].frames

    def ratio(x, y, word):
        if y <= 0:
            return f"{word}: none for {sides[1].label}"
        r = x / y
        if r >= 1:
            return f"{r:.3g}x {'less' if word == 'time' else 'fewer'} {word}"
        return f"{1 / r:.3g}x more {word}"

    parts = [
        ratio(a.time_s, b.time_s, "time"),
        ratio(a.dram_bytes[-1], b.dram_bytes[-1], "DRAM bytes"),
        ratio(a.trips[-1], b.trips[-1], "trips"),
    ]
    return f"<b>{sides[1].label} against {sides[0].label}: {', '.join(parts)}</b>"
