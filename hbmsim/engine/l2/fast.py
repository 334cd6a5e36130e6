"""L2 hits of long kernels from a few of their waves: the LRU's answer, not an estimate.

Why: the L2 model (l2/lru.py) decides every load of every CTA, and on a long kernel those loads are
millions of the same situations: attention's (batch, head) instances run the same tiles moved
by one offset per tensor. This module computes the hits of such a kernel from its first and
last waves only, and proves on the run that the skipped waves hit exactly like a reference
stretch of waves it did compute.

The argument (byte-capacity LRU, bulk.bulk_hits): an access hits iff its tile fits and the
distinct fitting tiles touched since its previous touch, plus itself, fit in the capacity.
Take a kernel whose CTA c + P runs CTA c's ops with every tile moved by one shift per tensor
(`KernelWork.period`, found from the plan's class formula). With waves of `slots` CTAs in
the cache's logical order (lru.logical_order), the access stream of full waves then repeats,
translated, every W = lcm(P, slots) / slots waves: position t + L touches T(tile at t), where
T moves each tensor's tiles by its shift (one-to-one). Let S be the kernel's first position
and R = [B, B + L) a reference stretch of W full waves. For v in R:

- if v's previous touch p lies at or after S, then for every translate v + mL (still in full
  waves) the previous touch is p + mL and the tiles between are the translates of those
  between p and v: same distinct bytes, same answer;
- if it lies before S (or nowhere), the tiles between include those of [S, v), and those of
  [S + mL, v + mL) for its translates; when their distinct bytes already leave no room for
  v's tile, v and every translate miss.

When every v in R is one of the two, each skipped full wave's hits are its reference wave's.

A kernel whose only period is longer than it (a head of a kernel whose CTAs run over all
heads: the step from one head's last row block to the next head's first moves a shared mask
back) may still translate itself inside runs of the launch order (`KernelWork.segments`:
between two wraps of an axis, CTA c + P is CTA c moved by one shift per tensor). Each run is
then a kernel of its own for the argument, S being its first full wave: a reference stretch
after enough of its waves, its middle waves skipped, a new stretch of real stream from its
tail on (which also holds the history of the run after it).

The stream actually computed is the kernels' heads (up to R's end) and tails (enough waves
that the next kernel's accesses see the same history); a position whose window reaches into
skipped waves is trusted only if its previous touch lies in its own stretch of real, unbroken
stream, or if that stretch alone already leaves no room (then it misses either way); an
untrusted one in full waves takes its reference wave's answer, and anything else sends the
sizes up, or the whole stream to the plain computation (`lru.kernel_hits`'s), in which a
one-class kernel is decided by its runs' first accesses (l2/runs.py), or from one CTA's stream
where its CTAs work on tiles of their own (l2/lockstep.py).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from ...interpret.trace import OP_ATOMIC, OP_LOAD
from ..workload.work import KernelWork
from .budget import BYTES_PER_ACCESS, check_decided, least_decided
from .bulk import positions_dtype, previous_touches
from .classwave import ClassWave
from .lockstep import LockstepWave
from .lru import lru_answer, tile_ids
from .order import in_logical_order, joined_streams
from .stream import (
    WholeStream,
    check_stream_budget,
    decide_unbroken,
    decided_accesses,
)
from .table import HitTable

# Stretches computed each side of the skipped waves: this many L2 capacities of bytes at first,
# GROWTH times more for a kernel whose stretch proved too short (and for the kernel before it),
# no skipping past MAX_HISTORY; at most MAX_TRIES tries before every wave is computed.
HISTORY, GROWTH, MAX_HISTORY, MAX_TRIES = 1.5, 4.0, 100.0, 8


class _Plan:
    """Which waves of one kernel are computed: all but its skipped stretches. A stretch
    (first, head, tail, ref, span, end), in waves: the full waves [first, end) of a run of
    the launch order that translates itself every `span` waves (the whole kernel for a
    period of it, `KernelWork.period`, kind "period"; else each run between two wraps of an
    axis for a local period, `KernelWork.segments`, kind "segments"), its reference stretch
    [ref, ref + span) after `need` waves of history, and [head, tail) skipped, each wave
    there hitting as its reference wave."""

    def __init__(
        self,
        kw: KernelWork,
        slots: int,
        capacity: int,
        history: float,
        local: bool = True,
        wave_bytes: Callable[[], int] | None = None,
    ):
        """`local`: also try the local periods when the kernel's own does not skip.
        `wave_bytes`: one wave's distinct bytes when asked (a caller planning the kernel
        more than once counts them once); by default counted here."""
        self.slots = slots
        self.waves = math.ceil(kw.n_ctas / slots)
        self.full = kw.n_ctas // slots
        self.stretches: list[tuple[int, int, int, int, int, int]] = []
        self.kind: str | None = None
        if history > MAX_HISTORY:
            return
        candidates = []  # (kind, the runs (first, end) of full waves, their span)
        if kw.period:
            span = min(math.lcm(p, slots) for p in kw.period) // slots
            candidates.append(("period", [(0, self.full)], span))
        if local:
            candidates += _local_candidates(kw, slots)
        need = None
        for kind, runs, span in candidates:
            if self.kind == "period":
                break  # a period of the whole kernel is taken as it comes
            if all(end - first < 2 * span + 2 for first, end in runs):
                continue  # no room for a reference stretch and a skip
            if need is None:
                counted = wave_bytes() if wave_bytes else distinct_bytes(kw, slots)
                # (a count cut at MAX_HISTORY capacities gives one wave, as the full one would)
                need = math.ceil(history * capacity / max(counted, 1))
            stretches = []
            for first, end in runs:
                ref, tail = first + need, end - need - span
                if tail > ref + span:
                    stretches.append((first, ref + span, tail, ref, span, end))
            if _skipped(stretches) > _skipped(self.stretches):
                self.stretches, self.kind = stretches, kind

    @property
    def skip(self) -> bool:
        return bool(self.stretches)

    def computed_count(self, n_ctas: int) -> int:
        """len(computed(n_ctas)), by arithmetic: the skipped waves are full."""
        return n_ctas - sum((tail - head) * self.slots for _f, head, tail, *_ in self.stretches)

    def computed(self, n_ctas: int) -> np.ndarray:
        if not self.stretches:
            return np.arange(n_ctas)
        keep = np.ones(self.waves, dtype=bool)
        for _first, head, tail, *_ in self.stretches:
            keep[head:tail] = False
        return np.flatnonzero(keep[np.arange(n_ctas) // self.slots])


def _skipped(stretches) -> int:
    return sum(tail - head for _first, head, tail, *_ in stretches)


def _local_candidates(kw: KernelWork, slots: int) -> list:
    """Per local period (KernelWork.segments): ("segments", its runs' full waves (first,
    end), its span in waves). Only the runs longer than two spans: no shorter one holds a
    reference stretch and a skip (a run of a few CTAs each, a kernel's million heads, is
    none, and is not listed one by one)."""
    out = []
    for p, length in kw.segments:
        span = math.lcm(p, slots) // slots
        k = np.arange(kw.n_ctas // length, dtype=np.int64)
        first, end = -(-k * length // slots), (k + 1) * length // slots
        long = end - first > 2 * span
        runs = list(zip(first[long].tolist(), end[long].tolist(), strict=True))
        out.append(("segments", runs, span))
    return out


def _local_floor(kw: KernelWork, slots: int) -> int:
    """At least the accesses a kernel's local periods leave to decide: every run keeps a
    reference stretch and a wave of history each side of its skip (all of a kernel none of
    whose runs can skip)."""
    per_cta = int(kw.transfers(np.arange(1))[0]) if kw.n_ctas else 0
    kept = kw.n_ctas
    for _kind, runs, span in _local_candidates(kw, slots):
        skippable = sum(max(0, end - first - (2 * span + 2)) for first, end in runs)
        kept = min(kept, kw.n_ctas - skippable * slots)
    return kept * per_cta


def hit_tables(
    kernels: list[KernelWork], slots: list[int], capacity: int, max_bytes: int | None = None
) -> list[HitTable]:
    """Per kernel, a HitTable with the LRU's hits (see the module docstring). Refused, with
    the estimate, when the accesses to decide would take more than `max_bytes` of memory."""
    history = [HISTORY] * len(kernels)
    pairs = zip(kernels, slots, strict=True)
    most = None if max_bytes is None else max_bytes // BYTES_PER_ACCESS  # accesses it allows
    lockstep = [
        LockstepWave.of(kw, max(1, s), capacity, most) or ClassWave.of(kw, max(1, s), capacity)
        for kw, s in pairs
    ]
    whole = None

    @functools.cache
    def wave_bytes(k: int) -> int:  # counted once for every plan of kernel k
        return distinct_bytes(kernels[k], slots[k], MAX_HISTORY * capacity)

    # Local periods (_Plan's "segments") are tried where some kernel skips by a period of
    # its own anyway, and otherwise only where they could leave fewer accesses to decide
    # than deciding every wave (`WholeStream`) would: their floor is known before any wave's
    # bytes are counted.
    own = [
        _Plan(kw, s, capacity, HISTORY, False, functools.partial(wave_bytes, k))
        for k, (kw, s) in enumerate(zip(kernels, slots, strict=True))
    ]
    local = any(p.skip for p in own)
    if not local:
        whole = WholeStream(kernels, slots, capacity, lockstep, max_bytes)
        floor = sum(_local_floor(kw, s) for kw, s in zip(kernels, slots, strict=True))
        local = floor < whole.cost
    for attempt in range(MAX_TRIES):
        plans = [
            own[k]
            if attempt == 0 and own[k].skip
            else _Plan(kw, s, capacity, h, local, functools.partial(wave_bytes, k))
            for k, (kw, s, h) in enumerate(zip(kernels, slots, history, strict=True))
        ]
        if not any(p.skip for p in plans):
            break
        if whole is not None:  # only local periods skip: within the budget and cheaper
            cost = decided_accesses(kernels, plans, lockstep)
            over = max_bytes is not None and cost * BYTES_PER_ACCESS > max_bytes
            if over or cost >= whole.cost:
                break
        check_stream_budget(kernels, plans, max_bytes, lockstep)
        out = _try(kernels, plans, capacity, lockstep)
        if not isinstance(out, int):
            return out
        for k in (out - 1, out):  # too short: its own stretches, or the history before it
            if k >= 0:
                history[k] *= GROWTH
    return decide_unbroken(
        kernels,
        slots,
        capacity,
        max_bytes,
        whole or WholeStream(kernels, slots, capacity, lockstep, max_bytes),
    )


def _try(kernels, plans, capacity, lockstep) -> list[HitTable] | int:
    """The tables, or the first kernel whose hits could not be trusted. A kernel that skips
    no wave but has a LockstepWave lays out its waves' heads and tails only."""
    parts, starts, ops, keys, nbytes = _computed_stream(kernels, plans, lockstep)
    n = len(ops)
    prev = previous_touches(keys)
    flat = lru_answer(ops, keys, nbytes, capacity, prev)
    seg_start, heads = _segments(parts, plans, starts, n)
    del keys
    load = (ops == OP_LOAD) | (ops == OP_ATOMIC)
    fits = nbytes <= capacity
    crowded = _since(prev, seg_start, nbytes, fits)
    crowded += nbytes
    crowded = crowded > capacity
    trusted = ~load | ~fits | (seg_start == 0) | (prev >= seg_start) | crowded | ~heads
    stream = (prev, load, fits, nbytes, capacity)
    tables = []
    for k, (kw, p) in enumerate(zip(kernels, plans, strict=True)):
        a, b = int(starts[k]), int(starts[k + 1])
        if isinstance(parts[k], LockstepWave):
            if not trusted[a:b].all():
                return k
            tables.append(parts[k].table(flat[a:b], capacity))
            continue
        table = _kernel_table(kw, p, parts[k], a, flat[a:b], trusted[a:b], stream)
        if table is None:
            return k
        tables.append(table)
    return tables


