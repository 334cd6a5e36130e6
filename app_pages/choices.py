"""Which choices can work for the sidebar's other settings, asked of hbmsim itself.

Why: a choice that is offered and then refused on every page (split-kv with a training step,
flash-attn-3 on an A100) wastes a visit to each page. The sidebar offers only the
algorithms that run the current problem on the current GPU and only the passes the chosen
algorithm runs, each refusal's reason in the control's help. Nothing here knows a rule of its
own: each answer is hbmsim building the plan (`build_plan`) and either succeeding or saying
why not, so a mirror that learns its backward is offered with it at once.

Plans are built for a small stand-in of the problem (one batch, one K/V head and its query
heads, lengths cut to at most PROBE_SEQ keeping their order), which costs milliseconds where
the whole problem's causal block classes can take seconds; the user's tiles are left out
(tiles that do not fit are refused on the page, naming smaller tiles).
"""

from __future__ import annotations

import dataclasses
import math

import streamlit as st

from hbmsim import HbmsimError
from hbmsim.api import build_plan
from hbmsim.problem.attention import PASSES

from .fields import FLASH_ALGOS, FLASH_IMPLS, Settings

ALGOS = FLASH_ALGOS + FLASH_IMPLS
PROBE_SEQ = 4096


def probe_settings(s: Settings) -> Settings:
    """The stand-in problem: the same shape of GQA group, dtype, mask, dropout and pass on the
    same GPU, at most PROBE_SEQ tokens (a query shorter than, equal to or longer than the keys
    stays so), no user tiles."""
    seq_q, seq_k = min(s.seq_q, PROBE_SEQ), min(s.seq_k, PROBE_SEQ)
    if seq_q == seq_k and s.seq_q != s.seq_k:
        seq_q += 1 if s.seq_q > s.seq_k else -1
    group = s.heads // s.kv_heads if s.kv_heads and s.heads % s.kv_heads == 0 else s.heads
    kv = 1 if group != s.heads or s.heads == s.kv_heads else s.kv_heads
    return dataclasses.replace(
        s, batch=1, heads=group * kv, kv_heads=kv, seq_q=seq_q, seq_k=seq_k, bq=0, bk=0, splits=0
    )


def _refusal(s: Settings, algo: str) -> str | None:
    """None when `algo` builds a plan for `s`, else hbmsim's one line saying why not."""
    try:
        build_plan(s.problem(), s.hardware(), **s.plan_args(algo))
    except HbmsimError as exc:
        return str(exc)
    return None


@st.cache_data(show_spinner=False, max_entries=256)
def _probe(s: Settings) -> tuple[dict[str, str | None], dict[str, str | None]]:
    try:
        s.problem(), s.hardware()
    except HbmsimError:  # the problem itself is refused: every page says so; filter nothing
        return dict.fromkeys(ALGOS), dict.fromkeys(PASSES)
    if _refusal(s, "standard"):  # what even standard attention refuses is the settings' fault
        return dict.fromkeys(ALGOS), dict.fromkeys(PASSES)
    algos = {a: _refusal(s, a) for a in ALGOS}
    passes = {p: _refusal(dataclasses.replace(s, pass_=p), s.algo) for p in PASSES}
    return algos, passes


def refused(s: Settings) -> tuple[dict[str, str], dict[str, str]]:
    """({algorithm: why it cannot run these settings}, {pass: why the chosen algorithm cannot
    run it}), each empty when everything runs."""
    algos, passes = _probe(probe_settings(s))
    return {a: why for a, why in algos.items() if why}, {p: why for p, why in passes.items() if why}


def splits_limit(s: Settings) -> tuple[int, int] | None:
    """(the most splits split-kv takes here: one per K/V block, the bk that sets it) for the
    whole problem, or None when split-kv cannot run it."""
    probe = dataclasses.replace(probe_settings(s), algo="split-kv", bk=s.bk)
    try:
        plan = build_plan(probe.problem(), probe.hardware(), **probe.plan_args("split-kv"))
    except HbmsimError:
        return None
    bk = plan.tiles.bk
    return max(1, math.ceil(s.seq_k / bk)), bk
