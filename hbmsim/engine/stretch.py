"""Stretched alone timelines: a many-wave kernel of several CTA classes the step-by-step replay
cannot afford, scheduled group by group.

Why: the fast path's cost is its groups' steps. A kernel of one class keeps its waves in step
(each starts on an idle GPU, so a wave seen before is replayed), and a one-wave kernel skips
the rounds the whole GPU repeats (rounds.Rounds). A kernel whose classes run loops of
different lengths, launched wave after wave, does neither: causal attention's row blocks end
one step apart, every end lets the next CTAs in at a new phase, and from then on no two steps
of the GPU are alike (fa2 causal at 64k tokens x 16 heads: about 16 M steps). Here
such a kernel is scheduled as the engine launches it (the same slots, the same groups in the
same order), but each group is simulated once on its own, on an otherwise idle GPU (the same
Group, links and caps, its loop's rounds skipped: a few steps; a long loop from a short copy
its family shares, loops.py), and that alone timeline is run on the GPU in its three
phases (`phases`): the prologue to its first compute (its first tiles' loads, nothing to
compute yet), the body, and the epilogue after its last compute (its last stores), each with
its own demand on the L2 path and on DRAM (the bytes it moves there over its alone time).
While the running phases ask a link for more than it has, it is shared the way the fluid
links share it, at the level of phases: every CTA gets the same share, a group whose phase
asks less per CTA gets what it asks, and the others run their phase slower in proportion
(`fair_speeds`, a weighted max-min fair allocation); a group runs at the lower of its two
links' speeds.

Bytes are exact (each group's, from the same hit tables). Time is exact where no link is
ever oversubscribed (every group then runs its alone timeline) and, where a link is
saturated throughout, what conservation gives. What it still averages away: the replay's
transfers bunch within a phase, so a link can idle for moments while its demand is over its
bandwidth, or saturate while it is under. That matters where few CTAs share the links (their
bunching does not average out) and in the kernel's drain after the last launch.

How far this departs from the step-by-step replay, kernel kind by kernel kind, and why phases
and fair shares rather than one common slow-down: docs/engine-internals.md, "Stretched
kernels". The departure is smallest where many groups share the GPU (a launch order that
interleaves its classes: the libraries' grids) and largest with few SMs and for kernels that
wait on atomic adds' round trips (contention lengthens their critical path transfer by
transfer).

A kernel whose CTAs wait on their atomic adds (a backward's dQ, added into an fp32
accumulator) is different: each add's round trip lies on its CTA's critical path, so what
matters is how many transfers share a link at the moment of the add, not the link's average
demand; and the replay keeps a cohort's CTAs in lockstep, its adds in one burst. Such a kernel's
groups are timed alone in phase with the GPU (`in_phase_ctas`): a group of m CTAs gets m / S of
each link's bandwidth, S the CTAs the GPU holds, as if every resident CTA's transfers came with
its own. The replay's later CTAs start a prologue out of step with the first wave's, so this
is slower than the replay, by the margin docs/engine-internals.md states.

Hence, within the replay's work bound, the engine stretches a kernel only with at least
MIN_WAVES waves of at least MIN_SLOTS CTAs (limits.py), never one that waits for an atomic
add's round trip, and with at least MIN_CLASSES classes MIN_WAVES_LONG waves are enough; of
those, the replay is used but for kernels of at least MIN_CLASSES classes or whose launch
order interleaves their classes (limits.engine_choice). Past the bound every kernel is
stretched (the alternative is no time at all). A timeline, which needs every step, is never
stretched. The result marks each stretched kernel.
"""

from __future__ import annotations

import math

import numpy as np
import simpy

from ..gpu.hardware import Hardware
from ..interpret.trace import OP_ATOMIC
from .groups import Group
from .links import Links
from .loops import ShortRun, moved, shortened
from .template import Template
from .workload.work import KernelWork, template_columns


