"""Engine speed, measured side by side in one run.

    python bench/engine.py

1. Full per-op replay (every CTA its own SimPy process, accesses from a full trace) vs the fast
   path (CTAs launched together simulated once, accesses extrapolated per CTA class), for
   several sizes and two library mirrors: the ratio, and the predicted times side by side
   (they must agree).
2. Cohorts sharing the GPU (flash-attn 1.x's split forward over two waves and one, its
   forward + backward over up to 19): the fast path skipping the rounds the whole GPU
   repeats (rounds.Rounds) next to the same path walking every round: the ratio, the
   same bytes (checked) and the time's relative difference.
3. Long causal forwards (at least 32 row blocks over at least 4 waves): the step-by-step
   replay next to the stretched timelines (stretch.py) `simulate` times them with:
   the ratio, the same bytes (checked) and the time's relative difference.
4. The fast path at scale, as `hbmsim simulate` runs it (counts, then the engine): the
   FlashAttention paper's configuration (A100 40GB, batch 64, heads 16, seq 1024, standard
   causal + dropout, fwd+bwd), fa2 causal at 16k and 64k tokens x 16 heads (both stretched),
   flash-attn-1 mirror points (flash-attn 0.1 at 16k and 64k tokens, 1.x's split forward at
   8k on an A100 and an H100, and its forward + backward at 16k on an H100), PyTorch eager
   causal fwd+bwd at 16k tokens x batch 4 x 16 heads, seq 32,768 and 131,072 without a mask (fa2
   x 16 heads, and flash-attn-2 on Llama 3 8B's attention shape), and seq 1,048,576 (fa2; and
   fa2 at batch 64 x 64 heads and the standard algorithm, both refused: how soon). Per case:
   the whole call, and in a second call its peak traced memory (Python allocations, numpy arrays
   included); the L2 accesses decided one by one (the rest are skipped waves, l2/fast.py, repeat
   the tile just touched, l2/runs.py, or take one CTA's answer, l2/lockstep.py, or one CTA a
   run's, l2/classwave.py) out of every load and store; the L2 hits so decided next to
   deciding every access (same hits, checked, where that fits in memory); the predicted time,
   or why the engine was skipped.
5. The fast workload builder on grouped-query attention (Llama 3 8B's attention shape: 32
   query heads, 8 K/V heads, d 128), causal, where every query block is its own CTA class and
   the head axis is not affine (query head h reads K/V head h // 4): its per-tensor shifts
   learned once per kernel next to sampling every head in every class (the same keys,
   checked), and the whole `hbmsim simulate` call.
6. The bulk L2 test on streams that cycle through more than the L2 holds (flash-attn 0.1's
   forward, whose CTAs step through every query row once per key block; fa2 without a mask
   at 256k tokens, by its run heads): `bulk.bulk_hits` with its lower bounds next to the exact
   LRU replay it falls back to when it cannot decide within budget (the same hits, checked).
7. The fast workload builder on causal fa2 (16k and 64k tokens x 16 heads: a CTA class per
   query block, affine over the heads), learned from runs: every class running its own first
   step, then the heads' step per tensor learned by the first class and tried first by the
   others; and the builder's default, each class built from one run with its coordinates
   symbolic (program/symbolic.py), here the query blocks too, one run for their family
   (classkeys._families) (the same keys and ops all three ways, checked; the speed-up is the
   symbolic runs' over the learned steps').
8. The fast workload builder's loops: each long loop segment traced at four iterations and
   laid out from them (classkeys.py) next to tracing every iteration, on programs of long
   loops (flash-attn 0.1's one CTA a head, fa2 at 1M tokens, a causal kernel's classes,
   flash-attn 1.x's split forward): the same ops and tile keys for every CTA, checked.
9. Stretched kernels' alone runs (causal forwards: fa2 at 16k and 64k tokens x 16 heads,
   flash-attn 2 at 16k x 32 heads): every group `simulate` asks for, each run on its whole
   template (every template prepared) next to the same groups timed from short copies of
   their loops (loops.py, the default): the ratio, how many groups a short copy timed,
   the largest relative difference of their durations and the same bytes (checked).
"""

