"""Validate: recorded GPU measurements next to the simulator's predictions."""

import json

import streamlit as st

from app_pages.state import guarded
from hbmsim import fmt
from hbmsim.figures import accuracy
from hbmsim.validation.gpu_runs import (
    RESULTS_DIR,
    load_results,
    occupancy_rows,
    summary,
    summary_by_kind,
)
from hbmsim.validation.published import (
    TARGET_WORST,
    load_extra_checks,
    load_published,
    load_recorded,
    predict,
    speedup_problem,
)
from hbmsim.validation.published import summarize as published_summary


@st.cache_data(show_spinner=False)
def published_points():
    return load_published()[0]


def published_rows(progress=None):
    """The whole set, each point simulated once per server and cached on its own, so that
    `progress(done, total, series)` can be told before each (a cached function may not draw:
    Streamlit replays what it drew on a cache hit, and the bar made outside it is gone)."""
    points = published_points()
    todo = [i for i, pt in enumerate(points) if pt.impl is not None]
    rows = []
    for n, i in enumerate(todo):
        if progress is not None:
            progress(n, len(todo), points[i].series)
        rows.append(_published_row(i))
    return rows


@st.cache_data(show_spinner=False)
def _published_row(index: int) -> dict:
    return predict([published_points()[index]])[0]


def fmt_pct(e, signed=True):
    return "-" if e is None else (f"{100 * e:+.0f}%" if signed else f"{100 * e:.0f}%")


def show_comparison(rows: list[dict], key: str, title: str | None = None) -> dict:
    """Predicted vs measured for published-style points: the scatter, the per-group summary
    and every point; returns the summary."""
    s = published_summary(rows)
    fig = accuracy.published_scatter(rows, *([title] if title else []))
    st.plotly_chart(fig, width="stretch", key=f"{key}_scatter")
    st.dataframe(
        [
            {
                "source": g["source"],
                "implementation": g["impl"],
                "simulated / points": f"{g['simulated']}/{g['n']}",
                "median |error|": fmt_pct(g["median_abs_error"], signed=False),
                "worst error": fmt_pct(g["worst_error"]),
                "within ±40%": g["within_40pct"],
                "lowest rank correlation": "-"
                if g["min_rank_correlation"] is None
                else f"{g['min_rank_correlation']:.2f}",
            }
            for g in s["groups"]
        ],
        hide_index=True,
        key=f"{key}_groups",
    )
    st.dataframe(
        [
            {
                "series": r["series"],
                "seq": r["problem"]["seq_k"],
                "measured": fmt.seconds(r["measured_time_s"]),
                "predicted": fmt.seconds(r["predicted_time_s"])
                if r["predicted_time_s"]
                else r["reason"],
                "error": fmt_pct(r["error"]),
                "citation": r["citation"],
            }
            for r in rows
        ],
        hide_index=True,
        key=f"{key}_points",
    )
    if s["speedups"]:
        missed, done = accuracy.speedup_misses(s["speedups"])
        st.caption(
            "Speedups on the same problem, measured and predicted: flash over PyTorch eager, "
            f"and FlashAttention-3 over FlashAttention-2. The goal is within "
            f"{100 * accuracy.SPEEDUP_GOAL:.0f}% on every point: {missed:,} of {done:,} "
            "predicted speedups are further off."
        )
        st.dataframe(
            [
                {
                    "implementation": sp["impl"],
                    "over": sp["baseline"],
                    "problem (pass, batch x heads, seq, d)": speedup_problem(sp["problem"]),
                    "measured": f"{sp['measured']:.2f}x",
                    "predicted": "-" if sp["predicted"] is None else f"{sp['predicted']:.2f}x",
                    "error": fmt_pct(sp["error"]),
                    "source": sp["source"],
                }
                for sp in s["speedups"]
            ],
            hide_index=True,
            key=f"{key}_speedups",
        )
    return s


