"""Repeated rounds of a loop timed at once, in one group (alone) or across a kernel's groups.

A loop's round of steps (a step: the transfers one compute releases, to the end of the next
compute) that leaves what is in flight as it found it, shifted in time, is repeated by its
identical successors in the same time: they are timed at once and the group goes on with its
transfers in flight renumbered. `Repeats` says how many steps repeat, `RoundSkipping` is the
group's side (its state, skipping its own rounds when alone), `Rounds` the GPU's side (the
groups sharing it skip together).
"""

from __future__ import annotations

import numpy as np
import simpy

from ..interpret.trace import OP_ATOMIC, OP_LOAD, OP_STORE
from .limits import MAX_PERIOD
from .template import Template

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


def moved_bytes(nbytes: int, op: int, h: int, m: int) -> tuple[int, int, int]:
    """(DRAM read, L2 hit, DRAM write) bytes of one transfer of m CTAs, h of which hit."""
    if op == OP_LOAD:
        return nbytes * (m - h), nbytes * h, 0
    if op == OP_STORE:  # written through to DRAM
        return 0, 0, nbytes * m
    if op == OP_ATOMIC:  # resolved in L2: a miss brings the tile in, and it is written back
        return nbytes * (m - h), nbytes * h, nbytes * (m - h)  # once; hits add in place
    return 0, 0, 0


STATE_REL = 1e-9  # in-flight states this close (bytes and latency left) are the same state


def same_state(a: list, b: list) -> bool:
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


class RoundSkipping:
    """A group's side of skipping rounds: its state in flight relative to its step and the
    clock, and its rounds skipped alone or with the GPU's (`Rounds`). Mixed into `Group`,
    whose fields (template, events, counters, issue front) it reads and moves."""

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

    def step_delta(self, b: int) -> list[int]:
        """What step b adds to the counters, as issue() adds it."""
        tmpl, delta = self.tmpl, [0, 0, 0]
        lo = tmpl.issued_at[b - 1] if b else 0
        for i in range(lo, tmpl.issued_at[b]):
            moved_by = moved_bytes(tmpl.tr_bytes[i], tmpl.tr_op[i], self.hits(i), self.m)
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
            if not rounds or not same_state(history[c - period][1], history[c][1]):
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
    leaves, would run the others' loops too slowly).

    Recording a state costs a walk over every group's transfers in flight, and a state is only
    ever compared with one recorded at most MAX_PERIOD boundaries before it with no group
    starting or ending in between. So states are recorded only once CALM boundaries have
    passed since the last start or end: a kernel whose CTAs end out of step (causal attention
    in the libraries' head-major grid order: a CTA starts somewhere on the GPU every few steps
    of the first group) records none, rather than every group's state at each of the first
    group's steps for no skip. Elsewhere the first skip of a quiet stretch comes CALM
    boundaries later than it could; what follows it is the same.
    """

    def __init__(self, env: simpy.Environment):
        self.env = env
        self.groups: list[RoundSkipping] = []  # running, in launch order
        self.history: dict[int, tuple] = {}  # the first group's step -> (time, state, dones)
        self.skipped_s = 0.0  # the rounds' time, added at the kernel's end
        self.drains = 0  # groups past their last compute, their last transfers in flight
        self.calm = 0  # the first group's boundaries since a group last started or ended

    def join(self, group: RoundSkipping) -> None:
        self.groups.append(group)
        self.forget()

    def draining(self, group: RoundSkipping) -> None:
        """`group` ran its last compute; its last transfers are still on the links, where they
        take bandwidth from the others until they end: no round repeats meanwhile."""
        self.drains += 1
        self.forget()

    def leave(self, group: RoundSkipping) -> None:
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

    def boundary(self, group: RoundSkipping) -> None:
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
            if min(steps) < 1 or max(steps) > MAX_PERIOD or not same_gpu(old[1], state):
                continue
            rounds = min(g.rounds_left(k) for g, k in zip(self.groups, steps, strict=True))
            if rounds < 1:
                continue
            for g, k in zip(self.groups, steps, strict=True):
                g.advance(g.front(), k, rounds)
            self.skipped_s += (now - old[0]) * rounds
            self.history = {group.done: (now, self.state(), [g.done for g in self.groups])}
            return


def same_gpu(a: list, b: list) -> bool:
    """Two of Rounds.state's states alike (each group's as same_state says, times left to
    STATE_REL)."""
    for (sa, ua, ta), (sb, ub, tb) in zip(a, b, strict=True):
        if ua != ub or (ta is None) != (tb is None):
            return False
        if ta is not None and abs(ta - tb) > STATE_REL * max(abs(ta), abs(tb), 1e-300):
            return False
        if not same_state(sa, sb):
            return False
    return True