class AloneRuns:
    """Each group's timeline on an otherwise idle GPU, kept by (template, CTAs, hits): its
    duration, its bytes as the counters count them, and what it moves on the L2 path and DRAM.

    A template with a long loop is run shortened where its hits allow (loops.py), once
    for every template sharing that short copy; `templates` are prepared on demand (a lazy
    sequence), so a template every group of which is timed from a short copy is never
    prepared. `prepare_rows` prepares a short copy's records as the kernel's templates are;
    `shorten=False` runs every group on its whole template (the benchmark's comparison).

    `in_phase`: the CTAs the GPU holds, when the kernel's CTAs wait on their atomic adds
    (`in_phase_ctas`); a group of m is then timed with m / in_phase of each link's bandwidth,
    its transfers in phase with every other resident CTA's (see the module docstring)."""

    def __init__(
        self,
        hw: Hardware,
        cap: float,
        k: int,
        templates,
        kw,
        prepare_rows,
        shorten: bool = True,
        in_phase: int | None = None,
    ):
        self.hw, self.cap, self.k = hw, cap, k
        self.in_phase = in_phase
        self.templates, self.rows = templates, kw.templates
        self.loops = getattr(kw.templates, "loops", None)
        self.multicast = (kw.multicast_ids, kw.cluster)
        self.prepare_rows, self.shorten = prepare_rows, shorten
        self.memo: dict[tuple, tuple[float, list[int], int, int]] = {}
        self.short: dict[tuple, ShortRun] = {}  # a short copy's run, by what it depends on
        self.shortened = 0  # groups timed from a short copy

    def get(self, t_id: int, m: int, counts: np.ndarray) -> tuple[float, list[int], tuple]:
        """(duration, counters, phases) of m CTAs of template t_id alone with these hits."""
        key = (t_id, m, counts.tobytes())
        found = self.memo.get(key)
        if found is None:
            found = self.memo[key] = self._from_short(t_id, m, counts) or self._run(t_id, m, counts)
        return found

    def _from_short(self, t_id: int, m: int, counts: np.ndarray):
        """The group timed from its template's short copy (loops.py), or None."""
        loops = self.loops(t_id) if self.shorten and self.loops else None
        short = shortened(loops, counts) if loops else None
        if short is None:
            return None
        keep, short_counts, left_out = short
        fkey = (m, self.rows.cut_key(t_id, keep), short_counts.tobytes())
        run = self.short.get(fkey)
        if run is None:
            short_rows = self.rows.cut(t_id, keep)
            tmpl = self.prepare_rows(short_rows)
            seconds, skips, _counters, marks = self._timeline(tmpl, short_rows, m, short_counts)
            run = self.short[fkey] = ShortRun(
                seconds, skips, short_rows, short_counts, m, self.multicast, loops, keep, marks
            )
        found = run.whole(left_out)
        self.shortened += found is not None
        if found is None:
            return None
        seconds, counters, l2_bytes, dram_bytes = found
        return seconds, counters, phases(seconds, run.marks, l2_bytes, dram_bytes)

    def _run(self, t_id: int, m: int, counts: np.ndarray):
        tmpl = self.templates[t_id]
        seconds, _skips, counters, marks = self._timeline(tmpl, self.rows[t_id], m, counts)
        columns = template_columns(self.rows, t_id)
        _moved, l2_bytes, dram_bytes = moved(columns, counts, m, self.multicast)
        return seconds, counters, phases(seconds, marks, l2_bytes, dram_bytes)

    def _timeline(self, tmpl: Template, rows, m: int, counts: np.ndarray):
        """(duration, skip log, counters, marks) of m CTAs of a prepared template alone."""
        env = simpy.Environment()
        share = min(1.0, m / self.in_phase) if self.in_phase else 1.0
        links = Links(env, self.hw, False, 0, share)
        links.dram.cap = links.l2.cap = self.cap
        counters = [0, 0, 0]
        group = Group(links, self.k, tmpl, rows, counts, m, 0, 0, counters, None, None)
        env.process(group.run(alone=True))
        env.run()
        return env.now, group.skips, counters, group.marks


