"""flash-attn 2.x kernels as tile programs: forward, split-KV forward and combine, backward.

The programs are the textbook FA2 loops (schedules/flash.py `online_step`, schedules/
flash_bwd.py `fa2_backward_programs`); what is the library's here is the kernel around them:
- shared memory holds only the Q, K, V tiles (forward) or Q, dO, K, V, P, dS (backward);
  S, P, the O accumulator and the row statistics live in registers (flash_fwd_kernel.h
  `compute_attn_1rowblock`: acc_s, acc_o, scores_max, scores_sum are register fragments;
  kernel_traits.h kSmemSize = kSmemQSize + kSmemKVSize), which is why 128 x 128 tiles at head
  dim 64 fit;
- whole MMA tiles: a ragged or one-row block still costs kBlockM x kBlockN x kHeadDim of
  tensor-core work (the fragments are full; loads beyond the sequence are predicated off), so
  the math is counted padded (`pad`);
- the grid dim3(num_m_block, b, h) starts one head's row blocks together (launch order).
"""

from __future__ import annotations

import numpy as np

from ..problem import STAT_ITEMSIZE, Problem
from ..program import Buffer, CtaClass, Ctx, Kernel, TensorSpec, Tiles
from ..schedules import tilemath as tm
from ..schedules.blocks import block_classes, kv_blocks_for_q, n_blocks, span, split
from ..schedules.decode import _cuts, _equal_split_cuts, _logsumexp, _split_blocks
from ..schedules.flash import _io_tensors, fa2_forward_program, online_step
from ..schedules.flash_bwd import fa2_backward_programs
from ..schedules.kernels import gqa_reduce_kernel
from .common import GRID_BLOCK_B_H
from .fa2_rules import BwdRule, FwdRule

WARP = 32


