"""Figures as a reader sees them: colours that stay with their algorithm, log axes labelled at
major ticks only, roofline labels that do not sit on each other, hover text in words, units
chosen by size, one "best" (the fastest tiles) starred alike on every map."""

import math

import pytest

from hbmsim.figures import axes, roofline, sweeps
from hbmsim.figures.palette import ALGO_COLORS, algo_color


def _rows(algos, seqs=(256, 1024, 4096)):
    return [
        {"algo": a, "seq_k": n, "feasible": True, "hbm_bytes": n * n * (i + 1)}
        for i, a in enumerate(algos)
        for n in seqs
    ]


def _line_colors(fig) -> dict[str, str]:
    return {t.name.split(" ")[0]: t.line.color for t in fig.data}


def test_an_algorithm_keeps_its_colour_when_another_series_is_missing():
    both = _line_colors(sweeps.scaling(_rows(["standard", "fa1", "fa2"]), "hbm_bytes", "t"))
    alone = _line_colors(sweeps.scaling(_rows(["fa2"]), "hbm_bytes", "t"))
    assert alone["fa2"] == both["fa2"]
    assert len(set(both.values())) == 3


def test_textbook_algorithms_have_distinct_colours():
    names = ["standard", "fa1", "fa2", "split-kv"]
    assert len({ALGO_COLORS[n] for n in names}) == len(names)
    assert algo_color("fa2 (counted)") == algo_color("fa2")
    assert algo_color("some-new-impl") == algo_color("some-new-impl")


def test_log_axes_label_only_major_ticks():
    wide = axes.log_ticks([3.0, 40_000.0])  # four decades: decades only
    assert all(math.log10(v).is_integer() for v in wide["tickvals"])
    narrow = axes.log_ticks([30.0, 200.0])  # under a decade and a half: 1-2-5 steps
    assert set(narrow["tickvals"]) <= {20.0, 50.0, 100.0, 200.0, 300.0}
    assert narrow["minor"] == {"ticks": ""}
    fig = sweeps.scaling(_rows(["fa2"]), "hbm_bytes", "t")
    assert list(fig.layout.xaxis.tickvals) == [200.0, 500.0, 1000.0, 2000.0, 5000.0]


def _roofline(points):
    return roofline.roofline(points, 989e12, 3.35e12, 5.5e12)


def test_roofline_labels_of_coincident_kernels_are_placed_apart():
    pts = [
        {"algo": "standard", "kernel": k, "intensity": 50.0, "flops_per_s": 1e13}
        for k in ("qk", "pv", "softmax")
    ]
    fig = _roofline(pts)
    labels = [a for a in fig.layout.annotations if a.text in ("qk", "pv", "softmax")]
    assert len({(a.ax, a.ay) for a in labels}) == 3
    assert any("memory-bound to the left" in a.text for a in fig.layout.annotations)


def test_roofline_table_reads_in_words_and_units():
    pts = [
        {
            "algo": "fa2",
            "kernel": "fa2_fwd",
            "flops": 137_000_000,
            "dram_bytes": 528_000,
            "time_s": 7.95e-6,
            "intensity": 259.1,
            "flops_per_s": 1.72e13,
        },
        {
            "algo": "fa2",
            "kernel": "cached",
            "flops": 1 << 70,  # past 64-bit integers: still a number
            "dram_bytes": 0,
            "time_s": 1e-6,
            "intensity": None,
            "flops_per_s": 1e12,
        },
    ]
    rows = roofline.roofline_table(pts)
    assert all("_" not in k for row in rows for k in row)
    assert rows[0]["time (µs)"] == pytest.approx(7.95)  # the unit of the largest time
    assert rows[0]["achieved TFLOP/s"] == pytest.approx(17.2)
    assert rows[1]["flops"] == float(1 << 70) and rows[1]["flops per DRAM byte"] is None
    assert all(p["kernel"] != "cached" for p in _roofline_points(pts))


def _roofline_points(pts):
    fig = _roofline(pts)
    return [{"kernel": t} for d in fig.data if d.mode == "markers" for t in d.text]


def test_sweep_hover_says_why_a_cell_is_blank_in_words():
    reason = "tiles need 300,000 bytes of shared memory per CTA; the GPU allows 232,448 per block"
    rows = [
        {"bq": 64, "bk": 64, "feasible": True, "reason": "", "time_s": 1e-5},
        {"bq": 64, "bk": 128, "feasible": True, "reason": "", "time_s": None},
        {"bq": 128, "bk": 64, "feasible": False, "reason": reason, "time_s": None},
        {"bq": 128, "bk": 128, "feasible": True, "reason": "", "time_s": 2e-5},
    ]
    star = sweeps.fastest_cell(rows, "time_s")
    fig = sweeps.sweep_heatmap(rows, "time_s", "t", star, missing="not simulated: big")
    hover = [t for row in fig.data[0].text for t in row]
    assert "10 µs" in hover
    assert "not simulated: big" in hover
    assert all("time_s" not in t for t in hover)
    long = [t for t in hover if "does not run" in t][0]
    assert "<br>" in long and all(len(part) <= 48 for part in long.split("<br>"))
    star = fig.data[1]
    assert (star.x[0], star.y[0]) == ("64", "64")


