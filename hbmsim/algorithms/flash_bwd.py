"""FlashAttention backward: FA1 (paper Algorithm 4) and FA2 (FA2 paper Algorithm 2).

Both recompute S and P from Q, K and the softmax statistics saved by the forward; nothing
N x N is stored, and dropout's keep-mask is regenerated on chip.

- fa1: one CTA per (batch, head). K/V blocks outer, Q blocks inner; dQ is read and written in
  HBM every inner step (initialised to zero by its own kernel); dK, dV accumulate on chip and
  are written once per K/V block (so Algorithm 4's zero-initialisation of dK, dV in HBM, which
  those writes overwrite, is not modelled). D = rowsum(dO ∘ O) is recomputed each step.
- fa2: a preprocessing kernel computes D = rowsum(dO ∘ O) and zeroes an fp32 dQ accumulator;
  the main kernel runs one CTA per (batch, head, K/V block), streams the Q blocks that see it,
  keeps dK, dV on chip and adds each dQ partial into the accumulator with an atomic add (read
  and written at L2, counted as a read and a write); a last kernel converts dQ to the dtype.

GQA: dK and dV are computed per query head and summed over each group by a reduction kernel.
"""

from __future__ import annotations

from ..gpu.hardware import Hardware
from ..problem.attention import STAT_ITEMSIZE, Problem
from ..program.plan import Buffer, CtaClass, Ctx, Kernel, TensorSpec, Tiles
from . import tilemath as tm
from .blocks import block_classes, n_blocks, q_blocks_for_kv, span
from .flash import THREADS, score_tile
from .kernels import gqa_reduce_kernel

BWD_STAGES = 2  # Qi and dOi double-buffered in the FA2 backward


def grad_tensors(p: Problem) -> dict[str, TensorSpec]:
    b, h, it, d = p.batch, p.heads, p.itemsize, p.head_dim
    out = {
        "dO": TensorSpec("dO", (b, h, p.seq_q, d), it, "input"),
        "dQ": TensorSpec("dQ", (b, h, p.seq_q, d), it, "output"),
        "dK": TensorSpec("dK", (b, p.kv_heads, p.seq_k, d), it, "output"),
        "dV": TensorSpec("dV", (b, p.kv_heads, p.seq_k, d), it, "output"),
    }
    if p.group_size > 1:
        for n in ("dK_rep", "dV_rep"):
            out[n] = TensorSpec(
                n,
                (b, h, p.seq_k, d),
                it,
                "intermediate",
                "per query head, before the GQA reduction",
            )
    return out


def _dkv_targets(p: Problem):
    """Where a (batch, head) CTA writes dK and dV: its own head's copy under GQA."""
    if p.group_size > 1:
        return ("dK_rep", "dV_rep"), (lambda h: h)
    return ("dK", "dV"), p.kv_head


def _keep(ctx: Ctx, p: Problem, b, h, rows, cols):
    """The regenerated dropout keep-mask scaled by 1/(1-p), or 1 without dropout."""
    if p.dropout == 0:
        return 1.0
    return ctx.dropout_keep(b, h, rows, cols) / (1.0 - p.dropout)


def _q_classes_outer(p: Problem, t: Tiles) -> list[range]:
    """K/V blocks alike: masked (causal or windowed), each its own. Every block stays, even
    one no query row sees: its dK and dV are still written (as zeros)."""
    if p.masked:
        return [range(j, j + 1) for j in range(n_blocks(p.seq_k, t.bk))]
    return block_classes(p.seq_k, t.bk)


def _block_grads(
    ctx: Ctx, p: Problem, b, h, rows, cols, pij, doi, qi, kj, vj, di, dk, dv, pad=None, rng=0.0
):
    """The gradient math one (Q block, K/V block) pair shares in FA1 and FA2: dV += P_dropᵀ dO,
    dP = dO Vᵀ ∘ Z/(1-p), dS = P ∘ (dP - D), dK += scale · dSᵀ Q. Returns (dS, dK, dV).

    `pad`: the (rows, cols, head dim) the math is counted on (flash._scores); `rng`: vector
    operations per element that drawing Z again costs (flash._dropped). Each product is its
    own function (`grad_dv`, `grad_dp`, `grad_ds`, `grad_dk`), for a kernel that runs them in
    another order."""
    dims = pad or (rows[1] - rows[0], cols[1] - cols[0], p.head_dim)
    dv = grad_dv(ctx, p, b, h, rows, cols, dims, dv, pij, doi, rng)
    dp = grad_dp(ctx, p, b, h, rows, cols, dims, doi, vj)
    ds = grad_ds(ctx, dims, pij, dp, di)
    dk = grad_dk(ctx, p, dims, dk, ds, qi)
    return ds, dk, dv


