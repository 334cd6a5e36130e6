"""A group of CTAs of one template stepping through its program: the engine's unit of work.

Why a module of its own: the engine (engine.py) schedules kernels and CTAs onto slots and owns
the links; what one group does between its launch and its end (which transfers each compute
releases, what each compute waits for, a loop's repeated rounds timed at once) is a concern of
its own, and the longest part of the model. The fast path runs a cohort as one group with its
size as multiplicity; the exact path runs every CTA as a group of one, in lockstep with its
cohort (`Cohort`). engine.py's module docstring states the model both follow.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import simpy

from ..gpu.pipes import phases, step_seconds
from ..interpret.trace import OP_ATOMIC, OP_COMPUTE, OP_LOAD, OP_STORE
from .limits import MAX_PERIOD
from .result import LEVEL_COMPUTE, LEVEL_DRAM, LEVEL_L2, ROLE_CTA, ROLE_PRODUCER, role_code


class Cohort:
    """On the exact path: CTAs of one template launched together wait for each other at every
    transfer, as the fast path's single weighted group does (see engine.py's module docstring)."""

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
class Template:
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
    # warp-specialised kernels: consumer warpgroups, how their pipes overlap, and each step's
    # (tensor, FP32, SFU) seconds, for the timeline's per-warpgroup rows (pipes.phases)
    warpgroups: int = 0
    overlaps: tuple[bool, bool] = (False, False)
    comp_pipes: np.ndarray | None = None
    last_busy: int = -1  # the last compute step that takes time (-1: none does)

    def waits(self, c: int) -> Sequence[int]:
        """The transfers compute c waits for (issue positions)."""
        return self.wait_idx[self.wait_ptr[c] : self.wait_ptr[c + 1]]


def prepare(
    tmpl: np.ndarray,
    stages: int,
    per_sm: tuple[float, float, float],
    share: int,
    overlaps: tuple[bool, bool] = (False, False),
    multicast: tuple[tuple[int, ...], int] = ((), 1),
    warpgroups: int = 0,
) -> Template:
    """Transfers in the order they are issued: a load goes out as soon as the computes
    `stages - 1` before its place in the program have started (a prefetch the kernel issues
    ahead, so it passes the stores in between); a store or an atomic once the compute that
    produced it is done. A compute waits for the loads and atomic adds before it in the
    program, never for a store: stores are posted (the SM sends them and goes on).

    Consecutive computes are one step, their times added left to right; where a kernel's
    warpgroups overlap the SM's pipes (`overlaps`, pipes.overlapped), a step's tensor, FP32
    and SFU seconds are added per pipe and combined as pipes.step_seconds says. A load of a
    tensor in `multicast` = (tensor ids, cluster) is shared by the cluster's CTAs: each is
    charged 1/cluster of its bytes. A warp-specialised kernel's template (`warpgroups` >= 2)
    keeps each step's seconds per pipe, from which a timeline draws what each warpgroup does.
    Array operations throughout: a CTA of a long loop has millions of ops (flash-attn 1's
    first release at 32k tokens: 1.3 M)."""
    matrix, vector, exp = per_sm
    ops = tmpl["op"]
    comp = ops == OP_COMPUTE
    first = step_heads(ops)
    before = np.cumsum(first)  # steps begun up to each op
    n_comp = int(before[-1]) if len(before) else 0
    at = np.flatnonzero(comp)
    step = before[at] - 1
    heads = np.flatnonzero(first[at])  # each step's first compute among `at`
    comp_pipes = None
    if warpgroups >= 2 or any(overlaps):
        comp_pipes = np.stack(
            [
                np.bincount(step, tmpl[name][at] / rate * share, n_comp)
                for name, rate in (
                    ("matmul_flops", matrix),
                    ("vector_flops", vector),
                    ("exp_ops", exp),
                )
            ],
            axis=1,
        )
    if any(overlaps):
        comp_s = np.asarray(step_seconds(*comp_pipes.T, overlaps), dtype=np.float64)
    else:
        work = (
            tmpl["matmul_flops"][at] / matrix
            + tmpl["vector_flops"][at] / vector
            + tmpl["exp_ops"][at] / exp
        ) * share
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
    # before were waited for by the computes before it); see engine.py's module docstring
    waiting = np.flatnonzero((tr_ops != OP_STORE) & (done < n_comp))
    by_step = np.argsort(done[waiting], kind="stable")
    wait_idx = waiting[by_step]
    steps = np.arange(n_comp + 1)
    wait_ptr = np.searchsorted(done[wait_idx], steps, side="left")
    issued_at = np.searchsorted(gate, steps, side="right")  # issue() stops at a later gate
    tr_bytes = charged_bytes(tr_ops, tmpl["bytes"][tr][order], tmpl["tensor"][tr][order], multicast)
    busy = np.flatnonzero(comp_s > 0)  # compute steps that take time
    return Template(
        column(tr_bytes),
        column(tr_ops),
        column(gate),
        tr[order],
        column(comp_s, "d"),
        column(wait_ptr),
        column(wait_idx),
        column(at[heads]),
        column(issued_at),
        order,
        warpgroups,
        overlaps,
        comp_pipes,
        int(busy[-1]) if len(busy) else -1,
    )


def step_heads(ops: np.ndarray) -> np.ndarray:
    """Whether each op begins a compute step: consecutive computes are one step (`prepare`),
    so a step begins at the first compute of each run of them."""
    comp = ops == OP_COMPUTE
    first = comp.copy()
    first[1:] &= ~comp[:-1]
    return first


def charged_bytes(
    ops: np.ndarray, nbytes: np.ndarray, tensor: np.ndarray, multicast: tuple[tuple[int, ...], int]
) -> np.ndarray:
    """The bytes each transfer is charged: a load of a tensor a thread-block cluster receives by
    multicast (`multicast` = (tensor ids, cluster)) at 1/cluster of its bytes, any other at
    its bytes."""
    ids, cluster = multicast
    if cluster > 1 and ids:
        shared = (ops == OP_LOAD) & np.isin(tensor, ids)
        return np.where(shared, nbytes // cluster, nbytes)
    return nbytes


def column(values: np.ndarray, code: str = "q") -> array:
    """An array.array of the values (int64, or float64 for "d"), copied from their buffer."""
    flat = np.ascontiguousarray(values, dtype=np.float64 if code == "d" else np.int64)
    column = array(code)
    column.frombytes(memoryview(flat).cast("B"))
    return column


CALM = 2  # Rounds records states once this many boundaries passed with no start or end


class Repeats:
    """Per period k (1 to MAX_PERIOD) and compute step b, how many steps from b on are the
    same as the step k later: the transfers issued once b computes have run (bytes, op,
    hits), what b waits for among them, and b's duration. Step b runs from that issue to the
    end of compute b; a loop whose body has k computes repeats with period k. Compared as
    arrays, element by element (a step's transfers against the same places k steps later).

    A period is worked out when first asked (`self[k]`, a list per step): a group asks for
    the periods up to its loop body's, and a kernel of a thousand templates (causal attention
    at 64k tokens) pays for each period it asks at every template."""

    def __init__(self, tmpl: Template, hit_counts: np.ndarray):
        self.n = n = len(tmpl.comp_s)
        self.runs: dict[int, list[int]] = {}
        if n == 0:
            return
        hi = np.asarray(tmpl.issued_at[:n], dtype=np.int64)
        self.lo = lo = np.concatenate([[0], hi[:-1]])
        self.n_tr = hi - lo
        self.ptr = ptr = np.asarray(tmpl.wait_ptr, dtype=np.int64)
        self.n_wait = ptr[1:] - ptr[:-1]
        self.comp_s = np.asarray(tmpl.comp_s)
        self.tr_step = tr_step = np.repeat(np.arange(n), self.n_tr)  # the step issuing each
        self.tr_at = np.arange(len(tr_step)) - lo[tr_step]  # its place among the step's
        kinds = np.stack(
            [
                np.asarray(tmpl.tr_bytes[: len(tr_step)], dtype=np.int64),
                np.asarray(tmpl.tr_op[: len(tr_step)], dtype=np.int64),
                np.asarray(hit_counts[: len(tr_step)], dtype=np.int64),
            ],
            axis=1,
        )
        # each transfer's (bytes, op, hits) as one 24-byte element: compared a row at a time,
        # twice as fast as rows of three ints
        self.kinds = kinds.view(np.dtype((np.void, kinds.itemsize * 3))).reshape(-1)
        self.w_step = w_step = np.repeat(np.arange(n), self.n_wait)
        waited = np.asarray(tmpl.wait_idx[: int(ptr[n])], dtype=np.int64)
        self.waited = waited - lo[w_step]  # relative to the step's first transfer
        self.w_at = np.arange(len(w_step)) - ptr[w_step]

    def __getitem__(self, k: int) -> list[int]:
        run = self.runs.get(k)
        if run is None:
            run = self.runs[k] = self._period(k) if self.n else []
        return run

    def _period(self, k: int) -> list[int]:
        n, lo, ptr, tr_step, w_step = self.n, self.lo, self.ptr, self.tr_step, self.w_step
        m = max(0, n - k)  # steps b with a step b + k
        b = np.arange(m)
        same = (
            (self.comp_s[b] == self.comp_s[b + k])
            & (self.n_tr[b] == self.n_tr[b + k])
            & (self.n_wait[b] == self.n_wait[b + k])
        )
        t = np.flatnonzero(tr_step < m)
        t = t[same[tr_step[t]]]
        there = lo[tr_step[t] + k] + self.tr_at[t]
        differ = self.kinds[t] != self.kinds[there]
        same[tr_step[t[differ]]] = False
        w = np.flatnonzero(w_step < m)
        w = w[same[w_step[w]]]
        there = ptr[w_step[w] + k] + self.w_at[w]
        same[w_step[w[self.waited[w] != self.waited[there]]]] = False
        # from b: steps until the first that differs (the run's length)
        nxt = np.where(same, m, b)
        nxt = np.minimum.accumulate(nxt[::-1])[::-1] if m else nxt
        run = np.zeros(n, dtype=np.int64)
        run[:m] = nxt - b
        return run.tolist()


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
    """Two of Group.state's in-flight states alike: the same transfers (from the issue front) in
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


