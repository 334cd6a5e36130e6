"""Standard (eager) attention: the real sequence of kernels, each a round trip through HBM.

    S = Q Kᵀ · scale      tiled matmul, scale in its epilogue          writes S  (N x N)
    S = mask(S)           causal only: reads S and a stored bool mask  writes S
    P = softmax(S)        one CTA per row                              writes P  (N x N)
    P = dropout(P)        dropout > 0 only: also writes its keep-mask  writes P, Z (1 byte)
    O = P V               tiled matmul                                  writes O

This is what PyTorch eager runs for `softmax(q @ k.transpose(-2, -1) * scale) @ v`, and what
the FlashAttention paper calls Algorithm 0. Both matmuls are the same tiled kernel: an output
tile of bq x bk, a contraction chunk bd, A and B chunks streamed through SRAM.

Softmax: a row that fits in one block's SRAM is read once (PyTorch's shared-memory softmax);
a longer row is read three times, for the max, the sum of exponentials and the normalised
write (PyTorch's cunn_SoftMaxForward), each pass streaming chunks of SOFTMAX_CHUNK elements.

Flop conventions: matmul 2mnk; the scale, mask and dropout one vector op per element each
(dropout's random-number generation is not counted); softmax 4 vector ops and one exp per
element per pass that exponentiates.
"""

from __future__ import annotations

import numpy as np

from ..hardware import Hardware
from ..problem import MASK_ITEMSIZE, Problem
from ..program import Buffer, CtaClass, Ctx, Kernel, Plan, TensorSpec, Tiles
from . import tilemath as tm
from .blocks import block_classes, span

DEFAULT_TILES = Tiles(bq=128, bk=128, bd=32)  # a common cuBLAS/CUTLASS fp16 CTA tile
EW_COLS = 4096  # columns per CTA of the elementwise kernels (mask, dropout): 256 thr x 16
SOFTMAX_CHUNK = 4096  # elements per chunk when a softmax row does not fit in SRAM
SOFTMAX_ROWS_PER_CTA = 4  # short rows: one warp each, 4 warps per CTA
PERSISTENT_SOFTMAX_MAX_COLS = 1024  # PyTorch keeps rows up to this long in registers
THREADS = 256
MATMUL_STAGES = 2


def _matmul_kernel(name, p: Problem, t: Tiles, a, b, c, m_dim, n_dim, k_dim, scale, desc):
    """C[m, n] = A[m, k] @ B[k, n] (· scale) per (batch, head), tile bq x bk, chunk bd.

    a, b, c: (tensor, region function). Region functions take (batch, head, span, span) and
    return the region in that tensor's own layout, so K can be read row-major as Kᵀ.
    """
    (a_name, a_region), (b_name, b_region, b_transposed), (c_name, c_region) = a, b, c
    bm, bn, bk = min(t.bq, m_dim), min(t.bk, n_dim), min(t.bd, k_dim)

    def program(ctx: Ctx, cta):
        bi, h, ti, tj = cta
        rows, cols = span(ti, t.bq, m_dim), span(tj, t.bk, n_dim)
        m, n = rows[1] - rows[0], cols[1] - cols[0]
        acc = ctx.compute(tm.zeros, m, n, out="C")
        for kk in ctx.loop(block_classes(k_dim, t.bd)):
            ks = span(kk, t.bd, k_dim)
            k = ks[1] - ks[0]
            a_tile = ctx.load("A", a_name, a_region(bi, h, rows, ks))  # (m, k)
            b_tile = ctx.load("B", b_name, b_region(bi, h, ks, cols))  # (k, n) or (n, k)
            if b_transposed:
                acc = ctx.compute(
                    lambda c_, x, y: c_ + x @ y.T,
                    acc,
                    a_tile,
                    b_tile,
                    matmul=2 * m * n * k,
                    out="C",
                )
            else:
                acc = ctx.compute(tm.matmul_acc, acc, a_tile, b_tile, matmul=2 * m * n * k, out="C")
        if scale != 1.0:
            acc = ctx.compute(np.multiply, acc, scale, vector=m * n, out="C")
        ctx.store("C", c_name, c_region(bi, h, rows, cols), acc)

    grid = tuple(
        CtaClass((range(p.batch), range(p.heads), ri, rj))
        for ri in block_classes(m_dim, t.bq)
        for rj in block_classes(n_dim, t.bk)
    )
    buffers = (  # A and B double-buffered: chunk k+1 loads while chunk k is multiplied
        Buffer("A", (MATMUL_STAGES, bm, bk), p.itemsize),
        Buffer("B", (MATMUL_STAGES, bk, bn), p.itemsize),
        Buffer("C", (bm, bn), p.itemsize),
    )
    return Kernel(name, grid, buffers, program, THREADS, stages=MATMUL_STAGES, description=desc)


