"""The L2 model: a tile-granular LRU cache of the GPU's L2 capacity, between SRAM and HBM.

A load hits when the same tile (tensor and region) is resident; a hit costs L2 latency and
bandwidth and no DRAM traffic. A store writes the tile into L2 and also counts as a DRAM write
(write-back traffic is charged when the store happens). An atomic add is a load and a store
of its tile at L2: it hits like a load (no DRAM read) and is charged as a DRAM write. Tiles
larger than the whole L2 are never cached.

The cache evolves in a fixed *logical order*, not in simulated time: kernel by kernel; within a
kernel, waves of as many CTAs as fit on the GPU at once, in launch order; within a wave, op by
op in lockstep (every CTA's first transfer, then every CTA's second, ...). This is how resident
CTAs progress on a real GPU to first order, it keeps the cache model independent of timing,
and it makes the fast path and the full replay see identical hits.

What it ignores: cache lines and sectors (a tile hits only if the same tile was touched before,
so kernels that tile a tensor differently never hit on each other's tiles), set associativity,
hashing across L2 partitions, and in-flight misses (a second request for a tile being fetched
counts as a hit).
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from ...interpret.trace import OP_ATOMIC, OP_LOAD
from ..workload.work import KernelWork

CHECKPOINT = 1024  # positions between the checkpoints of the exact window sums
NUMPY_STEPS_PER_ACCESS = 50  # vectorised steps worth one access of the replay (~1 µs each)
# The gap bound (_crowded_by_gaps): window lengths rounded up to thresholds this many per octave,
# at most this many thresholds, each a few passes over the heads and worth it only for at least
# one window per GAP_LEVEL_SHARE heads
GAP_LEVELS_PER_OCTAVE, MAX_GAP_LEVELS, GAP_LEVEL_STEPS, GAP_LEVEL_SHARE = 16, 8, 4, 64


def logical_order(kw: KernelWork, slots: int) -> np.ndarray:
    """Permutation of a kernel's accesses into the cache's logical order."""
    wave = kw.acc_cta // max(1, slots)
    return np.lexsort((kw.acc_cta, kw.acc_index, wave))


class LRU:
    """Byte-capacity LRU over tile keys; state carries over from kernel to kernel."""

    def __init__(self, capacity_bytes: int, span: int | None = None):
        """`span`: one more than any key's last element, for packing keys into single ints
        (the same packing for every kernel, so tiles match across kernels); None: tuples."""
        self.span = span
        self.capacity = capacity_bytes
        self.used = 0
        self.tiles: OrderedDict = OrderedDict()

    def replay(self, ops: np.ndarray, keys: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        """Apply accesses in order; returns a bool per access: True for a load that hit.

        A run of consecutive accesses to one tile (in lockstep order, every CTA of a wave
        reading the same K tile) needs the cache only once: after the first, the tile is the
        most recent one, so the rest hit (if it fits at all). Only run heads are replayed.
        """
        n = len(ops)
        if n == 0:
            return np.zeros(0, dtype=bool)
        is_load = (ops == OP_LOAD) | (ops == OP_ATOMIC)  # an atomic add hits like a load
        same = np.zeros(n, dtype=bool)
        same[1:] = (keys[1:, 0] == keys[:-1, 0]) & (keys[1:, 1] == keys[:-1, 1])
        hits = is_load & same & (sizes <= self.capacity)
        heads = np.flatnonzero(~same)
        hits[heads] = self._replay_heads(is_load[heads], self._hashable(keys[heads]), sizes[heads])
        return hits

    def _hashable(self, keys: np.ndarray) -> list:
        if self.span is not None:
            return (keys[:, 0] * self.span + keys[:, 1]).tolist()  # exact: last < span
        return list(zip(keys[:, 0].tolist(), keys[:, 1].tolist(), strict=True))

    def _replay_heads(self, is_load: np.ndarray, keys: list, sizes: np.ndarray) -> np.ndarray:
        out = []
        tiles, cap = self.tiles, self.capacity
        used = self.used
        move = tiles.move_to_end
        popitem = tiles.popitem
        append = out.append
        for load, key, n in zip(is_load.tolist(), keys, sizes.tolist(), strict=True):
            if key in tiles:
                move(key)
                append(load)
                continue
            append(False)
            if n > cap:
                continue
            tiles[key] = n
            used += n
            while used > cap:
                used -= popitem(last=False)[1]
        self.used = used
        return np.array(out, dtype=bool)


def positions_dtype(n: int):
    """The dtype of positions in a stream of n accesses (and of n + 1, a past-the-end mark):
    int32 where it holds them. A stream is tens of millions of accesses and its arrays are
    its memory."""
    return np.int32 if n < np.iinfo(np.int32).max - 1 else np.int64


def bulk_hits(
    ops: np.ndarray,
    keys: np.ndarray,
    sizes: np.ndarray,
    capacity_bytes: int,
    budget: int,
    checkpoint: int = CHECKPOINT,
    previous: np.ndarray | None = None,
) -> np.ndarray | None:
    """The LRU's answer for a whole access sequence from an empty cache, decided in bulk.

    `keys`: one int per tile. Byte-capacity LRU has a closed form: an access to a tile last
    touched at j hits iff the tile fits and the distinct tiles touched strictly between j and
    it (those that fit, each counted once) plus the tile itself take at most the capacity (a
    tile is evicted only once everything newer than it no longer fits beside it; nothing newer
    is evicted first). That distinct-bytes sum D is bracketed by prefix sums: at most the bytes
    of every run head in the window, at least the bytes of tiles touched there for the first
    time ever. Where the bracket decides, that is the answer; tighter lower bounds, from the
    gaps between touches (`_crowded_by_gaps`) and from the windows' last touches
    (`_crowded_by_ends`), decide the misses of streams that cycle through more than the cache
    holds; the rest get D counted exactly from their window, unless those windows together
    exceed `budget` accesses: then None (the caller replays the LRU access by access).

    `previous`: each access's previous touch of its tile (-1: none), where the caller has it
    (l2fast's trust test needs it too): a run head's previous head is then the head of the run
    holding that touch, no sort of the heads' keys.
    """
    n = len(ops)
    if n == 0:
        return np.zeros(0, dtype=bool)
    # Memory, not arithmetic, bounds this at scale (a stream is tens of millions of
    # accesses): positions are int32 where they fit, and what is no longer needed goes at once.
    pos = positions_dtype(n)
    same = np.zeros(n, dtype=bool)
    np.equal(keys[1:], keys[:-1], out=same[1:])
    load_fits = (ops == OP_LOAD) | (ops == OP_ATOMIC)
    load_fits &= sizes <= capacity_bytes
    hits = load_fits & same  # a repeat of the tile just touched: most recent, so a hit
    heads = np.flatnonzero(~same).astype(pos)
    m = len(heads)
    prev = _previous_heads(keys, heads, same, previous, pos)
    del same
    w = sizes[heads]
    w[w > capacity_bytes] = 0  # what a head adds to the cache
    seen = prev >= 0
    cf = np.zeros(m + 1, dtype=np.int64)  # first touches' bytes before each head
    np.cumsum(np.where(seen, 0, w), out=cf[1:])
    seen &= load_fits[heads]
    del load_fits
    cw = np.zeros(m + 1, dtype=np.int64)  # cw[t]: bytes of heads before t
    np.cumsum(w, out=cw[1:])
    j = np.where(seen, prev, 0).astype(pos)
    # the bracket, each side with the head's own bytes: it fits iff at most the capacity (a
    # head that is seen fits: its bytes are w's)
    at = j + 1
    bound = cw[at]
    np.subtract(cw[:m], bound, out=bound)
    bound += w
    head_hit = seen & (bound <= capacity_bytes)
    undecided = seen & ~head_hit
    np.take(cf, at, out=bound)
    np.subtract(cf[:m], bound, out=bound)
    bound += w
    open_ = np.flatnonzero(undecided & (bound <= capacity_bytes))
    del bound, at, undecided, cf, seen
    room = capacity_bytes - w[open_]
    if len(open_):
        nxt = np.full(m, m, dtype=pos)  # each head's next touch; m: none
        again = np.flatnonzero(prev >= 0)
        nxt[prev[again]] = again
        del again
        gap = np.arange(m, dtype=pos)
        np.subtract(nxt, gap, out=gap)
        gap[nxt == m] = m + 1
        crowded = _crowded_by_gaps(open_, j[open_], gap, w, cw, room, budget)
        del gap
        open_, room = open_[~crowded], room[~crowded]
    if len(open_):
        crowded = _crowded_by_ends(open_, j[open_], nxt, w, room, budget, checkpoint)
        open_, room = open_[~crowded], room[~crowded]
    if len(open_):
        roomy = _roomy_by_starts(open_, j[open_], prev, w, room, budget, checkpoint)
        head_hit[open_[roomy]] = True
        open_, room = open_[~roomy], room[~roomy]
    if len(open_):
        exact = _window_bytes(open_, j[open_], prev, nxt, w, budget, checkpoint)
        if exact is None:
            return None
        head_hit[open_] = exact <= room
    hits[heads] = head_hit
    return hits


def previous_touches(keys: np.ndarray) -> np.ndarray:
    """Position of each access's previous touch of its tile (`keys`: one int per tile), -1
    where none: one stable sort of the keys."""
    n = len(keys)
    pos = positions_dtype(n)
    prev = np.full(n, -1, dtype=pos)
    if n:
        order = np.argsort(keys, kind="stable").astype(pos)
        ranked = keys[order]
        same = ranked[1:] == ranked[:-1]
        del ranked
        prev[order[1:][same]] = order[:-1][same]
    return prev


def _previous_heads(keys, heads, same, previous, pos) -> np.ndarray:
    """Each run head's previous head of its tile (-1: none), as positions among the heads."""
    if previous is None:
        return previous_touches(keys[heads])
    # the latest touch before a head lies in the latest run of its tile before it
    run = np.cumsum(~same, dtype=pos)
    run -= 1
    touch = previous[heads]
    return np.where(touch >= 0, run[np.maximum(touch, 0)], -1).astype(pos)


def _crowded_by_gaps(
    ends: np.ndarray,
    prevs: np.ndarray,
    gap: np.ndarray,
    w: np.ndarray,
    cw: np.ndarray,
    room: np.ndarray,
    budget: int,
) -> np.ndarray:
    """Which windows (prevs[q], ends[q]) certainly hold more than room[q] distinct bytes,
    decided with one prefix sum per window length instead of each window's own count.

    A window counts each head's bytes (cw), less the repeats: a head inside it whose next touch
    lies inside too. Such a head's gap (its next touch's position minus its own) is shorter
    than the window, so with any T at least the window's length, the heads inside whose gap is
    below T bound the repeats from above: distinct >= window bytes - their bytes. In a stream
    that cycles through more than the cache holds in one order (a loop over K/V tiles, a
    kernel's steps over its query rows), every tile comes back after the same gap, nothing is
    subtracted and the bound is the exact count; where gaps vary within a window's length the
    bound is weak and the window is counted exactly. One prefix sum serves the windows of one
    length, over the span of those windows only: the MAX_GAP_LEVELS commonest lengths first,
    then, for windows still undecided, lengths rounded up to one of GAP_LEVELS_PER_OCTAVE
    thresholds per octave (about 4% apart), within `budget` steps, each only while it serves
    one window per GAP_LEVEL_SHARE heads. The rest stay undecided.
    """
    length = ends - prevs
    level = np.log2(length)
    level *= GAP_LEVELS_PER_OCTAVE
    level = np.ceil(level, out=level).astype(np.int64)
    crowded = np.zeros(len(ends), dtype=bool)
    steps = 0
    scratch = _GapScratch(len(gap))
    for group in (length, level):  # the commonest exact lengths first, then rounded ones
        counts = np.bincount(group[~crowded])  # lengths are below len(gap): one pass
        if not len(counts):  # every window decided
            break
        top = np.argpartition(-counts, min(MAX_GAP_LEVELS, len(counts) - 1))[:MAX_GAP_LEVELS]
        for value in top[np.argsort(-counts[top], kind="stable")].tolist():
            steps += GAP_LEVEL_STEPS * len(gap)
            if steps > budget or counts[value] * GAP_LEVEL_SHARE < len(gap):
                break  # a pass over every head for a few windows: left to the next bound
            sel = np.flatnonzero((group == value) & ~crowded)
            bound = scratch.bound(ends[sel], prevs[sel] + 1, int(length[sel].max()), gap, w, cw)
            crowded[sel] = bound > room[sel]
    return crowded


class _GapScratch:
    """The gap bound's arrays, one set for all its passes: a pass spans up to every head, and
    fresh arrays of that size each pass cost more in page faults than the arithmetic."""

    def __init__(self, n: int):
        self.back = np.empty(n, dtype=bool)
        self.cg = np.zeros(n + 1, dtype=np.int64)

    def bound(self, e, s, longest, gap, w, cw) -> np.ndarray:
        """Distinct bytes of the windows [s, e) at least (see _crowded_by_gaps): their heads'
        bytes less those of heads coming back within `longest`, at least each one's length.
        One prefix sum over the windows' span."""
        lo, hi = int(s.min()), int(e.max())
        k = hi - lo
        np.less(gap[lo:hi], longest, out=self.back[:k])
        cg = self.cg[: k + 1]  # cg[0] stays 0
        np.multiply(w[lo:hi], self.back[:k], out=cg[1:])
        np.cumsum(cg[1:], out=cg[1:])
        return (cw[e] - cw[s]) - (cg[e - lo] - cg[s - lo])


def _crowded_by_ends(
    ends: np.ndarray,
    prevs: np.ndarray,
    nxt: np.ndarray,
    w: np.ndarray,
    room: np.ndarray,
    budget: int,
    block: int,
) -> np.ndarray:
    """Which windows (prevs[q], ends[q]) certainly hold more than room[q] distinct bytes, from
    one prefix sum per block of window ends, coarse blocks first.

    Every distinct tile of a window has exactly one last touch in it: a head whose next touch
    lies at or after the window's end. For windows ending before T, a head whose next touch is
    at or after T is such a last touch, so the bytes of those heads inside a window bound its
    distinct bytes from below, missing only tiles touched again in [end, T): at most the
    distinct tiles of a block. One prefix sum over the windows' span serves every window
    ending in one block (`_decided_by_blocks`).
    """
    starts = prevs + 1

    def bound(sel, t, size):
        lo, top = int(starts[sel].min()), int(ends[sel].max())
        cs = np.concatenate([[0], np.cumsum(np.where(nxt[lo:top] >= t, w[lo:top], 0))])
        return cs[ends[sel] - lo] - cs[starts[sel] - lo]

    def cost(los, tops, ts, size):
        return int((tops - los).sum())

    return _decided_by_blocks(ends, starts, ends, room, budget, block, bound, cost, True)


def _roomy_by_starts(
    ends: np.ndarray,
    prevs: np.ndarray,
    prev: np.ndarray,
    w: np.ndarray,
    room: np.ndarray,
    budget: int,
    block: int,
) -> np.ndarray:
    """Which windows (prevs[q], ends[q]) certainly hold at most room[q] distinct bytes: the
    mirror of `_crowded_by_ends`, from one prefix sum per block of window starts.

    A window's distinct tiles are its heads whose previous touch lies before its start s. Take
    a block [T - B, T) holding s. Those heads before T are at most the block's own distinct
    tiles (its heads whose previous touch lies before T - B); those at or after T are among
    the heads there whose previous touch lies before T. The two sums bound the distinct bytes
    from above, counting too many at most twice the block's distinct tiles (those touched in
    the block but not in the window, and the window's tiles touched again after T), and serve
    every window starting in the block with one prefix sum from T to their last end. Where the
    window bounds leave a tile's reuse open because the window repeats a few tiles many times
    (every CTA of a wave reading its head's K/V tiles in turn), this decides the hits without
    counting each window.
    """
    starts = prevs + 1

    def bound(sel, t, size):
        own = int(np.where(prev[t - size : t] < t - size, w[t - size : t], 0).sum())
        top = max(t, int(ends[sel].max()))
        cs = np.concatenate([[0], np.cumsum(np.where(prev[t:top] < t, w[t:top], 0))])
        return own + cs[np.maximum(ends[sel] - t, 0)]

    def cost(los, tops, ts, size):
        return int((np.maximum(tops - ts, 0) + size).sum())

    return _decided_by_blocks(starts, starts, ends, room, budget, block, bound, cost, False)


def _decided_by_blocks(at, starts, ends, room, budget, finest, bound, cost, over) -> np.ndarray:
    """Shared by the two block bounds: the windows [starts, ends) grouped by blocks of `at`
    (their ends, or their starts) and each block's windows bounded at once (`bound(windows, T,
    size)`, T the block's end), blocks about the longest window's length first (few sums, each
    a few windows long: they decide the windows far from their room), then a quarter as long
    for those still open, down to `finest`, while their `cost` in steps fits in `budget`.
    `over`: the bound is a lower one, and a window is decided where it exceeds its room; else
    an upper one, decided where it does not. Returns which windows are decided."""
    decided = np.zeros(len(at), dtype=bool)
    if not len(at):
        return decided
    longest = int((ends - starts).max())
    size = finest
    while size * 4 <= longest:
        size *= 4
    while size >= finest:
        open_ = np.flatnonzero(~decided)
        if not len(open_):
            break
        order = open_[np.argsort(at[open_] // size, kind="stable")]
        blk = at[order] // size
        firsts = np.concatenate([[0], np.flatnonzero(np.diff(blk)) + 1])
        lasts = np.concatenate([firsts[1:], [len(order)]])
        ts = (blk[firsts] + 1) * size  # T, after every window's `at` in the block
        los = np.minimum.reduceat(starts[order], firsts)
        tops = np.maximum.reduceat(ends[order], firsts)
        steps = cost(los, tops, ts, size)
        if steps > budget:
            break
        budget -= steps
        for t, a, b in zip(ts.tolist(), firsts.tolist(), lasts.tolist(), strict=True):
            sel = order[a:b]
            got = bound(sel, t, size)
            decided[sel] = got > room[sel] if over else got <= room[sel]
        size //= 4
    return decided


def _window_bytes(
    ends: np.ndarray,
    prevs: np.ndarray,
    prev: np.ndarray,
    nxt: np.ndarray,
    w: np.ndarray,
    budget: int,
    checkpoint: int,
) -> np.ndarray | None:
    """Exact distinct bytes between prevs[q] and ends[q] (exclusive), for a few queries.

    A position p in the window starts a distinct tile there iff its own previous touch lies
    before the window. Split at a checkpoint c <= start: positions with prev[p] < c are one
    prefix sum per checkpoint; those with prev in [c, start) are the next touches of at most
    CHECKPOINT positions (`nxt`: each position's next touch, len(prev) for none). None when
    that costs more than `budget` steps.
    """
    m = len(prev)
    wpad = np.concatenate([w, [0]])
    starts = prevs + 1
    cks = starts // checkpoint * checkpoint
    order = np.argsort(cks, kind="stable")  # queries grouped by checkpoint
    firsts = np.concatenate([[0], np.flatnonzero(np.diff(cks[order])) + 1])
    lasts = np.concatenate([firsts[1:], [len(order)]])
    cps = cks[order][firsts]
    his = np.maximum.reduceat(ends[order], firsts)
    cost = len(ends) * checkpoint + int((his - cps).sum())
    if cost > budget:
        return None
    out = np.empty(len(ends), dtype=np.int64)
    groups = zip(cps.tolist(), his.tolist(), firsts.tolist(), lasts.tolist(), strict=True)
    for c, hi, lo, up in groups:
        sel = order[lo:up]
        seg = np.where(prev[c:hi] < c, w[c:hi], 0)
        cs = np.concatenate([[0], np.cumsum(seg)])
        first = cs[ends[sel] - c] - cs[starts[sel] - c]
        qpos = np.arange(c, min(c + checkpoint, m))
        nq = nxt[qpos]
        for a in range(0, len(sel), 256):
            part = sel[a : a + 256]
            s, e = starts[part][:, None], ends[part][:, None]
            inside = (qpos[None, :] < s) & (nq[None, :] >= s) & (nq[None, :] < e)
            out[part] = first[a : a + 256] + (inside * wpad[nq][None, :]).sum(axis=1)
    return out


def tile_ids(keys: np.ndarray) -> np.ndarray:
    """One int per (n, 2) key, equal iff the keys are: packed when that cannot overflow, else a
    dense numbering (joined_tile_ids of the keys as one part).

    A tile key is (first element * 64 + tensor, last element) (workload.tile_keys): on a large
    tensor both are large, but last - first is at most one tile's extent, so the pair
    (key[0], key[1] - key[0] // 64), which is equal iff the keys are, packs where the plain
    pair would overflow (a 16k x 16k score tile per head: no sort of every key needed).
    """
    return joined_tile_ids([keys])


def _extent(keys: np.ndarray) -> np.ndarray:
    """A key's last element less its first (see tile_ids)."""
    return keys[:, 1] - (keys[:, 0] >> 6)


def joined_tile_ids(parts: list[np.ndarray]) -> np.ndarray:
    """`tile_ids` of the parts' keys end to end, the parts consumed (emptied from the list):
    packed part by part where the whole packs, the plain pair or the first element with the
    extent, so that the keys are never held twice (at 16 bytes an access, the largest arrays of
    a stream); a dense numbering of them all where neither packs."""
    parts[:] = [k for k in parts if len(k)]
    if not parts:
        return np.zeros(0, dtype=np.int64)
    room = 1 << 62
    if min(int(k.min()) for k in parts) >= 0:
        top = max(int(k[:, 0].max()) for k in parts)
        span = max(int(k[:, 1].max()) for k in parts) + 1
        low = None  # None: the plain pair (exact: last < span); else the extent less its least
        if top >= room // span:
            extents = [(int(e.min()), int(e.max())) for e in map(_extent, parts)]
            low = min(lo for lo, _hi in extents)
            span = max(hi for _lo, hi in extents) - low + 1
        if top < room // span:
            ids = np.empty(sum(len(k) for k in parts), dtype=np.int64)
            at = 0
            while parts:
                k = parts.pop(0)
                out = ids[at : at + len(k)]
                np.multiply(k[:, 0], span, out=out)
                out += k[:, 1] if low is None else _extent(k) - low
                at += len(k)
            return ids
    keys = np.concatenate(parts)
    parts.clear()
    span = int(keys[:, 1].max()) + 1
    firsts, rank = np.unique(keys[:, 0], return_inverse=True)
    if len(firsts) < room // max(span, 1) and int(keys[:, 1].min()) >= 0:
        return rank.reshape(-1) * span + keys[:, 1]
    order = np.lexsort((keys[:, 1], keys[:, 0]))
    k = keys[order]
    new = np.concatenate([[True], (k[1:, 0] != k[:-1, 0]) | (k[1:, 1] != k[:-1, 1])])
    ids = np.empty(len(keys), dtype=np.int64)
    ids[order] = np.cumsum(new) - 1
    return ids


def lru_answer(
    ops: np.ndarray,
    ids: np.ndarray,
    nbytes: np.ndarray,
    capacity: int,
    previous: np.ndarray | None = None,
):
    """The LRU's hit per access of a stream from an empty cache (`ids`: one int per tile, as
    `tile_ids` gives them; `previous`: see bulk_hits): in bulk, or replayed where the bulk
    test would take too long. Stretches that repeat one short pattern are cut first
    (`_repeats_cut`; the cut stream then finds its own previous touches, in a sort of what
    is left)."""
    keep = _repeats_cut(ids, nbytes, capacity)
    if keep is not None:
        hits = (ops == OP_LOAD) | (ops == OP_ATOMIC)  # what a cut access answers
        hits[keep] = lru_answer(ops[keep], ids[keep], nbytes[keep], capacity)
        return hits
    budget = NUMPY_STEPS_PER_ACCESS * len(ops) + 1_000_000
    hits = bulk_hits(ops, ids, nbytes, capacity, budget, previous=previous)
    if hits is None:
        hits = LRU(capacity, 1).replay(ops, np.stack([ids, 0 * ids], axis=1), nbytes)
    return hits


REPEAT_MIN_STREAM = 1 << 16  # a shorter stream is decided whole: the cut would not pay
REPEAT_MAX_PERIOD = 64  # the longest pattern `_repeats_cut` looks for
REPEAT_SAMPLES = 4096  # positions sampled to find the commonest period
# ... which is cut only where half the positions repeat it: a cut that keeps more costs more
# than it saves (standard causal attention at 16k tokens x batch 4: 25% of an 18.6 M stream
# repeats the access before it; cut, it took 6.5-6.8 s where the whole took 5.3-5.9 s, the
# cut stream sorting for its own previous touches where the caller had the whole's)
REPEAT_MIN_SHARE = 0.5


def _repeats_cut(ids: np.ndarray, nbytes: np.ndarray, capacity: int) -> np.ndarray | None:
    """Which accesses the LRU must still decide (a bool per access), or None where nothing is
    cut: the middle of each stretch that repeats a pattern of m accesses whose distinct
    tiles fit in the cache together.

    Why: in a wave of CTAs stepping through a loop together, a row of the cache's logical
    order touches the same few tiles over and over (fa2 causal at 64k tokens: 95% of its
    first-CTA stream, 4.2 M accesses, repeats the access 4 before it), and the bulk test's
    sorts cost per access. The argument: let [a, e) repeat with period m (each access's
    tile is the tile m before it) and the pattern's distinct tiles take at most the
    capacity. An access past the first m has touched its tile at most m accesses before,
    with only pattern tiles between: it hits (a load or an atomic; a store never does), and
    inserts nothing, so nothing is evicted. Cut [a + m, e - m): the last m accesses then
    find their tiles in the first m, with only pattern tiles between, and hit too, and
    every tile's last touch before e is where it was (pattern tiles in the last m,
    the others before a), so the cache after e, and every answer after it, is the same.
    The first m are decided as any access. The cut stream is a stream like any other, so
    it is cut again (another period) until no period is common enough."""
    n = len(ids)
    if n < max(REPEAT_MIN_STREAM, 2 * REPEAT_MAX_PERIOD):
        return None
    probe = np.linspace(REPEAT_MAX_PERIOD, n - 1, REPEAT_SAMPLES).astype(np.int64)
    sampled = ids[probe]
    shares = [np.count_nonzero(sampled == ids[probe - m]) for m in range(1, REPEAT_MAX_PERIOD + 1)]
    m = int(np.argmax(shares)) + 1
    if shares[m - 1] < REPEAT_MIN_SHARE * len(probe):
        return None
    again = np.zeros(n - m + 2, dtype=np.int8)  # again[t + 1]: ids[t + m] == ids[t]
    np.equal(ids[m:], ids[:-m], out=again[1:-1].view(bool))
    edges = np.diff(again)
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)  # runs [a, b)
    del again, edges
    long = ends - starts > m  # [a, b + m) repeats: [a + m, b) is cut
    starts, ends = starts[long], ends[long]
    if len(starts):
        block = starts[:, None] + np.arange(m)  # each stretch's pattern
        tiles, weights = ids[block], nbytes[block]
        order = np.argsort(tiles, axis=1, kind="stable")
        tiles = np.take_along_axis(tiles, order, axis=1)
        weights = np.take_along_axis(weights, order, axis=1)
        weights[:, 1:][tiles[:, 1:] == tiles[:, :-1]] = 0  # each distinct tile once
        fits = weights.sum(axis=1) <= capacity
        starts, ends = starts[fits], ends[fits]
    if not len(starts):
        return None
    cut = np.zeros(n + 1, dtype=np.int8)
    cut[starts + m] = 1  # the runs are apart: one mark per place
    cut[ends] -= 1
    np.cumsum(cut, out=cut)
    return cut[:n] == 0


def kernel_hits(
    kernels: list[KernelWork], slots: list[int], capacity_bytes: int, bulk: bool = True
) -> list[np.ndarray]:
    """Per kernel, a bool per access (in the kernel's own access order): load hit L2.

    The bulk test (`bulk_hits`) over all kernels' accesses in logical order when it decides
    within its budget (a few dozen vectorised steps per access); otherwise, or with `bulk`
    off, the LRU replayed access by access. Both give the same answer (tests check it).
    """
    orders = [logical_order(kw, s) for kw, s in zip(kernels, slots, strict=True)]
    if kernels and bulk:
        ops = np.concatenate([kw.acc_op[o] for kw, o in zip(kernels, orders, strict=True)])
        keys = tile_ids(
            np.concatenate([kw.acc_key[o] for kw, o in zip(kernels, orders, strict=True)])
        )
        sizes = np.concatenate([kw.acc_bytes[o] for kw, o in zip(kernels, orders, strict=True)])
        budget = NUMPY_STEPS_PER_ACCESS * len(ops) + 1_000_000
        flat = bulk_hits(ops, keys, sizes, capacity_bytes, budget)
        if flat is not None:
            out, at = [], 0
            for o in orders:
                hits = np.empty(len(o), dtype=bool)
                hits[o] = flat[at : at + len(o)]
                at += len(o)
                out.append(hits)
            return out
    firsts = [int(kw.acc_key[:, 0].max()) for kw in kernels if len(kw.acc_key)]
    lasts = [int(kw.acc_key[:, 1].max()) for kw in kernels if len(kw.acc_key)]
    span = max(lasts, default=0) + 1
    packs = max(firsts, default=0) < (1 << 62) // span
    lru = LRU(capacity_bytes, span if packs else None)
    out = []
    for kw, order in zip(kernels, orders, strict=True):
        hit_sorted = lru.replay(kw.acc_op[order], kw.acc_key[order], kw.acc_bytes[order])
        hits = np.empty_like(hit_sorted)
        hits[order] = hit_sorted
        out.append(hits)
    return out
