"""Explore: a design-space study's results table (`hbmsim explore`) as a Pareto view, parallel
coordinates, and the best configuration per model and context.

The table comes from the shipped example study, an upload, or a small spec run on the page;
the views are hbmsim.figures.explore's (this page picks the columns and displays). The sidebar's
settings do not apply here: every row of the table is its own point.
"""

import hashlib

import streamlit as st

from app_pages import explore_data as data
from app_pages.state import errors_shown, guarded
from hbmsim.figures import explore as ef

SOURCES = {
    "example": "the example study",
    "upload": "a table of your own",
    "spec": "a small spec run here",
}
ALL = "all"  # a problem selector's option for every value


def example():
    loaded = guarded(data.example_table, relabel=False)
    if loaded is None and not errors_shown():
        st.info(
            "The example table is not there (hbmsim/data/explore_example.parquet is missing "
            f"from this install): `hbmsim explore {data.EXAMPLE_SPEC} -o "
            "hbmsim/data/explore_example.parquet` makes it. Meanwhile, upload a table of your "
            "own or run a small spec here."
        )
    return (f"the example study ({data.EXAMPLE_SPEC})", *loaded) if loaded else None


def upload():
    up = st.file_uploader(
        "A results table of `hbmsim explore` (.parquet or .csv)",
        type=["parquet", "csv"],
        key="explore_upload",
    )
    if up is None:
        st.info("Upload a table written by `hbmsim explore SPEC -o OUT.parquet` (or .csv).")
        return None
    loaded = guarded(data.uploaded_table, up.name, up.getvalue(), relabel=False)
    return (up.name, *loaded) if loaded else None


def run_here():
    text = st.text_area(
        "Spec (TOML, as `hbmsim explore` reads it)",
        value=data.SMALL_SPEC,
        height=330,
        max_chars=data.MAX_SPEC_CHARS,
        key="explore_spec",
    )
    st.caption(
        f"Runs at most {data.PAGE_MAX_POINTS} points here, on a local Dask cluster of up to "
        f"{data.PAGE_MAX_WORKERS} worker processes; larger studies run with `hbmsim explore`."
    )
    if st.button("Run the spec", key="explore_run"):
        spec = guarded(data.parse_page_spec, text, relabel=False)
        if spec is not None:
            bar = st.progress(0.0, text=f"Starting a local Dask cluster for {spec.size} points")

            def started(run):
                todo = run.points - run.kept
                bar.progress(0.0, text=f"Simulating: 0 of {todo:,} points on {run.workers} workers")

            def progress(done, total, rate):
                bar.progress(done / total, text=f"Simulating: {done:,} of {total:,} points done")

            ran = guarded(data.run_spec, spec, progress, started, relabel=False)
            bar.empty()
            if ran is not None:
                st.session_state["explore_ran"] = ran
    ran = st.session_state.get("explore_ran")
    if ran is None:
        if not errors_shown():
            st.info("Edit the spec and run it: its table is shown below.")
        return None
    rows, columns, summary = ran
    st.caption(f"The last spec run here: {summary}.")
    return ("the spec run here", rows, columns)


def filter_rows(rows: list[dict], tid: str) -> list[dict]:
    """Multiselects on the categories the table varies; none chosen keeps every row."""
    shown = [c for c in ef.FILTERS if len(ef.distinct(rows, c)) > 1]
    chosen = {}
    for col, c in zip(st.columns(max(len(shown), 1)), shown, strict=False):
        chosen[c] = col.multiselect(
            c, ef.distinct(rows, c), placeholder="all", key=f"explore_filter_{c}_{tid}"
        )
    return ef.apply_filters(rows, chosen)


def one_problem(rows, whole, columns, tid) -> tuple[list[dict], str]:
    """The rows of the problem the user picks (by default the longest context), and the
    problem in words ("" when the table holds one). Options come from the whole table, so
    that a filter never takes away a widget's chosen value."""
    choices = ef.problem_choices(whole, columns)
    if not choices:
        return rows, ""
    default = ef.default_problem(choices)
    picked = {}
    for col, (c, values) in zip(st.columns(len(choices)), choices.items(), strict=True):
        picked[c] = col.selectbox(
            c, [ALL, *values], index=1 + values.index(default[c]), key=f"explore_p_{c}_{tid}"
        )
    chosen = {c: [v] for c, v in picked.items() if v != ALL}
    words = ", ".join(
        f"every {c}" if v == ALL else f"{c} {v:,}" if c == "context" else f"{c} {v}"
        for c, v in picked.items()
    )
    return ef.apply_filters(rows, chosen), words


