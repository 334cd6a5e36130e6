"""The executor: every algorithm equals naive attention, and SRAM capacity is enforced."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import compatible, plan_args, problems, tiles

from hbmsim import ALGOS, Problem, SramOverflowError, TooLargeToExecuteError, get_hardware
from hbmsim.algorithms.registry import make_plan
from hbmsim.interpret.execute import ProgramError, execute_plan
from hbmsim.interpret.reference import naive_attention, random_inputs
from hbmsim.program.plan import Buffer

H100 = get_hardware("h100-sxm")


def _plan(algo, p, t):
    p = compatible(algo, p)
    bq, bk, bd, _ = plan_args(algo, t, p)
    return make_plan(algo, p, H100, bq, bk, bd)


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
    e = execute_plan(make_plan(algo, compatible(algo, p), H100), seed=2)
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
    from hbmsim.algorithms import flash

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


@given(
    p=problems(max_seq=48, max_d=12, passes=("bwd", "fwd+bwd")),
    t=tiles(24),
    algo=st.sampled_from(["standard", "fa1", "fa2"]),
)
def test_backward_gradients_equal_closed_form_gradients(p, t, algo):
    """dQ, dK, dV from the tile programs match naive attention's gradients to 1e-10."""
    e = execute_plan(_plan(algo, p, t), seed=3)
    assert e.rel_err <= 1e-12
    assert max(e.grad_rel_err.values()) <= 1e-10, e.grad_rel_err


def test_closed_form_gradients_match_finite_differences():
    """The reference gradients themselves, checked numerically (central differences)."""
    from hbmsim.interpret.reference import dropout_keep_mask, naive_grads

    p = Problem(
        batch=1,
        heads=2,
        kv_heads=1,
        seq_q=5,
        seq_k=6,
        head_dim=3,
        causal=True,
        dropout=0.3,
        pass_="bwd",
    )
    x = random_inputs(p, 5)
    keep = dropout_keep_mask(p, 5)
    grads = dict(
        zip(("Q", "K", "V"), naive_grads(x["Q"], x["K"], x["V"], x["dO"], p, keep), strict=True)
    )

    def loss(inputs):
        o, _ = naive_attention(inputs["Q"], inputs["K"], inputs["V"], p, keep)
        return float((o * x["dO"]).sum())

    eps = 1e-6
    for name in ("Q", "K", "V"):
        numeric = np.zeros_like(x[name])
        for idx in np.ndindex(x[name].shape):
            up = {k: v.copy() for k, v in x.items()}
            down = {k: v.copy() for k, v in x.items()}
            up[name][idx] += eps
            down[name][idx] -= eps
            numeric[idx] = (loss(up) - loss(down)) / (2 * eps)
        np.testing.assert_allclose(grads[name], numeric, rtol=1e-6, atol=1e-8)


@given(p=problems(max_seq=80, max_d=16), t=tiles(32), splits=st.integers(1, 6))
def test_split_kv_equals_naive_attention(p, t, splits):
    bq, bk, _ = t
    splits = min(splits, -(-p.seq_k // bk))
    e = execute_plan(make_plan("split-kv", p, H100, bq, bk, splits=splits), seed=4)
    assert e.rel_err <= 1e-12 and e.lse_max_abs_err <= 1e-12


def test_split_kv_refuses_more_splits_than_blocks():
    from hbmsim import ConfigError

    with pytest.raises(ConfigError, match="splits: must be from 1 to 4"):
        make_plan("split-kv", Problem(seq_q=1, seq_k=256), H100, 64, 64, splits=5)


def test_split_kv_is_forward_only():
    from hbmsim import ConfigError

    with pytest.raises(ConfigError, match="pass"):
        make_plan("split-kv", Problem(seq_q=1, seq_k=256, pass_="bwd"), H100)
