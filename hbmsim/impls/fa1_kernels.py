"""flash-attn 1.x kernels as tile programs.

Forward (fmha_fprop_kernel_1xN.h `device_1xN_loop` / `device_1xN_`): one CTA per (batch,
head, split) runs K/V blocks of N keys outer and 16-row query steps inner; split z takes the
steps z, z + splits, ... (`for (int l = blockIdx.z; l < steps; l += gridDim.z)`). The first
K/V block writes each step's output and lse; later blocks read them back (the output as fp32
o_tmp), rescale and write again; a step's last visible block writes O in the dtype. Causal:
block j starts at step j * N / 16 (`begin`), rounded to the split's stride.

Backward (fmha_dgrad_kernel_1xN_loop.h): with one split, one CTA per (batch, head) loops over
K/V blocks, D = rowsum(dO o O) is computed at the first block and stored, dQ accumulates in an
fp32 dq_tmp in memory across blocks and is written in the dtype at the last; with more, one
CTA per (batch, head, K/V block) adds dQ atomically into dq_tmp, after a zero fill and
`fmha_bwd_dot_do_o_kernel`, and `dq.copy_(dq_tmp)` converts it (fmha_api.cpp mha_bwd).
"""

from __future__ import annotations

import numpy as np

from ..problem import STAT_ITEMSIZE, Problem
from ..program import Buffer, CtaClass, Ctx, Kernel, TensorSpec
from ..schedules import tilemath as tm
from ..schedules.blocks import block_classes, n_blocks, span
from ..schedules.flash import _dropped, _io_tensors, _scores
from ..schedules.flash_bwd import _block_grads, _grad_tensors
from .common import GRID_B_H_SPLIT
from .fa1_rules import BWD_WARPS, FWD_WARPS, STEP_M, Fa1Kernel

WARP = 32
PRE_ROWS = 128  # fmha_bwd_dot_do_o_kernel grid (b, h, ceil(seqlen_q / 128))
COPY_ROWS = 64  # rows per CTA of the zero fill and the dq copy (elementwise torch kernels)


def stepped(start: int, stop: int, step: int, cuts) -> list[range]:
    """range(start, stop, step) cut at the given values into ranges of the same stride."""
    out, a = [], start
    for c in sorted({c for c in cuts if start < c < stop} | {stop}):
        first = a + (-(a - start) % step)  # the first value >= a on the stride
        if first < c:
            out.append(range(first, c, step))
        a = c
    return out


def _outer(p: Problem, tc: int) -> list[range]:
    """K/V blocks alike: first, middle, last (causal: each its own)."""
    if p.causal or tc <= 2:
        return [range(j, j + 1) for j in range(tc)]
    return [range(0, 1), range(1, tc - 1), range(tc - 1, tc)]


