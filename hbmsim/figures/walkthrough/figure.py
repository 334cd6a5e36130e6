"""The walkthrough's figure: two algorithms on one simulated-time axis, one play control.

Each frame is one moment of simulated time, the same for both algorithms, so the faster one
visibly finishes first while the other is still running. Per algorithm: the kernel running,
the tile grids (S and P apart), the SRAM held on SM 0; below, running totals (totals.py)
that end on the headline ratio.

Why scatter squares and not heatmaps: Plotly redraws a heatmap as a fresh image each animation
frame, and in the browser the image is missing between frames, so the tiles blinked out while
playing. Scatter markers animate in place (`redraw: False`), colour by colour.

Returned as a figure dict (Plotly and st.plotly_chart take it as they take a Figure): building
hundreds of validated frame objects costs over a second.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import fmt
from ..canvas import Canvas
from ..palette import algo_color
from . import totals as walktotals
from .animation import STATE_COLORS, STATES, SideFrames
from .totals import headline  # noqa: F401 - the page shows it too

WIDTH_PX = 1150  # drawn at this width: tile squares are sized in pixels
MARGIN = dict(l=10, r=10, t=60, b=80)
LABEL_PX, TITLE_PX, GAP_PX, SPACER_PX, HEADLINE_PX = 30, 20, 26, 14, 34
MAX_BAND_PX = 300  # the tallest grid band
MAX_CELL_PX = 36.0
GRID_TITLES = {"S": "S = QKᵀ", "P": "P = softmax(S)"}
FRAME_MS = 80


@dataclass(frozen=True)
class Side:
    label: str  # the algorithm's name, also its colour's key
    frames: SideFrames


@dataclass(frozen=True)
class WalkInfo:
    frames: int
    frame_s: float  # simulated time between frames
    end_s: float  # the slower algorithm's end


def frame_times(end_s: float, max_frames: int = 120) -> np.ndarray:
    """The shared clock: evenly spaced moments from 0 to the slower algorithm's end."""
    return np.linspace(0.0, end_s, max(2, max_frames))


def side_label(label: str, f: SideFrames, t: int) -> str:
    """'fa2 · t = 8 µs · kernel 1 of 1: fa2_fwd · SRAM on SM 0: 58 kB' at frame t."""
    k = f.kernel[t]
    head = f"<b>{label}</b> · t = {fmt.seconds(float(f.times_s[t]))}"
    if k == "done":
        return f"{head} · <b>done</b> at {fmt.seconds(f.time_s)}"
    if not k:
        return f"{head} · launching"
    n = f.kernels.index(k) + 1
    return (
        f"{head} · kernel {n} of {len(f.kernels)}: <b>{k}</b>"
        f" · SRAM on SM 0: {fmt.bytes_(f.sram_sm0_bytes[t])}"
    )


def _rows(side: Side) -> int:
    return max(r for r, _ in side.frames.grids.shapes.values())


def _cell_px(sides: list[Side], width: float) -> float:
    """One tile's side: the tallest grid fits MAX_BAND_PX, each side's grids fit the width."""
    cell = MAX_BAND_PX / max(_rows(s) for s in sides)
    for s in sides:
        shapes = s.frames.grids.shapes
        cols = sum(c for _, c in shapes.values())
        cell = min(cell, (width - GAP_PX * (len(shapes) - 1)) / cols)
    return max(2.0, min(cell, MAX_CELL_PX))


def _colorscale() -> list:
    """STATES indices to their colours, as steps."""
    n, out = len(STATE_COLORS), []
    for k, c in enumerate(STATE_COLORS):
        out += [[k / n, c], [(k + 1) / n, c]]
    return out


def _add_side(c: Canvas, s: Side, top: float, cell: float) -> tuple[int, list]:
    """The label and the grids of one algorithm from `top` down; returns the label's trace and
    (trace, states) per grid."""
    f = s.frames
    label = c.label(
        side_label(s.label, f, 0), 0, top, c.width_px, LABEL_PX, size=15, color=algo_color(s.label)
    )
    grids, left, g_top = [], 0.0, top + LABEL_PX + TITLE_PX
    for name, (rows, cols) in f.grids.shapes.items():
        w, h = cols * cell, rows * cell
        xa, ya = c.axes(left, g_top, w, h, [-0.5, cols - 0.5], [rows - 0.5, -0.5])
        c.text(GRID_TITLES.get(name, name), left + w / 2, g_top - 2)
        rr, cc = np.divmod(np.arange(rows * cols), cols)
        index = c.add(
            dict(
                type="scatter",
                mode="markers",
                x=cc.tolist(),
                y=rr.tolist(),
                marker=dict(
                    symbol="square",
                    size=max(1.0, cell - 1.0),
                    color=f.states[name][0].ravel().tolist(),
                    colorscale=_colorscale(),
                    cmin=-0.5,
                    cmax=len(STATES) - 0.5,
                    line=dict(width=0),
                ),
                xaxis=xa,
                yaxis=ya,
                showlegend=False,
                hovertemplate=f"{s.label}: {name} tile (%{{y}}, %{{x}})<extra></extra>",
            )
        )
        grids.append((index, f.states[name]))
        left += w + GAP_PX
    return label, grids


