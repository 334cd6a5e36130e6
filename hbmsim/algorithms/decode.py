"""Split-KV decoding (flash-decoding): the K/V sequence cut into `splits` chunks.

When the query is short (decoding: seq_q of 1 or a few tokens against a long KV cache),
FA2's one CTA per (batch, head, Q block) leaves most SMs idle at small batch. Split-KV runs one
CTA per (batch, head, split, Q block): each streams its chunk of K/V with the online softmax and
writes a partial output (normalised within its chunk, fp32) and its log-sum-exp; a combine
kernel rescales the partials by exp(lse_s - lse) and sums them. Exact: the combination is the
same algebra as the online softmax across chunks.

Default splits: enough CTAs for two per SM, at most one split per K/V block.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ConfigError
from ..gpu.hardware import Hardware
from ..problem.attention import STAT_ITEMSIZE, Problem
from ..program.plan import Buffer, CtaClass, Ctx, Kernel, TensorSpec, Tiles
from . import tilemath as tm
from .blocks import block_classes, kv_blocks_for_q, n_blocks, span, split
from .flash import FA2_STAGES, THREADS, io_tensors, online_step, tile_buffers

COMBINE_STAGES = 4  # partial outputs the combine kernel keeps in flight


def default_splits(p: Problem, hw: Hardware, t: Tiles) -> int:
    ctas = p.batch * p.heads * n_blocks(p.seq_q, t.bq)
    return max(1, min(n_blocks(p.seq_k, t.bk), math.ceil(2 * hw.sm_count / ctas)))


def check_splits(p: Problem, t: Tiles, splits: int) -> None:
    tc = n_blocks(p.seq_k, t.bk)
    if isinstance(splits, bool) or not isinstance(splits, int) or not 1 <= splits <= tc:
        raise ConfigError(
            "splits", f"must be from 1 to {tc} (the K/V blocks of bk={t.bk}); got {splits!r}"
        )


def split_blocks(
    p: Problem, t: Tiles, splits: int, s: int, share_k: int | None = None
) -> tuple[int, int]:
    """K/V blocks [first, stop) of split s: consecutive, as equal as they can be. `share_k`:
    the key length the shares are cut from when it is not seq_k (a paged cache's whole pages,
    flash_attn_2/paged.py); the blocks past seq_k are still not visited."""
    per = math.ceil(n_blocks(share_k or p.seq_k, t.bk) / splits)
    tc = n_blocks(p.seq_k, t.bk)
    return min(tc, s * per), min(tc, (s + 1) * per)


def splitkv_forward(
    p: Problem, hw: Hardware, t: Tiles, splits: int
) -> tuple[list[Kernel], dict[str, TensorSpec]]:
    nq, d, dv = p.seq_q, p.head_dim, p.dv
    br = min(t.bq, nq)
    tensors = io_tensors(p)
    tensors["lse"] = TensorSpec(
        "lse", (p.batch, p.heads, nq), STAT_ITEMSIZE, "output", "log-sum-exp per row"
    )
    tensors.update(
        partial_tensors(p, splits, "each split's normalised partial output", "each split's lse")
    )

    def partial(ctx: Ctx, cta):
        b, h, s, i = cta
        rows = span(i, t.bq, nq)
        r = rows[1] - rows[0]
        segments = split_segments(p, t, splits, s, rows)
        qi = ctx.load("Qi", "Q", (b, h, rows, (0, d)))
        oi = ctx.compute(tm.zeros, r, dv, out="Oi")
        l = ctx.compute(tm.zeros, r, out="l")
        m = ctx.compute(tm.full, -np.inf, r, out="m")
        for j in ctx.loop(segments):
            cols = span(j, t.bk, p.seq_k)
            oi, l, m = online_step(ctx, p, qi, oi, l, m, b, h, rows, cols)
        oi, lse = finish_split(ctx, oi, l, m, r, dv)
        part = (s * nq + rows[0], s * nq + rows[1])
        ctx.store("Oi", "O_part", (b, h, part, (0, dv)), oi)
        ctx.store("l", "lse_part", (b, h, part), lse)

    def combine(ctx: Ctx, cta):
        b, h, i = cta
        combine_rows(ctx, p, splits, b, h, span(i, t.bq, nq))

    if p.masked:
        q_classes = [range(i, i + 1) for i in range(n_blocks(nq, t.bq))]
    else:
        q_classes = block_classes(nq, t.bq)
    s_classes = (
        [range(s, s + 1) for s in range(splits)]
        if p.masked
        else split(0, splits, equal_split_cuts(p, t, splits))
    )
    grid = tuple(
        CtaClass((range(p.batch), range(p.heads), sc, qc)) for sc in s_classes for qc in q_classes
    )
    kernels = [
        Kernel(
            "splitkv_fwd",
            grid,
            tile_buffers(p, t, FA2_STAGES),
            partial,
            THREADS,
            stages=FA2_STAGES,
            description=f"{splits} splits of K/V per (batch, head, Q block): partial O and lse",
        ),
        Kernel(
            "splitkv_combine",
            tuple(CtaClass((range(p.batch), range(p.heads), qc)) for qc in block_classes(nq, t.bq)),
            (
                Buffer("L", (splits, br), STAT_ITEMSIZE),
                Buffer("Ls", (br,), STAT_ITEMSIZE),
                Buffer("lse", (br,), STAT_ITEMSIZE),
                Buffer("Op", (br, dv), STAT_ITEMSIZE),
                Buffer("O", (br, dv), STAT_ITEMSIZE),
            ),
            combine,
            THREADS,
            description="O = sum over splits of exp(lse_s - lse) O_s",
        ),
    ]
    return kernels, tensors


def finish_split(ctx: Ctx, oi, l, m, rows: int, cols: int):
    """A split's epilogue: O / l and its log-sum-exp m + log l, charged on `rows` x `cols`
    (a kernel that pads to whole MMA tiles charges the padded sizes). A row whose split sees
    no key (causal) keeps l = 0: its O is 0 and its lse -inf, so the combine weighs it 0."""
    oi = ctx.compute(
        lambda o, l_: np.where(l_[:, None] > 0, o / np.where(l_ > 0, l_, 1)[:, None], 0.0),
        oi,
        l,
        vector=rows * cols,
        out="Oi",
    )
    lse = ctx.compute(
        lambda m_, l_: np.where(l_ > 0, m_ + np.log(np.where(l_ > 0, l_, 1)), -np.inf),
        m,
        l,
        vector=rows,
        exp=rows,
        out="l",
    )
    return oi, lse


def partial_tensors(p: Problem, splits: int, o_desc: str, lse_desc: str) -> dict:
    """O_part and lse_part, fp32: split s keeps its rows at [s * nq, (s + 1) * nq)."""
    nq = p.seq_q
    return {
        "O_part": TensorSpec(
            "O_part",
            (p.batch, p.heads, splits * nq, p.dv),
            STAT_ITEMSIZE,
            "intermediate",
            o_desc,
        ),
        "lse_part": TensorSpec(
            "lse_part", (p.batch, p.heads, splits * nq), STAT_ITEMSIZE, "intermediate", lse_desc
        ),
    }


def combine_rows(ctx: Ctx, p: Problem, splits: int, b: int, h: int, rows) -> None:
    """Rows `rows` of head (b, h): O = sum over splits of exp(lse_s - lse) O_s, and the
    log-sum-exp of the split lse's; every split's lse requested at once and kept on chip.
    Buffers: L (splits x rows of lse), lse, Op (a partial output), O (the sum)."""
    nq, d = p.seq_q, p.dv  # O's width
    r = rows[1] - rows[0]
    parts = [
        ctx.load("L", "lse_part", (b, h, (s * nq + rows[0], s * nq + rows[1])))
        for s in ctx.loop([range(splits)])
    ]
    lses = ctx.compute(lambda *xs: np.stack(xs), *parts, out="L")
    lse = ctx.compute(_logsumexp, lses, vector=3 * splits * r, exp=splits * r, out="lse")
    acc = ctx.compute(tm.zeros, r, d, out="O")
    for s in ctx.loop([range(splits)]):
        o = ctx.load("Op", "O_part", (b, h, (s * nq + rows[0], s * nq + rows[1]), (0, d)))
        acc = ctx.compute(
            lambda a_, o_, ls_, l_, s=s: a_ + tm.exp_diff(ls_[s], l_)[:, None] * o_,
            acc,
            o,
            lses,
            lse,
            vector=2 * r * d,
            exp=r,
            out="O",
        )
    ctx.store("O", "O", (b, h, rows, (0, d)), acc)
    ctx.store("lse", "lse", (b, h, rows), lse)


def split_segments(
    p: Problem,
    t: Tiles,
    splits: int,
    s: int,
    rows: tuple[int, int],
    split_band: bool = False,
    share_k: int | None = None,
) -> list[range]:
    """The K/V blocks split s of the row block `rows` visits, in iteration classes: its share
    of the sequence (split_blocks), cut to the blocks the row block sees (past the diagonal,
    or outside a window, nothing is loaded; a split left empty visits none). `split_band`:
    the share is of the row block's own band instead, split evenly (FlashAttention-3's
    hopper/block.h get_n_block_min_max with Split: num_n_blocks_per_split =
    ceil_div(n_block_max - n_block_min, num_splits)); `share_k` as in split_blocks."""
    first, stop = split_blocks(p, t, splits, s, share_k)
    visible, _ = kv_blocks_for_q(p, rows[0], rows[1], t.bk)
    if not visible:
        return []
    lo, last = visible[0][0], visible[-1][-1] + 1
    if split_band:
        per = -(-(last - lo) // splits)
        first, stop = lo + s * per, lo + (s + 1) * per
    first, stop = max(first, lo), min(stop, last)
    if stop <= first:
        return []
    return [seg for seg in split(first, stop, visible_cuts(visible)) if len(seg)]


def visible_cuts(visible: list[range]) -> list[int]:
    """Boundaries of the iteration classes kv_blocks_for_q found (masked, ragged)."""
    return [seg[0] for seg in visible] + [seg[-1] + 1 for seg in visible]


def equal_split_cuts(p: Problem, t: Tiles, splits: int, share_k: int | None = None) -> list[int]:
    """Splits alike for counting: same block count and no ragged block, versus the others."""
    shapes = [
        (b - a, b == n_blocks(p.seq_k, t.bk) and p.seq_k % t.bk != 0)
        for a, b in (split_blocks(p, t, splits, s, share_k) for s in range(splits))
    ]
    return [s for s in range(1, splits) if shapes[s] != shapes[s - 1]]


def _logsumexp(x: np.ndarray) -> np.ndarray:
    """Over splits (axis 0); splits that saw no key hold -inf and add nothing."""
    top = x.max(axis=0)
    safe = np.where(np.isneginf(top), 0.0, top)
    return np.log(np.exp(x - safe).sum(axis=0)) + safe
