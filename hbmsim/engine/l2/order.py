"""The accesses of a kernel's CTAs in the L2's logical order: wave by wave, op by op in
lockstep (lru.logical_order), laid out by arithmetic instead of a sort; and streams of several
kernels joined end to end.
"""

from __future__ import annotations

import numpy as np

from ..workload.arrays import distinct, key_elements
from ..workload.work import KernelWork
from .bulk import positions_dtype
from .lru import joined_tile_ids


def in_logical_order(kw: KernelWork, ctas: np.ndarray, slots: int, chunk: int = 1 << 20):
    """The accesses of `ctas` (ascending) in the cache's logical order: ((ctas, waves,
    permutation), op, key, bytes); the permutation gives, for each access in that order, its
    place among the CTAs' accesses CTA by CTA.

    Laid out wave by wave without a sort: the positions up to the shortest program in the wave
    hold every CTA, those up to the next length the CTAs at least that long, and so on, each
    stretch a (position, CTA) table of its CTAs' first accesses plus the position; ops and bytes
    come from the templates' rows by the same arithmetic. Keys are computed and placed a few
    waves (about `chunk` accesses) at a time: tens of millions of accesses' arrays are the
    cost, and temporaries of a few megabytes are recycled where whole-stream ones are fresh
    memory each time."""
    slots = max(1, slots)
    first, counts, op, nbytes = kw.transfer_rows
    tmpl = kw.cta_template[ctas]
    n_c = counts[tmpl].astype(np.int64)
    row0 = first[tmpl].astype(np.int64)  # each CTA's first row among the templates' rows
    start = np.cumsum(n_c) - n_c  # each CTA's first access, CTA by CTA
    n = int(n_c.sum())
    order = np.empty(n, dtype=positions_dtype(n))
    wave = np.empty(n, dtype=np.int32)
    ops, key = np.empty(n, dtype=np.int8), np.empty((n, 2), dtype=np.int64)
    size = np.empty(n, dtype=nbytes.dtype)
    waves = ctas // slots
    cut = (np.flatnonzero(np.diff(waves)) + 1).tolist() if len(ctas) else []
    bounds = list(zip([0, *cut], [*cut, len(ctas)], strict=True)) if len(ctas) else []
    at = w = 0
    while w < len(bounds):
        w0 = w  # whole waves, about `chunk` accesses
        w += 1
        while w < len(bounds) and start[bounds[w][1] - 1] - start[bounds[w0][0]] < chunk:
            w += 1
        take = bounds[w0:w]
        c0, c1 = take[0][0], take[-1][1]
        chunk_at = at
        if one_template_full_waves(tmpl, take, slots):
            # every CTA runs one program and every wave is full: the waves are one (wave,
            # position, CTA) block, each wave's CTA-by-CTA accesses transposed
            length, m = int(n_c[c0]), len(take)
            at += m * length * slots
            cells = order[chunk_at:at].reshape(m, length, slots)
            np.add(start[c0:c1].reshape(m, 1, slots), np.arange(length)[None, :, None], out=cells)
            wave[chunk_at:at] = np.repeat(waves[c0:c1:slots], length * slots)
            block = (m, length, slots)
            by_cta = key_elements(kw.keys.take(ctas[c0:c1])).reshape(m, slots, length)
            key_elements(key[chunk_at:at]).reshape(block)[:] = by_cta.transpose(0, 2, 1)
            rows = int(row0[c0]) + np.arange(length)
            ops[chunk_at:at].reshape(block)[:] = op[rows][None, :, None]
            size[chunk_at:at].reshape(block)[:] = nbytes[rows][None, :, None]
            continue
        rows = []
        for j0, j1 in take:
            lengths = n_c[j0:j1]
            wave_at, t0 = at, 0
            for length in distinct(lengths).tolist():
                members = j0 + np.flatnonzero(lengths >= length)
                t = np.arange(t0, length, dtype=np.int64)[:, None]
                cells = order[at : at + (length - t0) * len(members)].reshape(-1, len(members))
                np.add(start[members][None, :], t, out=cells)
                rows.append((row0[members][None, :] + t).ravel())
                at += cells.size
                t0 = length
            wave[wave_at:at] = waves[j0]
        local = order[chunk_at:at] - start[c0]  # places among this chunk's CTAs' accesses
        np.take(key_elements(kw.keys.take(ctas[c0:c1])), local, out=key_elements(key[chunk_at:at]))
        rows = np.concatenate(rows)
        ops[chunk_at:at] = op[rows]
        size[chunk_at:at] = nbytes[rows]
    return (ctas, wave, order), ops, key, size


def one_template_full_waves(tmpl: np.ndarray, take: list, slots: int) -> bool:
    """Whether the waves `take` ((first, end) CTA index pairs) are all full and every CTA of
    them runs the first one's template."""
    c0, c1 = take[0][0], take[-1][1]
    if c1 - c0 != len(take) * slots or any(j1 - j0 != slots for j0, j1 in take):
        return False
    return bool((tmpl[c0:c1] == tmpl[c0]).all())


def joined_streams(ops: list, keys: list, nbytes: list):
    """Kernels' streams end to end: (each kernel's first position, ops, tile ids, bytes). The
    keys' list is consumed as it is packed."""
    starts = np.concatenate([[0], np.cumsum([len(o) for o in ops])]).astype(np.int64)
    if not starts[-1]:
        return starts, np.zeros(0, np.int8), np.zeros(0, np.int64), np.zeros(0, np.int64)
    one = len(ops) == 1  # a single part is itself (a concatenation would copy it)
    return (
        starts,
        ops[0] if one else np.concatenate(ops),
        joined_tile_ids(keys),
        nbytes[0] if one else np.concatenate(nbytes),
    )