from __future__ import annotations

import math
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


from hbmsim import Problem, get_hardware  # noqa: E402
from hbmsim.api import build_plan, simulate  # noqa: E402
from hbmsim.engine.l2.bulk import bulk_hits  # noqa: E402
from hbmsim.engine.l2.fast import hit_tables
from hbmsim.engine.l2.lru import LRU, NUMPY_STEPS_PER_ACCESS, kernel_hits
from hbmsim.engine.l2.stream import unbroken_stream  # noqa: E402
from hbmsim.engine.simulation import run_engine  # noqa: E402
from hbmsim.engine.workload.classkeys import from_plan_fast  # noqa: E402
from hbmsim.fmt import seconds, table  # noqa: E402
from hbmsim.gpu.occupancy import kernel_slots  # noqa: E402
from hbmsim.interpret.counts import count_plan  # noqa: E402


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def label(what, p, hw=None):
    out = f"{what} b{p.batch} h{p.heads}"
    out += f" kv{p.kv_heads}" if p.kv_heads != p.heads else ""
    out += f" d{p.head_dim}" if p.head_dim != 64 else ""
    out += f" seq {p.seq_q}"
    out += " causal" if p.causal else ""
    out += " dropout" if p.dropout else ""
    out += f" {p.pass_}" if p.pass_ != "fwd" else ""
    return out + (f" on {hw.name}" if hw else "")


def side_by_side(name: str, count: int, t_slow: float, t_fast: float, same: bool) -> list[str]:
    """A comparison row: the case, a count, both times, their ratio, whether they agree."""
    return [
        name,
        f"{count:,}",
        f"{t_slow:.2f} s",
        f"{t_fast:.2f} s",
        f"{t_slow / t_fast:.1f}x",
        "yes" if same else "NO",
    ]


def same_workload(a, b, ctas=np.arange, templates: bool = True) -> bool:
    """Two fast workloads give the same tile keys (of the CTAs `ctas(n)` picks of each
    kernel's n) and, with `templates`, the same templates."""
    return all(
        np.array_equal(x.keys.take(ctas(x.n_ctas)), y.keys.take(ctas(y.n_ctas)))
        and (
            not templates
            or len(x.templates) == len(y.templates)
            and all(np.array_equal(s, t) for s, t in zip(x.templates, y.templates, strict=True))
        )
        for x, y in zip(a.kernels, b.kernels, strict=True)
    )


def same_bytes(a, b) -> bool:
    """Two engine results move the same DRAM and L2 bytes."""
    return all(
        getattr(a, f) == getattr(b, f)
        for f in ("dram_read_bytes", "dram_write_bytes", "l2_hit_bytes")
    )


def exact_vs_fast() -> None:
    h100, a100 = get_hardware("h100-sxm"), get_hardware("a100-40gb")
    rows = []
    for what, p, hw, impl in [
        ("fa2", Problem(batch=1, heads=4, seq_q=1024, seq_k=1024), h100, None),
        ("fa2", Problem(batch=1, heads=8, seq_q=4096, seq_k=4096), h100, None),
        ("fa2", Problem(batch=1, heads=8, seq_q=4096, seq_k=4096, causal=True), h100, None),
        ("fa1", Problem(batch=2, heads=8, seq_q=4096, seq_k=4096), h100, None),
        ("standard", Problem(batch=1, heads=4, seq_q=1024, seq_k=1024), h100, None),
        ("standard", Problem(batch=1, heads=4, seq_q=2048, seq_k=2048, causal=True), h100, None),
        (
            "flash-attn-1",
            Problem(batch=1, heads=4, seq_q=2048, seq_k=2048, pass_="fwd+bwd"),
            a100,
            1,
        ),
        (
            "torch-eager",
            Problem(batch=2, heads=4, seq_q=512, seq_k=512, causal=True, pass_="fwd+bwd"),
            a100,
            1,
        ),
        (  # one wave of several cohorts: their GPU-wide rounds (rounds.Rounds)
            "flash-attn-1",
            Problem(batch=2, heads=4, seq_q=2048, seq_k=2048, causal=True),
            h100,
            1,
        ),
        (  # two waves of five cohorts (1.x's splits): the rounds skipped across the waves
            "flash-attn-1",
            Problem(batch=16, heads=8, seq_q=1536, seq_k=1536),
            a100,
            1,
        ),
        (  # a cohort draining its last stores while others loop (no round skipped then)
            "flash-attn-1",
            Problem(batch=2, heads=8, seq_q=1024, seq_k=1024, causal=True, pass_="fwd+bwd"),
            get_hardware("a100-80gb"),
            1,
        ),
    ]:
        plan = build_plan(p, hw, None if impl else what, what if impl else None)
        fast, t_fast = timed(lambda plan=plan: run_engine(plan))
        exact, t_exact = timed(lambda plan=plan: run_engine(plan, exact=True))
        rows.append(
            [
                label(what, p, hw),
                f"{t_exact:.2f} s",
                f"{t_fast:.3f} s",
                f"{t_exact / t_fast:.0f}x",
                seconds(exact.time_s),
                seconds(fast.time_s),
                f"{abs(fast.time_s / exact.time_s - 1):.1e}",
            ]
        )
    print("full per-op replay vs fast path (head dim 64, fp16)")
    print(
        table(
            ["case", "exact", "fast", "speed-up", "exact predicts", "fast predicts", "rel. diff"],
            rows,
        )
    )


