"""L2 hits of one-class kernels from the runs of their access stream: the LRU's answer, exact.

Why: without a causal mask, an attention kernel's CTAs all run one template, and the cache's
logical order (lru.logical_order: wave by wave, position by position, CTA by CTA) is made of
long runs of one tile: every CTA of a wave that works on the same head reads the same K and V
tiles at the same position. Deciding every access costs memory and time in proportion to
them (fa2 at 128k tokens x 16 heads: 134 M accesses), while
the answer lies in the runs' first accesses (the heads):

- an access that repeats the tile just touched finds it most recent: it hits if it reads a
  tile that fits in the cache, and it leaves the LRU as it was;
- so the LRU's answer for the heads alone, in order, is its answer for them within the whole
  stream (every window between two touches holds the same distinct tiles), and the repeats
  follow the rule above. `bulk.bulk_hits` applies the same rule to the repeats it sees.

Finding the heads without building every access: in a class whose tile keys are affine in the
grid coordinates (`classkeys.ClassKeys`: base + Σ_axis (coordinate - representative's) x
delta), CTAs c - 1 and c touch the same tile at position t exactly when Σ_axis Δcoordinate x
delta[t] is zero. The coordinate steps between consecutive CTAs take a few values (the
fastest axis steps by one; where it wraps, a slower axis steps), so the positions fall into a
few classes by which steps break a run there, and a class's heads are the same CTAs at each of
its positions. An axis whose term is a shift per tensor (GQA: query head h reads K/V head
h // group) enters the step as its two values: the tile moves where their shifts differ. Each
wave's first CTA heads every position.
"""

from __future__ import annotations

import math

import numpy as np

from ...interpret.trace import MAX_AXES, OP_ATOMIC, OP_LOAD
from ..workload.arrays import distinct, ranges
from .bulk import bulk_hits
from .lru import tile_ids


def repeat_hits(op: np.ndarray, nbytes: np.ndarray, capacity: int) -> np.ndarray:
    """Per position, whether an access that repeats the tile just touched hits: a read (or
    an atomic add) of a tile that fits."""
    return ((op == OP_LOAD) | (op == OP_ATOMIC)) & (nbytes <= capacity)


def compressible(kw) -> bool:
    """Whether the kernel's stream can be built from its runs: one template, one class whose
    keys are affine in the coordinates, or shifted per tensor (no sampled or explicit term)."""
    classes = getattr(kw.keys, "classes", None)
    if len(kw.templates) != 1 or classes is None or len(classes) != 1 or kw.n_ctas < 2:
        return False
    ck = classes[0]
    return ck.explicit is None and not ck.tables


def run_stream_bytes(kw) -> int:
    """The memory a RunStream of the kernel holds at once while it is built, from its arrays
    over every CTA: the layout's coordinates (MAX_AXES int64), the coordinate steps twice (their
    difference, then joined with each shifted axis's two values), and three int64 in their
    unique (packed, sorted, inverse). 4 axes: 120 bytes a CTA (113 measured with tracemalloc
    for flash-decoding's split over 3.2 M CTAs)."""
    ck = kw.keys.classes[0]
    columns = len(ck.axes) + 2 * len(ck.shifts)
    return kw.n_ctas * 8 * (MAX_AXES + 2 * columns + 3)


