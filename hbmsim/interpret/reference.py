"""Naive attention in float64: the ground truth every tile program must reproduce.

`softmax(Q Kᵀ · scale + causal / window mask) ∘ Z / (1 - p) · V`, with K/V heads repeated for GQA,
and the same bottom-right causal alignment and keep-mask Z the programs use. With latent K/V
(MLA's absorbed form) V is K[..., :head_dim_v], taken here by slicing, apart from the programs.
"""

from __future__ import annotations

import numpy as np

from ..problem.attention import Problem


def causal_visible(p: Problem) -> np.ndarray:
    """(seq_q, seq_k) bool: True where row i may attend to column j: j <= i + off when causal,
    and i + off - left <= j <= i + off + right for a sliding window (-1: unbounded), with
    off = seq_k - seq_q (flash-attn's bottom-right alignment, mask.h). Written from the
    definition, apart from the programs' block arithmetic it checks."""
    i = np.arange(p.seq_q)[:, None]
    j = np.arange(p.seq_k)[None, :]
    off = p.seq_k - p.seq_q
    ok = np.ones((p.seq_q, p.seq_k), dtype=bool)
    if p.causal:
        ok &= j <= i + off
    if p.window_right >= 0:
        ok &= j <= i + off + p.window_right
    if p.window_left >= 0:
        ok &= j >= i + off - p.window_left
    return ok


def dropout_keep_mask(p: Problem, seed: int) -> np.ndarray | None:
    """The keep-mask Z (batch, heads, seq_q, seq_k) both the programs and the reference use."""
    if p.dropout == 0:
        return None
    rng = np.random.default_rng([seed, 0xD50])
    return rng.random((p.batch, p.heads, p.seq_q, p.seq_k)) >= p.dropout


def attention_scores(q, k, p: Problem) -> np.ndarray:
    """S = Q Kᵀ · scale with the causal mask applied as -inf. Shapes (b, h, Nq, Nk)."""
    k_rep = np.repeat(k, p.group_size, axis=1)  # (b, h, Nk, d)
    s = np.einsum("bhqd,bhkd->bhqk", q, k_rep) * p.softmax_scale
    if p.causal or p.window_left >= 0 or p.window_right >= 0:
        s = np.where(causal_visible(p), s, -np.inf)
    return s


def values(k, v, p: Problem) -> np.ndarray:
    """V as attention reads it: the given V, or the latent K's first head_dim_v columns."""
    return k[..., : p.dv] if p.latent_kv else v


def naive_attention(q, k, v, p: Problem, keep: np.ndarray | None = None):
    """Returns (O, lse): output (b, h, Nq, dv) and row log-sum-exp (b, h, Nq). `v` is None
    for latent K/V (V is part of K)."""
    v = values(k, v, p)
    s = attention_scores(q, k, p)
    m = s.max(axis=-1, keepdims=True)
    e = np.exp(s - m)
    denom = e.sum(axis=-1, keepdims=True)
    probs = e / denom
    if keep is not None:
        probs = probs * keep / (1.0 - p.dropout)
    v_rep = np.repeat(v, p.group_size, axis=1)
    o = np.einsum("bhqk,bhkd->bhqd", probs, v_rep)
    lse = (m + np.log(denom))[..., 0]
    return o, lse


def random_inputs(p: Problem, seed: int) -> dict[str, np.ndarray]:
    """Q, K, V (and dO for a backward pass) ~ N(0, 1) in float64, reproducible from the seed.
    Latent K/V: no V (it is part of K)."""
    rng = np.random.default_rng(seed)
    out = {
        "Q": rng.standard_normal((p.batch, p.heads, p.seq_q, p.head_dim)),
        "K": rng.standard_normal((p.batch, p.kv_heads, p.seq_k, p.head_dim)),
    }
    v = rng.standard_normal((p.batch, p.kv_heads, p.seq_k, p.dv))
    if not p.latent_kv:  # drawn either way, so Q and K are the same for a given seed
        out["V"] = v
    if "bwd" in p.pass_:
        out["dO"] = rng.standard_normal((p.batch, p.heads, p.seq_q, p.head_dim))
    return out


def naive_grads(q, k, v, do, p: Problem, keep: np.ndarray | None = None):
    """Closed-form gradients of naive attention: (dQ, dK, dV), K/V heads summed over groups.

    P = softmax(S), Pd = P ∘ Z / (1 - p), O = Pd V:
    dV = Pdᵀ dO;  dPd = dO Vᵀ;  dP = dPd ∘ Z / (1 - p);  dS = P ∘ (dP - rowsum(dP ∘ P));
    dQ = dS K · scale;  dK = dSᵀ Q · scale.
    """
    s = attention_scores(q, k, p)
    m = s.max(axis=-1, keepdims=True)
    e = np.exp(s - m)
    probs = e / e.sum(axis=-1, keepdims=True)
    scale_keep = keep / (1.0 - p.dropout) if keep is not None else 1.0
    pd = probs * scale_keep
    k_rep = np.repeat(k, p.group_size, axis=1)
    v_rep = np.repeat(v, p.group_size, axis=1)
    dv_rep = np.einsum("bhqk,bhqd->bhkd", pd, do)
    dp = np.einsum("bhqd,bhkd->bhqk", do, v_rep) * scale_keep
    ds = probs * (dp - (dp * probs).sum(axis=-1, keepdims=True))
    dq = np.einsum("bhqk,bhkd->bhqd", ds, k_rep) * p.softmax_scale
    dk_rep = np.einsum("bhqk,bhqd->bhkd", ds, q) * p.softmax_scale

    def group_sum(x):
        b, h, n, d = x.shape
        return x.reshape(b, p.kv_heads, p.group_size, n, d).sum(axis=2)

    return dq, group_sum(dk_rep), group_sum(dv_rep)
