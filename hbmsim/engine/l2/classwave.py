"""L2 hits of CTA classes whose CTAs are translates, in runs the waves do not cut: from one
CTA a run.

Why: flash-attn 1.x's forward splits each (batch, head) into `splits` CTAs that take every
splits-th query step (`num_splits_heuristic_fwd`), one class per split, launched class by
class (blockIdx.z slowest), sized to fill the GPU's waves. Its CTAs are not translates of
one CTA (the splits run different steps, 102 or 103 a K/V block at 8k tokens, and share
their head's K/V tiles), so lockstep's rule does not hold, and every one of its 10 to 21
million accesses (batch 16 x 8 heads at 8k tokens, batch 4 x 16 at 16k) was decided in
bulk: 4-7 s of the whole call's 4-9. Causal attention's query-block classes are alike. Within
a class, though, the CTAs are translates.

The argument (byte-capacity LRU, bulk.bulk_hits: an access hits iff its tile fits and the
distinct fitting tiles touched since its previous touch, plus itself, take at most C). Take
classes laid out one after another, cut into runs of G consecutive CTAs that neither a class
nor a wave boundary cuts (G divides every class's size, and the wave's where there are
several), the k-th CTA of every run at the same translate of its run's first CTA (one shift
per tensor, the same for every run), and the translates' tiles apart: G groups, each one CTA
of every run, sharing nothing with each other. In the cache's logical order (wave, position, CTA) a
position of a wave holds every run's CTAs alive there, run by run, each run's CTAs in order.
Let R be the stream of the runs' first CTAs in that order, each (wave, position) a row. Group
k's accesses are R moved by k's shift. An access of CTA (r, k) at row t to a tile X last
touched by the group at (p, r') has in its window: of its own group, R's accesses strictly
between (p, r') and (t, r); of each group k' < k, those from just after (p, r') through
(t, r), which add the translate of X at (t, r); of each k' > k, those from (p, r') to just
before (t, r), which add the translate of X at (p, r'). The groups' tiles being apart, the
window holds D + (G - 1)(D + |X|) distinct bytes, D those of R's own window, whatever k is:
it hits iff G (D + |X|) <= C, which is R's answer with every tile weighing its G copies
(each copy fits, so each weighted tile does: the rule is not used otherwise).

An access with no earlier touch in its group depends on what came before the kernel: once R's
first rows hold C weighted distinct bytes, every such access after them misses; only those
rows of every group are decided in one stream with the kernels around the kernel, followed by
its last rows that hold C bytes, which is what the next kernel can find (as in lockstep).
Everything else takes R's answer.
"""

from __future__ import annotations

import math

import numpy as np

from ..workload.arrays import distinct
from ..workload.work import KernelWork
from .bulk import positions_dtype
from .lockstep import LockstepWave, class_shifts, held_prefix, tiles_apart
from .lru import lru_answer, tile_ids
from .order import in_logical_order


