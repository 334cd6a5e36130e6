"""The walkthrough's figure: two algorithms on one simulated-time axis, one play control.

Each frame is one moment of simulated time, the same for both algorithms, so the faster one
visibly finishes first while the other is still running. Per algorithm: the kernel running,
the tile grids (S and P apart), the SRAM held on SM 0 against the SM's own; below, running
totals (totals.py) with the algorithms named beside their bars. The figure is built for the
width the page has (layout.py): from a phone's to a wide desktop's, within a height that
keeps it on the first screen; the tile states' legend sits above, the play control and the
clock's slider below, so neither covers the other.

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
from ...problem.attention import Problem
from ..canvas import Canvas
from ..palette import algo_color
from . import totals as walktotals
from .animation import SQUARE_GRIDS, STATE_COLORS, STATES, SideFrames
from .layout import NARROW_PX, Layout, layout

WIDTH_PX = 820  # the page's width when it has not said (a 1280-pixel window, sidebar open)
MAX_HEIGHT_PX = {False: 320, True: 470}  # the plot area's budget: wide, narrow (a phone)
MARGIN_X = 6
LEGEND_PX = {False: 28, True: 70}  # the tile states' legend above the plot: one line, three
CONTROLS_PX = 72  # the play control and the slider below it
GRID_TITLES = {"S": "S = QKᵀ", "P": "P = softmax(S)"}
FRAME_MS = 80


EDGE_COLOR = "#b2182b"  # the mask's edges on the score grids


@dataclass(frozen=True)
class Side:
    label: str  # the algorithm's name, also its colour's key
    frames: SideFrames
    problem: Problem | None = None  # the animated problem: its mask's edges are drawn


def mask_edges(p: Problem, row_block: int, col_block: int) -> list[tuple[str, list, list]]:
    """The edges of what a query row sees on a (query rows x key columns) grid of display
    tiles `row_block` x `col_block` tokens: (name, x, y) per edge in the grid's tile
    coordinates (tile (r, c) spans r - 0.5 to r + 0.5). Row q sees keys first_col(q) to
    last_col(q), each an offset of the diagonal (bottom-right aligned) until the grid's side
    cuts it: the right edge (causal, or a window's right side) runs one key past the last
    column, the left edge (a window's left side) at the first. Lines leaving the grid are cut
    by its axes. None without a mask."""
    edges = []
    off = p.causal_offset
    rows = [0, p.seq_q]

    def line(name: str, at_row0: int) -> None:
        x = [(at_row0 + q) / col_block - 0.5 for q in rows]
        edges.append((name, x, [q / row_block - 0.5 for q in rows]))

    if p.right_reach is not None:
        line("causal edge" if p.causal else "window edge", off + p.right_reach + 1)
    if p.left_reach is not None:
        line("window edge", off - p.left_reach)
    return edges


@dataclass(frozen=True)
class WalkInfo:
    frames: int
    frame_s: float  # simulated time between frames
    end_s: float  # the slower algorithm's end


def frame_times(end_s: float, max_frames: int = 120) -> np.ndarray:
    """The shared clock: evenly spaced moments from 0 to the slower algorithm's end."""
    return np.linspace(0.0, end_s, max(2, max_frames))


def side_label(label: str, f: SideFrames, t: int, narrow: bool = False) -> str:
    """'fa2 · t = 8 µs · kernel 1 of 1: fa2_fwd · SRAM on SM 0: 58 kB of 233 kB' at frame t
    (on two lines when `narrow`)."""
    k = f.kernel[t]
    head = f"<b>{label}</b> · t = {fmt.seconds(float(f.times_s[t]))}"
    if k == "done":
        return f"{head} · <b>done</b> at {fmt.seconds(f.time_s)}"
    if not k:
        return f"{head} · launching"
    n = f.kernels.index(k) + 1
    rest = (
        f"kernel {n} of {len(f.kernels)}: <b>{k}</b> · SRAM on SM 0: "
        f"{fmt.bytes_(f.sram_sm0_bytes[t])} of {fmt.bytes_(f.sram_per_sm_bytes)}"
    )
    return f"{head}<br>{rest}" if narrow else f"{head} · {rest}"


def _colorscale() -> list:
    """STATES indices to their colours, as steps."""
    n, out = len(STATE_COLORS), []
    for k, c in enumerate(STATE_COLORS):
        out += [[k / n, c], [(k + 1) / n, c]]
    return out


def _add_side(c: Canvas, s: Side, box, cell: float, narrow: bool) -> tuple[int, list]:
    """The label and the grids of one algorithm where the layout put them; returns the
    label's trace and (trace, states) per grid."""
    f = s.frames
    label = c.label(
        side_label(s.label, f, 0, narrow),
        0,
        box.top,
        c.width_px,
        box.label_px,
        size=13 if narrow else 15,
        color=algo_color(s.label),
    )
    grids = []
    for g in box.grids:
        rows, cols = f.grids.shapes[g.name]
        xa, ya = c.axes(g.left, g.top, g.width, g.height, [-0.5, cols - 0.5], [rows - 0.5, -0.5])
        c.text(GRID_TITLES.get(g.name, g.name), g.left + g.width / 2, g.top - 2)
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
                    color=f.states[g.name][0].ravel().tolist(),
                    colorscale=_colorscale(),
                    cmin=-0.5,
                    cmax=len(STATES) - 0.5,
                    line=dict(width=0),
                ),
                xaxis=xa,
                yaxis=ya,
                showlegend=False,
                hovertemplate=f"{s.label}: {g.name} tile (%{{y}}, %{{x}})<extra></extra>",
            )
        )
        grids.append((index, f.states[g.name]))
        if s.problem is not None and g.name in SQUARE_GRIDS:
            for name, x, y in mask_edges(s.problem, f.grids.row_block, f.grids.col_block):
                c.add(
                    dict(
                        type="scatter",
                        mode="lines",
                        x=x,
                        y=y,
                        line=dict(color=EDGE_COLOR, width=1.5, dash="dash"),
                        xaxis=xa,
                        yaxis=ya,
                        name=name,
                        showlegend=False,
                        hoverinfo="skip",
                    )
                )
    return label, grids


