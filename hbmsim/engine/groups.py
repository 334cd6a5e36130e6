"""A group of CTAs of one template stepping through its program: the engine's unit of work.

Why a module of its own: the simulation (simulation.py, launch.py) schedules kernels and CTAs onto
slots and owns the links; what one group does between its launch and its end (which transfers each
compute releases, what each compute waits for, a loop's repeated rounds timed at once) is a concern
of its own, and the longest part of the model. The fast path runs a cohort as one group with its
size as multiplicity; the exact path runs every CTA as a group of one, in lockstep with its cohort
(`Cohort`). docs/engine-model.md states the model both follow.
"""

from __future__ import annotations

import bisect

import simpy

from ..gpu.pipes import phases
from ..interpret.trace import OP_ATOMIC, OP_COMPUTE, OP_LOAD
from .limits import MAX_PERIOD
from .result import LEVEL_COMPUTE, LEVEL_DRAM, LEVEL_L2, ROLE_CTA, ROLE_PRODUCER, role_code
from .rounds import (
    Repeats,
    Rounds,
    RoundSkipping,
    moved_bytes,
)


class Cohort:
    """On the exact path: CTAs of one template launched together wait for each other at every
    transfer, as the fast path's single weighted group does (docs/engine-model.md, "Cohorts")."""

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


class Group(RoundSkipping):
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
        # starts, when the last ends and when the last transfer does (stretch.phases)
        self.marks: list[tuple[float, float, float]] = []

    def run(self, alone: bool, rounds: Rounds | None = None):
        """The group's process. `alone`: nothing else runs on the GPU until it ends, so a
        loop's rounds that leave the transfers in flight as they found them are timed at once
        (docs/engine-internals.md), their time added at the end. `rounds`: the groups
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
        read = l2 = write = 0  # what the batch adds to the counters, as moved_bytes says
        for i in range(first, end):
            nbytes, op, h = tr_bytes[i], tr_op[i], self.hits(i)
            moved = moved_bytes(nbytes, op, h, m)
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
