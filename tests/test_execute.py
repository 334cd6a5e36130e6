"""The executor: every algorithm equals naive attention, and SRAM capacity is enforced."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import problems, tiles

from hbmsim import ALGOS, Problem, SramOverflowError, TooLargeToExecuteError, get_hardware
from hbmsim.execute import ProgramError, execute_plan
from hbmsim.program import Buffer
from hbmsim.reference import naive_attention, random_inputs
from hbmsim.schedules import make_plan

H100 = get_hardware("h100-sxm")


def _plan(algo, p, t):
    bq, bk, bd = t
    return make_plan(algo, p, H100, bq, bk, bd if algo == "standard" else None)


@given(p=problems(), t=tiles(), algo=st.sampled_from(ALGOS))
def test_every_algorithm_equals_naive_attention(p, t, algo):
    """Output (and FA2's log-sum-exp) match float64 naive attention to 1e-12 relative."""
    e = execute_plan(_plan(algo, p, t), seed=1)
    assert e.rel_err <= 1e-12
    if e.lse_max_abs_err is not None:
        assert e.lse_max_abs_err <= 1e-12


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("causal,dropout", [(False, 0.0), (True, 0.0), (True, 0.3)])
def test_default_tiles_on_a_ragged_medium_problem(algo, causal, dropout):
    """Default tiles, seq not a multiple of any tile, GQA: still exact."""
    p = Problem(
        batch=1,
        heads=4,
        kv_heads=2,
        seq_q=300,
        seq_k=333,
        head_dim=32,
        causal=causal,
        dropout=dropout,
    )
    e = execute_plan(make_plan(algo, p, H100), seed=2)
    assert e.rel_err <= 1e-12


def test_given_inputs_are_used():
    p = Problem(batch=1, heads=1, seq_q=5, seq_k=7, head_dim=3)
    inputs = random_inputs(p, seed=9)
    e = execute_plan(make_plan("fa2", p, H100, 2, 3), inputs=inputs)
    ref, _ = naive_attention(inputs["Q"], inputs["K"], inputs["V"], p)
    np.testing.assert_allclose(e.output, ref, rtol=1e-13)


def test_tiles_larger_than_sram_are_refused_with_numbers():
    hw = H100.with_overrides(sram_bytes_per_sm=16 * 1024)
    with pytest.raises(SramOverflowError) as info:
        make_plan("fa2", Problem(head_dim=64), hw, 64, 64)
    msg = str(info.value)
    assert "bq=64, bk=64" in msg and "57,856 bytes" in msg and "15,360 bytes" in msg


def test_a_program_that_overfills_its_declared_buffer_is_stopped():
    """The executor checks each tile against the buffer it lands in, not just the declaration."""
    p = Problem(batch=1, heads=1, seq_q=16, seq_k=16, head_dim=8)
    plan = make_plan("fa2", p, H100, 8, 8)
    k = plan.kernels[0]
    small = tuple(Buffer(b.name, (2, 2), b.itemsize) if b.name == "Kj" else b for b in k.buffers)
    bad = dataclasses.replace(plan, kernels=(dataclasses.replace(k, buffers=small),))
    with pytest.raises(SramOverflowError, match="buffer 'Kj'"):
        execute_plan(bad)


def test_a_program_using_an_undeclared_buffer_is_a_program_error():
    p = Problem(batch=1, heads=1, seq_q=8, seq_k=8, head_dim=4)
    plan = make_plan("fa2", p, H100, 4, 4)
    k = plan.kernels[0]
    fewer = tuple(b for b in k.buffers if b.name != "Vj")
    bad = dataclasses.replace(plan, kernels=(dataclasses.replace(k, buffers=fewer),))
    with pytest.raises(ProgramError, match="'Vj'"):
        execute_plan(bad)


def test_a_forgotten_kv_block_spoils_the_output(monkeypatch):
    """Skipping the last K/V block (a schedule bug) is caught by execution."""
    from hbmsim.schedules import flash

    real = flash.kv_blocks_for_q

    def drop_last(p, r0, r1, bk):
        segments, first = real(p, r0, r1, bk)
        last = segments[-1]
        return segments[:-1] + ([last[:-1]] if len(last) > 1 else []), first

    monkeypatch.setattr(flash, "kv_blocks_for_q", drop_last)
    p = Problem(batch=1, heads=1, seq_q=32, seq_k=32, head_dim=8)
    assert execute_plan(make_plan("fa2", p, H100, 8, 8)).rel_err > 1e-3


def test_an_uninitialised_hbm_tensor_poisons_the_output():
    """FA1 without its init kernel reads O, l, m before anything wrote them: NaN, caught."""
    p = Problem(batch=1, heads=1, seq_q=16, seq_k=16, head_dim=4)
    plan = make_plan("fa1", p, H100, 4, 4)
    bad = dataclasses.replace(plan, kernels=plan.kernels[1:])
    assert execute_plan(bad).rel_err == float("inf")


def test_too_large_to_execute_is_refused_clearly():
    with pytest.raises(TooLargeToExecuteError, match="at most 67,108,864"):
        execute_plan(make_plan("fa2", Problem(seq_q=65536, seq_k=65536), H100))