def grad_dv(ctx: Ctx, p: Problem, b, h, rows, cols, dims, dv, pij, doi, rng=0.0):
    """dV += (P ∘ Z/(1-p))ᵀ dO, drawing Z again (`rng` operations per element)."""
    r, c, d = dims
    return ctx.compute(
        lambda dv_, p_, do_: dv_ + (p_ * _keep(ctx, p, b, h, rows, cols)).T @ do_,
        dv,
        pij,
        doi,
        matmul=2 * r * c * d,
        vector=(round((1 + rng) * r * c) if p.dropout > 0 else 0) + c * d,
        out="dVj",
    )


def grad_dp(ctx: Ctx, p: Problem, b, h, rows, cols, dims, doi, vj):
    """dP = dO Vᵀ ∘ Z/(1-p)."""
    r, c, d = dims
    return ctx.compute(
        lambda do_, v_: (do_ @ v_.T) * _keep(ctx, p, b, h, rows, cols),
        doi,
        vj,
        matmul=2 * r * c * d,
        vector=r * c if p.dropout > 0 else 0,
        out="dP",
    )


def grad_ds(ctx: Ctx, dims, pij, dp, di):
    """dS = P ∘ (dP - D)."""
    r, c, _d = dims
    return ctx.compute(
        lambda p_, g_, d_: p_ * (g_ - d_[:, None]), pij, dp, di, vector=2 * r * c, out="dP"
    )


def grad_dk(ctx: Ctx, p: Problem, dims, dk, ds, qi):
    """dK += scale · dSᵀ Q."""
    r, c, d = dims
    scale = p.softmax_scale
    return ctx.compute(
        lambda dk_, g_, q_: dk_ + scale * (g_.T @ q_),
        dk,
        ds,
        qi,
        matmul=2 * r * c * d,
        vector=2 * c * d,
        out="dKj",
    )


# --- FA2 -------------------------------------------------------------------------------------


def fa2_backward_programs(
    p: Problem, t: Tiles, pad: tuple[int, int, int] | None = None, rng: float = 0.0
):
    """The three tile programs of the FA2 backward and its tensors: (pre, main, convert,
    tensors). `pad`: the (rows, cols, head dim) each block's math is counted on, for kernels
    that run whole MMA tiles (flash._scores); None: the blocks' own sizes. `rng`: what drawing
    dropout's mask again costs per element (flash._dropped)."""
    nq, nk, d = p.seq_q, p.seq_k, p.head_dim
    scale = p.softmax_scale
    (dk_name, dv_name), dkv_head = _dkv_targets(p)
    tensors = grad_tensors(p)
    tensors["D"] = TensorSpec(
        "D", (p.batch, p.heads, nq), STAT_ITEMSIZE, "intermediate", "rowsum(dO ∘ O)"
    )
    tensors["dQ_accum"] = TensorSpec(
        "dQ_accum",
        (p.batch, p.heads, nq, d),
        STAT_ITEMSIZE,
        "intermediate",
        "fp32 dQ accumulated by atomic adds",
    )

    def pre(ctx: Ctx, cta):
        b, h, i = cta
        rows = span(i, t.bq, nq)
        n = rows[1] - rows[0]
        do = ctx.load("dOi", "dO", (b, h, rows, (0, d)))
        o = ctx.load("Oi", "O", (b, h, rows, (0, d)))
        di = ctx.compute(lambda x, y: (x * y).sum(axis=1), do, o, vector=2 * n * d, out="D")
        ctx.store("D", "D", (b, h, rows), di)
        ctx.store("dQi", "dQ_accum", (b, h, rows, (0, d)), ctx.compute(tm.zeros, n, d, out="dQi"))

    def main(ctx: Ctx, cta):
        b, h, j = cta
        kvh = p.kv_head(h)
        cols = span(j, t.bk, nk)
        c = cols[1] - cols[0]
        kj = ctx.load("Kj", "K", (b, kvh, cols, (0, d)))
        vj = ctx.load("Vj", "V", (b, kvh, cols, (0, d)))
        dk = ctx.compute(tm.zeros, c, d, out="dKj")
        dv = ctx.compute(tm.zeros, c, d, out="dVj")
        segments, _ = q_blocks_for_kv(p, cols[0], cols[1], t.bq)
        for i in ctx.loop(segments):
            rows = span(i, t.bq, nq)
            r = rows[1] - rows[0]
            qi = ctx.load("Qi", "Q", (b, h, rows, (0, d)))
            doi = ctx.load("dOi", "dO", (b, h, rows, (0, d)))
            lse = ctx.load("lse", "lse", (b, h, rows))
            di = ctx.load("D", "D", (b, h, rows))
            s = score_tile(ctx, p, qi, kj, rows, cols, pad)
            pr, pc, pd = pad or (r, c, d)
            pij = ctx.compute(tm.exp_minus, s, lse, vector=pr * pc, exp=pr * pc, out="S")
            ds, dk, dv = _block_grads(
                ctx, p, b, h, rows, cols, pij, doi, qi, kj, vj, di, dk, dv, pad, rng
            )
            dq = ctx.compute(
                lambda g_, k_: scale * (g_ @ k_),
                ds,
                kj,
                matmul=2 * pr * pc * pd,
                vector=pr * pd,
                out="dQi",
            )
            ctx.atomic_add("dQi", "dQ_accum", (b, h, rows, (0, d)), dq)
        ctx.store("dKj", dk_name, (b, dkv_head(h), cols, (0, d)), dk)
        ctx.store("dVj", dv_name, (b, dkv_head(h), cols, (0, d)), dv)

    def convert(ctx: Ctx, cta):
        b, h, i = cta
        rows = span(i, t.bq, nq)
        x = ctx.load("dQi", "dQ_accum", (b, h, rows, (0, d)))
        ctx.store("dQi", "dQ", (b, h, rows, (0, d)), x)

    return pre, main, convert, tensors


