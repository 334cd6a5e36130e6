"""flash-attn 2.x split-KV forward (Flash-Decoding) as tile programs: the split kernel and
its combine, and GQA decode packing.

flash_fwd_kernel.h `compute_attn_1rowblock_splitkv` and `combine_attn_seqk_parallel`,
launched by flash_fwd_launch_template.h `run_flash_splitkv_fwd`.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ...algorithms import decode
from ...algorithms import tilemath as tm
from ...algorithms.blocks import block_classes, n_blocks, span, split
from ...algorithms.decode import equal_split_cuts
from ...algorithms.flash import io_tensors, online_step
from ...problem.attention import STAT_ITEMSIZE, Problem
from ...program.plan import Buffer, CtaClass, Ctx, Kernel, TensorSpec, Tiles
from . import paged as pg
from .rules import window

WARP = 32


# --- split-KV --------------------------------------------------------------------------------


class Rows:
    """The query rows one CTA's row block holds: a block of one head's rows, or (GQA decode
    packing, `seqlenq_ngroups_swapped`) the one query row of each head in a K/V head's group."""

    def __init__(self, p: Problem, packed: bool, bm: int):
        self.p, self.packed, self.bm = p, packed, bm
        self.heads = p.kv_heads if packed else p.heads  # params.h after the swap
        self.n = p.group_size if packed else p.seq_q  # params.seqlen_q after the swap

    def pieces(self, h: int, i: int) -> list[tuple[int, tuple[int, int]]]:
        """(query head, rows) pieces of row block i of (swapped) head h."""
        r = span(i, self.bm, self.n)
        if not self.packed:
            return [(h, r)]
        g = self.p.group_size
        return [(h * g + k, (0, 1)) for k in range(*r)]

    def rows(self, h: int, i: int) -> tuple[int, int]:
        """The rows the math sees (for causal masking): a packed block is one query row."""
        return (0, 1) if self.packed else span(i, self.bm, self.n)

    def load(self, ctx: Ctx, buf: str, tensor: str, b: int, pieces, cols) -> object:
        tiles = [ctx.load(buf, tensor, (b, hh, r, cols)) for hh, r in pieces]
        if len(tiles) == 1:
            return tiles[0]
        return ctx.compute(lambda *xs: np.concatenate(xs), *tiles, out=buf)

    def store(self, ctx: Ctx, buf: str, tensor: str, b: int, pieces, value, cols=None) -> None:
        at = 0
        for hh, r in pieces:
            n = r[1] - r[0]
            part = value
            if len(pieces) > 1:
                part = ctx.compute(lambda v, a=at, n=n: v[a : a + n], value, out=buf)
            ctx.store(buf, tensor, (b, hh, r) if cols is None else (b, hh, r, cols), part)
            at += n


