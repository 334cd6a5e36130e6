"""Standard (eager) attention: the real sequence of kernels, each a round trip through HBM.

Forward (what PyTorch eager runs for `softmax(q @ k.transpose(-2, -1) * scale) @ v`, the
FlashAttention paper's Algorithm 0):

    S = Q Kᵀ · scale      tiled matmul, scale in its epilogue          writes S  (N x N)
    S = mask(S)           causal or windowed: reads S and a stored mask writes S
    P = softmax(S)        row-wise                                      writes P  (N x N)
    Pd = dropout(P)       dropout > 0 only: also writes its keep-mask  writes Pd, Z (1 byte)
    O = Pd V              tiled matmul (P V without dropout)           writes O

Backward (autograd's kernels for the same graph, reading what the forward saved):

    dV = Pdᵀ dO,  dPd = dO Vᵀ,  dP = dPd ∘ Z / (1 - p) (dropout),
    dS = P ∘ (dP - rowsum(dP ∘ P)) (softmax backward),  dS = mask(dS) (masked),
    dQ = dS K · scale,  dK = dSᵀ Q · scale,  and for GQA a reduction of dK, dV over the group.

Softmax: a row that fits in one block's SRAM is read once (four rows per CTA up to 1,024
columns, as PyTorch's persistent softmax; one row per CTA beyond); a longer row is read three
times forward (max, sum, write: PyTorch's cunn_SoftMaxForward) and twice backward.

Flop conventions: matmul 2mnk; scale, mask and dropout one vector op per element each (the
random-number generation is not counted); softmax 4 vector ops and one exp per element per
pass that exponentiates; softmax backward 4 vector ops per element.

Latent K/V (MLA's absorbed form, Problem.latent_kv): there is no V tensor; O = P V reads its
values from the latent cache K, columns 0 .. head_dim_v, as `attn @ kv[..., :dv]` does. Eager
attention reads the latent rows twice, once per matmul; only a fused kernel reads them once.
"""

from __future__ import annotations

import numpy as np

from ..gpu.hardware import Hardware
from ..problem.attention import MASK_ITEMSIZE, Problem
from ..program.plan import Buffer, CtaClass, Ctx, Kernel, TensorSpec, Tiles
from . import tilemath as tm
from .blocks import block_classes, span
from .kernels import THREADS, Operand, chunk_kernel, gqa_reduce_kernel, matmul_kernel

DEFAULT_TILES = Tiles(bq=128, bk=128, bd=32)  # a common cuBLAS/CUTLASS fp16 CTA tile
SOFTMAX_CHUNK = 4096  # elements per chunk when a softmax row does not fit in SRAM
SOFTMAX_ROWS_PER_CTA = 4  # short rows: one warp each, 4 warps per CTA
PERSISTENT_SOFTMAX_MAX_COLS = 1024  # PyTorch keeps rows up to this long in registers


def _nn(p: Problem, name: str, desc: str, itemsize: int | None = None) -> TensorSpec:
    shape = (p.batch, p.heads, p.seq_q, p.seq_k)
    return TensorSpec(name, shape, itemsize or p.itemsize, "intermediate", desc)


def _rows(p: Problem, name: str, heads: int, role: str, desc: str = "") -> TensorSpec:
    n = p.seq_q if name in ("Q", "O", "dO", "dQ") else p.seq_k
    width = p.dv if name in ("V", "O") else p.head_dim  # backward: plain K/V only
    return TensorSpec(name, (p.batch, heads, n, width), p.itemsize, role, desc)


