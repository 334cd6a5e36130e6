"""Exact counts: equal to the sum over the full trace, at O(classes) cost."""

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import ALL_PASSES, COUNT_FIELDS, compatible, plan_args, problems, tiles

from hbmsim import ALGOS, Problem, count, get_hardware
from hbmsim.algorithms.registry import make_plan
from hbmsim.interpret.counts import CountCtx, count_plan
from hbmsim.interpret.trace import trace_plan
from hbmsim.program.plan import run_plan

H100 = get_hardware("h100-sxm")
FIELDS = COUNT_FIELDS
KERNEL_FIELDS = (
    "name",
    "read_bytes",
    "write_bytes",
    "trips",
    "matmul_flops",
    "vector_flops",
    "exp_ops",
    "ops",
    "ctas",
)


def _assert_counts_equal_trace(plan):
    counted = count_plan(plan).to_dict()
    traced = trace_plan(plan).totals()
    for f in FIELDS:
        assert counted[f] == traced[f], f
    for ck, tk in zip(counted["by_kernel"], traced["by_kernel"], strict=True):
        for f in KERNEL_FIELDS:
            assert ck[f] == tk[f], (ck["name"], f)


@given(
    p=problems(max_seq=80, passes=ALL_PASSES),
    t=tiles(),
    algo=st.sampled_from(ALGOS),
    splits=st.integers(1, 5),
)
def test_counts_equal_the_traced_sum(p, t, algo, splits):
    p = compatible(algo, p)
    _assert_counts_equal_trace(make_plan(algo, p, H100, *plan_args(algo, t, p, splits)))


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize(
    "p",
    [
        Problem(batch=1, heads=2, seq_q=1000, seq_k=1000, head_dim=64),
        Problem(batch=2, heads=4, kv_heads=1, seq_q=777, seq_k=1025, head_dim=40, causal=True),
        Problem(batch=1, heads=2, seq_q=513, seq_k=700, head_dim=64, dropout=0.1, dtype="fp32"),
    ],
    ids=["square", "causal-gqa-ragged", "dropout-fp32"],
)
def test_counts_equal_the_traced_sum_on_medium_problems(algo, p):
    _assert_counts_equal_trace(make_plan(algo, compatible(algo, p), H100))


def test_long_softmax_rows_are_read_three_times():
    """A row longer than one block's SRAM takes the three-pass softmax; counts still match."""
    hw = H100.with_overrides(sram_bytes_per_sm=8 * 1024)
    p = Problem(batch=1, heads=1, seq_q=8, seq_k=9000, head_dim=8, dtype="fp32")
    plan = make_plan("standard", p, hw, 8, 8, 8)
    softmax = count_plan(plan).kernels[1]
    assert softmax.read_bytes == 3 * 8 * 9000 * 4
    _assert_counts_equal_trace(plan)


@given(
    p=problems(max_seq=64, dropout=False, passes=ALL_PASSES),
    t=tiles(24),
    algo=st.sampled_from(ALGOS),
    splits=st.integers(1, 5),
)
def test_declared_cta_classes_hold_identical_ctas(p, t, algo, splits):
    """Every CTA the schedule puts in one class has the same op sequence up to offsets."""
    p = compatible(algo, p)
    plan = make_plan(algo, p, H100, *plan_args(algo, t, p, splits))
    found = trace_plan(plan).cta_classes()
    class_of = {cta: i for i, group in enumerate(found) for cta in group}
    for k, kernel in enumerate(plan.kernels):
        index = 0
        for cls in kernel.grid:
            seen = {class_of[(k, index + i)] for i in range(cls.size)}
            index += cls.size
            assert len(seen) == 1, (kernel.name, cls)


class _CallCounter(CountCtx):
    calls = 0

    def _on_transfer(self, *a):
        type(self).calls += 1
        return super()._on_transfer(*a)


@pytest.mark.parametrize("algo", ["fa1", "fa2", "standard"])
def test_counting_work_does_not_grow_with_sequence_length(algo):
    """Non-causal counting visits one CTA per class and one iteration per loop segment."""
    work = []
    for seq in (1 << 18, 1 << 20):
        plan = make_plan(algo, Problem(seq_q=seq, seq_k=seq), H100)
        _CallCounter.calls = 0
        run_plan(_CallCounter(plan), every_cta=False)
        work.append(_CallCounter.calls)
    assert work[0] == work[1] < 200


def test_counts_at_a_million_tokens_are_exact_integers():
    r = count(Problem(seq_q=1 << 20, seq_k=1 << 20), H100, "fa2")
    tr = (1 << 20) // 64
    # Q and O once; K and V once per Q block: 16 heads x 2^20 rows x 64 dims x 2 bytes
    assert r.by_tensor["K"].read_bytes == 16 * tr * (1 << 20) * 64 * 2
    assert isinstance(r.hbm_read_bytes, int)


def test_roofline_is_the_slower_of_memory_and_math():
    r = count(Problem(), H100, "standard")
    for k in r.kernels:
        assert k.roofline_time_s == max(k.memory_time_s, k.compute_time_s)
        assert k.memory_time_s == pytest.approx((k.read_bytes + k.write_bytes) / 3.35e12)
    assert r.roofline_time_s == pytest.approx(sum(k.roofline_time_s for k in r.kernels))


def test_flash_never_materialises_the_score_table():
    """FA1 (paper tiles) moves several times fewer bytes than standard at seq 4096; FA2 fewer
    too, although the paper convention charges its K/V re-reads per Q block to HBM."""
    p = Problem(seq_q=4096, seq_k=4096)
    std, fa1, fa2 = (count(p, H100, a) for a in ("standard", "fa1", "fa2"))
    assert {"S", "P"} <= set(std.by_tensor)
    assert not {"S", "P"} & (set(fa1.by_tensor) | set(fa2.by_tensor))
    assert std.hbm_bytes > 5 * fa1.hbm_bytes
    assert std.hbm_bytes > 2 * fa2.hbm_bytes
    assert std.roofline_time_s > 2 * fa2.roofline_time_s


def test_gqa_reads_kv_of_the_shared_head():
    """MQA reads as many K bytes as MHA (each query head reads its K/V), from one head."""
    mha = count(Problem(heads=8), H100, "fa2")
    mqa = count(dataclasses.replace(Problem(heads=8), kv_heads=1), H100, "fa2")
    assert mqa.by_tensor["K"].read_bytes == mha.by_tensor["K"].read_bytes
    plan = make_plan("fa2", Problem(heads=8, kv_heads=1, seq_q=64, seq_k=64), H100)
    t = trace_plan(plan)
    k_id = [x["name"] for x in t.tensors].index("K")
    k_loads = t.records[t.records["tensor"] == k_id]
    assert set(k_loads["start"][:, 1]) == {0}