class Group:
    """A group of m CTAs of one template, launched together, stepping through its ops: the
    transfers its computes release, the computes waiting for the transfers before them.

    `hit_counts[i]`: how many of the m CTAs find transfer i in L2 (loads only). `regions`: a
    CTA's own transfer regions for the timeline (else the template's). `cohort`: the exact
    path's lockstep with the group's other CTAs, each its own process.
    """

    def __init__(self, links, k, tmpl, rows, hit_counts, m, cta, sm, counters, cohort, regions):
        self.links, self.env = links, links.env
        # hits and regions come in the program's order of transfers; the template issues them
        # in its own (prepare)
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
        self.repeats: Repeats | None = None  # where rounds are skipped
        self.busy_until: float | None = None  # the end of the compute running, if one is
        self.unissued = False  # a compute has ended and its transfers are not issued yet
        # rounds skipped alone: (front, period, rounds, one round's seconds) each time
        self.skips: list[tuple[int, int, int, float]] = []
        # alone: (clock, L2-path bytes, DRAM bytes served) when the first compute with work
        # starts, when the last ends and when the last transfer does (engine_stretch.phases)
        self.marks: list[tuple[float, float, float]] = []

    def run(self, alone: bool, rounds: Rounds | None = None):
        """The group's process. `alone`: nothing else runs on the GPU until it ends, so a
        loop's rounds that leave the transfers in flight as they found them are timed at once
        (engine.py's module docstring), their time added at the end. `rounds`: the groups
        sharing the GPU in this kernel, whose rounds are skipped together (Rounds)."""
        env, tmpl = self.env, self.tmpl
        if alone or rounds is not None:
            self.track, self.repeats = {}, Repeats(tmpl, self.hit_counts)
        if rounds is not None:
            rounds.join(self)
        history: dict[int, tuple] = {}  # step boundary -> (time, state in flight)
        deferred = 0.0
        self.issue()
        events = self.events  # one list for the group's life (skip_rounds moves within it)
        while self.done < len(tmpl.comp_s):
            pending = [
                events[i]
                for i in tmpl.waits(self.done)
                if events[i] is not None and not events[i].processed
            ]
            if len(pending) == 1:
                yield pending[0]
            elif pending:
                yield simpy.AllOf(env, pending)
            c = self.done  # (rounds skipped meanwhile moved it on)
            if alone and not self.marks and tmpl.comp_s[c] > 0:
                self.mark()  # the first compute with work starts: the prologue ends
            note = self.note_compute(c)
            if tmpl.comp_s[c] > 0:
                self.busy_until = env.now + tmpl.comp_s[c]
                yield env.timeout(tmpl.comp_s[c])
                self.busy_until = None
            if note is not None:
                note[1] = env.now
            self.done += 1
            self.unissued = True
            if alone and len(self.marks) == 1 and c >= tmpl.last_busy:
                self.mark()  # the last compute with work ended: the epilogue begins
            if alone:
                history[self.done] = (env.now, self.state())
                history.pop(self.done - MAX_PERIOD - 1, None)
                skipped = self.skip_rounds(history)
                if skipped:
                    deferred += skipped
                    history = {self.done: (env.now, self.state())}
            if rounds is not None:
                rounds.boundary(self)
            self.unissued = False
            self.issue()
        if rounds is not None:
            rounds.draining(self)
        self.advance_tail()
        pending = [e for e in self.events[self.tail :] if e is not None and not e.processed]
        if pending:
            yield simpy.AllOf(env, pending)
        if alone:
            self.mark()
        if rounds is not None:
            rounds.leave(self)
        if deferred:
            yield env.timeout(deferred)

    def mark(self) -> None:
        """Note the clock and the bytes the links have served so far (alone, they are the
        group's own)."""
        links = self.links
        self.marks.append((self.env.now, links.l2.served_now(), links.dram.served_now()))

    def issue(self) -> None:
        """Start every transfer the computes done so far release, in program order (gates
        never decrease along the issue order: the first gate past `done` ends the batch)."""
        tmpl, m, links = self.tmpl, self.m, self.links
        first = self.issued
        end = bisect.bisect_right(tmpl.tr_gate, self.done, first)
        if end == first:
            return
        if self.track is not None:  # forget the parts of the transfers done
            self.advance_tail()
        self.issued = end
        tr_bytes, tr_op = tmpl.tr_bytes, tmpl.tr_op
        timeline = links.timeline_on
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
                note = links.note(
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
                    ROLE_PRODUCER if tmpl.warpgroups >= 2 and op == OP_LOAD else ROLE_CTA,
                )
            batch.append((nbytes, m - h, h, note))
        counters = self.counters
        counters[0] += read
        counters[1] += l2
        counters[2] += write
        own = links.start(batch, self.track)
        if self.cohort is not None:
            own = [self.cohort.join(first + j, e) for j, e in enumerate(own)]
        self.events[first:end] = own

    def hits(self, i: int) -> int:
        """How many of the m CTAs find transfer i in L2 (a store never does)."""
        return int(self.hit_counts[i]) if self.tmpl.tr_op[i] in (OP_LOAD, OP_ATOMIC) else 0

    def note_compute(self, c: int):
        """Compute c's timeline row, to be closed when it ends (None without a timeline). A
        warp-specialised kernel's step gets a row per warpgroup and phase instead, each with
        its own start and end (pipes.phases), and None is returned; its loads are the
        producer warpgroup's rows (ROLE_PRODUCER)."""
        if not self.links.timeline_on:
            return None
        tmpl = self.tmpl
        r = self.rows[tmpl.comp_rows[c]]

        def note(start, role):
            return self.links.note(
                start,
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
                role,
            )

        if tmpl.comp_pipes is None:
            return note(self.env.now, ROLE_CTA)
        t, v, e = (float(x) for x in tmpl.comp_pipes[c])
        for w, phase, a, b in phases(t, v, e, tmpl.warpgroups, tmpl.overlaps):
            if b <= a:  # a phase with no work (the accumulators' initialisation)
                continue
            row = note(self.env.now + a, role_code(w, phase))
            if row is not None:
                row[1] = self.env.now + b
        return None

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
        """Move `tail` past the transfers that are done (stores end in their own time),
        forgetting their parts (`track` holds those of the transfers in flight only)."""
        events, track = self.events, self.track
        while self.tail < self.issued and (
            events[self.tail] is None or events[self.tail].processed
        ):
            if track is not None and events[self.tail] is not None:
                track.pop(events[self.tail], None)
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

    def skip_rounds(self, history: dict) -> float:
        """At the boundary after compute c - 1: when steps c - k to c - 1 left the group as
        they found it, shifted in time, on a GPU running nothing else, and the steps after them
        repeat them, each further round takes the same time and moves the same bytes. They are
        timed at once: the group goes on from the step after them with its transfers in flight
        renumbered. Returns their time (0 when nothing was skipped)."""
        c = self.done
        for period in range(1, MAX_PERIOD + 1):
            rounds = self.rounds_left(period) if c - period in history else 0
            if not rounds or not _same_state(history[c - period][1], history[c][1]):
                continue
            one = self.env.now - history[c - period][0]
            self.skips.append((self.front(), period, rounds, one))
            self.advance(self.front(), period, rounds)
            return one * rounds
        return 0.0

    def front(self) -> int:
        """x such that the transfers issued so far are those released once x computes ran:
        `done`, or `done - 1` between a compute's end and the issue that follows it."""
        return self.done - 1 if self.unissued else self.done

    def rounds_left(self, period: int) -> int:
        """How many rounds of `period` steps after the last one repeat it (see Repeats)."""
        start = self.front() + 1 - period
        return self.repeats[period][start] // period if start >= 0 else 0

    def advance(self, x: int, period: int, rounds: int) -> None:
        """Skip `rounds` rounds of the `period` steps that issued through x (their bytes
        counted, the transfers in flight renumbered past them, `done` moved on)."""
        tmpl, same = self.tmpl, rounds * period
        for b in range(x + 1 - period, x + 1):
            for i, d in enumerate(self.step_delta(b)):
                self.counters[i] += d * rounds
        shift = tmpl.issued_at[x + same] - tmpl.issued_at[x]
        events, lo, hi = self.events, self.tail, self.issued
        moved = events[lo:hi]
        events[lo:hi] = [None] * len(moved)
        events[lo + shift : hi + shift] = moved
        self.tail, self.issued = lo + shift, hi + shift
        self.done += same


