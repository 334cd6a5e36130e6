"""Long loops timed from a shortened copy (loops.py): the short copy worked by hand,
where the argument refuses, and every group of causal kernels next to its whole template's
run."""

import numpy as np
import pytest

from hbmsim import Problem, get_hardware
from hbmsim.api import build_plan
from hbmsim.engine.l2.fast import hit_tables
from hbmsim.engine.launch import kernel_setup
from hbmsim.engine.loops import SHORT_KEEP, SHORT_MIN, Cut, ShortRun, extended, shortened
from hbmsim.engine.stretch import AloneRuns
from hbmsim.engine.workload.classkeys import from_plan_fast
from hbmsim.engine.workload.work import LEAN_TEMPLATE_DTYPE
from hbmsim.gpu.occupancy import kernel_slots
from hbmsim.interpret.trace import OP_COMPUTE, OP_LOAD, OP_STORE


def loop_template(n: int) -> np.ndarray:
    """A load, then n iterations of (load, compute), then a store: a loop of 2 ops."""
    ops = [OP_LOAD] + [OP_LOAD, OP_COMPUTE] * n + [OP_STORE]
    rows = np.zeros(len(ops), LEAN_TEMPLATE_DTYPE)
    rows["op"] = ops
    rows["bytes"] = np.where(rows["op"] == OP_COMPUTE, 0, 128)
    rows["matmul_flops"] = np.where(rows["op"] == OP_COMPUTE, 1000, 0)
    return rows


def test_a_long_loop_keeps_its_first_iterations_and_its_last_two():
    """40 iterations of (load, compute), hits 0 on the first and the last, 3 (of 4 CTAs) on
    every other: SHORT_KEEP are kept (the first SHORT_KEEP - 2 and the last two), the rest
    left out; in the short copy the cut goes where iteration SHORT_KEEP - 2 began (one step
    per iteration kept), an iteration is one step, and one more middle iteration moves 128
    bytes that 3 CTAs find in L2 and 1 reads from DRAM."""
    n = 40
    rows = loop_template(n)
    counts = np.array([0] + [0] + [3] * (n - 2) + [0] + [0])  # Q, the loop's loads, the store
    loops = [(1, 2, n, 1, 1)]  # first op, ops per iteration, iterations, transfers before, each
    keep, short_counts, left_out = shortened(loops, counts)
    assert keep == {0: SHORT_KEEP} and left_out == {0: n - SHORT_KEEP}
    assert short_counts.tolist() == [0, 0] + [3] * (SHORT_KEEP - 2) + [0, 0]
    kept = np.ones(len(rows), dtype=bool)
    kept[1 + 2 * (SHORT_KEEP - 2) : 1 + 2 * (n - 2)] = False
    run = ShortRun(0.0, [], rows[kept], short_counts, 4, ((), 1), loops, keep)
    assert run.places == {0: (SHORT_KEEP - 2, 1)}
    assert run.iteration[0] == ([128, 3 * 128, 0], 4 * 128, 128)