def test_a_sweep_whose_cells_are_all_equal_stars_none_and_keeps_its_colours_at_or_above_zero():
    """Decoding reads Q, K and V once whatever the tiles: every cell has the same traffic. No
    cell is best, and the colour bar runs from 0 to that value (Plotly's own range around a
    lone value dips below zero: negative gigabytes)."""
    rows = [
        {"bq": bq, "bk": bk, "feasible": True, "reason": "", "hbm_bytes": 3_000_000}
        for bq in (16, 32)
        for bk in (16, 32)
    ]
    fig = sweeps.sweep_heatmap(rows, "hbm_bytes", "HBM traffic")
    assert len(fig.data) == 1  # no star
    assert (fig.data[0].zmin, fig.data[0].zmax) == (0.0, pytest.approx(3.0))  # in MB
    assert fig.data[0].colorbar.title.text == "MB"
    assert "every cell equal" in fig.layout.title.text
    rows[0]["hbm_bytes"] = 2_000_000
    fig = sweeps.sweep_heatmap(rows, "hbm_bytes", "HBM traffic")
    assert len(fig.data) == 1 and fig.data[0].zmin is None


def _sweep(times):
    """A 2 x 2 tile sweep whose cells take `times` (bq-major) and move bytes in the opposite
    order, so the fewest bytes and the fastest time are different cells."""
    cells = [(64, 64), (64, 128), (128, 64), (128, 128)]
    return [
        {
            "bq": bq,
            "bk": bk,
            "feasible": True,
            "reason": "",
            "time_s": t,
            "trips": 10 + i,
            "hbm_bytes": 4_000_000 - i * 1_000_000,
        }
        for i, ((bq, bk), t) in enumerate(zip(cells, times, strict=True))
    ]


def test_one_best_the_fastest_tiles_starred_at_the_same_cell_on_every_map():
    """'Best' means the lowest time: the heatmaps of bytes, trips and time all star that one
    cell, though fewer bytes and fewer trips are elsewhere."""
    rows = _sweep([3e-3, 1e-3, 2e-3, 4e-3])
    star = sweeps.fastest_cell(rows, "time_s")
    assert star == (64, 128)
    for metric in ("hbm_bytes", "trips", "time_s"):
        fig = sweeps.sweep_heatmap(rows, metric, metric, star)
        (marker,) = fig.data[1:]
        assert (marker.x[0], marker.y[0], marker.text[0]) == ("128", "64", "fastest")


def test_no_best_where_every_cell_takes_the_same_time():
    rows = _sweep([2e-3] * 4)
    assert sweeps.fastest_cell(rows, "time_s") is None
    rows[3]["feasible"], rows[3]["time_s"] = False, None  # a cell that does not run: no value
    assert sweeps.fastest_cell(rows, "time_s") is None
    assert sweeps.fastest_cell([dict(r, time_s=None) for r in rows], "time_s") is None


@pytest.mark.parametrize("seconds,unit", [(2.5e-7, "ns"), (4e-5, "µs"), (1.2, "s"), (0.0123, "ms")])
def test_a_time_map_reads_in_the_unit_of_its_size(seconds, unit):
    """The colour bar's unit fits the largest time (no '1.2M µs'); values stay below 1,000."""
    rows = _sweep([seconds, seconds / 2, seconds / 3, seconds / 4])
    heat = sweeps.sweep_heatmap(rows, "time_s", "t")
    assert heat.data[0].colorbar.title.text == unit
    assert 1 <= max(v for line in heat.data[0].z for v in line) < 1000


def test_scaling_hovers_carry_units_and_whole_names():
    """Hovers read '2,048 tokens: 415 µs' under the algorithm's whole legend name (Plotly cuts
    a trace name in the hover's side box at 15 characters); ticks carry their unit."""
    rows = [
        {"algo": "fa1", "seq_k": n, "feasible": True, "time_s": n * n * 1e-10}
        for n in (512, 2048, 8192)
    ]
    fig = sweeps.scaling(rows, "time_s", "predicted time")
    (line,) = fig.data
    assert line.name.startswith("fa1 (slope 2.00")
    assert line.hovertemplate.startswith(line.name) and "<extra></extra>" in line.hovertemplate
    assert "2,048 tokens: 419 µs" in line.text
    assert set(fig.layout.yaxis.ticktext) <= {"100 µs", "1 ms", "10 ms", "10 µs"}
    assert fig.layout.hoverlabel.namelength == -1
