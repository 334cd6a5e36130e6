"""L2 hits of waves whose CTAs run one long program on translated tiles: from one CTA's stream.

Why: the first flash-attn release runs one CTA per (batch, head) over the whole sequence, a
single wave of long programs (batch 16 x 8 heads at 16k tokens: 128 CTAs x 326 k loads and
stores, 41.7 M), and PyTorch's P V and gradient GEMMs run a CTA per row block over a whole
head (8.4 M accesses per kernel at 16k tokens, batch 4 x 16 heads), in waves no other rule
here can skip: every access was decided, past the memory budget. Yet the CTAs are translates
of each other.

The argument (byte-capacity LRU, bulk.bulk_hits: an access hits iff its tile fits and the
distinct fitting tiles touched since its previous touch, plus itself, take at most the
capacity C). In the cache's logical order (lru.logical_order) a wave's accesses run position by
position, CTA by CTA. Take a kernel of one template whose CTAs' tile keys are CTA 0's moved by
one shift per tensor, each tensor either private (no two CTAs share a tile) or shared by
teams: runs of consecutive CTAs that read the same tiles, the teams' tiles apart, one cut into
teams for every shared tensor. In a wave of m CTAs and T teams, CTA c's access at position t
to a tile it last touched at position p has in its window positions p to t - 1 of the CTAs
after it, p + 1 to t of those before it and p + 1 to t - 1 of its own: for each tile CTA 0
touched strictly between p and t, m translates if private, T if shared (a team's members
share theirs), and of the tile itself m - 1 more if private, T - 1 if shared (its own team's
members at p or t hold the same tile). So it hits iff the weighted distinct bytes (each tile's
bytes times its copies, m or T) in CTA 0's own window, plus its own weighted bytes, take at
most C: CTA 0's stream, each tile weighing its copies, answers every CTA at capacity C (every
weighted tile fits there as each copy fits in C, or the rule is not used). A team's later
CTAs read a shared tile right after the CTA before them: a run's repeat, a hit.

An access with no earlier touch in the wave depends on what came before it (an earlier wave of
its team, an earlier kernel). Once the wave's first h positions hold C weighted distinct
bytes, every such access after them misses (its window holds all of them); so only those
positions are decided in one stream with the kernels around the kernel, followed by its last
positions that hold C bytes, which is what the next wave or kernel can find: a later window
that reaches into the positions left out holds that whole tail, and misses in the stream as in
the cache. Everything else takes CTA 0's answer.
"""

from __future__ import annotations

import numpy as np

from ..workload.arrays import distinct
from ..workload.classkeys import NOT_LEARNED, per_tensor_shift
from ..workload.work import KernelWork
from .lru import lru_answer, tile_ids
from .runs import repeat_hits