def in_phase_ctas(kw: KernelWork, slots: int) -> int | None:
    """The CTAs a group of `kw` is timed in phase with (`AloneRuns`): every resident CTA
    (`slots`) where the kernel sends atomic adds, whose round trips its computes wait for;
    None (the links' average demand decides) where it sends none, or posts them."""
    op = kw.transfer_rows[2]
    awaited = not kw.posted_atomics and len(op) and bool((op == OP_ATOMIC).any())
    return slots if awaited else None


def phases(seconds: float, marks, l2_bytes: int, dram_bytes: int) -> tuple:
    """A group's alone timeline as the phases its demand on the links changes between: (alone
    seconds, L2-path bytes, DRAM bytes) of its prologue (to the start of its first compute
    with work: its first tiles' loads, nothing computing), its body (the computes and the
    transfers between them, with any rounds timed at once) and its epilogue (from the last
    compute's end: its last stores). `marks`: the clock and the bytes served at those three
    moments (Group.mark); the body is what the prologue and epilogue leave of the totals.
    Zero-length phases are dropped."""
    if len(marks) != 3:
        return ((seconds, l2_bytes, dram_bytes),)
    (t0, l0, d0), (t1, l1, d1), (t2, l2, d2) = marks
    epi = (t2 - t1, l2 - l1, d2 - d1)
    body = (
        seconds - t0 - epi[0],
        max(0.0, l2_bytes - l0 - epi[1]),
        max(0.0, dram_bytes - d0 - epi[2]),
    )
    return tuple(p for p in ((t0, l0, d0), body, epi) if p[0] > 0)


def fair_speeds(demand: np.ndarray, weight: np.ndarray, bandwidth: float) -> np.ndarray | None:
    """Each group's speed on a link of `bandwidth`, its phase asking `demand` bytes/s of it
    from `weight` CTAs: None while the demands fit (every group at its alone speed); else
    the link's equal sharing among transfers (fluid.py) at the level of phases, a weighted
    max-min fair allocation: every CTA's share is the same level, a group asking less per
    CTA than the level gets what it asks (it computes with few transfers in flight and
    barely notices the link) and the others are held to the level, which is where the whole
    bandwidth is used. Found by progressive filling: the level is what is left over the CTAs
    still held; groups that ask no more than it are served and leave, and the level rises,
    until none does (a pass or two, as a sort of every group at every phase's end cost
    more)."""
    if float(demand.sum()) <= bandwidth:
        return None
    per = demand / weight
    level = bandwidth / float(weight.sum())
    served = per <= level
    if not served.any():  # the first pass: every group held
        return level / per
    held = ~served
    if not held.any():  # every group under the level: the demands fit, to float rounding
        return None
    while True:
        level = (bandwidth - float(demand[served].sum())) / float(weight[held].sum())
        more = held & (per <= level)
        if not more.any():
            break
        served |= more
        held &= ~more
    return np.where(held, level / np.where(held, per, 1.0), 1.0)


