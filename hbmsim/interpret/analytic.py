"""Closed forms for HBM traffic: an independent check on the counts, never their source.

The formulas are written from the algorithms' loop structure alone (FlashAttention paper,
Theorem 2 and its proof; FlashAttention-2's re-reads of K and V per Q block), so a bug in a
schedule or in counting shows up as a disagreement. Each returns per-tensor read and write
bytes, or None where no closed form is given (e.g. causal with ragged or unequal blocks).
"""

from __future__ import annotations

from ..algorithms.blocks import n_blocks
from ..problem.attention import MASK_ITEMSIZE, STAT_ITEMSIZE, Problem
from ..program.plan import Tiles


def _rw(read: int = 0, write: int = 0) -> dict:
    return {"read_bytes": read, "write_bytes": write}


def fa2_bytes(p: Problem, t: Tiles) -> dict | None:
    """Q and O once; K and V once per Q block (Tr times); the log-sum-exp written once.

    Causal with seq_q == seq_k and bq == bk dividing it: Q block i reads i + 1 K/V blocks, so
    K and V are read Tr (Tr + 1) / 2 blocks' worth instead of Tr x Tc. V and O are dv =
    head_dim_v wide; latent K/V reads no V (the values are in the K tile already on chip).
    """
    bh, s, d, dv = p.batch * p.heads, p.itemsize, p.head_dim, p.dv
    tr = n_blocks(p.seq_q, t.bq)
    if not p.masked:
        kv_rows = tr * p.seq_k
    elif p.windowed:
        return None
    elif p.seq_q == p.seq_k and t.bq == t.bk and p.seq_q % t.bq == 0:
        kv_rows = tr * (tr + 1) // 2 * t.bk
    else:
        return None
    out = {
        "Q": _rw(read=bh * p.seq_q * d * s),
        "K": _rw(read=bh * kv_rows * d * s),
        "V": _rw(read=bh * kv_rows * dv * s),
        "O": _rw(write=bh * p.seq_q * dv * s),
        "lse": _rw(write=bh * p.seq_q * STAT_ITEMSIZE),
    }
    if p.latent_kv:
        del out["V"]
    return out


def fa1_bytes(p: Problem, t: Tiles) -> dict | None:
    """Theorem 2's proof, exactly: K, V once; Q, O, l, m read once per K/V block (Tc times);
    O, l, m written once per K/V block plus once by the initialisation. Unmasked only. O and
    V are head_dim_v wide; latent K/V reads no V."""
    if p.masked:
        return None
    bh, s, d, dv = p.batch * p.heads, p.itemsize, p.head_dim, p.dv
    tc = n_blocks(p.seq_k, t.bk)
    rows = bh * p.seq_q
    out = {
        "Q": _rw(read=tc * rows * d * s),
        "K": _rw(read=bh * p.seq_k * d * s),
        "V": _rw(read=bh * p.seq_k * dv * s),
        "O": _rw(read=tc * rows * dv * s, write=(tc + 1) * rows * dv * s),
        "l": _rw(read=tc * rows * STAT_ITEMSIZE, write=(tc + 1) * rows * STAT_ITEMSIZE),
        "m": _rw(read=tc * rows * STAT_ITEMSIZE, write=(tc + 1) * rows * STAT_ITEMSIZE),
    }
    if p.latent_kv:
        del out["V"]
    return out


