"""The walkthrough's words: the idea, the headline for the current settings, and every limit
or simplification the animation applies (one expander on the page)."""

from __future__ import annotations

from app_pages import data
from app_pages.fields import Settings
from hbmsim import HbmsimError, Problem, fmt
from hbmsim.engine.timing import TIMINGS
from hbmsim.figures.walkthrough.totals import headline_ratios

IDEA = (
    "**On a GPU the math is cheap and moving numbers is not:** FlashAttention does standard "
    "attention's math tile by tile in each SM's SRAM instead of writing the N×N score table "
    "to HBM and reading it back."
)


def headline_ui(s: Settings, ratios_box, about_box) -> None:
    """The flash algorithm against standard on the whole problem as three ratios (time, DRAM
    bytes, trips), each with its two amounts, in `ratios_box`, and what they compare in
    `about_box`; nothing when either cannot run (the page has said why)."""
    try:
        with ratios_box:
            standard, flash = data.result(s, "standard"), data.result(s, s.algo)
    except HbmsimError:
        return
    for r in headline_ratios(standard, flash):
        ratios_box.metric(
            r.what,
            r.ratio,
            delta=f"{r.standard} → {r.flash}",
            delta_color="off",
            delta_arrow="off",
            help=f"standard {r.standard}, {s.algo} {r.flash}",
            width="content",
        )
    p = s.problem()
    how = (
        f"simulated (timing: {TIMINGS[s.timing]})"
        if "time_s" in flash.extra
        else "counted: too large to simulate here"
    )
    about_box.caption(
        f"{s.algo} against standard on your whole problem ({p.batch:,} x {p.heads:,} heads, "
        f"{p.seq_q:,} x {p.seq_k:,} tokens, {p.pass_}), {how}; the animation replays one head."
    )


def reading_notes(walk: dict) -> list[str]:
    """How to read the animation, and what one frame and one displayed tile stand for."""
    notes = [
        "Each grid is a tensor cut into tiles; colours say where each tile is at each moment "
        "of simulated time, as the SimPy engine replays every load and store of one head. Both "
        "algorithms share one clock: press ▶ play, or drag the slider."
    ]
    if walk["sides"]:
        info = walk["info"]
        notes.append(
            f"{info['frames']} frames, one every {fmt.seconds(info['frame_s'])} of simulated "
            "time. "
            + " ".join(
                f"{side['algo']}: tiles {fmt.tiles(side['tiles'])}, one displayed tile = "
                f"{fmt.rows(side['row_block'], 'query')} x {fmt.rows(side['col_block'], 'key')}."
                for side in walk["sides"]
            )
        )
    return notes


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
    edge = Problem.from_dict(shown)
    if edge.masked and walk["sides"]:
        what = f"the {edge.window_text()}" if edge.windowed else "the causal mask"
        notes.append(
            f"The dashed red lines on S and P are the edges of {what}: a query row sees only "
            "the keys between them, so the tiles outside are never computed (they stay grey)."
        )
    for side in walk["sides"]:
        if side.get("splits") and side["splits"] < s.splits:
            notes.append(
                f"{side['algo']}: the animated head's {shown['seq_k']:,} keys hold "
                f"{side['splits']:,} K/V blocks of bk {side['tiles']['bk']}, so it animates "
                f"{side['splits']:,} splits; your {s.splits:,} run on the Sweep and Roofline "
                "pages."
            )
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
