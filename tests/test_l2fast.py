"""L2 hits of long kernels from a few waves (l2.fast) are the LRU's hits, access for access.

The GPUs here have few SMs, one CTA per SM and a small L2, so that small problems run many
waves and the skipped-waves path is taken; the reference is lru.kernel_hits over every access.
"""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from strategies import ALL_PASSES, compatible, plan_args, problems

from hbmsim import Problem, get_hardware, make_plan
from hbmsim.algorithms.names import ALGOS
from hbmsim.api import build_plan
from hbmsim.engine.l2.budget import least_decided
from hbmsim.engine.l2.classwave import ClassWave, ClassWaveHitTable
from hbmsim.engine.l2.fast import hit_tables
from hbmsim.engine.l2.lockstep import LockstepHitTable, LockstepWave
from hbmsim.engine.l2.lru import kernel_hits
from hbmsim.engine.l2.runs import PairedRunHitTable, RunHitTable
from hbmsim.engine.l2.table import HitTable
from hbmsim.engine.simulation import run_engine
from hbmsim.engine.workload.classkeys import from_plan_fast
from hbmsim.errors import ConfigError, SramOverflowError
from hbmsim.gpu.occupancy import kernel_slots
from hbmsim.interpret.counts import count_plan
from hbmsim.libraries.registry import IMPLS


def narrow_gpu(sms: int, l2_bytes: int, base: str = "a100-40gb"):
    """An A100 (the mirrors know its architecture; an H100 with `base`) of `sms` SMs holding
    one CTA each, and an L2 of `l2_bytes`."""
    return get_hardware(base).with_overrides(
        name=base.split("-")[0] + "-narrow", sm_count=sms, max_ctas_per_sm=1, l2_bytes=l2_bytes
    )


def tables_and_plain(plan):
    """(the kernels' hit tables, the plain LRU's hits) on the plan's GPU."""
    hw = plan.hardware
    kernels = from_plan_fast(plan).kernels
    slots = [kernel_slots(hw, k) for k in kernels]
    return hit_tables(kernels, slots, hw.l2_bytes), kernel_hits(kernels, slots, hw.l2_bytes)


def assert_engine_agrees(plan):
    """The fast path's bytes are the exact replay's, its time within float noise."""
    fast, exact = run_engine(plan), run_engine(plan, exact=True)
    assert (fast.dram_read_bytes, fast.dram_write_bytes, fast.l2_hit_bytes) == (
        exact.dram_read_bytes,
        exact.dram_write_bytes,
        exact.l2_hit_bytes,
    )
    assert abs(fast.time_s / exact.time_s - 1) < 1e-9


def hits_both_ways(plan):
    """(hits from the tables, hits of the plain LRU, kernels whose waves were skipped)."""
    tables, plain = tables_and_plain(plan)
    mine = [t.every_access() for t in tables]
    return mine, plain, sum(t.skip is not None for t in tables)


@st.composite
def many_instances(draw):
    """Problems of many (batch, head) instances, each small: many waves on a narrow GPU."""
    kv_heads = draw(st.sampled_from([1, 2, 4]))
    causal = draw(st.booleans())
    seq_k = draw(st.integers(1, 64))
    return Problem(
        batch=draw(st.integers(1, 8)),
        heads=kv_heads * draw(st.sampled_from([1, 2])),
        kv_heads=kv_heads,
        seq_q=draw(st.integers(1, seq_k if causal else 64)),
        seq_k=seq_k,
        head_dim=draw(st.integers(1, 32)),
        dtype=draw(st.sampled_from(["fp32", "fp16"])),
        causal=causal,
        dropout=draw(st.sampled_from([0.0, 0.25])),
        pass_=draw(st.sampled_from(ALL_PASSES)),
    )


@settings(max_examples=300, deadline=None)
@given(
    p=st.one_of(problems(max_seq=128, max_d=32, passes=ALL_PASSES), many_instances()),
    t=st.tuples(st.integers(4, 32), st.integers(4, 32), st.integers(4, 16)),
    algo=st.sampled_from(ALGOS),
    sms=st.integers(1, 4),
    l2_bytes=st.sampled_from([1 << 10, 4 << 10, 16 << 10, 64 << 10, 1 << 20]),
)
def test_skipped_waves_hit_exactly_as_the_lru_says(p, t, algo, sms, l2_bytes):
    """Every algorithm, causal, GQA, ragged tiles, every pass, L2s from a few tiles to all of
    it: the hits per access equal the plain LRU's, whether waves were skipped or not."""
    p = compatible(algo, p)
    try:
        plan = make_plan(algo, p, narrow_gpu(sms, l2_bytes), *plan_args(algo, t, p, 2))
    except SramOverflowError:
        assume(False)
    assume(count_plan(plan).trips <= 20_000)
    mine, plain, _ = hits_both_ways(plan)
    assert [m.tolist() for m in mine] == [x.tolist() for x in plain]


