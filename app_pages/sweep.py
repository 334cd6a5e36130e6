"""Sweep: tile sizes, sequence length and SRAM size."""

import json

import streamlit as st

from app_pages import data
from app_pages.state import errors_shown, guarded, settings, show_errors, user_message
from hbmsim import HbmsimError, fmt
from hbmsim.figures import sweeps
from hbmsim.interpret.analytic import theorem2_flash_accesses

st.title("Sweep")
s = settings()
rows = guarded(data.tile_sweep, s, default=[], what="Sweeping tile sizes")

if rows and not any(r["feasible"] for r in rows):
    refused = rows[0]["reason"]
    show_errors([("", refused)])  # nothing to draw: say why, as the CLI would
    if refused.startswith("tiles:"):
        st.info(
            f"The sweep tries bq and bk from {min(data.SWEEP_TILES)} to "
            f"{max(data.SWEEP_TILES)}; none fits this SRAM. Smaller tiles may: set bq and bk "
            "in the sidebar (the Walkthrough and Roofline pages run them)."
        )
    rows = []
if rows:
    timed = any(r.get("time_s") is not None for r in rows)
    metric = "time_s" if timed else "roofline_time_s"
    speed = "predicted time" if timed else "roofline time (too large to simulate)"
    star = sweeps.fastest_cell(rows, metric)  # "best" means fastest, one cell for every map
    unsimulated = [r for r in rows if r["feasible"] and r.get("time_s") is None]
    st.caption(
        f"{s.algo} over bq x bk on the whole problem. Blank cells are tiles that do not fit "
        "the SRAM or the thread limits (hover for the reason). The star marks the fastest "
        f"tiles (lowest {speed}), the same cell on all three maps."
    )
    if timed and unsimulated:
        st.info(
            f"{len(unsimulated)} of the tile settings that fit were not simulated: each has "
            f"more than {data.SWEEP_ENGINE_MAX_TRIPS:,} loads and stores, the app's limit for "
            "staying interactive. Their time cells are blank and the star is the fastest of "
            "the simulated cells; `hbmsim sweep` simulates them all."
        )
    c1, c2, c3 = st.columns(3)
    c1.plotly_chart(
        sweeps.sweep_heatmap(rows, "hbm_bytes", "HBM traffic (counted)", star),
        width="stretch",
        key="hm_bytes",
    )
    c2.plotly_chart(
        sweeps.sweep_heatmap(rows, "trips", "trips", star), width="stretch", key="hm_trips"
    )
    c3.plotly_chart(
        sweeps.sweep_heatmap(
            rows,
            metric,
            speed,
            star,
            missing=f"not simulated: more than {data.SWEEP_ENGINE_MAX_TRIPS:,} loads and stores "
            "(the app's limit for staying interactive)",
        ),
        width="stretch",
        key="hm_time",
    )
    ran = [r for r in rows if r["feasible"] and r.get(metric) is not None]
    if star is not None:
        best = next(r for r in ran if (r["bq"], r["bk"]) == star)
        st.metric(f"fastest tiles (lowest {speed})", f"bq {best['bq']} x bk {best['bk']}")
        st.caption(
            f"{speed} {fmt.seconds(best[metric])}, HBM traffic {fmt.bytes_(best['hbm_bytes'])}, "
            f"{best['trips']:,} trips"
        )
    elif ran:
        st.info(
            f"Every tile setting that runs takes the same {speed} here "
            f"({fmt.seconds(ran[0][metric])}): no tiles are faster than others, so none is "
            "starred."
        )
    st.download_button(
        "Download tile sweep (CSV)",
        data.rows_csv(rows),
        file_name="tile-sweep.csv",
        mime="text/csv",
    )

try:
    decoding = s.problem().seq_q == 1
except HbmsimError:  # an invalid problem: the page has said what is wrong
    decoding = None