class Stretched:
    """The groups of one kernel on the GPU: each through its alone timeline phase by phase
    (`phases`), at its own speed while a link is oversubscribed (`speeds`; see the module
    docstring). `launch` adds a group; `next_end` advances the clock to the next end of a
    phase and returns the CTAs whose slots the groups ending there free.

    Each running group holds a slot of a few arrays (a long causal kernel has a hundred
    running at each of thousands of ends, so the arithmetic is array-wide); a group that
    ends leaves its slot to the next launch, marked empty meanwhile (no CTAs, no demand, no
    end). The links' total demands are kept as running sums, so while they fit, an end costs
    no more than finding the earliest one."""

    def __init__(self, hw: Hardware, start_s: float, capacity: int = 64):
        self.l2_bw, self.dram_bw = hw.l2_bytes_per_s, hw.hbm_bytes_per_s
        self.now = start_s
        self.n = 0  # slots in use or freed: the first n entries of each array
        self.live = 0  # groups running
        self.left = np.full(capacity, np.inf)  # alone seconds left in each group's phase
        self.l2_demand = np.zeros(capacity)  # bytes/s of that phase on the L2 path
        self.dram_demand = np.zeros(capacity)
        self.ctas = np.zeros(capacity, dtype=np.int64)
        self.later: list[tuple] = []  # each slot's phases after the one it is in
        self.free: list[int] = []  # slots of groups that ended, to reuse
        self.l2_total = self.dram_total = 0.0  # the running groups' demands, summed

    def launch(self, phases: tuple, ctas: int) -> None:
        if self.free:
            i = self.free.pop()
        else:
            if self.n == len(self.left):  # full: twice the room
                for name, empty in (("left", np.inf), ("l2_demand", 0), ("dram_demand", 0)):
                    old = getattr(self, name)
                    setattr(self, name, np.concatenate([old, np.full_like(old, empty)]))
                self.ctas = np.concatenate([self.ctas, np.zeros_like(self.ctas)])
            i = self.n
            self.n += 1
            self.later.append(())
        self.ctas[i] = ctas
        self.later[i] = phases[1:]
        self._enter(i, phases[0] if phases else (0.0, 0, 0))
        self.live += 1

    def _enter(self, i: int, phase: tuple) -> None:
        seconds, l2_bytes, dram_bytes = phase
        self.l2_total -= self.l2_demand[i]
        self.dram_total -= self.dram_demand[i]
        self.left[i] = seconds
        self.l2_demand[i] = l2 = l2_bytes / seconds if seconds > 0 else 0.0
        self.dram_demand[i] = dram = dram_bytes / seconds if seconds > 0 else 0.0
        self.l2_total += l2
        self.dram_total += dram

    def _leave(self, i: int) -> int:
        """Empty slot i; the CTAs its group held."""
        ctas = int(self.ctas[i])
        self.l2_total -= self.l2_demand[i]
        self.dram_total -= self.dram_demand[i]
        self.left[i] = np.inf
        self.l2_demand[i] = self.dram_demand[i] = 0.0
        self.ctas[i] = 0
        self.later[i] = ()
        self.free.append(i)
        self.live -= 1
        if not self.live:  # no drift left in the running sums
            self.l2_total = self.dram_total = 0.0
        return ctas

    def _slot_speeds(self) -> np.ndarray | None:
        """`speeds` per slot (an empty slot's is 1), None while every demand fits."""
        n = self.n
        speed = None
        for total, demand, bandwidth in (
            (self.l2_total, self.l2_demand, self.l2_bw),
            (self.dram_total, self.dram_demand, self.dram_bw),
        ):
            if total <= bandwidth * (1 - 1e-9):  # fits (the running sum's rounding aside)
                continue
            live = self.ctas[:n].nonzero()[0]
            link = fair_speeds(demand[live], self.ctas[live], bandwidth)
            if link is not None:
                full = np.ones(n)
                full[live] = link
                speed = full if speed is None else np.minimum(speed, full)
        return speed

    def speeds(self) -> np.ndarray | None:
        """Each running group's speed (slot order), None while the links serve every
        phase's demand (all run at their alone speed); else on each oversubscribed link its
        bandwidth shared max-min fairly (`fair_speeds`), a group at the lower of its two
        links' speeds."""
        speed = self._slot_speeds()
        return None if speed is None else speed[self.ctas[: self.n].nonzero()[0]]

    def next_end(self) -> int:
        """Move to the moment the first running phase ends; a group whose phase ended goes on
        to its next, and one with none left (with any that end with it, to the clock's
        resolution) leaves its slot. Returns the CTAs of the groups that left."""
        speed, n = self._slot_speeds(), self.n
        left = self.left[:n]
        if speed is None:
            at = int(left.argmin())
            dt = float(left[at])
            left -= dt
        else:
            wall = left / speed
            at = int(wall.argmin())
            dt = float(wall[at])
            left -= dt * speed
        self.now += dt
        left[at] = 0.0
        freed = 0
        for i in (left <= 4 * math.ulp(max(dt, 1e-300))).nonzero()[0].tolist():
            if self.later[i]:
                phase, self.later[i] = self.later[i][0], self.later[i][1:]
                self._enter(i, phase)
            else:
                freed += self._leave(i)
        return freed

    @property
    def running(self) -> bool:
        return self.live > 0