@settings(max_examples=100, deadline=None)
@given(
    p=st.one_of(problems(max_seq=128, max_d=32, passes=ALL_PASSES), many_instances()),
    algo=st.sampled_from(ALGOS),
    sms=st.integers(1, 4),
    l2_bytes=st.sampled_from([1 << 10, 16 << 10, 1 << 20]),
)
def test_every_waves_hit_counts_are_its_ctas_hits_summed(p, algo, sms, l2_bytes):
    """The counts the engine launches each wave of a one-template kernel with (a skipped wave
    takes its reference wave's, the rest are summed a chunk of waves at a time): the plain
    LRU's hits of the wave's CTAs, summed per transfer."""
    p = compatible(algo, p)
    try:
        plan = make_plan(algo, p, narrow_gpu(sms, l2_bytes), *plan_args(algo, (16, 16, 8), p, 2))
    except SramOverflowError:
        assume(False)
    assume(count_plan(plan).trips <= 20_000)
    assert_wave_counts_sum_the_hits(plan)


def assert_wave_counts_sum_the_hits(plan) -> int:
    """Every wave's counts (HitTable.wave_counts and its kind) are the plain LRU's hits of its
    CTAs summed per transfer; returns how many waves took a reference wave's."""
    hw = plan.hardware
    kernels = from_plan_fast(plan).kernels
    tables, plain = tables_and_plain(plan)
    taken = 0
    for kw, table, hits in zip(kernels, tables, plain, strict=True):
        if len(kw.templates) != 1 or not hasattr(table, "wave_counts"):
            continue
        slots = kernel_slots(hw, kw)
        per_cta = hits.reshape(kw.n_ctas, -1)  # one template: as many accesses per CTA
        small = {"chunk": 64} if isinstance(table, HitTable) else {}  # a few waves per lookup
        waves = list(table.wave_counts(slots, **small))
        assert [(f, m) for f, m, _ in waves] == [
            (f, min(slots, kw.n_ctas - f)) for f in range(0, kw.n_ctas, slots)
        ]
        for first, m, counts in waves:
            assert counts.tolist() == per_cta[first : first + m].sum(axis=0).tolist()
        if isinstance(table, HitTable):
            firsts = np.arange(0, kw.n_ctas, slots)
            taken += int((table.referenced(firsts) != firsts).sum())
    return taken


@settings(max_examples=100, deadline=None)
@given(
    p=st.one_of(problems(max_seq=128, max_d=64, passes=ALL_PASSES), many_instances()),
    impl=st.sampled_from(IMPLS),
    sms=st.integers(1, 4),
    l2_bytes=st.sampled_from([4 << 10, 32 << 10, 256 << 10]),
)
def test_skipped_waves_hit_exactly_as_the_lru_says_on_the_mirrors(p, impl, sms, l2_bytes):
    try:
        base = "h100-sxm" if impl == "flash-attn-3" else "a100-40gb"
        plan = build_plan(p, narrow_gpu(sms, l2_bytes, base), impl=impl)
    except (ConfigError, SramOverflowError):
        assume(False)
    assume(count_plan(plan).trips <= 20_000)
    mine, plain, _ = hits_both_ways(plan)
    assert [m.tolist() for m in mine] == [x.tolist() for x in plain]


@st.composite
def long_programs(draw):
    """Few instances over long sequences: CTAs whose programs outlast the cache (lockstep
    waves) and heads of many waves (local periods)."""
    kv_heads = draw(st.sampled_from([1, 2]))
    causal = draw(st.booleans())
    seq_k = draw(st.sampled_from([256, 512, 1024]))
    return Problem(
        batch=draw(st.integers(1, 2)),
        heads=kv_heads * draw(st.sampled_from([1, 2])),
        kv_heads=kv_heads,
        seq_q=seq_k if causal else draw(st.sampled_from([64, 256, 512])),
        seq_k=seq_k,
        head_dim=draw(st.sampled_from([16, 32, 64])),
        causal=causal,
        pass_=draw(st.sampled_from(ALL_PASSES)),
    )


@settings(max_examples=60, deadline=None)
@given(
    p=long_programs(),
    what=st.sampled_from(["fa1", "fa2", "standard", "flash-attn-1@0.1", "torch-eager"]),
    sms=st.integers(2, 8),
    l2_bytes=st.sampled_from([16 << 10, 64 << 10, 256 << 10]),
)
def test_lockstep_waves_and_local_periods_hit_exactly_as_the_lru_says(p, what, sms, l2_bytes):
    """Long CTA programs and heads of many waves on narrow GPUs, where one CTA's stream
    (lockstep) and runs between an axis's wraps (local periods) decide most accesses: the
    hits per access equal the plain LRU's."""
    impl = "-" in what
    try:
        plan = build_plan(
            p, narrow_gpu(sms, l2_bytes), None if impl else what, what if impl else None
        )
    except (ConfigError, SramOverflowError):
        assume(False)
    assume(count_plan(plan).trips <= 300_000)
    mine, plain, _ = hits_both_ways(plan)
    assert [m.tolist() for m in mine] == [x.tolist() for x in plain]


