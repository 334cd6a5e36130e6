"""flash-attn 1.x backward as tile programs (fmha_dgrad_kernel_1xN_loop.h, launched by
fmha_bwd_launch_template.h `run_fmha_bwd_loop`); see fa1_kernels for the forward.

With one split, one CTA per (batch, head) loops over K/V blocks; D = rowsum(dO o O) is
computed at the first block and stored; dQ accumulates in an fp32 dq_tmp in memory across
blocks and is written in the dtype at the last. With more, one CTA per (batch, head, K/V
block) adds dQ atomically into dq_tmp, after a zero fill and `fmha_bwd_dot_do_o_kernel`, and
`dq.copy_(dq_tmp)` converts it (fmha_api.cpp mha_bwd).

Within a step the order is the dgrad loop's, and each load sits where the kernel waits for
it (its loads go to registers and are waited for at first use, as in the forward): S = Q Kᵀ,
P with this step's lse, dP = dO Vᵀ, dS with its D, dQ = dS K, dV += Pᵀ dO; the next step's Q
and dO, committed to shared memory before dK += dSᵀ Q (`gmem_q.commit`, `gmem_do.commit`;
the first block computes the next step's D from its dO and O there, `dot_do_o`); then the
dq_tmp of this step (after the first block), first read by the dQ reduction after dK
(`smem_dq.load`), and the next step's lse and D (`gmem_softmax_lse.load`,
`gmem_softmax_d.load`, issued between the dO commit and dK). With stages 2 the engine issues
each load one compute step before that point: the next Q and dO at the step's first GEMM
(the kernel: after the softmax, and after dP for dO), the dq_tmp, lse and D at dK's start,
as the kernel does. The shared-memory traffic behind its barriers (dQ's partials summed
across the warps, P and dS transposed, the Q and dO commits) is charged on top of the math
(`loop_costs.fa1_bwd_smem_bytes_per_flop`).
"""

from __future__ import annotations

import numpy as np

from ...algorithms import tilemath as tm
from ...algorithms.blocks import block_classes, n_blocks, span
from ...algorithms.flash import score_tile
from ...algorithms.flash_bwd import grad_dk, grad_dp, grad_ds, grad_dv, grad_tensors
from ...algorithms.loop_costs import fa1_bwd_smem_bytes_per_flop
from ...problem.attention import STAT_ITEMSIZE, Problem
from ...program.plan import Buffer, CtaClass, Ctx, Kernel, TensorSpec
from ..common import GRID_B_H_SPLIT
from ..philox import FA1_PER_ELEMENT
from .kernels import first_step, is_final_write, kv_block_runs, query_steps
from .rules import BWD_WARPS, STEP_M, Fa1Kernel

WARP = 32
PRE_ROWS = 128  # fmha_bwd_dot_do_o_kernel grid (b, h, ceil(seqlen_q / 128))
COPY_ROWS = 64  # rows per CTA of the zero fill and the dq copy (elementwise torch kernels)


# --- backward --------------------------------------------------------------------------------


def _bwd_tensors(p: Problem) -> dict[str, TensorSpec]:
    t = grad_tensors(p)
    b, h, nq, d = p.batch, p.heads, p.seq_q, p.head_dim
    t["D"] = TensorSpec("D", (b, h, nq), STAT_ITEMSIZE, "intermediate", "softmax_d")
    t["dQ_tmp"] = TensorSpec(
        "dQ_tmp", (b, h, nq, d), STAT_ITEMSIZE, "intermediate", "dq_tmp: dQ accumulated in fp32"
    )
    return t


def _bwd_buffers(p: Problem, k: Fa1Kernel) -> tuple[Buffer, ...]:
    it, n, dd = p.itemsize, k.n, k.d
    return (
        Buffer("Qi", (STEP_M, dd), it),  # smem_q
        Buffer("dOi", (STEP_M, dd), it),  # smem_q (dO)
        Buffer("Kj", (n, dd), it),  # smem_v
        Buffer("Vj", (n, dd), it, registers=k.v_in_regs),  # V_IN_REGS: one smem_v only
        Buffer("dQi", (BWD_WARPS, STEP_M, dd), STAT_ITEMSIZE),  # smem_dq
        Buffer("S", (STEP_M, n), 2),  # smem_s: P
        Buffer("dP", (STEP_M, n), 2),  # smem_s: dS
        Buffer("dKj", (n, dd), STAT_ITEMSIZE, registers=True),
        Buffer("dVj", (n, dd), STAT_ITEMSIZE, registers=True),
        Buffer("Oi", (STEP_M, dd), it, registers=True),
        Buffer("lse", (STEP_M,), STAT_ITEMSIZE, registers=True),
        Buffer("D", (STEP_M,), STAT_ITEMSIZE, registers=True),
    )


