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
        # per kernel, the axes its classes' symbolic runs had to split (axis -> divisor): the
        # next class starts with them (GQA's head axis, split by the group, in every class)
        self.splits: dict[int, dict[int, int]] = {}

    def symbolic(self, kernel_index: int, cls: CtaClass, strides) -> tuple | None:
        """The class's representative run once with every axis the class spans symbolic
        (program/symbolic.py): (its variables, each transfer's key step per unit of each,
        (variables, transfers, 2)), its parts memoised as its own run would make them; None
        where the program did something with a coordinate that is not exact for every CTA
        (then nothing is kept, and the class is learned from runs). An axis the program
        divides by d (GQA's query head -> K/V head) is split into its quotient and remainder
        by d on a second run (`split_coordinates`)."""
        rep = cls.representative
        axes = [axis for axis, r in enumerate(cls.axes) if len(r) >= 2]
        if not axes:
            return None
        known = self.splits.setdefault(kernel_index, {})
        splits = {a: d for a, d in known.items() if a in axes}
        for _attempt in range(SPLIT_ATTEMPTS):
            coords, variables, fixed = classsym.split_coordinates(rep, axes, splits)
            hints: list = []
            self.symbolic_axes, self.pending_coefs, self.coefs = len(variables), [], []
            try:
                with classsym.remainders(fixed, hints):
                    parts = self.record(kernel_index, coords, sampling=True)
                deltas = key_deltas(parts, self.coefs, strides)
            except Exception:  # noqa: BLE001 - any failure: split an axis, or learn from runs
                if not _more_splits(splits, variables, hints):
                    return None
                continue
            finally:
                self.symbolic_axes, self.pending_coefs, self.coefs = 0, [], []
            self.memo[(kernel_index, rep)] = parts
            known.update(splits)
            return variables, deltas
        return None

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
        found = self._family_run(kernel_index, cls, axes, axis)
        if found is None:
            return None
        parts, coefs, variables = found
        j = variables.index((axis, "unit", 1))
        others = [x for x in range(len(variables)) if x != j]
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
            found = ([variables[x] for x in others], laid_steps(mine, steps_per_row), mark)
            out[v] = (mine, found, own)
        return out

    def _family_run(self, kernel_index: int, cls: CtaClass, axes: list[int], axis: int):
        """(parts, their region coefficients, variables) of the family's one run over the box
        its classes span (`family`), an axis the program divides split as `symbolic` splits
        it (never the family's own); None where no run is exact for every class."""
        rep = cls.representative
        splits: dict[int, int] = {}
        for _attempt in range(SPLIT_ATTEMPTS):
            coords, variables, fixed = classsym.split_coordinates(rep, axes, splits)
            box = []  # per variable, (least, greatest) unit over the classes' coordinates
            for i, (a, kind, d) in enumerate(variables):
                r = cls.axes[a]
                if kind == "unit":
                    box.append((0, len(r) - 1))
                elif kind == "quotient":
                    box.append((0, r[-1] // d - rep[a] // d))
                else:
                    box.append(fixed[i])
            hints: list = []
            self.symbolic_axes, self.pending_coefs, self.coefs = len(variables), [], []
            try:
                with classsym.within(box), classsym.remainders(fixed, hints):
                    parts = self.record(kernel_index, coords, sampling=True)
                return parts, self.coefs, variables
            except Exception:  # noqa: BLE001 - any failure: split an axis, or run each class
                hints = [(i, d) for i, d in hints if variables[i][0] != axis]
                if not _more_splits(splits, variables, hints):
                    return None
            finally:
                self.symbolic_axes, self.pending_coefs, self.coefs = 0, [], []
        return None

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


SPLIT_ATTEMPTS = 3  # symbolic runs of a class: plain, then with the axes it divides split


def _more_splits(splits: dict[int, int], variables, hints: list) -> bool:
    """Add to `splits` the unit axes a refused run divided (`hints`: variable, divisor);
    whether any was added (else another run would fail alike)."""
    added = False
    for i, d in hints:
        axis, kind, _d = variables[i]
        if kind == "unit" and axis not in splits and d > 1:
            splits[axis] = d
            added = True
    return added