def test_the_papers_standard_attention_skips_waves_and_keeps_every_hit():
    """Standard causal attention with dropout, forward and backward, 16 instances on 4 SMs with
    a 64 KiB L2: every kernel repeats each instance, most waves are skipped, and the hits,
    bytes and time are the exact replay's."""
    p = Problem(batch=4, heads=4, seq_q=128, seq_k=128, causal=True, dropout=0.1, pass_="fwd+bwd")
    plan = make_plan("standard", p, narrow_gpu(4, 64 << 10), 32, 32, 32)
    mine, plain, skipped = hits_both_ways(plan)
    assert skipped == len(plan.kernels)
    assert [m.tolist() for m in mine] == [x.tolist() for x in plain]
    assert sum(int(x.sum()) for x in plain) > 0
    assert assert_wave_counts_sum_the_hits(plan) > 1000  # skipped waves take their reference's
    fast, exact = run_engine(plan), run_engine(plan, exact=True)
    assert fast.dram_read_bytes == exact.dram_read_bytes
    assert fast.dram_write_bytes == exact.dram_write_bytes
    assert fast.l2_hit_bytes == exact.l2_hit_bytes
    assert abs(fast.time_s / exact.time_s - 1) < 1e-9


@pytest.mark.parametrize(
    "algo, p",
    [
        ("fa2", Problem(batch=2, heads=6, seq_q=512, seq_k=384, head_dim=32)),
        ("fa2", Problem(batch=1, heads=3, seq_q=1024, seq_k=896, head_dim=32, dtype="fp32")),
        ("fa2", Problem(batch=4, heads=1, seq_q=768, seq_k=64, head_dim=16)),
        ("fa2", Problem(batch=2, heads=6, kv_heads=2, seq_q=512, seq_k=256, head_dim=16)),
    ],
)
def test_one_class_kernels_decide_only_their_run_heads_and_keep_every_hit(algo, p):
    """Without a causal mask a kernel is one CTA class: its waves are runs of CTAs reading the
    same K and V tiles, a head boundary falling inside some waves (7 SMs; with GQA, query heads
    of one group read the same K/V head). Only the runs' first accesses are decided (or one
    CTA's stream and each wave's head and tail, where that decides fewer), and every
    access's hit is still the plain LRU's."""
    plan = make_plan(algo, p, narrow_gpu(7, 16 << 10), 32, 32)
    hw = plan.hardware
    kernels = from_plan_fast(plan).kernels
    slots = [hw.sm_count] * len(kernels)
    tables = hit_tables(kernels, slots, hw.l2_bytes)
    plain = kernel_hits(kernels, slots, hw.l2_bytes)
    runs = [t for t in tables if isinstance(t, RunHitTable | LockstepHitTable)]
    assert runs, "no kernel was decided by its runs or its lockstep waves"
    for t, x in zip(tables, plain, strict=True):
        assert t.every_access().tolist() == x.tolist()
    assert sum(len(t.hits) for t in runs) < sum(len(t.every_access()) for t in runs)
    assert sum(int(x.sum()) for x in plain) > 0
    fast, exact = run_engine(plan), run_engine(plan, exact=True)
    assert fast.l2_hit_bytes == exact.l2_hit_bytes
    assert abs(fast.time_s / exact.time_s - 1) < 1e-9


@pytest.mark.parametrize(
    "what, p, sms, l2",
    [
        ("fa2", Problem(batch=2, heads=3, seq_q=2048, seq_k=1536, head_dim=32), 6, 48 << 10),
        (
            "flash-attn-2",
            Problem(batch=2, heads=4, kv_heads=2, seq_q=4096, seq_k=4096, head_dim=32),
            5,
            64 << 10,
        ),
    ],
)
def test_a_kernel_streaming_past_the_cache_decides_one_pair_of_waves_per_shape(what, p, sms, l2):
    """A one-class kernel whose every wave reads more than the L2 holds (tens of waves per
    head, a head boundary inside some; with GQA, query heads sharing K/V): each wave's hits
    are decided once per shape of (that wave, the wave before), the rest copied, and every
    access's hit is still the plain LRU's; the engine's time and bytes are the exact
    replay's."""
    impl = "-" in what
    plan = build_plan(p, narrow_gpu(sms, l2), None if impl else what, what if impl else None)
    hw = plan.hardware
    kernels = from_plan_fast(plan).kernels
    slots = [hw.sm_count] * len(kernels)
    tables = hit_tables(kernels, slots, hw.l2_bytes)
    plain = kernel_hits(kernels, slots, hw.l2_bytes)
    assert isinstance(tables[-1], PairedRunHitTable)
    paired = tables[-1].paired
    assert len(paired.decided) < paired.waves - 1  # alike pairs were copied, not decided
    for t, x in zip(tables, plain, strict=True):
        assert t.every_access().tolist() == x.tolist()
    assert sum(int(x.sum()) for x in plain) > 0
    fast, exact = run_engine(plan), run_engine(plan, exact=True)
    assert (fast.l2_hit_bytes, fast.dram_read_bytes) == (exact.l2_hit_bytes, exact.dram_read_bytes)
    assert abs(fast.time_s / exact.time_s - 1) < 1e-9