def at_scale() -> None:
    h100, a100 = get_hardware("h100-sxm"), get_hardware("a100-40gb")
    rows = []
    for what, p, hw, impl, compare in [
        (
            "standard",
            Problem(
                batch=64,
                heads=16,
                seq_q=1024,
                seq_k=1024,
                causal=True,
                dropout=0.1,
                pass_="fwd+bwd",
            ),
            a100,
            None,
            True,
        ),
        ("fa2", Problem(batch=64, heads=16, seq_q=1024, seq_k=1024), a100, None, True),
        (
            "fa2",
            Problem(batch=1, heads=16, seq_q=16384, seq_k=16384, causal=True),
            h100,
            None,
            True,
        ),
        (
            "flash-attn-1",
            Problem(batch=2, heads=8, seq_q=8192, seq_k=8192, pass_="fwd+bwd"),
            a100,
            1,
            True,
        ),
        (
            "flash-attn-1@0.1",
            Problem(batch=16, heads=8, seq_q=16384, seq_k=16384),
            a100,
            1,
            False,
        ),
        (
            "flash-attn-1@0.1",
            Problem(batch=16, heads=8, seq_q=32768, seq_k=32768),
            a100,
            1,
            False,
        ),
        ("flash-attn-1", Problem(batch=16, heads=8, seq_q=8192, seq_k=8192), a100, 1, False),
        ("flash-attn-1", Problem(batch=16, heads=8, seq_q=8192, seq_k=8192), h100, 1, False),
        (
            "flash-attn-1",
            Problem(batch=4, heads=16, seq_q=16384, seq_k=16384, pass_="fwd+bwd"),
            h100,
            1,
            False,
        ),
        (
            "torch-eager",
            Problem(batch=4, heads=16, seq_q=16384, seq_k=16384, causal=True, pass_="fwd+bwd"),
            h100,
            1,
            False,
        ),
        (
            "fa2",
            Problem(batch=1, heads=16, seq_q=65536, seq_k=65536, causal=True),
            h100,
            None,
            False,
        ),
        ("fa2", Problem(batch=1, heads=16, seq_q=1 << 15, seq_k=1 << 15), h100, None, True),
        ("fa2", Problem(batch=1, heads=16, seq_q=1 << 17, seq_k=1 << 17), h100, None, False),
        (
            "flash-attn-2",
            Problem(batch=1, heads=32, kv_heads=8, seq_q=1 << 17, seq_k=1 << 17, head_dim=128),
            h100,
            1,
            False,
        ),
        ("fa2", Problem(batch=1, heads=16, seq_q=1 << 20, seq_k=1 << 20), h100, None, False),
        # past the memory budget: how soon the refusal (with its estimate) comes
        ("fa2", Problem(batch=64, heads=64, seq_q=1 << 20, seq_k=1 << 20), h100, None, False),
        ("standard", Problem(batch=1, heads=16, seq_q=1 << 20, seq_k=1 << 20), h100, None, False),
    ]:
        name = label(what, p, hw)

        def call(p=p, hw=hw, what=what, impl=impl):
            return simulate(p, hw, None if impl else what, impl=what if impl else None)

        result, total = timed(call)
        skipped = result.extra.get("engine", {}).get("skipped")
        if skipped:
            rows.append([name, f"{total:.2f} s", "-", "-", "-", "-", "-", skipped[:70] + "..."])
            continue
        tracemalloc.start()  # a second call: tracing slows Python-heavy code several times
        call()
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        plan = build_plan(p, hw, None if impl else what, what if impl else None)
        work = from_plan_fast(plan)
        slots = [kernel_slots(hw, k) for k in work.kernels]
        tables, t_skip = timed(lambda a=(work.kernels, slots, hw.l2_bytes): hit_tables(*a))
        decided = sum(len(t.hits) for t in tables)
        every = count_plan(plan).trips
        plain, same = "-", ""
        if compare:
            full, t_full = timed(lambda a=(work.kernels, slots, hw.l2_bytes): kernel_hits(*a))
            plain = f"{t_full:.2f} s"
            mine = [t.every_access() for t in tables]
            same = "" if all((a == b).all() for a, b in zip(mine, full, strict=True)) else " DIFFER"
        rows.append(
            [
                name,
                f"{total:.2f} s",
                f"{peak / 1e6:,.0f} MB",
                f"{decided:,} of {every:,}",
                f"{t_skip:.2f} s",
                plain + same,
                seconds(result.extra["time_s"]),
                "",
            ]
        )
    print("fast path at scale (counts + engine, as `hbmsim simulate` runs them)")
    print(
        table(
            [
                "case",
                "whole call",
                "peak memory",
                "L2 accesses decided",
                "L2 fast (skips, runs)",
                "L2 every access",
                "predicted",
                "engine skipped",
            ],
            rows,
        )
    )


