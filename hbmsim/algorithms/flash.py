"""FlashAttention forward: FA1 (paper Algorithm 1 loop order) and FA2 (Q blocks outer).

Notation follows the papers: Br x Bc score tiles (`bq`, `bk` here), Tr = ceil(Nq/Br) Q blocks,
Tc = ceil(Nk/Bc) K/V blocks; Qi, Kj, Vj, Oi tiles; m (running row max) and l (running row sum
of exponentials). On-chip tiles are counted in the problem dtype and m, l in fp32, the paper's
convention (its M counts elements).

Causal: blocks wholly above the diagonal are skipped; blocks that straddle it are computed in
full and masked. A sliding window does the same at both edges of its band: K/V blocks wholly
outside it are never loaded, blocks an edge crosses are masked (blocks.kv_blocks_for_q).
Ragged last blocks are exactly as large as what is left.
Dropout: the keep-mask is regenerated on chip from the RNG state, so it costs no HBM traffic.
Latent K/V (MLA's absorbed form, Problem.latent_kv): V is K's first dv columns, so each K/V
block is one load of the latent tile Kj, used whole for S and its first dv columns for P V;
no V tile is loaded or held. O, its accumulator and P V run over dv = head_dim_v columns.
"""

from __future__ import annotations

import numpy as np

from ..gpu.hardware import Hardware
from ..problem.attention import STAT_ITEMSIZE, Problem
from ..program.plan import Buffer, CtaClass, Ctx, Kernel, TensorSpec, Tiles
from . import kernel_fa2, loop_costs
from . import tilemath as tm
from .blocks import (
    block_classes,
    kv_blocks_for_q,
    n_blocks,
    q_block_classes,
    q_blocks_for_kv,
    span,
    tile_masked,
)

THREADS = 128  # 4 warps, as FlashAttention-2 uses for head_dim <= 128
FA2_STAGES = 2  # K/V double-buffered: block j+1 loads while block j is computed


def io_tensors(p: Problem) -> dict[str, TensorSpec]:
    """Q, K, V and O; with latent K/V, K is the latent cache and there is no V of its own."""
    b, h, it = p.batch, p.heads, p.itemsize
    k = (b, p.kv_heads, p.seq_k, p.head_dim)
    out = {"Q": TensorSpec("Q", (b, h, p.seq_q, p.head_dim), it, "input")}
    if p.latent_kv:
        out["K"] = TensorSpec("K", k, it, "input", p.latent_text())
    else:
        out["K"] = TensorSpec("K", k, it, "input")
        out["V"] = TensorSpec("V", (b, p.kv_heads, p.seq_k, p.dv), it, "input")
    out["O"] = TensorSpec("O", (b, h, p.seq_q, p.dv), it, "output")
    return out


def tile_buffers(p: Problem, t: Tiles, stages: int = 1) -> tuple[Buffer, ...]:
    """Qi, Kj, Vj, S, Oi, m, l. With stages > 1 Kj and Vj get one copy per stage, so the next
    block's loads can land while this block is computed (double buffering). Latent K/V: no
    Vj, the values are read out of Kj."""
    br, bc, d, it = min(t.bq, p.seq_q), min(t.bk, p.seq_k), p.head_dim, p.itemsize
    dv = p.dv
    kv = (stages, bc) if stages > 1 else (bc,)
    vj = () if p.latent_kv else (Buffer("Vj", (*kv, dv), it),)
    return (
        Buffer("Qi", (br, d), it),
        Buffer("Kj", (*kv, d), it),
        *vj,
        Buffer("S", (br, bc), it),  # S_ij, then P_ij in place
        Buffer("Oi", (br, dv), it),
        Buffer("m", (br,), STAT_ITEMSIZE),
        Buffer("l", (br,), STAT_ITEMSIZE),
    )


def value_tile(ctx: Ctx, p: Problem, kj, b: int, kvh: int, cols):
    """Vj: loaded from V, or, with latent K/V, the tile Kj already on chip (its first dv
    columns are the values; the P V product slices them, see `pv`)."""
    if p.latent_kv:
        return kj
    return ctx.load("Vj", "V", (b, kvh, cols, (0, p.dv)))


def pv(p_, v, dv: int):
    """P Vj over the first dv columns of Vj: all of V's, or the value part of a latent tile."""
    return p_ @ v[:, :dv]


