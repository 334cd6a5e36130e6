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
  SM's shared-memory bandwidth (counted by each mirror from its kernel's source).
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
left, to STATE_REL), is repeated by its identical successors in the same time: they are
timed at once, and the group goes on with its transfers in flight renumbered (a loop over
K/V tiles costs a few rounds, not thousands; the result moves by float rounding only). L2
hits of long kernels come from their first and last waves (l2fast.py, exact), and where no
wave can be skipped, a one-class kernel's from the first access of each run of one tile
(l2runs.py, exact), or from one CTA's stream where a wave's CTAs work on tiles of their own
(l2lockstep.py, exact). The exact path (`exact=True`) simulates every CTA on its own, from a
full trace; tests check both agree.

Host: for a plan a framework issues from Python (`Plan.host_issued`: the implementation
mirrors), every kernel launch and every framework op it declares (`Plan.framework_ops`) costs
`host_op_s` on the host, which issues ahead of the GPU; a call takes the longer of the GPU's
time and the host's (the steady state of a timed loop), and the result says which bound.

What it ignores: warp scheduling inside an SM (every issue slot is taken to be used: Nsight
Compute on an H200 saw 49-71% busy for the scalar flash kernel with 1-3 warps per scheduler),
bank conflicts except those a mirror counts, DRAM page effects, power and clock throttling, L2
write-back timing (a store's DRAM write is charged at the store).
"""

from __future__ import annotations

import bisect
import math
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import simpy

from .engine_result import (
    LEVEL_COMPUTE,
    LEVEL_DRAM,
    LEVEL_L2,
    LEVELS,
    TIMELINE_DTYPE,
    EngineResult,
    KernelTiming,
)
from .errors import TooLargeToExecuteError
from .fluid import FluidLink
from .hardware import Hardware
from .l2fast import HitTable, check_decided, hit_tables, least_decided
from .occupancy import occupancy
from .trace import OP_ATOMIC, OP_COMPUTE, OP_LOAD, OP_STORE
from .workload import KernelWork, Workload

# The fast path's memory is the accesses whose L2 hits it decides one by one (see l2fast.py:
# a long kernel's skipped waves cost nothing): a plan needing more than this is refused with
# the estimate, never cut. Deciding them takes ~0.3 µs each in bulk, and up to ~10 µs where
# the bulk test cannot decide and the LRU is replayed (the 41.7 M accesses of flash-attn-1's
# one wave at seq 16k took 400 s and 9.4 GB that way, before l2lockstep.py decided them from
# one CTA), so the budget also bounds the time.
ENGINE_MAX_BYTES = 6 << 30
MAX_EXACT_ACCESSES = 2_000_000  # the full per-op replay is the slow reference


class _Cohort:
    """On the exact path: CTAs of one template launched together wait for each other at every
    transfer, as the fast path's single weighted group does (see the module docstring)."""

    def __init__(self, env: simpy.Environment, n_transfers: int, members: int):
        self.env = env
        self.members = members
        self.left = [members] * n_transfers
        self.events = [env.event() for _ in range(n_transfers)]

    def join(self, site: int, own: simpy.Event) -> simpy.Event:
        def arrived(_e):
            self.left[site] -= 1
            if not self.left[site]:
                self.events[site].succeed()

        own.callbacks.append(arrived)
        return self.events[site]


@dataclass
class _Template:
    """A CTA's ops prepared for timing: transfers and merged compute steps.

    Compute c waits for the transfers `wait_idx[wait_ptr[c]:wait_ptr[c + 1]]` (issue positions,
    ascending): one flat list for all of them, as a long loop has a million steps. The columns
    are `array.array`s: indexed one element at a time like lists, 8 bytes an element where a
    list of ints takes 40 (flash-attn 0.1's forward at 64k tokens is a template of 12.6 M ops:
    its lists were 1.6 GB of fresh memory)."""

    tr_bytes: Sequence[int]
    tr_op: Sequence[int]
    tr_gate: Sequence[int]  # computes that must finish before the transfer may start
    tr_rows: np.ndarray  # template rows of the transfers (for the timeline)
    comp_s: Sequence[float]  # duration of each merged compute step
    wait_ptr: Sequence[int]
    wait_idx: Sequence[int]
    comp_rows: Sequence[int]
    issued_at: Sequence[int] = field(default_factory=list)  # transfers issued once b computes ran
    order: np.ndarray | None = None  # each issued transfer's index in the program's order

    def waits(self, c: int) -> Sequence[int]:
        """The transfers compute c waits for (issue positions)."""
        return self.wait_idx[self.wait_ptr[c] : self.wait_ptr[c + 1]]


def _prepare(
    tmpl: np.ndarray, stages: int, per_sm: tuple[float, float, float], share: int
) -> _Template:
    """Transfers in the order they are issued: a load goes out as soon as the computes
    `stages - 1` before its place in the program have started (a prefetch the kernel issues
    ahead, so it passes the stores in between); a store or an atomic once the compute that
    produced it is done. A compute waits for the loads and atomic adds before it in the
    program, never for a store: stores are posted (the SM sends them and goes on).

    Consecutive computes are one step, their times added left to right. Array operations
    throughout: a CTA of a long loop has millions of ops (flash-attn 1's first release at
    32k tokens: 1.3 M)."""
    matrix, vector, exp = per_sm
    ops = tmpl["op"]
    comp = ops == OP_COMPUTE
    first = comp.copy()
    first[1:] &= ~comp[:-1]  # the first compute of each run of them: a step
    before = np.cumsum(first)  # steps begun up to each op
    n_comp = int(before[-1]) if len(before) else 0
    at = np.flatnonzero(comp)
    work = (
        tmpl["matmul_flops"][at] / matrix
        + tmpl["vector_flops"][at] / vector
        + tmpl["exp_ops"][at] / exp
    ) * share
    step = before[at] - 1
    heads = np.flatnonzero(first[at])  # each step's first compute among `at`
    place = np.arange(len(at)) - heads[step]
    comp_s = work[heads].copy()
    for r in range(1, int(place.max()) + 1 if len(place) else 0):  # added as a loop would
        sel = place == r
        comp_s[step[sel]] += work[sel]
    tr = np.flatnonzero(~comp)
    done = before[tr]  # steps begun before the transfer (it is not a compute)
    tr_ops = ops[tr]
    gate = np.where(tr_ops == OP_LOAD, np.maximum(0, done - (stages - 1)), done)
    order = np.argsort(gate, kind="stable")  # by gate, then program order
    gate, done, tr_ops = gate[order], done[order], tr_ops[order]
    # compute c waits for the loads and atomic adds between compute c - 1 and it (those
    # before were waited for by the computes before it); see the module docstring
    waiting = np.flatnonzero((tr_ops != OP_STORE) & (done < n_comp))
    by_step = np.argsort(done[waiting], kind="stable")
    wait_idx = waiting[by_step]
    steps = np.arange(n_comp + 1)
    wait_ptr = np.searchsorted(done[wait_idx], steps, side="left")
    issued_at = np.searchsorted(gate, steps, side="right")  # issue() stops at a later gate
    return _Template(
        _column(tmpl["bytes"][tr][order]),
        _column(tr_ops),
        _column(gate),
        tr[order],
        _column(comp_s, "d"),
        _column(wait_ptr),
        _column(wait_idx),
        _column(at[heads]),
        _column(issued_at),
        order,
    )


def _column(values: np.ndarray, code: str = "q") -> array:
    """An array.array of the values (int64, or float64 for "d"), copied from their buffer."""
    flat = np.ascontiguousarray(values, dtype=np.float64 if code == "d" else np.int64)
    column = array(code)
    column.frombytes(memoryview(flat).cast("B"))
    return column


MAX_PERIOD = 4  # steps: a loop whose body holds up to this many computes repeats whole


def _repeats(tmpl: _Template, hit_counts: np.ndarray) -> dict[int, list[int]]:
    """Per period k (1 to MAX_PERIOD) and compute step b, how many steps from b on are the
    same as the step k later: the transfers issued once b computes have run (bytes, op,
    hits), what b waits for among them, and b's duration. Step b runs from that issue to the
    end of compute b; a loop whose body has k computes repeats with period k. Compared as
    arrays, element by element (a step's transfers against the same places k steps later)."""
    n = len(tmpl.comp_s)
    if n == 0:
        return {k: [] for k in range(1, MAX_PERIOD + 1)}
    hi = np.asarray(tmpl.issued_at[:n], dtype=np.int64)
    lo = np.concatenate([[0], hi[:-1]])
    n_tr = hi - lo
    ptr = np.asarray(tmpl.wait_ptr, dtype=np.int64)
    n_wait = ptr[1:] - ptr[:-1]
    comp_s = np.asarray(tmpl.comp_s)
    tr_step = np.repeat(np.arange(n), n_tr)  # the step that issues each transfer
    tr_at = np.arange(len(tr_step)) - lo[tr_step]  # its place among the step's
    kinds = np.stack(
        [
            np.asarray(tmpl.tr_bytes[: len(tr_step)], dtype=np.int64),
            np.asarray(tmpl.tr_op[: len(tr_step)], dtype=np.int64),
            np.asarray(hit_counts[: len(tr_step)], dtype=np.int64),
        ],
        axis=1,
    )
    w_step = np.repeat(np.arange(n), n_wait)
    waited = np.asarray(tmpl.wait_idx[: int(ptr[n])], dtype=np.int64) - lo[w_step]  # relative
    w_at = np.arange(len(w_step)) - ptr[w_step]
    runs = {}
    for k in range(1, MAX_PERIOD + 1):
        m = max(0, n - k)  # steps b with a step b + k
        b = np.arange(m)
        same = (
            (comp_s[b] == comp_s[b + k]) & (n_tr[b] == n_tr[b + k]) & (n_wait[b] == n_wait[b + k])
        )
        t = np.flatnonzero(tr_step < m)
        t = t[same[tr_step[t]]]
        there = lo[tr_step[t] + k] + tr_at[t]
        differ = (kinds[t] != kinds[there]).any(axis=1)
        same[tr_step[t[differ]]] = False
        w = np.flatnonzero(w_step < m)
        w = w[same[w_step[w]]]
        there = ptr[w_step[w] + k] + w_at[w]
        same[w_step[w[waited[w] != waited[there]]]] = False
        # from b: steps until the first that differs (the run's length)
        nxt = np.where(same, m, b)
        nxt = np.minimum.accumulate(nxt[::-1])[::-1] if m else nxt
        run = np.zeros(n, dtype=np.int64)
        run[:m] = nxt - b
        runs[k] = run.tolist()
    return runs


def _moved(nbytes: int, op: int, h: int, m: int) -> tuple[int, int, int]:
    """(DRAM read, L2 hit, DRAM write) bytes of one transfer of m CTAs, h of which hit."""
    if op == OP_LOAD:
        return nbytes * (m - h), nbytes * h, 0
    if op == OP_STORE:  # written through to DRAM
        return 0, 0, nbytes * m
    if op == OP_ATOMIC:  # resolved in L2: a miss brings the tile in, and it is written back
        return nbytes * (m - h), nbytes * h, nbytes * (m - h)  # once; hits add in place
    return 0, 0, 0


STATE_REL = 1e-9  # in-flight states this close (bytes and latency left) are the same state


def _same_state(a: list, b: list) -> bool:
    """Two of _Group.state's in-flight states alike: the same transfers (from the issue front) in
    the same phases, with latency and bytes left equal to STATE_REL (of the longest latency
    left, or of the bytes; float rounding of the absolute clock is far below it)."""
    if len(a) != len(b):
        return False
    for (i, pa), (j, pb) in zip(a, b, strict=True):
        if i != j or len(pa) != len(pb):
            return False
        for (ka, va), (kb, vb) in zip(pa, pb, strict=True):
            if ka != kb or abs(va - vb) > STATE_REL * max(abs(va), abs(vb), 1e-300):
                return False
    return True


def _merged(batch: list[tuple[int, int, int, list | None]]) -> tuple[list[list], list[int]]:
    """Transfers issued together that are alike (bytes, DRAM copies, L2-hit copies, and no
    timeline row of their own), as one flow of all their copies: ([bytes, DRAM copies, L2
    copies, note, transfers], ...) and each transfer's group. Exact: alike flows started
    together get the same share of every link at every instant and end together, as one flow
    of their summed copies does (a K and a V tile of one step, or a GEMM's A and B tiles)."""
    if len(batch) == 1:
        return [[*batch[0], 1]], [0]
    groups: list[list] = []
    which: list[int] = []
    seen: dict[tuple[int, int, int], int] = {}
    for nbytes, m_dram, m_l2, note in batch:
        key = (nbytes, m_dram, m_l2)
        if note is None and key in seen:
            groups[seen[key]][4] += 1
        else:
            if note is None:
                seen[key] = len(groups)
            groups.append([nbytes, m_dram, m_l2, note, 1])
        which.append(seen[key] if note is None else len(groups) - 1)
    return groups, which


class _Group:
    """A group of m CTAs of one template, launched together, stepping through its ops: the
    transfers its computes release, the computes waiting for the transfers before them.

    `hit_counts[i]`: how many of the m CTAs find transfer i in L2 (loads only). `regions`: a
    CTA's own transfer regions for the timeline (else the template's). `cohort`: the exact
    path's lockstep with the group's other CTAs, each its own process.
    """

    def __init__(self, sim, k, tmpl, rows, hit_counts, m, cta, sm, counters, cohort, regions):
        self.sim, self.env = sim, sim.env
        # hits and regions come in the program's order of transfers; the template issues them
        # in its own (_prepare)
        hit_counts = hit_counts[tmpl.order]
        if regions is not None:
            regions = (regions[0][tmpl.order], regions[1][tmpl.order])
        self.k, self.tmpl, self.rows, self.hit_counts = k, tmpl, rows, hit_counts
        self.m, self.cta, self.sm, self.counters = m, cta, sm, counters
        self.cohort, self.regions = cohort, regions
        self.events: list = [None] * len(tmpl.tr_bytes)
        self.issued = 0  # transfers issued so far (a prefix, in the template's issue order)
        self.tail = 0  # transfers before it are done (stores are posted: nobody waits)
        self.done = 0  # computes finished
        self.track: dict | None = None  # each transfer's parts, for `state` (alone only)

    def run(self, alone: bool):
        """The group's process. `alone`: nothing else runs on the GPU until it ends, so a
        loop's rounds that leave the transfers in flight as they found them are timed at once
        (the module docstring), their time added at the end."""
        env, tmpl = self.env, self.tmpl
        repeats = _repeats(tmpl, self.hit_counts) if alone else None
        if alone:
            self.track = {}
        history: dict[int, tuple] = {}  # step boundary -> (time, state in flight)
        deferred = 0.0
        self.issue()
        events = self.events  # one list for the group's life (skip_rounds moves within it)
        while self.done < len(tmpl.comp_s):
            c = self.done
            pending = [
                events[i]
                for i in tmpl.waits(c)
                if events[i] is not None and not events[i].processed
            ]
            if len(pending) == 1:
                yield pending[0]
            elif pending:
                yield simpy.AllOf(env, pending)
            note = self.note_compute(c)
            if tmpl.comp_s[c] > 0:
                yield env.timeout(tmpl.comp_s[c])
            if note is not None:
                note[1] = env.now
            self.done += 1
            if repeats is not None:
                history[self.done] = (env.now, self.state())
                history.pop(self.done - MAX_PERIOD - 1, None)
                skipped = self.skip_rounds(repeats, history)
                if skipped:
                    deferred += skipped
                    history = {self.done: (env.now, self.state())}
            self.issue()
        self.advance_tail()
        pending = [e for e in self.events[self.tail :] if e is not None and not e.processed]
        if pending:
            yield simpy.AllOf(env, pending)
        if deferred:
            yield env.timeout(deferred)

    def issue(self) -> None:
        """Start every transfer the computes done so far release, in program order (gates
        never decrease along the issue order: the first gate past `done` ends the batch)."""
        tmpl, m, sim = self.tmpl, self.m, self.sim
        first = self.issued
        end = bisect.bisect_right(tmpl.tr_gate, self.done, first)
        if end == first:
            return
        self.issued = end
        tr_bytes, tr_op = tmpl.tr_bytes, tmpl.tr_op
        timeline = sim.timeline_on
        batch = []
        read = l2 = write = 0  # what the batch adds to the counters, as _moved says
        for i in range(first, end):
            nbytes, op, h = tr_bytes[i], tr_op[i], self.hits(i)
            moved = _moved(nbytes, op, h, m)
            read, l2, write = read + moved[0], l2 + moved[1], write + moved[2]
            note = None
            if timeline:
                r = self.rows[tmpl.tr_rows[i]]
                regions = self.regions
                note = sim._note(
                    self.env.now,
                    self.k,
                    self.cta,
                    m,
                    self.sm,
                    op,
                    r["tensor"],
                    r["start"] if regions is None else regions[0][i],
                    r["stop"] if regions is None else regions[1][i],
                    nbytes * m,
                    LEVEL_L2 if h == m else LEVEL_DRAM,
                    h,
                    r["buffer"],
                )
            batch.append((nbytes, m - h, h, note))
        counters = self.counters
        counters[0] += read
        counters[1] += l2
        counters[2] += write
        own = sim._transfers(batch, self.track)
        if self.cohort is not None:
            own = [self.cohort.join(first + j, e) for j, e in enumerate(own)]
        self.events[first:end] = own

    def hits(self, i: int) -> int:
        """How many of the m CTAs find transfer i in L2 (a store never does)."""
        return int(self.hit_counts[i]) if self.tmpl.tr_op[i] in (OP_LOAD, OP_ATOMIC) else 0

    def note_compute(self, c: int):
        """Compute c's timeline row (None without a timeline)."""
        if not self.sim.timeline_on:
            return None
        r = self.rows[self.tmpl.comp_rows[c]]
        return self.sim._note(
            self.env.now,
            self.k,
            self.cta,
            self.m,
            self.sm,
            OP_COMPUTE,
            -1,
            r["start"],
            r["stop"],
            0,
            LEVEL_COMPUTE,
            0,
            r["buffer"],
        )

    def state(self) -> list:
        """What is in flight now, relative to the step and the clock: each unfinished
        transfer's index from the issue front, and per part its latency left, its bytes left
        on its link, or done."""
        now, out = self.env.now, []
        self.advance_tail()
        for i in range(self.tail, self.issued):
            ev = self.events[i]
            if ev is None or ev.processed:
                continue
            t0, parts = self.track[ev]
            phases = []
            for link, latency, part in parts:
                if part.processed:
                    phases.append((0, 0.0))
                elif t0 + latency > now or (left := link.remaining(part)) is None:
                    phases.append((1, t0 + latency - now))  # still in its latency
                else:
                    phases.append((2, left / self.tmpl.tr_bytes[i]))
            out.append((i - self.issued, phases))
        return out

    def advance_tail(self) -> None:
        """Move `tail` past the transfers that are done (stores end in their own time)."""
        events = self.events
        while self.tail < self.issued and (
            events[self.tail] is None or events[self.tail].processed
        ):
            self.tail += 1

    def step_delta(self, b: int) -> list[int]:
        """What step b adds to the counters, as issue() adds it."""
        tmpl, delta = self.tmpl, [0, 0, 0]
        lo = tmpl.issued_at[b - 1] if b else 0
        for i in range(lo, tmpl.issued_at[b]):
            moved_by = _moved(tmpl.tr_bytes[i], tmpl.tr_op[i], self.hits(i), self.m)
            for j, moved in enumerate(moved_by):
                delta[j] += moved
        return delta

    def skip_rounds(self, repeats: dict, history: dict) -> float:
        """At the boundary after compute c - 1: when steps c - k to c - 1 left the group as
        they found it, shifted in time, on a GPU running nothing else, and the steps after them
        repeat them, each further round takes the same time and moves the same bytes. They are
        timed at once: the group goes on from the step after them with its transfers in flight
        renumbered. Returns their time (0 when nothing was skipped)."""
        c, tmpl = self.done, self.tmpl
        for period in range(1, MAX_PERIOD + 1):
            same = repeats[period][c - period] // period * period if c - period in history else 0
            if not same or not _same_state(history[c - period][1], history[c][1]):
                continue
            rounds = same // period
            for b in range(c - period, c):
                for i, d in enumerate(self.step_delta(b)):
                    self.counters[i] += d * rounds
            shift = tmpl.issued_at[c - 1 + same] - tmpl.issued_at[c - 1]
            events, lo, hi = self.events, self.tail, self.issued
            moved = events[lo:hi]
            events[lo:hi] = [None] * len(moved)
            events[lo + shift : hi + shift] = moved
            self.tail, self.issued = lo + shift, hi + shift
            self.done += same
            return (self.env.now - history[c - period][0]) * rounds
        return 0.0


@dataclass
class _KernelRun:
    """One kernel's state while it runs: its slots, the next CTA to start, the byte counters,
    and the durations of groups that ran alone (the fast path's memo)."""

    k: int
    kw: KernelWork
    hits: HitTable | None
    slots: int
    freed: simpy.Event  # triggered when a group gives its slots back
    next: int = 0  # the next CTA to start, in launch order
    templates: list[_Template] = field(default_factory=list)
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


class _Sim:
    def __init__(
        self,
        hw: Hardware,
        workload: Workload,
        l2: bool,
        exact: bool,
        timeline: bool,
        max_timeline: int,
        progress: Callable[[float], None] | None,
        check: Callable[[dict[int, int]], None] | None = None,
    ):
        self.hw = hw
        self.workload = workload
        self.check = check
        self.wave_counts: dict[tuple[int, int, int], np.ndarray] = {}
        self.l2 = l2
        self.exact = exact
        self.env = simpy.Environment()
        self.dram = FluidLink(self.env, hw.hbm_bytes_per_s)
        self.l2link = FluidLink(self.env, hw.l2_bytes_per_s)
        self.dtype = workload.meta["problem"]["dtype"]
        self.timeline_on = timeline
        self.max_timeline = max_timeline
        self.rows: list[tuple] = []
        self.truncated = False
        self.progress = progress
        self.timings: list[KernelTiming] = []

    # -- transfers and timeline ---------------------------------------------------------------
    def _note(self, start, *fields):
        """A timeline row: start, end (= start until the op completes), then TIMELINE_DTYPE's
        remaining fields in order; None once the timeline is full."""
        if len(self.rows) >= self.max_timeline:
            self.truncated = True
            return None
        row = [start, start, *fields]
        self.rows.append(row)
        return row

    def _transfers(self, batch: list[tuple[int, int, int, list | None]], track=None) -> list:
        """Start transfers issued together: (bytes, DRAM copies, L2-hit copies, note) each.

        One latency wait per level for the whole batch, then the links; a transfer is done
        when all its copies are. `track`: a dict given each transfer's parts (issue time,
        [(link, latency, the part's event)]), for _Group.state.
        """
        env, hw = self.env, self.hw
        dones = []
        dram_items, l2_items = [], []
        groups, which = _merged(batch)
        for nbytes, m_dram, m_l2, note, copies in groups:
            m_dram, m_l2 = m_dram * copies, m_l2 * copies
            done = env.event()
            if note is not None:
                done.callbacks.append(lambda _e, note=note: note.__setitem__(1, env.now))
            # every copy crosses the SM-to-L2 path (hits and misses alike); misses also
            # cross DRAM. A transfer is done when all its parts are.
            parts = [(l2_items, m_dram + m_l2)] + ([(dram_items, m_dram)] if m_dram else [])
            if len(parts) == 2:
                left = [2]

                def part_done(_e, done=done, left=left):
                    left[0] -= 1
                    if not left[0]:
                        done.succeed()

                evs = []
                for items, mm in parts:
                    ev = env.event()
                    ev.callbacks.append(part_done)
                    items.append((nbytes, mm, ev))
                    evs.append(ev)
                if track is not None:
                    track[done] = (
                        env.now,
                        [
                            (self.l2link, hw.l2_latency_s, evs[0]),
                            (self.dram, hw.hbm_latency_s, evs[1]),
                        ],
                    )
            else:
                l2_items.append((nbytes, m_l2, done))
                if track is not None:
                    track[done] = (env.now, [(self.l2link, hw.l2_latency_s, done)])
            dones.append(done)
        for link, latency, items in (
            (self.dram, hw.hbm_latency_s, dram_items),
            (self.l2link, hw.l2_latency_s, l2_items),
        ):
            if not items:
                continue

            def after_latency(_e, link=link, items=items):
                link.start_all(items)

            env.timeout(latency).callbacks.append(after_latency)
        return [dones[g] for g in which]

    # -- a kernel -----------------------------------------------------------------------------
    def _kernel(self, k: int, kw: KernelWork, hits: HitTable | None):
        """One kernel: CTAs take slots as they free up (waves), grouped into cohorts."""
        hw, env = self.hw, self.env
        start = env.now
        occ = occupancy(hw, kw.sram_bytes, kw.threads_per_cta, kw.name, kw.registers_per_thread)
        run = _KernelRun(k, kw, hits, hw.sm_count * occ, env.event())
        share = max(1, min(occ, math.ceil(kw.n_ctas / hw.sm_count)))
        cap = hw.sm_bytes_per_s / share
        self.dram.cap = cap
        self.l2link.cap = cap
        per_sm = (
            hw.per_sm(hw.kernel_matmul_rate(self.dtype, kw)),
            hw.per_sm(hw.vector_rate(self.dtype)),
            hw.per_sm(hw.exp_ops_per_s),
        )
        run.templates = [_prepare(t, kw.stages, per_sm, share) for t in kw.templates]
        if self.exact:
            run.starts = np.searchsorted(kw.acc_cta, np.arange(kw.n_ctas + 1))
        run.free_slots = list(range(run.slots))  # slot s sits on SM s % sm_count
        yield env.timeout(hw.launch_overhead_s)
        n = kw.n_ctas
        while run.next < n or len(run.free_slots) < run.slots:
            room = min(len(run.free_slots), n - run.next)
            if room:
                idle = len(run.free_slots) == run.slots
                run.free_slots.sort()
                groups = self._groups(kw, run.next, room)
                run.next += room
                for t_id, members in groups:
                    if self.exact:
                        self._launch_each(run, t_id, members)
                    else:
                        self._launch_group(run, t_id, members, idle and len(groups) == 1)
            yield run.freed
            run.freed = env.event()
            if self.progress:
                self.progress((k + run.next / max(n, 1)) / len(self.workload.kernels))
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
            )
        )

    def _launch_each(self, run: _KernelRun, t_id: int, members: np.ndarray) -> None:
        """The exact path: every CTA its own process, in lockstep with its cohort."""
        kw, tmpl = run.kw, run.templates[t_id]
        cohort = _Cohort(self.env, len(tmpl.tr_bytes), len(members))
        own = self._hit_rows(run.hits, members, len(tmpl.tr_bytes))
        for i, cta in enumerate(members):
            row = np.arange(run.starts[cta], run.starts[cta + 1])
            taken = run.take(1)
            group = _Group(
                self,
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

    def _launch_group(self, run: _KernelRun, t_id: int, members: np.ndarray, alone: bool):
        """The fast path: the cohort simulated once with its size as multiplicity. A group that
        starts on an idle GPU and is alone until it ends (`alone`) runs the same way whenever
        its (template, size, hits) recur: its duration and bytes are kept and replayed."""
        env, tmpl = self.env, run.templates[t_id]
        m = len(members)
        taken = run.take(m)
        counts = self.wave_counts.pop((run.k, int(members[0]), m), None)
        if counts is None:
            counts = self._hit_counts(run.hits, members, len(tmpl.tr_bytes))
        key = (t_id, m, counts.tobytes()) if alone and not self.timeline_on else None
        if key is not None and key in run.memo:
            seconds, delta = run.memo[key]
            for i, d in enumerate(delta):
                run.counters[i] += d
            env.timeout(seconds).callbacks.append(run.release(taken))
            return
        group = _Group(
            self,
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
        proc = env.process(group.run(alone=alone and not self.timeline_on))
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

    @staticmethod
    def _groups(kw: KernelWork, first: int, room: int):
        """CTAs launched together, split by template: (template, members) cohorts."""
        batch = np.arange(first, first + room)
        tids = kw.cta_template[first : first + room]
        return [(int(t), batch[tids == t]) for t in np.unique(tids)]

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
        slots = [
            hw.sm_count
            * occupancy(hw, kw.sram_bytes, kw.threads_per_cta, kw.name, kw.registers_per_thread)
            for kw in kernels
        ]
        hits = (
            hit_tables(kernels, slots, hw.l2_bytes, ENGINE_MAX_BYTES)
            if self.l2
            else [None] * len(kernels)
        )
        if self.check is not None and not self.exact:
            self.check(self._wave_patterns(kernels, slots, hits))

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
        timeline = None
        if self.timeline_on:
            timeline = (
                np.array([tuple(r) for r in self.rows], dtype=TIMELINE_DTYPE)
                if self.rows
                else np.zeros(0, TIMELINE_DTYPE)
            )
        return EngineResult(
            float(max(gpu_s, host_s)),
            tuple(self.timings),
            self.l2,
            self.exact,
            timeline,
            self.truncated,
            self.workload.meta,
            float(gpu_s),
            host_s,
        )


def simulate_workload(
    workload: Workload,
    hw: Hardware,
    l2: bool = True,
    exact: bool = False,
    timeline: bool = False,
    max_timeline: int = 500_000,
    progress: Callable[[float], None] | None = None,
    check: Callable[[dict[int, int]], None] | None = None,
) -> EngineResult:
    """Replay a workload (from a plan or a trace file) on `hw`. `check` is given, once the L2
    hits are known, how many waves of each one-template kernel will be simulated, and may
    refuse the run by raising."""
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
    the L2 hits tell how many waves of a one-class kernel differ; None: no bound."""
    from .bounds import engine_problem
    from .counts import count_plan
    from .workload import from_plan_exact, from_plan_fast

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
            if too_long := engine_problem(plan, counts, max_steps, patterns):
                raise TooLargeToExecuteError(too_long)

    workload = from_plan_exact(plan) if exact else from_plan_fast(plan)
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