def fa2_backward(p: Problem, hw: Hardware, t: Tiles) -> tuple[list[Kernel], dict[str, TensorSpec]]:
    nq, d, it = p.seq_q, p.head_dim, p.itemsize
    br, bc = min(t.bq, nq), min(t.bk, p.seq_k)
    pre, main, convert, tensors = fa2_backward_programs(p, t)
    q_grid = tuple(CtaClass((range(p.batch), range(p.heads), r)) for r in block_classes(nq, t.bq))
    kv_grid = tuple(CtaClass((range(p.batch), range(p.heads), r)) for r in _q_classes_outer(p, t))
    streamed = (BWD_STAGES, br, d)
    kernels = [
        Kernel(
            "fa2_bwd_pre",
            q_grid,
            (
                Buffer("dOi", (br, d), it),
                Buffer("Oi", (br, d), it),
                Buffer("D", (br,), STAT_ITEMSIZE),
                Buffer("dQi", (br, d), STAT_ITEMSIZE),
            ),
            pre,
            THREADS,
            pass_="bwd",
            description="D = rowsum(dO * O); dQ_accum = 0",
        ),
        Kernel(
            "fa2_bwd",
            kv_grid,
            (
                Buffer("Kj", (bc, d), it),
                Buffer("Vj", (bc, d), it),
                Buffer("dKj", (bc, d), it),
                Buffer("dVj", (bc, d), it),
                Buffer("Qi", streamed, it),
                Buffer("dOi", streamed, it),
                Buffer("S", (br, bc), it),
                Buffer("dP", (br, bc), it),
                Buffer("lse", (br,), STAT_ITEMSIZE),
                Buffer("D", (br,), STAT_ITEMSIZE),
                Buffer("dQi", (br, d), STAT_ITEMSIZE),
            ),
            main,
            THREADS,
            stages=BWD_STAGES,
            pass_="bwd",
            description="per K/V block: recompute P, accumulate dK, dV on chip, atomically "
            "add dQ partials",
        ),
        Kernel(
            "fa2_bwd_dq",
            q_grid,
            (Buffer("dQi", (br, d), STAT_ITEMSIZE),),
            convert,
            THREADS,
            pass_="bwd",
            description="dQ = dQ_accum, converted to the dtype",
        ),
    ]
    if p.group_size > 1:
        kernels.append(gqa_reduce_kernel(p))
    return kernels, tensors


# --- FA1 -------------------------------------------------------------------------------------