def pareto(rows: list[dict], whole: list[dict], columns: list[str], tid: str) -> None:
    st.subheader("Pareto view")
    rows, problem = one_problem(rows, whole, columns, tid)
    if not rows:
        st.info(f"No row of {problem} is left by the filters.")
        return
    axes = ef.axis_choices(whole, columns)
    colors = ef.color_choices(whole, columns)
    c1, c2, c3 = st.columns(3)
    x = c1.selectbox(
        "x",
        axes,
        index=axes.index("sram_bytes_per_sm") if "sram_bytes_per_sm" in axes else 0,
        format_func=ef.choice,
        key=f"explore_x_{tid}",
    )
    y = c2.selectbox(
        "y",
        axes,
        index=axes.index("time_s") if "time_s" in axes else 0,
        format_func=ef.choice,
        key=f"explore_y_{tid}",
    )
    default = ef.default_color(whole, columns)
    color = c3.selectbox(
        "colour by",
        colors,
        index=colors.index(default) if default in colors else 0,
        key=f"explore_color_{tid}",
    )
    kept, left = ef.plotted(rows, x, y)
    if kept:
        st.plotly_chart(ef.pareto_figure(rows, x, y, color), width="stretch", key="explore_pareto")
        st.caption(
            f"Each point is a row; each line joins the rows of one {color} that no other row of "
            f"it beats on both axes (lower {ef.label(x)} and lower {ef.label(y)}), ringed: its "
            "Pareto frontier"
            + (f", among the rows of {problem}." if problem else ".")
            + (
                f" A {color}'s rows may be of several models: filter by model to compare like "
                "with like."
                if color != "model" and len(ef.distinct(rows, "model")) > 1
                else ""
            )
        )
    else:
        st.info(f"No row has a value of both {x} and {y}.")
    if left:
        st.caption(ef.left_out_note(left, x, y))


def parallel(rows: list[dict], columns: list[str]) -> None:
    """Parallel coordinates, drawn when asked: Plotly draws them with WebGL, which a browser
    without a GPU to draw with (a VM, a headless test) renders in software, and that was most
    of the Explore page's first load in Chromium (docs/benchmarks.md)."""
    st.subheader("Parallel coordinates")
    if not st.toggle("Draw the parallel coordinates", key="explore_parcoords_on"):
        st.caption(
            "One line per simulated point, across the inputs the table varies, to its time. "
            "Drawn when asked: the chart draws with WebGL, slow in a browser without a GPU."
        )
        return
    fig, note = ef.parcoords_figure(rows, columns)
    if fig is None:
        st.info("No row has a simulated time to draw.")
    else:
        st.plotly_chart(fig, width="stretch", key="explore_parcoords")
        st.caption(
            "One line per simulated point, across the inputs the table varies, to its time "
            "(bright: fast). Drag along an axis to keep only the lines within a range."
            + (f" {note}" if note else "")
        )


def best(rows: list[dict], columns: list[str], whole: list[dict]) -> None:
    keys = ef.best_keys(rows, columns)
    st.subheader(f"Best configuration per {', '.join(keys[:-1])} and {keys[-1]}")
    found, untimed = ef.best_per_problem(rows, columns)
    shown = ef.best_columns(rows, columns)
    if found:
        st.dataframe(
            ef.display_rows(found, shown),
            hide_index=True,
            key="explore_best",
            column_config={
                ef.sized(c, [r.get(c) for r in found])[0]: st.column_config.NumberColumn(
                    format="%.4g"
                )
                for c in ("time_s", "tflops")
            },
        )
        st.caption(
            "The row of lowest time among those that ran (status ok): its program, the tiles "
            "it used and the hardware fields the table varies. Tied for fastest: how many "
            "configurations of the problem take that same lowest time (the first of them is "
            "shown); more than one says the choice does not matter there, as for a call bound "
            "by its host's launches."
            + (
                f" {untimed:,} rows that ran without a simulated time (too large for the "
                "engine) are left out."
                if untimed
                else ""
            )
        )
    else:
        st.info("No row ran with a simulated time: there is no best configuration to show.")
    a, b = st.columns(2)
    a.download_button(
        "Download best configurations (CSV)",
        ef.to_csv(found, shown),
        file_name="explore-best.csv",
        mime="text/csv",
        disabled=not found,
    )
    b.download_button(
        f"Download the whole table, {len(whole):,} rows (CSV)",
        ef.to_csv(whole, columns),
        file_name="explore.csv",
        mime="text/csv",
    )


st.title("Explore")
st.caption(
    "A results table of `hbmsim explore SPEC -o OUT.parquet`: one row per simulated point of "
    "a study's axes (GPUs and hardware fields, models, contexts, passes, programs, tiles). "
    "The sidebar's settings do not apply on this page."
)
source = st.radio(
    "Results table", list(SOURCES), format_func=SOURCES.get, horizontal=True, key="explore_source"
)
table = {"example": example, "upload": upload, "spec": run_here}[source]()
if table is not None:
    name, rows, columns = table
    statuses = ", ".join(f"{n:,} {s}" for s, n in ef.status_counts(rows).items())
    st.caption(f"Loaded: {name}, {len(rows):,} rows ({statuses or 'none'}).")
    tid = hashlib.sha256("".join(r["point_id"] for r in rows).encode()).hexdigest()[:12]
    picked = filter_rows(rows, tid) if rows else []
    if not picked:
        st.info("No row matches the filters." if rows else "No row to show: the table is empty.")
    else:
        pareto(picked, rows, columns, tid)
        parallel(picked, columns)
        best(picked, columns, rows)
        with st.expander(f"The rows ({len(picked):,}, after the filters)"):
            st.dataframe(picked, hide_index=True, key="explore_rows")
