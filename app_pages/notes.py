"""The walkthrough's visible notes: every limit or simplification the page applies, said."""

from __future__ import annotations

from app_pages import data
from app_pages.state import Settings
from hbmsim import fmt


def cut_lengths(s: Settings, walk: dict) -> list[tuple[str, int, int]]:
    """(length, the sidebar's, the animation's) for each length the animation cut."""
    p, shown = s.problem(), walk["problem"]
    return [
        (what, full, kept)
        for what, full, kept in (
            ("query length", p.seq_q, shown["seq_q"]),
            ("key/value length", p.seq_k, shown["seq_k"]),
        )
        if full != kept
    ]


def walk_notes(s: Settings, walk: dict) -> list[str]:
    p, shown = s.problem(), walk["problem"]
    notes = []
    cut = [f"{what} {full:,} was cut to {kept:,}" for what, full, kept in cut_lengths(s, walk)]
    if cut and walk["sides"]:
        notes.append(
            f"The animation replays every load and store of one head, so it keeps to at most "
            f"{data.WALK_MAX_SEQ:,} tokens: your {' and '.join(cut)}. The Sweep and Roofline "
            "pages use the whole problem."
        )
    if p.batch * p.heads > 1 and walk["sides"]:
        notes.append(
            f"Animated: one head (batch 0, head 0) of your {p.batch:,} x {p.heads:,}, "
            "simulated on its own, so it has the GPU to itself; the Sweep and Roofline pages "
            "simulate all of them together."
        )
    if shown["seq_q"] == 1:
        notes.append("Decoding: one query row, so Q, S, P and O are one tile high.")
    for side in walk["sides"]:
        if side.get("host_time_s", 0) > side["time_s"]:
            notes.append(
                f"{side['algo']} is what a library runs, called from Python: besides its "
                f"kernels' {fmt.seconds(side['time_s'])}, each call costs the host "
                f"{fmt.seconds(side['host_time_s'])} of launches and framework operations, "
                "more than the GPU's work on one head. The animation shows the GPU's time; "
                "the Sweep and Roofline pages, the whole call's."
            )
        if side["timeline_truncated"]:
            notes.append(
                f"{side['algo']}: the engine keeps a timeline of at most 500,000 ops, and this "
                "run has more: its tiles and totals stop at the last op recorded (its time "
                "is the whole run's). Larger tiles or a shorter sequence show all of it."
            )
        if "fa1_fwd" in side["kernels"]:
            ctas = side["ctas"][side["kernels"].index("fa1_fwd")]
            notes.append(
                f"FA1 as the paper's Algorithm 1 writes it: one CTA per (batch, head) "
                f"({ctas:,} here) loops over K/V blocks outside and Q blocks inside, "
                "reading and writing O, ℓ and m in HBM at every step, so one head runs on one "
                f"SM of the GPU's {s.hardware().sm_count:,}. That is why it can be slower than "
                "standard attention; FA2 gives each Q block its own CTA."
            )
    return notes