def _computed_stream(kernels, plans, lockstep):
    """The stream `_try` decides: per kernel its computed CTAs in logical order (or a
    LockstepWave's heads and tails), joined end to end: (parts, each kernel's first position,
    ops, tile ids, bytes)."""
    parts = []  # per kernel: computed CTAs, their waves in logical order, the permutation
    ops, keys, nbytes = [], [], []
    for kw, p, lock in zip(kernels, plans, lockstep, strict=True):
        if not p.skip and lock is not None:
            part, op, key, size = lock.build()
        else:
            part, op, key, size = in_logical_order(kw, p.computed(kw.n_ctas), p.slots)
        parts.append(part)
        ops.append(op)
        keys.append(key)
        nbytes.append(size)
    return (parts, *joined_streams(ops, keys, nbytes))


def _segments(parts, plans, starts, n: int):
    """(each position's segment of real, unbroken stream, by its first position; whether a
    table takes the position's answer from the stream): a new segment starts after each
    skipped stretch and each LockstepWave's left-out middle."""
    seg_start = np.zeros(n, dtype=positions_dtype(n))
    heads = np.ones(n, dtype=bool)
    for k, p in enumerate(plans):
        if isinstance(parts[k], LockstepWave):
            at = int(starts[k])
            for head, tail in parts[k].layout():
                heads[at + head : at + head + tail] = False
                if tail:  # the wave's middle is left out
                    seg_start[at + head] = at + head
                at += head + tail
        else:
            for _first, _head, tail, *_ in p.stretches:
                at = int(starts[k]) + _first_at_least(parts[k][1], tail)
                seg_start[at] = at
    np.maximum.accumulate(seg_start, out=seg_start)
    return seg_start, heads