def test_waves_between_head_boundaries_are_skipped_by_a_local_period():
    """Standard attention over three heads on 5 SMs: its score kernels' only period is a
    whole head, more waves than the kernel has, so no wave could be skipped. Inside a head,
    though, the step to the next row block moves every tile by one shift per tensor: the
    waves between two head boundaries translate each other, and each head's middle waves are
    skipped (a stretch per head). Every access's hit is still the plain LRU's; the engine's
    time and bytes are the exact replay's."""
    p = Problem(batch=1, heads=3, seq_q=4096, seq_k=4096, head_dim=32)
    plan = make_plan("standard", p, narrow_gpu(5, 64 << 10))
    kernels = from_plan_fast(plan).kernels
    assert any(k.segments for k in kernels)
    mine, plain, skipped = hits_both_ways(plan)
    assert [m.tolist() for m in mine] == [x.tolist() for x in plain]
    tables = hit_tables(kernels, [5] * len(kernels), 64 << 10)
    assert max(len(t.skip or ()) for t in tables) == 3  # one stretch per head
    assert sum(len(t.hits) for t in tables) < sum(len(x) for x in plain)
    fast, exact = run_engine(plan), run_engine(plan, exact=True)
    assert (fast.l2_hit_bytes, fast.dram_read_bytes) == (exact.l2_hit_bytes, exact.dram_read_bytes)
    assert abs(fast.time_s / exact.time_s - 1) < 1e-9


def test_a_kernel_whose_waves_fit_in_the_cache_is_not_decided_in_pairs():
    """The same kernel with an L2 a little larger than one wave's distinct tiles: a tile last
    read two waves back may still be cached, so pairs of waves cannot decide it; every wave
    is decided by its run heads instead, and the hits are the plain LRU's."""
    p = Problem(batch=1, heads=3, seq_q=4096, seq_k=4096, head_dim=32)
    plan = make_plan("fa2", p, narrow_gpu(5, 560 << 10))
    hw = plan.hardware
    kernels = from_plan_fast(plan).kernels
    tables = hit_tables(kernels, [hw.sm_count], hw.l2_bytes)
    assert isinstance(tables[0], RunHitTable) and not isinstance(tables[0], PairedRunHitTable)
    plain = kernel_hits(kernels, [hw.sm_count], hw.l2_bytes)
    assert tables[0].every_access().tolist() == plain[0].tolist()


def test_a_plan_whose_l2_decisions_pass_the_budget_is_refused_at_once_with_the_estimate(
    monkeypatch,
):
    """A causal kernel's classes are decided from one CTA of each run of a class at least
    (classwave): past the engine's memory budget (made small here, below even that),
    simulate keeps the counts and says, in one line, what the engine would need."""
    from hbmsim.api import simulate
    from hbmsim.engine import simulation as engine

    monkeypatch.setattr(engine, "ENGINE_MAX_BYTES", 1 << 20)
    p = Problem(batch=4, heads=8, seq_q=8192, seq_k=8192, causal=True)
    result = simulate(p, get_hardware("a100-40gb"), algo="fa2")
    why = result.extra["engine"]["skipped"]
    assert "loads and stores" in why and "GB" in why and "\n" not in why
    assert "time_s" not in result.extra and result.trips > 0


@pytest.mark.parametrize("sms", [8, 5])  # one wave of 8 CTAs; waves of 5 and 3
@pytest.mark.parametrize("l2_kib", [256, 1024])
@pytest.mark.parametrize("pass_", ["fwd", "fwd+bwd"])
def test_lockstep_waves_of_long_ctas_give_the_plain_lru_hits(sms, l2_kib, pass_):
    """flash-attn 1's first release: one CTA per (batch, head) runs the whole sequence, the
    CTAs translates of each other on tiles of their own. Their hits come from one CTA's stream
    (lockstep) and match the plain LRU's access for access, with the kernels around them."""
    p = Problem(batch=2, heads=4, seq_q=1024, seq_k=1024, head_dim=64, pass_=pass_)
    plan = build_plan(p, narrow_gpu(sms, l2_kib << 10), impl="flash-attn-1@0.1")
    tables, plain = tables_and_plain(plan)
    assert all(isinstance(t, LockstepHitTable) for t in tables)
    assert [t.every_access().tolist() for t in tables] == [x.tolist() for x in plain]


def test_query_heads_sharing_kv_form_teams_and_keep_every_hit():
    """Grouped-query attention: the CTAs of one K/V head's query heads read the same K/V
    tiles one after another, their Q and O tiles their own: a team. A tile a team shares
    weighs one copy per team in the wave, a private one a copy per CTA, and the team's later
    CTAs repeat its first's read; the hits are the plain LRU's."""
    p = Problem(batch=1, heads=8, kv_heads=2, seq_q=64, seq_k=4096, head_dim=64)
    plan = build_plan(p, narrow_gpu(8, 128 << 10), algo="fa2")
    kernel = from_plan_fast(plan).kernels[0]
    wave = LockstepWave.of(kernel, 8, 128 << 10)
    assert wave is not None and wave.team.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    tables, plain = tables_and_plain(plan)
    assert isinstance(tables[0], LockstepHitTable)
    assert [t.every_access().tolist() for t in tables] == [x.tolist() for x in plain]
    for members in ([0, 1, 2, 3, 4, 5, 6, 7], [1, 2, 5], [3, 4]):  # what the engine asks for
        rows = tables[0].rows(np.array(members))
        assert tables[0].counts(np.array(members)).tolist() == rows.sum(axis=0).tolist()