class LockstepWave:
    """A kernel the rule above decides, wave by wave (`of` says whether it does): its CTAs'
    shifts per tensor, their teams, and per wave its CTAs, its weights (CTAs, teams) and the
    head and tail it leaves in the stream."""

    def __init__(self, kw, slots: int, shift, keys, shared, team, spans: list[tuple], columns):
        """`spans`: per wave, (its teams, its head's positions, its tail's); `columns`: each
        transfer's tensor as a column of `shift` (class_shifts' `used`)."""
        first, counts, op, nbytes = kw.transfer_rows
        n_tr = int(counts[0])
        self.kw, self.slots, self.shift, self.keys = kw, slots, shift, keys
        self.columns = columns
        self.op = op[first[0] : first[0] + n_tr]
        self.nbytes = nbytes[first[0] : first[0] + n_tr]
        self.n_tr = n_tr
        self.shared = shared  # (n_tr,) bool: the position reads a tile its team shares
        self.team = team  # (n_ctas,) team of each CTA (each its own where nothing is shared)
        self.waves = []  # per wave: (first CTA, CTAs, teams, head, positions in the stream)
        laid: dict[tuple[int, int], np.ndarray] = {}  # one array per kind of wave
        for w, (teams, head, tail) in enumerate(spans):
            lo = w * slots
            m = min(slots, kw.n_ctas - lo)
            if (head, tail) not in laid:
                laid[head, tail] = np.concatenate([np.arange(head), np.arange(n_tr - tail, n_tr)])
            self.waves.append((lo, m, teams, head, laid[head, tail]))
        # accesses decided: the stream, and CTA 0's own stream once per kind of wave
        kinds = len({(m, t) for _lo, m, t, _h, _p in self.waves})
        self.decided = sum(m * len(pos) for _lo, m, _t, _h, pos in self.waves) + kinds * n_tr

    @classmethod
    def of(
        cls, kw: KernelWork, slots: int, capacity: int, most: int | None = None
    ) -> LockstepWave | None:
        """The rule for this kernel, or None where it does not hold, would skip nothing, or
        would decide more than `most` accesses (None: any number)."""
        n = kw.n_ctas
        classes = getattr(kw.keys, "classes", None)
        if n < 2 or len(kw.templates) != 1 or classes is None or len(classes) != 1:
            return None
        first, counts, _op, nbytes = kw.transfer_rows
        sizes = nbytes[first[0] : first[0] + int(counts[0])]
        widest = min(slots, n)
        # a wave whose CTAs move less than the capacity in all leaves nothing out
        if not len(sizes) or int(sizes.sum()) * widest < capacity:
            return None
        keys = kw.keys.take(np.arange(1))  # CTA 0's stream: what the rule works from
        ids = tile_ids(keys)
        firsts = _first_touches(ids), _first_touches(ids[::-1])
        if most is not None and _least_decided(n, slots, capacity, sizes, firsts) > most:
            return None  # known from CTA 0 alone, before every CTA's shifts are worked out
        found = _shifts(kw)
        if found is None:
            return None
        shift, used = found
        tensor = np.searchsorted(used, classes[0].tensor)  # as shift's columns number them
        teams = _teams(shift, keys, tensor)
        if teams is None:
            return None
        shared_tensors, team = teams
        shared = np.isin(tensor, shared_tensors)
        spans, kinds = [], {}
        for lo in range(0, n, slots):
            m = min(slots, n - lo)
            kind = (m, int(team[lo + m - 1] - team[lo]) + 1)  # teams are runs of CTAs
            if kind not in kinds:
                weight = _weights(shared, *kind)
                if int((weight * sizes).max()) > capacity:
                    return None  # a tile whose copies alone fill the cache: the sums fail
                edges = _edges(firsts, sizes * weight, capacity)
                # None: every position in the stream
                kinds[kind] = (kind[1], len(ids), 0) if edges is None else (kind[1], *edges)
            spans.append(kinds[kind])
        if all(tail == 0 for _teams, _head, tail in spans):
            return None
        return cls(kw, slots, shift, keys, shared, team, spans, tensor)

    def layout(self) -> list[tuple[int, int]]:
        """Per wave, the accesses `build` lays out for its head and for its tail."""
        return [(m * head, m * (len(pos) - head)) for _lo, m, _t, head, pos in self.waves]

    def build(self) -> tuple[LockstepWave, np.ndarray, np.ndarray, np.ndarray]:
        """Each wave's head and tail positions of its CTAs in the cache's logical order (wave,
        position, CTA) as l2.fast lays out any kernel's accesses: (self, op, key, bytes)."""
        tensor = self.columns
        ops, keys, sizes = [], [], []
        for lo, m, _t, _head, pos in self.waves:
            moved = self.shift[lo : lo + m][:, tensor[pos], :].transpose(1, 0, 2)
            keys.append((self.keys[pos][:, None, :] + moved).reshape(-1, 2))
            ops.append(np.repeat(self.op[pos], m).astype(np.int8))
            sizes.append(np.repeat(self.nbytes[pos], m))
        return self, np.concatenate(ops), np.concatenate(keys), np.concatenate(sizes)

    def table(self, stream: np.ndarray, capacity: int) -> LockstepHitTable:
        """The kernel's HitTable, given its part of the stream as `build` laid it out."""
        return LockstepHitTable(self, stream, capacity)

    def own_answer(self, capacity: int, m: int, teams: int) -> np.ndarray:
        """CTA 0's stream from an empty cache, each tile weighing its copies in the wave (m,
        or `teams` for a shared one), at capacity C: each position's hit."""
        sizes = self.nbytes * _weights(self.shared, m, teams)
        return lru_answer(self.op, tile_ids(self.keys), sizes, capacity)