def _steps(p: Problem, n: int, j: int, start: int, stride: int) -> list[range]:
    """Query steps of block j from `start` on the stride, cut where a step's kind changes:
    the ragged last step, the last block a causal step sees, the steps the diagonal crosses."""
    n_steps = n_blocks(p.seq_q, STEP_M)
    cuts = {n_steps - 1} if p.seq_q % STEP_M else set()
    if p.causal:
        end = min((j + 1) * n, p.seq_k)
        cuts.add(-(-end // STEP_M))  # steps before it end in this block: their final write
        cuts.add(-(-(end - 1) // STEP_M))  # steps before it straddle the diagonal
    return stepped(start, n_steps, stride, cuts)


def _first_step(p: Problem, n: int, j: int, z: int, splits: int) -> int:
    begin = j * n // STEP_M if p.causal else 0
    return begin + (z - begin) % splits  # the first step >= begin that split z owns


def _final(p: Problem, n: int, j: int, tc: int, g: int) -> bool:
    """is_final_write: the last block, or (causal) a step that ends inside this block."""
    return j == tc - 1 or (p.causal and g * STEP_M < (j + 1) * n)


def forward_kernel(p: Problem, k: Fa1Kernel, splits: int) -> tuple[Kernel, dict]:
    nq, nk, d, n = p.seq_q, p.seq_k, p.head_dim, k.n
    tc = n_blocks(nk, n)
    pad = (STEP_M, n, k.d)
    tensors = _io_tensors(p)
    tensors["lse"] = TensorSpec("lse", (p.batch, p.heads, nq), STAT_ITEMSIZE, "output")
    if tc > 1:
        tensors["O_tmp"] = TensorSpec(
            "O_tmp",
            (p.batch, p.heads, nq, d),
            STAT_ITEMSIZE,
            "intermediate",
            "o_tmp: the running output between K/V blocks, fp32",
        )

    def program(ctx: Ctx, cta):
        b, h, z = cta
        for j in ctx.loop(_outer(p, tc)):
            cols = span(j, n, nk)
            kj = ctx.load("Kj", "K", (b, h, cols, (0, d)))
            vj = ctx.load("Vj", "V", (b, h, cols, (0, d)))
            start = _first_step(p, n, j, z, splits)
            for g in ctx.loop(_steps(p, n, j, start, splits)):
                rows = span(g, STEP_M, nq)
                _fwd_step(ctx, p, b, h, rows, cols, kj, vj, j, pad, _final(p, n, j, tc, g))

    grid = tuple(CtaClass((range(p.batch), range(p.heads), range(z, z + 1))) for z in range(splits))
    it = p.itemsize
    buffers = (
        Buffer("Qi", (2, STEP_M, k.d), it),  # smem_q, double-buffered
        Buffer("Kj", (n, k.d), it),  # one tile for K and V (SHARE_SMEM_FOR_K_AND_V)
        Buffer("Vj", (n, k.d), it, registers=True),  # "We keep the data in registers"
        Buffer("S", (STEP_M, n), STAT_ITEMSIZE, registers=True),
        Buffer("Oi", (STEP_M, k.d), STAT_ITEMSIZE),  # smem_o: fp32 reduction across warps
        Buffer("m", (STEP_M,), STAT_ITEMSIZE, registers=True),
        Buffer("l", (STEP_M,), STAT_ITEMSIZE, registers=(tc == 1)),  # smem_softmax_lse
    )
    kernel = Kernel(
        "fmha_fwd_loop_kernel",
        grid,
        buffers,
        program,
        FWD_WARPS * WARP,
        stages=2,  # "Trigger the load for the next Q values" while this step computes
        description=f"{splits} split(s) per head, 16-row steps x {n}-key blocks, 4 warps",
        launch_order=GRID_B_H_SPLIT,
    )
    return kernel, tensors


def _fwd_step(ctx: Ctx, p: Problem, b, h, rows, cols, kj, vj, j, pad, final):
    br, bc, dd = pad
    d = p.head_dim
    qi = ctx.load("Qi", "Q", (b, h, rows, (0, d)))
    first = j == 0
    if not first:
        o_prev = ctx.load("Oi", "O_tmp", (b, h, rows, (0, d)))
        lse_prev = ctx.load("l", "lse", (b, h, rows))
    s = _scores(ctx, p, qi, kj, rows, cols, pad)
    if first:  # p_max from this block alone (reduce_max with zero_init)
        m = ctx.compute(lambda s_: s_.max(axis=1), s, vector=br * bc, out="m")
    else:  # p_max starts from the previous lse (p_prev_lse)
        m = ctx.compute(
            lambda s_, l_: np.maximum(s_.max(axis=1), l_), s, lse_prev, vector=br * bc, out="m"
        )
    pij = ctx.compute(tm.exp_minus, s, m, vector=br * bc, exp=br * bc, out="S")
    if first:
        l = ctx.compute(lambda p_: p_.sum(axis=1), pij, vector=br * bc, out="l")
    else:
        l = ctx.compute(
            lambda p_, l_, m_: p_.sum(axis=1) + np.exp(l_ - m_),
            pij,
            lse_prev,
            m,
            vector=br * bc + 2 * br,
            exp=br,
            out="l",
        )
    pd = _dropped(ctx, p, pij, b, h, rows, cols)
    if first:
        o = ctx.compute(
            lambda p_, v_, l_: (p_ @ v_) / l_[:, None],
            pd,
            vj,
            l,
            matmul=2 * br * bc * dd,
            vector=br * dd,
            out="Oi",
        )
    else:
        o = ctx.compute(
            lambda p_, v_, o_, lp, m_, l_: (o_ * np.exp(lp - m_)[:, None] + p_ @ v_) / l_[:, None],
            pd,
            vj,
            o_prev,
            lse_prev,
            m,
            l,
            matmul=2 * br * bc * dd,
            vector=3 * br * dd,
            exp=br,
            out="Oi",
        )
    lse = ctx.compute(lambda m_, l_: m_ + np.log(l_), m, l, vector=br, exp=br, out="l")
    ctx.store("Oi", "O" if final else "O_tmp", (b, h, rows, (0, d)), o)
    ctx.store("l", "lse", (b, h, rows), lse)


# --- backward --------------------------------------------------------------------------------


def _bwd_tensors(p: Problem) -> dict[str, TensorSpec]:
    t = _grad_tensors(p)
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


def _bwd_step(ctx: Ctx, p: Problem, b, h, rows, cols, kj, vj, dk, dv, pad, di=None):
    """One 16-row step against one K/V block: recompute P, dV, dP, dS, dK; returns (dQ part,
    dK, dV). D is loaded unless given."""
    d, (br, bc, dd) = p.head_dim, pad
    qi = ctx.load("Qi", "Q", (b, h, rows, (0, d)))
    doi = ctx.load("dOi", "dO", (b, h, rows, (0, d)))
    lse = ctx.load("lse", "lse", (b, h, rows))
    if di is None:
        di = ctx.load("D", "D", (b, h, rows))
    s = _scores(ctx, p, qi, kj, rows, cols, pad)
    pij = ctx.compute(tm.exp_minus, s, lse, vector=br * bc, exp=br * bc, out="S")
    ds, dk, dv = _block_grads(ctx, p, b, h, rows, cols, pij, doi, qi, kj, vj, di, dk, dv, pad)
    scale = p.softmax_scale
    dq = ctx.compute(
        lambda g_, k_: scale * (g_ @ k_), ds, kj, matmul=2 * br * bc * dd, vector=br * dd, out="dQi"
    )
    return dq, dk, dv


def backward_loop_kernel(p: Problem, k: Fa1Kernel) -> tuple[list[Kernel], dict]:
    nq, nk, d, n = p.seq_q, p.seq_k, p.head_dim, k.n
    tc = n_blocks(nk, n)
    pad = (STEP_M, n, k.d)
    tensors = _bwd_tensors(p)

    def program(ctx: Ctx, cta):
        b, h = cta
        for j in ctx.loop(_outer(p, tc)):
            cols = span(j, n, nk)
            c = cols[1] - cols[0]
            kj = ctx.load("Kj", "K", (b, h, cols, (0, d)))
            vj = ctx.load("Vj", "V", (b, h, cols, (0, d)))
            dk = ctx.compute(tm.zeros, c, d, out="dKj")
            dv = ctx.compute(tm.zeros, c, d, out="dVj")
            start = _first_step(p, n, j, 0, 1)
            for g in ctx.loop(_steps(p, n, j, start, 1)):
                rows = span(g, STEP_M, nq)
                r = rows[1] - rows[0]
                di = None
                if j == 0:  # the first block computes D = rowsum(dO o O) and stores it
                    do_ = ctx.load("dOi", "dO", (b, h, rows, (0, d)))
                    o = ctx.load("Oi", "O", (b, h, rows, (0, d)))
                    di = ctx.compute(
                        lambda x, y: (x * y).sum(axis=1), do_, o, vector=2 * r * d, out="D"
                    )
                    ctx.store("D", "D", (b, h, rows), di)
                dq, dk, dv = _bwd_step(ctx, p, b, h, rows, cols, kj, vj, dk, dv, pad, di)
                if j > 0:
                    prev = ctx.load("dQi", "dQ_tmp", (b, h, rows, (0, d)))
                    dq = ctx.compute(np.add, prev, dq, vector=r * d, out="dQi")
                final = _final(p, n, j, tc, g)
                ctx.store("dQi", "dQ" if final else "dQ_tmp", (b, h, rows, (0, d)), dq)
            ctx.store("dKj", "dK", (b, h, cols, (0, d)), dk)
            ctx.store("dVj", "dV", (b, h, cols, (0, d)), dv)

    kernel = Kernel(
        "fmha_bwd_dq_dk_dv_loop_kernel",
        (CtaClass((range(p.batch), range(p.heads))),),
        _bwd_buffers(p, k),
        program,
        BWD_WARPS * WARP,
        stages=2,  # the dgrad loop also prefetches the next Q step (double-buffered smem_q)
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

    def zero(ctx: Ctx, cta):  # dq_tmp.zero_()
        b, h, i = cta
        rows = span(i, COPY_ROWS, nq)
        z = ctx.compute(tm.zeros, rows[1] - rows[0], d, out="X")
        ctx.store("X", "dQ_tmp", (b, h, rows, (0, d)), z)

    def dot(ctx: Ctx, cta):  # fmha_bwd_dot_do_o_kernel
        b, h, i = cta
        rows = span(i, PRE_ROWS, nq)
        do_ = ctx.load("dOi", "dO", (b, h, rows, (0, d)))
        o = ctx.load("Oi", "O", (b, h, rows, (0, d)))
        di = ctx.compute(
            lambda x, y: (x * y).sum(axis=1), do_, o, vector=2 * (rows[1] - rows[0]) * d, out="D"
        )
        ctx.store("D", "D", (b, h, rows), di)

    def main(ctx: Ctx, cta):  # fmha_bwd_q_dk_dv_loop_seqparallel_kernel
        b, h, j = cta
        cols = span(j, n, nk)
        c = cols[1] - cols[0]
        kj = ctx.load("Kj", "K", (b, h, cols, (0, d)))
        vj = ctx.load("Vj", "V", (b, h, cols, (0, d)))
        dk = ctx.compute(tm.zeros, c, d, out="dKj")
        dv = ctx.compute(tm.zeros, c, d, out="dVj")
        for g in ctx.loop(_steps(p, n, j, _first_step(p, n, j, 0, 1), 1)):
            rows = span(g, STEP_M, nq)
            dq, dk, dv = _bwd_step(ctx, p, b, h, rows, cols, kj, vj, dk, dv, pad)
            ctx.atomic_add("dQi", "dQ_tmp", (b, h, rows, (0, d)), dq)
        ctx.store("dKj", "dK", (b, h, cols, (0, d)), dk)
        ctx.store("dVj", "dV", (b, h, cols, (0, d)), dv)

    def copy(ctx: Ctx, cta):  # dq.copy_(dq_tmp)
        b, h, i = cta
        rows = span(i, COPY_ROWS, nq)
        x = ctx.load("X", "dQ_tmp", (b, h, rows, (0, d)))
        ctx.store("Y", "dQ", (b, h, rows, (0, d)), x)

    def grid(rows: int):
        return tuple(CtaClass((range(p.batch), range(p.heads), r)) for r in block_classes(nq, rows))

    tc = n_blocks(nk, n)
    kv_grid = tuple(CtaClass((range(p.batch), range(p.heads), r)) for r in _outer(p, tc))
    cr, pr = min(COPY_ROWS, nq), min(PRE_ROWS, nq)
    kernels = [
        Kernel(
            "zero_dq_tmp",
            grid(COPY_ROWS),
            (Buffer("X", (cr, d), STAT_ITEMSIZE),),
            zero,
            threads,
            pass_="bwd",
            description="dq_tmp.zero_()",
        ),
        Kernel(
            "fmha_bwd_dot_do_o_kernel",
            grid(PRE_ROWS),
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
        ),
        Kernel(
            "fmha_bwd_q_dk_dv_loop_seqparallel_kernel",
            kv_grid,
            _bwd_buffers(p, k),
            main,
            threads,
            stages=2,
            pass_="bwd",
            description=f"one CTA per {n}-key block, dQ added atomically into fp32 dq_tmp",
            launch_order=GRID_B_H_SPLIT,
        ),
        Kernel(
            "copy_dq",
            grid(COPY_ROWS),
            (Buffer("X", (cr, d), STAT_ITEMSIZE), Buffer("Y", (cr, d), p.itemsize)),
            copy,
            threads,
            pass_="bwd",
            description="dq.copy_(dq_tmp)",
        ),
    ]
    return kernels, tensors
