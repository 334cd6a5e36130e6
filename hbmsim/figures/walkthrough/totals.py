"""The walkthrough's running totals, and the headline ratios of two whole-problem results.

Five small panels, a bar per algorithm each: the paper's HBM accesses (every load and store),
what reached DRAM after the L2, what the L2 served, trips and time. Bars grow with the frames
(scaled to the larger final value), so the gap opens as the algorithms play; a column on the
left names each bar's algorithm in its colour (the bars' legend). Panels wrap into rows where
the figure is narrow (layout.TotalsBox).
"""

from __future__ import annotations

from dataclasses import dataclass

from ... import fmt
from ...result import Result
from ..canvas import Canvas
from ..palette import algo_color
from .animation import SideFrames
from .layout import BAR_PX, TOTALS_TITLE_PX, TotalsBox

WIDE_PANEL_PX = 150  # a panel narrower than this titles itself in a smaller font

TOTALS = (
    ("hbm", "HBM accesses (paper)"),
    ("dram", "DRAM bytes (after L2)"),
    ("l2", "L2 hits"),
    ("trips", "trips"),
    ("time", "time"),
)
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


def add_totals(c: Canvas, sides: list, box: TotalsBox) -> list[tuple[int, str, int, float]]:
    """Draws the panels where `box` says; returns (trace, quantity, side, scale) per bar."""
    bars = []
    for q, (key, title) in enumerate(TOTALS):
        row, col = divmod(q, box.per_row)
        top = box.top + row * box.row_px
        left = box.name_px + col * box.panel_px
        if col == 0:  # the names of the bars' algorithms, on every row of panels
            for i, s in enumerate(sides):
                c.text(
                    f"<b>{s.label}</b>",
                    0,
                    top + TOTALS_TITLE_PX + (i + 1) * BAR_PX - 3,
                    anchor="left",
                    color=algo_color(s.label),
                    size=12,
                )
        c.text(
            f"<b>{title}</b>",
            left + 4,
            top + TOTALS_TITLE_PX - 2,
            anchor="left",
            size=11 if box.panel_px < WIDE_PANEL_PX else 12,
        )
        xa, ya = c.axes(
            left + 4,
            top + TOTALS_TITLE_PX,
            box.panel_px - 12,
            BAR_PX * len(sides),
            [0, X_MAX],
            [len(sides) - 0.5, -0.5],
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
                    line=dict(width=12, color=algo_color(s.label)),
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


@dataclass(frozen=True)
class Ratio:
    """One headline number: how much `what` the flash algorithm needs against standard's."""

    what: str  # "time", "DRAM bytes", "trips"
    standard: str  # standard's amount, with its unit
    flash: str
    ratio: str  # "4.08x less", "1.3x more", or "none" when the flash side has none

    @property
    def words(self) -> str:
        return f"{self.ratio} {self.what}" if self.ratio != "none" else f"no {self.what}"


def _ratio(what: str, a: float, b: float, less: str) -> str:
    if b <= 0:
        return "none"
    r = a / b
    return f"{r:.3g}x {less}" if r >= 1 else f"{1 / r:.3g}x more"


def headline_ratios(standard: Result, flash: Result) -> list[Ratio]:
    """Time, DRAM bytes and trips of the flash result against standard's: simulated time and
    DRAM bytes after the L2 where the engine ran both, else the roofline time and the counted
    HBM bytes (the `what` says which)."""
    timed = "time_s" in standard.extra and "time_s" in flash.extra
    if timed:
        t_a, t_b = standard.extra["time_s"], flash.extra["time_s"]
        d_a, d_b = (
            r.extra["dram_read_bytes"] + r.extra["dram_write_bytes"] for r in (standard, flash)
        )
        time_what, bytes_what = "time", "DRAM bytes"
    else:
        t_a, t_b = standard.roofline_time_s, flash.roofline_time_s
        d_a, d_b = standard.hbm_bytes, flash.hbm_bytes
        time_what, bytes_what = "roofline time", "HBM bytes (counted)"
    return [
        Ratio(time_what, fmt.seconds(t_a), fmt.seconds(t_b), _ratio(time_what, t_a, t_b, "less")),
        Ratio(bytes_what, fmt.bytes_(d_a), fmt.bytes_(d_b), _ratio(bytes_what, d_a, d_b, "fewer")),
        Ratio(
            "trips",
            fmt.count(standard.trips),
            fmt.count(flash.trips),
            _ratio("trips", standard.trips, flash.trips, "fewer"),
        ),
    ]