class ClassWave(LockstepWave):
    """A kernel the rule above decides (`of` says whether it does): R's accesses (ops, keys,
    bytes, tensor, and where each run's accesses lie in it), the groups' shifts, and the rows
    of R laid out for every group at its head and its tail. A LockstepWave to l2.fast, which
    lays out any such kernel's head and tail alike (`layout`, `build`, `decided`) and asks it
    for its table."""

    def __init__(
        self, kw: KernelWork, groups: int, shift: np.ndarray, r: tuple, spans: tuple, ids=None
    ):
        """`ids`: R's tile ids (`lru.tile_ids` of its keys) where the caller has them."""
        self.kw, self.groups, self.shift = kw, groups, shift
        self.op, keys, self.nbytes, tensor, self.where = r
        self.ids = tile_ids(keys) if ids is None else ids
        self.head, self.tail = spans  # R's accesses laid out before and after the middle
        self.decided = groups * (self.head + self.tail) + len(self.op)
        # only the head's and the tail's keys are laid out again (`build`): R's are millions
        # (67 MB for fa2 causal at 64k tokens), its ids stand for them everywhere else
        n = len(self.op)
        self.edges = np.concatenate([np.arange(self.head), np.arange(n - self.tail, n)])
        self.edge_keys, self.edge_tensor = keys[self.edges], tensor[self.edges]

    @classmethod
    def of(cls, kw: KernelWork, slots: int, capacity: int) -> ClassWave | None:
        """The rule for this kernel, or None where it does not hold or would skip nothing."""
        n = kw.n_ctas
        classes = getattr(kw.keys, "classes", None)
        if classes is None or len(classes) < 2:
            return None
        layout = kw.keys.layout
        of_cta = layout.classes(np.arange(n))
        sizes = np.bincount(of_cta, minlength=len(classes))
        if (of_cta != np.repeat(np.arange(len(classes)), sizes)).any():
            return None  # classes laid out one after another
        # runs of `groups` CTAs, each run in one class and one wave
        groups = math.gcd(*sizes.tolist(), *([slots] if n > slots else []))
        if groups < 2:
            return None
        shift = None
        bounds = np.concatenate([[0], np.cumsum(sizes)]).tolist()
        alike = set()  # families whose classes (of a size) were found to translate alike
        for z, ck in enumerate(classes):
            # classes of one family's run move by the same steps along the same axes: where
            # one of a size translated alike, so do the rest (classkeys.ClassKeys.family)
            family = None if ck.family is None else (id(ck.family), int(sizes[z]))
            if family in alike:
                continue
            found = class_shifts(ck, layout.take(np.arange(bounds[z], bounds[z + 1])))
            if found is None:
                return None
            own, used = found
            runs = own.reshape(int(sizes[z]) // groups, groups, *own.shape[1:])
            runs = runs - runs[:, :1]  # each run's CTAs from its first
            if (runs != runs[:1]).any():
                return None
            own = np.zeros((groups, int(used.max()) + 1 if len(used) else 0, 2), np.int64)
            own[:, used] = runs[0]  # by tensor id, for every class alike
            if shift is not None:  # the same translate for every class: pad to its tensors
                width = max(shift.shape[1], own.shape[1])
                shift, own = _padded(shift, width), _padded(own, width)
                if not np.array_equal(shift, own):
                    return None
            shift = own
            if family is not None:
                alike.add(family)
        r = _first_ctas_stream(kw, groups, slots)
        op, keys, nbytes, tensor, _where, row = r
        if not len(op) or int(nbytes.max()) * groups > capacity:
            return None  # a tile whose copies alone fill the cache: the sums fail
        if not _apart(shift, keys, tensor):
            return None
        ids = tile_ids(keys)
        weighed = nbytes * groups
        head = held_prefix(ids, weighed, capacity)
        tail = held_prefix(ids[::-1], weighed[::-1], capacity)
        if head is None or tail is None:
            return None
        starts = np.flatnonzero(np.concatenate([[True], row[1:] != row[:-1]]))
        after = np.searchsorted(starts, head - 1, side="right")  # the row after the head's last
        head = int(starts[after]) if after < len(starts) else len(op)
        first = len(op) - tail
        tail = len(op) - int(starts[np.searchsorted(starts, first, side="right") - 1])
        if groups * (head + tail) + len(op) >= groups * len(op):
            return None  # about every row laid out: nothing saved
        return cls(kw, groups, shift, r[:5], (head, tail), ids)

    def layout(self) -> list[tuple[int, int]]:
        """The accesses `build` lays out for the kernel's head and for its tail."""
        return [(self.groups * self.head, self.groups * self.tail)]

    def build(self) -> tuple[ClassWave, np.ndarray, np.ndarray, np.ndarray]:
        """R's head and tail rows for every group, in the cache's logical order (each of R's
        accesses followed by its translates in the other groups): (self, op, key, bytes)."""
        pos = self.edges
        moved = self.shift[:, self.edge_tensor, :].transpose(1, 0, 2)
        keys = (self.edge_keys[:, None, :] + moved).reshape(-1, 2)
        ops = np.repeat(self.op[pos], self.groups).astype(np.int8)
        return self, ops, keys, np.repeat(self.nbytes[pos], self.groups)

    def own_answer(self, capacity: int) -> np.ndarray:
        """R from an empty cache, each tile weighing its G copies, at capacity C."""
        return lru_answer(self.op, self.ids, self.nbytes * self.groups, capacity)

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
        run, k = members // groups, members % groups
        at = np.stack([where[int(r)] for r in run.tolist()])  # (m, n): R positions
        out = self.own[at]
        inside = at < self.wave.head
        out[inside] = self.first[at[inside], np.broadcast_to(k[:, None], at.shape)[inside]]
        return out

    def counts(self, members: np.ndarray) -> np.ndarray:
        """Per transfer, how many of the members hit: `rows` summed, a run at a time (its
        members share R's answer past the head rows, so that part is counted once)."""
        members = np.asarray(members, dtype=np.int64)
        groups, where, head = self.wave.groups, self.wave.where, self.wave.head
        run, k = members // groups, members % groups
        out = None
        one = len(run) and bool((run == run[0]).all())  # members of one run (launched together)
        for r in [int(run[0])] if one else distinct(run).tolist():
            mine = k if one else k[run == r]
            at = where[r]  # ascending: R lays a run's accesses out in its program's order
            part = np.multiply(self.own[at], len(mine), dtype=np.int64)
            inside = int(np.searchsorted(at, head))  # its accesses among R's head rows
            if inside:
                part[:inside] = self.first[at[:inside][:, None], mine[None, :]].sum(axis=1)
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


def _first_ctas_stream(kw: KernelWork, groups: int, slots: int) -> tuple:
    """R: the accesses of each run's first CTA in the cache's logical order (wave by wave,
    position by position, run by run), laid out as l2.fast lays out any CTAs': (op, key,
    bytes, tensor, per run the R index of each of its accesses, each access's row: its wave
    and position as one number)."""

    firsts = np.arange(0, kw.n_ctas, groups)
    (_ctas, wave, order), op, keys, nbytes = in_logical_order(kw, firsts, slots)
    lengths = kw.transfer_rows[1][kw.cta_template[firsts]].astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)])
    # positions in R's own dtype (int32 below 2^31 accesses): R is millions of accesses, and
    # each of these arrays is R long (fa2 causal at 64k tokens: 4.2 M)
    places = positions_dtype(len(order))
    # each access's place in its run's program, by run and place, then in R's order
    local = np.arange(len(order), dtype=places)
    local -= np.repeat(starts[:-1].astype(places), lengths)
    longest = int(lengths.max()) if len(lengths) else 0
    waves = int(wave.max()) + 1 if len(wave) else 0
    row = wave.astype(positions_dtype(waves * (longest + 1)))  # int32 where it holds them
    row *= longest + 1
    row += local[order]
    del local
    classes, of_run = kw.keys.classes, kw.keys.layout.classes(firsts)
    # tensor ids, as templates hold them (int16): each class's once, not R's length in int64
    narrow = {int(c): classes[c].tensor.astype(np.int16) for c in distinct(of_run).tolist()}
    tensor = np.concatenate(
        [narrow[c][:n] for c, n in zip(of_run.tolist(), lengths.tolist(), strict=True)]
    )
    tensor = tensor[order]
    where_flat = np.empty(len(order), dtype=places)
    where_flat[order] = np.arange(len(order), dtype=places)
    where = [where_flat[a:b] for a, b in zip(starts[:-1], starts[1:], strict=True)]
    return op, keys, nbytes, tensor, where, row


def _apart(shift: np.ndarray, keys: np.ndarray, tensor: np.ndarray) -> bool:
    """Whether the groups' tiles are apart: per tensor, R's tiles moved by each group's shift
    never meet another group's (lockstep.tiles_apart, on their last elements). R's distinct
    (tensor, last element) pairs are found first, in one sort of the pairs packed as ints
    (R is millions of accesses of some thousands of tiles: one sort of ints is cheaper than a
    mask and a sort per tensor)."""
    last = keys[:, 1]
    width = int(tensor.max()) + 1 if len(tensor) else 1
    if len(last) and (int(last.min()) < 0 or int(last.max()) >= (1 << 62) // width):
        pairs = None  # does not pack: a mask per tensor
    else:
        packed = last * width
        packed += tensor
        pairs = distinct(packed)
        del packed
    for t in distinct(tensor).tolist():
        own = keys[tensor == t, 1] if pairs is None else pairs[pairs % width == t] // width
        if not tiles_apart(own, np.sort(shift[:, t, 1])):
            return False
    return True
