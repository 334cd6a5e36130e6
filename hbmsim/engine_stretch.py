"""Stretched alone timelines: a many-wave kernel of several CTA classes the step-by-step replay
cannot afford, scheduled group by group.

Why: the fast path's cost is its groups' steps. A kernel of one class keeps its waves in step
(each starts on an idle GPU, so a wave seen before is replayed), and a one-wave kernel skips
the rounds the whole GPU repeats (engine_group.Rounds). A kernel whose classes run loops of
different lengths, launched wave after wave, does neither: causal attention's row blocks end
one step apart, every end lets the next CTAs in at a new phase, and from then on no two steps
of the GPU are alike (fa2 causal at 64k tokens x 16 heads: about 16 M steps, refused). Here
such a kernel is scheduled as the engine launches it (the same slots, the same groups in the
same order), but each group is simulated once on its own, on an otherwise idle GPU (the same
Group, links and caps, its loop's rounds skipped: a few steps; a long loop from a short copy
its family shares, engine_loops.py), and runs that timeline on the
GPU stretched by one common factor while the groups running together ask more of a link than
it has:

    speed = min(1, l2_bytes_per_s / sum of L2-path demand, hbm_bytes_per_s / sum of DRAM demand)

where a group's demand on a link is the bytes it moves there over its alone duration. Bytes
are exact (each group's, from the same hit tables). Time is exact where no link is ever
oversubscribed (every group then runs its alone timeline) and, where a link is saturated
throughout, what conservation gives (the link serves its bandwidth, shared equally by every
transfer, as the fluid links do). What it averages away: the step-by-step replay's transfers
bunch, so a link can idle for moments while its average demand is over its bandwidth, or
saturate while it is under. That matters where few CTAs share the links (their bunching does
not average out) and in the kernel's drain after the last launch, one wave of the kernel's
many. Measured against the step-by-step replay, same bytes every time (`python
bench/engine.py` prints the first): fa2 causal x 16 heads on the H100 -0.20% at 14k tokens (9
waves) and -0.15% at 16k (10), the A100 80GB at d 128 -0.02%, the L4 +0.52%,
flash-attn 2's causal forward with GQA (batch 2, 32 heads, 8 K/V heads, 8k) -0.45%; but with
5 waves -0.6%, with 36 to 72 CTAs on a GPU cut down to 12 or 24 SMs (bandwidths scaled with
them) up to -5.7%. Hence the engine stretches a kernel only with at least MIN_WAVES waves of
at least MIN_SLOTS CTAs (the presets hold 174 to 396), never one that waits for an atomic
add's round trip (a backward's dQ: contention then lengthens its critical path transfer by
transfer, more than its average demand says: -4% to -32% measured). Within the replay's
work bound the replay is cheap enough, and it is used but for kernels of at least
MIN_CLASSES classes, which are stretched there too (bounds.engine_choice): with fewer, the
loops are short and each CTA's first and last steps, where the bunching is, weigh more. Over
causal forwards at 16k tokens a batch (fa2, flash-attn 1 and 2, A100 80GB and H100, d 64 x
32 heads and d 128 x 16 heads, 512 to 16k tokens) the stretched kernel departed from the
replay by -0.02% to -0.42% with 64 to 256 classes, by up to -2.9% (and +0.5%) with 32, by
up to -9% with 4 to 16, and flash-attn 1.x's split forward of 5 classes by -14% to -21%.
With that many classes the drain weighs less, and 4 to 7 waves are enough: flash-attn 2's
causal forward at 16k tokens (8 to 32 heads, d 64 and 128, A100 80GB, H100 and H200) over
3.9 to 7.8 waves departed by -0.05% to -0.48%, fa2's (one class's CTAs of every head
launched together) by -0.13% over 7.8 waves and -0.57% over 3.9; below (1.2 to 2.6 waves)
flash-attn 2 still agreed (-0.11% to -0.45%) but fa2 did not (-1.4% to -2.1%), so such a
kernel needs MIN_WAVES_LONG waves. Past the bound every kernel that may be stretched is
(the alternative is no time at all).
A timeline, which needs every step, is never stretched. The result marks each stretched
kernel.
"""

from __future__ import annotations

import math

import numpy as np
import simpy

from .engine_group import Group, Template
from .engine_links import Links
from .engine_loops import ShortRun, moved, shortened
from .hardware import Hardware
from .workload import template_columns

MIN_WAVES = 8  # a stretched kernel's drain is one wave of at least this many (see above)
MIN_SLOTS = 128  # ... and its waves hold at least this many CTAs
MIN_CLASSES = 64  # within the replay's bound, only a kernel of this many classes (see above)
MIN_WAVES_LONG = 4  # ... over at least this many waves (fewer than MIN_WAVES: see above)