def test_loops_too_short_or_with_changing_hits_are_run_whole():
    n = SHORT_MIN - 1
    assert shortened([(1, 2, n, 1, 1)], np.zeros(n + 2, dtype=np.int64)) is None
    n = SHORT_MIN
    counts = np.zeros(n + 2, dtype=np.int64)
    counts[n // 2] = 1  # one iteration in the middle hits where the others miss
    assert shortened([(1, 2, n, 1, 1)], counts) is None


def test_a_cut_adds_its_rounds_only_inside_the_skipped_rounds_and_in_whole_rounds():
    """The run skipped 10 rounds of 2 steps after step 5 (steps 6..25), 0.5 s each."""
    skips = [(5, 2, 10, 0.5)]
    assert extended(3.0, skips, [Cut(6, 8)]) == pytest.approx(3.0 + 4 * 0.5)
    assert extended(3.0, skips, [Cut(26, 8)]) == pytest.approx(5.0)  # right after them
    assert extended(3.0, skips, [Cut(5, 8)]) is None  # before them: the compared round
    assert extended(3.0, skips, [Cut(27, 8)]) is None  # past them
    assert extended(3.0, skips, [Cut(10, 7)]) is None  # not whole rounds
    assert extended(3.0, [], [Cut(10, 8)]) is None  # the run never skipped


@pytest.mark.parametrize(
    "what, problem, preset",
    [
        ("fa2", Problem(batch=1, heads=16, seq_q=4096, seq_k=4096, causal=True), "h100-sxm"),
        (
            "flash-attn-2",
            Problem(batch=1, heads=8, kv_heads=2, seq_q=8192, seq_k=8192, causal=True),
            "a100-80gb",
        ),
        (
            "flash-attn-3",
            Problem(batch=1, heads=8, seq_q=8192, seq_k=8192, head_dim=128, causal=True),
            "h100-sxm",
        ),
    ],
)
def test_every_group_timed_from_a_short_copy_matches_its_whole_templates_run(what, problem, preset):
    """Every template of a causal forward, as groups of 1 and 4 of its first CTAs with their
    real hits: where a short copy times it, the duration is the whole template's run's to
    float rounding and the bytes are the same; and most templates are so timed."""
    hw = get_hardware(preset)
    impl = what if "-" in what else None
    plan = build_plan(problem, hw, None if impl else what, impl)
    work = from_plan_fast(plan, regions=False)
    (kw,) = [k for k in work.kernels if len(k.templates) > 1][:1]
    k = work.kernels.index(kw)
    slots = [kernel_slots(hw, w) for w in work.kernels]
    hits = hit_tables(work.kernels, slots, hw.l2_bytes)[k]
    _occ, cap, prepared = kernel_setup(hw, kw, problem.dtype)
    runs = AloneRuns(hw, cap, k, [prepared(t) for t in kw.templates], kw, prepared)
    short, tried = 0, 0
    for t in range(len(kw.templates)):
        ctas = np.flatnonzero(kw.cta_template == t)
        for m in (1, 4):
            counts = hits.counts(ctas[:m]) if hits is not None else np.zeros(1, int)
            tried += 1
            from_short = runs._from_short(t, m, counts)
            if from_short is None:
                continue
            short += 1
            whole = runs._run(t, m, counts)
            assert from_short[0] == pytest.approx(whole[0], rel=1e-12)
            assert from_short[1] == whole[1]
            (pro, body, epi), (w_pro, w_body, w_epi) = from_short[2], whole[2]
            assert pro == w_pro and epi == pytest.approx(w_epi, rel=1e-9)
            assert body == pytest.approx(w_body, rel=1e-9)
    assert short >= tried // 2


def test_templates_kept_as_parts_lay_out_columns_and_short_copies_as_their_records_say():
    """classkeys.Templates: a causal kernel's templates (laid-out loops) give the same op,
    bytes and tensor columns as their records, and a cut segment the records with its middle
    iterations left out (all fields but regions)."""
    hw = get_hardware("h100-sxm")
    p = Problem(batch=1, heads=4, seq_q=4096, seq_k=4096, causal=True)
    kw = from_plan_fast(build_plan(p, hw, "fa2"), regions=False).kernels[0]
    templates, cut_some = kw.templates, 0
    for t in range(len(templates)):
        rows = templates[t]
        for column, name in zip(templates.columns(t), ("op", "bytes", "tensor"), strict=True):
            assert np.array_equal(column, rows[name])
        for i, (at, per, n, _t0, _t_per) in enumerate(templates.loops(t)):
            if n < SHORT_MIN:
                continue
            short = templates.cut(t, {i: SHORT_KEEP})
            keep = np.ones(len(rows), dtype=bool)
            keep[at + (SHORT_KEEP - 2) * per : at + (n - 2) * per] = False
            assert np.array_equal(short, rows[keep])
            cut_some += 1
    assert cut_some


def test_templates_laid_out_on_demand_are_kept_up_to_their_budget_and_equal_when_laid_again():
    """A budget that holds about two templates: asking for every template keeps the last ones
    (least recently asked for go first) within it, and a template laid out again equals its
    first layout."""
    hw = get_hardware("h100-sxm")
    p = Problem(batch=1, heads=4, seq_q=2048, seq_k=2048, causal=True)
    templates = from_plan_fast(build_plan(p, hw, "fa2"), regions=False).kernels[0].templates
    first = [templates[t].copy() for t in range(len(templates))]
    templates.cache.clear()
    templates.cached = 0
    templates.CACHE_BYTES = 2 * first[-1].nbytes
    for t in range(len(templates)):
        assert np.array_equal(templates[t], first[t])
        assert templates.cached <= templates.CACHE_BYTES or len(templates.cache) == 1
    assert len(templates) - 1 in templates.cache and 0 not in templates.cache
    assert np.array_equal(templates[0], first[0]) and not templates[0].flags.writeable