@pytest.mark.parametrize(
    "p, algo, sms",
    [
        (Problem(batch=1, heads=8, kv_heads=2, seq_q=64, seq_k=4096, head_dim=64), "fa2", 8),
        (Problem(batch=2, heads=8, seq_q=2048, seq_k=2048, head_dim=64), "fa2", 6),
        (Problem(batch=1, heads=4, seq_q=1024, seq_k=1024, pass_="fwd+bwd"), "standard", 8),
    ],
)
def test_lockstep_declines_past_its_budget_from_a_bound_it_never_undercuts(p, algo, sms):
    """Before working out every CTA's shifts (90 s on a kernel of 67 M CTAs) the rule bounds
    what it would decide from CTA 0's stream: never above what it then decides, so a budget
    it fits still takes it, and one below the bound declines at once."""
    from hbmsim.engine.l2.lockstep import _first_touches, _least_decided
    from hbmsim.engine.l2.lru import tile_ids

    plan = build_plan(p, narrow_gpu(sms, 128 << 10), algo=algo)
    taken = 0
    for kernel in from_plan_fast(plan).kernels:
        wave = LockstepWave.of(kernel, sms, 128 << 10)
        if wave is None:
            continue
        taken += 1
        first, counts, _op, nbytes = kernel.transfer_rows
        sizes = nbytes[first[0] : first[0] + int(counts[0])]
        ids = tile_ids(kernel.keys.take(np.arange(1)))  # CTA 0's stream, as the rule reads it
        firsts = _first_touches(ids), _first_touches(ids[::-1])
        least = _least_decided(kernel.n_ctas, sms, 128 << 10, sizes, firsts)
        assert least <= wave.decided
        assert LockstepWave.of(kernel, sms, 128 << 10, wave.decided).decided == wave.decided
        assert LockstepWave.of(kernel, sms, 128 << 10, least - 1) is None
    assert taken


def test_ctas_sharing_tiles_two_ways_are_not_taken_for_lockstep():
    """The score GEMM of standard attention: a CTA per (row block, column block) tile shares
    its Q rows with its row's CTAs (consecutive) and its K columns with its column's (not
    consecutive): no single cut into teams, so the rule declines."""
    p = Problem(batch=1, heads=2, seq_q=1024, seq_k=1024, head_dim=64)
    plan = build_plan(p, narrow_gpu(64, 64 << 10), algo="standard")
    kernel = from_plan_fast(plan).kernels[0]
    assert kernel.n_ctas > 1 and len(kernel.templates) == 1
    assert LockstepWave.of(kernel, 64, 64 << 10) is None


@pytest.mark.parametrize("impl", ["torch-eager", "standard"])
def test_gemms_over_column_blocks_are_taken_for_lockstep_and_keep_every_hit(impl):
    """dV = Pᵀ dO: each CTA reads a block of P's columns down every row, so the CTAs' tiles
    interleave in memory (their spans overlap) without any two sharing a tile; told apart tile
    by tile, the kernel is decided from one CTA's stream, and the hits are the plain LRU's."""
    p = Problem(batch=1, heads=4, seq_q=1024, seq_k=1024, head_dim=64, pass_="fwd+bwd")
    kind = "impl" if "-" in impl else "algo"
    plan = build_plan(p, narrow_gpu(8, 256 << 10), **{kind: impl})
    kernels = from_plan_fast(plan).kernels
    names = [k.name for k in kernels]
    dv = kernels[names.index("bmm_dv" if impl == "torch-eager" else "dv")]
    assert LockstepWave.of(dv, 8, 256 << 10) is not None
    tables, plain = tables_and_plain(plan)
    assert isinstance(tables[kernels.index(dv)], LockstepHitTable)
    assert [t.every_access().tolist() for t in tables] == [x.tolist() for x in plain]


def test_lockstep_engine_agrees_with_the_exact_replay():
    """The engine on those hits: bytes equal to the exact path's, time within float noise."""
    p = Problem(batch=2, heads=4, seq_q=512, seq_k=512, head_dim=64, pass_="fwd+bwd")
    plan = build_plan(p, narrow_gpu(8, 256 << 10), impl="flash-attn-1@0.1")
    assert all(isinstance(t, LockstepHitTable) for t in tables_and_plain(plan)[0])
    assert_engine_agrees(plan)


# Many drawn problems fall outside the rule (a run cut by a wave, GQA's shared K/V, a head
# and tail that would hold every row): they are filtered, the rest checked access by access.
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(
    what=st.sampled_from([("impl", "flash-attn-1"), ("algo", "fa2")]),
    batch=st.integers(1, 4),
    heads=st.integers(1, 4),
    kv_div=st.sampled_from([1, 1, 2]),
    seq=st.sampled_from([512, 1024, 2048]),
    causal=st.sampled_from([True, True, False]),
    pass_=st.sampled_from(["fwd", "fwd+bwd"]),
    sms=st.sampled_from([4, 6, 8, 12, 16, 32]),
    l2_kib=st.sampled_from([32, 128, 512]),
)
def test_classes_in_runs_give_the_plain_lru_hits(
    what, batch, heads, kv_div, seq, causal, pass_, sms, l2_kib
):
    """flash-attn 1.x's split forward (one class per split, each the (batch, head) CTAs of its
    steps, class by class) and causal attention's query-block classes: in one wave, or in
    waves that cut each class into runs of equal size. Their hits come from one CTA of each
    run, each tile weighing its run's translates (classwave), and match the plain LRU's
    access for access, with the kernels around them (grouped-query attention, whose heads
    share K/V, is declined); the engine asks for a cohort's counts, its rows summed."""
    kind, name = what
    kv_heads = heads // kv_div if heads % kv_div == 0 and name != "flash-attn-1" else heads
    p = Problem(
        batch=batch,
        heads=heads,
        kv_heads=kv_heads,
        seq_q=seq,
        seq_k=seq,
        head_dim=64,
        causal=causal,
        pass_=pass_,
    )
    try:
        plan = build_plan(p, narrow_gpu(sms, l2_kib << 10), **{kind: name})
    except (ConfigError, SramOverflowError):
        assume(False)
    kernel = from_plan_fast(plan).kernels[0]
    wave = ClassWave.of(kernel, sms, l2_kib << 10)
    assume(wave is not None)
    tables, plain = tables_and_plain(plan)
    assert isinstance(tables[0], ClassWaveHitTable)
    assert wave.decided < len(plain[0])  # the middle rows are not laid out
    assert least_decided(plan, count_plan(plan)) <= sum(len(t.hits) for t in tables)
    assert [t.every_access().tolist() for t in tables] == [x.tolist() for x in plain]
    for t in np.unique(kernel.cta_template).tolist():
        members = np.flatnonzero(kernel.cta_template == t)
        rows = tables[0].rows(members)
        assert tables[0].counts(members).tolist() == rows.sum(axis=0).tolist()


