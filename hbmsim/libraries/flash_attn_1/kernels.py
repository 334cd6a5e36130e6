"""flash-attn 1.x kernels as tile programs.

Forward (fmha_fprop_kernel_1xN.h `device_1xN_loop` / `device_1xN_`): one CTA per (batch,
head, split) runs K/V blocks of N keys outer and 16-row query steps inner; split z takes the
steps z, z + splits, ... (`for (int l = blockIdx.z; l < steps; l += gridDim.z)`). The first
K/V block writes each step's output and lse; later blocks read them back (the output as fp32
o_tmp), rescale and write again; a step's last visible block writes O in the dtype. Causal:
block j starts at step j * N / 16 (`begin`), rounded to the split's stride. Within a step the
order is the kernel's, and each load sits where the kernel waits for it: its loads go to
registers (LDG), which the SM waits for at their first use, not where they are issued. The
first GEMM; the softmax, which reads this step's lse (loaded a step ahead); the next step's
Q, committed to shared memory before the second GEMM (gmem_q.commit); the second GEMM; this
step's o_tmp, first read by the epilogue after it (`out = fmha::fmul4(out,
p_prev_scale_o)`); the epilogue; the stores. With `FWD_STAGES`, the engine issues each load
two compute steps before that point: the o_tmp right after the first GEMM, as the kernel
does (`gmem_o_tmp.load` follows `gemm_q_k`), the next Q at the first GEMM's start (the kernel
triggers it after that GEMM: this errs by one GEMM early), and the next step's lse at this
step's epilogue (the kernel: mid-softmax; 4 bytes a row). The shared-memory traffic behind
its barriers (the warps' output partials summed, the softmax's reductions, the Q commit) is
charged on top of the math (`loop_costs.fa1_fwd_smem_bytes_per_flop`).

The backward is in fa1_backward.
"""

from __future__ import annotations

import numpy as np

from ...algorithms import tilemath as tm
from ...algorithms.blocks import n_blocks, span
from ...algorithms.flash import dropout_tile, io_tensors, score_tile
from ...algorithms.loop_costs import fa1_fwd_smem_bytes_per_flop
from ...problem.attention import STAT_ITEMSIZE, Problem
from ...program.plan import Buffer, CtaClass, Ctx, Kernel, TensorSpec
from ..common import GRID_B_H_SPLIT
from ..philox import FA1_PER_ELEMENT
from .rules import FWD_WARPS, STEP_M, Fa1Kernel

WARP = 32
# The forward's loads go out this many compute steps minus one ahead of where the program
# waits for them (the module docstring: the o_tmp load spans the softmax and the second GEMM)
FWD_STAGES = 3


def stepped(start: int, stop: int, step: int, cuts) -> list[range]:
    """range(start, stop, step) cut at the given values into ranges of the same stride."""
    out, a = [], start
    for c in sorted({c for c in cuts if start < c < stop} | {stop}):
        first = a + (-(a - start) % step)  # the first value >= a on the stride
        if first < c:
            out.append(range(first, c, step))
        a = c
    return out


def kv_block_runs(p: Problem, tc: int) -> list[range]:
    """K/V blocks alike: first, middle, last (causal: each its own)."""
    if p.causal or tc <= 2:
        return [range(j, j + 1) for j in range(tc)]
    return [range(0, 1), range(1, tc - 1), range(tc - 1, tc)]