def tensors(p: Problem, backward: bool) -> dict[str, TensorSpec]:
    inputs = "QK" if p.latent_kv else "QKV"
    out = {n: _rows(p, n, p.heads if n == "Q" else p.kv_heads, "input") for n in inputs}
    if p.latent_kv:
        out["K"] = _rows(p, "K", p.kv_heads, "input", p.latent_text())
    out["S"] = _nn(p, "S", "scores Q Kᵀ · scale")
    out["P"] = _nn(p, "P", "softmax(S)")
    if p.masked:
        out[mask_tensor(p)] = TensorSpec(
            mask_tensor(p),
            (p.seq_q, p.seq_k),
            MASK_ITEMSIZE,
            "input",
            "stored bool mask, shared by all heads"
            + (f" ({p.window_text()})" if p.windowed else ""),
        )
    if p.dropout > 0:
        out["P_drop"] = _nn(p, "P_drop", "dropout(P)")
        out["dropout_mask"] = _nn(p, "dropout_mask", "dropout keep-mask Z", MASK_ITEMSIZE)
    out["O"] = _rows(p, "O", p.heads, "output")
    if backward:
        out["dO"] = _rows(p, "dO", p.heads, "input")
        if p.dropout > 0:
            out["dP_drop"] = _nn(p, "dP_drop", "dO Vᵀ")
        out["dP"] = _nn(p, "dP", "gradient of P")
        out["dS"] = _nn(p, "dS", "gradient of S")
        out["dQ"] = _rows(p, "dQ", p.heads, "output")
        for n in ("dK", "dV"):
            out[n] = _rows(p, n, p.kv_heads, "output")
            if p.group_size > 1:
                out[n + "_rep"] = _rows(p, n + "_rep", p.heads, "intermediate")
    return out


def mask_tensor(p: Problem) -> str:
    """The stored mask's name: the sliding window's band (a causal one included) or the
    causal triangle. Standard attention still computes and stores the whole N x N table: the
    window only changes which entries the mask kernel hides."""
    return "window_mask" if p.windowed else "causal_mask"


def head_region(bi, h, rows, cols):
    return (bi, h, rows, cols)


def kv_region(p: Problem):
    def region(bi, h, rows, cols):
        return (bi, p.kv_head(h), rows, cols)

    return region


def transposed_region(region):
    def swapped(bi, h, rows, cols):
        return region(bi, h, cols, rows)

    return swapped


# --- forward ---------------------------------------------------------------------------------


def forward(p: Problem, hw: Hardware, t: Tiles) -> list[Kernel]:
    nq, nk, d, dv = p.seq_q, p.seq_k, p.head_dim, p.dv
    kernels = [
        matmul_kernel(
            "qk",
            p,
            t,
            Operand("Q", head_region),
            Operand("K", transposed_region(kv_region(p)), True),
            Operand("S", head_region),
            nq,
            nk,
            d,
            p.softmax_scale,
            "S = Q Kᵀ · scale (tiled matmul)",
        )
    ]
    if p.masked:
        kernels.append(_mask_kernel(p, hw, "mask", "S", "fwd", -np.inf))
    kernels.append(softmax_kernel(p, hw))
    if p.dropout > 0:
        kernels.append(dropout_kernel(p, hw))
    kernels.append(
        matmul_kernel(
            "pv",
            p,
            t,
            Operand("P_drop" if p.dropout > 0 else "P", head_region),
            Operand("K" if p.latent_kv else "V", kv_region(p)),  # latent: K's first dv columns
            Operand("O", head_region),
            nq,
            dv,
            nk,
            1.0,
            "O = P V (tiled matmul)"
            + (f", V = the latent K's first {dv} columns" if p.latent_kv else ""),
        )
    )
    return kernels


def _mask_kernel(p: Problem, hw: Hardware, name: str, tensor: str, pass_: str, fill: float):
    """tensor = where(mask, tensor, fill), reading the stored bool mask."""

    def body(ctx: Ctx, b, h, r, cols):
        x = ctx.load("X", tensor, (b, h, r, cols))
        keep = ctx.load("M", mask_tensor(p), (r, cols))
        x = ctx.compute(
            lambda x_, k_: np.where(k_, x_, fill), x, keep, vector=cols[1] - cols[0], out="X"
        )
        ctx.store("X", tensor, (b, h, r, cols), x)

    return chunk_kernel(
        name,
        p,
        hw,
        body,
        {"X": p.itemsize, "M": MASK_ITEMSIZE},
        f"{tensor} = masked_fill({tensor}, ~mask, {fill}) with a stored mask",
        pass_,
    )


def dropout_kernel(p: Problem, hw: Hardware) -> Kernel:
    inv_keep = 1.0 / (1.0 - p.dropout)

    def body(ctx: Ctx, b, h, r, cols):
        n = cols[1] - cols[0]
        x = ctx.load("X", "P", (b, h, r, cols))
        z = ctx.compute(lambda: ctx.dropout_keep(b, h, (r, r + 1), cols), vector=n, out="Z")
        x = ctx.compute(lambda x_, z_: x_ * z_ * inv_keep, x, z, vector=n, out="X")
        ctx.store("X", "P_drop", (b, h, r, cols), x)
        ctx.store("Z", "dropout_mask", (b, h, r, cols), z)

    return chunk_kernel(
        "dropout",
        p,
        hw,
        body,
        {"X": p.itemsize, "Z": MASK_ITEMSIZE},
        f"P_drop = P * Z / (1 - {p.dropout:g}); stores the keep-mask Z",
    )