def forward_kernel(p: Problem, t: Tiles, rule: FwdRule, d_pad: int) -> tuple[Kernel, dict]:
    """flash_fwd_kernel: one CTA per (Q block, batch, head), K/V streamed."""
    program, grid, tensors = fa2_forward_program(p, t, pad=(t.bq, t.bk, d_pad))
    it = p.itemsize
    buffers = (
        Buffer("Qi", (t.bq, d_pad), it),  # sQ
        Buffer("Kj", (t.bk, d_pad), it),  # sK: one copy; the next block's cp.async is issued
        Buffer("Vj", (t.bk, d_pad), it),  # sV  during this block's math (stages = 2)
        Buffer("S", (t.bq, t.bk), STAT_ITEMSIZE, registers=True),  # acc_s, then P
        Buffer("Oi", (t.bq, d_pad), STAT_ITEMSIZE, registers=True),  # acc_o
        Buffer("m", (t.bq,), STAT_ITEMSIZE, registers=True),
        Buffer("l", (t.bq,), STAT_ITEMSIZE, registers=True),
    )
    kernel = Kernel(
        "flash_fwd_kernel",
        grid,
        buffers,
        program,
        rule.warps * WARP,
        stages=2,
        description=f"{rule.bm} x {rule.bn} tiles, {rule.warps} warps; S, P and O in registers",
        launch_order=GRID_BLOCK_B_H,
    )
    return kernel, tensors


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
) -> tuple[list[Kernel], dict[str, TensorSpec]]:
    """flash_fwd_splitkv_kernel (+ flash_fwd_splitkv_combine_kernel when splits > 1).

    Split s of a row block visits K/V blocks [s * per, (s + 1) * per) with per =
    ceil(n_blocks / splits) (flash_fwd_kernel.h compute_attn_1rowblock_splitkv
    n_blocks_per_split), and writes an fp32 partial O and its lse; one split writes O itself.
    """
    nq, d = p.seq_q, p.head_dim
    rows_of = Rows(p, packed, bm)
    t = Tiles(bm, bn)
    tensors = _io_tensors(p)
    tensors["lse"] = TensorSpec("lse", (p.batch, p.heads, nq), STAT_ITEMSIZE, "output")
    if splits > 1:
        tensors["O_part"] = TensorSpec(
            "O_part",
            (p.batch, p.heads, splits * nq, d),
            STAT_ITEMSIZE,
            "intermediate",
            "oaccum: each split's partial output, fp32",
        )
        tensors["lse_part"] = TensorSpec(
            "lse_part",
            (p.batch, p.heads, splits * nq),
            STAT_ITEMSIZE,
            "intermediate",
            "softmax_lseaccum: each split's log-sum-exp",
        )

    def partial(ctx: Ctx, cta):
        b, h, s, i = cta
        pieces = rows_of.pieces(h, i)
        rows = rows_of.rows(h, i)
        r = sum(rr[1] - rr[0] for _, rr in pieces)
        first, stop = _split_blocks(p, t, splits, s)
        visible, _ = kv_blocks_for_q(p, rows[0], rows[1], bn)
        last = visible[-1][-1] + 1 if visible else 0
        stop = min(stop, last)
        segments = (
            [seg for seg in split(first, stop, _cuts(visible)) if len(seg)] if stop > first else []
        )
        qi = rows_of.load(ctx, "Qi", "Q", b, pieces, (0, d))
        oi = ctx.compute(tm.zeros, r, d, out="Oi")
        l = ctx.compute(tm.zeros, r, out="l")
        m = ctx.compute(tm.full, -np.inf, r, out="m")
        h0 = pieces[0][0]  # a packed block's heads share one K/V head
        for j in ctx.loop(segments):
            cols = span(j, bn, p.seq_k)
            oi, l, m = online_step(ctx, p, qi, oi, l, m, b, h0, rows, cols, (bm, bn, d_pad))
        oi = ctx.compute(
            lambda o, l_: np.where(l_[:, None] > 0, o / np.where(l_ > 0, l_, 1)[:, None], 0.0),
            oi,
            l,
            vector=bm * d_pad,
            out="Oi",
        )
        lse = ctx.compute(
            lambda m_, l_: np.where(l_ > 0, m_ + np.log(np.where(l_ > 0, l_, 1)), -np.inf),
            m,
            l,
            vector=bm,
            exp=bm,
            out="l",
        )
        if splits == 1:
            rows_of.store(ctx, "Oi", "O", b, pieces, oi, (0, d))
            rows_of.store(ctx, "l", "lse", b, pieces, lse)
            return
        part = [(hh, (s * nq + rr[0], s * nq + rr[1])) for hh, rr in pieces]
        rows_of.store(ctx, "Oi", "O_part", b, part, oi, (0, d))
        rows_of.store(ctx, "l", "lse_part", b, part, lse)

    if p.causal:
        s_classes = [range(s, s + 1) for s in range(splits)]
    else:  # splits with the same block count and no ragged block are alike
        s_classes = split(0, splits, _equal_split_cuts(p, t, splits))
    if p.causal and not packed:
        q_classes = [range(i, i + 1) for i in range(n_blocks(rows_of.n, bm))]
    else:
        q_classes = block_classes(rows_of.n, bm)
    grid = tuple(
        CtaClass((range(p.batch), range(rows_of.heads), sc, qc))
        for sc in s_classes
        for qc in q_classes
    )
    it = p.itemsize
    kernels = [
        Kernel(
            name,
            grid,
            (
                Buffer("Qi", (bm, d_pad), it),
                Buffer("Kj", (bn, d_pad), it),
                Buffer("Vj", (bn, d_pad), it),
                Buffer("S", (bm, bn), STAT_ITEMSIZE, registers=True),
                Buffer("Oi", (bm, d_pad), STAT_ITEMSIZE, registers=True),
                Buffer("m", (bm,), STAT_ITEMSIZE, registers=True),
                Buffer("l", (bm,), STAT_ITEMSIZE, registers=True),
            ),
            partial,
            warps * WARP,  # split-KV: Flash_fwd_kernel_traits<Headdim, 64, kBlockN, 4, ...>
            stages=2,
            description=f"{splits} split(s) of K/V per row block, {bm} x {bn} tiles"
            + (", query group packed per K/V head" if packed else ""),
            # grid dim3(num_m_block, splits > 1 ? splits : b, splits > 1 ? b * h : h)
            launch_order=(0, 1, 2, 3) if splits > 1 else (1, 0, 2, 3),
        )
    ]
    if splits > 1:
        kernels.append(_combine_kernel(p, splits, d_pad))
    return kernels, tensors


def combine_rows(d_pad: int) -> int:
    """kBlockM of the combine kernel (run_flash_splitkv_fwd): "if headdim is divisible by 128,
    kBlockM = 4. If headdim is divisible by 64, then we set kBlockM = 8, etc." (16 else)."""
    return 4 if d_pad % 128 == 0 else (8 if d_pad % 64 == 0 else 16)


def _combine_kernel(p: Problem, splits: int, d_pad: int) -> Kernel:
    """flash_fwd_splitkv_combine_kernel: grid ceil(b * h * seqlen_q / kBlockM), 128 threads;
    each CTA reads every split's lse for its rows, then every split's partial O."""
    nq, d = p.seq_q, p.head_dim
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


