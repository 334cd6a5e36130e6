"""L2 hits of one-class kernels from the runs of their access stream: the LRU's answer, exact.

Why: without a causal mask, an attention kernel's CTAs all run one template, and the cache's
logical order (l2.logical_order: wave by wave, position by position, CTA by CTA) is made of
long runs of one tile: every CTA of a wave that works on the same head reads the same K and V
tiles at the same position. Deciding every access costs memory and time in proportion to
them (fa2 at 128k tokens x 16 heads: 134 M accesses, 21 GB to decide them one by one), while
the answer lies in the runs' first accesses (the heads):

- an access that repeats the tile just touched finds it most recent: it hits if it reads a
  tile that fits in the cache, and it leaves the LRU as it was;
- so the LRU's answer for the heads alone, in order, is its answer for them within the whole
  stream (every window between two touches holds the same distinct tiles), and the repeats
  follow the rule above. `l2.bulk_hits` applies the same rule to the repeats it sees.

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

import numpy as np

from .trace import OP_ATOMIC, OP_LOAD
from .workload import ranges


def compressible(kw) -> bool:
    """Whether the kernel's stream can be built from its runs: one template, one class whose
    keys are affine in the coordinates, or shifted per tensor (no sampled or explicit term)."""
    classes = getattr(kw.keys, "classes", None)
    if len(kw.templates) != 1 or classes is None or len(classes) != 1 or kw.n_ctas < 2:
        return False
    ck = classes[0]
    return ck.explicit is None and not ck.tables


class RunStream:
    """A one-class kernel's run heads in the cache's logical order (after `build`): each
    head's CTA, position and (n, 2) tile key; the op and bytes of each position."""

    def __init__(self, kw, slots: int):
        ck, layout = kw.keys.classes[0], kw.keys.layout
        naxes = len(ck.axes)
        n = kw.n_ctas
        first, counts, op, nbytes = kw._tr
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
        steps, pattern = np.unique(step, axis=0, return_inverse=True)
        pattern = pattern.reshape(-1)
        moved = np.einsum("pa,atk->ptk", steps[:, :naxes], delta)  # (patterns, n_tr, 2)
        for j, a in enumerate(shifted):
            table = ck.shifts[a][:, ck.tensor]  # (values, n_tr, 2)
            before, after = steps[:, naxes + 2 * j], steps[:, naxes + 2 * j + 1]
            moved += table[after] - table[before]
        breaks = (moved != 0).any(axis=2)  # (patterns, n_tr)
        # position classes: the positions where the same steps break a run
        cols, klass = np.unique(breaks.T, axis=0, return_inverse=True)
        klass = klass.reshape(-1)
        wave_first = np.zeros(n, dtype=bool)
        wave_first[::slots] = True
        self._classes = []  # per position class: its heads' CTAs and its positions
        for s, breaking in enumerate(cols):
            head = wave_first.copy()
            head[1:] |= breaking[pattern]
            self._classes.append((np.flatnonzero(head), np.flatnonzero(klass == s)))
        self.heads = sum(len(c) * len(t) for c, t in self._classes)
        self._formula = (ck, coords, index, shifted)

    def build(self) -> tuple[RunStream, np.ndarray, np.ndarray, np.ndarray]:
        """Lay out the heads (CTA, position, key) in the cache's logical order; `heads` says
        how many there will be, so a caller can refuse first. Returns the stream and its
        heads' (op, key, bytes), as l2fast lays out any kernel's accesses."""
        ck, coords, index, shifted = self._formula
        naxes, slots, n = len(ck.axes), self.slots, self.kw.n_ctas
        cta = np.concatenate([np.repeat(c, len(t)) for c, t in self._classes])
        pos = np.concatenate([np.tile(t, len(c)) for c, t in self._classes])
        order = np.lexsort((cta, pos, cta // slots))  # wave, then position, then CTA
        self.cta, self.pos = cta[order], pos[order]
        self.wave_start = np.searchsorted(self.cta // slots, np.arange(-(-n // slots) + 1))
        rel = coords[self.cta] - ck.rep[:naxes]
        self.key = ck.base[self.pos].copy()
        for axis, d in ck.affine.items():
            self.key += rel[:, axis, None] * d[self.pos]
        for a in shifted:
            self.key += ck.shifts[a][index[a][self.cta], ck.tensor[self.pos]]
        return self, self.op[self.pos].astype(np.int8), self.key, self.nbytes[self.pos]


class RunHitTable:
    """A one-class kernel's L2 hits from its run heads' answers (`hits`, one per head of the
    RunStream) and the repeats' rule (`repeat`, one per position): HitTable's interface."""

    skip = None  # every wave is decided (none skipped, as l2fast.HitTable may)

    def __init__(self, stream: RunStream, hits: np.ndarray, capacity: int):
        self.stream = stream
        self.kw = stream.kw
        self.hits = hits
        reads = (stream.op == OP_LOAD) | (stream.op == OP_ATOMIC)
        self.repeat = reads & (stream.nbytes <= capacity)

    def _heads(self, members: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The members' heads: (CTA, position, hit) of each."""
        st = self.stream
        waves = np.unique(np.asarray(members) // st.slots)
        sel = ranges(st.wave_start[waves], st.wave_start[waves + 1] - st.wave_start[waves])
        first, last = int(members[0]), int(members[-1])
        if last - first + 1 == len(members) and bool(np.all(np.diff(members) == 1)):
            sel = sel[(st.cta[sel] >= first) & (st.cta[sel] <= last)]  # a run of CTAs: a wave
        else:
            sel = sel[np.isin(st.cta[sel], members)]
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


__all__ = ["RunHitTable", "RunStream", "compressible"]
