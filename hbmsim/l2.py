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

from .trace import OP_ATOMIC, OP_LOAD
from .workload import KernelWork


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


def kernel_hits(
    kernels: list[KernelWork], slots: list[int], capacity_bytes: int
) -> list[np.ndarray]:
    """Per kernel, a bool per access (in the kernel's own access order): load hit L2."""
    firsts = [int(kw.acc_key[:, 0].max()) for kw in kernels if len(kw.acc_key)]
    lasts = [int(kw.acc_key[:, 1].max()) for kw in kernels if len(kw.acc_key)]
    span = max(lasts, default=0) + 1
    packs = max(firsts, default=0) < (1 << 62) // span
    lru = LRU(capacity_bytes, span if packs else None)
    out = []
    for kw, s in zip(kernels, slots, strict=True):
        order = logical_order(kw, s)
        hit_sorted = lru.replay(kw.acc_op[order], kw.acc_key[order], kw.acc_bytes[order])
        hits = np.empty_like(hit_sorted)
        hits[order] = hit_sorted
        out.append(hits)
    return out