def headline_ui(cards: list[tuple[str, bool, list]]) -> None:
    """One card per comparison: its median |error|, worst error and points past the goal,
    and whether its timings are a development set or never seen."""
    for column, (title, development, errors) in zip(
        st.columns(max(len(cards), 1)), cards, strict=False
    ):
        h = accuracy.headline(errors)
        with column.container(border=True):
            st.markdown(f"**{title}**")
            st.metric(
                "median |error|",
                "-" if h.median_abs_error is None else f"{100 * h.median_abs_error:.0f}%",
                help="half of the points are closer than this",
            )
            st.caption(
                f"{h.words()} · {'development set' if development else 'never seen'}",
            )
    st.markdown(
        "**Development set**: timings looked at while the model's mechanisms were chosen (which "
        "mechanism to add, and whether it helped, was judged on them; no constant was fitted to "
        "them). **Never seen**: timings measured or found after the model was fixed and predicted "
        "before anyone compared them; they are the fairer test."
    )


def show_loaded(found_and_problems: tuple[list, list[str]], none_yet: str) -> list:
    """What a loader found; each file it could not use as a warning, and `none_yet` when it
    found nothing."""
    found, problems = found_and_problems
    for msg in problems:
        st.warning(msg)
    if not found:
        st.info(none_yet)
    return found


st.title("Validate: how accurate is it?")
st.caption(
    "Predicted against measured time, error = predicted / measured - 1. The goal: every "
    f"point within ±{100 * TARGET_WORST:.0f}%. No constant of the model is fitted to any of "
    "these timings."
)
points = published_points()
with_impl = [p for p in points if p.impl]
recorded = load_recorded()
rows = st.session_state.get("published_rows")
if rows is None and recorded is not None:
    rows = recorded["points"]
files, file_problems = load_results()
extra, extra_problems = load_extra_checks()
answer = st.container()  # the headline, filled last: the button below may simulate again
st.header("Libraries vs published timings (development set)")
st.caption(
    "Timings of real libraries (PyTorch eager, FlashAttention 1, 2 and 3) transcribed from "
    "the FlashAttention papers, each with its citation, simulated with hbmsim's mirror of "
    "that library on the paper's GPU. No constant of the model is set from them; they are "
    "the development set: mechanisms were judged on them (`hbmsim validate --published`)."
)
st.write(
    f"{len(points)} published points, {len(with_impl)} of them name an implementation "
    "hbmsim can mirror; the others are kept for context."
)
if st.session_state.get("published_rows") is None and recorded is not None:
    st.caption(
        f"Predictions recorded on {recorded['date']} by hbmsim {recorded['hbmsim']} "
        "(`hbmsim validate --published --report ...`); the button below simulates them again."
    )
if st.button(f"Simulate the {len(with_impl)} points now (several minutes)", key="run_published"):
    rows = st.session_state["published_rows"] = guarded(
        published_rows, default=None, what="Simulating the published points"
    )
if rows:
    s = show_comparison(rows, "published")
    st.download_button(
        "Download the comparison (JSON)",
        json.dumps({"points": rows, **s}, indent=1, allow_nan=False),
        file_name="published-validation.json",
        mime="application/json",
        key="dl_published",
    )

st.header("Timings the model never saw")
st.caption(
    "Timings measured with this repository on a GPU (kernels/torch_timings.py) and "
    "published timings found after the published set was fixed, each file with its "
    "sources; shown beside the published set, never a source of constants."
)
extra = show_loaded(
    (extra, extra_problems),
    "No extra checks are recorded: kernels/results/extra/ holds none. "
    "kernels/torch_timings.py times PyTorch eager and FlashAttention-2 on a GPU in the "
    "published set's format; `hbmsim validate --published FILE --report "
    "kernels/results/extra/NAME.json` records the comparison shown here.",
)
for path, comparison in extra:
    st.subheader(path.name)
    st.caption(
        f"Predictions recorded on {comparison.get('date', '?')} from "
        f"{comparison.get('set', '?')}: timings the model never saw, simulated with the same "
        "mirrors and presets as the published set; never a source of constants."
    )
    show_comparison(
        comparison["points"], f"extra_{path.stem}", f"{path.stem}: predicted vs measured"
    )