def score_tile(
    ctx: Ctx,
    p: Problem,
    qi,
    kj,
    rows,
    cols,
    pad: tuple[int, int, int] | None = None,
    mask_all: bool = False,
):
    """S_ij = Qi Kjᵀ · scale, masked when the tile straddles the causal diagonal or an edge of
    the sliding window's band.

    `pad`: (rows, cols, head dim) the hardware computes on, when a kernel runs whole MMA tiles
    however few rows and columns are real (library mirrors); None: the tile's own sizes.
    `mask_all`: apply the mask to every tile, as a kernel that cannot tell which tiles the
    band's edges cross does (a library mirror's local kernel)."""
    br, bc, d = pad or (rows[1] - rows[0], cols[1] - cols[0], p.head_dim)
    s = ctx.compute(
        lambda q, k: q @ k.T * p.softmax_scale,
        qi,
        kj,
        matmul=2 * br * bc * d,
        vector=br * bc,
        out="S",
    )
    if mask_all or tile_masked(p, rows, cols):
        s = ctx.compute(
            lambda x: tm.mask_scores(
                x, tm.band_visible(rows, cols, p.causal_offset, p.left_reach, p.right_reach)
            ),
            s,
            vector=br * bc,
            out="S",
        )
    return s


def dropout_tile(ctx: Ctx, p: Problem, pij, b, h, rows, cols, rng: float = 0.0):
    """P_ij ∘ Z_ij / (1 - p) with Z regenerated on chip (dropout > 0 only). `rng`: the vector
    operations per element that drawing Z costs (a library mirror's generator, see
    libraries/philox.py; the textbook programs count none)."""
    if p.dropout == 0:
        return pij
    n = (rows[1] - rows[0]) * (cols[1] - cols[0])
    inv = 1.0 / (1.0 - p.dropout)
    return ctx.compute(
        lambda x: x * ctx.dropout_keep(b, h, rows, cols) * inv,
        pij,
        vector=round((2 + rng) * n),
        out="S",
    )


def online_step(
    ctx: Ctx,
    p: Problem,
    qi,
    oi,
    l,
    m,
    b,
    h,
    rows,
    cols,
    pad: tuple[int, int, int] | None = None,
    rng: float = 0.0,
    mask_all: bool = False,
    kv_at=None,
):
    """One K/V block of the online softmax (FA2 Algorithm 1, lines 7-10), for the Q rows
    `rows` against key columns `cols`: load Kj and Vj, S = Qi Kjᵀ, new row max, rescale the
    running sum and the partial output, add P Vj. Returns the new (Oi, l, m).

    `pad`: the (rows, cols, head dim) the math is counted on, and `mask_all`, as in
    `score_tile`. `kv_at(b, kv head, cols)`: where the K and V tile lie when not at
    (b, kv head, cols, all of d) (a paged cache's pool)."""
    kvh = p.kv_head(h)
    br, bc, d = pad or (rows[1] - rows[0], cols[1] - cols[0], p.head_dim)
    dv = d if pad else p.dv  # a padded mirror runs plain K/V only (one head dim)
    at = kv_at(b, kvh, cols) if kv_at else (b, kvh, cols, (0, p.head_dim))
    kj = ctx.load("Kj", "K", at)
    # a paged cache (kv_at) holds plain K/V only: the mirrors refuse latent K/V
    vj = ctx.load("Vj", "V", at) if kv_at else value_tile(ctx, p, kj, b, kvh, cols)
    s = score_tile(ctx, p, qi, kj, rows, cols, pad, mask_all)
    m_new = ctx.compute(
        lambda m_, s_: np.maximum(m_, s_.max(axis=1)), m, s, vector=br * bc, out="m"
    )
    pij = ctx.compute(tm.exp_minus, s, m_new, vector=br * bc, exp=br * bc, out="S")
    alpha = ctx.compute(tm.exp_diff, m, m_new, vector=br, exp=br)
    l = ctx.compute(
        lambda a, l_, p_: a * l_ + p_.sum(axis=1), alpha, l, pij, vector=br * bc + 2 * br, out="l"
    )
    pij = dropout_tile(ctx, p, pij, b, h, rows, cols, rng)
    width = p.dv
    oi = ctx.compute(
        lambda a, o, p_, v: a[:, None] * o + pv(p_, v, width),
        alpha,
        oi,
        pij,
        vj,
        matmul=2 * br * bc * dv,
        vector=br * dv,
        out="Oi",
    )
    return oi, l, m_new


# --- FA2 -----------------------------------------------------------------------------------


