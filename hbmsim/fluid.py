"""Fluid bandwidth sharing for the SimPy engine: one link, many concurrent transfers."""

from __future__ import annotations

import heapq

import simpy


class FluidLink:
    """Equal sharing of one bandwidth among concurrent transfers, each under a rate cap.

    A flow stands for `weight` identical transfers of `nbytes` each. Every transfer on the link
    progresses at the same rate, min(cap, bandwidth / total weight), so the link keeps one
    "virtual byte" clock (bytes served per transfer so far) and a heap of the virtual times at
    which flows finish: O(log flows) per event. Stale wake-ups are ignored by generation.
    """

    def __init__(self, env: simpy.Environment, bytes_per_s: float):
        self.env = env
        self.bandwidth = bytes_per_s
        self.cap = bytes_per_s
        self.heap: list[tuple[float, int, int, simpy.Event]] = []  # (finish, id, weight, event)
        self.weight = 0
        self.virtual = 0.0  # bytes served to each transfer since the link was created
        self.last = 0.0
        self.generation = 0
        self.next_id = 0

    def rate(self) -> float:
        return min(self.cap, self.bandwidth / self.weight) if self.weight else 0.0

    def _advance(self) -> None:
        now = self.env.now
        if self.weight and now > self.last:
            self.virtual += self.rate() * (now - self.last)
        self.last = now

    def start(self, nbytes: float, weight: int, done: simpy.Event) -> None:
        """Begin a flow now; `done` succeeds when its bytes have been served."""
        if nbytes <= 0:
            done.succeed()
            return
        self._advance()
        heapq.heappush(self.heap, (self.virtual + nbytes, self.next_id, weight, done))
        self.next_id += 1
        self.weight += weight
        self._plan()

    def _plan(self) -> None:
        self.generation += 1
        if not self.heap:
            return
        gen = self.generation
        wake = self.env.timeout(max(0.0, (self.heap[0][0] - self.virtual) / self.rate()))
        wake.callbacks.append(lambda _e: self._wake(gen))

    def _wake(self, gen: int) -> None:
        if gen != self.generation:
            return
        self._advance()
        limit = self.virtual * (1 + 1e-12) + 1e-6
        heap = self.heap
        while heap and heap[0][0] <= limit:
            _, _, weight, ev = heapq.heappop(heap)
            self.weight -= weight
            ev.succeed()
        self._plan()
