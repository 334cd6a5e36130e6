"""The elementwise kernels PyTorch eager launches around attention's matmuls: contiguous
copies (at::copy_), the scaling of baddbmm's backward (`maybe_multiply`), UnbindBackward's
stack, the additive causal mask the benchmark rebuilds every call (full, triu, cast, add), and
the softmax backward as ATen runs it (a multiply, then the softmax backward kernel).

Each is one read and one write per element in chunks of COPY_ELEMS elements (256 threads),
like the schedules' elementwise kernels (algorithms/kernels.py `chunk_kernel`).
"""

from __future__ import annotations

import numpy as np

from ...algorithms import tilemath as tm
from ...algorithms.blocks import block_classes, span, split
from ...algorithms.kernels import THREADS, chunk_kernel, ew_cols
from ...algorithms.standard import SOFTMAX_CHUNK, row_grid
from ...gpu.hardware import Hardware
from ...problem.attention import STAT_ITEMSIZE, Problem
from ...program.plan import Buffer, CtaClass, Ctx, Kernel

MASK_FILL = -10000.0  # torch.full((seqlen, seqlen), -10000.0): the benchmark's mask value
COPY_ELEMS = 4096  # elements per CTA of the elementwise copies (as schedules' EW_COLS)


# --- elementwise kernels over (b, h, rows, d) tensors ----------------------------------------