def fa2_forward_program(
    p: Problem,
    t: Tiles,
    pad: tuple[int, int, int] | None = None,
    rng: float = 0.0,
    mask_all: bool = False,
):
    """The FA2 forward tile program, its grid (batch, head, Q block) and its tensors.

    `pad`: the (rows, cols, head dim) each block's math is counted on, and `mask_all`, see
    `score_tile`; `rng`: what drawing dropout's mask costs per element (`dropout_tile`)."""
    nq, d, dv = p.seq_q, p.head_dim, p.dv

    def program(ctx: Ctx, cta):
        b, h, i = cta
        rows = span(i, t.bq, nq)
        br = rows[1] - rows[0]
        qi = ctx.load("Qi", "Q", (b, h, rows, (0, d)))  # line 4: load Qi
        oi = ctx.compute(tm.zeros, br, dv, out="Oi")  # line 5: Oi = 0, l = 0, m = -inf
        l = ctx.compute(tm.zeros, br, out="l")
        m = ctx.compute(tm.full, -np.inf, br, out="m")
        segments, _ = kv_blocks_for_q(p, rows[0], rows[1], t.bk)
        for j in ctx.loop(segments):  # line 6: for j in 1..Tc (masked: the band's blocks only)
            cols = span(j, t.bk, p.seq_k)
            oi, l, m = online_step(ctx, p, qi, oi, l, m, b, h, rows, cols, pad, rng, mask_all)
        oi = ctx.compute(lambda o, l_: o / l_[:, None], oi, l, vector=br * dv, out="Oi")  # l. 12
        lse = ctx.compute(lambda m_, l_: m_ + np.log(l_), m, l, vector=br, exp=br, out="l")
        ctx.store("Oi", "O", (b, h, rows, (0, dv)), oi)  # line 14
        ctx.store("l", "lse", (b, h, rows), lse)  # line 15

    q_classes = q_block_classes(p, t.bq, t.bk)
    grid = tuple(CtaClass((range(p.batch), range(p.heads), r)) for r in q_classes)
    tensors = io_tensors(p)
    tensors["lse"] = TensorSpec(
        "lse",
        (p.batch, p.heads, nq),
        STAT_ITEMSIZE,
        "output",
        "log-sum-exp per row, saved for the backward pass",
    )
    return program, grid, tensors


def fa2_forward(
    p: Problem, hw: Hardware, t: Tiles, cuda_kernel: str | None = None
) -> tuple[list[Kernel], dict[str, TensorSpec]]:
    """FlashAttention-2 forward (FA2 paper, Algorithm 1): one CTA per (batch, head, Q block).

    `cuda_kernel`: "flash_fwd" or "flash_fwd_wmma", the variants kernels/*.cu implement (see
    kernel_fa2.py): their shared memory, single-buffered K/V, their block size and compute units.
    """
    program, grid, tensors = fa2_forward_program(p, t)
    if cuda_kernel:
        wmma = cuda_kernel == "flash_fwd_wmma"
        ipf, curve = (
            (1.0, ())
            if wmma
            else loop_costs.flash_fwd_compiled(
                t.bq, t.bk, p.head_dim, p.causal, p.dtype, p.itemsize
            )
        )
        kernel = Kernel(
            cuda_kernel,
            grid,
            kernel_fa2.buffers(p, t, wmma),
            program,
            kernel_fa2.threads_per_cta(t.bq, wmma),
            stages=1,
            description="kernels/flash_fwd_wmma.cu: both products on tensor cores (WMMA), "
            "K/V single-buffered, O accumulated in shared memory"
            if wmma
            else "kernels/flash_fwd.cu: K/V single-buffered, one thread per query row, row "
            "state in registers",
            tensor_cores=wmma,
            warp_mma=wmma,
            smem_bytes_per_flop=loop_costs.wmma_smem_bytes_per_flop(
                t.bq, t.bk, p.head_dim, p.itemsize
            )
            if wmma
            else 0.0,
            instructions_per_fma=ipf,
            cycles_per_fma_by_warps=curve,
        )
    else:
        kernel = Kernel(
            "fa2_fwd",
            grid,
            tile_buffers(p, t, FA2_STAGES),
            program,
            THREADS,
            stages=FA2_STAGES,
            description="fused: S, softmax and P V per Q block; O and lse written once",
        )
    return [kernel], tensors


# --- FA1 -----------------------------------------------------------------------------------


