"""Figures and tables of an explore results table (`hbmsim explore`): pure functions of its rows.

The app's Explore page only picks columns and displays what these return, so every choice the
views make (which points form a Pareto frontier, which row is a model's best configuration,
which rows a chart leaves out and why) is tested here without Streamlit. Rows are the dicts
`hbmsim.explore.read_table` returns: one per simulated point, with None where a value is
missing (an infeasible point has no results; a point too large for the engine has no time_s).
"""

from __future__ import annotations

import csv
import io
import itertools
import math
from collections import Counter

import plotly.graph_objects as go
from plotly.colors import qualitative

from ..explore.spec import OPTIONAL_AXES
from ..explore.table import HARDWARE_COLUMNS, INPUT_COLUMNS, RESULT_COLUMNS, STATUSES, column_type
from .axes import log_ticks, unit_for
from .palette import ALGO_COLORS, algo_color

# the input columns that are names, not numbers (a parallel-coordinates axis codes them)
CATEGORIES = ("gpu", "model", "pass", "program", "dtype", "causal")
FILTERS = ("gpu", "model", "pass", "program")  # the page's multiselects, where they vary
TIES = "rows_as_fast"  # the rows of a problem whose time equals its best one's (itself included)
# axes and tables show these columns in units a person reads (the CSV keeps the table's own)
UNITS: dict[str, tuple[str, float]] = {
    "sram_bytes_per_sm": ("SRAM per SM (KiB)", 1 / 1024),
    "l2_bytes": ("L2 (MiB)", 1 / 2**20),
    "hbm_bytes_per_s": ("HBM bandwidth (TB/s)", 1e-12),
    "clock_hz": ("clock (GHz)", 1e-9),
    "time_s": ("time (µs)", 1e6),
    "roofline_time_s": ("roofline time (µs)", 1e6),
    "tflops": ("TFLOP/s", 1.0),
    "hbm_bytes": ("HBM traffic, counted (GB)", 1e-9),
    "dram_bytes": ("DRAM traffic, simulated (GB)", 1e-9),
    "l2_hit_bytes": ("L2 hits (GB)", 1e-9),
    "sram_peak_bytes": ("SRAM peak (KiB)", 1 / 1024),
    "sm_count": ("SMs", 1.0),
    TIES: ("tied for fastest", 1.0),
}
TIME_COLUMNS = ("time_s", "roofline_time_s")  # shown in the unit their values' size asks for
SYMBOLS = ("circle", "square", "diamond", "triangle-up", "cross", "x", "star", "pentagon")
MAX_COLOR_GROUPS = 12  # a colour column with more values than this reads as noise
PARCOORDS_MAX_ROWS = 5_000  # lines a parallel-coordinates plot stays readable (and light) with
SVG_MAX_POINTS = 5_000  # above this the scatter draws with WebGL


def label(column: str) -> str:
    return UNITS.get(column, (column, 1.0))[0]


def choice(column: str) -> str:
    """A column as a selector names it: a time without a unit (the chart picks one by the
    size of the values it draws), anything else as `label` says."""
    return label(column).split(" (")[0] if column in TIME_COLUMNS else label(column)


def sized(column: str, values) -> tuple[str, float]:
    """(label, factor) of a column for these values: a time in the unit its largest value
    asks for ("time (ms)" past a thousand microseconds), anything else as UNITS says."""
    if column in TIME_COLUMNS:
        unit, factor = unit_for("time", [v for v in values if is_number(v)])
        return f"{UNITS[column][0].split(' (')[0]} ({unit})", factor
    return UNITS.get(column, (column, 1.0))


def scaled(column: str, value):
    """`value` in the unit `label(column)` names (anything but a number stays as it is, and
    so does a column in its own unit: a count stays an integer)."""
    factor = UNITS.get(column, ("", 1.0))[1]
    return value * factor if factor != 1.0 and is_number(value) else value


def is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def numeric_columns(columns: list[str]) -> list[str]:
    return [c for c in columns if _type(c) in ("int", "float")]


def _type(column: str) -> str | None:
    try:
        return column_type(column)
    except KeyError:
        return None


def distinct(rows: list[dict], column: str) -> list:
    """The column's values, each once, sorted (None left out)."""
    values = {r.get(column) for r in rows} - {None}
    return sorted(values, key=lambda v: (str(type(v)), v))


