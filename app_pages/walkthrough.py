"""Walkthrough: standard and tiled attention side by side, animated from the engine."""

import json

import streamlit as st

from app_pages import data
from app_pages.state import guarded, settings
from hbmsim import HbmsimError, fmt

st.title("Where do attention's bytes go?")
st.caption(
    "Each grid is a tensor cut into tiles; colours say where each tile is, frame by "
    "frame, as the SimPy engine replays every load and store of one head. Press play, "
    "or drag the slider to step."
)
s = settings()
walk = guarded(data.walkthrough, s)

if walk is not None:
    p = walk["problem"]
    if (p["seq_q"], p["seq_k"]) != (s.seq_q, s.seq_k) or s.batch * s.heads > 1:
        st.info(
            f"Animated: one head (batch 0, head 0) of seq {p['seq_q']:,} x {p['seq_k']:,}, "
            f"simulated on its own. The Sweep and Roofline pages use the whole problem."
        )
    left, right = st.columns(2)
    for col, side in ((left, "standard"), (right, "flash")):
        info = walk[side]["info"]
        col.plotly_chart(
            walk[side]["figure"],
            width="stretch",
            key=f"anim_{side}",
            theme=None,
            config={"displayModeBar": False},
        )
        note = f"{info['frames']} frames" + (
            f", downsampled from {info['events']:,} timeline moments" if info["downsampled"] else ""
        )
        col.caption(
            f"{walk[side]['algo']}, tiles {walk[side]['tiles']}: "
            f"{fmt.seconds(walk[side]['time_s'])} simulated; one displayed tile = "
            f"{info['row_block']} query rows / {info['col_block']} key rows; {note}."
        )
    st.download_button(
        "Download the flash trace file",
        walk["trace_file"],
        file_name=f"{s.algo}.hbmtrace",
        mime="application/octet-stream",
    )
    st.download_button(
        "Download the flash timeline (CSV)",
        walk["timeline_csv"],
        file_name=f"{s.algo}-timeline.csv",
        mime="text/csv",
    )

    st.subheader("One query row through the online softmax")
    if p["seq_q"] > 1:
        row = st.slider("query row", 0, p["seq_q"] - 1, min(p["seq_q"] - 1, 100), key="follow_row")
    else:  # decoding: the one query row
        row = 0
    try:
        fig, trace = data.row_figure(s, row)
    except HbmsimError as exc:
        st.error(str(exc))
    else:
        st.plotly_chart(fig, width="stretch", key="row_fig")
        ok = abs(trace["lse"] - trace["naive_lse"]) <= 1e-9 * max(1.0, abs(trace["naive_lse"]))
        st.markdown(
            f"After {len(trace['tiles'])} K/V blocks the FA2 program holds m = "
            f"{trace['m'][-1]:.6f} and ℓ = {trace['l'][-1]:.6f}: m + log ℓ = "
            f"**{trace['lse']:.12f}**; naive softmax's log-sum-exp = "
            f"**{trace['naive_lse']:.12f}** ({'equal' if ok else 'DIFFERENT'})."
        )
        st.download_button(
            "Download this row's steps (JSON)",
            json.dumps(trace, indent=1),
            file_name=f"row-{row}.json",
            mime="application/json",
        )