def fa1_forward(p: Problem, hw: Hardware, t: Tiles) -> tuple[list[Kernel], dict[str, TensorSpec]]:
    """FlashAttention (paper Algorithm 1, with Algorithm 2's dropout): K/V outer, Q inner.

    One CTA per (batch, head) runs both loops, as the FlashAttention v1 kernels do; O, l and m
    live in HBM between inner steps, initialised by a separate kernel (line 2).
    """
    nq, nk, d, dv = p.seq_q, p.seq_k, p.head_dim, p.dv
    tensors = io_tensors(p)
    for name in ("l", "m"):
        tensors[name] = TensorSpec(
            name,
            (p.batch, p.heads, nq),
            STAT_ITEMSIZE,
            "output",
            "running row " + ("sum" if name == "l" else "max"),
        )

    def init(ctx: Ctx, cta):  # line 2: O = 0, l = 0, m = -inf in HBM
        b, h, i = cta
        rows = span(i, t.bq, nq)
        br = rows[1] - rows[0]
        ctx.store("Oi", "O", (b, h, rows, (0, dv)), ctx.compute(tm.zeros, br, dv, out="Oi"))
        ctx.store("l", "l", (b, h, rows), ctx.compute(tm.zeros, br, out="l"))
        ctx.store("m", "m", (b, h, rows), ctx.compute(tm.full, -np.inf, br, out="m"))

    def program(ctx: Ctx, cta):
        b, h = cta
        kvh = p.kv_head(h)
        for j in ctx.loop(_fa1_outer_classes(p, t)):  # line 5: for j in 1..Tc (seen by a row)
            cols = span(j, t.bk, nk)
            kj = ctx.load("Kj", "K", (b, kvh, cols, (0, d)))  # line 6
            vj = value_tile(ctx, p, kj, b, kvh, cols)
            segments, _ = q_blocks_for_kv(p, cols[0], cols[1], t.bq)
            for i in ctx.loop(segments):  # line 7: for i in 1..Tr
                _fa1_inner_step(ctx, p, span(i, t.bq, nq), cols, kj, vj, b, h)

    buffers = tile_buffers(p, t)
    init_buffers = tuple(b for b in buffers if b.name in ("Oi", "l", "m"))
    init_grid = tuple(
        CtaClass((range(p.batch), range(p.heads), r)) for r in block_classes(nq, t.bq)
    )
    kernels = (
        Kernel(
            "fa1_init",
            init_grid,
            init_buffers,
            init,
            THREADS,
            description="O = 0, l = 0, m = -inf in HBM (Algorithm 1, line 2)",
        ),
        Kernel(
            "fa1_fwd",
            (CtaClass((range(p.batch), range(p.heads))),),
            buffers,
            program,
            THREADS,
            description="K/V blocks outer, Q blocks inner; O, l, m read and "
            "written in HBM every inner step",
        ),
    )
    return list(kernels), tensors


def _fa1_inner_step(ctx: Ctx, p: Problem, rows, cols, kj, vj, b: int, h: int) -> None:
    """Algorithm 1, lines 8-13: one Q block against the K/V block in SRAM, its O, l and m read
    from HBM, updated and written back."""
    d, dv = p.head_dim, p.dv
    br, bc = rows[1] - rows[0], cols[1] - cols[0]
    qi = ctx.load("Qi", "Q", (b, h, rows, (0, d)))  # line 8
    oi = ctx.load("Oi", "O", (b, h, rows, (0, dv)))
    li = ctx.load("l", "l", (b, h, rows))
    mi = ctx.load("m", "m", (b, h, rows))
    s = score_tile(ctx, p, qi, kj, rows, cols)  # line 9
    mt = ctx.compute(lambda s_: s_.max(axis=1), s, vector=br * bc)  # line 10
    pt = ctx.compute(tm.exp_minus, s, mt, vector=br * bc, exp=br * bc, out="S")
    lt = ctx.compute(lambda p_: p_.sum(axis=1), pt, vector=br * bc)
    m_new = ctx.compute(np.maximum, mi, mt, vector=br)  # line 11
    a = ctx.compute(tm.exp_diff, mi, m_new, vector=br, exp=br)
    bt = ctx.compute(tm.exp_diff, mt, m_new, vector=br, exp=br)
    l_new = ctx.compute(lambda a_, l_, b_, lt_: a_ * l_ + b_ * lt_, a, li, bt, lt, vector=3 * br)
    pt = dropout_tile(ctx, p, pt, b, h, rows, cols)
    oi = ctx.compute(  # line 12
        lambda o, l_, a_, b_, p_, v, ln: (  # a row a window has not reached yet keeps O = 0
            ((l_ * a_)[:, None] * o + b_[:, None] * pv(p_, v, dv))
            / np.where(ln > 0, ln, 1)[:, None]
        ),
        oi,
        li,
        a,
        bt,
        pt,
        vj,
        l_new,
        matmul=2 * br * bc * dv,
        vector=4 * br * dv,
        out="Oi",
    )
    ctx.store("Oi", "O", (b, h, rows, (0, dv)), oi)  # line 12: write Oi
    ctx.store("l", "l", (b, h, rows), l_new)  # line 13: write l, m
    ctx.store("m", "m", (b, h, rows), m_new)


def _fa1_outer_classes(p: Problem, t: Tiles) -> list[range]:
    """K/V blocks alike for FA1's outer loop: unmasked, all full blocks are; causal or
    windowed, none, and a block no query row sees (keys a window leaves behind) is skipped."""
    if p.masked:
        tc = n_blocks(p.seq_k, t.bk)
        return [
            range(j, j + 1)
            for j in range(tc)
            if q_blocks_for_kv(p, *span(j, t.bk, p.seq_k), t.bq)[0]
        ]
    return block_classes(p.seq_k, t.bk)