def _kernel_table(kw, p, part, a: int, flat, ok, stream) -> HitTable | None:
    """One kernel's table from its stretch of the stream (starting at position `a`: `flat`
    its answers, `ok` which are trusted), its skipped waves taking their reference waves'
    answers; None where an answer cannot be trusted."""
    prev, load, fits, nbytes, capacity = stream
    ctas, wave, order = part
    trusted = ok
    hits = np.empty(len(flat), dtype=bool)
    skip = None
    if p.skip:
        s = p.slots
        lent = np.zeros(len(flat), dtype=bool)
        for first, _head, tail, ref, span, end in p.stretches:
            if not _periodic(a, wave, first, ref, span, prev, load, fits, nbytes, capacity):
                return None
            # an untrusted answer in full waves of the tail takes its reference wave's
            # (the stream is wave-major: those waves are one slice of it)
            v = slice(_first_at_least(wave, tail), _first_at_least(wave, end))
            lent[v] |= ~ok[v]
        if (~ok & ~lent).any():
            return None
        ok = ok | lent
        skip = [(h * s, t * s, r * s, span * s) for _f, h, t, r, span, _e in p.stretches]
    elif not ok.all():
        return None
    hits[order] = flat
    table = HitTable(kw, ctas, hits, skip)
    if skip is not None and (~trusted).any():
        fix = np.zeros(len(flat), dtype=bool)
        fix[order] = ~trusted
        at = np.flatnonzero(fix)
        owner = np.searchsorted(table.starts, at, side="right") - 1
        c = ctas[owner]
        ref = c.copy()
        for (_h, _t, r, period), (_f, _h2, tail, *_r, end) in zip(skip, p.stretches, strict=True):
            inside = (c >= tail * p.slots) & (c < end * p.slots)
            ref[inside] = r + (c[inside] - r) % period
        j = np.searchsorted(ctas, ref)
        hits[at] = hits[table.starts[j] + (at - table.starts[owner])]
    return table