# --- backward --------------------------------------------------------------------------------


def backward_kernels(
    p: Problem, t: Tiles, rule: BwdRule, d_pad: int
) -> tuple[list[Kernel], dict[str, TensorSpec]]:
    """run_flash_bwd_seqk_parallel: flash_bwd_dot_do_o_kernel (D = rowsum(dO o O), dQaccum
    cleared) over grid_m; flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel over grid_n, dQ added
    into an fp32 accumulator with atomicAdd; flash_bwd_convert_dq_kernel over grid_m. GQA:
    mha_bwd computes dK, dV per query head and sums them over each group (at::sum_out)."""
    pre, main, convert, tensors = fa2_backward_programs(p, t, pad=(t.bq, t.bk, d_pad))
    it = p.itemsize
    threads = rule.warps * WARP
    q_grid = tuple(
        CtaClass((range(p.batch), range(p.heads), r)) for r in block_classes(p.seq_q, t.bq)
    )
    if p.causal:
        n_classes = [range(j, j + 1) for j in range(n_blocks(p.seq_k, t.bk))]
    else:
        n_classes = block_classes(p.seq_k, t.bk)
    kv_grid = tuple(CtaClass((range(p.batch), range(p.heads), r)) for r in n_classes)
    q_stages = 2 if rule.double_buffer_q else 1
    # kernel_traits.h kSmemSize1colblock = kSmemQdOSize + (Is_V_in_regs ? max(kSmemKVSize,
    # kSmemKVSize / 2 + kSmemdSSize + kSmemPSize) : kSmemKVSize + kSmemdSSize + kSmemPSize)
    v_bytes = t.bk * d_pad * it
    ds_p_bytes = 2 * t.bq * t.bk * it
    main_buffers = [
        Buffer("Qi", (q_stages, t.bq, d_pad) if q_stages > 1 else (t.bq, d_pad), it),
        Buffer("dOi", (t.bq, d_pad), it),
        Buffer("Kj", (t.bk, d_pad), it),
        Buffer("Vj", (t.bk, d_pad), it, registers=rule.v_in_regs),
        Buffer("S", (t.bq, t.bk), it),  # sP
        Buffer("dP", (t.bq, t.bk), it),  # sdS
        Buffer("dKj", (t.bk, d_pad), STAT_ITEMSIZE, registers=True),  # acc_dk
        Buffer("dVj", (t.bk, d_pad), STAT_ITEMSIZE, registers=True),  # acc_dv
        Buffer("dQi", (t.bq, d_pad), STAT_ITEMSIZE, registers=True),  # acc_dq, then atomicAdd
        Buffer("lse", (t.bq,), STAT_ITEMSIZE, registers=True),
        Buffer("D", (t.bq,), STAT_ITEMSIZE, registers=True),
    ]
    if rule.v_in_regs and v_bytes > ds_p_bytes:  # V's shared memory outlives P and dS's
        main_buffers.append(Buffer("V_stage", ((v_bytes - ds_p_bytes) // it,), it))
    kernels = [
        Kernel(
            "flash_bwd_dot_do_o_kernel",
            q_grid,
            (
                Buffer("dOi", (t.bq, d_pad), it, registers=True),
                Buffer("Oi", (t.bq, d_pad), it, registers=True),
                Buffer("D", (t.bq,), STAT_ITEMSIZE, registers=True),
                Buffer("dQi", (t.bq, d_pad), STAT_ITEMSIZE, registers=True),
            ),
            pre,
            threads,
            pass_="bwd",
            description="D = rowsum(dO * O); dQ_accum = 0 (no shared memory)",
            launch_order=GRID_BLOCK_B_H,
        ),
        Kernel(
            "flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel",
            kv_grid,
            tuple(main_buffers),
            main,
            threads,
            stages=q_stages,
            pass_="bwd",
            description=f"{rule.why}; dK, dV in registers, dQ partials added atomically",
            launch_order=GRID_BLOCK_B_H,
        ),
        Kernel(
            "flash_bwd_convert_dq_kernel",
            q_grid,
            (Buffer("dQi", (t.bq, d_pad), STAT_ITEMSIZE),),  # kSmemdQSize
            convert,
            threads,
            pass_="bwd",
            description="dQ = dQ_accum, converted to the dtype",
            launch_order=GRID_BLOCK_B_H,
        ),
    ]
    if p.group_size > 1:
        kernels.append(gqa_reduce_kernel(p))
    return kernels, tensors