def fa1_backward(p: Problem, hw: Hardware, t: Tiles) -> tuple[list[Kernel], dict[str, TensorSpec]]:
    nq, nk, d, it = p.seq_q, p.seq_k, p.head_dim, p.itemsize
    br, bc = min(t.bq, nq), min(t.bk, nk)
    (dk_name, dv_name), dkv_head = _dkv_targets(p)
    tensors = grad_tensors(p)

    def init(ctx: Ctx, cta):  # Algorithm 4 line 2 for dQ
        b, h, i = cta
        rows = span(i, t.bq, nq)
        ctx.store(
            "dQi",
            "dQ",
            (b, h, rows, (0, d)),
            ctx.compute(tm.zeros, rows[1] - rows[0], d, out="dQi"),
        )

    def main(ctx: Ctx, cta):
        b, h = cta
        kvh = p.kv_head(h)
        for j in ctx.loop(_q_classes_outer(p, t)):  # line 5: for j in 1..Tc
            cols = span(j, t.bk, nk)
            c = cols[1] - cols[0]
            kj = ctx.load("Kj", "K", (b, kvh, cols, (0, d)))  # line 6
            vj = ctx.load("Vj", "V", (b, kvh, cols, (0, d)))
            dk = ctx.compute(tm.zeros, c, d, out="dKj")  # line 7
            dv = ctx.compute(tm.zeros, c, d, out="dVj")
            segments, _ = q_blocks_for_kv(p, cols[0], cols[1], t.bq)
            for i in ctx.loop(segments):  # line 8: for i in 1..Tr
                rows = span(i, t.bq, nq)
                dk, dv = _fa1_bwd_inner_step(ctx, p, rows, cols, kj, vj, dk, dv, b, h)
            ctx.store("dKj", dk_name, (b, dkv_head(h), cols, (0, d)), dk)  # line 24
            ctx.store("dVj", dv_name, (b, dkv_head(h), cols, (0, d)), dv)

    buffers = (
        Buffer("Kj", (bc, d), it),
        Buffer("Vj", (bc, d), it),
        Buffer("dKj", (bc, d), it),
        Buffer("dVj", (bc, d), it),
        Buffer("Qi", (br, d), it),
        Buffer("Oi", (br, d), it),
        Buffer("dOi", (br, d), it),
        Buffer("dQi", (br, d), it),
        Buffer("S", (br, bc), it),
        Buffer("dP", (br, bc), it),
        Buffer("l", (br,), STAT_ITEMSIZE),
        Buffer("m", (br,), STAT_ITEMSIZE),
    )
    q_grid = tuple(CtaClass((range(p.batch), range(p.heads), r)) for r in block_classes(nq, t.bq))
    kernels = [
        Kernel(
            "fa1_bwd_init",
            q_grid,
            (Buffer("dQi", (br, d), it),),
            init,
            THREADS,
            pass_="bwd",
            description="dQ = 0 in HBM (Algorithm 4, line 2)",
        ),
        Kernel(
            "fa1_bwd",
            (CtaClass((range(p.batch), range(p.heads))),),
            buffers,
            main,
            THREADS,
            pass_="bwd",
            description="K/V blocks outer, Q blocks inner; dQ read "
            "and written in HBM every inner step",
        ),
    ]
    if p.group_size > 1:
        kernels.append(gqa_reduce_kernel(p))
    return kernels, tensors


def _fa1_bwd_inner_step(ctx: Ctx, p: Problem, rows, cols, kj, vj, dk, dv, b: int, h: int):
    """Algorithm 4, lines 9-21: one Q block against the K/V block in SRAM; dQi read from HBM,
    updated and written back, dKj and dVj accumulated on chip (returned)."""
    d, scale = p.head_dim, p.softmax_scale
    r, c = rows[1] - rows[0], cols[1] - cols[0]
    qi = ctx.load("Qi", "Q", (b, h, rows, (0, d)))  # line 9
    oi = ctx.load("Oi", "O", (b, h, rows, (0, d)))
    doi = ctx.load("dOi", "dO", (b, h, rows, (0, d)))
    dqi = ctx.load("dQi", "dQ", (b, h, rows, (0, d)))
    li = ctx.load("l", "l", (b, h, rows))
    mi = ctx.load("m", "m", (b, h, rows))
    s = score_tile(ctx, p, qi, kj, rows, cols)  # lines 10-12
    pij = ctx.compute(
        lambda s_, m_, l_: tm.exp_minus(s_, m_) / l_[:, None],
        s,
        mi,
        li,
        vector=2 * r * c,
        exp=r * c,
        out="S",
    )  # line 13
    di = ctx.compute(lambda x, y: (x * y).sum(axis=1), doi, oi, vector=2 * r * d)  # line 19
    ds, dk, dv = _block_grads(
        ctx, p, b, h, rows, cols, pij, doi, qi, kj, vj, di, dk, dv
    )  # lines 16-18, 20, 22
    dqi = ctx.compute(
        lambda q_, g_, k_: q_ + scale * (g_ @ k_),
        dqi,
        ds,
        kj,
        matmul=2 * r * c * d,
        vector=2 * r * d,
        out="dQi",
    )
    ctx.store("dQi", "dQ", (b, h, rows, (0, d)), dqi)  # line 21
    return dk, dv


__all__ = ["fa1_backward", "fa2_backward", "fa2_backward_programs"]
