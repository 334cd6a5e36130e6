"""Single CTAs of a plan: a representative's ops as template records, any CTA's transfers
and tile keys, and the symbolic runs that stand for a whole class or family of classes.

A run is kept as its parts (parts.py), laid-out segments unexpanded, memoised per (kernel,
CTA) within a class (its affine extrapolation asks for some twice); the CTAs that only check a
class's formula are never expanded into rows, only their keys.
"""

from __future__ import annotations

import numpy as np

from ...program import symbolic as classsym
from ...program.plan import CtaClass, Plan
from .parts import (
    Laid,
    NotAffine,
    compact_transfers,
    expanded,
    extents,
    key_deltas,
    laid_out,
    laid_steps,
    row_steps,
)
from .recorder import Recorder


class OneCta(Recorder):
    """Runs single CTAs of a plan: a representative's ops as TEMPLATE_DTYPE records, any
    CTA's transfers and tile keys (to learn and check its class's formula)."""

    def __init__(self, plan: Plan):
        super().__init__(plan)
        self.memo: dict[tuple, list] = {}

    def symbolic(self, kernel_index: int, cls: CtaClass, strides) -> tuple | None:
        """The class's representative run once with every axis the class spans symbolic
        (program/symbolic.py): (those axes, each transfer's key step per unit of each, (axes,
        transfers, 2)), its parts memoised as its own run would make them; None where the
        program did something with a coordinate that is not exact for every CTA (then
        nothing is kept, and the class is learned from runs)."""
        rep = cls.representative
        axes = [axis for axis, r in enumerate(cls.axes) if len(r) >= 2]
        if not axes:
            return None
        self.symbolic_axes, self.pending_coefs, self.coefs = len(axes), [], []
        try:
            parts = self.record(kernel_index, classsym.coordinates(rep, axes), sampling=True)
            deltas = key_deltas(parts, self.coefs, strides)
        except Exception:  # noqa: BLE001 - any failure: the class is learned from runs
            return None
        finally:
            self.symbolic_axes, self.pending_coefs, self.coefs = 0, [], []
        self.memo[(kernel_index, rep)] = parts
        return axes, deltas

    def family(self, kernel_index: int, cls: CtaClass, axis: int, strides) -> dict | None:
        """Classes one per value of `axis` (`cls` spans them all: their family), from one run
        with every axis `cls` spans symbolic, the family's too, and comparisons decided over
        the box they span (classsym.within): per value, the class's parts as its own symbolic
        run would make them (a loop's length may be affine in the value), what `symbolic`
        returns for it (with the family's mark) and its transfers (as `transfers` gives them).
        None where the run is not exact for every class
        (a comparison that differs between them, a length not affine in the value): then each
        class is run on its own.

        Why: causal attention's query-block classes (1,024 at 64k tokens) are the same program
        but for the query block, which moves their regions and the number of K/V blocks they
        visit: one run stands for all, where each of their own runs cost 0.2-0.3 ms."""
        rep = cls.representative
        axes = [a for a, r in enumerate(cls.axes) if len(r) >= 2]
        if axis not in axes or any(cls.axes[a].step != 1 for a in axes):
            return None
        box = [(0, len(cls.axes[a]) - 1) for a in axes]  # units: coordinate - representative's
        self.symbolic_axes, self.pending_coefs, self.coefs = len(axes), [], []
        try:
            with classsym.within(box):
                parts = self.record(kernel_index, classsym.coordinates(rep, axes), sampling=True)
            coefs = self.coefs
        except Exception:  # noqa: BLE001 - any failure: each class runs on its own
            return None
        finally:
            self.symbolic_axes, self.pending_coefs, self.coefs = 0, [], []
        j = axes.index(axis)
        others = [x for x in range(len(axes)) if x != j]
        for p in parts:  # a loop's length may follow the family's axis, not the others'
            if isinstance(p, Laid) and type(p.n) is not int and any(p.n.co[x] for x in others):
                return None

        def parts_at(u: int) -> list:
            mine = []
            for p, coef in zip(parts, coefs, strict=True):
                if isinstance(p, Laid):
                    n = p.n if type(p.n) is int else p.n.c0 + p.n.co[j] * u
                    mine.append(Laid(p.first + u * coef[j], p.step, n))
                else:
                    mine.append(p + u * coef[j])
            return mine

        # the other axes' steps are the same rows' for every class (the loops' lengths aside),
        # and the transfers' keys, affine in the regions, affine in the family's axis: worked
        # out at its first two values, then laid out at each
        theirs = [c[others] for c in coefs]
        first = parts_at(0)
        steps_per_row = row_steps(first, theirs, strides)
        shape, keys0, counts = compact_transfers(first, strides)
        keys_step = compact_transfers(parts_at(1), strides)[1] - keys0
        out, mark = {}, object()
        for v in cls.axes[axis]:
            u = v - rep[axis]
            mine = parts_at(u)
            own = expanded(mine, shape, keys0 + u * keys_step, counts)
            found = ([axes[x] for x in others], laid_steps(mine, steps_per_row), mark)
            out[v] = (mine, found, own)
        return out

    def run(self, kernel_index: int, cta: tuple[int, ...], regions: bool = True) -> np.ndarray:
        """The CTA's ops as TEMPLATE_DTYPE records (LEAN_TEMPLATE_DTYPE without `regions`),
        each part laid out in place."""
        return laid_out(self.parts_of(kernel_index, cta), regions)

    def extents(self, kernel_index: int, cta: tuple[int, ...]) -> np.ndarray:
        """The CTA's ops' region extents (stop - start), as from_plan_fast compares them."""
        return extents(self.parts_of(kernel_index, cta))

    def transfers(self, kernel_index: int, cta: tuple[int, ...], strides):
        """The CTA's transfers: (op, bytes, tensor) of each, and its tile key. One
        `transfers_of` for all the parts' rows (a laid-out segment's first two iterations
        stand for it): a CTA has a few parts, and each call has a fixed cost."""
        parts = self.parts_of(kernel_index, cta)
        if not parts:
            return np.zeros((0, 3), np.int64), np.zeros((0, 2), np.int64)
        return expanded(parts, *compact_transfers(parts, strides))

    def parts_of(self, kernel_index: int, cta: tuple[int, ...]) -> list:
        key = (kernel_index, cta)
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        try:
            parts = self.record(kernel_index, cta, sampling=True)
        except NotAffine:
            parts = self.record(kernel_index, cta, sampling=False)
        self.memo[key] = parts
        return parts