def standard_bytes(p: Problem, t: Tiles, softmax_reads: int) -> dict:
    """Algorithm 0 as eager kernels: each N x N table written once and read by the next kernel.

    The tiled matmuls re-read their input panels once per output tile column (row): Q once per
    bk-wide column of S, K once per bq-tall row of S, P once per bk-wide column of O.
    `softmax_reads` is 1 when a row fits in SRAM, 3 otherwise (see algorithms/standard.py).
    V and O are dv = head_dim_v wide; with latent K/V, P V reads K's first dv columns instead
    of a V.
    """
    bh, s, d, dv = p.batch * p.heads, p.itemsize, p.head_dim, p.dv
    nq, nk = p.seq_q, p.seq_k
    nn = bh * nq * nk
    row_tiles = n_blocks(nq, t.bq)
    out = {
        "Q": _rw(read=bh * nq * d * s * n_blocks(nk, t.bk)),
        "K": _rw(read=bh * nk * d * s * row_tiles),
        "V": _rw(read=bh * nk * dv * s * row_tiles),
        "S": _rw(read=nn * s * softmax_reads, write=nn * s),
        "P": _rw(read=nn * s * n_blocks(dv, t.bk), write=nn * s),
        "O": _rw(write=bh * nq * dv * s),
    }
    if p.latent_kv:  # one matmul reads all d columns of K, the other its first dv
        out["K"] = _rw(read=bh * nk * (d + dv) * s * row_tiles)
        del out["V"]
    if p.masked:  # the mask kernel reads S and the stored mask, and rewrites S
        out["S"] = _rw(read=nn * s * (softmax_reads + 1), write=2 * nn * s)
        out["window_mask" if p.windowed else "causal_mask"] = _rw(read=nn * MASK_ITEMSIZE)
    if p.dropout > 0:  # dropout reads P, writes P_drop and the keep-mask; P V reads P_drop
        out["P_drop"] = _rw(read=out["P"]["read_bytes"], write=nn * s)
        out["P"] = _rw(read=nn * s, write=nn * s)
        out["dropout_mask"] = _rw(write=nn * MASK_ITEMSIZE)
    return out


def fa2_backward_bytes(p: Problem, t: Tiles) -> dict | None:
    """FA2 backward, non-causal, no GQA: the preprocessing reads dO and O and writes D and the
    zeroed fp32 dQ accumulator; each K/V block's CTA reads K, V once and Q, dO, lse, D once per
    Q block (Tc times in all), atomically adds into dQ_accum once per Q block (a read and a
    write each), and writes dK, dV once; the conversion reads dQ_accum and writes dQ."""
    if p.masked or p.group_size > 1 or "bwd" not in p.pass_:
        return None
    bh, s, d = p.batch * p.heads, p.itemsize, p.head_dim
    tc = n_blocks(p.seq_k, t.bk)
    rows, keys = bh * p.seq_q, bh * p.seq_k
    acc = STAT_ITEMSIZE * d
    return {
        "Q": _rw(read=tc * rows * d * s),
        "K": _rw(read=keys * d * s),
        "V": _rw(read=keys * d * s),
        "O": _rw(read=rows * d * s),
        "lse": _rw(read=tc * rows * STAT_ITEMSIZE),
        "dO": _rw(read=(tc + 1) * rows * d * s),
        "D": _rw(read=tc * rows * STAT_ITEMSIZE, write=rows * STAT_ITEMSIZE),
        "dQ_accum": _rw(read=(tc + 1) * rows * acc, write=(tc + 1) * rows * acc),
        "dQ": _rw(write=rows * d * s),
        "dK": _rw(write=keys * d * s),
        "dV": _rw(write=keys * d * s),
    }


def fa2_trips(p: Problem, t: Tiles) -> int | None:
    """Unmasked FA2: per Q block, load Qi, then Kj and Vj per K/V block (Kj alone with latent
    K/V), store Oi and lse."""
    if p.masked:
        return None
    tr, tc = n_blocks(p.seq_q, t.bq), n_blocks(p.seq_k, t.bk)
    per_block = 1 if p.latent_kv else 2
    return p.batch * p.heads * tr * (per_block * tc + 3)


def theorem2_flash_accesses(n: int, d: int, sram_elements: int) -> float:
    """The paper's Theta(N^2 d^2 / M) for FlashAttention's HBM accesses (elements, order only)."""
    return n * n * d * d / sram_elements


def theorem2_standard_accesses(n: int, d: int) -> float:
    """The paper's Theta(N d + N^2) for standard attention's HBM accesses (elements, order only)."""
    return n * d + n * n
