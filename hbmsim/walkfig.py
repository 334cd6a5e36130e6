"""The walkthrough's figure: two algorithms on one simulated-time axis, one play control.

Each frame is one moment of simulated time, the same for both algorithms, so the faster one
visibly finishes first while the other is still running. Per algorithm: the kernel running,
the tile grids (S and P apart), the SRAM held on SM 0; below, running totals (DRAM bytes, L2
hits, trips, time) that end on the headline ratio.

Why scatter squares and not heatmaps: Plotly redraws a heatmap as a fresh image each animation
frame, and in the browser the image is missing between frames, so the tiles blinked out while
playing. Scatter markers animate in place (`redraw: False`), colour by colour.

Returned as a figure dict (Plotly and st.plotly_chart take it as they take a Figure): building
hundreds of validated frame objects costs over a second.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import fmt
from .animation import STATE_COLORS, STATES, SideFrames
from .palette import algo_color

WIDTH_PX = 1150  # drawn at this width: tile squares are sized in pixels
MARGIN = dict(l=10, r=10, t=60, b=80)
LABEL_PX, TITLE_PX, GAP_PX, SPACER_PX = 30, 20, 26, 14
TOTALS_PX, HEADLINE_PX = 96, 34
MAX_BAND_PX = 300  # the tallest grid band
TOTALS = (
    ("hbm", "HBM accesses (paper)"),
    ("dram", "DRAM bytes (after L2)"),
    ("l2", "L2 hits"),
    ("trips", "trips"),
    ("time", "time"),
)
GRID_TITLES = {"S": "S = QKᵀ", "P": "P = softmax(S)"}


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


def side_label(label: str, f: SideFrames, t: float) -> str:
    """'fa2 · t = 8 µs · kernel 1 of 1: fa2_fwd · SRAM on SM 0: 58 kB'."""
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


def headline(sides: list[Side]) -> str:
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


def walk_figure(
    sides: list[Side], times_s: np.ndarray, frame_ms: int = 80
) -> tuple[dict, WalkInfo]:
    """One figure, one slider and one play button for every side, on the clock `times_s`."""
    n_f = len(times_s)
    max_rows = max(r for s in sides for r, _ in s.frames.grids.shapes.values())
    width = WIDTH_PX - MARGIN["l"] - MARGIN["r"]
    cell = MAX_BAND_PX / max_rows
    for s in sides:
        shapes = s.frames.grids.shapes
        cols = sum(c for _, c in shapes.values())
        cell = min(cell, (width - GAP_PX * (len(shapes) - 1)) / cols)
    cell = max(2.0, min(cell, 36.0))
    bands = [cell * max(r for r, _ in s.frames.grids.shapes.values()) for s in sides]
    plot_h = sum(LABEL_PX + TITLE_PX + b + SPACER_PX for b in bands)
    plot_h += TITLE_PX + TOTALS_PX + HEADLINE_PX
    height = int(plot_h + MARGIN["t"] + MARGIN["b"])

    def py(px):  # pixels from the top of the plot area -> paper fraction
        return 1.0 - px / plot_h

    layout: dict = {
        "width": WIDTH_PX,
        "height": height,
        "autosize": False,
        "margin": MARGIN,
        "plot_bgcolor": "white",
        "paper_bgcolor": "white",
        "showlegend": True,
        "legend": dict(orientation="h", x=0.0, y=1.0, yanchor="bottom", font=dict(size=12)),
        "annotations": [],
    }
    data: list[dict] = []
    axis_n = [0]

    def axes(x_dom, y_dom, x_range, y_range):
        axis_n[0] += 1
        n = axis_n[0]
        sfx = "" if n == 1 else str(n)
        common = dict(showgrid=False, zeroline=False, showticklabels=False, fixedrange=True)
        layout[f"xaxis{sfx}"] = dict(common, domain=x_dom, range=x_range, anchor=f"y{sfx}")
        layout[f"yaxis{sfx}"] = dict(common, domain=y_dom, range=y_range, anchor=f"x{sfx}")
        return f"x{sfx}", f"y{sfx}"

    grid_traces, label_traces, total_traces = [], [], []
    colorscale = []
    for k, c in enumerate(STATE_COLORS):
        colorscale += [[k / len(STATE_COLORS), c], [(k + 1) / len(STATE_COLORS), c]]
    top = 0.0
    for s, band in zip(sides, bands, strict=True):
        f = s.frames
        xa, ya = axes([0, 1], [py(top + LABEL_PX), py(top)], [0, 1], [0, 1])
        label_traces.append(len(data))
        data.append(
            dict(
                type="scatter",
                mode="text",
                x=[0.0],
                y=[0.5],
                text=[side_label(s.label, f, 0)],
                textposition="middle right",
                textfont=dict(size=15, color=algo_color(s.label)),
                xaxis=xa,
                yaxis=ya,
                showlegend=False,
                hoverinfo="skip",
            )
        )
        x_px = 0.0
        g_top = top + LABEL_PX + TITLE_PX
        for name, (rows, cols) in f.grids.shapes.items():
            w, h = cols * cell, rows * cell
            xa, ya = axes(
                [x_px / width, (x_px + w) / width],
                [py(g_top + h), py(g_top)],
                [-0.5, cols - 0.5],
                [rows - 0.5, -0.5],
            )
            layout["annotations"].append(
                dict(
                    text=GRID_TITLES.get(name, name),
                    x=(x_px + w / 2) / width,
                    y=py(g_top - 2),
                    xref="paper",
                    yref="paper",
                    xanchor="center",
                    yanchor="bottom",
                    showarrow=False,
                    font=dict(size=12),
                )
            )
            rr, cc = np.divmod(np.arange(rows * cols), cols)
            grid_traces.append((len(data), f.states[name]))
            data.append(
                dict(
                    type="scatter",
                    mode="markers",
                    x=cc.tolist(),
                    y=rr.tolist(),
                    marker=dict(
                        symbol="square",
                        size=max(1.0, cell - 1.0),
                        color=f.states[name][0].ravel().tolist(),
                        colorscale=colorscale,
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
            x_px += w + GAP_PX
        top += LABEL_PX + TITLE_PX + band + SPACER_PX

    # running totals: one small panel per quantity, a bar per algorithm
    finals = {
        "hbm": [s.frames.hbm_bytes[-1] for s in sides],
        "dram": [s.frames.dram_bytes[-1] for s in sides],
        "l2": [s.frames.l2_hit_bytes[-1] for s in sides],
        "trips": [s.frames.trips[-1] for s in sides],
        "time": [s.frames.time_s for s in sides],
    }
    panel_w = width / len(TOTALS)
    t_top = top + TITLE_PX
    for q, (key, title) in enumerate(TOTALS):
        xa, ya = axes(
            [(q * panel_w + 4) / width, ((q + 1) * panel_w - 8) / width],
            [py(t_top + TOTALS_PX), py(t_top)],
            [0, 1.9],
            [len(sides) - 0.5, -0.5],
        )
        layout["annotations"].append(
            dict(
                text=f"<b>{title}</b>",
                x=(q * panel_w + 4) / width,
                y=py(t_top - 2),
                xref="paper",
                yref="paper",
                xanchor="left",
                yanchor="bottom",
                showarrow=False,
            )
        )
        scale = max(finals[key]) or 1.0
        for i, s in enumerate(sides):
            total_traces.append((len(data), key, i, scale))
            x, text = _total_point(s.frames, key, 0, scale)
            data.append(
                dict(
                    type="scatter",
                    mode="lines+text",
                    x=[0.0, x],
                    y=[i, i],
                    text=["", text],
                    textposition="middle right",
                    line=dict(width=14, color=algo_color(s.label)),
                    xaxis=xa,
                    yaxis=ya,
                    showlegend=False,
                    hoverinfo="skip",
                )
            )
    xa, ya = axes([0, 1], [py(plot_h), py(plot_h - HEADLINE_PX)], [0, 1], [0, 1])
    head_trace = len(data)
    final_head = headline(sides)
    data.append(
        dict(
            type="scatter",
            mode="text",
            x=[0.0],
            y=[0.5],
            text=[final_head if n_f == 1 else ""],
            textposition="middle right",
            textfont=dict(size=15),
            xaxis=xa,
            yaxis=ya,
            showlegend=False,
            hoverinfo="skip",
        )
    )
    for state, color in zip(STATES, STATE_COLORS, strict=True):  # the legend of tile states
        data.append(
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

    animated = [i for i, _ in grid_traces] + label_traces + [i for i, *_ in total_traces]
    animated.append(head_trace)
    frames = []
    for t in range(n_f):
        fd = [
            dict(type="scatter", marker=dict(color=st[t].ravel().tolist())) for _, st in grid_traces
        ]
        fd += [dict(type="scatter", text=[side_label(s.label, s.frames, t)]) for s in sides]
        for _, key, i, scale in total_traces:
            x, text = _total_point(sides[i].frames, key, t, scale)
            fd.append(dict(type="scatter", x=[0.0, x], text=["", text]))
        fd.append(dict(type="scatter", text=[final_head if t == n_f - 1 else ""]))
        frames.append(dict(name=str(t), traces=animated, data=fd))

    play = dict(
        frame=dict(duration=frame_ms, redraw=False),
        fromcurrent=True,
        mode="immediate",
        transition=dict(duration=0),
    )
    still = dict(
        mode="immediate", frame=dict(duration=0, redraw=False), transition=dict(duration=0)
    )
    layout["updatemenus"] = [
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
    ]
    layout["sliders"] = [
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
    ]
    end = float(times_s[-1])
    info = WalkInfo(n_f, end / (n_f - 1) if n_f > 1 else 0.0, end)
    return {"data": data, "layout": layout, "frames": frames}, info


def _total_point(f: SideFrames, key: str, t: int, scale: float) -> tuple[float, str]:
    """The bar's end (as a fraction of the larger final) and its label at frame t."""
    now = float(f.times_s[t])
    value = {
        "hbm": f.hbm_bytes[t],
        "dram": f.dram_bytes[t],
        "l2": f.l2_hit_bytes[t],
        "trips": f.trips[t],
        "time": min(now, f.time_s),
    }[key]
    text = {
        "hbm": fmt.bytes_,
        "dram": fmt.bytes_,
        "l2": fmt.bytes_,
        "trips": lambda v: f"{fmt.count(v)} trips",
        "time": fmt.seconds,
    }[key](float(value))
    return float(value) / scale, text