if decoding is not None and (s.algo == "split-kv" or decoding):
    st.subheader("Splits of the K/V sequence (split-kv)")
    splits, picked = guarded(
        data.split_sweep, s, default=([], None), what="Sweeping split-kv's K/V splits"
    )
    timed = [r for r in splits if r["feasible"] and r.get("time_s") is not None]
    if timed:
        st.plotly_chart(sweeps.splits_chart(splits, picked), width="stretch", key="splits")
        best = min(timed, key=lambda r: r["time_s"])
        st.caption(
            "split-kv (the textbook Flash-Decoding) cuts each head's K/V sequence into chunks "
            "run by CTAs of their own, then a combine kernel merges their partial outputs: "
            "more splits fill more SMs, at the price of partials written and read back. "
            f"Fastest here: {best['splits']:,} splits, {fmt.seconds(best['time_s'])}; "
            f"split-kv picks {picked:,} by itself (enough CTAs for two per SM)"
            + ("" if s.algo == "split-kv" else "; its tiles are its defaults")
            + "."
        )
    elif splits:
        st.info(
            "No split count was simulated: each has more than "
            f"{data.SWEEP_ENGINE_MAX_TRIPS:,} loads and stores, the app's limit for staying "
            "interactive (`hbmsim sweep --algo split-kv --splits N` simulates them)."
        )

st.subheader("Scaling with sequence length")
scaling = guarded(data.scaling_rows, s, default=[], what="Simulating the scaling plot")
if scaling and not any(r["feasible"] for r in scaling):
    first = scaling[0]  # said unless the same refusal is on the page already (show_errors)
    show_errors([(f"{first['algo']} at {first['seq_k']:,} tokens", first["reason"])])
    st.info(
        "Nothing to plot: no algorithm runs this problem at any of the lengths "
        f"{', '.join(f'{n:,}' for n in data.SCALING_SEQS)}."
    )
    scaling = []
if scaling:
    a, b = st.columns(2)
    a.plotly_chart(
        sweeps.scaling(scaling, "hbm_bytes", "HBM traffic (counted)"),
        width="stretch",
        key="scale_bytes",
    )
    if any(r.get("time_s") is not None for r in scaling):
        b.plotly_chart(
            sweeps.scaling(scaling, "time_s", "predicted time"),
            width="stretch",
            key="scale_time",
        )
    else:  # an empty plot would say nothing: say why there is none
        b.info(
            "No predicted time to plot: every run here has more than "
            f"{data.SCALING_ENGINE_MAX_TRIPS:,} loads and stores, the app's limit for staying "
            "interactive (`hbmsim sweep --seq ...` simulates them)."
        )
    untimed = sorted({r["seq_k"] for r in scaling if r["feasible"] and r.get("time_s") is None})
    decoding = s.problem().seq_q == 1
    st.caption(
        "The textbook standard, FA1 and FA2 at their default tiles on the sidebar's problem, "
        + (
            "one query row against a KV cache of each length"
            if decoding
            else "query and key/value lengths set to each length"
        )
        + f" (the sidebar's {s.algo} and tiles are the tile sweep's above). "
        "Slopes are least-squares fits in log-log: 2 means quadratic in sequence length. "
        "Times are simulated where a run has at most "
        f"{data.SCALING_ENGINE_MAX_TRIPS:,} loads and stores"
        + (
            f"; left out of the time plot: {', '.join(f'{n:,}' for n in untimed)} tokens "
            "for the algorithms that exceed it."
            if untimed
            else "."
        )
    )
    st.download_button(
        "Download scaling (JSON)",
        json.dumps(scaling, indent=1),
        file_name="scaling.json",
        mime="application/json",
    )

st.subheader("SRAM size: FlashAttention's N² d² / M")
points, skipped = guarded(data.sram_points, s, default=([], []), what="Counting FA1 per SRAM size")
by_why: dict[str, list[int]] = {}
for kib, why in skipped:
    by_why.setdefault(user_message(why), []).append(kib)
if not points and len(by_why) == 1 and errors_shown():
    st.info("Nothing to plot: FA1 runs this problem at no SRAM size (see the error above).")
else:
    for why, sizes in by_why.items():
        st.caption(f"SRAM {', '.join(f'{k:,}' for k in sizes)} KiB per SM left out: {why}")
if points:
    p = s.problem()
    ref = [theorem2_flash_accesses(p.seq_k, p.head_dim, m // p.itemsize) for m, _ in points]
    scale = points[0][1] / ref[0]  # Theorem 2's curve through the first point
    st.plotly_chart(
        sweeps.sram_sweep(points, [r * scale for r in ref]), width="stretch", key="sram"
    )
    st.download_button(
        "Download SRAM sweep (JSON)",
        json.dumps([{"sram_bytes_per_sm": m, "hbm_bytes": b} for m, b in points]),
        file_name="sram-sweep.json",
        mime="application/json",
    )