def _inputs(ctx: Ctx, p: Problem, b, h, rows, with_o: bool):
    """A step's Q and dO tiles, and its O where the first K/V block computes D from it."""
    d = p.head_dim
    qi = ctx.load("Qi", "Q", (b, h, rows, (0, d)))
    doi = ctx.load("dOi", "dO", (b, h, rows, (0, d)))
    o = ctx.load("Oi", "O", (b, h, rows, (0, d))) if with_o else None
    return qi, doi, o


def _stats(ctx: Ctx, b, h, rows, di, computed: bool):
    """A step's lse, and its D unless the first K/V block `computed` it (then `di`)."""
    lse = ctx.load("lse", "lse", (b, h, rows))
    return lse, (di if computed else ctx.load("D", "D", (b, h, rows)))


def _dot(ctx: Ctx, p: Problem, b, h, rows, doi, o):
    """The first K/V block's D = rowsum(dO ∘ O) of a step (dot_do_o), stored for the others."""
    r = rows[1] - rows[0]
    di = ctx.compute(lambda x, y: (x * y).sum(axis=1), doi, o, vector=2 * r * p.head_dim, out="D")
    ctx.store("D", "D", (b, h, rows), di)
    return di


def _first_inputs(ctx: Ctx, p: Problem, b, h, rows, first: bool):
    """A K/V block's first step's (Q, dO, lse, D), loaded before its steps (the first block
    computes D from dO and O)."""
    qi, doi, o = _inputs(ctx, p, b, h, rows, first)
    di = _dot(ctx, p, b, h, rows, doi, o) if first else None
    return (qi, doi, *_stats(ctx, b, h, rows, di, first))


def _bwd_step(ctx: Ctx, p: Problem, b, h, rows, cols, kj, vj, dk, dv, pad, cur, nxt, dot):
    """One 16-row step against one K/V block in the dgrad loop's order, each load where the
    kernel waits for it (the module docstring): S = Q Kᵀ and P with this step's lse, dP = dO
    Vᵀ, dS with its D, dQ = dS K, dV += Pᵀ dO; then the next step's Q and dO (and O, whose D
    the first block computes with `dot`), committed to shared memory before dK += dSᵀ Q.
    `cur`: this step's (Q, dO, lse, D). Returns (dQ, dK, dV, the next step's Q, dO and D,
    None without a next step)."""
    br, bc, dd = pad
    qi, doi, lse, di = cur
    s = score_tile(ctx, p, qi, kj, rows, cols, pad)
    pij = ctx.compute(tm.exp_minus, s, lse, vector=br * bc, exp=br * bc, out="S")
    dp = grad_dp(ctx, p, b, h, rows, cols, pad, doi, vj)
    ds = grad_ds(ctx, pad, pij, dp, di)
    scale = p.softmax_scale
    dq = ctx.compute(
        lambda g_, k_: scale * (g_ @ k_), ds, kj, matmul=2 * br * bc * dd, vector=br * dd, out="dQi"
    )
    dv = grad_dv(ctx, p, b, h, rows, cols, pad, dv, pij, doi, rng=FA1_PER_ELEMENT)
    ahead = None
    if nxt is not None:
        q_n, do_n, o_n = _inputs(ctx, p, b, h, nxt, dot)
        ahead = (q_n, do_n, _dot(ctx, p, b, h, nxt, do_n, o_n) if dot else None)
    dk = grad_dk(ctx, p, pad, dk, ds, qi)
    return dq, dk, dv, ahead


def _open_block(ctx: Ctx, p: Problem, b, h, cols):
    """A K/V block's start in either backward kernel: K and V in, dK and dV accumulators at
    zero (in registers across the block's steps)."""
    c, d = cols[1] - cols[0], p.head_dim
    kj = ctx.load("Kj", "K", (b, h, cols, (0, d)))
    vj = ctx.load("Vj", "V", (b, h, cols, (0, d)))
    dk = ctx.compute(tm.zeros, c, d, out="dKj")
    dv = ctx.compute(tm.zeros, c, d, out="dVj")
    return kj, vj, dk, dv