def test_split_classes_decide_far_fewer_accesses_and_the_engine_agrees():
    """Batch 2 x 4 heads in 4 splits on 32 SMs: R is one CTA of each split, an eighth of the
    wave's accesses, and the engine on those hits gives the exact replay's bytes and time."""
    p = Problem(batch=2, heads=4, seq_q=1024, seq_k=1024, head_dim=64)
    plan = build_plan(p, narrow_gpu(32, 256 << 10), impl="flash-attn-1")
    kernel = from_plan_fast(plan).kernels[0]
    wave = ClassWave.of(kernel, 32, 256 << 10)
    assert wave is not None and wave.groups == 8 and len(kernel.keys.classes) == 4
    every = int(kernel.transfers(np.arange(kernel.n_ctas)).sum())
    assert wave.decided < every / 4
    assert_engine_agrees(plan)


def test_classes_that_do_not_translate_alike_are_not_taken_for_a_class_wave():
    """The rule needs every class's g-th CTA at the same translate: one class of many CTAs
    (lockstep's case) and kernels of more than one wave are declined."""
    p = Problem(batch=2, heads=4, seq_q=1024, seq_k=1024, head_dim=64)
    one_class = from_plan_fast(build_plan(p, narrow_gpu(64, 1 << 20), algo="fa2")).kernels[0]
    assert len(one_class.keys.classes) == 1 and ClassWave.of(one_class, 64, 1 << 20) is None
    split = from_plan_fast(build_plan(p, narrow_gpu(32, 1 << 20), impl="flash-attn-1"))
    kernel = split.kernels[0]
    assert ClassWave.of(kernel, kernel.n_ctas - 1, 1 << 20) is None  # two waves


def test_interleaved_causal_classes_skip_waves_and_keep_every_hit():
    """flash-attn-2 launches a head's causal row blocks together (a class each, interleaved in
    launch order): the sequence still repeats per batch, so waves are skipped there too, and
    the hits, bytes and time are the exact replay's."""
    p = Problem(batch=8, heads=4, seq_q=256, seq_k=256, head_dim=32, causal=True, pass_="fwd+bwd")
    plan = build_plan(p, narrow_gpu(2, 64 << 10), impl="flash-attn-2")
    kernels = from_plan_fast(plan).kernels
    assert any(len(k.templates) > 1 and k.period for k in kernels)
    mine, plain, skipped = hits_both_ways(plan)
    assert skipped == len(kernels)
    assert [m.tolist() for m in mine] == [x.tolist() for x in plain]
    assert_engine_agrees(plan)


@pytest.mark.parametrize("causal", [False, True])
def test_gqa_kernels_translate_by_a_group_of_heads_and_keep_every_hit(causal):
    """GQA: query head h reads K/V head h // group, a per-tensor shift by head, not an affine
    term. Stepping a whole group of heads moves every K/V tile by one K/V head wherever the
    step starts, so the launch sequence translates by a group's CTAs (periods.shift_step):
    waves are skipped, and the hits are the plain LRU's, access by access."""
    p = Problem(batch=2, heads=8, kv_heads=2, seq_q=512, seq_k=512, head_dim=32, causal=causal)
    plan = build_plan(p, narrow_gpu(2, 64 << 10), impl="flash-attn-2")
    kw = from_plan_fast(plan).kernels[0]
    assert any(ck.shifts for ck in kw.keys.classes)
    assert kw.n_ctas // p.kv_heads in kw.period  # the CTAs of one K/V head's group
    mine, plain, _skipped = hits_both_ways(plan)
    assert [m.tolist() for m in mine] == [x.tolist() for x in plain]


