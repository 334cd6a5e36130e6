"""Walkthrough: standard and tiled attention on one clock, animated from the engine.

The first screen answers a newcomer's first question: the idea in one sentence, the result
for the current settings as three ratios, and the animation; everything else (what the
animation leaves out, how to read it) is one expander, and the rest of the page below.
"""

import json

import streamlit as st

from app_pages import data
from app_pages.fields import FIRST_ROW
from app_pages.notes import IDEA, cut_lengths, headline_ui, reading_notes, walk_notes
from app_pages.state import settings, show_errors
from app_pages.tour import tour_button, tour_panel, touring
from app_pages.viewport import KEY as WIDTH_KEY
from app_pages.viewport import page_width
from hbmsim import HbmsimError, fmt

st.title("Where do attention's bytes go?")
st.markdown(IDEA)
row = st.container(horizontal=True, vertical_alignment="center", gap="medium")
ratios = row.container(horizontal=True, gap="small", width="content")  # filled last
about = st.container()  # what the ratios compare, filled with them
s = settings()
if touring():
    tour_panel()
else:
    with row:
        tour_button()
try:
    walk = data.walkthrough(s)
except HbmsimError as exc:  # the problem itself is invalid: say so, keep the page
    show_errors([("", exc)])
    walk = None

if walk is not None:
    shown_p = walk["problem"]
    where = (  # a refusal of the cut problem may not hold for the whole one: say which it is
        f" (on the animated head, {shown_p['seq_q']:,} x {shown_p['seq_k']:,} tokens)"
        if cut_lengths(s, walk)
        else ""
    )
    show_errors((algo, f"{msg}{where}") for algo, msg in walk["errors"].items())
    if walk["sides"]:
        st.plotly_chart(
            data.walk_chart(s, data.chart_width(st.session_state.get(WIDTH_KEY))),
            width="content",
            key="walk",
            theme=None,
            config={"displayModeBar": False},
        )
    notes = walk_notes(s, walk) + reading_notes(walk)
    with st.expander(f"Notes on this animation ({len(notes)})"):
        for note in notes:
            st.markdown(f"- {note}")
    roles = data.warpgroup_chart(s)
    if roles is not None:
        st.subheader(f"Inside one {s.algo} CTA: producer and consumer warpgroups")
        st.caption(
            "The kernel is warp-specialised: a producer warpgroup issues the TMA loads of the "
            "next K/V blocks while the consumer warpgroups compute, and the consumers take the "
            "tensor cores in turn, one's softmax running while another multiplies. Bars are "
            "the engine's timeline rows of the first CTA on SM 0."
        )
        st.plotly_chart(roles, width="stretch", key="warpgroups", theme=None)
    if s.algo not in walk["errors"]:
        c1, c2 = st.columns(2)
        c1.download_button(
            f"Download the {s.algo} trace file",
            lambda: data.trace_file(s),
            file_name=f"{s.algo}.hbmtrace",
            mime="application/octet-stream",
        )
        c2.download_button(
            f"Download the {s.algo} timeline (CSV)",
            lambda: data.timeline_csv(s),
            file_name=f"{s.algo}-timeline.csv",
            mime="text/csv",
        )

st.subheader("One query row through the online softmax")
try:
    seq_q = data.walk_problem(s).seq_q
except HbmsimError:
    seq_q = None
    st.info("The row panel needs a valid problem: fix the setting named above.")
if seq_q is not None:
    st.caption(
        "Computed by executing FA2's tile program on random inputs (FA1 and split-KV keep the "
        "same running max m and sum ℓ per row; FA1 stores them in HBM between steps)."
        + ("" if s.algo == "fa2" else f" The sidebar's algorithm is {s.algo}; this panel is FA2.")
    )
    if seq_q > 1:
        start = st.session_state.get("follow_row", FIRST_ROW)
        st.session_state["follow_row"] = min(start, seq_q - 1)  # the range may have shrunk
        row = st.slider("query row", 0, seq_q - 1, key="follow_row")
    else:  # decoding: the one query row
        row = 0
    try:
        fig, trace, tiles, note = data.row_figure(s, row)
    except HbmsimError as exc:
        if not show_errors([("", exc)]):
            st.info("The row panel cannot run this problem either: see the error above.")
    else:
        if note:
            st.info(note)
        st.plotly_chart(fig, width="stretch", key="row_fig")
        ok = abs(trace["lse"] - trace["naive_lse"]) <= 1e-9 * max(1.0, abs(trace["naive_lse"]))
        st.markdown(
            f"With tiles {fmt.tiles(tiles)}, after {len(trace['tiles'])} K/V blocks the FA2 "
            f"program holds m = {trace['m'][-1]:.6f} and ℓ = {trace['l'][-1]:.6f}: "
            f"m + log ℓ = **{trace['lse']:.12f}**; naive softmax's log-sum-exp = "
            f"**{trace['naive_lse']:.12f}** ({'equal' if ok else 'DIFFERENT'})."
        )
        st.download_button(
            "Download this row's steps (JSON)",
            json.dumps(trace, indent=1),
            file_name=f"row-{row}.json",
            mime="application/json",
        )

headline_ui(s, ratios, about)
page_width()  # last: the browser reports the column's width, and the figure follows it