def splitkv_kernels(
    p: Problem,
    bm: int,
    bn: int,
    d_pad: int,
    splits: int,
    packed: bool,
    name: str = "flash_fwd_splitkv_kernel",
    warps: int = 4,
    split_band: bool = False,
    paged: bool = False,
) -> tuple[list[Kernel], dict[str, TensorSpec]]:
    """flash_fwd_splitkv_kernel (+ flash_fwd_splitkv_combine_kernel when splits > 1).

    Split s of a row block visits K/V blocks [s * per, (s + 1) * per), per =
    ceil(n_blocks / splits) (flash_fwd_kernel.h compute_attn_1rowblock_splitkv), and writes an
    fp32 partial O and its lse; one split writes O itself. `split_band`: each row block's own
    run [n_block_min, n_block_max) split evenly (FlashAttention-3's hopper/block.h
    get_n_block_min_max with Split). `paged`: K and V read by page through the block table."""
    nq, d = p.seq_q, p.head_dim
    rows_of = Rows(p, packed, bm)
    t = Tiles(bm, bn)
    share_k, kv_at, local = _paging(p, paged)
    tensors = _splitkv_tensors(p, splits) | (pg.tensors(p) if paged else {})

    def partial(ctx: Ctx, cta):
        b, h, s, i = cta
        pieces = rows_of.pieces(h, i)
        rows = rows_of.rows(h, i)
        r = sum(rr[1] - rr[0] for _, rr in pieces)
        # local: n_block_min = max(n_split_idx * n_blocks_per_split, the window's first block)
        # (flash_fwd_kernel.h compute_attn_1rowblock_splitkv); a split left empty exits early
        segments = decode.split_segments(p, t, splits, s, rows, split_band, share_k)
        if paged:
            segments, ends = _paged_start(ctx, p, b, segments, bn)
        qi = rows_of.load(ctx, "Qi", "Q", b, pieces, (0, d))
        oi = ctx.compute(tm.zeros, r, d, out="Oi")
        l = ctx.compute(tm.zeros, r, out="l")
        m = ctx.compute(tm.full, -np.inf, r, out="m")
        h0 = pieces[0][0]  # a packed block's heads share one K/V head
        for j in ctx.loop(segments):
            cols = span(j, bn, p.seq_k)
            if paged:
                pg.step_reads(ctx, b, j, *ends, bn, p.page_size)
            oi, l, m = online_step(
                ctx,
                p,
                qi,
                oi,
                l,
                m,
                b,
                h0,
                rows,
                cols,
                (bm, bn, d_pad),
                mask_all=local,
                kv_at=kv_at,
            )
        oi, lse = decode.finish_split(ctx, oi, l, m, bm, d_pad)  # padded to the MMA tile
        _store_split(ctx, rows_of, b, s, pieces, oi, lse, splits, nq, d)

    grid = _splitkv_grid(p, t, rows_of, splits, packed, share_k)
    buffers = _split_buffers(bm, bn, d_pad, p.itemsize) + ((pg.TABLE_BUFFER,) if paged else ())
    kernels = [
        Kernel(
            name,
            grid,
            buffers,
            partial,
            warps * WARP,  # split-KV: Flash_fwd_kernel_traits<Headdim, 64, kBlockN, 4, ...>
            stages=2,
            description=_split_description(splits, bm, bn, packed),
            # grid dim3(num_m_block, splits > 1 ? splits : b, splits > 1 ? b * h : h)
            launch_order=(0, 1, 2, 3) if splits > 1 else (1, 0, 2, 3),
        )
    ]
    if splits > 1:
        kernels.append(_combine_kernel(p, splits, d_pad))
    return kernels, tensors


def _paged_start(ctx: Ctx, p: Problem, b: int, segments, bn: int):
    """A split's K/V segments cut at page boundaries, after the block table's first reads;
    with the first and last block it visits (what each step's table reads depend on)."""
    segments = pg.cut_at_pages(segments, bn, p.page_size)
    pg.first_reads(ctx, b, segments, bn, p.page_size)
    return segments, ((segments[0][0], segments[-1][-1]) if segments else (0, 0))


def _paging(p: Problem, paged: bool):
    """(the K/V length the shares see, where K and V lie, whether every block is masked):
    paged, the shares (and the window's clamp) see whole pages (paged.share_k) and K and V lie
    in the page pool (paged.kv_at); local attention masks every block (mask.h Need_masking),
    as flash_fwd_kernel does."""
    share_k = pg.share_k(p) if paged else None
    seen = dataclasses.replace(p, seq_k=share_k) if paged else p
    return share_k, pg.kv_at(p) if paged else None, window(seen).is_local


def _split_description(splits: int, bm: int, bn: int, packed: bool) -> str:
    return f"{splits} split(s) of K/V per row block, {bm} x {bn} tiles" + (
        ", query group packed per K/V head" if packed else ""
    )


def _store_split(ctx: Ctx, rows_of, b, s, pieces, oi, lse, splits: int, nq: int, d: int):
    """A split's output: O and its lse where there is one split, else its fp32 partial O
    and lse in the rows of split s (the combine kernel's input)."""
    if splits == 1:
        rows_of.store(ctx, "Oi", "O", b, pieces, oi, (0, d))
        rows_of.store(ctx, "l", "lse", b, pieces, lse)
        return
    part = [(hh, (s * nq + rr[0], s * nq + rr[1])) for hh, rr in pieces]
    rows_of.store(ctx, "Oi", "O_part", b, part, oi, (0, d))
    rows_of.store(ctx, "l", "lse_part", b, part, lse)


