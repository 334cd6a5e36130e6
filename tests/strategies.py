"""Hypothesis strategies for problems and tiles, small enough to execute and trace."""

from hypothesis import strategies as st

from hbmsim import Problem


@st.composite
def problems(draw, max_seq=96, max_d=24, dropout=True):
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
    )


def tiles(max_tile=40):
    return st.tuples(st.integers(1, max_tile), st.integers(1, max_tile), st.integers(1, 16))
