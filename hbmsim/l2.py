"""The L2 model: a tile-granular LRU cache of the GPU's L2 capacity, between SRAM and HBM.

A load hits when the same tile (tensor and region) is resident; a hit costs L2 latency and
bandwidth and no DRAM traffic. A store writes the tile into L2 and also counts as a DRAM write
(write-back traffic is charged when the store happens). Tiles larger than the whole L2 are never
cached.

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

from .trace import OP_LOAD
from .workload import KernelWork


def logical_order(kw: KernelWork, slots: int) -> np.ndarray:
    """Permutation of a kernel's accesses into the cache's logical order."""
    wave = kw.acc_cta // max(1, slots)
    return np.lexsort((kw.acc_cta, kw.acc_index, wave))


class LRU:
    """Byte-capacity LRU over tile keys; state carries over from kernel to kernel."""

    def __init__(self, capacity_bytes: int):
        self.capacity = capacity_bytes
        self.used = 0
        self.tiles: OrderedDict = OrderedDict()

    def replay(self, ops: np.ndarray, keys: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        """Apply accesses in order; returns a bool per access: True for a load that hit."""
        hit_list = []
        tiles, cap = self.tiles, self.capacity
        used = self.used
        move = tiles.move_to_end
        popitem = tiles.popitem
        append = hit_list.append
        for op, key, n in zip(
            (ops == OP_LOAD).tolist(), zip(keys[:, 0].tolist(), keys[:, 1].tolist()), sizes.tolist()
        ):
            if key in tiles:
                move(key)
                append(op)
                continue
            append(False)
            if n > cap:
                continue
            tiles[key] = n
            used += n
            while used > cap:
                used -= popitem(last=False)[1]
        hits = np.array(hit_list, dtype=bool)
        self.used = used
        return hits


def kernel_hits(
    kernels: list[KernelWork], slots: list[int], capacity_bytes: int
) -> list[np.ndarray]:
    """Per kernel, a bool per access (in the kernel's own access order): load hit L2."""
    lru = LRU(capacity_bytes)
    out = []
    for kw, s in zip(kernels, slots, strict=True):
        order = logical_order(kw, s)
        hit_sorted = lru.replay(kw.acc_op[order], kw.acc_key[order], kw.acc_bytes[order])
        hits = np.empty_like(hit_sorted)
        hits[order] = hit_sorted
        out.append(hits)
    return out