class LockstepHitTable:
    """HitTable's interface for a LockstepWave: per wave, the stream's answers for its head
    (`stream`: the kernel's part, as `build` laid it out), and after it CTA 0's, but for a
    shared tile read by a team's later CTAs: the run's repeat, a hit."""

    skip = None  # every access is decided (the middle by the rule, not skipped)

    def __init__(self, wave: LockstepWave, stream: np.ndarray, capacity: int):
        self.kw, self.slots = wave.kw, wave.slots
        self.repeat = wave.shared & repeat_hits(wave.op, wave.nbytes, capacity)
        self.shared = wave.shared
        self.later = np.zeros(self.kw.n_ctas, dtype=bool)  # a team's CTA after its first
        own: dict[tuple[int, int], np.ndarray] = {}
        self.waves = []  # per wave: (CTA 0's answer for its kind, (m, head) head answers)
        at = 0
        for lo, m, teams, head, pos in wave.waves:
            if (m, teams) not in own:
                own[m, teams] = wave.own_answer(capacity, m, teams)
            part = stream[at : at + m * len(pos)].reshape(len(pos), m).T
            self.waves.append((own[m, teams], part[:, :head]))
            self.later[lo + 1 : lo + m] = wave.team[lo + 1 : lo + m] == wave.team[lo : lo + m - 1]
            at += m * len(pos)
        self.hits = np.concatenate([stream, *own.values()])  # every answer decided one by one

    def rows(self, members: np.ndarray) -> np.ndarray:
        """(m, n) bool: each member's own hits."""
        members = np.asarray(members, dtype=np.int64)
        out = np.empty((len(members), self.waves[0][0].size), dtype=bool)
        wave = members // self.slots
        for w in distinct(wave).tolist():
            own, first = self.waves[w]
            sel = np.flatnonzero(wave == w)
            out[sel] = own
            later = sel[self.later[members[sel]]]
            out[np.ix_(later, np.flatnonzero(self.shared))] = self.repeat[self.shared]
            out[sel, : first.shape[1]] = first[members[sel] - w * self.slots]
        return out

    def counts(self, members: np.ndarray) -> np.ndarray:
        """Per transfer, how many of the members hit: `rows` summed, without laying out a row
        per member (a wave of long programs would take hundreds of MB)."""
        members = np.asarray(members, dtype=np.int64)
        out = np.zeros(self.waves[0][0].size, dtype=np.int64)
        wave = members // self.slots
        for w in distinct(wave).tolist():
            own, first = self.waves[w]
            sel = members[wave == w]
            col = own.astype(np.int64) * len(sel)
            later = int(self.later[sel].sum())
            col[self.shared] += (
                self.repeat[self.shared].astype(np.int64) - own[self.shared]
            ) * later
            col[: first.shape[1]] = first[sel - w * self.slots].sum(axis=0)
            out += col
        return out

    def every_access(self) -> np.ndarray:
        """A bool per access of the kernel, CTA by CTA (for comparisons)."""
        return self.rows(np.arange(self.kw.n_ctas)).ravel()


def _least_decided(n: int, slots: int, capacity: int, sizes: np.ndarray, firsts: tuple) -> int:
    """The fewest accesses the rule could decide for a kernel of n CTAs: each wave's head and
    tail as short as they can be, every tile weighing a copy per CTA of the wave (a shared
    tile weighs one per team, fewer: its head holds the capacity later), and CTA 0's own
    stream (`sizes`, `firsts`: its bytes and first touches, as `_edges` takes them). Known
    from CTA 0's stream alone, before the rule works out every CTA's shifts (a kernel of 67 M
    CTAs, fa2 at 1M tokens x 4096 heads, is found too long without them)."""
    n_tr = len(sizes)
    full, last = divmod(n, slots)
    out = n_tr
    for m, waves in ((slots, full), (last, 1)):
        if m and waves:
            edges = _edges(firsts, sizes * m, capacity)
            out += waves * m * (n_tr if edges is None else sum(edges))
    return out


def _edges(firsts: tuple, weighed: np.ndarray, capacity: int) -> tuple[int, int] | None:
    """A wave's head and tail (`_holding` from each end, `firsts`: first touches from the
    front and from the back), or None where they leave no middle out."""
    head = _holding(firsts[0], weighed, capacity)
    tail = _holding(firsts[1], weighed[::-1], capacity)
    if head is None or tail is None or head + tail >= len(weighed):
        return None
    return head, tail


def _shifts(kw: KernelWork) -> tuple[np.ndarray, np.ndarray] | None:
    """`class_shifts` of the kernel's one class, for every CTA."""
    ck, layout = kw.keys.classes[0], kw.keys.layout
    return class_shifts(ck, layout.take(np.arange(kw.n_ctas)))