def gqa_builder() -> None:
    h100 = get_hardware("h100-sxm")
    rows = []
    for what, seq in [("fa2", 4096), ("fa2", 8192), ("flash-attn-2", 8192)]:
        p = Problem(batch=1, heads=32, kv_heads=8, seq_q=seq, seq_k=seq, head_dim=128, causal=True)
        impl = "-" in what
        plan = build_plan(p, h100, None if impl else what, what if impl else None)
        every, t_every = timed(
            lambda plan=plan: from_plan_fast(plan, learn_shifts=False, symbolic=False)
        )
        once, t_once = timed(lambda plan=plan: from_plan_fast(plan, symbolic=False))
        same = same_workload(every, once, templates=False)
        result, total = timed(
            lambda p=p, what=what, impl=impl: simulate(
                p, h100, None if impl else what, impl=what if impl else None
            )
        )
        rows.append(
            side_by_side(label(what, p, h100), len(plan.kernels[0].grid), t_every, t_once, same)
            + [
                f"{total:.2f} s",
                seconds(result.extra["time_s"]) if "time_s" in result.extra else "-",
            ]
        )
    print("fast workload builder, grouped-query attention (causal: a CTA class per query block)")
    print(
        table(
            [
                "case",
                "classes",
                "every head sampled",
                "shifts learned once",
                "speed-up",
                "same keys",
                "whole call",
                "predicted",
            ],
            rows,
        )
    )


def causal_builder() -> None:
    h100 = get_hardware("h100-sxm")
    rows = []
    for seq in (16384, 65536):
        p = Problem(batch=1, heads=16, seq_q=seq, seq_k=seq, head_dim=64, causal=True)
        plan = build_plan(p, h100, "fa2", None)
        own, t_own = timed(
            lambda plan=plan: from_plan_fast(plan, learn_steps=False, symbolic=False)
        )
        once, t_once = timed(lambda plan=plan: from_plan_fast(plan, symbolic=False))
        sym, t_sym = timed(lambda plan=plan: from_plan_fast(plan))
        same = same_workload(own, once) and same_workload(once, sym)
        rows.append(
            [
                label("fa2", p, h100),
                f"{len(plan.kernels[0].grid):,}",
                f"{t_own:.2f} s",
                f"{t_once:.2f} s",
                f"{t_sym:.2f} s",
                f"{t_once / t_sym:.1f}x",
                "yes" if same else "NO",
            ]
        )
    print("fast workload builder, causal (a CTA class per query block, affine over the heads)")
    print(
        table(
            [
                "case",
                "classes",
                "each class's own step",
                "steps learned once",
                "one symbolic run",
                "speed-up",
                "same",
            ],
            rows,
        )
    )