@settings(max_examples=200)
@given(
    st.lists(st.tuples(st.integers(1, 6), st.integers(1, 4), st.integers(0, 9)), max_size=6),
    st.data(),
)
def test_a_skipped_cta_takes_its_own_stretchs_reference(runs, data):
    """HitTable's skipped stretches, looked up at once: what applying them one after another
    (as _Plan lays them out: per run a reference stretch, then its skipped waves) gives."""
    from hbmsim.engine.l2.table import referenced, skip_columns

    skip, at = [], 0
    for ref_len, periods, gap in runs:  # a run: history, reference, skipped, then a gap
        ref = at + ref_len
        first = ref + ref_len
        end = first + periods * ref_len
        skip.append((first, end, ref, ref_len))
        at = end + gap
    n = at + 1
    members = np.array(
        data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=30)), dtype=np.int64
    )
    expected = members.copy()
    for first, end, ref, period in skip:
        inside = (expected >= first) & (expected < end)
        expected = np.where(inside, ref + (expected - ref) % period, expected)
    assert referenced(skip_columns(skip), members).tolist() == expected.tolist()


@settings(max_examples=40, deadline=None)
@given(
    p=st.sampled_from(
        [  # waves of several program lengths: causal classes, flash-attn 1's ragged splits
            Problem(batch=1, heads=2, seq_q=300, seq_k=300, head_dim=32, causal=True),
            Problem(batch=1, heads=1, seq_q=1000, seq_k=1000, head_dim=32),
            Problem(batch=1, heads=2, seq_q=200, seq_k=200, head_dim=32, pass_="fwd+bwd"),
        ]
    ),
    impl=st.sampled_from(("flash-attn-1", "flash-attn-2", "torch-eager")),
    sms=st.integers(4, 12),
    data=st.data(),
)
def test_the_stream_is_laid_out_in_the_caches_logical_order(p, impl, sms, data):
    """in_logical_order's arithmetic layout (no sort) of any ascending subset of a kernel's
    CTAs, one template or several (causal classes, flash-attn 1's splits), a wave or many at a
    time, against the definition (lru.logical_order's): wave by wave, position by position, CTA
    by CTA."""
    from hbmsim.engine.l2.order import in_logical_order

    plan = build_plan(p, narrow_gpu(sms, 1 << 20), impl=impl)
    for kw in from_plan_fast(plan).kernels:
        keep = data.draw(st.lists(st.booleans(), min_size=kw.n_ctas, max_size=kw.n_ctas))
        if data.draw(st.booleans()):  # every CTA: whole waves (one program: one block)
            keep = [True] * kw.n_ctas
        ctas = np.flatnonzero(keep) if any(keep) else np.arange(kw.n_ctas)
        slots = sms * data.draw(st.integers(1, 3))
        chunk = data.draw(st.sampled_from([1, 50, 1 << 20]))  # accesses laid out at a time
        (_c, wave, order), op, key, size = in_logical_order(kw, ctas, slots, chunk)
        cta, index, op0, key0, size0 = kw.accesses(ctas)  # CTA by CTA
        expected = np.lexsort((cta, index, cta // slots))
        assert order.tolist() == expected.tolist()
        assert wave.tolist() == (cta // slots)[expected].tolist()
        assert op.tolist() == op0[expected].tolist()
        assert size.tolist() == size0[expected].tolist()
        assert key.tolist() == key0[expected].tolist()


def test_the_layout_test_sees_whole_waves_of_one_program():
    """The plans above also give kernels of one program over several full waves, which are
    laid out as one block (else the block's arithmetic is not tested)."""
    from hbmsim.engine.l2.order import one_template_full_waves

    p = Problem(batch=1, heads=2, seq_q=200, seq_k=200, head_dim=32, pass_="fwd+bwd")
    plan = build_plan(p, narrow_gpu(4, 1 << 20), impl="torch-eager")
    slots = 4
    blocks = 0
    for kw in from_plan_fast(plan).kernels:
        n = kw.n_ctas - kw.n_ctas % slots
        if n >= 2 * slots:
            waves = [(j, j + slots) for j in range(0, n, slots)]
            blocks += one_template_full_waves(kw.cta_template, waves, slots)
    assert blocks >= 2


def test_the_layout_test_sees_waves_of_several_program_lengths():
    """The plans above do put CTAs of different lengths in one wave (else it tests one case)."""
    p = Problem(batch=1, heads=1, seq_q=1000, seq_k=1000, head_dim=32)
    plan = build_plan(p, narrow_gpu(8, 1 << 20), impl="flash-attn-1")
    kw = from_plan_fast(plan).kernels[0]
    lengths = kw.transfers(np.arange(min(8, kw.n_ctas)))
    assert len(set(lengths.tolist())) > 1


def test_class_shifts_hold_a_column_per_tensor_the_class_moves():
    """A class's shifts per CTA are how far its keys lie from the first CTA's, one column per
    tensor its transfers move (ascending ids): every transfer of a tensor moves by its
    column's shift, and a plan's other tensors take no memory."""
    from hbmsim.engine.l2.lockstep import class_shifts

    p = Problem(batch=2, heads=4, seq_q=512, seq_k=512, head_dim=64)
    plan = build_plan(p, narrow_gpu(8, 1 << 20), impl="torch-eager")
    for kw in from_plan_fast(plan).kernels:
        if len(kw.keys.classes) != 1:
            continue
        ck = kw.keys.classes[0]
        found = class_shifts(ck, kw.keys.layout.take(np.arange(kw.n_ctas)))
        if found is None:
            continue
        shift, used = found
        assert used.tolist() == sorted(set(ck.tensor.tolist())), kw.name
        assert shift.shape == (kw.n_ctas, len(used), 2), kw.name
        keys = kw.keys.take(np.arange(kw.n_ctas)).reshape(kw.n_ctas, len(ck.tensor), 2)
        column = np.searchsorted(used, ck.tensor)
        assert np.array_equal(keys - keys[:1], shift[:, column, :]), kw.name


@settings(max_examples=200, deadline=None)
@given(
    rows=st.integers(0, 60),
    cols=st.integers(1, 5),
    wide=st.booleans(),
    data=st.data(),
)
def test_unique_rows_are_numpys_unique_rows(rows, cols, wide, data):
    """The packed unique of a run stream's coordinate steps gives what np.unique(axis=0)
    gives: the same rows in the same (lexicographic) order and the same inverse, for small
    steps (packed) and for columns too wide to pack (numpy's own path)."""
    from hbmsim.engine.l2.runs import _unique_rows

    bound = (1 << 40) if wide else 3
    values = st.integers(-bound, bound)
    a = np.array(
        data.draw(
            st.lists(st.lists(values, min_size=cols, max_size=cols), min_size=rows, max_size=rows)
        ),
        dtype=np.int64,
    ).reshape(rows, cols)
    got_rows, got_inverse = _unique_rows(a)
    want_rows, want_inverse = np.unique(a, axis=0, return_inverse=True)
    assert got_rows.tolist() == want_rows.tolist()
    assert got_inverse.tolist() == want_inverse.reshape(-1).tolist()


@settings(max_examples=200, deadline=None)
@given(
    patterns=st.integers(1, 140),
    distinct=st.integers(1, 6),
    n=st.integers(0, 50),
    data=st.data(),
)
def test_unique_columns_are_numpys_unique_columns(patterns, distinct, n, data):
    """The packed unique of a run stream's break flags gives what np.unique(axis=0) gives
    on the columns, for as many patterns as fit in one number (62) and for more (a GQA
    decode over 64 heads has 63), read 62 at a time."""
    from hbmsim.engine.l2.runs import _unique_columns

    seed = data.draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    kinds = rng.random((patterns, distinct)) < 0.5
    flags = kinds[:, rng.integers(0, distinct, n)]
    got_cols, got_inverse = _unique_columns(flags)
    want_cols, want_inverse = np.unique(flags.T, axis=0, return_inverse=True)
    assert got_cols.tolist() == want_cols.tolist()
    assert got_inverse.tolist() == want_inverse.reshape(-1).tolist()


def test_a_decode_over_more_heads_than_one_number_holds_patterns_keeps_every_hit():
    """A GQA decode over 66 query heads: one CTA per head, every step between neighbours a
    pattern of its own (65 of them, more than one number's 62 bits hold). Decided by its run
    heads (its lockstep waves, which the engine prefers here, left out), it still gets the
    plain LRU's every hit."""
    from hbmsim.engine.l2.stream import WholeStream, decide_unbroken

    p = Problem(batch=1, heads=66, kv_heads=6, seq_q=1, seq_k=4096, head_dim=16)
    plan = make_plan("fa2", p, narrow_gpu(7, 16 << 10), 16, 64)
    hw = plan.hardware
    kernels = from_plan_fast(plan).kernels
    slots = [hw.sm_count] * len(kernels)
    whole = WholeStream(kernels, slots, hw.l2_bytes, [None] * len(kernels))
    assert len(np.unique(whole.streams[0].pattern)) > 62
    tables = decide_unbroken(kernels, slots, hw.l2_bytes, None, whole)
    plain = kernel_hits(kernels, slots, hw.l2_bytes)
    assert all(isinstance(t, RunHitTable | PairedRunHitTable) for t in tables)
    for t, x in zip(tables, plain, strict=True):
        assert t.every_access().tolist() == x.tolist()


def test_a_waves_bytes_counted_up_to_enough_size_its_history_as_the_whole_count_does():
    """A wave's distinct bytes, counted over its first CTAs only until they reach `enough`,
    are the whole wave's below it, and at least `enough` (and no more than the whole) past
    it: the history sized from either is the same (one wave past MAX_HISTORY capacities)."""
    from hbmsim.engine.l2.fast import MAX_HISTORY, distinct_bytes

    p = Problem(batch=1, heads=4, seq_q=1024, seq_k=1024, head_dim=64, pass_="fwd+bwd")
    plan = build_plan(p, narrow_gpu(8, 64 << 10), algo="standard")
    for kw in from_plan_fast(plan).kernels:
        first = 8 if kw.n_ctas >= 16 else 0  # the second wave, where there is one
        _c, _i, _o, key, nbytes = kw.accesses(np.arange(first, min(first + 8, kw.n_ctas)))
        distinct = {}
        for k, b in zip(map(tuple, key.tolist()), nbytes.tolist(), strict=True):
            distinct[k] = b
        whole = sum(distinct.values())
        assert distinct_bytes(kw, 8) == whole
        assert distinct_bytes(kw, 8, whole + 1) == whole
        cut = distinct_bytes(kw, 8, whole // 3)
        assert whole // 3 <= cut <= whole
        for history in (1.5, 6.0, MAX_HISTORY):
            capacity = max(1, whole // 3) / MAX_HISTORY
            need_cut = math.ceil(
                history * capacity / max(distinct_bytes(kw, 8, MAX_HISTORY * capacity), 1)
            )
            assert need_cut == math.ceil(history * capacity / max(whole, 1))