def _split_buffers(bm: int, bn: int, d_pad: int, itemsize: int) -> tuple[Buffer, ...]:
    """The split kernel's tiles: Q, K and V in shared memory, S, O and the row statistics in
    registers."""
    return (
        Buffer("Qi", (bm, d_pad), itemsize),
        Buffer("Kj", (bn, d_pad), itemsize),
        Buffer("Vj", (bn, d_pad), itemsize),
        Buffer("S", (bm, bn), STAT_ITEMSIZE, registers=True),
        Buffer("Oi", (bm, d_pad), STAT_ITEMSIZE, registers=True),
        Buffer("m", (bm,), STAT_ITEMSIZE, registers=True),
        Buffer("l", (bm,), STAT_ITEMSIZE, registers=True),
    )


def _splitkv_tensors(p: Problem, splits: int) -> dict[str, TensorSpec]:
    """Q, K, V, O and the log-sum-exp; with splits, each split's fp32 partial O and lse."""
    tensors = io_tensors(p)
    tensors["lse"] = TensorSpec("lse", (p.batch, p.heads, p.seq_q), STAT_ITEMSIZE, "output")
    if splits > 1:
        tensors.update(
            decode.partial_tensors(
                p,
                splits,
                "oaccum: each split's partial output, fp32",
                "softmax_lseaccum: each split's log-sum-exp",
            )
        )
    return tensors


def _splitkv_grid(
    p: Problem, t: Tiles, rows_of: Rows, splits: int, packed: bool, share_k: int | None = None
) -> tuple:
    """CTA classes over (batch, heads, split, row block): splits with the same block count and
    no ragged block are alike; causal or windowed row blocks (and splits) each a class of their
    own."""
    bm = t.bq
    if p.masked:
        s_classes = [range(s, s + 1) for s in range(splits)]
    else:
        s_classes = split(0, splits, equal_split_cuts(p, t, splits, share_k))
    if p.masked and not packed:
        q_classes = [range(i, i + 1) for i in range(n_blocks(rows_of.n, bm))]
    else:
        q_classes = block_classes(rows_of.n, bm)
    return tuple(
        CtaClass((range(p.batch), range(rows_of.heads), sc, qc))
        for sc in s_classes
        for qc in q_classes
    )


def combine_rows(d_pad: int) -> int:
    """kBlockM of the combine kernel (run_flash_splitkv_fwd): "if headdim is divisible by 128,
    kBlockM = 4. If headdim is divisible by 64, then we set kBlockM = 8, etc." (16 else)."""
    return 4 if d_pad % 128 == 0 else (8 if d_pad % 64 == 0 else 16)


def _combine_kernel(p: Problem, splits: int, d_pad: int) -> Kernel:
    """flash_fwd_splitkv_combine_kernel: grid ceil(b * h * seqlen_q / kBlockM), 128 threads;
    each CTA reads every split's lse for its rows, then every split's partial O."""
    nq = p.seq_q
    kb = combine_rows(d_pad)
    if nq == 1:  # rows of consecutive heads: one flat axis, as the kernel indexes them
        n_rows = p.batch * p.heads

        def locate(cta):
            (c,) = cta
            return [divmod(r, p.heads) + ((0, 1),) for r in range(*span(c, kb, n_rows))]

        grid = tuple(CtaClass((r,)) for r in block_classes(n_rows, kb))
    else:  # rows of one head per CTA (the flat grid's CTAs cross heads; a close stand-in)

        def locate(cta):
            b, h, i = cta
            return [(b, h, span(i, kb, nq))]

        grid = tuple(CtaClass((range(p.batch), range(p.heads), r)) for r in block_classes(nq, kb))

    def combine(ctx: Ctx, cta):
        for b, h, rows in locate(cta):
            decode.combine_rows(ctx, p, splits, b, h, rows)

    return Kernel(
        "flash_fwd_splitkv_combine_kernel",
        grid,
        (
            Buffer("L", (splits, kb), STAT_ITEMSIZE),  # sLSE
            Buffer("lse", (kb,), STAT_ITEMSIZE, registers=True),
            Buffer("Op", (kb, d_pad), STAT_ITEMSIZE, registers=True),
            Buffer("O", (kb, d_pad), STAT_ITEMSIZE, registers=True),
        ),
        combine,
        4 * WARP,
        description=f"O = sum over {splits} splits of exp(lse_s - lse) O_s, {kb} rows per CTA",
    )