def cycling_streams() -> None:
    a100, h100 = get_hardware("a100-40gb"), get_hardware("h100-sxm")
    rows = []
    for what, p, hw in [
        ("flash-attn-1@0.1", Problem(batch=16, heads=8, seq_q=4096, seq_k=4096), a100),
        ("flash-attn-1@0.1", Problem(batch=16, heads=8, seq_q=8192, seq_k=8192), a100),
        ("fa2", Problem(batch=1, heads=16, seq_q=1 << 18, seq_k=1 << 18), h100),
    ]:
        impl = "-" in what
        plan = build_plan(p, hw, None if impl else what, what if impl else None)
        work = from_plan_fast(plan)
        slots = [kernel_slots(hw, k) for k in work.kernels]
        _, _, ops, keys, nbytes = unbroken_stream(work.kernels, slots)
        budget = NUMPY_STEPS_PER_ACCESS * len(ops) + 1_000_000  # as l2.fast gives it
        bulk, t_bulk = timed(lambda a=(ops, keys, nbytes, hw.l2_bytes, budget): bulk_hits(*a))
        pairs = np.stack([keys, 0 * keys], axis=1)
        replay, t_replay = timed(
            lambda a=(ops, pairs, nbytes), cap=hw.l2_bytes: LRU(cap, 1).replay(*a)
        )
        same = "-" if bulk is None else ("yes" if np.array_equal(bulk, replay) else "NO")
        rows.append(
            [
                label(what, p, hw),
                f"{len(ops):,}",
                f"{int(replay.sum()):,}",
                "over budget" if bulk is None else f"{t_bulk:.2f} s",
                f"{t_replay:.2f} s",
                "-" if bulk is None else f"{t_replay / t_bulk:.1f}x",
                same,
            ]
        )
    print("bulk L2 test vs the exact LRU replay, streams that cycle through more than L2 holds")
    print(
        table(
            ["case", "accesses decided", "hits", "bulk test", "LRU replay", "speed-up", "same"],
            rows,
        )
    )


def spread(n: int, k: int = 64) -> np.ndarray:
    """k CTA indices evenly over 0..n-1 (the first and the last among them)."""
    return np.unique(np.linspace(0, n - 1, min(n, k)).astype(np.int64))


def sampled_loops() -> None:
    from hbmsim.engine.workload import recorder

    a100, h100 = get_hardware("a100-40gb"), get_hardware("h100-sxm")
    rows = []
    for what, p, hw in [
        ("flash-attn-1@0.1", Problem(batch=16, heads=8, seq_q=16384, seq_k=16384), a100),
        ("fa2", Problem(batch=1, heads=16, seq_q=1 << 20, seq_k=1 << 20), h100),
        ("fa2", Problem(batch=1, heads=16, seq_q=16384, seq_k=16384, causal=True), h100),
        ("flash-attn-1", Problem(batch=16, heads=8, seq_q=8192, seq_k=8192), a100),
    ]:
        impl = "-" in what
        plan = build_plan(p, hw, None if impl else what, what if impl else None)
        sampled, t_sampled = timed(lambda plan=plan: from_plan_fast(plan))
        saved = recorder.SAMPLED_LOOP_MIN
        recorder.SAMPLED_LOOP_MIN = 1 << 62  # every iteration of every loop traced
        try:
            every, t_every = timed(lambda plan=plan: from_plan_fast(plan))
        finally:
            recorder.SAMPLED_LOOP_MIN = saved
        same = same_workload(sampled, every, spread)  # the keys of 64 CTAs spread over each
        ops = sum(int(len(t)) for k in sampled.kernels for t in k.templates)
        rows.append(side_by_side(label(what, p, hw), ops, t_every, t_sampled, same))
    print("fast workload builder: long loops traced at four iterations vs every iteration")
    print(
        table(
            ["case", "template ops", "every iteration", "four, laid out", "speed-up", "same"],
            rows,
        )
    )