def walk_figure(sides: list[Side], times_s: np.ndarray) -> tuple[dict, WalkInfo]:
    """One figure, one slider and one play button for every side, on the clock `times_s`."""
    n_f = len(times_s)
    width = WIDTH_PX - MARGIN["l"] - MARGIN["r"]
    cell = _cell_px(sides, width)
    bands = [LABEL_PX + TITLE_PX + cell * _rows(s) + SPACER_PX for s in sides]
    totals_px = walktotals.TITLE_PX + walktotals.PANEL_PX
    plot_h = sum(bands) + totals_px + HEADLINE_PX
    c = Canvas(
        width,
        plot_h,
        dict(
            width=WIDTH_PX,
            height=int(plot_h + MARGIN["t"] + MARGIN["b"]),
            autosize=False,
            margin=MARGIN,
            plot_bgcolor="white",
            paper_bgcolor="white",
            showlegend=True,
            legend=dict(orientation="h", x=0.0, y=1.0, yanchor="bottom", font=dict(size=12)),
        ),
    )
    labels, grids, top = [], [], 0.0
    for s, band in zip(sides, bands, strict=True):
        label, side_grids = _add_side(c, s, top, cell)
        labels.append(label)
        grids += side_grids
        top += band
    bars = walktotals.add_totals(c, sides, top)
    final = walktotals.headline(sides)
    head = c.label("", 0, plot_h - HEADLINE_PX, width, HEADLINE_PX, size=15)
    for state, color in zip(STATES, STATE_COLORS, strict=True):  # the legend of tile states
        c.add(
            dict(
                type="scatter",
                x=[None],
                y=[None],
                mode="markers",
                name=state,
                marker=dict(size=12, color=color, symbol="square"),
                xaxis="x",
                yaxis="y",
            )
        )
    animated = [i for i, _ in grids] + labels + [b[0] for b in bars] + [head]
    frames = []
    for t in range(n_f):
        data = [dict(type="scatter", marker=dict(color=st[t].ravel().tolist())) for _, st in grids]
        data += [dict(type="scatter", text=[side_label(s.label, s.frames, t)]) for s in sides]
        data += [walktotals.frame_update(sides, b, t) for b in bars]
        data.append(dict(type="scatter", text=[final if t == n_f - 1 else ""]))
        frames.append(dict(name=str(t), traces=animated, data=data))
    c.layout.update(_controls(times_s))
    end = float(times_s[-1])
    info = WalkInfo(n_f, end / (n_f - 1) if n_f > 1 else 0.0, end)
    return {"data": c.data, "layout": c.layout, "frames": frames}, info


def _controls(times_s: np.ndarray) -> dict:
    """One play/pause pair and one slider labelled in simulated time: the shared clock."""
    play = dict(
        frame=dict(duration=FRAME_MS, redraw=False),
        fromcurrent=True,
        mode="immediate",
        transition=dict(duration=0),
    )
    still = dict(
        mode="immediate", frame=dict(duration=0, redraw=False), transition=dict(duration=0)
    )
    return dict(
        updatemenus=[
            dict(
                type="buttons",
                direction="left",
                x=1.0,
                xanchor="right",
                y=1.0,
                yanchor="bottom",
                showactive=False,
                buttons=[
                    dict(label="▶ play", method="animate", args=[None, play]),
                    dict(label="❚❚ pause", method="animate", args=[[None], still]),
                ],
            )
        ],
        sliders=[
            dict(
                active=0,
                y=0.0,
                yanchor="top",
                len=1.0,
                pad=dict(t=30),
                currentvalue=dict(prefix="simulated time ", font=dict(size=13)),
                font=dict(size=9),
                ticklen=3,
                minorticklen=0,
                steps=[
                    dict(label=fmt.seconds(float(ts)), method="animate", args=[[str(t)], still])
                    for t, ts in enumerate(times_s.tolist())
                ],
            )
        ],
    )
