"""L2 hits of long kernels from a few of their waves: the LRU's answer, not an estimate.

Why: the L2 model (l2.py) decides every load of every CTA, and on a long kernel those loads are
millions of the same situations: attention's (batch, head) instances run the same tiles moved
by one offset per tensor. This module computes the hits of such a kernel from its first and
last waves only, and proves on the run that the skipped waves hit exactly like a reference
stretch of waves it did compute.

The argument (byte-capacity LRU, l2.bulk_hits): an access hits iff its tile fits and the
distinct fitting tiles touched since its previous touch, plus itself, fit in the capacity.
Take a kernel whose CTA c + P runs CTA c's ops with every tile moved by one shift per tensor
(`KernelWork.period`, found from the plan's class formula). With waves of `slots` CTAs in
the cache's logical order (l2.logical_order), the access stream of full waves then repeats,
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
sizes up, or the whole stream to the plain computation (`l2.kernel_hits`'s), in which a
one-class kernel is decided by its runs' first accesses (l2runs.py), or from one CTA's stream
where its CTAs work on tiles of their own (l2lockstep.py).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from ...errors import TooLargeToExecuteError
from ...gpu.occupancy import kernel_slots
from ...interpret.trace import OP_ATOMIC, OP_LOAD
from ..workload.work import KernelWork, distinct, key_elements, ranges
from .classwave import ClassWave
from .lockstep import LockstepWave
from .lru import (
    NUMPY_STEPS_PER_ACCESS,
    _tile_ids,
    joined_tile_ids,
    lru_answer,
    positions_dtype,
    previous_touches,
)
from .runs import PairedRunHitTable, PairedRuns, RunHitTable, RunStream, compressible

# Stretches computed each side of the skipped waves: this many L2 capacities of bytes at first,
# GROWTH times more for a kernel whose stretch proved too short (and for the kernel before it),
# no skipping past MAX_HISTORY; at most MAX_TRIES tries before every wave is computed.
HISTORY, GROWTH, MAX_HISTORY, MAX_TRIES = 1.5, 4.0, 100.0, 8
# Peak memory per access decided (the stream's ids, bytes and order, the bulk test's arrays),
# the whole run's peak resident memory over the accesses it decided: 72-104 bytes on streams
# of 10-35 M accesses, 131 on the paper's configuration (1.47 M, 183 MB, the interpreter
# included), 155 on flash-attn 1.x causal at 16k tokens (10.6 M, its long programs' engine
# state included)
BYTES_PER_ACCESS = 160


class HitTable:
    """One kernel's L2 hits for any of its CTAs: computed rows for the CTAs of the waves that
    were computed, and the reference wave's rows for a skipped CTA."""

    def __init__(self, kw: KernelWork, ctas: np.ndarray, hits: np.ndarray, skip=None):
        """`ctas`: computed CTAs, sorted; `hits`: their accesses' hits, CTA by CTA.
        `skip`: None, or per skipped stretch (first, end, ref_first, period) CTAs: CTA c in
        [first, end) behaves as ref_first + (c - ref_first) % period."""
        self.kw = kw
        self.ctas = ctas
        self.hits = hits
        counts = kw.transfers(ctas)
        self.starts = np.cumsum(counts) - counts
        self.skip = skip
        self._skip_cols = skip_columns(skip)
        # the computed CTAs a run of CTAs (each the run's first plus its place): their place
        # among them is a subtraction, not a search (the standard algorithm's kernels decide
        # every CTA of thousands of waves)
        self._first = (
            int(ctas[0]) if len(ctas) and int(ctas[-1] - ctas[0]) + 1 == len(ctas) else None
        )

    def referenced(self, ctas: np.ndarray) -> np.ndarray:
        """Each CTA, or for a skipped one the CTA of its reference wave whose hits it takes."""
        return referenced(self._skip_cols, ctas)

    def _rows(self, members: np.ndarray) -> np.ndarray:
        """Positions in `hits` of the members' accesses, (m, n) for members of one template."""
        ref = self.referenced(members)
        j = ref - self._first if self._first is not None else np.searchsorted(self.ctas, ref)
        n = int(self.kw.transfers(members[:1])[0]) if len(members) else 0
        return self.starts[j][:, None] + np.arange(n)[None, :]

    def counts(self, members: np.ndarray) -> np.ndarray:
        """Per transfer, how many of the members (CTAs of one template) hit."""
        return self.hits[self._rows(members)].sum(axis=0)

    def wave_counts(self, slots: int, chunk: int = 1 << 20):
        """`counts` of every wave of a one-template kernel, in order: (first CTA, CTAs, counts)
        each. A skipped wave that takes a computed wave's hits CTA for CTA takes its counts;
        the others are counted from one lookup per `chunk` accesses (a kernel of small CTAs
        runs thousands of waves: the standard algorithm's mask, 3,972 at 16k tokens, batch 4
        x 16 heads; the FlashAttention paper's configuration 7,070 in all, most skipped)."""
        n_ctas = self.kw.n_ctas
        n = int(self.kw.transfers(np.arange(1))[0]) if n_ctas else 0
        firsts = np.arange(0, n_ctas, max(1, slots), dtype=np.int64)
        sizes = np.minimum(slots, n_ctas - firsts)
        ref = self.referenced(firsts)
        taken = (ref != firsts) & (self.referenced(firsts + sizes - 1) - ref == sizes - 1)
        own = np.flatnonzero(~taken | ~np.isin(ref, firsts[~taken]))
        computed: dict[int, tuple[int, np.ndarray]] = {}
        per = max(1, chunk // max(1, n * slots))  # whole waves per lookup
        for a in range(0, len(own), per):
            idx = own[a : a + per]
            hit = self.hits[self._rows(ranges(firsts[idx], sizes[idx]))]
            at = np.concatenate([[0], np.cumsum(sizes[idx])[:-1]])
            sums = np.add.reduceat(hit, at, axis=0, dtype=np.int64)
            for w, row in zip(idx.tolist(), sums, strict=True):
                computed[int(firsts[w])] = (int(sizes[w]), row)
        for w in range(len(firsts)):
            first, m = int(firsts[w]), int(sizes[w])
            size, row = computed.get(first) or computed.get(int(ref[w]), (None, None))
            if size != m:  # a skipped wave whose reference is not a computed wave of its size
                row = self.counts(np.arange(first, first + m))
            yield first, m, row

    def rows(self, members: np.ndarray) -> np.ndarray:
        """(m, n) bool: each member's own hits."""
        return self.hits[self._rows(members)]

    def every_access(self) -> np.ndarray:
        """A bool per access of the kernel, in its access order (what the plain LRU answers;
        for comparisons: it builds the arrays of every access that skipping avoids)."""
        kw = self.kw
        out = np.zeros(len(kw.acc_op), dtype=bool)
        starts = np.searchsorted(kw.acc_cta, np.arange(kw.n_ctas + 1))
        for t in range(len(kw.templates)):
            members = np.flatnonzero(kw.cta_template == t)
            if len(members):
                lengths = starts[members + 1] - starts[members]
                out[ranges(starts[members], lengths)] = self.rows(members).ravel()
        return out


def skip_columns(skip) -> np.ndarray:
    """HitTable's skipped stretches (first, end, ref, period) as four columns, by first CTA:
    they never overlap, and a skipped CTA's reference lies before its stretch's first skipped
    CTA, outside every stretch."""
    return np.array(sorted(skip or ()), dtype=np.int64).reshape(-1, 4).T


def referenced(columns: np.ndarray, ctas: np.ndarray) -> np.ndarray:
    """Each CTA, or for one in a skipped stretch (skip_columns) the CTA of its reference wave
    whose hits it takes: one lookup of its stretch (a kernel skipped by local periods has one
    per run of the launch order, dozens)."""
    c = np.asarray(ctas, dtype=np.int64)
    first, end, ref, period = columns
    if not len(first):
        return c
    at = np.maximum(np.searchsorted(first, c, side="right") - 1, 0)
    inside = (c >= first[at]) & (c < end[at])
    return np.where(inside, ref[at] + (c - ref[at]) % period[at], c)


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
                counted = wave_bytes() if wave_bytes else _distinct_bytes(kw, slots)
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
        return _distinct_bytes(kernels[k], slots[k], MAX_HISTORY * capacity)

    # Local periods (_Plan's "segments") are tried where some kernel skips by a period of
    # its own anyway, and otherwise only where they could leave fewer accesses to decide
    # than deciding every wave (`_Whole`) would: their floor is known before any wave's
    # bytes are counted.
    own = [
        _Plan(kw, s, capacity, HISTORY, False, functools.partial(wave_bytes, k))
        for k, (kw, s) in enumerate(zip(kernels, slots, strict=True))
    ]
    local = any(p.skip for p in own)
    if not local:
        whole = _Whole(kernels, slots, capacity, lockstep)
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
            cost = _decided(kernels, plans, lockstep)
            over = max_bytes is not None and cost * BYTES_PER_ACCESS > max_bytes
            if over or cost >= whole.cost:
                break
        _check(kernels, plans, max_bytes, lockstep)
        out = _try(kernels, plans, capacity, lockstep)
        if not isinstance(out, int):
            return out
        for k in (out - 1, out):  # too short: its own stretches, or the history before it
            if k >= 0:
                history[k] *= GROWTH
    return _unbroken(
        kernels, slots, capacity, max_bytes, whole or _Whole(kernels, slots, capacity, lockstep)
    )


class _Whole:
    """How `_unbroken` decides every wave: per kernel a RunStream, a LockstepWave (whichever
    decides fewer) or None (every access), the last kernel's PairedRuns where its rule may
    apply, and the accesses all that decides (`cost`)."""

    def __init__(self, kernels, slots, capacity: int, lockstep):
        runs = [
            RunStream(kw, max(1, s)) if compressible(kw) else None
            for kw, s in zip(kernels, slots, strict=True)
        ]
        self.streams = [
            lock if lock is not None and (run is None or lock.decided < run.heads) else run
            for run, lock in zip(runs, lockstep, strict=True)
        ]
        self.paired = None
        if kernels and runs[-1] is not None:
            paired = PairedRuns(runs[-1])
            lock = lockstep[-1]
            if paired.ok(capacity) and (lock is None or paired.heads <= lock.decided):
                self.paired = paired
        sizes = [_stream_size(kw, st) for kw, st in zip(kernels, self.streams, strict=True)]
        if self.paired is not None:
            sizes[-1] = self.paired.heads
        self.cost = sum(sizes)


def _stream_size(kw: KernelWork, st) -> int:
    """The accesses a kernel's stream decides: a LockstepWave's, a RunStream's heads, or
    every access (None)."""
    if isinstance(st, LockstepWave):
        return st.decided
    if st is not None:
        return st.heads
    return _transfers_of(kw)


def _transfers_of(kw: KernelWork, plan: _Plan | None = None) -> int:
    """The loads and stores of the kernel's CTAs (those `plan` computes, or all): for a kernel
    of one template a product, not a sum over an array of every CTA (standard attention's score
    kernel at 1M tokens x 16 heads has 1 G CTAs: 15 s and 8 GB to find it too long)."""
    if len(kw.templates) == 1:
        n = kw.n_ctas if plan is None else plan.computed_count(kw.n_ctas)
        return n * int(kw._tr[1][0])
    ctas = np.arange(kw.n_ctas) if plan is None else plan.computed(kw.n_ctas)
    return int(kw.transfers(ctas).sum())


def _decided(kernels, plans, lockstep) -> int:
    """The accesses `_try` decides with these plans."""
    n = 0
    for kw, p, lock in zip(kernels, plans, lockstep, strict=True):
        if not p.skip and lock is not None:
            n += lock.decided
        else:
            n += _transfers_of(kw, p)
    return n


def _unbroken(kernels, slots, capacity, max_bytes, whole: _Whole) -> list:
    """Every wave decided: a last one-class kernel that streams more than the cache holds
    in each wave by one pair of waves per shape (l2runs.PairedRuns), in one stream with the
    kernels before it; otherwise every wave in one stream, a one-class kernel by its run heads
    (l2runs.py) or its lockstep waves (l2lockstep.py), whichever decides fewer accesses, any
    other access by access."""
    streams, paired = whole.streams, whole.paired
    if paired is not None:
        check_decided(paired.heads, max_bytes)
        decided = paired.decide(capacity, NUMPY_STEPS_PER_ACCESS)  # None: the rule fails
        if decided is not None:
            parts, starts, ops, keys, nbytes = unbroken_stream(
                kernels, slots, max_bytes, paired, streams
            )
            flat = lru_answer(ops, keys, nbytes, capacity)
            st = paired.stream
            first = (st.cta.copy(), st.pos.copy(), flat[starts[-2] : starts[-1]])
            tables = _tables(kernels[:-1], parts[:-1], starts, flat, capacity)
            return [*tables, PairedRunHitTable(paired, first, decided, capacity)]
    parts, starts, ops, keys, nbytes = unbroken_stream(kernels, slots, max_bytes, None, streams)
    flat = lru_answer(ops, keys, nbytes, capacity)
    return _tables(kernels, parts, starts, flat, capacity)


def _tables(kernels, parts, starts, flat, capacity) -> list:
    tables = []
    for k, (kw, part) in enumerate(zip(kernels, parts, strict=True)):
        mine = flat[starts[k] : starts[k + 1]]
        if isinstance(part, RunStream):
            tables.append(RunHitTable(part, mine, capacity))
        elif isinstance(part, LockstepWave):
            tables.append(part.table(mine, capacity))
        else:
            tables.append(_table(kw, part, mine))
    return tables


def unbroken_stream(kernels, slots, max_bytes=None, paired=None, streams=None):
    """The stream `_unbroken` decides: (per kernel a RunStream, a LockstepWave or (CTAs,
    waves, permutation), each kernel's first position, ops, tile ids, bytes), refused past
    `max_bytes`. `streams`: each kernel's RunStream or LockstepWave, or None to lay out every
    access (by default a RunStream for each one-class kernel). With `paired` (the last
    kernel's PairedRuns), that kernel contributes its first wave only, and its decided pairs
    count towards the budget; a LockstepWave its waves' heads and tails."""
    parts = []
    ops, keys, nbytes = [], [], []
    if streams is None:
        streams = [
            RunStream(kw, max(1, s)) if compressible(kw) else None
            for kw, s in zip(kernels, slots, strict=True)
        ]
    if paired is not None:
        streams = [*streams[:-1], paired.stream]
    sizes = [_stream_size(kw, st) for kw, st in zip(kernels, streams, strict=True)]
    if paired is not None:
        sizes[-1] = paired.heads
    check_decided(sum(sizes), max_bytes)
    for k, (kw, s, st) in enumerate(zip(kernels, slots, streams, strict=True)):
        if isinstance(st, LockstepWave):
            part, op, key, size = st.build()
        elif st is not None:
            last = paired is not None and k == len(kernels) - 1
            part, op, key, size = st.build([0] if last else None)
        else:
            part, op, key, size = _in_logical_order(kw, np.arange(kw.n_ctas), s)
        parts.append(part)
        ops.append(op)
        keys.append(key)
        nbytes.append(size)
    return (parts, *_joined(ops, keys, nbytes))


def _in_logical_order(kw: KernelWork, ctas: np.ndarray, slots: int, chunk: int = 1 << 20):
    """The accesses of `ctas` (ascending) in the cache's logical order: ((ctas, waves,
    permutation), op, key, bytes); the permutation gives, for each access in that order, its
    place among the CTAs' accesses CTA by CTA.

    Laid out wave by wave without a sort: the positions up to the shortest program in the wave
    hold every CTA, those up to the next length the CTAs at least that long, and so on, each
    stretch a (position, CTA) table of its CTAs' first accesses plus the position; ops and bytes
    come from the templates' rows by the same arithmetic. Keys are computed and placed a few
    waves (about `chunk` accesses) at a time: tens of millions of accesses' arrays are the
    cost, and temporaries of a few megabytes are recycled where whole-stream ones are fresh
    memory each time."""
    slots = max(1, slots)
    first, counts, op, nbytes = kw._tr
    tmpl = kw.cta_template[ctas]
    n_c = counts[tmpl].astype(np.int64)
    row0 = first[tmpl].astype(np.int64)  # each CTA's first row among the templates' rows
    start = np.cumsum(n_c) - n_c  # each CTA's first access, CTA by CTA
    n = int(n_c.sum())
    order = np.empty(n, dtype=positions_dtype(n))
    wave = np.empty(n, dtype=np.int32)
    ops, key = np.empty(n, dtype=np.int8), np.empty((n, 2), dtype=np.int64)
    size = np.empty(n, dtype=nbytes.dtype)
    waves = ctas // slots
    cut = (np.flatnonzero(np.diff(waves)) + 1).tolist() if len(ctas) else []
    bounds = list(zip([0, *cut], [*cut, len(ctas)], strict=True)) if len(ctas) else []
    at = w = 0
    while w < len(bounds):
        w0 = w  # whole waves, about `chunk` accesses
        w += 1
        while w < len(bounds) and start[bounds[w][1] - 1] - start[bounds[w0][0]] < chunk:
            w += 1
        take = bounds[w0:w]
        c0, c1 = take[0][0], take[-1][1]
        chunk_at = at
        if _one_template_full_waves(tmpl, take, slots):
            # every CTA runs one program and every wave is full: the waves are one (wave,
            # position, CTA) block, each wave's CTA-by-CTA accesses transposed
            length, m = int(n_c[c0]), len(take)
            at += m * length * slots
            cells = order[chunk_at:at].reshape(m, length, slots)
            np.add(start[c0:c1].reshape(m, 1, slots), np.arange(length)[None, :, None], out=cells)
            wave[chunk_at:at] = np.repeat(waves[c0:c1:slots], length * slots)
            block = (m, length, slots)
            by_cta = key_elements(kw.keys.take(ctas[c0:c1])).reshape(m, slots, length)
            key_elements(key[chunk_at:at]).reshape(block)[:] = by_cta.transpose(0, 2, 1)
            rows = int(row0[c0]) + np.arange(length)
            ops[chunk_at:at].reshape(block)[:] = op[rows][None, :, None]
            size[chunk_at:at].reshape(block)[:] = nbytes[rows][None, :, None]
            continue
        rows = []
        for j0, j1 in take:
            lengths = n_c[j0:j1]
            wave_at, t0 = at, 0
            for length in distinct(lengths).tolist():
                members = j0 + np.flatnonzero(lengths >= length)
                t = np.arange(t0, length, dtype=np.int64)[:, None]
                cells = order[at : at + (length - t0) * len(members)].reshape(-1, len(members))
                np.add(start[members][None, :], t, out=cells)
                rows.append((row0[members][None, :] + t).ravel())
                at += cells.size
                t0 = length
            wave[wave_at:at] = waves[j0]
        local = order[chunk_at:at] - start[c0]  # places among this chunk's CTAs' accesses
        np.take(key_elements(kw.keys.take(ctas[c0:c1])), local, out=key_elements(key[chunk_at:at]))
        rows = np.concatenate(rows)
        ops[chunk_at:at] = op[rows]
        size[chunk_at:at] = nbytes[rows]
    return (ctas, wave, order), ops, key, size


def _one_template_full_waves(tmpl: np.ndarray, take: list, slots: int) -> bool:
    """Whether the waves `take` ((first, end) CTA index pairs) are all full and every CTA of
    them runs the first one's template."""
    c0, c1 = take[0][0], take[-1][1]
    if c1 - c0 != len(take) * slots or any(j1 - j0 != slots for j0, j1 in take):
        return False
    return bool((tmpl[c0:c1] == tmpl[c0]).all())


def _joined(ops: list, keys: list, nbytes: list):
    """Kernels' streams end to end: (each kernel's first position, ops, tile ids, bytes). The
    keys' list is consumed as it is packed."""
    starts = np.concatenate([[0], np.cumsum([len(o) for o in ops])]).astype(np.int64)
    if not starts[-1]:
        return starts, np.zeros(0, np.int8), np.zeros(0, np.int64), np.zeros(0, np.int64)
    one = len(ops) == 1  # a single part is itself (a concatenation would copy it)
    return (
        starts,
        ops[0] if one else np.concatenate(ops),
        joined_tile_ids(keys),
        nbytes[0] if one else np.concatenate(nbytes),
    )


def _try(kernels, plans, capacity, lockstep) -> list[HitTable] | int:
    """The tables, or the first kernel whose hits could not be trusted. A kernel that skips
    no wave but has a LockstepWave lays out its waves' heads and tails only."""
    parts = []  # per kernel: computed CTAs, their waves in logical order, the permutation
    ops, keys, nbytes = [], [], []
    for kw, p, lock in zip(kernels, plans, lockstep, strict=True):
        if not p.skip and lock is not None:
            part, op, key, size = lock.build()
        else:
            part, op, key, size = _in_logical_order(kw, p.computed(kw.n_ctas), p.slots)
        parts.append(part)
        ops.append(op)
        keys.append(key)
        nbytes.append(size)
    starts, ops, keys, nbytes = _joined(ops, keys, nbytes)
    n = len(ops)
    prev = previous_touches(keys)
    flat = lru_answer(ops, keys, nbytes, capacity, prev)
    # segments of real, unbroken stream: a new one starts after each skipped stretch
    seg_start = np.zeros(n, dtype=positions_dtype(n))
    heads = np.ones(n, dtype=bool)  # positions whose answer a table takes from the stream
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
    del keys
    load = (ops == OP_LOAD) | (ops == OP_ATOMIC)
    fits = nbytes <= capacity
    crowded = _since(prev, seg_start, nbytes, fits)
    crowded += nbytes
    crowded = crowded > capacity
    trusted = ~load | ~fits | (seg_start == 0) | (prev >= seg_start) | crowded | ~heads
    tables = []
    for k, (kw, p) in enumerate(zip(kernels, plans, strict=True)):
        a, b = int(starts[k]), int(starts[k + 1])
        if isinstance(parts[k], LockstepWave):
            if not trusted[a:b].all():
                return k
            tables.append(parts[k].table(flat[a:b], capacity))
            continue
        ctas, wave, order = parts[k]
        hits = np.empty(b - a, dtype=bool)
        ok = trusted[a:b]
        skip = None
        if p.skip:
            s = p.slots
            lent = np.zeros(b - a, dtype=bool)
            for first, _head, tail, ref, span, end in p.stretches:
                if not _periodic(a, wave, first, ref, span, prev, load, fits, nbytes, capacity):
                    return k
                # an untrusted answer in full waves of the tail takes its reference wave's
                # (the stream is wave-major: those waves are one slice of it)
                v = slice(_first_at_least(wave, tail), _first_at_least(wave, end))
                lent[v] |= ~ok[v]
            if (~ok & ~lent).any():
                return k
            ok = ok | lent
            skip = [(h * s, t * s, r * s, span * s) for _f, h, t, r, span, _e in p.stretches]
        elif not ok.all():
            return k
        hits[order] = flat[a:b]
        table = HitTable(kw, ctas, hits, skip)
        if skip is not None and (~trusted[a:b]).any():
            fix = np.zeros(b - a, dtype=bool)
            fix[order] = ~trusted[a:b]
            at = np.flatnonzero(fix)
            owner = np.searchsorted(table.starts, at, side="right") - 1
            c = ctas[owner]
            ref = c.copy()
            for (_h, _t, r, period), (_f, _h2, tail, *_r, end) in zip(
                skip, p.stretches, strict=True
            ):
                inside = (c >= tail * p.slots) & (c < end * p.slots)
                ref[inside] = r + (c[inside] - r) % period
            j = np.searchsorted(ctas, ref)
            hits[at] = hits[table.starts[j] + (at - table.starts[owner])]
        tables.append(table)
    return tables


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
    first, a copy of a stream tens of millions long for each search (25 ms at 12 M)."""
    return int(np.searchsorted(waves, waves.dtype.type(w)))


def least_decided(plan, counts) -> int:
    """A lower bound on the accesses `hit_tables` decides for `plan` (with its counts), known
    before the workload is built: one CTA's of a one-class kernel (l2lockstep may decide it
    from that CTA; the budget is checked again once the workload is built), one CTA's per
    class of a kernel of several classes (l2classwave may decide it from one CTA of each run
    of a class's CTAs), and no more than every access or two waves' worth."""
    hw = plan.hardware
    out = 0
    for kernel, kc in zip(plan.kernels, counts.kernels, strict=True):
        slots = kernel_slots(hw, kernel)
        per_cta = -(-kc.trips // max(1, kc.ctas))
        if len(kernel.grid) == 1:
            out += per_cta
        else:  # l2classwave may decide one CTA a class (runs of a class's size at most)
            classwave = kc.trips * len(kernel.grid) // max(1, kc.ctas)
            out += min(kc.trips, 2 * slots * per_cta, classwave)
    return out


def check_decided(n: int, max_bytes: int | None) -> None:
    """Refuse, with the estimate, `n` accesses to decide past `max_bytes` of memory."""
    if max_bytes is not None and n * BYTES_PER_ACCESS > max_bytes:
        raise TooLargeToExecuteError(
            f"engine: the L2 model would decide {n:,} loads and stores one by one here (about "
            f"{n * BYTES_PER_ACCESS / 1e9:,.1f} GB; at most {max_bytes / 1e9:.1f} GB): "
            "use a smaller problem to simulate time; counts work at any size"
        )


def _table(kw: KernelWork, part, flat: np.ndarray) -> HitTable:
    ctas, _wave, order = part
    hits = np.empty(len(flat), dtype=bool)
    hits[order] = flat
    return HitTable(kw, ctas, hits)


def _check(kernels, plans, max_bytes: int | None, lockstep) -> None:
    check_decided(_decided(kernels, plans, lockstep), max_bytes)


def _distinct_bytes(kw: KernelWork, slots: int, enough: float | None = None) -> int:
    """Bytes of the distinct tiles of one wave (the second, where there is one); with
    `enough`, those of its first CTAs once they reach it (a wave's history is sized from
    this, and past MAX_HISTORY capacities every size is one wave: a wave of the standard
    algorithm's P V at 1M tokens moves 169 GB over 21 M accesses, counted in full in 9 s).
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
        _, keep = np.unique(_tile_ids(keys), return_index=True)
        keys, sizes = np.take(keys, keep, axis=0), sizes[keep]
        counted = int(sizes.sum())
        if enough is not None and counted >= enough:
            break
        at += m
        m *= 2
    return counted


# accesses `_distinct_bytes` lays out at a time
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