def stretched_vs_replay() -> None:
    """Long causal forwards (at least 32 row blocks over at least 4 waves): the step-by-step
    replay next to the stretched timelines `simulate` now uses for them (the kernels
    limits.engine_choice picks), on the same workload (the same bytes, checked; the time's
    relative difference printed)."""
    from hbmsim.engine.limits import engine_choice
    from hbmsim.engine.simulation import simulate_workload

    h100, a100 = get_hardware("h100-sxm"), get_hardware("a100-80gb")
    rows = []
    for what, p, hw, impl in [
        ("fa2", Problem(batch=1, heads=16, seq_q=16384, seq_k=16384, causal=True), h100, False),
        ("fa2", Problem(batch=2, heads=32, seq_q=8192, seq_k=8192, causal=True), h100, False),
        (
            "flash-attn-2",
            Problem(batch=1, heads=32, seq_q=16384, seq_k=16384, causal=True),
            a100,
            True,
        ),
        (
            "flash-attn-2",
            Problem(batch=2, heads=16, seq_q=8192, seq_k=8192, head_dim=128, causal=True),
            a100,
            True,
        ),
        (
            "flash-attn-2",
            Problem(batch=4, heads=32, seq_q=4096, seq_k=4096, head_dim=128, causal=True),
            h100,
            True,
        ),
        (
            "fa2",
            Problem(batch=8, heads=16, seq_q=2048, seq_k=2048, head_dim=128, causal=True),
            h100,
            False,
        ),
    ]:
        plan = build_plan(p, hw, None if impl else what, what if impl else None)
        may, _ = engine_choice(plan, count_plan(plan))
        assert may, "simulate would not stretch this kernel"
        replay, t_replay = timed(
            lambda plan=plan, hw=hw: simulate_workload(from_plan_fast(plan), hw)
        )
        stretched, t_stretched = timed(
            lambda plan=plan, hw=hw, may=may: simulate_workload(
                from_plan_fast(plan), hw, check=lambda _: may
            )
        )
        same = same_bytes(replay, stretched)
        row = side_by_side(
            label(what, p, hw), len(plan.kernels[0].grid), t_replay, t_stretched, same
        )
        rows.append(row + [f"{stretched.time_s / replay.time_s - 1:+.2%}"])
    print("long causal forwards: the step-by-step replay vs stretched timelines")
    print(
        table(
            ["case", "row blocks", "replay", "stretched", "speed-up", "same bytes", "time diff"],
            rows,
        )
    )


def shared_rounds() -> None:
    """Cohorts sharing the GPU (over one wave and several): the fast path with the rounds the
    whole GPU repeats skipped (rounds.Rounds, every kernel) next to the same path
    looking for none (how kernels of several waves ran before): same bytes, time to
    rounding."""
    from hbmsim.engine import rounds

    a100, h100 = get_hardware("a100-40gb"), get_hardware("h100-sxm")
    rows = []
    for what, p, hw in [
        ("flash-attn-1", Problem(batch=16, heads=8, seq_q=8192, seq_k=8192), a100),
        ("flash-attn-1", Problem(batch=4, heads=16, seq_q=16384, seq_k=16384), h100),
        (
            "flash-attn-1",
            Problem(batch=4, heads=32, seq_q=4096, seq_k=4096, causal=True, pass_="fwd+bwd"),
            get_hardware("a100-80gb"),
        ),
    ]:
        plan = build_plan(p, hw, None, what)
        skipped, t_skipped = timed(lambda plan=plan: run_engine(plan))
        real = rounds.Rounds.boundary
        rounds.Rounds.boundary = lambda self, group: None  # look for no round
        try:
            walked, t_walked = timed(lambda plan=plan: run_engine(plan))
        finally:
            rounds.Rounds.boundary = real
        same = same_bytes(skipped, walked)
        waves = max(k.waves for k in skipped.kernels)
        row = side_by_side(label(what, p, hw), waves, t_walked, t_skipped, same)
        rows.append(row + [f"{abs(skipped.time_s / walked.time_s - 1):.1e}"])
    print("cohorts sharing the GPU: every round walked vs the repeated rounds skipped")
    print(
        table(
            ["case", "most waves", "walked", "skipped", "speed-up", "same bytes", "rel. diff"],
            rows,
        )
    )