def class_shifts(ck, coords: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(shifts, used): how far the keys of the class's CTAs at `coords` lie from the first's,
    per tensor the class moves (`used`, ascending tensor ids; shifts is (m, len(used), 2));
    None where some term of the class's formula moves a tensor's tiles unevenly (no
    translation). Only the tensors the class moves: a kernel of a million CTAs (eager
    softmax rows at 16k tokens) moves two or three of a plan's twenty tensors, where a column
    per plan tensor would be hundreds of megabytes of zeros."""
    if ck.explicit is not None:
        return None
    naxes = len(ck.axes)
    coords = coords[:, :naxes]
    tensor = ck.tensor
    used = np.flatnonzero(np.bincount(tensor)) if len(tensor) else tensor[:0].astype(np.int64)
    shift = np.zeros((len(coords), len(used), 2), dtype=np.int64)
    if not len(tensor):  # no transfers: nothing moves
        return shift, used
    for axis, delta in ck.affine.items():
        d = per_tensor_shift(delta[None], tensor)  # (1, tensor ids, 2), or None
        if d is None:
            return None
        shift += (coords[:, axis] - coords[0, axis])[:, None, None] * d[:, used]
    for axis, table in ck.tables.items():
        values = per_tensor_shift(table, tensor)
        if values is None:
            return None
        values = values[:, used]
        at = coords[:, axis] - ck.axes[axis][0]
        shift += values[at] - values[at[0]]
    for axis, table in ck.shifts.items():
        mine = table[:, used]
        if (mine == NOT_LEARNED).any():
            return None
        at = coords[:, axis] - ck.axes[axis][0]
        shift += mine[at] - mine[at[0]]
    return shift, used


def _teams(shift: np.ndarray, keys: np.ndarray, tensor: np.ndarray):
    """(shared tensors, team of each CTA), or None. A tensor is private where no two CTAs
    share a tile (the spans of their tiles' last elements, CTA 0's moved by each CTA's shift,
    do not overlap), shared where runs of consecutive CTAs read the same tiles and the runs'
    tiles do not overlap; every shared tensor must cut the CTAs into the same runs (teams)."""
    n = len(shift)
    shared, cuts = [], None
    for t in distinct(tensor).tolist():
        last = keys[tensor == t, 1]
        width = int(last.max()) - int(last.min()) + 1
        own = shift[:, t, :]
        new = np.ones(n, dtype=bool)
        new[1:] = (own[1:] != own[:-1]).any(axis=1)
        at = np.sort(own[new, 1])  # where each run's tiles start (apart: never one twice)
        if len(at) > 1 and int(np.diff(at).min()) < width and not tiles_apart(last, at):
            return None  # runs (teams, or CTAs) whose tiles meet or come back
        if new.all():
            continue  # private
        if cuts is not None and not np.array_equal(cuts, new):
            return None
        cuts = new
        shared.append(t)
    team = np.cumsum(cuts) - 1 if cuts is not None else np.arange(n)
    return np.array(shared, dtype=np.int64), team


# Runs whose tiles' spans overlap are told apart tile by tile up to this many (run, tile)
# pairs: column blocks of one matrix (a GEMM's CTA per block of P's columns) interleave in
# memory without sharing a tile
MAX_APART_PAIRS = 1 << 24


def tiles_apart(last: np.ndarray, at: np.ndarray) -> bool:
    """Whether runs at the shifts `at` (sorted) of tiles with CTA 0's last elements `last`
    never share a tile: no last element moved by one run's shift is another run's."""
    own = distinct(last)
    if len(at) * len(own) > MAX_APART_PAIRS or (np.diff(at) == 0).any():
        return False
    ids = np.sort((own[None, :] + at[:, None]).ravel())  # (np.unique hashes: 100x slower)
    return not (ids[1:] == ids[:-1]).any()


def _weights(shared: np.ndarray, m: int, teams: int) -> np.ndarray:
    """Copies of each position's tile in a wave of m CTAs in `teams` teams."""
    return np.where(shared, teams, m).astype(np.int64)


def _first_touches(ids: np.ndarray) -> np.ndarray:
    """Whether each position of the stream touches its tile for the first time."""
    _, at = np.unique(ids, return_index=True)
    fresh = np.zeros(len(ids), dtype=bool)
    fresh[at] = True
    return fresh


def held_prefix(ids: np.ndarray, weighed: np.ndarray, capacity: int) -> int | None:
    """`_holding` of the stream's first touches, from its prefixes: a position's first touch
    in a prefix is its first touch in the stream, so where a prefix holds the capacity the
    answer lies in it, without sorting the whole stream (flash-attn 1.x's and causal classes'
    first-CTA streams are millions of accesses; the cache fills within a few thousand)."""
    n, length = len(ids), min(len(ids), 1 << 12)
    while True:
        got = _holding(_first_touches(ids[:length]), weighed[:length], capacity)
        if got is not None or length == n:
            return got
        length = min(n, 4 * length)


def _holding(fresh: np.ndarray, weighed: np.ndarray, capacity: int) -> int | None:
    """The fewest first positions of the stream whose distinct tiles (`fresh`: first touches),
    each weighing all its copies in the wave (`weighed`), hold the capacity (None: the whole
    stream holds less)."""
    held = np.cumsum(np.where(fresh, weighed, 0))
    i = int(np.searchsorted(held, capacity))
    return i + 1 if i < len(fresh) else None
