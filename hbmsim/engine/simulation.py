"""The SimPy model: replays a workload's CTAs on SMs, L2 and shared HBM bandwidth.

The engine knows loads, stores and compute on tiles, nothing about attention: a new algorithm
is a new tile program, never an engine change.

Model (every parameter comes from `Hardware`, see hardware.py for values and sources):

- Kernels run one after another (one stream). Each costs `launch_overhead_s`, then its CTAs
  take slots: `ctas_per_sm = min(sram_bytes_per_sm // (footprint + reserve), max_ctas_per_sm,
  max_threads_per_sm // threads_per_cta)` on each of `sm_count` SMs (the reserve is what the
  system keeps per resident CTA, `sram_bytes_per_sm - sram_bytes_per_block`: 1 KiB on NVIDIA
  parts), and, for a kernel whose register count is known (`Kernel.registers_per_thread`),
  what `registers_per_sm` allows. A CTA starts when a slot is free (so long kernels run in
  waves) and keeps it until its last op completes.
- A transfer costs the level's latency, then its bytes at the rate it gets: concurrent
  transfers share each path's bandwidth equally, and one transfer never exceeds its SM's port,
  `sm_bytes_per_s`, split among the kernel's CTAs per SM. Every load and store crosses the
  SM-to-L2 path (`l2_bytes_per_s`), hits and misses alike; loads that miss L2 (see l2.py) and
  stores also cross DRAM (`hbm_bytes_per_s`), so a mix of hits and misses gets no more than
  the L2 path gives. An atomic add is resolved in L2: a hit adds in place, a miss reads the
  tile from DRAM and it is written back once.
- Compute costs matmul flops over the per-SM matrix rate for the dtype, plus vector flops over
  the per-SM vector rate, plus exponentials over the per-SM SFU rate; co-resident CTAs split
  their SM's rates evenly (the kernel's CTAs per SM, or fewer if the grid is small). The
  matrix rate is the kernel's (`Hardware.kernel_matmul_rate`): tensor cores at the peak or,
  for warp-level MMA, at `warp_mma_flops_per_s`; scalar kernels at the FMA units' rate or the
  schedulers' issue rate over the instructions their loop issues per FMA, whichever binds;
  and a kernel that keeps operands in shared memory adds the bytes it moves per flop at the
  SM's shared-memory bandwidth (counted by each mirror from its kernel's source). A
  warp-specialised kernel (`overlap_warpgroups`: consumer warpgroups with asynchronous
  warpgroup MMA) overlaps a step's pipes as far as the GPU allows (pipes.py) instead of
  adding them. A load of a tensor a thread-block cluster receives by multicast is charged to
  each of the cluster's CTAs at 1/cluster of its bytes.
- Overlap: a kernel with `stages = s` may issue a load up to s - 1 compute steps ahead of
  where its program puts it (double buffering when s = 2), ahead of any store in between (a
  prefetch the kernel issues before this step's work); a compute waits for every load and
  atomic add before it in program order; stores and atomic adds wait for the compute that
  produced them. Stores are posted: nothing waits for them but the end of their CTA (an SM
  sends a store and goes on). An atomic add is posted by the SM too (`RED`), but L2 serves
  atomics at a rate no datasheet gives and no calibration has measured yet; until one does,
  the atomic's own round trip, charged to the CTA that sends it, stands in for that limit
  (posted and free, flash-attn 2's forward + backward came out 25% too fast on the H200).

Speed without dropping fidelity: CTAs that start together, come from the same template and
see the same L2 hits behave identically in this model, so the fast path simulates each such
group once with a multiplicity (its transfers count that many times in the bandwidth share and
the byte totals). A group that starts on an idle GPU and is alone until it ends (a wave of one
template) depends on nothing but its (template, size, hits): the first of them is simulated,
the rest replay its duration and bytes. Inside such a group, a loop's round of steps (a step:
the transfers one compute releases, to the end of the next compute) that leaves what is in
flight as it found it, shifted in time (the same transfers with the same latency and bytes
left, to engine_group.STATE_REL), is repeated by its identical successors in the same time:
they are timed at once, and the group goes on with its transfers in flight renumbered (a
loop over K/V tiles costs a few rounds, not thousands; the result moves by float rounding
only). Groups that share the GPU skip the rounds the whole GPU repeats the same way,
together, in any kernel: nothing starts or ends inside those rounds, so everything after
them runs that much later (engine_group.Rounds); a kernel stretched (engine_stretch.py)
times each group alone, a long loop from a short copy of it (engine_loops.py). L2 hits of
long kernels come from their first and last waves (l2fast.py, exact), and where no wave can
be skipped, a one-class kernel's from the first access of each run of one tile (l2runs.py,
exact), from one CTA's stream where a wave's CTAs work on tiles of their own
(l2lockstep.py, exact), or from one CTA a run where classes translate alike in runs no wave
cuts (l2classwave.py, exact). The
exact path (`exact=True`) simulates every CTA on its own, from a full trace; tests check
both agree.

Host: for a plan a framework issues from Python (`Plan.host_issued`: the implementation
mirrors), every kernel launch and every framework op it declares (`Plan.framework_ops`) costs
`host_op_s` on the host, which issues ahead of the GPU; a call takes the longer of the GPU's
time and the host's (the steady state of a timed loop), and the result says which bound. A
call timed by itself, starting on an idle GPU that waits for its launches, is the result's
`synchronized_call_s` (hostcall.py).

What it ignores: warp scheduling inside an SM (every issue slot is taken to be used: Nsight
Compute on an H200 saw 49-71% busy for the scalar flash kernel with 1-3 warps per scheduler),
bank conflicts except those a mirror counts, DRAM page effects, power and clock throttling, L2
write-back timing (a store's DRAM write is charged at the store).
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

# The fast path's memory is the accesses whose L2 hits it decides one by one (see l2fast.py:
# a long kernel's skipped waves cost nothing): a plan needing more than this is refused with
# the estimate, never cut. Deciding them takes ~0.3 µs each in bulk, and up to ~10 µs where
# the bulk test cannot decide and the LRU is replayed (the 41.7 M accesses of flash-attn-1's
# one wave at seq 16k took 400 s and 9.4 GB that way, before l2lockstep.py decided them from
# one CTA), so the budget also bounds the time.
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
        self.stretched: frozenset[int] = frozenset()  # kernels run as engine_stretch.py says

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
        alone_s = gpu_s  # one call timed by itself (hostcall.py)
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
    progress: Callable[[float], None] | None = None,
    check: Callable[[dict[int, int]], frozenset[int] | None] | None = None,
) -> EngineResult:
    """Replay a workload (from a plan or a trace file) on `hw`. `check` is given, once the L2
    hits are known, how many waves of each one-template kernel will be simulated; it may refuse
    the run by raising, and returns the kernels to time stretched (engine_stretch.py)."""
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
    its whole count). `max_steps`: the fast path's work bound (bounds.py), checked again once
    the L2 hits tell how many waves of a one-class kernel differ, and with it the kernels
    engine_stretch.py may time are stretched (bounds.engine_choice), but for a timeline, which
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
