"""The byte-capacity LRU's answer for a whole stream at once, with array arithmetic.

An access hits iff its tile fits and the distinct fitting tiles touched since its previous
touch, plus itself, fit in the capacity. `bulk_hits` decides most accesses from bounds on
those distinct bytes (the window's length, its gaps, the blocks it spans) and leaves the rest
to the LRU replayed from checkpoints.
"""

from __future__ import annotations

import numpy as np

from ...interpret.trace import OP_ATOMIC, OP_LOAD

CHECKPOINT = 1024  # positions between the checkpoints of the exact window sums
# The gap bound (_crowded_by_gaps): window lengths rounded up to thresholds this many per octave,
# at most this many thresholds, each a few passes over the heads and worth it only for at least
# one window per GAP_LEVEL_SHARE heads
GAP_LEVELS_PER_OCTAVE, MAX_GAP_LEVELS, GAP_LEVEL_STEPS, GAP_LEVEL_SHARE = 16, 8, 4, 64


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
    (l2.fast's trust test needs it too): a run head's previous head is then the head of the run
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
    if len(open_) and not _decide_open(open_, room, j, prev, w, cw, head_hit, budget, checkpoint):
        return None
    hits[heads] = head_hit
    return hits


def _decide_open(open_, room, j, prev, w, cw, head_hit, budget, checkpoint) -> bool:
    """The heads the bracket left open (`open_`, each last touched at head j): misses from
    the gaps' and the windows' ends' lower bounds, hits from the windows' starts' upper bound,
    the rest counted exactly, into `head_hit`. False where counting them would pass `budget`
    accesses. Positions are of the heads' dtype (`j`'s), as the caller's."""
    m = len(prev)
    pos = j.dtype
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
            return False
        head_hit[open_] = exact <= room
    return True


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
