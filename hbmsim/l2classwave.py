"""L2 hits of one wave of several CTA classes, each class's CTAs translates: from one CTA a class.

Why: flash-attn 1.x's forward splits each (batch, head) into `splits` CTAs that take every
splits-th query step (`num_splits_heuristic_fwd`), one class per split, launched class by
class (blockIdx.z slowest) in a single wave that fills the GPU. Its CTAs are not translates
of one CTA (the splits run different steps, 102 or 103 a K/V block at 8k tokens, and share
their head's K/V tiles), so l2lockstep's rule does not hold, and every one of its 10 to 21
million accesses (batch 16 x 8 heads at 8k tokens, batch 4 x 16 at 16k) was decided in
bulk: 4-7 s of the whole call's 4-9. Within a class, though, the CTAs are translates.

The argument (byte-capacity LRU, l2.bulk_hits: an access hits iff its tile fits and the
distinct fitting tiles touched since its previous touch, plus itself, take at most C). Take
one wave of S classes laid out one after another, G CTAs each, the g-th CTA of every class at
the same translate of its class's first CTA (one shift per tensor, the same for every class),
and the translates' tiles apart: G groups, each one CTA of every class (a (batch, head) and
its splits), sharing nothing with each other. In the cache's logical order a position holds
every class's CTAs alive there, class by class, each class's CTAs in order. Let R be the
stream of the classes' first CTAs in that order, each position a row of up to S accesses.
Group g's accesses are R moved by g's shift. An access of CTA (z, g) at position t to a tile X
last touched by the group at (p, z') has in its window: of its own group, R's accesses
strictly between (p, z') and (t, z); of each group g' < g, those from just after (p, z')
through (t, z), which add the translate of X at (t, z); of each g' > g, those from (p, z') to
just before (t, z), which add the translate of X at (p, z'). The groups' tiles being apart,
the window holds D + (G - 1)(D + |X|) distinct bytes, D those of R's own window, whatever g
is: it hits iff G (D + |X|) <= C, which is R's answer with every tile weighing its G copies
(each copy fits, so each weighted tile does: the rule is not used otherwise).

An access with no earlier touch in its group depends on what came before the kernel: once R's
first rows hold C weighted distinct bytes, every such access after them misses; only those
rows of every group are decided in one stream with the kernels around the kernel, followed by
its last rows that hold C bytes, which is what the next kernel can find (as in l2lockstep).
Everything else takes R's answer.
"""

from __future__ import annotations

import numpy as np

from .l2 import _tile_ids, lru_answer
from .l2lockstep import LockstepWave, _first_touches, _holding, class_shifts
from .workload import KernelWork


