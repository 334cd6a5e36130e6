"""A kernel's templates kept as their representatives' runs, laid out when asked for."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from .parts import (
    PENDING,
    REGION,
    Laid,
    laid_out,
    transfers_in,
)


class Templates(Sequence):
    """A kernel's templates, each kept as its representative's run (its parts: rows, and long
    loop segments as one iteration and a count), laid out into records when asked for; the
    last ones asked for are kept laid out, up to CACHE_BYTES.

    Why: causal attention's query-block classes are a template each, and their loops are what
    they hold: fa2 causal at 64k tokens x 16 heads is 1,024 templates of 4.2 M ops, 168 MB of
    records, where their parts take a few. The engine reads a template at a time (a group's
    program, a short copy's, loops.py), the L2 model only its transfers
    (KernelWork.transfer_rows)."""

    CACHE_BYTES = 16 << 20

    def __init__(self, regions: bool):
        self.regions = regions
        self.parts: list[list] = []
        self.cache: OrderedDict[int, np.ndarray] = OrderedDict()
        self.cached = 0

    def append(self, parts: list) -> None:
        self.parts.append(parts)

    def __len__(self) -> int:
        return len(self.parts)

    def columns(self, t: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(op, bytes, tensor) of template t's ops, from its parts (no records laid out)."""
        at = [PENDING.index(name) for name in ("op", "bytes", "tensor")]
        blocks = [
            np.tile(p.first[:, at], (p.n, 1)) if isinstance(p, Laid) else p[:, at]
            for p in self.parts[t]
        ]
        out = np.concatenate(blocks) if blocks else np.zeros((0, 3), np.int64)
        return out[:, 0], out[:, 1], out[:, 2]

    def loops(self, t: int) -> list[tuple[int, int, int, int, int]]:
        """Template t's laid-out loop segments: (first op, ops per iteration, iterations,
        transfers before it, transfers per iteration) each (loops.py)."""
        out, at, tr = [], 0, 0
        for p in self.parts[t]:
            per = transfers_in(p.first if isinstance(p, Laid) else p)
            if isinstance(p, Laid):
                out.append((at, len(p.first), p.n, tr, per))
                tr += per * p.n
            else:
                tr += per
            at += len(p)
        return out

    def cut_key(self, t: int, keep: dict[int, int]) -> bytes:
        """What `cut(t, keep)` lays out, as bytes (every field but regions), from the parts:
        templates whose short copies are alike share it (where their parts split alike)."""
        out, i = [], 0
        for p in self.parts[t]:
            if isinstance(p, Laid):
                n = keep.get(i, p.n)
                out += [b"L", n.to_bytes(8, "little"), p.first[:, :REGION].tobytes()]
                i += 1
            else:
                out += [b"R", len(p).to_bytes(8, "little"), p[:, :REGION].tobytes()]
        return b"".join(out)

    def cut(self, t: int, keep: dict[int, int]) -> np.ndarray:
        """Template t's records with its i-th laid-out loop segment run keep[i] times (a short
        copy, loops.py): the same as leaving its middle iterations out, as the records'
        fields but their regions are alike in every iteration."""
        parts, i = [], 0
        for p in self.parts[t]:
            if isinstance(p, Laid):
                p = Laid(p.first, p.step, keep[i]) if i in keep else p
                i += 1
            parts.append(p)
        return laid_out(parts, self.regions)

    def __getitem__(self, t):
        if isinstance(t, slice):
            return [self[i] for i in range(*t.indices(len(self)))]
        t = range(len(self))[t]
        found = self.cache.get(t)
        if found is not None:
            self.cache.move_to_end(t)
            return found
        found = laid_out(self.parts[t], self.regions)
        found.flags.writeable = False  # shared by every reader
        self.cache[t] = found
        self.cached += found.nbytes
        while self.cached > self.CACHE_BYTES and len(self.cache) > 1:
            _, old = self.cache.popitem(last=False)
            self.cached -= old.nbytes
        return found
