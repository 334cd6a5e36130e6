"""The walkthrough's layout for a given width: grids inside the width and stacked where it is
narrow, titles apart, both algorithms' tensors the same height, the first screen's budget kept,
and the figure's pieces (legend above, controls below) out of each other's way."""

import pytest

from hbmsim.figures.walkthrough.figure import GRID_TITLES, LEGEND_PX
from hbmsim.figures.walkthrough.layout import MIN_PANEL_PX, layout, title_px

STANDARD_TRAINING = {  # standard attention's forward + backward at 512 tokens, 128-row tiles
    "Q": (4, 1),
    "K": (4, 1),
    "V": (4, 1),
    "S": (4, 4),
    "P": (4, 4),
    "O": (4, 1),
    "dO": (4, 1),
    "dS": (4, 4),
    "dP": (4, 4),
    "dQ": (4, 1),
    "dK": (4, 1),
    "dV": (4, 1),
}
FA2 = {"Q": (16, 1), "K": (16, 1), "V": (16, 1), "O": (16, 1)}  # 64-row tiles, 1,024 tokens
NAMES = ["standard", "fa2"]


def _lines(side) -> list[list]:
    tops: dict[float, list] = {}
    for g in side.grids:
        tops.setdefault(g.top, []).append(g)
    return [sorted(line, key=lambda g: g.left) for _, line in sorted(tops.items())]


@pytest.mark.parametrize("width", [328, 400, 808, 1128])
def test_every_grid_and_title_fits_the_width_and_titles_do_not_touch(width):
    lay = layout([STANDARD_TRAINING, FA2], NAMES, width, 470, GRID_TITLES)
    for side in lay.sides:
        for line in _lines(side):
            spans = []
            for g in line:
                assert g.left >= 0 and g.left + g.width <= width, (width, g)
                half = title_px(GRID_TITLES.get(g.name, g.name)) / 2
                spans.append((g.left + g.width / 2 - half, g.left + g.width / 2 + half))
            for (_, right), (left, _) in zip(spans, spans[1:], strict=False):
                assert right <= left, (width, spans)


def test_a_phone_stacks_the_grids_a_desktop_keeps_them_on_one_line():
    phone = layout([STANDARD_TRAINING, FA2], NAMES, 328, 470, GRID_TITLES)
    desk = layout([STANDARD_TRAINING, FA2], NAMES, 808, 330, GRID_TITLES)
    assert len(_lines(phone.sides[0])) >= 2
    assert len(_lines(desk.sides[0])) == 1
    assert phone.narrow and not desk.narrow


def test_both_algorithms_tensors_span_the_same_height_whatever_their_tiles():
    """Standard's 128-row tiles and fa2's 64-row ones: Q is as tall in both."""
    lay = layout([{"Q": (8, 1), "S": (8, 8)}, FA2], NAMES, 808, 330, GRID_TITLES)
    q = [next(g for g in side.grids if g.name == "Q") for side in lay.sides]
    assert q[0].height == pytest.approx(q[1].height)
    assert lay.sides[0].cell == pytest.approx(2 * lay.sides[1].cell)


@pytest.mark.parametrize("width,budget", [(328, 470), (808, 330)])
def test_the_layout_keeps_its_height_budget_with_the_largest_band_that_does(width, budget):
    lay = layout([STANDARD_TRAINING, FA2], NAMES, width, budget, GRID_TITLES)
    assert lay.height <= budget
    taller = layout([STANDARD_TRAINING, FA2], NAMES, width, budget + 200, GRID_TITLES)
    assert taller.band > lay.band  # the budget, not anything else, held the band back


def test_totals_panels_wrap_where_narrow_and_keep_their_width():
    phone = layout([STANDARD_TRAINING, FA2], NAMES, 328, 470, GRID_TITLES).totals
    desk = layout([STANDARD_TRAINING, FA2], NAMES, 808, 330, GRID_TITLES).totals
    assert desk.per_row == 5 and phone.per_row < 5
    assert phone.panel_px >= MIN_PANEL_PX and desk.panel_px >= MIN_PANEL_PX


def test_a_narrow_figure_leaves_its_legend_room_for_three_lines():
    """Five tile states in 12 px type take three lines of two at a phone's width: the top
    margin holds them (a legend taller than its margin is cut off at the top)."""
    assert LEGEND_PX[True] >= 3 * 19 and LEGEND_PX[False] >= 19