def _periodic(a, wave, first, ref, span, prev, load, fits, nbytes, capacity) -> bool:
    """The module docstring's condition on a reference stretch [ref, ref + span) of a run
    whose real stream starts at wave `first` (S): every access there is a store, a tile that
    does not fit, one whose previous touch lies at or after S, or one whose tiles touched
    first since S already leave no room for it."""
    start = a + _first_at_least(wave, first)
    lo = a + _first_at_least(wave, ref)
    hi = a + _first_at_least(wave, ref + span)
    v = slice(lo, hi)
    w_first = np.where(fits[start:hi] & (prev[start:hi] < start), nbytes[start:hi], 0)
    before = np.concatenate([[0], np.cumsum(w_first)])[lo - start : hi - start]
    periodic = ~load[v] | ~fits[v] | (prev[v] >= start) | (before + nbytes[v] > capacity)
    return bool(periodic.all())


def _first_at_least(waves: np.ndarray, w: int) -> int:
    """The first position of a stream's waves (ascending) at wave `w` or later. The value is
    given in the array's own dtype: numpy casts the whole array to a Python int's int64
    first, a copy of a stream tens of millions long for each search."""
    return int(np.searchsorted(waves, waves.dtype.type(w)))


def distinct_bytes(kw: KernelWork, slots: int, enough: float | None = None) -> int:
    """Bytes of the distinct tiles of one wave (the second, where there is one); with
    `enough`, those of its first CTAs once they reach it (a wave's history is sized from
    this, and past MAX_HISTORY capacities every size is one wave: a wave of the standard
    algorithm's P V at 1M tokens moves 169 GB over 21 M accesses).
    Counted a few CTAs at a time, keeping only the distinct tiles seen so far: a wave of fa2
    at 1M tokens is 13 M accesses (1.1 GB as arrays) over 33 k tiles."""
    first = slots if kw.n_ctas >= 2 * slots else 0
    end = min(first + slots, kw.n_ctas)
    per_cta = max(1, int(kw.transfers(np.arange(first, first + 1))[0])) if end > first else 1
    keys = np.zeros((0, 2), dtype=np.int64)  # the distinct tiles so far, and their bytes
    sizes = np.zeros(0, dtype=np.int64)
    counted, at, m = 0, first, 1
    while at < end:
        m = min(m, end - at, max(1, DISTINCT_CHUNK // per_cta))
        _c, _i, _o, key, nbytes = kw.accesses(np.arange(at, at + m))
        keys = np.concatenate([keys, key])
        sizes = np.concatenate([sizes, nbytes.astype(np.int64)])
        # ids from one call (their packing depends on the keys given), the seen tiles first
        _, keep = np.unique(tile_ids(keys), return_index=True)
        keys, sizes = np.take(keys, keep, axis=0), sizes[keep]
        counted = int(sizes.sum())
        if enough is not None and counted >= enough:
            break
        at += m
        m *= 2
    return counted


# accesses `distinct_bytes` lays out at a time
DISTINCT_CHUNK = 1 << 20


def _since(prev, seg_start, nbytes, fits) -> np.ndarray:
    """Distinct fitting bytes touched since each access's stretch began, before it (one
    prefix array and the answer, computed in place: a stream is tens of millions long)."""
    cum = np.zeros(len(prev) + 1, dtype=np.int64)
    np.multiply(nbytes, fits & (prev < seg_start), out=cum[1:])  # the stretch's first touches
    np.cumsum(cum[1:], out=cum[1:])
    out = cum[seg_start]
    np.subtract(cum[:-1], out, out=out)
    return out


__all__ = ["HitTable", "check_decided", "hit_tables", "least_decided"]
