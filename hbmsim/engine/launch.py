"""How one kernel runs: its CTAs take slots as they free up and run as groups.

The fast path launches each cohort (CTAs launched together with one template) as one group
with its size as multiplicity, replays the waves it has seen run alone, and skips the rounds
the GPU repeats (rounds.py); the exact path runs every CTA as its own group in lockstep with
its cohort; a stretched kernel times each group alone and stretches those timelines while the
links are oversubscribed (stretch.py). docs/engine-model.md states the model.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import simpy

from ..gpu.hardware import Hardware
from ..gpu.occupancy import occupancy, warps_per_scheduler
from ..gpu.pipes import overlapped
from .groups import Cohort, Group
from .l2.table import HitTable
from .result import KernelTiming
from .rounds import Rounds
from .stretch import AloneRuns, Stretched, in_phase_ctas
from .template import Template, prepare
from .workload.arrays import distinct
from .workload.work import KernelWork


@dataclass
class KernelRun:
    """One kernel's state while it runs: its slots, the next CTA to start, the byte counters,
    and the durations of groups that ran alone (the fast path's memo)."""

    k: int
    kw: KernelWork
    hits: HitTable | None
    slots: int
    freed: simpy.Event  # triggered when a group gives its slots back
    next: int = 0  # the next CTA to start, in launch order
    templates: PreparedTemplates | None = None  # its templates, prepared on demand
    starts: np.ndarray | None = None  # the exact path: each CTA's first access
    free_slots: list[int] = field(default_factory=list)
    counters: list[int] = field(default_factory=lambda: [0, 0, 0])  # DRAM read, L2 hit, write
    memo: dict[tuple, tuple[float, list[int]]] = field(default_factory=dict)

    def take(self, count: int) -> list[int]:
        taken, self.free_slots[:] = self.free_slots[:count], self.free_slots[count:]
        return taken

    def release(self, taken: list[int]):
        """A callback giving the slots back when the group's process ends."""

        def finished(_e):
            self.free_slots.extend(taken)
            if not self.freed.triggered:
                self.freed.succeed()

        return finished


def kernel_setup(
    hw: Hardware, kw: KernelWork, dtype: str
) -> tuple[int, float, Callable[[np.ndarray], Template]]:
    """What a kernel's groups run with: its CTAs per SM, each transfer's cap (the SM's port
    split among its co-resident CTAs) and how its templates are prepared (the SM's rates split
    alike, its pipeline's stages, overlaps and multicast)."""
    occ = occupancy(hw, kw.sram_bytes, kw.threads_per_cta, kw.name, kw.registers_per_thread)
    share = max(1, min(occ, math.ceil(kw.n_ctas / hw.sm_count)))
    # the warps each scheduler holds while `share` CTAs run on an SM (gpu/issue.py: with
    # few, a scheduler idles on its warps' stalls)
    warps = warps_per_scheduler(hw, kw.n_ctas, kw.threads_per_cta, occ)
    per_sm = (
        hw.per_sm(hw.kernel_matmul_rate(dtype, kw, warps)),
        hw.per_sm(hw.vector_rate(dtype)),
        hw.per_sm(hw.exp_ops_per_s),
    )
    overlaps = overlapped(kw.overlap_warpgroups, hw.async_mma_overlaps)
    shared = (kw.multicast_ids, kw.cluster)

    def prepared(rows: np.ndarray) -> Template:
        return prepare(
            rows,
            kw.stages,
            per_sm,
            share,
            overlaps,
            shared,
            kw.overlap_warpgroups,
            kw.posted_atomics,
        )

    return occ, hw.sm_bytes_per_s / share, prepared


class PreparedTemplates:
    """A kernel's templates prepared for timing (template.prepare) when first asked for: a
    stretched kernel times most of its templates from short copies (loops.py) and
    never needs them prepared."""

    def __init__(self, rows: list[np.ndarray], prepare_rows: Callable[[np.ndarray], Template]):
        self.rows, self.prepare_rows = rows, prepare_rows
        self.done: dict[int, Template] = {}

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, t_id: int) -> Template:
        found = self.done.get(t_id)
        if found is None:
            found = self.done[t_id] = self.prepare_rows(self.rows[t_id])
        return found


