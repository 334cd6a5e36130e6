"""The SimPy model: replays a workload's CTAs on SMs, L2 and shared HBM bandwidth.

The engine knows loads, stores and compute on tiles, nothing about attention: a new algorithm
is a new tile program, never an engine change. Every parameter comes from `Hardware`.

Kernels run one after another; each costs its launch overhead, then its CTAs take the slots
occupancy allows and keep them until their last op (waves). A transfer costs its level's
latency, then its bytes at the rate it gets on links shared by every transfer in flight (L2
path, DRAM); the L2 model (l2/) decides which loads hit. Compute costs flops over the SM's
rates, split among co-resident CTAs. A kernel's pipeline stages let loads run ahead of the
compute that needs them; stores are posted. docs/engine-model.md states the model whole, and
what it ignores; docs/engine-internals.md the fast paths, which simulate CTAs that behave
alike once (launch.py, rounds.py, stretch.py, loops.py) and agree with the exact per-CTA
replay (`exact=True`) where both run.

The host side of a call a framework issues (`Plan.host_issued`, the library mirrors) is
timed too: a call in a timed loop takes the longer of the GPU's time and the host's, and a
call timed by itself is `synchronized_call_s` (host.py).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import simpy

from ..errors import TooLargeToExecuteError
from ..gpu.hardware import Hardware
from ..gpu.occupancy import kernel_slots, occupancy
from ..interpret.counts import count_plan
from .host import ops_before_kernels, synchronized_call_s
from .l2.budget import check_decided, least_decided
from .l2.fast import hit_tables
from .launch import KernelLaunches
from .limits import engine_choice
from .links import Links
from .result import LEVELS, TIMELINE_DTYPE, EngineResult, KernelTiming
from .workload.classkeys import from_plan_fast
from .workload.work import Workload, from_plan_exact

# The fast path's memory is the accesses whose L2 hits it decides one by one (l2/fast.py: a
# long kernel's skipped waves cost nothing): a plan needing more than this is refused with
# the estimate, never cut. Deciding an access costs time too, so the budget also bounds the
# time (docs/benchmarks.md, "The engine's bounds").
ENGINE_MAX_BYTES = 6 << 30
MAX_EXACT_ACCESSES = 2_000_000  # the full per-op replay is the slow reference


class _Sim(KernelLaunches):
    def __init__(
        self,
        hw: Hardware,
        workload: Workload,
        l2: bool,
        exact: bool,
        timeline: bool,
        max_timeline: int,
        progress: Callable[[float], None] | None,
        check: Callable[[dict[int, int]], frozenset[int] | None] | None = None,
    ):
        self.hw = hw
        self.workload = workload
        self.check = check
        self.wave_counts: dict[tuple[int, int, int], np.ndarray] = {}
        self.l2 = l2
        self.exact = exact
        self.env = simpy.Environment()
        self.links = Links(self.env, hw, timeline, max_timeline)
        self.timeline_on = timeline
        self.dtype = workload.meta["problem"]["dtype"]
        self.progress = progress
        self.timings: list[KernelTiming] = []
        self.stretched: frozenset[int] = frozenset()  # kernels run as stretch.py says

    # -- a kernel -----------------------------------------------------------------------------

    @classmethod
    def _each_wave_counts(cls, hits, n_ctas: int, slots: int, n_tr: int):
        """(first CTA, CTAs, hit counts) of every wave of a one-template kernel: from the
        table all at once where it can (HitTable.wave_counts), else wave by wave."""
        if hasattr(hits, "wave_counts"):
            yield from hits.wave_counts(slots)
            return
        for first in range(0, n_ctas, slots):
            m = min(slots, n_ctas - first)
            yield first, m, cls._hit_counts(hits, np.arange(first, first + m), n_tr)

    def _wave_patterns(self, kernels, slots, hits) -> dict[int, int]:
        """Per kernel of one template, how many of its waves the fast path simulates: each
        starts on an idle GPU and runs alone, so a wave whose (size, hits) came before is
        replayed. Each wave's hit counts are kept for its launch."""
        patterns = {}
        for k, (kw, s) in enumerate(zip(kernels, slots, strict=True)):
            if len(kw.templates) != 1:
                continue
            n_tr = int(kw.transfers(np.arange(1))[0])
            seen = set()
            for first, m, counts in self._each_wave_counts(hits[k], kw.n_ctas, s, n_tr):
                self.wave_counts[(k, first, m)] = counts
                seen.add((m, counts.tobytes()))
            # a timeline records every wave's own ops: nothing is replayed
            patterns[k] = -(-kw.n_ctas // s) if self.timeline_on else len(seen)
        return patterns

    def run(self) -> EngineResult:
        hw, kernels = self.hw, self.workload.kernels
        slots = [kernel_slots(hw, kw) for kw in kernels]
        if self.progress and self.l2:
            self.progress(0.0, "deciding L2 hits")
        hits = (
            hit_tables(kernels, slots, hw.l2_bytes, ENGINE_MAX_BYTES)
            if self.l2
            else [None] * len(kernels)
        )
        if self.check is not None and not self.exact:
            self.stretched = self.check(self._wave_patterns(kernels, slots, hits)) or frozenset()

        def all_kernels():
            for k, kw in enumerate(kernels):
                yield from self._kernel(k, kw, hits[k])

        self.env.process(all_kernels())
        self.env.run()
        gpu_s = self.env.now
        # The host issues every kernel launch and framework op ahead of the GPU; in the steady
        # state of a timed loop a call takes the longer of the two (host-bound when the
        # kernels are shorter than the ops that launch them).
        meta = self.workload.meta
        host_ops = len(kernels) + int(meta.get("framework_ops", 0) or 0)
        host_s = host_ops * hw.host_op_s if meta.get("host_issued") else 0.0
        alone_s = gpu_s  # one call timed by itself (host.py)
        if meta.get("host_issued"):
            before, after = ops_before_kernels(meta)
            durations = [t.end_s - t.start_s for t in self.timings]
            alone_s = synchronized_call_s(durations, before, after, hw.host_op_s)
        timeline = None
        if self.timeline_on:
            timeline = (
                np.array([tuple(r) for r in self.links.rows], dtype=TIMELINE_DTYPE)
                if self.links.rows
                else np.zeros(0, TIMELINE_DTYPE)
            )
        return EngineResult(
            float(max(gpu_s, host_s)),
            tuple(self.timings),
            self.l2,
            self.exact,
            timeline,
            self.links.truncated,
            self.workload.meta,
            float(gpu_s),
            host_s,
            float(alone_s),
        )


def simulate_workload(
    workload: Workload,
    hw: Hardware,
    l2: bool = True,
    exact: bool = False,
    timeline: bool = False,
    max_timeline: int = 500_000,
    progress: Callable[[float, str], None] | None = None,
    check: Callable[[dict[int, int]], frozenset[int] | None] | None = None,
) -> EngineResult:
    """Replay a workload (from a plan or a trace file) on `hw`. `check` is given, once the L2
    hits are known, how many waves of each one-template kernel will be simulated; it may refuse
    the run by raising, and returns the kernels to time stretched (stretch.py). `progress` is
    told the fraction done and what is being done (a stage, or the kernel running)."""
    return _Sim(hw, workload, l2, exact, timeline, max_timeline, progress, check).run()


def run_engine(
    plan,
    l2: bool = True,
    exact: bool = False,
    timeline: bool = False,
    max_timeline: int = 500_000,
    progress=None,
    trips: int | None = None,
    max_steps: int | None = None,
    counts=None,
) -> EngineResult:
    """Time a plan. The fast path by default; `exact` replays every op of every CTA.
    `trips`: the plan's loads + stores when the caller has counted them already (`counts`:
    its whole count). `max_steps`: the fast path's work bound (limits.py), checked again once
    the L2 hits tell how many waves of a one-class kernel differ, and with it the kernels
    stretch.py may time are stretched (limits.engine_choice), but for a timeline, which
    needs every step; None: no bound, every step replayed."""
    if counts is None and (trips is None or (l2 and not exact) or max_steps is not None):
        counts = count_plan(plan)
    accesses = counts.trips if trips is None else trips
    if l2 and not exact:  # refused before the workload is built when it cannot fit
        check_decided(least_decided(plan, counts), ENGINE_MAX_BYTES)
    if exact and accesses > MAX_EXACT_ACCESSES:
        raise TooLargeToExecuteError(
            f"engine: this plan has {accesses:,} loads and stores; the exact replay replays at "
            f"most {MAX_EXACT_ACCESSES:,}. Counts work at any size; use a smaller problem to "
            "simulate time"
        )
    check = None
    if max_steps is not None and not exact:

        def check(patterns):
            stretched, too_long = engine_choice(plan, counts, max_steps, patterns, timeline)
            if too_long:
                raise TooLargeToExecuteError(too_long)
            return stretched

    # a template's regions only label timeline rows: without a timeline they are left out
    if progress:
        progress(0.0, "laying out each CTA's work")
    workload = from_plan_exact(plan) if exact else from_plan_fast(plan, regions=timeline)
    return simulate_workload(
        workload, plan.hardware, l2, exact, timeline, max_timeline, progress, check
    )


__all__ = [
    "EngineResult",
    "KernelTiming",
    "LEVELS",
    "TIMELINE_DTYPE",
    "occupancy",
    "run_engine",
    "simulate_workload",
]
