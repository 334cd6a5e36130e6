"""Closed forms (written from the algorithms, not the code) equal the exact counts."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hbmsim import Problem, count, get_hardware
from hbmsim.interpret.analytic import (
    fa1_bytes,
    fa2_backward_bytes,
    fa2_bytes,
    fa2_trips,
    standard_bytes,
    theorem2_flash_accesses,
)
from hbmsim.program.plan import Tiles

H100 = get_hardware("h100-sxm")


def _by_tensor(r):
    return {
        k: {"read_bytes": v.read_bytes, "write_bytes": v.write_bytes}
        for k, v in r.by_tensor.items()
    }


shapes = st.tuples(
    st.integers(1, 3),
    st.integers(1, 4),
    st.integers(1, 5000),
    st.integers(1, 5000),
    st.sampled_from([16, 64, 128]),
    st.integers(1, 256),
    st.integers(1, 256),
)


@given(s=shapes, dtype=st.sampled_from(["fp32", "fp16"]))
def test_fa2_closed_form(s, dtype):
    b, h, nq, nk, d, bq, bk = s
    p = Problem(batch=b, heads=h, seq_q=nq, seq_k=nk, head_dim=d, dtype=dtype)
    r = count(p, H100.with_overrides(sram_bytes_per_sm=1 << 30), "fa2", bq, bk)
    assert _by_tensor(r) == fa2_bytes(p, Tiles(bq, bk))
    assert r.trips == fa2_trips(p, Tiles(bq, bk))


@given(n_blocks=st.integers(1, 64), block=st.sampled_from([16, 32, 64, 128]))
def test_fa2_causal_closed_form(n_blocks, block):
    p = Problem(batch=2, heads=3, seq_q=n_blocks * block, seq_k=n_blocks * block, causal=True)
    r = count(p, H100, "fa2", block, block)
    assert _by_tensor(r) == fa2_bytes(p, Tiles(block, block))


@given(s=shapes)
def test_fa1_closed_form(s):
    b, h, nq, nk, d, bq, bk = s
    p = Problem(batch=b, heads=h, seq_q=nq, seq_k=nk, head_dim=d)
    r = count(p, H100.with_overrides(sram_bytes_per_sm=1 << 30), "fa1", bq, bk)
    assert _by_tensor(r) == fa1_bytes(p, Tiles(bq, bk))


@given(s=shapes, causal=st.booleans(), dropout=st.sampled_from([0.0, 0.1]))
def test_standard_closed_form(s, causal, dropout):
    b, h, nq, nk, d, bq, bk = s
    nq = min(nq, nk) if causal else nq
    p = Problem(batch=b, heads=h, seq_q=nq, seq_k=nk, head_dim=d, causal=causal, dropout=dropout)
    r = count(p, H100, "standard", bq, bk, 32)
    reads = 1 if nk * p.itemsize <= H100.sram_bytes_per_block else 3
    assert _by_tensor(r) == standard_bytes(p, Tiles(bq, bk, 32), reads)


@pytest.mark.parametrize("d,sizes_kib", [(64, (128, 256, 512)), (128, (512, 1024, 2048))])
def test_fa1_traffic_scales_as_theorem_2(d, sizes_kib):
    """Doubling the SRAM (with the paper's default tiles) about halves FA1's HBM traffic, and
    the traffic stays near 12 N^2 d^2 / M: Q read, O read and written (3 N d) once per K/V
    block, and Tc = N / Bc = 4 N d / M blocks. (SRAM sizes where the paper's tiles fit.)"""
    n = 16384
    p = Problem(batch=1, heads=1, seq_q=n, seq_k=n, head_dim=d)
    bytes_at = {}
    for kib in sizes_kib:
        hw = H100.with_overrides(sram_bytes_per_sm=kib * 1024)
        r = count(p, hw, "fa1")
        m = hw.sram_bytes_per_sm // p.itemsize
        ratio = r.hbm_bytes / p.itemsize / theorem2_flash_accesses(n, d, m)
        assert 11 < ratio < 14, ratio
        bytes_at[kib] = r.hbm_bytes
    small, mid, large = (bytes_at[k] for k in sizes_kib)
    assert 1.8 < small / mid < 2.2 and 1.8 < mid / large < 2.2


def test_standard_traffic_grows_quadratically():
    small = count(Problem(seq_q=4096, seq_k=4096), H100, "standard").hbm_bytes
    big = count(Problem(seq_q=16384, seq_k=16384), H100, "standard").hbm_bytes
    assert 12 < big / small <= 16


@given(s=shapes)
def test_fa2_backward_closed_form(s):
    b, h, nq, nk, d, bq, bk = s
    p = Problem(batch=b, heads=h, seq_q=nq, seq_k=nk, head_dim=d, pass_="bwd")
    r = count(p, H100.with_overrides(sram_bytes_per_sm=1 << 30), "fa2", bq, bk)
    assert _by_tensor(r) == fa2_backward_bytes(p, Tiles(bq, bk))
