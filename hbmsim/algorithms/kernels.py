"""Kernel builders the eager (standard) schedules and the flash backward share.

- `matmul_kernel`: a tiled matmul C = op(A) op(B) (· scale) per (batch, head), output tile
  bq x bk, contraction chunk bd, A and B chunks double-buffered through SRAM. Operands may be
  read transposed (Kᵀ, Pᵀ, dSᵀ) straight from their row-major tensors.
- `chunk_kernel`: an elementwise kernel over an (Nq x Nk) table, one CTA per row chunk of
  `ew_cols(p, hw)` columns (256 threads x 16 elements), whose body the caller writes.
- `gqa_reduce_kernel`: sums per-query-head dK and dV into their shared K/V head (GQA/MQA).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..gpu.hardware import Hardware
from ..problem.attention import MASK_ITEMSIZE, Problem
from ..program.plan import Buffer, CtaClass, Ctx, Kernel, Tiles
from . import tilemath as tm
from .blocks import block_classes, span

THREADS = 256
MATMUL_STAGES = 2
EW_COLS = 4096  # columns per CTA of the elementwise kernels: 256 threads x 16 elements
REDUCE_ELEMS = 4096  # elements per CTA of the GQA reduction


@dataclass(frozen=True)
class Operand:
    """A matmul operand: its tensor and a region function (batch, head, span, span) -> region
    in the tensor's own layout. `transposed`: the tensor stores the operand transposed."""

    tensor: str
    region: Callable
    transposed: bool = False


def _product(a_t: bool, b_t: bool):
    def step(acc, x, y):
        return acc + (x.T if a_t else x) @ (y.T if b_t else y)

    return step


def matmul_kernel(
    name: str,
    p: Problem,
    t: Tiles,
    a: Operand,
    b: Operand,
    c: Operand,
    m_dim: int,
    n_dim: int,
    k_dim: int,
    scale: float,
    desc: str,
    pass_: str = "fwd",
    stages: int = MATMUL_STAGES,
    accumulate_in_registers: bool = False,
    full_tile_buffers: bool = False,
    row_pad: int = 0,
    tensor_cores: bool = True,
    instructions_per_fma: float = 1.0,
    cycles_per_fma_by_warps: tuple[float, ...] = (),
) -> Kernel:
    """C[m, n] = A[m, k] @ B[k, n] (· scale), one CTA per bq x bk output tile per head.

    `row_pad`: items of padding per shared-memory row, as a CUDA kernel that stores A's chunk
    transposed and B's chunk as it is, each row padded against bank conflicts (kernels/naive.cuh),
    allocates them: A then takes bk x (bm + row_pad) items and B bk x (bn + row_pad)."""
    bm, bn, bk = min(t.bq, m_dim), min(t.bk, n_dim), min(t.bd, k_dim)
    if full_tile_buffers:  # a CUDA kernel allocates whole tiles, however small the matrices
        bm, bn, bk = t.bq, t.bk, t.bd
    step = _product(a.transposed, b.transposed)

    def program(ctx: Ctx, cta):
        bi, h, ti, tj = cta
        rows, cols = span(ti, t.bq, m_dim), span(tj, t.bk, n_dim)
        m, n = rows[1] - rows[0], cols[1] - cols[0]
        acc = ctx.compute(tm.zeros, m, n, out="C")
        for kk in ctx.loop(block_classes(k_dim, t.bd)):
            ks = span(kk, t.bd, k_dim)
            k = ks[1] - ks[0]
            a_tile = ctx.load("A", a.tensor, a.region(bi, h, rows, ks))  # (m, k) or (k, m)
            b_tile = ctx.load("B", b.tensor, b.region(bi, h, ks, cols))  # (k, n) or (n, k)
            acc = ctx.compute(step, acc, a_tile, b_tile, matmul=2 * m * n * k, out="C")
        if scale != 1.0:
            acc = ctx.compute(np.multiply, acc, scale, vector=m * n, out="C")
        ctx.store("C", c.tensor, c.region(bi, h, rows, cols), acc)

    grid = tuple(
        CtaClass((range(p.batch), range(p.heads), ri, rj))
        for ri in block_classes(m_dim, t.bq)
        for rj in block_classes(n_dim, t.bk)
    )
    a_shape, b_shape = ((bk, bm + row_pad), (bk, bn + row_pad)) if row_pad else ((bm, bk), (bk, bn))
    buffers = (  # with stages = 2, chunk k+1 loads while chunk k is multiplied
        Buffer("A", (stages, *a_shape) if stages > 1 else a_shape, p.itemsize),
        Buffer("B", (stages, *b_shape) if stages > 1 else b_shape, p.itemsize),
        Buffer("C", (bm, bn), p.itemsize, registers=accumulate_in_registers),
    )
    return Kernel(
        name,
        grid,
        buffers,
        program,
        THREADS,
        stages=stages,
        description=desc,
        pass_=pass_,
        tensor_cores=tensor_cores,
        instructions_per_fma=instructions_per_fma,
        cycles_per_fma_by_warps=cycles_per_fma_by_warps,
    )


