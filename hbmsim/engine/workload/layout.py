"""Where each CTA of a kernel sits in launch order: its class and grid coordinates, computed
for the CTAs asked for (held as arrays only when the launch order interleaves classes).
"""

from __future__ import annotations

import numpy as np

from ...interpret.trace import (
    MAX_AXES,
)
from ...program.plan import CtaClass
from .arrays import distinct


class Layout:
    """Where each CTA of a kernel (in launch order) sits: its class and grid coordinates.

    Computed from the classes' ranges for the CTAs asked for; held as arrays only when the
    launch order interleaves several classes (then it is a sort of all of them)."""

    def __init__(self, grid: tuple[CtaClass, ...], launch_order: tuple[int, ...] | None):
        self.axes = [cls.axes for cls in grid]
        sizes = [cls.size for cls in grid]
        self.starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.n = int(self.starts[-1])
        self.order: list[list[int]] = [list(range(len(a))) for a in self.axes]
        self.cls = self.coord = None
        if launch_order is None:
            return
        if len(grid) == 1 and sorted(launch_order) == list(range(len(self.axes[0]))):
            self.order = [list(launch_order)]  # one class: its product order, axes permuted
            return
        coords = self._blocks(np.arange(self.n))
        perm = np.lexsort(tuple(coords[:, a] for a in reversed(launch_order)))
        self.coord = coords[perm]
        self.cls = self._block_class(np.arange(self.n))[perm].astype(np.int32)

    def _block_class(self, ctas: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.starts, ctas, side="right") - 1

    def _blocks(self, ctas: np.ndarray) -> np.ndarray:
        """Coordinates with the classes laid out one after another, each in its order."""
        out = np.zeros((len(ctas), MAX_AXES), dtype=np.int64)
        cls = self._block_class(ctas)
        for c, sel in by_class(cls, len(self.axes)):
            local = ctas[sel] - self.starts[c]
            for a in reversed(self.order[c]):  # the fastest axis first
                r = self.axes[c][a]
                out[sel, a] = r.start + (local % len(r)) * r.step
                local = local // len(r)
        return out

    def classes(self, ctas: np.ndarray) -> np.ndarray:
        return self.cls[ctas] if self.cls is not None else self._block_class(ctas)

    def take(self, ctas: np.ndarray) -> np.ndarray:
        """(m, MAX_AXES) grid coordinates of the CTAs."""
        ctas = np.asarray(ctas, dtype=np.int64)
        return self.coord[ctas] if self.coord is not None else self._blocks(ctas)


def by_class(cls: np.ndarray, classes: int):
    """(class, its CTAs among `cls`) for each class present: a slice where the CTAs come class
    by class (the layout's own order, which a long kernel's streams ask for a class's CTAs in),
    else their positions."""
    if classes == 1:
        return [(int(cls[0]), slice(None))] if len(cls) else []
    if len(cls) < 2 or (cls[1:] >= cls[:-1]).all():
        cuts = np.flatnonzero(cls[1:] != cls[:-1]) + 1
        edges = [0, *cuts.tolist(), len(cls)]
        return [(int(cls[a]), slice(a, b)) for a, b in zip(edges[:-1], edges[1:], strict=True)]
    return [(c, np.flatnonzero(cls == c)) for c in distinct(cls).tolist()]