def _close_block(ctx: Ctx, p: Problem, b, h, cols, dk, dv) -> None:
    """A K/V block's end: its dK and dV written once."""
    d = p.head_dim
    ctx.store("dKj", "dK", (b, h, cols, (0, d)), dk)
    ctx.store("dVj", "dV", (b, h, cols, (0, d)), dv)


def backward_loop_kernel(p: Problem, k: Fa1Kernel) -> tuple[list[Kernel], dict]:
    nq, nk, d, n = p.seq_q, p.seq_k, p.head_dim, k.n
    tc = n_blocks(nk, n)
    n_steps = n_blocks(nq, STEP_M)
    pad = (STEP_M, n, k.d)
    tensors = _bwd_tensors(p)

    def program(ctx: Ctx, cta):
        b, h = cta
        for j in ctx.loop(kv_block_runs(p, tc)):
            cols = span(j, n, nk)
            kj, vj, dk, dv = _open_block(ctx, p, b, h, cols)
            start = first_step(p, n, j, 0, 1)
            first = j == 0  # the first block computes D = rowsum(dO o O) and stores it
            cur = _first_inputs(ctx, p, b, h, span(start, STEP_M, nq), first)
            for g in ctx.loop(query_steps(p, n, j, start, 1, ahead=True)):
                rows = span(g, STEP_M, nq)
                nxt = span(g + 1, STEP_M, nq) if g + 1 < n_steps else None
                dq, dk, dv, ahead = _bwd_step(
                    ctx, p, b, h, rows, cols, kj, vj, dk, dv, pad, cur, nxt, first
                )
                if not first:  # dq_tmp, first read by the reduction after dK (smem_dq.load)
                    prev = ctx.load("dQi", "dQ_tmp", (b, h, rows, (0, d)))
                if ahead is not None:  # the next step's lse and D go out before dK too
                    cur = (ahead[0], ahead[1], *_stats(ctx, b, h, nxt, ahead[2], first))
                if not first:
                    dq = ctx.compute(np.add, prev, dq, vector=(rows[1] - rows[0]) * d, out="dQi")
                final = is_final_write(p, n, j, tc, g)
                ctx.store("dQi", "dQ" if final else "dQ_tmp", (b, h, rows, (0, d)), dq)
            _close_block(ctx, p, b, h, cols, dk, dv)

    kernel = Kernel(
        "fmha_bwd_dq_dk_dv_loop_kernel",
        (CtaClass((range(p.batch), range(p.heads))),),
        _bwd_buffers(p, k),
        program,
        BWD_WARPS * WARP,
        stages=2,  # loads issued a compute step ahead of where they are waited for
        smem_bytes_per_flop=fa1_bwd_smem_bytes_per_flop(n, k.d, p.itemsize, BWD_WARPS, n_steps),
        pass_="bwd",
        description=f"one CTA per head: {n}-key blocks outer, 16-row steps inner, dQ in fp32 "
        "dq_tmp between blocks",
        launch_order=(1, 0),  # grid (b, h): batch fastest
    )
    return [kernel], tensors


def backward_parallel_kernels(p: Problem, k: Fa1Kernel) -> tuple[list[Kernel], dict]:
    nq, nk, d, n = p.seq_q, p.seq_k, p.head_dim, k.n
    pad = (STEP_M, n, k.d)
    tensors = _bwd_tensors(p)
    threads = BWD_WARPS * WARP
    n_steps = n_blocks(nq, STEP_M)

    def main(ctx: Ctx, cta):  # fmha_bwd_q_dk_dv_loop_seqparallel_kernel
        b, h, j = cta
        cols = span(j, n, nk)
        kj, vj, dk, dv = _open_block(ctx, p, b, h, cols)
        start = first_step(p, n, j, 0, 1)
        cur = _first_inputs(ctx, p, b, h, span(start, STEP_M, nq), False)
        for g in ctx.loop(query_steps(p, n, j, start, 1, ahead=True)):
            rows = span(g, STEP_M, nq)
            nxt = span(g + 1, STEP_M, nq) if g + 1 < n_steps else None
            dq, dk, dv, ahead = _bwd_step(
                ctx, p, b, h, rows, cols, kj, vj, dk, dv, pad, cur, nxt, False
            )
            if ahead is not None:
                cur = (ahead[0], ahead[1], *_stats(ctx, b, h, nxt, None, False))
            ctx.atomic_add("dQi", "dQ_tmp", (b, h, rows, (0, d)), dq)
        _close_block(ctx, p, b, h, cols, dk, dv)

    tc = n_blocks(nk, n)
    kv_grid = tuple(CtaClass((range(p.batch), range(p.heads), r)) for r in kv_block_runs(p, tc))
    kernels = [
        _zero_dq_tmp_kernel(p, threads),
        _dot_do_o_kernel(p, threads),
        Kernel(
            "fmha_bwd_q_dk_dv_loop_seqparallel_kernel",
            kv_grid,
            _bwd_buffers(p, k),
            main,
            threads,
            stages=2,  # as the loop kernel's
            smem_bytes_per_flop=fa1_bwd_smem_bytes_per_flop(n, k.d, p.itemsize, BWD_WARPS, n_steps),
            pass_="bwd",
            description=f"one CTA per {n}-key block, dQ added atomically into fp32 dq_tmp",
            launch_order=GRID_B_H_SPLIT,
        ),
        _copy_dq_kernel(p, threads),
    ]
    return kernels, tensors