def row_grid(p: Problem, rows_per_cta: int) -> tuple[CtaClass, ...]:
    return tuple(
        CtaClass((range(p.batch), range(p.heads), r)) for r in block_classes(p.seq_q, rows_per_cta)
    )


def softmax_kernel(p: Problem, hw: Hardware) -> Kernel:
    nk = p.seq_k
    if nk * p.itemsize <= hw.sram_bytes_per_block:
        rows_per_cta = SOFTMAX_ROWS_PER_CTA if nk <= PERSISTENT_SOFTMAX_MAX_COLS else 1

        def one_pass(ctx: Ctx, cta):
            b, h, i = cta
            rows = span(i, rows_per_cta, p.seq_q)
            n = (rows[1] - rows[0]) * nk
            x = ctx.load("row", "S", (b, h, rows, (0, nk)))
            x = ctx.compute(tm.softmax_rows, x, vector=4 * n, exp=n, out="row")
            ctx.store("row", "P", (b, h, rows, (0, nk)), x)

        return Kernel(
            "softmax",
            row_grid(p, rows_per_cta),
            (Buffer("row", (min(rows_per_cta, p.seq_q), nk), p.itemsize),),
            one_pass,
            THREADS,
            description=f"P = softmax(S), {rows_per_cta} row(s) per CTA held on chip: one read",
        )
    chunk = max(1, min(SOFTMAX_CHUNK, hw.sram_bytes_per_block // p.itemsize))
    classes = block_classes(nk, chunk)

    def three_pass(ctx: Ctx, cta):
        b, h, r = cta
        m = ctx.compute(tm.full, -np.inf, 1)
        for c in ctx.loop(classes):  # pass 1: row max
            cols = span(c, chunk, nk)
            x = ctx.load("chunk", "S", (b, h, r, cols))
            m = ctx.compute(
                lambda m_, x_: np.maximum(m_, x_.max(axis=-1)), m, x, vector=cols[1] - cols[0]
            )
        denom = ctx.compute(tm.zeros, 1)
        for c in ctx.loop(classes):  # pass 2: sum of exp(x - max)
            cols = span(c, chunk, nk)
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
        for c in ctx.loop(classes):  # pass 3: normalise and write
            cols = span(c, chunk, nk)
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

    return Kernel(
        "softmax",
        row_grid(p, 1),
        (Buffer("chunk", (1, min(chunk, nk)), p.itemsize),),
        three_pass,
        THREADS,
        description="P = softmax(S), row too long for SRAM: three reads",
    )


# --- backward --------------------------------------------------------------------------------


def backward(p: Problem, hw: Hardware, t: Tiles) -> list[Kernel]:
    nq, nk, d = p.seq_q, p.seq_k, p.head_dim
    gqa = p.group_size > 1
    dk, dv = ("dK_rep", "dV_rep") if gqa else ("dK", "dV")
    dkv_region = head_region if gqa else kv_region(p)
    pd = "P_drop" if p.dropout > 0 else "P"
    kernels = [
        matmul_kernel(
            "dv",
            p,
            t,
            Operand(pd, transposed_region(head_region), True),
            Operand("dO", head_region),
            Operand(dv, dkv_region),
            nk,
            d,
            nq,
            1.0,
            "dV = P_dropᵀ dO",
            "bwd",
        ),
        matmul_kernel(
            "dp",
            p,
            t,
            Operand("dO", head_region),
            Operand("V", transposed_region(kv_region(p)), True),
            Operand("dP_drop" if p.dropout > 0 else "dP", head_region),
            nq,
            nk,
            d,
            1.0,
            "dP = dO Vᵀ",
            "bwd",
        ),
    ]
    if p.dropout > 0:
        kernels.append(dropout_bwd_kernel(p, hw))
    kernels.append(_softmax_bwd_kernel(p, hw))
    if p.masked:
        kernels.append(_mask_kernel(p, hw, "mask_bwd", "dS", "bwd", 0.0))
    kernels += [
        matmul_kernel(
            "dq",
            p,
            t,
            Operand("dS", head_region),
            Operand("K", kv_region(p)),
            Operand("dQ", head_region),
            nq,
            d,
            nk,
            p.softmax_scale,
            "dQ = dS K · scale",
            "bwd",
        ),
        matmul_kernel(
            "dk",
            p,
            t,
            Operand("dS", transposed_region(head_region), True),
            Operand("Q", head_region),
            Operand(dk, dkv_region),
            nk,
            d,
            nq,
            p.softmax_scale,
            "dK = dSᵀ Q · scale",
            "bwd",
        ),
    ]
    if gqa:
        kernels.append(gqa_reduce_kernel(p))
    return kernels


def dropout_bwd_kernel(p: Problem, hw: Hardware) -> Kernel:
    inv_keep = 1.0 / (1.0 - p.dropout)

    def body(ctx: Ctx, b, h, r, cols):
        x = ctx.load("X", "dP_drop", (b, h, r, cols))
        z = ctx.load("Z", "dropout_mask", (b, h, r, cols))
        x = ctx.compute(lambda x_, z_: x_ * z_ * inv_keep, x, z, vector=cols[1] - cols[0], out="X")
        ctx.store("X", "dP", (b, h, r, cols), x)

    return chunk_kernel(
        "dropout_bwd",
        p,
        hw,
        body,
        {"X": p.itemsize, "Z": MASK_ITEMSIZE},
        "dP = dP_drop * Z / (1 - p)",
        "bwd",
    )


def _softmax_bwd_kernel(p: Problem, hw: Hardware) -> Kernel:
    nk = p.seq_k
    if 2 * nk * p.itemsize <= hw.sram_bytes_per_block:

        def one_pass(ctx: Ctx, cta):
            b, h, r = cta
            y = ctx.load("P", "P", (b, h, r, (0, nk)))
            g = ctx.load("dP", "dP", (b, h, r, (0, nk)))
            ds = ctx.compute(
                lambda y_, g_: y_ * (g_ - (y_ * g_).sum(axis=-1, keepdims=True)),
                y,
                g,
                vector=4 * nk,
                out="dP",
            )
            ctx.store("dP", "dS", (b, h, r, (0, nk)), ds)

        buffers = (Buffer("P", (1, nk), p.itemsize), Buffer("dP", (1, nk), p.itemsize))
        return Kernel(
            "softmax_bwd",
            row_grid(p, 1),
            buffers,
            one_pass,
            THREADS,
            pass_="bwd",
            description="dS = P * (dP - rowsum(dP * P)), one row per CTA: one read",
        )
    chunk = max(1, min(SOFTMAX_CHUNK, hw.sram_bytes_per_block // (2 * p.itemsize)))
    classes = block_classes(nk, chunk)

    def two_pass(ctx: Ctx, cta):
        b, h, r = cta
        dot = ctx.compute(tm.zeros, 1, 1)
        for c in ctx.loop(classes):  # pass 1: rowsum(dP * P)
            cols = span(c, chunk, nk)
            y = ctx.load("P", "P", (b, h, r, cols))
            g = ctx.load("dP", "dP", (b, h, r, cols))
            dot = ctx.compute(
                lambda s_, y_, g_: s_ + (y_ * g_).sum(axis=-1, keepdims=True),
                dot,
                y,
                g,
                vector=2 * (cols[1] - cols[0]),
            )
        for c in ctx.loop(classes):  # pass 2: dS
            cols = span(c, chunk, nk)
            y = ctx.load("P", "P", (b, h, r, cols))
            g = ctx.load("dP", "dP", (b, h, r, cols))
            ds = ctx.compute(
                lambda y_, g_, s_: y_ * (g_ - s_),
                y,
                g,
                dot,
                vector=2 * (cols[1] - cols[0]),
                out="dP",
            )
            ctx.store("dP", "dS", (b, h, r, cols), ds)

    w = min(chunk, nk)
    buffers = (Buffer("P", (1, w), p.itemsize), Buffer("dP", (1, w), p.itemsize))
    return Kernel(
        "softmax_bwd",
        row_grid(p, 1),
        buffers,
        two_pass,
        THREADS,
        pass_="bwd",
        description="dS = P * (dP - rowsum(dP * P)), long rows: two reads",
    )