def varied(rows: list[dict], columns: list[str]) -> list[str]:
    """The columns that take more than one value in `rows`, in the table's order."""
    return [c for c in columns if len(distinct(rows, c)) > 1]


def hardware_columns(columns: list[str]) -> list[str]:
    """The table's hardware columns: the ones every table has and those its spec varied."""
    problem = (set(INPUT_COLUMNS) | set(OPTIONAL_AXES)) - set(HARDWARE_COLUMNS)
    return [c for c in columns if c not in problem and c not in RESULT_COLUMNS]


def axis_choices(rows: list[dict], columns: list[str]) -> list[str]:
    """Columns worth an axis: numeric, and varying (the default axes, the SRAM per SM and the
    time, always when the table has them)."""
    numeric = numeric_columns(columns)
    always = ("sram_bytes_per_sm", "time_s")
    return [c for c in numeric if len(distinct(rows, c)) > (0 if c in always else 1)]


def color_choices(rows: list[dict], columns: list[str]) -> list[str]:
    """Columns worth colouring by: inputs (and the tiles used) of a few values at most (a
    colour per value), the varying ones first."""
    inputs = [c for c in columns if c != "point_id" and c not in RESULT_COLUMNS]
    counts = {c: len(distinct(rows, c)) for c in [*inputs, "bq_used", "bk_used"] if c in columns}
    few = [c for c, n in counts.items() if 1 <= n <= MAX_COLOR_GROUPS]
    return sorted(few, key=lambda c: counts[c] < 2)


def default_color(rows: list[dict], columns: list[str]) -> str:
    """program, or model when the table has one program, or the first category that varies
    (program when none does)."""
    for c in ("program", "model", *CATEGORIES):
        if c in columns and len(distinct(rows, c)) > 1:
            return c
    return "program"


def timed_ok(row: dict) -> bool:
    """Whether the row ran and has a simulated time (a table handed in may hold NaN, infinite
    or non-positive times: Parquet takes any float; those count as no time)."""
    t = row.get("time_s")
    return row.get("status") == "ok" and is_number(t) and t > 0


def status_counts(rows: list[dict]) -> dict[str, int]:
    """Rows per status, in the order ok, infeasible, error (statuses no row has left out)."""
    n = Counter(r.get("status") for r in rows)
    return {s: n[s] for s in STATUSES if n[s]}


def display_rows(rows: list[dict], columns: list[str]) -> list[dict]:
    """The rows as a person reads them: each column under its label, in its unit (a time's
    chosen by the size of the column's values)."""
    units = {c: sized(c, [r.get(c) for r in rows]) for c in columns}
    return [{units[c][0]: _times(r.get(c), units[c][1]) for c in columns} for r in rows]


def _times(value, factor: float):
    return value * factor if factor != 1.0 and is_number(value) else value


def apply_filters(rows: list[dict], chosen: dict[str, list]) -> list[dict]:
    """The rows whose value is among the chosen ones, per column; nothing chosen keeps all."""
    keep = {c: set(v) for c, v in chosen.items() if v}
    return [r for r in rows if all(r.get(c) in vs for c, vs in keep.items())]


