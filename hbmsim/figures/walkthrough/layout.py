"""Where the walkthrough's pieces go for a given width: grids flowing in lines, sized to fit.

Why a layout of its own: the figure is drawn in pixels (tile squares are markers sized in
pixels), so it is built for the width the page gives it, from a phone's 360 pixels to a wide
desktop's 1,100. Each algorithm's grids are placed left to right and wrap to a new line where
the width ends (a phone stacks S and P under Q, K and V). Both algorithms' grids span the same
height, the band, so a tensor is as tall in both whatever their tiles (standard's 128-row
tiles are twice as tall as fa2's 64-row ones); the band is the tallest that keeps the whole
figure within a height budget (the first screen), and the running totals wrap into rows of
panels the same way. Pure arithmetic: tested without a browser.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

NARROW_PX = 600  # below this width: two-line labels, totals in more rows
MAX_CELL_PX = 36.0
MIN_CELL_PX = 2.0
MAX_BAND_PX, MIN_BAND_PX = 300, 24  # the tallest grid's height, searched downward
GAP_PX = 18  # between grids on a line
TITLE_PX = 18  # a grid's title above it
SPACER_PX = 10  # after each algorithm
CHAR_PX = 7.0  # a 12 px title's width per character (titles must not run into each other)
LABEL_PX = {False: 24, True: 40}  # an algorithm's label: one line, or two when narrow
TOTALS_TITLE_PX, BAR_PX = 17, 17  # a totals panel's title, each algorithm's bar
MIN_PANEL_PX = 120  # a totals panel narrower than this cannot hold its bar and label
NAME_CHAR_PX = 8.0  # the totals' name column, per character of the longest name


@dataclass(frozen=True)
class Placed:
    """One grid: its top-left corner and size in pixels, `name` its tensor."""

    name: str
    left: float
    top: float
    width: float
    height: float


@dataclass(frozen=True)
class SideBox:
    top: float  # the label's top
    label_px: float
    cell: float  # one displayed tile's side
    grids: tuple[Placed, ...]
    height: float  # label, grid lines and spacer


@dataclass(frozen=True)
class TotalsBox:
    top: float
    name_px: float  # the column naming each bar's algorithm
    per_row: int  # panels on one row
    panel_px: float  # one panel's width
    row_px: float  # one row of panels' height
    height: float


@dataclass(frozen=True)
class Layout:
    width: float
    narrow: bool
    band: float  # the height every algorithm's tallest grid spans
    sides: tuple[SideBox, ...]
    totals: TotalsBox
    height: float


def title_px(title: str) -> float:
    return CHAR_PX * len(title)


def _flow(shapes: dict, titles: dict, cell: float, width: float) -> tuple[list[Placed], float]:
    """Grids placed in lines from (0, 0); returns them and the lines' total height."""
    placed, line, x, y = [], [], 0.0, 0.0

    def close(line, y):
        tallest = max(h for _, _, _, h in line)
        placed.extend(Placed(n, left, y + TITLE_PX, w, h) for n, left, w, h in line)
        return y + TITLE_PX + tallest

    for name, (rows, cols) in shapes.items():
        w, h = cols * cell, rows * cell
        slot = max(w, title_px(titles.get(name, name)))
        if line and x + slot > width:
            y, line, x = close(line, y), [], 0.0
        line.append((name, x + (slot - w) / 2, w, h))
        x += slot + GAP_PX
    if line:
        y = close(line, y)
    return placed, y


def _totals(names: list[str], quantities: int, width: float, top: float) -> TotalsBox:
    name_px = NAME_CHAR_PX * max(len(n) for n in names) + 8
    per_row = max(1, min(quantities, int((width - name_px) // MIN_PANEL_PX)))
    rows = math.ceil(quantities / per_row)
    row_px = TOTALS_TITLE_PX + BAR_PX * len(names) + 6
    return TotalsBox(top, name_px, per_row, (width - name_px) / per_row, row_px, rows * row_px)


def _build(sides: list[dict], titles: dict, names, quantities, width, band) -> Layout:
    narrow = width < NARROW_PX
    boxes, top = [], 0.0
    for shapes in sides:
        label = LABEL_PX[narrow]
        cell = max(MIN_CELL_PX, min(MAX_CELL_PX, band / max(r for r, _ in shapes.values())))
        grids, lines_px = _flow(shapes, titles, cell, width)
        moved = tuple(Placed(g.name, g.left, top + label + g.top, g.width, g.height) for g in grids)
        height = label + lines_px + SPACER_PX
        boxes.append(SideBox(top, label, cell, moved, height))
        top += height
    totals = _totals(names, quantities, width, top)
    return Layout(width, narrow, band, tuple(boxes), totals, top + totals.height)


def layout(
    sides: list[dict[str, tuple[int, int]]],
    names: list[str],
    width: float,
    max_height: float,
    titles: dict[str, str] | None = None,
    quantities: int = 5,
) -> Layout:
    """The layout of `sides` (each algorithm's grids: name -> (rows, cols) of tiles, in
    order) and their totals (`quantities` panels, a bar per name) in `width` pixels: the
    tallest band, in pixels from MAX_BAND_PX down, whose layout fits `max_height` with every
    grid inside the width; the smallest band when none does."""
    titles = titles or {}
    band = MAX_BAND_PX
    while band > MIN_BAND_PX:
        out = _build(sides, titles, names, quantities, width, band)
        if out.height <= max_height and all(
            g.left + g.width <= width for s in out.sides for g in s.grids
        ):
            return out
        band -= 2
    return _build(sides, titles, names, quantities, width, MIN_BAND_PX)