class KernelLaunches:
    """The simulation's side that runs one kernel (`_kernel`): mixed into the simulation,
    whose environment, links, hardware, L2 hit tables and options it reads."""

    def _kernel(self, k: int, kw: KernelWork, hits: HitTable | None):
        """One kernel: CTAs take slots as they free up (waves), grouped into cohorts."""
        hw, env = self.hw, self.env
        start = env.now
        occ, cap, prepared = kernel_setup(hw, kw, self.dtype)
        run = KernelRun(k, kw, hits, hw.sm_count * occ, env.event())
        self.links.dram.cap = cap
        self.links.l2.cap = cap
        run.templates = PreparedTemplates(kw.templates, prepared)
        if self.exact:
            run.starts = np.searchsorted(kw.acc_cta, np.arange(kw.n_ctas + 1))
        run.free_slots = list(range(run.slots))  # slot s sits on SM s % sm_count
        yield env.timeout(hw.launch_overhead_s)
        if k in self.stretched:
            yield from self._run_stretched(run, cap)
        else:
            yield from self._run_groups(run)
        n = kw.n_ctas
        self.timings.append(
            KernelTiming(
                name=kw.name,
                start_s=start,
                end_s=env.now,
                ctas=n,
                ctas_per_sm=occ,
                waves=math.ceil(n / run.slots),
                dram_read_bytes=run.counters[0],
                dram_write_bytes=run.counters[2],
                l2_hit_bytes=run.counters[1],
                stretched=k in self.stretched,
            )
        )

    def _run_groups(self, run: KernelRun):
        """CTAs take slots as they free up, launched together as cohorts, one group per
        template (the exact path: each CTA its own process in lockstep with its cohort)."""
        env, kw, k, n = self.env, run.kw, run.k, run.kw.n_ctas
        rounds = None  # groups sharing the GPU: their rounds skipped together (Rounds)
        while run.next < n or len(run.free_slots) < run.slots:
            room = min(len(run.free_slots), n - run.next)
            if room:
                idle = len(run.free_slots) == run.slots
                run.free_slots.sort()
                groups = self._groups(kw, run.next, room)
                alone = idle and len(groups) == 1
                if alone and not self.exact and not self.timeline_on:
                    replayed = self._replay_waves(run)
                    if replayed is not None:
                        yield env.timeout(replayed)
                        continue
                if not alone and rounds is None and not self.timeline_on and not self.exact:
                    rounds = Rounds(env)
                run.next += room
                for t_id, members in groups:
                    if self.exact:
                        self._launch_each(run, t_id, members)
                    else:
                        self._launch_group(run, t_id, members, alone, None if alone else rounds)
            yield run.freed
            run.freed = env.event()
            if self.progress:
                self.progress((k + run.next / max(n, 1)) / len(self.workload.kernels), _doing(run))
        if rounds is not None and rounds.skipped_s:
            yield env.timeout(rounds.skipped_s)

    def _replay_waves(self, run: KernelRun) -> float | None:
        """On an idle GPU, the waves from `run.next` on that run alone (one group each) and
        were seen before (the memo of `_launch_group`): their bytes counted and their times
        summed, for one timeout instead of one a wave (the standard algorithm's kernels run
        thousands of waves, each a SimPy round trip: 7,070 waves in the FlashAttention
        paper's configuration). Each would start when the one before ends, on an idle GPU,
        so the kernel goes on that much later: None where the next wave is not such a one."""
        kw, n, total, replayed = run.kw, run.kw.n_ctas, 0.0, 0
        while run.next < n:
            room = min(run.slots, n - run.next)
            groups = self._groups(kw, run.next, room)
            if len(groups) != 1:
                break
            t_id, members = groups[0]
            at = (run.k, int(members[0]), len(members))
            counts = self.wave_counts.get(at)
            if counts is None:
                counts = self._hit_counts(run.hits, members, kw.template_transfers(t_id))
                self.wave_counts[at] = counts
            found = run.memo.get((t_id, len(members), counts.tobytes()))
            if found is None:
                break
            seconds, delta = found
            del self.wave_counts[at]
            for i, d in enumerate(delta):
                run.counters[i] += d
            total += seconds
            run.next += room
            replayed += 1
        if self.progress and replayed:
            self.progress((run.k + run.next / max(n, 1)) / len(self.workload.kernels), _doing(run))
        return total if replayed else None

    def _run_stretched(self, run: KernelRun, cap: float):
        """A kernel the step-by-step replay cannot afford, its groups launched as `_kernel`
        launches them, each at its alone timeline stretched while the links are
        oversubscribed (stretch.py)."""
        kw, n = run.kw, run.kw.n_ctas
        in_phase = in_phase_ctas(kw, run.slots)
        alone = AloneRuns(
            self.hw, cap, run.k, run.templates, kw, run.templates.prepare_rows, in_phase=in_phase
        )
        gpu = Stretched(self.hw, self.env.now)
        free = run.slots
        while run.next < n or gpu.running:
            if room := min(free, n - run.next):
                for t_id, members in self._groups(kw, run.next, room):
                    counts = self._hit_counts(run.hits, members, kw.template_transfers(t_id))
                    _seconds, delta, phases = alone.get(t_id, len(members), counts)
                    for i, d in enumerate(delta):
                        run.counters[i] += d
                    gpu.launch(phases, len(members))
                run.next += room
                free -= room
                if self.progress:
                    self.progress(
                        (run.k + run.next / n) / len(self.workload.kernels), _doing(run, True)
                    )
            free += gpu.next_end()
        yield self.env.timeout(gpu.now - self.env.now)

    def _launch_each(self, run: KernelRun, t_id: int, members: np.ndarray) -> None:
        """The exact path: every CTA its own process, in lockstep with its cohort."""
        kw, tmpl = run.kw, run.templates[t_id]
        cohort = Cohort(self.env, len(tmpl.tr_bytes), len(members))
        own = self._hit_rows(run.hits, members, len(tmpl.tr_bytes))
        for i, cta in enumerate(members):
            row = np.arange(run.starts[cta], run.starts[cta + 1])
            taken = run.take(1)
            group = Group(
                self.links,
                run.k,
                tmpl,
                kw.templates[t_id],
                own[i].astype(np.int64),
                1,
                int(cta),
                taken[0] % self.hw.sm_count,
                run.counters,
                cohort,
                None if kw.acc_start is None else (kw.acc_start[row], kw.acc_stop[row]),
            )
            proc = self.env.process(group.run(alone=False))
            proc.callbacks.append(run.release(taken))

    def _launch_group(
        self,
        run: KernelRun,
        t_id: int,
        members: np.ndarray,
        alone: bool,
        rounds: Rounds | None = None,
    ):
        """The fast path: the cohort simulated once with its size as multiplicity. A group that
        starts on an idle GPU and is alone until it ends (`alone`) runs the same way whenever
        its (template, size, hits) recur: its duration and bytes are kept, and `_replay_waves`
        replays them (it comes here only for a wave not seen before)."""
        env, tmpl = self.env, run.templates[t_id]
        m = len(members)
        taken = run.take(m)
        counts = self.wave_counts.pop((run.k, int(members[0]), m), None)
        if counts is None:
            counts = self._hit_counts(run.hits, members, run.kw.template_transfers(t_id))
        key = (t_id, m, counts.tobytes()) if alone and not self.timeline_on else None
        group = Group(
            self.links,
            run.k,
            tmpl,
            run.kw.templates[t_id],
            counts,
            m,
            int(members[0]),
            taken[0] % self.hw.sm_count,
            run.counters,
            None,
            None,
        )
        proc = env.process(group.run(alone=alone and not self.timeline_on, rounds=rounds))
        if key is not None:
            began, before = env.now, list(run.counters)

            def keep(_e):
                delta = [a - b for a, b in zip(run.counters, before, strict=True)]
                run.memo[key] = (env.now - began, delta)

            proc.callbacks.append(keep)
        proc.callbacks.append(run.release(taken))

    @staticmethod
    def _hit_counts(hits: HitTable | None, members: np.ndarray, n: int) -> np.ndarray:
        if hits is None:
            return np.zeros(n, dtype=np.int64)
        return hits.counts(members)

    @staticmethod
    def _hit_rows(hits: HitTable | None, members: np.ndarray, n: int) -> np.ndarray:
        if hits is None:
            return np.zeros((len(members), n), dtype=bool)
        return hits.rows(members)

    @staticmethod
    def _groups(kw: KernelWork, first: int, room: int):
        """CTAs launched together, split by template: (template, members) cohorts."""
        batch = np.arange(first, first + room)
        if len(kw.templates) == 1:
            return [(0, batch)]
        if room == 1:  # a stretched kernel's launches, mostly
            return [(int(kw.cta_template[first]), batch)]
        tids = kw.cta_template[first : first + room]
        if tids[0] == tids[-1] and (tids == tids[0]).all():
            return [(int(tids[0]), batch)]
        return [(int(t), batch[tids == t]) for t in distinct(tids)]


def _doing(run: KernelRun, stretched: bool = False) -> str:
    """What a progress line says while this kernel runs."""
    how = "stretched" if stretched else "replayed"
    return f"{run.kw.name} ({how}): {run.next:,} of {run.kw.n_ctas:,} CTAs launched"