st.header("Our own CUDA kernels on a GPU (development set)")
st.caption(
    "The kernels in kernels/, timed on a GPU by a validation run, each against the "
    "prediction of its tile program with that GPU's calibrated profile."
)
files = show_loaded(
    (files, file_problems),
    (
        "No GPU measurements are recorded yet: kernels/results/ holds no results file. A "
        "validation run on a machine with an NVIDIA GPU writes one JSON file there (GPU, "
        "versions, and for each kernel configuration the measured and predicted time and "
        "DRAM bytes); this page then compares them."
    ),
)
for f in files:
    st.subheader(f"{f.gpu} ({f.date}) — {f.path.name}")
    s = summary(f.configs)
    cols = st.columns(4)
    cols[0].metric("configurations", s["configs"])
    cols[1].metric("median |time error|", f"{s['time_median_abs_pct_error']:.1f}%")
    cols[2].metric("max |time error|", f"{s['time_max_abs_pct_error']:.1f}%")
    cols[3].metric("rank correlation", f"{s['time_spearman']:.2f}")
    st.dataframe(
        [
            {
                "kernel": kind,
                "configurations": k["configs"],
                "median |time error| %": round(k["time_median_abs_pct_error"], 1),
                "max |time error| %": round(k["time_max_abs_pct_error"], 1),
                "rank correlation": round(k["time_spearman"], 2),
                "rank correlation across tiles": ", ".join(
                    f"{r:.2f}" for r in k["tile_sweep_spearman"]
                ),
            }
            for kind, k in summary_by_kind(f.configs).items()
        ],
        hide_index=True,
        key=f"kinds_{f.path.name}",
    )
    if occupancy := occupancy_rows(f.configs):
        st.caption(
            "Fewer CTAs per SM (shared memory padded so an SM holds k of them): each point's "
            "time over its unpadded kernel's, measured and predicted. Near each other: the "
            "engine's lockstep waves hold at that occupancy."
        )
        st.dataframe(
            occupancy,
            hide_index=True,
            key=f"occupancy_{f.path.name}",
        )
    st.plotly_chart(
        accuracy.validation_scatter(f.configs), width="stretch", key=f"val_{f.path.name}"
    )
    st.dataframe(f.configs, hide_index=True)
    st.download_button(
        "Download this file",
        f.path.read_bytes(),
        file_name=f.path.name,
        mime="application/json",
        key=f"dl_{f.path.name}",
    )
try:
    import cupy

    gpu = cupy.cuda.is_available()
except Exception:  # noqa: BLE001 - CuPy missing or without a driver: no live run here
    gpu = False
if gpu:
    if st.button("Run the validation on this GPU (several minutes)"):
        import sys
        import tempfile

        sys.path.insert(0, str(RESULTS_DIR.parent.parent))
        from kernels import validate

        with st.spinner("Measuring and predicting..."), tempfile.TemporaryDirectory() as tmp:
            validate.main(["--out", tmp, "--results-dir", str(RESULTS_DIR)])
        st.rerun()
else:
    st.caption(
        "Live validation needs CuPy and an NVIDIA GPU; this machine has none. "
        f"Results directory: {RESULTS_DIR.name}/"
    )
cards = []
if rows:
    cards.append(("Libraries vs published timings", True, accuracy.point_errors(rows)))
for _path, comparison in extra:
    rows_x = comparison["points"]
    cards.append((accuracy.comparison_title(rows_x), False, accuracy.point_errors(rows_x)))
for f in files:
    cards.append((f"Our own CUDA kernels on an {f.gpu}", True, accuracy.config_errors(f.configs)))
with answer:
    headline_ui(cards)