class AloneRuns:
    """Each group's timeline on an otherwise idle GPU, kept by (template, CTAs, hits): its
    duration, its bytes as the counters count them, and what it moves on the L2 path and DRAM.

    A template with a long loop is run shortened where its hits allow (engine_loops.py), once
    for every template sharing that short copy; `templates` are prepared on demand (a lazy
    sequence), so a template every group of which is timed from a short copy is never
    prepared. `prepare_rows` prepares a short copy's records as the kernel's templates are;
    `shorten=False` runs every group on its whole template (the benchmark's comparison)."""

    def __init__(self, hw: Hardware, cap: float, k: int, templates, kw, prepare_rows, shorten=True):
        self.hw, self.cap, self.k = hw, cap, k
        self.templates, self.rows = templates, kw.templates
        self.loops = getattr(kw.templates, "loops", None)
        self.multicast = (kw.multicast_ids, kw.cluster)
        self.prepare_rows, self.shorten = prepare_rows, shorten
        self.memo: dict[tuple, tuple[float, list[int], int, int]] = {}
        self.short: dict[tuple, ShortRun] = {}  # a short copy's run, by what it depends on
        self.shortened = 0  # groups timed from a short copy

    def get(self, t_id: int, m: int, counts: np.ndarray) -> tuple[float, list[int], int, int]:
        key = (t_id, m, counts.tobytes())
        found = self.memo.get(key)
        if found is None:
            found = self.memo[key] = self._from_short(t_id, m, counts) or self._run(t_id, m, counts)
        return found

    def _from_short(self, t_id: int, m: int, counts: np.ndarray):
        """The group timed from its template's short copy (engine_loops.py), or None."""
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
            seconds, skips, _counters = self._timeline(tmpl, short_rows, m, short_counts)
            run = self.short[fkey] = ShortRun(
                seconds, skips, short_rows, short_counts, m, self.multicast, loops, keep
            )
        found = run.whole(left_out)
        self.shortened += found is not None
        return found

    def _run(self, t_id: int, m: int, counts: np.ndarray):
        tmpl = self.templates[t_id]
        seconds, _skips, counters = self._timeline(tmpl, self.rows[t_id], m, counts)
        columns = template_columns(self.rows, t_id)
        _moved, l2_bytes, dram_bytes = moved(columns, counts, m, self.multicast)
        return seconds, counters, l2_bytes, dram_bytes

    def _timeline(self, tmpl: Template, rows, m: int, counts: np.ndarray):
        """(duration, counters, skip log) of m CTAs of a prepared template alone."""
        env = simpy.Environment()
        links = Links(env, self.hw, False, 0)
        links.dram.cap = links.l2.cap = self.cap
        counters = [0, 0, 0]
        group = Group(links, self.k, tmpl, rows, counts, m, 0, 0, counters, None, None)
        env.process(group.run(alone=True))
        env.run()
        return env.now, group.skips, counters


class Stretched:
    """The groups of one kernel on the GPU: each at its alone timeline's speed times the common
    stretch (see the module docstring). `launch` adds a group; `next_end` advances the clock to
    the next group's end and returns the CTAs whose slots it frees.

    The running groups are kept packed at the front of arrays (a long causal kernel has a
    hundred running at each of thousands of ends: a Python loop over them was a quarter of its
    engine time, and concatenating each end's launches onto them a tenth); the arithmetic is
    the same per group, and the demands are summed exactly (fsum)."""

    def __init__(self, hw: Hardware, start_s: float, capacity: int = 64):
        self.l2_bw, self.dram_bw = hw.l2_bytes_per_s, hw.hbm_bytes_per_s
        self.now = start_s
        self.n = 0  # running groups: the first n entries of each array
        self.left = np.zeros(capacity)  # alone seconds each running group has left
        self.l2_demand = np.zeros(capacity)  # bytes/s of its alone timeline on the L2 path
        self.dram_demand = np.zeros(capacity)
        self.ctas = np.zeros(capacity, dtype=np.int64)

    def launch(self, seconds: float, l2_bytes: int, dram_bytes: int, ctas: int) -> None:
        if self.n == len(self.left):  # full: twice the room
            for name in ("left", "l2_demand", "dram_demand", "ctas"):
                old = getattr(self, name)
                setattr(self, name, np.concatenate([old, np.zeros_like(old)]))
        i = self.n
        self.left[i] = seconds
        self.l2_demand[i] = l2_bytes / seconds if seconds > 0 else 0.0
        self.dram_demand[i] = dram_bytes / seconds if seconds > 0 else 0.0
        self.ctas[i] = ctas
        self.n += 1

    def speed(self) -> float:
        n = self.n
        l2, dram = math.fsum(self.l2_demand[:n].tolist()), math.fsum(self.dram_demand[:n].tolist())
        return min(1.0, self.l2_bw / l2 if l2 > 0 else 1.0, self.dram_bw / dram if dram else 1.0)

    def next_end(self) -> int:
        """Move to the moment the first running group ends; remove it (and any that end with
        it, to the clock's resolution) and return their CTAs."""
        speed, n = self.speed(), self.n
        left = self.left[:n]
        first = float(left.min())
        self.now += first / speed
        resolution = 4 * math.ulp(max(first, 1e-300))
        left -= first
        keep = left > resolution
        kept = int(np.count_nonzero(keep))
        freed = int(self.ctas[:n].sum())
        for column in (self.left, self.l2_demand, self.dram_demand, self.ctas):
            column[:kept] = column[:n][keep]
        self.n = kept
        return freed - int(self.ctas[:kept].sum())

    @property
    def running(self) -> bool:
        return self.n > 0
