"""FlashAttention-3's backward on Hopper as tile programs (flash-attn `hopper/`
`flash_bwd_launch_template.h` `run_flash_bwd`; tiles and shared memory in bwd_rules).

The kernel sequence run_flash_bwd launches, each cited where it is built:
- with GQA, first the two `torch::zeros` of mha_bwd (dk_accum, dv_accum: a fill kernel each);
- FlashAttnBwdPreprocess (`flash_bwd_preprocess_kernel.h`, grid_m(num_m_block, h, b), 256
  threads, no shared memory): dPsum = rowsum(dO o O), LSE_log2 = LSE * log2(e) (0 where the
  LSE is -inf), dq_accum cleared (Clear_dQaccum = true);
- FlashAttnBwdSm90 (`flash_bwd_kernel_sm90.h`, `mainloop_bwd_sm90_tma_gmma_ws.hpp`): one CTA
  per (K/V block, head, batch). A producer warpgroup loads K and V once, then per Q block Q
  with its LSE_log2 row (Q_STAGES deep) and dO with its dPsum row (Stages_dO deep) by TMA;
  the MMA warpgroups compute S = Q K^T, P = exp2(S * scale * log2(e) - LSE_log2), dP = dO
  V^T, dS = P o (dP - dPsum), dV += P^T dO, dK += dS^T Q, dQ = dS K; a second producer warp
  adds each dQ partial into dq_accum (fp32) with a TMA bulk reduce-add from shared memory
  (store_dq; hdim 256 adds from registers with atomicAdd). The epilogue scales dK by the
  softmax scale and stores dK, dV (CollectiveEpilogueBwd), or with GQA adds them in fp32
  into dk_accum, dv_accum of the K/V head (CollectiveEpilogueBwdGQA: the query heads of a
  group add into one buffer);
- FlashAttnBwdPostprocessConvertdQ (`flash_bwd_postprocess_kernel.h`): dQ = dq_accum *
  softmax_scale in the dtype, over grid_m; with GQA the same kernel converts dk_accum and
  dv_accum (scale 1) over (num_n_block, h_k, b).
Causal and local: a K/V block visits the Q blocks that see it (block.h get_m_block_min_max,
blocks.q_blocks_for_kv), so a causal backward does about half the tiles.

What it leaves out: the padded rows of the rounded fp32 buffers (dq_accum, dPsum, LSE_log2
are seqlen_q_rounded long; the last partial Q block's reduce-add and clear move whole kBlockM
rows: at most a block of rows per head more); the causal LPT scheduler's L2 sections
(SingleTileBwdLPTScheduler hands out K/V blocks in groups of heads sized to 40 MB of Q, dO
and dq_accum; here one group, K/V block slowest, then batch, then head); dq_semaphore's
writes (4 bytes per Q block); the shared-memory traffic of staging dQ for the reduce-add.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from ...algorithms import tilemath as tm
from ...algorithms.blocks import block_classes, n_blocks, q_blocks_for_kv, span
from ...algorithms.flash import score_tile
from ...algorithms.flash_bwd import grad_dp, grad_ds, grad_dv, grad_tensors
from ...problem.attention import STAT_ITEMSIZE, Problem
from ...program.plan import Buffer, CtaClass, Ctx, Kernel, TensorSpec
from .bwd_rules import Q_STAGES, Fa3BwdRule, lse_cosize
from .rules import window

LOG2E = math.log2(math.e)  # M_LOG2E, the preprocess kernel's LSE scaling
PRE_THREADS = 256  # FlashAttnBwdPreprocess::MaxThreadsPerBlock
# GRID_B_H_BLOCK: dim3(num_blocks, h, b) grids (grid_m, SingleTileScheduler): block fastest,
# then head, then batch; the causal SingleTileBwdLPTScheduler: K/V block slowest, then batch,
# then head (its tile index: block above bidhb, bidh = bidhb % num_head)
GRID_B_H_BLOCK = (0, 1, 2)
GRID_BLOCK_B_H_LPT = (2, 0, 1)
# torch::zeros of dk_accum, dv_accum (GQA): PyTorch's fill kernel; elements per CTA is a guess
# (128 threads x a few elements each, Loops.cuh): it spreads the same bytes over more or
# fewer CTAs, not more or fewer bytes
FILL_ELEMENTS = 4096
FILL_THREADS = 128


def bwd_tensors(p: Problem) -> dict[str, TensorSpec]:
    """The gradients, and mha_bwd's fp32 buffers: softmax_d (dPsum), softmax_lse_log2,
    dq_accum, and with GQA dk_accum, dv_accum (one per K/V head)."""
    b, h, hk, nq, nk, d = p.batch, p.heads, p.kv_heads, p.seq_q, p.seq_k, p.head_dim
    tensors = {n: t for n, t in grad_tensors(p).items() if not n.endswith("_rep")}
    f32 = STAT_ITEMSIZE
    tensors["dPsum"] = TensorSpec("dPsum", (b, h, nq), f32, "intermediate", "rowsum(dO ∘ O)")
    tensors["lse_log2"] = TensorSpec(
        "lse_log2", (b, h, nq), f32, "intermediate", "LSE * log2(e), for exp2"
    )
    tensors["dQ_accum"] = TensorSpec(
        "dQ_accum", (b, h, nq, d), f32, "intermediate", "fp32 dQ, TMA reduce-added"
    )
    if p.group_size > 1:
        for name in ("dK_accum", "dV_accum"):
            tensors[name] = TensorSpec(
                name, (b, hk, nk, d), f32, "intermediate", "fp32, every query head adds in"
            )
    return tensors


def fill_rows_per_cta(p: Problem) -> int:
    return max(1, FILL_ELEMENTS // p.head_dim)


def _exp2_p(s, lse2):
    return np.exp2(s * LOG2E - lse2[:, None])


def _programs(p: Problem, rule: Fa3BwdRule):
    nq, nk, d = p.seq_q, p.seq_k, p.head_dim
    bm, bn = rule.bm, rule.bn
    pad = (bm, bn, rule.d)
    scale = p.softmax_scale
    gqa = p.group_size > 1

    def pre(ctx: Ctx, cta):
        b, h, i = cta
        rows = span(i, bm, nq)
        n = rows[1] - rows[0]
        do = ctx.load("dOi", "dO", (b, h, rows, (0, d)))
        o = ctx.load("Oi", "O", (b, h, rows, (0, d)))
        lse = ctx.load("lse", "lse", (b, h, rows))
        dpsum = ctx.compute(lambda x, y: (x * y).sum(axis=1), do, o, vector=2 * n * d, out="D")
        ctx.store("D", "dPsum", (b, h, rows), dpsum)
        lse2 = ctx.compute(
            lambda x: np.where(np.isneginf(x), 0.0, x * LOG2E), lse, vector=n, out="lse"
        )
        ctx.store("lse", "lse_log2", (b, h, rows), lse2)
        ctx.store("dQi", "dQ_accum", (b, h, rows, (0, d)), ctx.compute(tm.zeros, n, d, out="dQi"))

    def main(ctx: Ctx, cta):
        b, h, j = cta
        kvh = p.kv_head(h)
        cols = span(j, bn, nk)
        c = cols[1] - cols[0]
        kj = ctx.load("Kj", "K", (b, kvh, cols, (0, d)))
        vj = ctx.load("Vj", "V", (b, kvh, cols, (0, d)))
        dk = ctx.compute(tm.zeros, c, d, out="dKj")
        dv = ctx.compute(tm.zeros, c, d, out="dVj")
        segments, _ = q_blocks_for_kv(p, cols[0], cols[1], bm)
        for i in ctx.loop(segments):
            rows = span(i, bm, nq)
            qi = ctx.load("Qi", "Q", (b, h, rows, (0, d)))  # with its LSE row (pipeline_q)
            lse2 = ctx.load("lse", "lse_log2", (b, h, rows))
            doi = ctx.load("dOi", "dO", (b, h, rows, (0, d)))  # with its dPsum (pipeline_do)
            dpsum = ctx.load("D", "dPsum", (b, h, rows))
            s = score_tile(ctx, p, qi, kj, rows, cols, pad)
            pij = ctx.compute(_exp2_p, s, lse2, vector=bm * bn, exp=bm * bn, out="S")
            dv = grad_dv(ctx, p, b, h, rows, cols, pad, dv, pij, doi)
            dp = grad_dp(ctx, p, b, h, rows, cols, pad, doi, vj)
            ds = grad_ds(ctx, pad, pij, dp, dpsum)
            dk = ctx.compute(
                lambda dk_, g_, q_: dk_ + g_.T @ q_,
                dk,
                ds,
                qi,
                matmul=2 * bm * bn * rule.d,
                out="dKj",
            )
            dq = ctx.compute(lambda g_, k_: g_ @ k_, ds, kj, matmul=2 * bm * bn * rule.d, out="dQi")
            ctx.atomic_add("dQi", "dQ_accum", (b, h, rows, (0, d)), dq)
        dk = ctx.compute(lambda x: x * scale, dk, vector=c * d, out="dKj")
        if gqa:
            ctx.atomic_add("dKj", "dK_accum", (b, kvh, cols, (0, d)), dk)
            ctx.atomic_add("dVj", "dV_accum", (b, kvh, cols, (0, d)), dv)
        else:
            ctx.store("dKj", "dK", (b, kvh, cols, (0, d)), dk)
            ctx.store("dVj", "dV", (b, kvh, cols, (0, d)), dv)

    return functools.partial(_fill, p), pre, main, functools.partial(_convert, p)


def _fill(p: Problem, name: str):
    """The program zeroing an fp32 accumulator `name` (dK_accum, dV_accum) before the main
    kernel adds into it."""
    fill_rows, nk, d = fill_rows_per_cta(p), p.seq_k, p.head_dim

    def program(ctx: Ctx, cta):
        b, kvh, i = cta
        rows = span(i, fill_rows, nk)
        zero = ctx.compute(tm.zeros, rows[1] - rows[0], d, out="x")
        ctx.store("x", name, (b, kvh, rows, (0, d)), zero)

    return program


def _convert(p: Problem, src: str, dst: str, block: int, n: int, factor: float):
    """The postprocess program converting an fp32 accumulator `src` into `dst`, times
    `factor` (dQ's softmax scale)."""
    d = p.head_dim

    def program(ctx: Ctx, cta):
        b, h, i = cta
        rows = span(i, block, n)
        x = ctx.load("acc", src, (b, h, rows, (0, d)))
        if factor != 1.0:
            x = ctx.compute(lambda a: a * factor, x, vector=(rows[1] - rows[0]) * d, out="acc")
        ctx.store("out", dst, (b, h, rows, (0, d)), x)

    return program


def backward_kernels(p: Problem, rule: Fa3BwdRule) -> tuple[list[Kernel], dict[str, TensorSpec]]:
    """run_flash_bwd's launches for `p` (see the module docstring), and their tensors."""
    fill, pre, main, convert = _programs(p, rule)
    it, d, bm, bn = p.itemsize, rule.d, rule.bm, rule.bn
    causal_lpt = window(p).is_causal  # Is_causal: SingleTileBwdLPTScheduler
    m_grid = _grid(p, p.heads, block_classes(p.seq_q, bm))
    n_classes = (
        [range(j, j + 1) for j in range(n_blocks(p.seq_k, bn))]
        if p.masked
        else block_classes(p.seq_k, bn)
    )
    mma_threads = rule.consumers * 128
    kernels = []
    if p.group_size > 1:
        rows = fill_rows_per_cta(p)
        for name in ("dK_accum", "dV_accum"):
            kernels.append(
                Kernel(
                    f"fill_kernel ({name} = 0)",
                    _grid(p, p.kv_heads, block_classes(p.seq_k, rows)),
                    (Buffer("x", (min(rows, p.seq_k), p.head_dim), STAT_ITEMSIZE, registers=True),),
                    fill(name),
                    FILL_THREADS,
                    pass_="bwd",
                    tensor_cores=False,
                    description="torch::zeros in mha_bwd (GQA)",
                )
            )
    kernels.append(
        Kernel(
            "flash_bwd_preprocess",
            m_grid,
            (
                Buffer("dOi", (bm, d), it, registers=True),
                Buffer("Oi", (bm, d), it, registers=True),
                Buffer("lse", (bm,), STAT_ITEMSIZE, registers=True),
                Buffer("D", (bm,), STAT_ITEMSIZE, registers=True),
                Buffer("dQi", (bm, d), STAT_ITEMSIZE, registers=True),
            ),
            pre,
            PRE_THREADS,
            pass_="bwd",
            tensor_cores=False,
            description="dPsum = rowsum(dO * O), LSE * log2(e), dQ_accum = 0 (no shared memory)",
            launch_order=GRID_B_H_BLOCK,
        )
    )
    kernels.append(
        Kernel(
            "flash_bwd_kernel_sm90",
            _grid(p, p.heads, n_classes),
            main_buffers(rule, it),
            main,
            rule.threads,
            stages=Q_STAGES,
            pass_="bwd",
            description=f"{rule.why}; dK, dV in registers, dQ partials reduce-added in fp32"
            + ("; dK, dV added into fp32 per K/V head (GQA)" if p.group_size > 1 else ""),
            launch_order=GRID_BLOCK_B_H_LPT if causal_lpt else GRID_B_H_BLOCK,
            registers_per_thread=rule.registers_per_thread,
            # no ping-pong between the MMA warpgroups (the backward's mainloop has no
            # warp_scheduler_barrier; its warpgroups meet at the PdS barriers every block):
            # each step's tensor, FP32 and SFU times add (pipes.py)
            overlap_warpgroups=0,
            # the MMA warpgroups hand dQ to store_dq's warp and go on: they wait on dQEmpty
            # only before writing the next block's dQ, after its GEMMs (mma(), dQacc_use_TMA);
            # hdim 256's atomicAdd discards its result (a `red`): nothing waits
            posted_atomics=True,
        )
    )
    kernels.append(_convert_kernel(p, rule, "dQ", m_grid, bm, convert, mma_threads))
    if p.group_size > 1:
        kv_grid = _grid(p, p.kv_heads, block_classes(p.seq_k, bn))
        for name in ("dK", "dV"):
            kernels.append(_convert_kernel(p, rule, name, kv_grid, bn, convert, mma_threads))
    return kernels, bwd_tensors(p)


def _grid(p: Problem, heads: int, classes: list[range]) -> tuple[CtaClass, ...]:
    return tuple(CtaClass((range(p.batch), range(heads), r)) for r in classes)


def _convert_kernel(p, rule, name, grid, block, convert, threads) -> Kernel:
    """FlashAttnBwdPostprocessConvertdQ: fp32 accumulator to the dtype through shared memory
    (smem_dqacc fp32 and smem_dq), dQ scaled by the softmax scale, dK and dV by 1."""
    n = p.seq_q if name == "dQ" else p.seq_k
    factor = p.softmax_scale if name == "dQ" else 1.0
    program = convert(f"{name}_accum", name, block, n, factor)
    return Kernel(
        f"flash_bwd_postprocess ({name})",
        grid,
        (
            Buffer("acc", (block, rule.d), STAT_ITEMSIZE),  # smem_dqacc
            Buffer("out", (block, rule.d), p.itemsize),  # smem_dq
        ),
        program,
        threads,
        pass_="bwd",
        tensor_cores=False,
        description=f"{name} = {name}_accum"
        + (" * softmax_scale" if name == "dQ" else "")
        + ", converted to the dtype",
        launch_order=GRID_B_H_BLOCK,
    )


def main_buffers(rule: Fa3BwdRule, it: int) -> tuple[Buffer, ...]:
    """CollectiveMainloopBwdSm90::TensorStorage, and the accumulators in registers."""
    bm, bn, d = rule.bm, rule.bn, rule.d
    buffers = [
        Buffer("Kj", (bn, d), it),  # smem_k
        Buffer("Vj", (bn, d), it),  # smem_v
        Buffer("Qi", (Q_STAGES, bm, d), it),  # smem_q
        Buffer("dOi", (rule.stages_do, bm, d), it),  # smem_do
        Buffer("lse", (lse_cosize(bm),), STAT_ITEMSIZE),  # smem_lse
        Buffer("D", (lse_cosize(bm),), STAT_ITEMSIZE),  # smem_dpsum
        Buffer("dS_smem", (rule.stages_ds, bm, bn), it),  # smem_ds
        Buffer("S", (bm, bn), STAT_ITEMSIZE, registers=True),  # S, then P
        Buffer("dP", (bm, bn), STAT_ITEMSIZE, registers=True),  # dP, then dS
        Buffer("dKj", (bn, d), STAT_ITEMSIZE, registers=True),  # tdKrdK
        Buffer("dVj", (bn, d), STAT_ITEMSIZE, registers=True),  # tdVrdV
        # smem_dqacc (the bulk reduce-add's source), or registers at hdim 256
        Buffer("dQi", (bm, d), STAT_ITEMSIZE, registers=not rule.dq_through_smem),
    ]
    if not rule.dkv_rs:
        buffers.append(Buffer("P_smem", (rule.stages_ds, bm, bn), it))  # smem_p
    return tuple(buffers)


def with_host_ops(kernels: list[Kernel], before: int, gqa: bool) -> list[Kernel]:
    """Where the wrapper's host operations fall between the launches (mirror.BWD_OPS): the
    first kernel after `before` of them; with GQA, mha_bwd's dv_accum allocation comes before
    its fill and dq_semaphore's before the preprocess."""
    ops = [before] + [0] * (len(kernels) - 1)
    if gqa:
        ops[0] -= 2
        ops[1] = ops[2] = 1
    return [dataclasses.replace(k, host_ops_before=n) for k, n in zip(kernels, ops, strict=True)]
