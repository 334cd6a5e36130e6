"""The elementwise kernels PyTorch eager launches around attention's matmuls: contiguous
copies (at::copy_), the scaling of baddbmm's backward (`maybe_multiply`), UnbindBackward's
stack, and the additive causal mask the benchmark rebuilds every call (full, triu, cast, add).

Each is one read and one write per element in chunks of COPY_ELEMS elements (256 threads),
like the schedules' elementwise kernels (schedules/kernels.py `chunk_kernel`).
"""

from __future__ import annotations

import numpy as np

from ..hardware import Hardware
from ..problem import STAT_ITEMSIZE, Problem
from ..program import Buffer, CtaClass, Ctx, Kernel
from ..schedules.blocks import block_classes, span, split
from ..schedules.kernels import THREADS, chunk_kernel, ew_cols

MASK_FILL = -10000.0  # torch.full((seqlen, seqlen), -10000.0): the benchmark's mask value
COPY_ELEMS = 4096  # elements per CTA of the elementwise copies (as schedules' EW_COLS)


# --- elementwise kernels over (b, h, rows, d) tensors ----------------------------------------


def _row_chunks(p: Problem, n: int) -> tuple[int, list[range]]:
    rows = max(1, COPY_ELEMS // p.head_dim)
    return rows, block_classes(n, rows)


def _rows_kernel(p: Problem, name: str, n: int, body, buffers: dict, desc: str, pass_: str):
    """An elementwise kernel over one head's n x d rows: body(ctx, b, h, rows) per CTA."""
    per, classes = _row_chunks(p, n)

    def program(ctx: Ctx, cta):
        b, h, i = cta
        body(ctx, b, h, span(i, per, n))

    grid = tuple(CtaClass((range(p.batch), range(p.heads), r)) for r in classes)
    shape = (min(per, n), p.head_dim)
    bufs = tuple(Buffer(k, shape, size) for k, size in buffers.items())
    return Kernel(name, grid, bufs, program, THREADS, description=desc, pass_=pass_)


def copy_kernel(
    p: Problem, name: str, src: str, dst: str, n: int, kv: bool, transpose: bool, pass_: str = "fwd"
) -> Kernel:
    """dst = src made contiguous: one read and one write of every element (at::copy_)."""
    d = p.head_dim

    def body(ctx: Ctx, b, h, rows):
        x = ctx.load("X", src, (b, p.kv_head(h) if kv else h, rows, (0, d)))
        if transpose:
            x = ctx.compute(np.transpose, x, out="X")
            ctx.store("X", dst, (b, h, (0, d), rows), x)
        else:
            ctx.store("X", dst, (b, h, rows, (0, d)), x)

    desc = f"{dst} = {src}.contiguous()" + (" (transposed)" if transpose else "")
    return _rows_kernel(p, name, n, body, {"X": p.itemsize}, desc, pass_)


def scale_kernel(p: Problem, name: str, tensor: str, n: int, transposed: bool) -> Kernel:
    """tensor *= softmax_scale: baddbmm's backward `maybe_multiply(..., alpha)`."""
    d, s = p.head_dim, p.softmax_scale

    def body(ctx: Ctx, b, h, rows):
        region = (b, h, (0, d), rows) if transposed else (b, h, rows, (0, d))
        x = ctx.load("X", tensor, region)
        x = ctx.compute(np.multiply, x, s, vector=(rows[1] - rows[0]) * d, out="X")
        ctx.store("X", tensor, region, x)

    return _rows_kernel(p, name, n, body, {"X": p.itemsize}, f"{tensor} *= scale", "bwd")


def stack_kernel(p: Problem) -> Kernel:
    """UnbindBackward: torch.stack([dq, dk, dv], dim=2) into qkv's gradient, per row chunk
    (dk read from its transposed (b h) d s layout). GQA: dK, dV per query head, summed next."""
    d = p.head_dim
    dk, dv = ("dK_rep", "dV_rep") if p.group_size > 1 else ("dK", "dV")

    def body(ctx: Ctx, b, h, rows):
        kvh = h if p.group_size > 1 else p.kv_head(h)
        if rows[0] < p.seq_q:
            q_rows = (rows[0], min(rows[1], p.seq_q))
            x = ctx.load("X", "dQc", (b, h, q_rows, (0, d)))
            ctx.store("X", "dQ", (b, h, q_rows, (0, d)), x)
        if rows[0] < p.seq_k:
            k_rows = (rows[0], min(rows[1], p.seq_k))
            x = ctx.load("X", "dKt", (b, h, (0, d), k_rows))
            x = ctx.compute(np.transpose, x, out="X")
            ctx.store("X", dk, (b, kvh, k_rows, (0, d)), x)
            x = ctx.load("X", "dVc", (b, h, k_rows, (0, d)))
            ctx.store("X", dv, (b, kvh, k_rows, (0, d)), x)

    n = max(p.seq_q, p.seq_k)
    per, _ = _row_chunks(p, n)
    cuts = {c for m in (p.seq_q, p.seq_k) for c in ((m - 1) // per, -(-m // per))}
    classes = split(0, -(-n // per), cuts)

    def program(ctx: Ctx, cta):
        b, h, i = cta
        body(ctx, b, h, span(i, per, n))

    grid = tuple(CtaClass((range(p.batch), range(p.heads), r)) for r in classes)
    return Kernel(
        "stack",
        grid,
        (Buffer("X", (min(per, n), d), p.itemsize),),
        program,
        THREADS,
        description="UnbindBackward: dq, dk, dv stacked into dqkv",
        pass_="bwd",
    )


# --- the causal mask, rebuilt every call -----------------------------------------------------


def _table_kernel(p: Problem, hw: Hardware, name: str, body, buffers: dict, desc: str) -> Kernel:
    """An elementwise kernel over the (seq_q, seq_k) mask table: body(ctx, row, cols)."""
    ew = min(ew_cols(p, hw), p.seq_k)

    def program(ctx: Ctx, cta):
        r, c = cta
        body(ctx, r, span(c, ew, p.seq_k))

    grid = tuple(CtaClass((range(p.seq_q), rc)) for rc in block_classes(p.seq_k, ew))
    bufs = tuple(Buffer(k, (1, ew), size) for k, size in buffers.items())
    return Kernel(name, grid, bufs, program, THREADS, description=desc)


def mask_kernels(p: Problem, hw: Hardware) -> list[Kernel]:
    off = p.causal_offset
    f32, it = STAT_ITEMSIZE, p.itemsize

    def fill(ctx: Ctx, r, cols):
        n = cols[1] - cols[0]
        x = ctx.compute(lambda: np.full((1, n), MASK_FILL), vector=n, out="X")
        ctx.store("X", "mask_full", (r, cols), x)

    def triu(ctx: Ctx, r, cols):
        x = ctx.load("X", "mask_full", (r, cols))
        x = ctx.compute(
            lambda x_: np.where(np.arange(*cols)[None, :] > r + off, x_, 0.0),
            x,
            vector=cols[1] - cols[0],
            out="X",
        )
        ctx.store("X", "mask_triu", (r, cols), x)

    def cast(ctx: Ctx, r, cols):
        x = ctx.load("X", "mask_triu", (r, cols))
        x = ctx.compute(lambda x_: x_, x, vector=cols[1] - cols[0], out="Y")
        ctx.store("Y", "mask", (r, cols), x)

    def add(ctx: Ctx, b, h, r, cols):
        x = ctx.load("X", "S", (b, h, r, cols))
        m = ctx.load("M", "mask", (r, cols))
        x = ctx.compute(np.add, x, m, vector=cols[1] - cols[0], out="X")
        ctx.store("X", "S", (b, h, r, cols), x)

    return [
        _table_kernel(p, hw, "full", fill, {"X": f32}, "torch.full((seqlen, seqlen), -10000.0)"),
        _table_kernel(p, hw, "triu", triu, {"X": f32}, "torch.triu(mask, 1)"),
        _table_kernel(p, hw, "to", cast, {"X": f32, "Y": it}, "mask.to(scores.dtype)"),
        chunk_kernel("add_mask", p, hw, add, {"X": it, "M": it}, "scores = scores + mask"),
    ]
