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
from .bulk import (
    bulk_hits,
)

NUMPY_STEPS_PER_ACCESS = 50  # vectorised steps worth one access of the replay (~1 µs each)


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
# than it saves (the cut stream sorts for its own previous touches where the caller had the
# whole's; docs/benchmarks.md, "The engine's bounds")
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