def _row_grid(p: Problem, rows: int) -> tuple[CtaClass, ...]:
    """(batch, head, row block) CTAs of `rows` query rows each."""
    return tuple(
        CtaClass((range(p.batch), range(p.heads), r)) for r in block_classes(p.seq_q, rows)
    )


def _zero_dq_tmp_kernel(p: Problem, threads: int) -> Kernel:
    """dq_tmp.zero_(): the fp32 dQ accumulator the sequence-parallel kernel adds into."""
    nq, d = p.seq_q, p.head_dim

    def zero(ctx: Ctx, cta):
        b, h, i = cta
        rows = span(i, COPY_ROWS, nq)
        z = ctx.compute(tm.zeros, rows[1] - rows[0], d, out="X")
        ctx.store("X", "dQ_tmp", (b, h, rows, (0, d)), z)

    cr = min(COPY_ROWS, nq)
    return Kernel(
        "zero_dq_tmp",
        _row_grid(p, COPY_ROWS),
        (Buffer("X", (cr, d), STAT_ITEMSIZE),),
        zero,
        threads,
        pass_="bwd",
        description="dq_tmp.zero_()",
    )


def _dot_do_o_kernel(p: Problem, threads: int) -> Kernel:
    """fmha_bwd_dot_do_o_kernel: D = rowsum(dO * O) before the loop kernel."""
    nq, d = p.seq_q, p.head_dim

    def dot(ctx: Ctx, cta):
        b, h, i = cta
        rows = span(i, PRE_ROWS, nq)
        do_ = ctx.load("dOi", "dO", (b, h, rows, (0, d)))
        o = ctx.load("Oi", "O", (b, h, rows, (0, d)))
        di = ctx.compute(
            lambda x, y: (x * y).sum(axis=1), do_, o, vector=2 * (rows[1] - rows[0]) * d, out="D"
        )
        ctx.store("D", "D", (b, h, rows), di)

    pr = min(PRE_ROWS, nq)
    return Kernel(
        "fmha_bwd_dot_do_o_kernel",
        _row_grid(p, PRE_ROWS),
        (
            Buffer("dOi", (pr, d), p.itemsize, registers=True),
            Buffer("Oi", (pr, d), p.itemsize, registers=True),
            Buffer("D", (pr,), STAT_ITEMSIZE, registers=True),
        ),
        dot,
        threads,
        pass_="bwd",
        description="D = rowsum(dO * O)",
        launch_order=GRID_B_H_SPLIT,
    )


def _copy_dq_kernel(p: Problem, threads: int) -> Kernel:
    """dq.copy_(dq_tmp): the fp32 accumulator cast into dQ."""
    nq, d = p.seq_q, p.head_dim

    def copy(ctx: Ctx, cta):
        b, h, i = cta
        rows = span(i, COPY_ROWS, nq)
        x = ctx.load("X", "dQ_tmp", (b, h, rows, (0, d)))
        ctx.store("Y", "dQ", (b, h, rows, (0, d)), x)

    cr = min(COPY_ROWS, nq)
    return Kernel(
        "copy_dq",
        _row_grid(p, COPY_ROWS),
        (Buffer("X", (cr, d), STAT_ITEMSIZE), Buffer("Y", (cr, d), p.itemsize)),
        copy,
        threads,
        pass_="bwd",
        description="dq.copy_(dq_tmp)",
    )