class Rounds:
    """The groups sharing the GPU in one kernel, whose rounds are skipped together.

    A group alone skips its own rounds (Group.skip_rounds); groups sharing the GPU cannot, as
    each one's transfers share the links with the others'. But when every group is in a loop
    and, one to MAX_PERIOD steps of the first group later, the whole GPU is as it was (every
    group's transfers in flight, each in the same phase with the same latency and bytes
    left, every compute running with the same time left), shifted in time, and each group's
    next steps repeat the ones it just ran, the GPU repeats that round: the rounds all groups
    still repeat are timed at once, their bytes counted, and the kernel's end moves by their
    time (the last group left, alone, as Group.skip_rounds would). No group ends or starts
    inside the skipped rounds, and CTAs waiting for a slot wait for a group's end, so
    everything after them (the next launches included) happens as it would have, that much
    later: the kernel's waves share one Rounds. A group past its last compute still has
    transfers on the links (its last stores), which take bandwidth from the others until
    they end: no round repeats until it has drained (skipping then, at the pace the drain
    leaves, ran the others' loops too slowly: 0.14% on flash-attn 1's sequence-parallel
    backward at 1k tokens, batch 2 x 8 heads).

    Recording a state costs a walk over every group's transfers in flight, and a state is only
    ever compared with one recorded at most MAX_PERIOD boundaries before it with no group
    starting or ending in between. So states are recorded only once CALM boundaries have
    passed since the last start or end: a kernel whose CTAs end out of step (causal attention
    in the libraries' head-major grid order: a CTA starts somewhere on the GPU every few steps
    of the first group) records none, where it recorded every group's state at each of the
    first group's steps for no skip (a fifth of flash-attn-2's causal forward at batch 4 x 32
    heads x 4k tokens, d 128). Elsewhere the first skip of a quiet stretch comes CALM
    boundaries later than it could; what follows it is the same.
    """

    def __init__(self, env: simpy.Environment):
        self.env = env
        self.groups: list[Group] = []  # running, in launch order
        self.history: dict[int, tuple] = {}  # the first group's step -> (time, state, dones)
        self.skipped_s = 0.0  # the rounds' time, added at the kernel's end
        self.drains = 0  # groups past their last compute, their last transfers in flight
        self.calm = 0  # the first group's boundaries since a group last started or ended

    def join(self, group: Group) -> None:
        self.groups.append(group)
        self.forget()

    def draining(self, group: Group) -> None:
        """`group` ran its last compute; its last transfers are still on the links, where they
        take bandwidth from the others until they end: no round repeats meanwhile."""
        self.drains += 1
        self.forget()

    def leave(self, group: Group) -> None:
        """`group` ended, its last transfers too (it drained)."""
        self.groups.remove(group)
        self.drains -= 1
        self.forget()

    def forget(self) -> None:
        """The GPU changed (a group started, ended or drains): no earlier state can recur."""
        self.history.clear()
        self.calm = 0

    def state(self) -> list:
        """Every group's state: its transfers in flight (Group.state), whether a compute has
        just ended, and the time left of the compute it runs (None: it waits)."""
        now = self.env.now
        return [
            (g.state(), g.unissued, None if g.busy_until is None else g.busy_until - now)
            for g in self.groups
        ]

    def boundary(self, group: Group) -> None:
        """After a compute of `group`: at the first group's step boundaries, skip the rounds
        the GPU repeats (see the class docstring)."""
        if group is not self.groups[0] or self.drains:
            return
        self.calm += 1
        if self.calm <= CALM:
            return
        c, now = group.done, self.env.now
        state, dones = self.state(), [g.done for g in self.groups]
        self.history[c] = (now, state, dones)
        self.history.pop(c - MAX_PERIOD - 1, None)
        for period in range(1, MAX_PERIOD + 1):
            old = self.history.get(c - period)
            if old is None:
                continue
            steps = [d - d0 for d, d0 in zip(dones, old[2], strict=True)]
            if min(steps) < 1 or max(steps) > MAX_PERIOD or not _same_gpu(old[1], state):
                continue
            rounds = min(g.rounds_left(k) for g, k in zip(self.groups, steps, strict=True))
            if rounds < 1:
                continue
            for g, k in zip(self.groups, steps, strict=True):
                g.advance(g.front(), k, rounds)
            self.skipped_s += (now - old[0]) * rounds
            self.history = {group.done: (now, self.state(), [g.done for g in self.groups])}
            return


def _same_gpu(a: list, b: list) -> bool:
    """Two of Rounds.state's states alike (each group's as _same_state says, times left to
    STATE_REL)."""
    for (sa, ua, ta), (sb, ub, tb) in zip(a, b, strict=True):
        if ua != ub or (ta is None) != (tb is None):
            return False
        if ta is not None and abs(ta - tb) > STATE_REL * max(abs(ta), abs(tb), 1e-300):
            return False
        if not _same_state(sa, sb):
            return False
    return True