# -- Pareto view ---------------------------------------------------------------------------------


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point dominates, lower being better on both axes,
    ordered by x. A point is dominated by one at most as large on both axes and smaller on
    one; equal points do not dominate each other (both are kept)."""
    order = sorted(range(len(points)), key=lambda i: points[i])
    front: list[int] = []
    best_y = math.inf  # the lowest y among points of a strictly smaller x
    for _, same in itertools.groupby(order, key=lambda i: points[i][0]):
        same = list(same)  # sorted by y: the lowest first
        low = points[same[0]][1]
        if low < best_y:
            front += [i for i in same if points[i][1] == low]
            best_y = low
    return front


def problem_choices(rows: list[dict], columns: list[str]) -> dict[str, list]:
    """The problem inputs beside the model that the table varies, with their values. A Pareto
    frontier over rows of several problems is only the easiest problem's (a 1k-token prefill
    beats every 8k one on time), so the view picks one value of each: see default_problem."""
    keys = [c for c in ("context", *PROBLEM_KEYS) if c in columns]
    return {c: distinct(rows, c) for c in keys if len(distinct(rows, c)) > 1}


def default_problem(choices: dict[str, list]) -> dict:
    """The longest context (where the memory hierarchy matters most) and the first value of
    every other problem input."""
    return {c: values[-1] if c == "context" else values[0] for c, values in choices.items()}


def plotted(rows: list[dict], x: str, y: str) -> tuple[list[dict], list[dict]]:
    """(rows with a number on both axes, rows left out)."""
    kept, left = [], []
    for r in rows:
        (kept if is_number(r.get(x)) and is_number(r.get(y)) else left).append(r)
    return kept, left


def left_out_note(left: list[dict], x: str, y: str) -> str:
    """Why rows are missing from a chart of x against y, in one sentence ("" for none)."""
    if not left:
        return ""
    why = Counter(_why_missing(r, x, y) for r in left)
    parts = [f"{n:,} {reason}" for reason, n in why.most_common()]
    rows = "row" if len(left) == 1 else "rows"
    return f"{len(left):,} {rows} left out, without a value of {x} or {y}: {', '.join(parts)}."


def _why_missing(row: dict, x: str, y: str) -> str:
    status = row.get("status")
    if status == "infeasible":
        return "infeasible (the program refuses the point)"
    if status == "error":
        return "failed (status error)"
    if row.get("time_s") is None and "time_s" in (x, y):
        return "not simulated (too large for the engine: engine_note says why)"
    return "with no value"


def describe(row: dict) -> str:
    """One point in a hover line: its problem, program and tiles, GPU."""
    shape = row.get("model") or f"{row.get('heads')} heads x d {row.get('head_dim')}"
    tiles = ""
    if row.get("bq_used") is not None:
        tiles = f" {row['bq_used']}x{row['bk_used']}"
    return (
        f"{shape}, {row.get('context', 0):,} tokens, {row.get('pass')}<br>"
        f"{row.get('program')}{tiles} on {row.get('gpu')}"
    )


def group_colors(values: list) -> dict:
    """A colour per value: programs keep the colour they have in every hbmsim chart, anything
    else takes Plotly's cycle in sorted order (so a value keeps its colour as filters change
    which values are there, as long as the values before it stay)."""
    names = [str(v) for v in values]
    if names and all(n.split(" ")[0] in ALGO_COLORS for n in names):
        return {v: algo_color(str(v)) for v in values}
    cycle = qualitative.Plotly
    return {v: cycle[i % len(cycle)] for i, v in enumerate(values)}


def _same_points(groups: dict, x: str, y: str) -> dict:
    """Groups whose points are exactly another group's (two models of one attention shape
    give the same times) drawn once, named together: drawn apart, the later would hide the
    earlier entirely. Returns {the values drawn together: their rows}."""
    merged: dict[tuple, list] = {}
    by_points: dict[tuple, tuple] = {}
    for value, group in groups.items():
        points = tuple(sorted((r[x], r[y]) for r in group))
        if points in by_points:
            first = by_points.pop(points)
            merged[(*first, value)] = merged.pop(first)
            by_points[points] = (*first, value)
        else:
            merged[(value,)] = group
            by_points[points] = (value,)
    return merged


def pareto_figure(rows: list[dict], x: str, y: str, color: str) -> go.Figure:
    """x against y, a colour and a marker shape per value of `color`, and each colour's
    Pareto frontier (the points not dominated, lower being better on both axes) as a
    staircase line. Groups with exactly the same points are one trace named for all of them;
    a time axis is in the unit its values' size asks for. Rows without a number on both
    axes are left out (`plotted` and `left_out_note` say which). An axis is logarithmic when
    its values are all positive and span 100x or more."""
    kept, _ = plotted(rows, x, y)
    groups: dict = {}
    for r in kept:
        groups.setdefault(r.get(color), []).append(r)
    order = sorted(groups, key=lambda v: (v is None, str(type(v)), v or 0))
    colors = group_colors(order)
    together = _same_points({v: groups[v] for v in order}, x, y)
    (x_label, x_f), (y_label, y_f) = (sized(c, [r[c] for r in kept]) for c in (x, y))
    scatter = go.Scattergl if len(kept) > SVG_MAX_POINTS else go.Scatter
    fig = go.Figure()
    for k, (values, group) in enumerate(together.items()):
        names = [f"{color} {v}" if isinstance(v, int | float) else str(v) for v in values]
        name = names[0] if len(names) == 1 else f"{' = '.join(names)} (the same points)"
        color_hex = colors[values[0]]
        xs = [_times(r[x], x_f) for r in group]
        ys = [_times(r[y], y_f) for r in group]
        fig.add_trace(
            scatter(
                x=xs,
                y=ys,
                mode="markers",
                name=name,
                legendgroup=name,
                marker=dict(
                    color=color_hex, size=8, opacity=0.75, symbol=SYMBOLS[k % len(SYMBOLS)]
                ),
                text=[describe(r) for r in group],
                hovertemplate=f"<b>{name}</b><br>%{{text}}<br>{x_label} %{{x:.4g}}<br>"
                f"{y_label} %{{y:.4g}}<extra></extra>",
            )
        )
        front = pareto_front(list(zip(xs, ys, strict=True)))
        fig.add_trace(
            scatter(
                x=[xs[i] for i in front],
                y=[ys[i] for i in front],
                mode="lines+markers",
                line=dict(color=color_hex, width=2, shape="hv"),
                marker=dict(color=color_hex, size=12, symbol="circle-open"),
                name=f"{name} frontier",
                legendgroup=name,
                showlegend=False,
                hoverinfo="skip",
            )
        )
    xs_all = [t for d in fig.data[::2] for t in d.x]
    ys_all = [t for d in fig.data[::2] for t in d.y]
    fig.update_layout(
        title=f"{y_label} against {x_label}: lower is better on both; lines are each "
        f"{color}'s Pareto frontier",
        xaxis=_axis(x_label, xs_all),
        yaxis=_axis(y_label, ys_all),
        legend_title=color,
        height=480,
        margin=dict(t=60, b=40),
        hoverlabel=dict(namelength=-1),
    )
    return fig


def _axis(title: str, values: list) -> dict:
    axis: dict = {"title": title}
    if values and min(values) > 0 and max(values) / min(values) >= 100:
        axis |= {"type": "log", **log_ticks(values)}
    return axis


# -- parallel coordinates ------------------------------------------------------------------------


def parcoords_columns(rows: list[dict], columns: list[str]) -> list[str]:
    """The dimensions: the inputs that vary (categories too, as coded axes), the tiles the
    program used in place of the asked ones (a default tile is None: no value to draw), then
    time_s. Sequence lengths follow context and the pass, and a shape its model, so they are
    left out."""
    skip = {"point_id", "bq", "bk", "seq_q", "seq_k", *RESULT_COLUMNS}
    inputs = [c for c in columns if c not in skip]
    dims = [c for c in varied(rows, inputs) if c in CATEGORIES or _type(c) in ("int", "float")]
    if "model" in dims:  # a model's shape follows from it
        dims = [c for c in dims if c not in ("heads", "kv_heads", "head_dim")]
    dims += [c for c in ("bq_used", "bk_used") if c in columns and len(distinct(rows, c)) > 1]
    return [*dims, "time_s"]


def parcoords_figure(rows: list[dict], columns: list[str]) -> tuple[go.Figure | None, str]:
    """Parallel coordinates of the simulated points (status ok with a time), one line each,
    coloured by time (bright: fast), or None when there is none; with a note of what was left
    out. Above PARCOORDS_MAX_ROWS lines, the fastest ones are drawn (the note says so)."""
    timed = [r for r in rows if timed_ok(r)]
    if not timed:
        return None, ""
    dims = parcoords_columns(timed, columns)
    drawn = [r for r in timed if all(r.get(c) is not None for c in dims)]
    notes = []
    if len(timed) < len(rows):
        notes.append(f"{len(rows) - len(timed):,} rows without a simulated time are left out")
    if len(drawn) < len(timed):
        notes.append(f"{len(timed) - len(drawn):,} rows missing a value of an axis are left out")
    if len(drawn) > PARCOORDS_MAX_ROWS:
        notes.append(f"the fastest {PARCOORDS_MAX_ROWS:,} of {len(drawn):,} are drawn")
        drawn = sorted(drawn, key=lambda r: r["time_s"])[:PARCOORDS_MAX_ROWS]
    note = "; ".join(notes) + "." if notes else ""
    note = note[:1].upper() + note[1:]
    if not drawn:
        return None, note
    unit_label, factor = sized("time_s", [r["time_s"] for r in drawn])
    times = [r["time_s"] * factor for r in drawn]
    fig = go.Figure(
        go.Parcoords(
            line=dict(
                color=[math.log10(t) for t in times],
                colorscale="Viridis",
                reversescale=True,
                showscale=True,
                colorbar=dict(title=unit_label, **_log_colorbar(times)),
            ),
            dimensions=[_dimension(drawn, c) for c in dims],
        )
    )
    fig.update_layout(
        title="Every simulated point as a line across its inputs, to its time", height=460
    )
    fig.update_layout(margin=dict(t=90, l=60, r=60, b=30))
    return fig, note


def _dimension(rows: list[dict], column: str) -> dict:
    values = [r[column] for r in rows]
    if column in CATEGORIES or not all(is_number(v) for v in values):
        names = sorted({str(v) for v in values})
        code = {n: i for i, n in enumerate(names)}
        return dict(
            label=column,
            values=[code[str(v)] for v in values],
            tickvals=list(range(len(names))),
            ticktext=names,
        )
    name, factor = sized(column, values)
    shown = [_times(v, factor) for v in values]
    if column == "time_s" and min(shown) > 0 and max(shown) / min(shown) >= 100:
        ticks = log_ticks(shown)
        return dict(
            label=name + ", log",
            values=[math.log10(v) for v in shown],
            tickvals=[math.log10(t) for t in ticks["tickvals"]],
            ticktext=ticks["ticktext"],
        )
    return dict(label=name, values=shown)


def _log_colorbar(times: list[float]) -> dict:
    ticks = log_ticks(times)
    if not ticks:
        return {}
    return dict(tickvals=[math.log10(t) for t in ticks["tickvals"]], ticktext=ticks["ticktext"])


# -- best configuration per problem --------------------------------------------------------------

# beside the problem itself, the inputs that make a different problem (a decode step is no
# alternative to a prefill) when a table varies them
PROBLEM_KEYS = ("pass", "batch", "causal", "dtype")


def best_keys(rows: list[dict], columns: list[str]) -> list[str]:
    """What a best configuration is chosen per: (model, context), or (heads, head_dim,
    context) in a table of explicit shapes, plus any of PROBLEM_KEYS the table varies."""
    shape = ["model"] if any(r.get("model") for r in rows) else ["heads", "kv_heads", "head_dim"]
    if shape[0] == "heads" and len(distinct(rows, "kv_heads")) < 2:
        shape.remove("kv_heads")
    extra = [c for c in PROBLEM_KEYS if c in columns and len(distinct(rows, c)) > 1]
    return [*shape, "context", *extra]


def best_columns(rows: list[dict], columns: list[str]) -> list[str]:
    """The best-configuration table's columns: the problem, the choices that make the
    configuration (GPU when it varies, program, tiles used, the hardware fields that vary),
    how it did, and how many rows of its problem did as well (TIES)."""
    keys = best_keys(rows, columns)
    hardware = [c for c in varied(rows, hardware_columns(columns)) if c != "point_id"]
    return [*keys, *hardware, "program", "bq_used", "bk_used", "time_s", "tflops", TIES]


def best_per_problem(rows: list[dict], columns: list[str]) -> tuple[list[dict], int]:
    """(per problem, the row of lowest time_s among the status "ok" rows, as the
    best_columns; ok rows without a time, which are left out). Ties go to the row that comes
    first in the table, and are counted: when every configuration of a problem takes the same
    time (a call bound by its host's launches, whatever the GPU), the "best" one is only the
    first, and the count says so."""
    keys = best_keys(rows, columns)
    shown = best_columns(rows, columns)
    best: dict[tuple, dict] = {}
    ties: dict[tuple, int] = {}
    untimed = 0
    for r in rows:
        if r.get("status") != "ok":
            continue
        if not timed_ok(r):
            untimed += 1
            continue
        k = tuple(r.get(c) for c in keys)
        if k in best and math.isclose(r["time_s"], best[k]["time_s"], rel_tol=1e-9):
            ties[k] += 1
        elif k not in best or r["time_s"] < best[k]["time_s"]:
            best[k], ties[k] = r, 1
    ordered = sorted(best, key=lambda k: tuple((v is None, v) for v in k))
    return [{**{c: best[k].get(c) for c in shown}, TIES: ties[k]} for k in ordered], untimed


def to_csv(rows: list[dict], columns: list[str]) -> str:
    """The rows as CSV, as `hbmsim explore -o X.csv` writes them (None is an empty cell), so a
    downloaded table reads back with read_table."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    for r in rows:
        writer.writerow({c: "" if r.get(c) is None else r[c] for c in columns})
    return buf.getvalue()
