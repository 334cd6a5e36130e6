"""Fluid bandwidth sharing for the SimPy engine: one link, many concurrent transfers."""

from __future__ import annotations

import heapq
import math

import simpy

CLOCK_STEPS = 2  # a flow this many clock steps from done at the current rate is done now
VIRTUAL_STEPS = 8  # ... or this many steps of the virtual byte clock's own resolution


class FluidLink:
    """Equal sharing of one bandwidth among concurrent transfers, each under a rate cap.

    A flow stands for `weight` identical transfers of `nbytes` each. Every transfer on the link
    progresses at the same rate, min(cap, bandwidth / total weight), so the link keeps one
    "virtual byte" clock (bytes served per transfer so far) and a heap of the virtual times at
    which flows finish: O(log flows) per event. Stale wake-ups are ignored by generation.

    Time cannot stall. Simulated time is a float whose step grows with it (about 2e-16 of the
    current time), so a wake-up planned less than one step ahead fires at the same instant
    and serves nothing; a fixed byte tolerance would let a flow with a sliver of bytes left
    re-arm forever. Instead a flow is done once what it has left is within what the link
    serves in CLOCK_STEPS steps of the clock at the current time (or within the virtual
    clock's own rounding), and every wake-up lies at least one step in the future. Finishing
    that early moves a flow's end by at most CLOCK_STEPS steps of the clock, the resolution
    time has anyway.

    One wake-up is pending at a time. A flow that starts while one is pending for no later
    than the link's next end leaves it be, rather than planning another and leaving the old
    to fire for nothing: the wake-up comes when it is due (the rate unchanged) or early (the
    rate fell), and then plans again. A kernel whose CTAs each start their own transfers (a
    CTA ends every few steps of causal attention in the libraries' grid order) starts about
    as many flows as wake-ups would be planned.
    """

    def __init__(self, env: simpy.Environment, bytes_per_s: float):
        self.env = env
        self.bandwidth = bytes_per_s
        self.cap = bytes_per_s
        self.heap: list[tuple[float, int, int, simpy.Event]] = []  # (finish, id, weight, event)
        self.weight = 0
        self.virtual = 0.0  # bytes served to each transfer since the link was last idle
        self.last = 0.0
        self.generation = 0
        self.next_id = 0
        self.wake_at: float | None = None  # when the pending wake-up fires (None: none is)
        self.served = 0.0  # bytes the link has served, all flows together (a demand profile)

    def remaining(self, done: simpy.Event) -> float | None:
        """Bytes the flow ending with `done` has left now (None: not on the link), read
        without moving the link's clocks."""
        now = self.env.now
        virtual = self.virtual + (self.rate() * (now - self.last) if now > self.last else 0.0)
        for finish, _id, _weight, ev in self.heap:
            if ev is done:
                return finish - virtual
        return None

    def served_now(self) -> float:
        """Bytes served up to now, read without moving the link's clocks."""
        now = self.env.now
        if not self.heap or now <= self.last:
            return self.served
        return self.served + self.rate() * self.weight * (now - self.last)

    def rate(self) -> float:
        return min(self.cap, self.bandwidth / self.weight) if self.weight else 0.0

    def _advance(self) -> None:
        now = self.env.now
        if not self.heap:  # idle: restart the virtual clock, so it never outgrows its bytes
            self.virtual = 0.0
        elif now > self.last:
            rate = self.rate()
            self.virtual += rate * (now - self.last)
            self.served += rate * self.weight * (now - self.last)
        self.last = now

    def start(self, nbytes: float, weight: int, done: simpy.Event) -> None:
        """Begin a flow now; `done` succeeds when its bytes have been served."""
        self.start_all([(nbytes, weight, done)])

    def start_all(self, flows) -> None:
        """Begin flows (nbytes, weight, done) now, in order, as `start` one by one would, but
        plan the next wake-up once: at one instant the clock does not move between them, so
        only the last plan would count (every earlier one a wake-up that fires for nothing)."""
        planned = False
        for nbytes, weight, done in flows:
            if nbytes <= 0:
                done.succeed()
                continue
            self._advance()
            heapq.heappush(self.heap, (self.virtual + nbytes, self.next_id, weight, done))
            self.next_id += 1
            self.weight += weight
            planned = True
        if planned:
            self._plan()

    def _slack(self) -> float:
        """Bytes left that count as done now: below what the clocks can still resolve."""
        now = self.env.now
        return CLOCK_STEPS * self.rate() * math.ulp(now) + VIRTUAL_STEPS * math.ulp(self.virtual)

    def _plan(self) -> None:
        if not self.heap:
            self.generation += 1
            self.wake_at = None
            return
        now = self.env.now
        delay = max(0.0, (self.heap[0][0] - self.virtual) / self.rate())
        if now + delay <= now:  # below the clock's step: the next representable instant
            delay = math.nextafter(now, math.inf) - now
        if self.wake_at is not None and self.wake_at <= now + delay:
            return  # the pending wake-up comes in time (see the class docstring)
        self.generation += 1
        gen = self.generation
        self.wake_at = now + delay
        wake = self.env.timeout(delay)
        wake.callbacks.append(lambda _e: self._wake(gen))

    def _wake(self, gen: int) -> None:
        if gen != self.generation:
            return
        self.wake_at = None
        self._advance()
        limit = self.virtual + self._slack()
        heap = self.heap
        while heap and heap[0][0] <= limit:
            _, _, weight, ev = heapq.heappop(heap)
            self.weight -= weight
            ev.succeed()
        self._plan()