class RunStream:
    """A one-class kernel's run heads in the cache's logical order (after `build`): each
    head's CTA, position and (n, 2) tile key; the op and bytes of each position."""

    def __init__(self, kw, slots: int):
        ck, layout = kw.keys.classes[0], kw.keys.layout
        naxes = len(ck.axes)
        n = kw.n_ctas
        first, counts, op, nbytes = kw.transfer_rows
        n_tr = int(counts[0])
        self.kw, self.slots, self.n_tr = kw, slots, n_tr
        self.op = op[first[0] : first[0] + n_tr]
        self.nbytes = nbytes[first[0] : first[0] + n_tr]
        delta = np.zeros((naxes, n_tr, 2), dtype=np.int64)
        for axis, d in ck.affine.items():
            delta[axis] = d
        coords = layout.take(np.arange(n))[:, :naxes]
        shifted = sorted(ck.shifts)  # axes whose term is a per-tensor shift by value
        index = {a: coords[:, a] - ck.axes[a][0] for a in shifted}
        # what moves a position's tile between neighbours: the coordinate step, and for a
        # shifted axis the two values (its term is not a function of the step)
        step = np.concatenate(
            [coords[1:] - coords[:-1]]
            + [np.stack([index[a][:-1], index[a][1:]], axis=1) for a in shifted],
            axis=1,
        )
        steps, pattern = _unique_rows(step)
        # (patterns, n_tr): where each step moves the tile, one (affine step, shift) at a time
        # (as many patterns as CTAs less one in a GQA decode, most of them alike once their
        # shifted axes' values are reduced to the shift they make: all at once they took
        # gigabytes)
        affine_rows, affine_of = _unique_rows(steps[:, :naxes])
        affine = [np.tensordot(row, delta, axes=1) for row in affine_rows]  # each (n_tr, 2)
        breaks = np.empty((len(steps), n_tr), dtype=bool)
        done: dict[tuple, int] = {}  # (affine step, shift) -> the pattern computed for it
        for p, row in enumerate(steps):
            shift = None  # (tensors, 2): a shifted axis moves each tensor's tiles alike
            for j, a in enumerate(shifted):
                d = ck.shifts[a][row[naxes + 2 * j + 1]] - ck.shifts[a][row[naxes + 2 * j]]
                shift = d if shift is None else shift + d
            moves = shift is not None and bool(shift.any())
            key = (int(affine_of[p]), shift.tobytes() if moves else b"")
            if key in done:
                breaks[p] = breaks[done[key]]
                continue
            done[key] = p
            moved = affine[affine_of[p]]
            if moves:
                moved = moved + np.take(shift, ck.tensor, axis=0)
            breaks[p] = moved.any(axis=1)
        # position classes: the positions where the same steps break a run
        cols, klass = _unique_columns(breaks)
        wave_first = np.zeros(n, dtype=bool)
        wave_first[::slots] = True
        self._classes = []  # per position class: its heads' CTAs and its positions
        for s, breaking in enumerate(cols):
            head = wave_first.copy()
            head[1:] |= breaking[pattern]
            self._classes.append((np.flatnonzero(head), np.flatnonzero(klass == s)))
        self.heads = sum(len(c) * len(t) for c, t in self._classes)
        self._formula = (ck, coords, index, shifted)
        self.pattern = pattern  # the coordinate step from CTA i to CTA i + 1, numbered

    def build(self, waves=None) -> tuple[RunStream, np.ndarray, np.ndarray, np.ndarray]:
        """Lay out the heads (CTA, position, key) in the cache's logical order (of `waves`
        only, when given); `heads` says how many there will be, so a caller can refuse
        first. Returns the stream and its heads' (op, key, bytes), as l2.fast lays out any
        kernel's accesses."""
        ck, coords, index, shifted = self._formula
        naxes, slots, n = len(ck.axes), self.slots, self.kw.n_ctas
        classes = self._classes
        if waves is not None:
            classes = [(_in_waves(c, waves, slots, n), t) for c, t in classes]
        cta = np.concatenate([np.repeat(c, len(t)) for c, t in classes])
        pos = np.concatenate([np.tile(t, len(c)) for c, t in classes])
        self.cta, self.pos = _logical(cta, pos, slots, n, self.n_tr)
        self.wave_start = np.searchsorted(self.cta // slots, np.arange(-(-n // slots) + 1))
        rel = coords[self.cta] - ck.rep[:naxes]
        self.key = np.take(ck.base, self.pos, axis=0)  # (rows by np.take: 4x numpy's [])
        for axis, d in ck.affine.items():
            self.key += rel[:, axis, None] * np.take(d, self.pos, axis=0)
        for a in shifted:
            self.key += ck.shifts[a][index[a][self.cta], ck.tensor[self.pos]]
        return self, self.op[self.pos].astype(np.int8), self.key, self.nbytes[self.pos]


def _in_waves(ctas: np.ndarray, waves, slots: int, n: int) -> np.ndarray:
    """The CTAs (ascending) that lie in `waves`: a slice per wave where the waves are few (a
    pair, as PairedRuns asks, hundreds of times over millions of heads), else by a mask."""
    w = np.unique(np.asarray(waves, dtype=np.int64))
    if len(w) > 64:
        keep = np.zeros(-(-n // slots), dtype=bool)
        keep[w] = True
        return ctas[keep[ctas // slots]]
    lo = np.searchsorted(ctas, w * slots)
    hi = np.searchsorted(ctas, (w + 1) * slots)
    return np.concatenate(
        [ctas[a:b] for a, b in zip(lo.tolist(), hi.tolist(), strict=True)] or [ctas[:0]]
    )


def _logical(
    cta: np.ndarray, pos: np.ndarray, slots: int, n: int, n_tr: int
) -> tuple[np.ndarray, np.ndarray]:
    """The heads (CTAs, positions) in the cache's logical order: wave, then position, then
    CTA. Where (wave, position, CTA) packs into one int, the packed ints sorted and read back
    (each is unique: no permutation needed, and sorting values is several times faster than
    an argsort); else a sort of the three."""
    waves = -(-n // slots)
    if waves * n_tr * n < 1 << 62:
        packed = (cta // slots * n_tr + pos) * n + cta
        packed.sort()
        return packed % n, packed // n % n_tr
    order = np.lexsort((cta, pos, cta // slots))
    return cta[order], pos[order]


def _unique_rows(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(a, axis=0, return_inverse=True) for a 2-D int array, the inverse flat: each
    row packed into one int (column 0 the most significant, so the order is the same) where
    the columns' ranges fit in one, a sort of n ints instead of n rows (fa2 at 1M tokens x 16
    heads: 262 k coordinate steps, 0.44 s as rows)."""
    if not a.size:
        rows, inverse = np.unique(a, axis=0, return_inverse=True)
        return rows, inverse.reshape(-1)
    low = a.min(axis=0)
    spans = (a.max(axis=0) - low + 1).tolist()
    if math.prod(spans) >= 1 << 62:
        rows, inverse = np.unique(a, axis=0, return_inverse=True)
        return rows, inverse.reshape(-1)
    packed = np.zeros(len(a), dtype=np.int64)
    for c, span in enumerate(spans):
        packed *= span
        packed += a[:, c] - low[c]
    _, first, inverse = np.unique(packed, return_index=True, return_inverse=True)
    return a[first], inverse.reshape(-1)


def _unique_columns(flags: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(flags.T, axis=0, return_inverse=True) for a (patterns, n) bool array: each
    column's bits packed (the first pattern the highest) into 64-bit words, read a word at a
    time, so the sort is of n ints per 64 patterns, not of n rows (millions of positions; as
    many patterns as CTAs less one in a decode over 64 heads of GQA, where rows took 31 s at
    500 k positions)."""
    p, n = flags.shape
    if not n or not p:
        cols, inverse = np.unique(flags.T, axis=0, return_inverse=True)
        return cols, inverse.reshape(-1)
    packed = np.packbits(flags, axis=0)  # (bytes, n), the first pattern the highest bit
    words = -(-len(packed) // 8)
    buf = np.zeros((n, 8 * words), dtype=np.uint8)
    buf[:, : len(packed)] = packed.T
    codes = buf.view(">u8").astype(np.uint64)  # (n, words), each word's order the bits'
    inverse = np.zeros(n, dtype=np.int64)  # the columns' rank by the words read so far
    first = np.zeros(1, dtype=np.int64)
    for w in range(words):
        values, rank = np.unique(codes[:, w], return_inverse=True)
        _, first, inverse = np.unique(
            inverse * len(values) + rank.reshape(-1), return_index=True, return_inverse=True
        )
    return flags[:, first].T.copy(), inverse.reshape(-1)


def _among(cta: np.ndarray, members: np.ndarray) -> np.ndarray:
    """Which heads' CTAs are members: by range when the members are a run of CTAs (a wave,
    as the engine asks), else by lookup."""
    members = np.asarray(members)
    first, last = int(members[0]), int(members[-1])
    if last - first + 1 == len(members) and bool(np.all(np.diff(members) == 1)):
        return (cta >= first) & (cta <= last)
    return np.isin(cta, members)


class RunHitTable:
    """A one-class kernel's L2 hits from its run heads' answers (`hits`, one per head of the
    RunStream) and the repeats' rule (`repeat`, one per position): HitTable's interface."""

    skip = None  # every wave is decided (none skipped, as table.HitTable may)

    def __init__(self, stream: RunStream, hits: np.ndarray, capacity: int):
        self.stream = stream
        self.kw = stream.kw
        self.hits = hits
        self.repeat = repeat_hits(stream.op, stream.nbytes, capacity)

    def _heads(self, members: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The members' heads: (CTA, position, hit) of each."""
        st = self.stream
        waves = distinct(np.asarray(members) // st.slots)
        sel = ranges(st.wave_start[waves], st.wave_start[waves + 1] - st.wave_start[waves])
        sel = sel[_among(st.cta[sel], members)]
        return st.cta[sel], st.pos[sel], self.hits[sel]

    def counts(self, members: np.ndarray) -> np.ndarray:
        """Per transfer, how many of the members hit."""
        n_tr = self.stream.n_tr
        _c, pos, hit = self._heads(members)
        heads = np.bincount(pos, minlength=n_tr)
        head_hits = np.bincount(pos, weights=hit, minlength=n_tr).astype(np.int64)
        return head_hits + self.repeat * (len(members) - heads)

    def rows(self, members: np.ndarray) -> np.ndarray:
        """(m, n) bool: each member's own hits, in the members' order."""
        members = np.asarray(members)
        out = np.broadcast_to(self.repeat, (len(members), self.stream.n_tr)).copy()
        cta, pos, hit = self._heads(members)
        order = np.argsort(members)
        out[order[np.searchsorted(members[order], cta)], pos] = hit
        return out

    def every_access(self) -> np.ndarray:
        """A bool per access of the kernel, CTA by CTA (for comparisons: every access)."""
        n = self.kw.n_ctas
        return self.rows(np.arange(n)).ravel()


class PairedRuns:
    """A one-class kernel's waves decided in pairs, each pair of waves once per shape: the
    LRU's answer, exact, for a kernel that streams more than the cache holds in every wave.

    Why: fa2 at 1M tokens x 16 heads has 662 waves and 23 M run heads, while its waves come
    in a few shapes (whole waves inside one head; waves across a head boundary, once per
    head). Take wave w > 0 and the wave before it. A head of w whose tile was last touched in
    w - 1 or w has its whole window inside the pair; any other head's window holds all of
    w - 1, so when w - 1's distinct tiles already leave no room for the smallest load of w,
    it misses. Then w's hits are the LRU's over the pair alone, from an empty cache (its
    other heads are first touches there, and miss). Two pairs whose CTAs take the same
    coordinate steps (`RunStream.pattern`) have keys that differ by one shift per tensor when
    every affine axis moves each tensor's tiles alike (its delta is one value per tensor):
    the same distinct tiles, the same answers. So one pair per shape is built and decided;
    wave 0 stays in the plan's joined stream (its windows reach into earlier kernels), and
    the kernel must be the plan's last (no later kernel looks back into skipped waves).
    """

    MIN_WAVES = 4

    def __init__(self, stream: RunStream):
        self.stream = stream
        kw, slots = stream.kw, stream.slots
        n = kw.n_ctas
        self.waves = -(-n // slots)
        ck = stream._formula[0]
        tensor = ck.tensor
        self.alike = self.waves >= self.MIN_WAVES
        for d in ck.affine.values():  # each axis moves a tensor's tiles alike, or not at all
            for t in distinct(tensor):
                at = d[tensor == t]
                self.alike &= bool((at == at[0]).all())
        counts = [len(c) * len(t) for c, t in stream._classes]
        self.per_wave = sum(counts) / max(self.waves, 1)  # run heads in a wave, on average
        if not self.alike:
            return
        firsts = np.arange(self.waves + 1) * slots
        firsts[-1] = n
        self.source = np.zeros(self.waves, dtype=np.int64)  # each wave's decided wave
        shapes: dict[bytes, int] = {}
        for w in range(1, self.waves):
            lo, hi = int(firsts[w - 1]), int(firsts[w + 1])
            shape = (int(firsts[w] - lo), stream.pattern[lo : hi - 1].tobytes())
            self.source[w] = shapes.setdefault(shape, w)
        self.firsts = firsts
        self.decided = sorted(shapes.values())
        built = sorted({0} | {w - 1 for w in self.decided} | set(self.decided))
        self.built = built
        self.heads = int(self.per_wave * len(built)) + 1

    def ok(self, capacity: int) -> bool:
        """Whether the rule can apply: waves of alike shapes whose run heads could hold more
        than the cache (at most every head a distinct tile of the largest size)."""
        largest = int(self.stream.nbytes.max()) if len(self.stream.nbytes) else 0
        return bool(self.alike) and self.per_wave * largest > capacity

    def decide(self, capacity: int, budget_per_access: int) -> dict | None:
        """Per decided wave (and wave 0 is left to the caller), its heads (CTA, position) and
        their hits; None when a pair's first wave leaves room (the rule does not apply)."""
        st = self.stream
        out = {}
        for w in self.decided:
            _, op, key, nbytes = st.build([w - 1, w])
            cut = int(np.searchsorted(st.cta // st.slots, w))  # the stream is wave-major
            ids = tile_ids(key)
            _, first_at = np.unique(ids[:cut], return_index=True)  # w - 1's distinct tiles
            fits = nbytes[:cut][first_at] <= capacity
            room_left = capacity - int(nbytes[:cut][first_at][fits].sum())
            loads = (op[cut:] == OP_LOAD) | (op[cut:] == OP_ATOMIC)
            smallest = int(nbytes[cut:][loads].min()) if loads.any() else capacity + 1
            if smallest <= room_left:
                return None
            budget = budget_per_access * len(op) + 1_000_000
            hits = bulk_hits(op, ids, nbytes, capacity, budget)
            if hits is None:
                return None
            out[w] = (st.cta[cut:].copy(), st.pos[cut:].copy(), hits[cut:])
        return out


class PairedRunHitTable(RunHitTable):
    """RunHitTable's interface for a PairedRuns kernel: wave 0's heads from the joined stream,
    any other wave's from the wave decided for its shape, moved by the CTAs between them."""

    def __init__(self, paired: PairedRuns, first: tuple, decided: dict, capacity: int):
        self.paired = paired
        self.waves = {0: first, **decided}
        hits = np.concatenate([h for _, _, h in self.waves.values()])
        super().__init__(paired.stream, hits, capacity)

    def wave_counts(self, slots: int):
        """`counts` of every wave, in order: (first CTA, CTAs, counts) each, counted once per
        decided wave and size (a wave takes its decided wave's heads moved by the CTAs
        between them, so every wave of one shape has the same counts: fa2 at 1M tokens x 16
        heads counts 33 of its 662 waves)."""
        p, n = self.paired, self.kw.n_ctas
        if slots != self.stream.slots:  # not the waves the table was decided for
            for first in range(0, n, slots):
                yield (
                    first,
                    min(slots, n - first),
                    self.counts(np.arange(first, min(n, first + slots))),
                )
            return
        memo: dict[tuple[int, int], np.ndarray] = {}
        for w in range(p.waves):
            first, m = int(p.firsts[w]), int(p.firsts[w + 1] - p.firsts[w])
            key = (int(p.source[w]) if w else 0, m)
            if key not in memo:
                memo[key] = self.counts(np.arange(first, first + m))
            yield first, m, memo[key]

    def _heads(self, members: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        p = self.paired
        members = np.asarray(members)
        wave = members // self.stream.slots
        out = ([], [], [])
        for w in distinct(wave).tolist():
            src = int(p.source[w]) if w else 0
            shift = int(p.firsts[w] - p.firsts[src])
            cta, pos, hit = self.waves[src]
            sel = _among(cta, members[wave == w] - shift)
            out[0].append(cta[sel] + shift)
            out[1].append(pos[sel])
            out[2].append(hit[sel])
        return tuple(np.concatenate(x) for x in out)


__all__ = ["PairedRunHitTable", "PairedRuns", "RunHitTable", "RunStream", "compressible"]