def query_steps(
    p: Problem, n: int, j: int, start: int, stride: int, ahead: bool = False
) -> list[range]:
    """Query steps of block j from `start` on the stride, cut where a step's kind changes:
    the ragged last step, the last block a causal step sees, the steps the diagonal crosses;
    `ahead` (a step that loads the next step's Q): the steps before the ragged last one and
    the last, which loads none."""
    n_steps = n_blocks(p.seq_q, STEP_M)
    cuts = {n_steps - 1} if p.seq_q % STEP_M else set()
    if ahead:
        cuts |= {n_steps - stride, n_steps - 1 - stride}
    if p.causal:
        end = min((j + 1) * n, p.seq_k)
        cuts.add(-(-end // STEP_M))  # steps before it end in this block: their final write
        cuts.add(-(-(end - 1) // STEP_M))  # steps before it straddle the diagonal
    return stepped(start, n_steps, stride, cuts)


def first_step(p: Problem, n: int, j: int, z: int, splits: int) -> int:
    begin = j * n // STEP_M if p.causal else 0
    return begin + (z - begin) % splits  # the first step >= begin that split z owns


def is_final_write(p: Problem, n: int, j: int, tc: int, g: int) -> bool:
    """is_final_write: the last block, or (causal) a step that ends inside this block."""
    return j == tc - 1 or (p.causal and g * STEP_M < (j + 1) * n)


def forward_kernel(p: Problem, k: Fa1Kernel, splits: int) -> tuple[Kernel, dict]:
    nq, nk, d, n = p.seq_q, p.seq_k, p.head_dim, k.n
    tc = n_blocks(nk, n)
    pad = (STEP_M, n, k.d)
    tensors = io_tensors(p)
    tensors["lse"] = TensorSpec("lse", (p.batch, p.heads, nq), STAT_ITEMSIZE, "output")
    if tc > 1:
        tensors["O_tmp"] = TensorSpec(
            "O_tmp",
            (p.batch, p.heads, nq, d),
            STAT_ITEMSIZE,
            "intermediate",
            "o_tmp: the running output between K/V blocks, fp32",
        )

    n_steps = n_blocks(nq, STEP_M)

    def program(ctx: Ctx, cta):
        b, h, z = cta
        for j in ctx.loop(kv_block_runs(p, tc)):
            cols = span(j, n, nk)
            kj = ctx.load("Kj", "K", (b, h, cols, (0, d)))
            vj = ctx.load("Vj", "V", (b, h, cols, (0, d)))
            start = first_step(p, n, j, z, splits)
            if start >= n_steps:
                continue
            # the first step's Q before the steps
            qi = ctx.load("Qi", "Q", (b, h, span(start, STEP_M, nq), (0, d)))
            for g in ctx.loop(query_steps(p, n, j, start, splits, ahead=True)):
                rows = span(g, STEP_M, nq)
                nxt = span(g + splits, STEP_M, nq) if g + splits < n_steps else None
                final = is_final_write(p, n, j, tc, g)
                qi = _fwd_step(ctx, p, b, h, rows, cols, kj, vj, j, pad, final, qi, nxt)

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
        stages=FWD_STAGES,  # loads issued ahead of where they are waited for (see above)
        smem_bytes_per_flop=fa1_fwd_smem_bytes_per_flop(
            n, k.d, it, FWD_WARPS, -(-n_steps // splits)
        ),
        description=f"{splits} split(s) per head, 16-row steps x {n}-key blocks, 4 warps",
        launch_order=GRID_B_H_SPLIT,
    )
    return kernel, tensors


def _fwd_step(ctx: Ctx, p: Problem, b, h, rows, cols, kj, vj, j, pad, final, qi, nxt):
    """One 16-row step in device_1xN_'s order, each load where the kernel waits for it (the
    module docstring): the first GEMM; the softmax, after this step's lse (after the first
    K/V block); the next step's Q (committed to shared memory before the second GEMM); the
    second GEMM; this step's o_tmp, read by the epilogue; the epilogue; the stores. Returns
    the next step's Q (None at the last step)."""
    br, bc, dd = pad
    d = p.head_dim
    first = j == 0
    s = score_tile(ctx, p, qi, kj, rows, cols, pad)
    if first:  # p_max from this block alone (reduce_max with zero_init)
        m = ctx.compute(lambda s_: s_.max(axis=1), s, vector=br * bc, out="m")
    else:  # p_max starts from the previous lse (p_prev_lse)
        lse_prev = ctx.load("l", "lse", (b, h, rows))
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
    pd = dropout_tile(ctx, p, pij, b, h, rows, cols, rng=FA1_PER_ELEMENT)
    q_next = ctx.load("Qi", "Q", (b, h, nxt, (0, d))) if nxt is not None else None
    if first:  # no o_tmp to wait for: the second GEMM and its epilogue in one
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
        pv = ctx.compute(lambda p_, v_: p_ @ v_, pd, vj, matmul=2 * br * bc * dd, out="Oi")
        o_prev = ctx.load("Oi", "O_tmp", (b, h, rows, (0, d)))
        o = ctx.compute(
            lambda a, o_, lp, m_, l_: (o_ * np.exp(lp - m_)[:, None] + a) / l_[:, None],
            pv,
            o_prev,
            lse_prev,
            m,
            l,
            vector=3 * br * dd,
            exp=br,
            out="Oi",
        )
    lse = ctx.compute(lambda m_, l_: m_ + np.log(l_), m, l, vector=br, exp=br, out="l")
    ctx.store("Oi", "O" if final else "O_tmp", (b, h, rows, (0, d)), o)
    ctx.store("l", "lse", (b, h, rows), lse)
    return q_next
