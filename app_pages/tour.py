"""The guided tour: a few steps telling why tiling wins, each setting the sidebar's controls.

Each step is data: the settings it applies (everything else back to its default) and what to
look at. Every term in bold in a step's words is something on the screen at that step, spelled
as the screen spells it (a grid's title, a label, a legend entry, a total, a heading): the
browser test reads each one there. Steps are small problems (one head, 512 tokens) so that
each renders within about two seconds. Leaving the tour keeps the step's settings: free
exploration starts from there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import streamlit as st

from app_pages.fields import default_values

TOUR_BASE = {"heads": 1, "kv_heads": 1, "seq_q": 512, "seq_k": 512}


@dataclass(frozen=True)
class Step:
    title: str
    settings: dict = field(default_factory=dict)
    text: str = ""
    look: str = ""  # what to look at, in the figure or below it
    row: int | None = None  # the online-softmax panel's query row


STEPS = (
    Step(
        "1. Standard attention writes the N×N table, then reads it back",
        {"algo": "fa2"},
        "One head, 512 tokens, on an H100. Top: standard attention's three kernels; below: "
        "FlashAttention-2 on the same clock. Press **▶ play**.",
        "Watch standard's **S = QKᵀ** and **P = softmax(S)** grids: `qk` writes every tile of "
        "S (tan: **written to HBM**), `softmax` reads S back (black: **moving to/from DRAM**) "
        "and writes P, `pv` reads P again. FA2 has no S or P grid at all: its scores never "
        "leave the chip. The **DRAM bytes (after L2)** bars under the grids grow accordingly.",
    ),
    Step(
        "2. Tiles that fit in SRAM",
        {"algo": "fa2", "bq": 128, "bk": 64},
        "FA2 with 128 query rows and 64 key rows per tile. A CTA keeps its Q tile in the SM's "
        "SRAM and streams K and V through it.",
        "In FA2's grids, a **Q** tile stays green (**in SRAM**) while **K** and **V** tiles "
        "pass through. FA2's label reads **SRAM on SM 0**: what the CTAs on SM 0 hold, of all "
        "the SRAM the SM has. Tiles larger than a thread block may hold are refused: set bq "
        "to 1024 in the sidebar and the page says why.",
    ),
    Step(
        "3. The online softmax: a running max and sum",
        {"algo": "fa2"},
        "FA2 never sees a whole row of scores at once, so it keeps, per query row, the largest "
        "score so far (m) and the sum of exponentials so far (ℓ).",
        "Scroll to **One query row through the online softmax** below the animation: "
        "**running max m** rises when a K/V block holds a larger score, and the rescale bars "
        "show by how much the partial sums shrink when it does. After the last block, m + "
        "log ℓ equals naive softmax's log-sum-exp.",
        row=300,
    ),
    Step(
        "4. Why FA2 reorders the loops",
        {"algo": "fa1", "bq": 64, "bk": 64},
        "FA1 (the paper's Algorithm 1) with FA2's 64 × 64 tiles from step 1, but the loops the "
        "other way round: K/V blocks outside, Q blocks inside, one CTA per head walking them "
        "all and reading and writing O, ℓ and m in HBM at every step.",
        "FA1's **O** tiles go back and forth to HBM (black, then tan) once per K/V block, and "
        "one CTA does all the work on one SM while the others idle: compare FA1's **time** "
        "bar with standard's here, and with FA2's in step 1. FA2 swaps the loops: each Q "
        "block is its own CTA, keeps its O on chip and writes it once, and the Q blocks run "
        "on different SMs at the same time.",
    ),
    Step(
        "5. What the L2 cache absorbs",
        {"algo": "fa2", "bq": 64, "bk": 64},
        "Each of FA2's 8 CTAs streams all of K and V. The FlashAttention paper counts every "
        "such load as an HBM access; on a GPU, the 50 MB L2 cache serves most of them.",
        "K and V tiles flash cyan (an **L2 hit**: the eight CTAs ask for each tile together, "
        "one copy comes from DRAM and seven from L2), while each CTA's own Q tile comes from "
        "DRAM (black). Compare the **L2 hits** and **DRAM bytes (after L2)** totals with the "
        "**HBM accesses (paper)** one: that is the gap between the paper's count and what "
        "Nsight Compute measures.",
    ),
)


def _apply(k: int) -> None:
    """A button callback (runs before the rerun, so widget values may still change)."""
    st.session_state["tour_step"] = k
    values = default_values()
    values.update(TOUR_BASE)
    values.update(STEPS[k].settings)
    for name, value in values.items():
        st.session_state[f"w_{name}"] = value
    if STEPS[k].row is not None:
        st.session_state["follow_row"] = STEPS[k].row


def _leave() -> None:
    st.session_state["tour_step"] = None


def touring() -> bool:
    """Whether the tour is on (its panel shows instead of the button that starts it)."""
    return st.session_state.get("tour_step") is not None


def tour_button() -> None:
    st.button("▶ Take the guided tour (5 steps)", on_click=_apply, args=(0,), key="tour_start")


def tour_panel() -> Step:
    """The current step's panel: what it shows, what to look at, and the way on or out."""
    k = st.session_state["tour_step"]
    step = STEPS[k]
    with st.container(border=True):
        st.markdown(f"**Guided tour, step {step.title}**")
        st.markdown(step.text)
        st.markdown(f"**Look at:** {step.look}")
        back, nxt, leave = st.columns([1, 1, 3])
        back.button("◀ back", on_click=_apply, args=(k - 1,), disabled=k == 0, key="tour_back")
        last = k + 1 == len(STEPS)
        nxt.button(
            "next ▶",
            on_click=_apply,
            args=(min(k + 1, len(STEPS) - 1),),
            disabled=last,
            key="tour_next",
            type="primary",
        )
        leave.button("Explore freely (keep these settings)", on_click=_leave, key="tour_leave")
    return step