def _row_chunks(p: Problem, n: int) -> tuple[int, list[range]]:
    rows = max(1, COPY_ELEMS // p.head_dim)
    return rows, block_classes(n, rows)


def rows_kernel(p: Problem, name: str, n: int, body, buffers: dict, desc: str, pass_: str):
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
    return rows_kernel(p, name, n, body, {"X": p.itemsize}, desc, pass_)


def scale_kernel(p: Problem, name: str, tensor: str, n: int, transposed: bool) -> Kernel:
    """tensor *= softmax_scale: baddbmm's backward `maybe_multiply(..., alpha)`."""
    d, s = p.head_dim, p.softmax_scale

    def body(ctx: Ctx, b, h, rows):
        region = (b, h, (0, d), rows) if transposed else (b, h, rows, (0, d))
        x = ctx.load("X", tensor, region)
        x = ctx.compute(np.multiply, x, s, vector=(rows[1] - rows[0]) * d, out="X")
        ctx.store("X", tensor, region, x)

    return rows_kernel(p, name, n, body, {"X": p.itemsize}, f"{tensor} *= scale", "bwd")


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


# --- softmax backward, as aten/src/ATen/native/cuda/SoftMax.cu runs it -----------------------

# softmax_backward_cuda_out: `Tensor tmp = grad * output;` then
# `host_softmax_backward<SoftMaxBackwardEpilogue>(tmp, output, ...)`, whose epilogue computes
# gI = tmp - output * sum(tmp) (the comment there: "gradOutput that we get here is really
# gradOutput * output"). host_softmax_backward picks by row length:
PERSISTENT_MAX_COLS = 1024  # dim_size <= 1024 and dim_size * itemsize <= 4096: warp softmax
PERSISTENT_MAX_BYTES = 4096
PERSISTENT_THREADS = 128  # PersistentSoftmax.cuh: threads_per_block = 128, one row per warp
WARP = 32
MAX_BLOCK_THREADS = 1024  # SoftMax.cu max_threads
BWD_ILP = 4  # sizeof(float4) / sizeof(accscalar_t): fp32 accumulation for fp16/bf16/fp32


def _persistent(p: Problem) -> bool:
    return p.seq_k <= PERSISTENT_MAX_COLS and p.seq_k * p.itemsize <= PERSISTENT_MAX_BYTES


def persistent_rows_per_cta(nk: int) -> int:
    """dispatch_softmax_backward: warps_per_block = 128 / warp_size rows, two per warp
    (batches_per_warp) when the row's next power of two is at most 128."""
    pow2 = 1 << max(0, (nk - 1).bit_length())
    warp_size = min(pow2, WARP)
    return (PERSISTENT_THREADS // warp_size) * (2 if pow2 <= 128 else 1)


def block_threads(nk: int) -> int:
    """SoftMax_getBlockSize(ILP, dim): the power of two reaching min(dim / ILP, 1024) / 2,
    at least one warp."""
    most = min(nk // BWD_ILP, MAX_BLOCK_THREADS) // 2
    threads = 1
    while threads < most:
        threads *= 2
    return max(threads, WARP)


def softmax_backward_kernels(p: Problem, hw: Hardware) -> list[Kernel]:
    """dS from dP and P in two launches: `tmp = grad * output` (an elementwise multiply over
    the whole table: reads dP and P, writes tmp), then the softmax backward on tmp and P."""

    def mul(ctx: Ctx, b, h, r, cols):
        g = ctx.load("G", "dP", (b, h, r, cols))
        y = ctx.load("Y", "P", (b, h, r, cols))
        t = ctx.compute(np.multiply, g, y, vector=cols[1] - cols[0], out="G")
        ctx.store("G", "dP_P", (b, h, r, cols), t)

    first = chunk_kernel(
        "mul_grad_output",
        p,
        hw,
        mul,
        {"G": p.itemsize, "Y": p.itemsize},
        "tmp = grad * output (softmax_backward_cuda_out)",
        "bwd",
    )
    return [first, _softmax_backward(p)]


def _epilogue(t, y, s):
    return t - y * s


def _softmax_backward(p: Problem) -> Kernel:
    nk = p.seq_k
    if _persistent(p):
        rows_per_cta = persistent_rows_per_cta(nk)

        def in_registers(ctx: Ctx, cta):
            b, h, i = cta
            rows = span(i, rows_per_cta, p.seq_q)
            n = (rows[1] - rows[0]) * nk
            t = ctx.load("T", "dP_P", (b, h, rows, (0, nk)))
            y = ctx.load("Y", "P", (b, h, rows, (0, nk)))
            s = ctx.compute(lambda t_: t_.sum(axis=-1, keepdims=True), t, vector=n)
            ds = ctx.compute(_epilogue, t, y, s, vector=2 * n, out="T")
            ctx.store("T", "dS", (b, h, rows, (0, nk)), ds)

        shape = (min(rows_per_cta, p.seq_q), nk)
        return Kernel(
            "softmax_bwd",
            row_grid(p, rows_per_cta),
            (Buffer("T", shape, p.itemsize, True), Buffer("Y", shape, p.itemsize, True)),
            in_registers,
            PERSISTENT_THREADS,
            description=f"dS = tmp - P * rowsum(tmp), persistent: {rows_per_cta} rows per "
            "CTA in registers, one read",
            pass_="bwd",
        )
    chunk = min(nk, SOFTMAX_CHUNK)
    classes = block_classes(nk, chunk)

    def two_reads(ctx: Ctx, cta):
        b, h, r = cta
        s = ctx.compute(tm.zeros, 1, 1)
        for c in ctx.loop(classes):  # ilpReduce over gradOutput (= tmp)
            cols = span(c, chunk, nk)
            t = ctx.load("T", "dP_P", (b, h, r, cols))
            s = ctx.compute(
                lambda s_, t_: s_ + t_.sum(axis=-1, keepdims=True), s, t, vector=cols[1] - cols[0]
            )
        for c in ctx.loop(classes):  # WriteBpropResults: output and gradOutput again
            cols = span(c, chunk, nk)
            y = ctx.load("Y", "P", (b, h, r, cols))
            t = ctx.load("T", "dP_P", (b, h, r, cols))
            ds = ctx.compute(_epilogue, t, y, s, vector=2 * (cols[1] - cols[0]), out="T")
            ctx.store("T", "dS", (b, h, r, cols), ds)

    return Kernel(
        "softmax_bwd",
        row_grid(p, 1),
        (Buffer("T", (1, chunk), p.itemsize, True), Buffer("Y", (1, chunk), p.itemsize, True)),
        two_reads,
        block_threads(nk),
        description="cunn_SoftMaxBackward, one row per CTA: sum(tmp), then "
        "dS = tmp - P * sum from tmp and P read again",
        pass_="bwd",
    )