def _ew_cols(p: Problem, hw: Hardware) -> int:
    """Columns per elementwise CTA: EW_COLS, fewer if a tiny SRAM cannot hold them (+ a mask)."""
    return max(1, min(EW_COLS, hw.sram_bytes_per_block // (p.itemsize + MASK_ITEMSIZE)))


def _elementwise_grid(p: Problem, cols: int) -> tuple[CtaClass, ...]:
    return tuple(
        CtaClass((range(p.batch), range(p.heads), range(p.seq_q), rc))
        for rc in block_classes(p.seq_k, cols)
    )


def _mask_kernel(p: Problem, hw: Hardware) -> Kernel:
    off = p.causal_offset
    ew = _ew_cols(p, hw)

    def program(ctx: Ctx, cta):
        b, h, r, tc = cta
        cols = span(tc, ew, p.seq_k)
        n = cols[1] - cols[0]
        s = ctx.load("X", "S", (b, h, r, cols))
        keep = ctx.load("M", "causal_mask", (r, cols))
        s = ctx.compute(lambda x, k: np.where(k, x, -np.inf), s, keep, vector=n, out="X")
        ctx.store("X", "S", (b, h, r, cols), s)

    w = min(ew, p.seq_k)
    buffers = (Buffer("X", (1, w), p.itemsize), Buffer("M", (1, w), MASK_ITEMSIZE))
    return Kernel(
        "mask",
        _elementwise_grid(p, ew),
        buffers,
        program,
        THREADS,
        description=f"S = masked_fill(S, ~tril, -inf) with a stored mask (offset {off})",
    )


def _softmax_kernel(p: Problem, hw: Hardware) -> Kernel:
    nk = p.seq_k
    fits = nk * p.itemsize <= hw.sram_bytes_per_block
    chunk_cols = max(1, min(SOFTMAX_CHUNK, hw.sram_bytes_per_block // p.itemsize))

    # Short rows: one warp per row, 4 warps per CTA (PyTorch's persistent softmax, <= 1024
    # columns); longer rows that still fit: one row per CTA in shared memory.
    rows_per_cta = SOFTMAX_ROWS_PER_CTA if nk <= PERSISTENT_SOFTMAX_MAX_COLS else 1

    def one_pass(ctx: Ctx, cta):
        b, h, i = cta
        rows = span(i, rows_per_cta, p.seq_q)
        n = (rows[1] - rows[0]) * nk
        x = ctx.load("row", "S", (b, h, rows, (0, nk)))
        x = ctx.compute(tm.softmax_rows, x, vector=4 * n, exp=n, out="row")
        ctx.store("row", "P", (b, h, rows, (0, nk)), x)

    def three_pass(ctx: Ctx, cta):
        b, h, r = cta
        m = ctx.compute(tm.full, -np.inf, 1)
        for c in ctx.loop(block_classes(nk, chunk_cols)):  # pass 1: row max
            cols = span(c, chunk_cols, nk)
            x = ctx.load("chunk", "S", (b, h, r, cols))
            m = ctx.compute(
                lambda m_, x_: np.maximum(m_, x_.max(axis=-1)), m, x, vector=cols[1] - cols[0]
            )
        denom = ctx.compute(tm.zeros, 1)
        for c in ctx.loop(block_classes(nk, chunk_cols)):  # pass 2: sum of exp(x - max)
            cols = span(c, chunk_cols, nk)
            n = cols[1] - cols[0]
            x = ctx.load("chunk", "S", (b, h, r, cols))
            denom = ctx.compute(
                lambda l_, x_, m_: l_ + tm.exp_minus(x_, m_).sum(axis=-1),
                denom,
                x,
                m,
                vector=2 * n,
                exp=n,
            )
        for c in ctx.loop(block_classes(nk, chunk_cols)):  # pass 3: normalise and write
            cols = span(c, chunk_cols, nk)
            n = cols[1] - cols[0]
            x = ctx.load("chunk", "S", (b, h, r, cols))
            y = ctx.compute(
                lambda x_, m_, l_: tm.exp_minus(x_, m_) / l_[:, None],
                x,
                m,
                denom,
                vector=2 * n,
                exp=n,
                out="chunk",
            )
            ctx.store("chunk", "P", (b, h, r, cols), y)

    if fits:
        grid = tuple(
            CtaClass((range(p.batch), range(p.heads), r))
            for r in block_classes(p.seq_q, rows_per_cta)
        )
        return Kernel(
            "softmax",
            grid,
            (Buffer("row", (min(rows_per_cta, p.seq_q), nk), p.itemsize),),
            one_pass,
            THREADS,
            description=f"P = softmax(S), {rows_per_cta} row(s) per CTA held on chip: one read",
        )
    grid = (CtaClass((range(p.batch), range(p.heads), range(p.seq_q))),)
    chunk = Buffer("chunk", (1, min(chunk_cols, nk)), p.itemsize)
    return Kernel(
        "softmax",
        grid,
        (chunk,),
        three_pass,
        THREADS,
        description="P = softmax(S), row too long for SRAM: three reads",
    )


def _dropout_kernel(p: Problem, hw: Hardware) -> Kernel:
    inv_keep = 1.0 / (1.0 - p.dropout)
    ew = _ew_cols(p, hw)

    def program(ctx: Ctx, cta):
        b, h, r, tc = cta
        cols = span(tc, ew, p.seq_k)
        n = cols[1] - cols[0]
        x = ctx.load("X", "P", (b, h, r, cols))
        z = ctx.compute(lambda: ctx.dropout_keep(b, h, (r, r + 1), cols), vector=n, out="Z")
        x = ctx.compute(lambda x_, z_: x_ * z_ * inv_keep, x, z, vector=n, out="X")
        ctx.store("X", "P", (b, h, r, cols), x)
        ctx.store("Z", "dropout_mask", (b, h, r, cols), z)

    w = min(ew, p.seq_k)
    buffers = (Buffer("X", (1, w), p.itemsize), Buffer("Z", (1, w), MASK_ITEMSIZE))
    return Kernel(
        "dropout",
        _elementwise_grid(p, ew),
        buffers,
        program,
        THREADS,
        description=f"P = P * Z / (1 - {p.dropout:g}); stores the 1-byte keep-mask Z",
    )


def default_tiles(p: Problem, hw: Hardware) -> tuple[Tiles, tuple[str, ...]]:
    """128 x 128 x 32, or the first smaller matmul tile whose kernels fit the SRAM."""
    for bq, bk, bd in (
        (128, 128, 32),
        (128, 64, 32),
        (64, 64, 32),
        (64, 64, 16),
        (32, 32, 16),
        (16, 16, 16),
        (8, 8, 8),
        (1, 1, 1),
    ):
        tiles = Tiles(bq, bk, bd)
        if plan(p, hw, tiles).sram_peak_bytes <= hw.sram_bytes_per_block:
            if tiles == DEFAULT_TILES:
                return tiles, ()
            return tiles, (
                f"128 x 128 x 32 matmul tiles do not fit {hw.sram_bytes_per_block:,} "
                f"bytes of SRAM in {p.dtype}; default reduced to {tiles.describe()}",
            )
    return DEFAULT_TILES, ()  # nothing fits: make_plan reports the overflow


def plan(p: Problem, hw: Hardware, t: Tiles) -> Plan:
    nq, nk, d = p.seq_q, p.seq_k, p.head_dim
    b, h, it = p.batch, p.heads, p.itemsize
    tensors = {
        "Q": TensorSpec("Q", (b, h, nq, d), it, "input"),
        "K": TensorSpec("K", (b, p.kv_heads, nk, d), it, "input"),
        "V": TensorSpec("V", (b, p.kv_heads, nk, d), it, "input"),
        "S": TensorSpec("S", (b, h, nq, nk), it, "intermediate", "scores Q Kᵀ · scale"),
        "P": TensorSpec("P", (b, h, nq, nk), it, "intermediate", "softmax(S)"),
        "O": TensorSpec("O", (b, h, nq, d), it, "output"),
    }
    kv = p.kv_head
    kernels = [
        _matmul_kernel(
            "qk",
            p,
            t,
            ("Q", lambda bi, hi, rows, ks: (bi, hi, rows, ks)),
            ("K", lambda bi, hi, ks, cols: (bi, kv(hi), cols, ks), True),
            ("S", lambda bi, hi, rows, cols: (bi, hi, rows, cols)),
            nq,
            nk,
            d,
            p.softmax_scale,
            "S = Q Kᵀ · scale (tiled matmul)",
        ),
    ]
    if p.causal:
        tensors["causal_mask"] = TensorSpec(
            "causal_mask",
            (nq, nk),
            MASK_ITEMSIZE,
            "input",
            "stored bool lower triangle, shared by all heads",
        )
        kernels.append(_mask_kernel(p, hw))
    kernels.append(_softmax_kernel(p, hw))
    if p.dropout > 0:
        tensors["dropout_mask"] = TensorSpec(
            "dropout_mask", (b, h, nq, nk), MASK_ITEMSIZE, "intermediate", "dropout keep-mask Z"
        )
        kernels.append(_dropout_kernel(p, hw))
    kernels.append(
        _matmul_kernel(
            "pv",
            p,
            t,
            ("P", lambda bi, hi, rows, ks: (bi, hi, rows, ks)),
            ("V", lambda bi, hi, ks, cols: (bi, kv(hi), ks, cols), False),
            ("O", lambda bi, hi, rows, cols: (bi, hi, rows, cols)),
            nq,
            d,
            nk,
            1.0,
            "O = P V (tiled matmul)",
        )
    )
    return Plan("standard", p, hw, t, tensors, tuple(kernels))