def figure_layout(sides: list[Side], width_px: float = WIDTH_PX) -> Layout:
    """Where `sides` go in a figure `width_px` wide (see layout.py)."""
    width = width_px - 2 * MARGIN_X
    narrow = width < NARROW_PX
    return layout(
        [s.frames.grids.shapes for s in sides],
        [s.label for s in sides],
        width,
        MAX_HEIGHT_PX[narrow],
        GRID_TITLES,
        len(walktotals.TOTALS),
    )


def walk_figure(
    sides: list[Side], times_s: np.ndarray, width_px: float = WIDTH_PX
) -> tuple[dict, WalkInfo]:
    """One figure, one slider and one play button for every side, on the clock `times_s`,
    `width_px` wide."""
    n_f = len(times_s)
    lay = figure_layout(sides, width_px)
    margin = dict(
        l=MARGIN_X, r=MARGIN_X, t=LEGEND_PX[lay.narrow], b=CONTROLS_PX, pad=0, autoexpand=False
    )
    c = Canvas(
        lay.width,
        lay.height,
        dict(
            width=int(width_px),
            height=int(lay.height + margin["t"] + margin["b"]),
            autosize=False,
            margin=margin,
            plot_bgcolor="white",
            paper_bgcolor="white",
            showlegend=True,
            legend=dict(
                orientation="h",
                x=0.0,
                y=1.0,
                xanchor="left",
                yanchor="bottom",
                font=dict(size=12),
                itemwidth=30,
                tracegroupgap=0,
            ),
        ),
    )
    labels, grids = [], []
    for s, box in zip(sides, lay.sides, strict=True):
        label, side_grids = _add_side(c, s, box, box.cell, lay.narrow)
        labels.append(label)
        grids += side_grids
    bars = walktotals.add_totals(c, sides, lay.totals)
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
    animated = [i for i, _ in grids] + labels + [b[0] for b in bars]
    frames = []
    for t in range(n_f):
        data = [dict(type="scatter", marker=dict(color=st[t].ravel().tolist())) for _, st in grids]
        data += [
            dict(type="scatter", text=[side_label(s.label, s.frames, t, lay.narrow)]) for s in sides
        ]
        data += [walktotals.frame_update(sides, b, t) for b in bars]
        frames.append(dict(name=str(t), traces=animated, data=data))
    c.layout.update(_controls(times_s, lay.narrow))
    end = float(times_s[-1])
    info = WalkInfo(n_f, end / (n_f - 1) if n_f > 1 else 0.0, end)
    return {"data": c.data, "layout": c.layout, "frames": frames}, info


def _controls(times_s: np.ndarray, narrow: bool) -> dict:
    """One play/pause pair and one slider labelled in simulated time (the shared clock), both
    under the plot, the buttons left of the slider: nothing covers the legend above."""
    play = dict(
        frame=dict(duration=FRAME_MS, redraw=False),
        fromcurrent=True,
        mode="immediate",
        transition=dict(duration=0),
    )
    still = dict(
        mode="immediate", frame=dict(duration=0, redraw=False), transition=dict(duration=0)
    )
    buttons_share = 0.36 if narrow else 0.2
    return dict(
        updatemenus=[
            dict(
                type="buttons",
                direction="left",
                x=0.0,
                xanchor="left",
                y=0.0,
                yanchor="top",
                pad=dict(t=36, r=0),
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
                x=buttons_share,
                y=0.0,
                yanchor="top",
                len=1.0 - buttons_share,
                pad=dict(t=18, b=0),
                currentvalue=dict(prefix="simulated time ", font=dict(size=13)),
                font=dict(size=1, color="rgba(0,0,0,0)"),  # 120 step labels would overlap
                ticklen=3,
                minorticklen=0,
                steps=[
                    dict(label=fmt.seconds(float(ts)), method="animate", args=[[str(t)], still])
                    for t, ts in enumerate(times_s.tolist())
                ],
            )
        ],
    )