def asked_groups(what: str, p: Problem, hw) -> list:
    """Per stretched kernel of a `simulate` call: AloneRuns' arguments and the groups (template,
    CTAs, hit counts) the engine asked it for."""
    from hbmsim.engine import simulation as engine

    kernels = []
    real = engine.AloneRuns

    class Asked(real):
        def __init__(self, *args):
            super().__init__(*args)
            self.asked = {}
            kernels.append((args, self.asked))

        def get(self, t_id, m, counts):
            self.asked.setdefault((t_id, m, counts.tobytes()), counts.copy())
            return super().get(t_id, m, counts)

    impl = "-" in what
    engine.AloneRuns = Asked
    try:
        simulate(p, hw, None if impl else what, impl=what if impl else None)
    finally:
        engine.AloneRuns = real
    return kernels


def alone_runs(kernels: list, shorten: bool) -> tuple[list, int]:
    """Every asked group timed by a fresh AloneRuns: the results, and how many a short copy
    timed."""
    from hbmsim.engine.launch import PreparedTemplates
    from hbmsim.engine.stretch import AloneRuns

    out, shortened = [], 0
    for (hw, cap, k, _templates, kw, prep), asked in kernels:
        runs = AloneRuns(hw, cap, k, PreparedTemplates(kw.templates, prep), kw, prep, shorten)
        out += [runs.get(t_id, m, c) for (t_id, m, _), c in asked.items()]
        shortened += runs.shortened
    return out, shortened


def same_phase_bytes(a: tuple, b: tuple) -> bool:
    """Two alone runs' phases (stretch.phases) move the same L2-path and DRAM bytes in
    all, to float rounding (each phase's bytes are differences of the links' served totals)."""
    return all(
        math.isclose(sum(p[i] for p in a), sum(p[i] for p in b), rel_tol=1e-9) for i in (1, 2)
    )


def short_copies() -> None:
    h100 = get_hardware("h100-sxm")
    rows = []
    for what, p in [
        ("fa2", Problem(batch=1, heads=16, seq_q=16384, seq_k=16384, causal=True)),
        ("fa2", Problem(batch=1, heads=16, seq_q=65536, seq_k=65536, causal=True)),
        ("flash-attn-2", Problem(batch=1, heads=32, seq_q=16384, seq_k=16384, causal=True)),
    ]:
        kernels = asked_groups(what, p, h100)
        (a, _), t_whole = timed(lambda k=kernels: alone_runs(k, False))
        (b, shortened), t_short = timed(lambda k=kernels: alone_runs(k, True))
        worst = max(abs(x[0] - y[0]) / x[0] for x, y in zip(a, b, strict=True))
        same = all(x[1] == y[1] and same_phase_bytes(x[2], y[2]) for x, y in zip(a, b, strict=True))
        rows.append(
            [
                label(what, p, h100),
                f"{len(a):,}",
                f"{shortened:,}",
                f"{t_whole:.2f} s",
                f"{t_short:.2f} s",
                f"{t_whole / t_short:.1f}x",
                f"{worst:.1e}",
                "yes" if same else "NO",
            ]
        )
    print("stretched kernels' alone runs: whole templates vs short copies of their loops")
    print(
        table(
            [
                "case",
                "groups",
                "from a short copy",
                "whole templates",
                "short copies",
                "speed-up",
                "largest time difference",
                "same bytes",
            ],
            rows,
        )
    )


def main() -> None:
    exact_vs_fast()
    print()
    shared_rounds()
    print()
    stretched_vs_replay()
    print()
    at_scale()
    print()
    gqa_builder()
    print()
    cycling_streams()
    print()
    causal_builder()
    print()
    sampled_loops()
    print()
    short_copies()


if __name__ == "__main__":
    main()