def ew_cols(p: Problem, hw: Hardware) -> int:
    """Columns per elementwise CTA: EW_COLS, fewer if a tiny SRAM cannot hold them (+ a mask)."""
    return max(1, min(EW_COLS, hw.sram_bytes_per_block // (2 * p.itemsize + MASK_ITEMSIZE)))


def chunk_kernel(
    name: str,
    p: Problem,
    hw: Hardware,
    body: Callable,
    buffers: dict[str, int],
    desc: str,
    pass_: str = "fwd",
) -> Kernel:
    """An elementwise kernel over (Nq x Nk) tables: body(ctx, b, h, row, cols) per CTA.

    `buffers`: SRAM buffer name -> item size; each holds one row chunk.
    """
    ew = ew_cols(p, hw)

    def program(ctx: Ctx, cta):
        b, h, r, tc = cta
        body(ctx, b, h, r, span(tc, ew, p.seq_k))

    grid = tuple(
        CtaClass((range(p.batch), range(p.heads), range(p.seq_q), rc))
        for rc in block_classes(p.seq_k, ew)
    )
    w = min(ew, p.seq_k)
    return Kernel(
        name,
        grid,
        tuple(Buffer(n, (1, w), size) for n, size in buffers.items()),
        program,
        THREADS,
        description=desc,
        pass_=pass_,
    )


def gqa_reduce_kernel(p: Problem) -> Kernel:
    """dK[kv head] = sum of dK_rep over its query heads, and the same for dV (GQA/MQA only)."""
    g, d = p.group_size, p.head_dim
    rows_per_cta = max(1, REDUCE_ELEMS // d)

    def program(ctx: Ctx, cta):
        b, kvh, i = cta
        rows = span(i, rows_per_cta, p.seq_k)
        for name in ("dK", "dV"):
            acc = ctx.compute(tm.zeros, rows[1] - rows[0], d, out="acc")
            n = (rows[1] - rows[0]) * d
            for h in range(kvh * g, (kvh + 1) * g):
                x = ctx.load("x", name + "_rep", (b, h, rows, (0, d)))
                acc = ctx.compute(np.add, acc, x, vector=n, out="acc")
            ctx.store("acc", name, (b, kvh, rows, (0, d)), acc)

    grid = tuple(
        CtaClass((range(p.batch), range(p.kv_heads), r))
        for r in block_classes(p.seq_k, rows_per_cta)
    )
    shape = (min(rows_per_cta, p.seq_k), d)
    buffers = (Buffer("x", shape, p.itemsize), Buffer("acc", shape, p.itemsize))
    return Kernel(
        "gqa_reduce",
        grid,
        buffers,
        program,
        THREADS,
        pass_="bwd",
        description=f"dK, dV = sums over each group of {g} query heads",
    )
