"""Hypothesis strategies for problems and tiles, small enough to execute and trace."""

import dataclasses

from hypothesis import strategies as st

from hbmsim import Problem


@st.composite
def windows(draw, p: Problem) -> Problem:
    """p with a sliding window drawn over its whole allowed range: each side -1 (unbounded)
    or 0..seq_k, the right side 0 or -1 when causal and wide enough for the first row when
    not; at least one side bounded."""
    left = draw(st.sampled_from([-1, 0]) | st.integers(0, p.seq_k))
    if p.causal:
        right = draw(st.sampled_from([-1, 0]))
    else:
        need = max(0, p.seq_q - p.seq_k)  # the first row must see a key
        right = draw(st.just(-1) | st.integers(need, p.seq_k)) if need <= p.seq_k else -1
    if left < 0 and (right < 0 or p.causal):
        left = draw(st.integers(0, p.seq_k))
    return dataclasses.replace(p, window_left=left, window_right=right)


@st.composite
def problems(draw, max_seq=96, max_d=24, dropout=True, passes=("fwd",)):
    kv_heads = draw(st.sampled_from([1, 2]))
    heads = kv_heads * draw(st.sampled_from([1, 2]))
    causal = draw(st.booleans())
    seq_k = draw(st.integers(1, max_seq))
    seq_q = draw(st.integers(1, seq_k if causal else max_seq))
    return Problem(
        batch=draw(st.integers(1, 2)),
        heads=heads,
        kv_heads=kv_heads,
        seq_q=seq_q,
        seq_k=seq_k,
        head_dim=draw(st.integers(1, max_d)),
        dtype=draw(st.sampled_from(["fp32", "fp16", "bf16"])),
        causal=causal,
        dropout=draw(st.sampled_from([0.0, 0.25])) if dropout else 0.0,
        pass_=draw(st.sampled_from(passes)),
    )


def tiles(max_tile=40):
    return st.tuples(st.integers(1, max_tile), st.integers(1, max_tile), st.integers(1, 16))


ALL_PASSES = ("fwd", "bwd", "fwd+bwd")


def plan_args(algo: str, t, p, draw_splits=None):
    """make_plan arguments for a drawn (bq, bk, bd) and algorithm; split-kv gets a valid splits."""
    bq, bk, bd = t
    if algo == "fa2-wmma-kernel":  # whole 16 x 16 fragments
        return 16 * (1 + bq // 16), 16 * (1 + bk // 16), None, None
    if algo == "split-kv":
        tc = -(-p.seq_k // bk)
        return bq, bk, None, min(tc, draw_splits or 1)
    return bq, bk, bd if algo in ("standard", "standard-kernel") else None, None


def compatible(algo: str, p):
    """The problem as `algo` accepts it: forward-only algorithms run the forward, the CUDA
    kernel mirrors have no dropout, and the WMMA kernel takes fp16/bf16 and head dims in 16s."""
    from hbmsim.algorithms.names import FORWARD_ONLY, KERNEL_MIRRORS

    if algo in FORWARD_ONLY:
        p = dataclasses.replace(p, pass_="fwd")
    if algo in KERNEL_MIRRORS:
        p = dataclasses.replace(p, dropout=0.0)
    if algo == "fa2-wmma-kernel":
        p = dataclasses.replace(
            p,
            head_dim=16 * -(-p.head_dim // 16),
            dtype="bf16" if p.dtype == "bf16" else "fp16",
        )
    return p


COUNT_FIELDS = (  # what counting and tracing must agree on, exactly
    "hbm_read_bytes",
    "hbm_write_bytes",
    "trips",
    "matmul_flops",
    "vector_flops",
    "exp_ops",
    "by_tensor",
)
