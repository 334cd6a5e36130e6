"""A kernel's tile keys as per-class formulas, computed for the CTAs asked for.

`ClassKeys` holds one class's keys (the representative's, plus one term per grid axis),
`Layout` where each CTA of a kernel sits in launch order (its class and coordinates), and
`PlanKeys` the keys of any CTAs from the two: a kernel of millions of accesses costs only the
CTAs the engine looks at.
"""

from __future__ import annotations

import numpy as np

from ...program.plan import CtaClass
from .arrays import put_keys, ranges
from .layout import Layout, by_class


class ClassKeys:
    """Tile keys of one class's CTAs: the representative's, plus one term per grid axis.

    An affine axis adds (coordinate - representative's) x delta; a sampled axis adds its
    value's row of a table, or, where the axis moves every tile of a tensor alike (GQA's
    query head -> K/V head), its value's shift of each tensor (`shifts`, shared by the
    kernel's classes); `explicit` holds every CTA's keys when no form held.
    """

    def __init__(self, cls: CtaClass, base: np.ndarray, tensor: np.ndarray):
        self.axes = cls.axes
        self.tensor = tensor  # (n,) tensor id of each transfer
        self.rep = np.array(cls.representative, dtype=np.int64)
        self.base = base  # (n, 2)
        self.affine: dict[int, np.ndarray] = {}  # axis -> (n, 2) per unit of coordinate
        self.tables: dict[int, np.ndarray] = {}  # axis -> (len(range), n, 2), by coord - start
        self.shifts: dict[int, np.ndarray] = {}  # axis -> (len(range), tensors, 2), likewise
        self.explicit: np.ndarray | None = None  # (size, n, 2) in the class's product order
        # classes laid out from one family's run (`OneCta.family`) share this mark: their
        # keys move along their other axes by the same steps, tensor by tensor
        self.family: object | None = None

    def at(self, coords: np.ndarray) -> np.ndarray:
        """(m, n, 2) keys of the CTAs at `coords` ((m, naxes), members of the class)."""
        if self.explicit is not None:
            index = np.zeros(len(coords), dtype=np.int64)
            for axis, r in enumerate(self.axes):
                index = index * len(r) + (coords[:, axis] - r.start) // r.step
            return self.explicit[index]
        if self.affine:  # every affine term in one product: (m, axes) x (axes, n x 2)
            axes = list(self.affine)
            deltas = np.stack([self.affine[a] for a in axes]).reshape(len(axes), -1)
            keys = (coords[:, axes] - self.rep[axes]) @ deltas
            keys = keys.reshape((len(coords),) + self.base.shape)
            keys += self.base
        else:
            keys = np.broadcast_to(self.base, (len(coords),) + self.base.shape).copy()
        for axis, table in self.tables.items():
            keys += table[coords[:, axis] - self.axes[axis][0]]
        for axis, shift in self.shifts.items():
            keys += shift[coords[:, axis] - self.axes[axis][0]][:, self.tensor]
        return keys


class PlanKeys:
    """A kernel's tile keys, computed per class for the CTAs asked for."""

    def __init__(self, classes: list[ClassKeys], layout: Layout):
        self.classes = classes
        self.layout = layout
        self.counts = np.array([len(c.base) for c in classes], dtype=np.int64)

    def take(self, ctas: np.ndarray) -> np.ndarray:
        ctas = np.asarray(ctas, dtype=np.int64)
        coords = self.layout.take(ctas)
        if len(self.classes) == 1:
            naxes = len(self.classes[0].axes)
            return self.classes[0].at(coords[:, :naxes]).reshape(-1, 2)
        cls = self.layout.classes(ctas)
        counts = self.counts[cls]
        out = np.empty((int(counts.sum()), 2), dtype=np.int64)
        offsets = np.cumsum(counts) - counts
        for c, sel in by_class(cls, len(self.classes)):
            ck = self.classes[c]
            keys = ck.at(coords[sel, : len(ck.axes)])
            if isinstance(sel, slice):  # a run of CTAs of one class: one block of keys
                at = int(offsets[sel.start])
                out[at : at + keys.shape[0] * keys.shape[1]] = keys.reshape(-1, 2)
            else:
                put_keys(out, ranges(offsets[sel], counts[sel]), keys.reshape(-1, 2))
        return out