class ClassWave(LockstepWave):
    """A kernel the rule above decides (`of` says whether it does): R's accesses (ops, keys,
    bytes, tensor, and where each class's accesses lie in it), the groups' shifts, and the
    rows of R laid out for every group at its head and its tail."""

    def __init__(self, kw: KernelWork, groups: int, shift: np.ndarray, r: tuple, spans: tuple):
        self.kw, self.groups, self.shift = kw, groups, shift
        self.op, self.keys, self.nbytes, self.tensor, self.where = r
        self.head, self.tail = spans  # R's accesses laid out before and after the middle
        self.decided = groups * (self.head + self.tail) + len(self.op)

    @classmethod
    def of(cls, kw: KernelWork, slots: int, capacity: int) -> ClassWave | None:
        """The rule for this kernel, or None where it does not hold or would skip nothing."""
        n = kw.n_ctas
        classes = getattr(kw.keys, "classes", None)
        if classes is None or len(classes) < 2 or n > slots:
            return None
        layout = kw.keys.layout
        of_cta = layout.classes(np.arange(n))
        sizes = np.bincount(of_cta, minlength=len(classes))
        groups = int(sizes[0])
        if groups < 2 or (sizes != groups).any() or (of_cta != np.arange(n) // groups).any():
            return None  # classes of one size, laid out one after another
        shift = None
        for z, ck in enumerate(classes):
            own = class_shifts(ck, layout.take(np.arange(z * groups, (z + 1) * groups)))
            if own is None:
                return None
            if shift is not None:  # the same translate for every class: pad to its tensors
                width = max(shift.shape[1], own.shape[1])
                shift, own = _padded(shift, width), _padded(own, width)
                if not np.array_equal(shift, own):
                    return None
            shift = own
        r = _first_ctas_stream(kw, classes, groups)
        op, keys, nbytes, tensor, _where = r
        if not len(op) or int(nbytes.max()) * groups > capacity:
            return None  # a tile whose copies alone fill the cache: the sums fail
        if not _apart(shift, keys, tensor):
            return None
        ids = _tile_ids(keys)
        weighed = nbytes * groups
        rows = _rows(r, classes, kw)
        head = _holding(_first_touches(ids), weighed, capacity)
        tail = _holding(_first_touches(ids[::-1]), weighed[::-1], capacity)
        if head is None or tail is None:
            return None
        head = int(rows[1][rows[0][head - 1]])  # to the end of its row
        tail = len(op) - int(rows[2][rows[0][len(op) - tail]])  # from the start of its row
        if groups * (head + tail) + len(op) >= groups * len(op):
            return None  # about every row laid out: nothing saved
        return cls(kw, groups, shift, r, (head, tail))

    def layout(self) -> list[tuple[int, int]]:
        """The accesses `build` lays out for the head and for the tail (one wave)."""
        return [(self.groups * self.head, self.groups * self.tail)]

    def build(self) -> tuple[ClassWave, np.ndarray, np.ndarray, np.ndarray]:
        """R's head and tail rows for every group, in the cache's logical order (each of R's
        accesses followed by its translates in the other groups): (self, op, key, bytes)."""
        pos = np.concatenate(
            [np.arange(self.head), np.arange(len(self.op) - self.tail, len(self.op))]
        )
        moved = self.shift[:, self.tensor[pos], :].transpose(1, 0, 2)
        keys = (self.keys[pos][:, None, :] + moved).reshape(-1, 2)
        ops = np.repeat(self.op[pos], self.groups).astype(np.int8)
        return self, ops, keys, np.repeat(self.nbytes[pos], self.groups)

    def own_answer(self, capacity: int) -> np.ndarray:
        """R from an empty cache, each tile weighing its G copies, at capacity C."""
        return lru_answer(self.op, _tile_ids(self.keys), self.nbytes * self.groups, capacity)

    def table(self, stream: np.ndarray, capacity: int) -> ClassWaveHitTable:
        return ClassWaveHitTable(self, stream, capacity)


class ClassWaveHitTable:
    """HitTable's interface for a ClassWave: each CTA's answers, from the stream for R's head
    rows (`stream`: the kernel's part, as `build` laid it out), from R's after them."""

    skip = None  # every access is decided (the middle by the rule, not skipped)

    def __init__(self, wave: ClassWave, stream: np.ndarray, capacity: int):
        self.kw, self.wave = wave.kw, wave
        self.own = wave.own_answer(capacity)
        self.first = stream[: wave.groups * wave.head].reshape(wave.head, wave.groups)
        self.hits = np.concatenate([stream, self.own])  # every answer decided one by one

    def rows(self, members: np.ndarray) -> np.ndarray:
        """(m, n) bool: each member's own hits (members of one template: of one length)."""
        members = np.asarray(members, dtype=np.int64)
        groups, where = self.wave.groups, self.wave.where
        z, g = members // groups, members % groups
        at = np.stack([where[int(c)] for c in z.tolist()])  # (m, n): R positions
        out = self.own[at]
        inside = at < self.wave.head
        out[inside] = self.first[at[inside], np.broadcast_to(g[:, None], at.shape)[inside]]
        return out

    def counts(self, members: np.ndarray) -> np.ndarray:
        """Per transfer, how many of the members hit: `rows` summed, a class at a time."""
        members = np.asarray(members, dtype=np.int64)
        z = members // self.wave.groups
        out = None
        for c in np.unique(z).tolist():
            part = self.rows(members[z == c]).sum(axis=0, dtype=np.int64)
            out = part if out is None else out + part
        return out if out is not None else np.zeros(0, dtype=np.int64)

    def every_access(self) -> np.ndarray:
        """A bool per access of the kernel, CTA by CTA (for comparisons)."""
        n = self.kw.n_ctas
        return np.concatenate([self.rows(np.array([c])).ravel() for c in range(n)])


def _padded(shift: np.ndarray, tensors: int) -> np.ndarray:
    if shift.shape[1] == tensors:
        return shift
    out = np.zeros((shift.shape[0], tensors, 2), dtype=shift.dtype)
    out[:, : shift.shape[1]] = shift
    return out


def _first_ctas_stream(kw: KernelWork, classes, groups: int) -> tuple:
    """R: the accesses of each class's first CTA in the cache's logical order (position by
    position, class by class): (op, key, bytes, tensor, per class the R index of each of its
    accesses)."""
    firsts = np.arange(len(classes)) * groups
    first, counts, op, nbytes = kw._tr
    tmpl = kw.cta_template[firsts]
    lengths = counts[tmpl].astype(np.int64)
    cls = np.repeat(np.arange(len(classes)), lengths)
    pos = np.concatenate([np.arange(n) for n in lengths.tolist()])
    order = np.lexsort((cls, pos))  # position by position, class by class
    keys = kw.keys.take(firsts)  # CTA by CTA
    rows = np.concatenate([first[t] + np.arange(n) for t, n in zip(tmpl, lengths, strict=True)])
    tensor = np.concatenate([ck.tensor[:n] for ck, n in zip(classes, lengths, strict=True)])
    where_flat = np.empty(len(order), dtype=np.int64)
    where_flat[order] = np.arange(len(order))
    starts = np.concatenate([[0], np.cumsum(lengths)])
    where = [where_flat[a:b] for a, b in zip(starts[:-1], starts[1:], strict=True)]
    return (
        op[rows][order].astype(np.int8),
        keys[order],
        nbytes[rows][order],
        tensor[order].astype(np.int64),
        where,
    )


def _rows(r: tuple, classes, kw: KernelWork) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """R's rows: each access's row (its position), and per row its first access and the
    first past it."""
    where = r[4]
    pos = np.empty(len(r[0]), dtype=np.int64)
    for w in where:
        pos[w] = np.arange(len(w))
    ends = np.searchsorted(pos, np.arange(int(pos.max()) + 1), side="right")
    starts = np.concatenate([[0], ends[:-1]])
    return pos, ends, starts


def _apart(shift: np.ndarray, keys: np.ndarray, tensor: np.ndarray) -> bool:
    """Whether the groups' tiles are apart: per tensor, the translates of R's tiles' last
    elements never meet (their spans, moved by each group's shift, do not overlap)."""
    for t in np.unique(tensor).tolist():
        last = keys[tensor == t, 1]
        width = int(last.max()) - int(last.min()) + 1
        at = np.sort(shift[:, t, 1])
        if len(at) > 1 and int(np.diff(at).min()) < width:
            return False
    return True
