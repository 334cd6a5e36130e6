"""Symbolic grid coordinates: a class's program run once for all its CTAs.

Why: the fast builder (classkeys.py) learns a class's tile keys as a formula, affine along
each grid axis, from runs of a few of its CTAs: the representative, the first step along an
axis, then the last and a middle CTA to check the formula. A causal kernel has a class per
query block (1,024 at 64k tokens), each of three runs at least, and running a program costs
microseconds per op whatever its coordinates. Most programs only pass a CTA's batch and head
coordinates through to their regions, or add and multiply them by constants: run once with
those coordinates as affine expressions (`Affine`), the program itself gives every CTA's
regions, hence its tile keys, which are affine in a region's corners (workload.tile_keys).
That is a proof where the runs were samples: it holds for every CTA of the class.

An expression only adds, subtracts, multiplies by an int, and divides (or takes a modulo) by
an int that divides all its coefficients, where the result is exact for every CTA. Anything
else a program might do with a coordinate (compare it, branch on it, index a list, build a
range, turn it into an int or a float, hash it) raises, and then the class is learned from
runs as before: the answer is the same either way (tests compare the two builders CTA by
CTA), only its cost differs.

A family of classes (classkeys: causal attention's query blocks, one class each) is run
once with its own axis symbolic too, over the box of coordinates it spans (`within`): there a
comparison is decided where the expression's least and greatest values in the box give every
CTA the same answer (so `min`, `sorted` and a set of bounds work), and refused where they do
not; a loop segment whose ends are expressions is a `SymRange`, its length affine in the
coordinates. Outside such a run, comparisons are refused as before.
"""

from __future__ import annotations

from contextvars import ContextVar

import numpy as np


class NotSymbolic(Exception):
    """A program did something with a symbolic coordinate that is not exact for every CTA."""


class Affine:
    """c0 + sum(co[a] * u[a]): a value at the representative (c0) and its change per unit of
    each symbolic axis's coordinate (u[a]: the coordinate less the representative's)."""

    __slots__ = ("c0", "co")

    def __init__(self, c0: int, co: tuple[int, ...]):
        self.c0, self.co = c0, co

    def __repr__(self) -> str:
        return f"Affine({self.c0}, {self.co})"

    def __add__(self, other):
        if type(other) is int:
            return Affine(self.c0 + other, self.co)
        if type(other) is Affine:
            return affine(
                self.c0 + other.c0, tuple(a + b for a, b in zip(self.co, other.co, strict=True))
            )
        raise NotSymbolic

    __radd__ = __add__

    def __neg__(self):
        return Affine(-self.c0, tuple(-c for c in self.co))

    def __sub__(self, other):
        if type(other) not in (int, Affine):
            raise NotSymbolic
        return self + -other

    def __rsub__(self, other):
        if type(other) is not int:
            raise NotSymbolic
        return -self + other

    def __mul__(self, other):
        if type(other) is int:
            return affine(self.c0 * other, tuple(c * other for c in self.co))
        raise NotSymbolic

    __rmul__ = __mul__

    def _split(self, d: int):
        """(K, S's least, S's greatest) with self = d K + S: K the coefficients' multiples of
        d, S the constant plus the rest, which only remainder variables (`remainders`) may
        carry; None where another variable carries some (each is noted as a hint: split
        that axis by d and run again)."""
        fixed = _FIXED.get() or {}
        k = tuple(c // d for c in self.co)
        lo = hi = self.c0
        hints = _HINTS.get()
        ok = True
        for i, c in enumerate(self.co):
            s = c % d
            if not s:
                continue
            if i not in fixed:
                ok = False
                if hints is not None:
                    hints.append((i, d))
                continue
            a, b = fixed[i]
            lo, hi = lo + min(s * a, s * b), hi + max(s * a, s * b)
        return (k, lo, hi) if ok else None

    def __floordiv__(self, other):
        # (d K + S) // d == K + S // d, exact for every CTA where S // d is one value
        if type(other) is int and other > 0 and (found := self._split(other)) is not None:
            k, lo, hi = found
            if lo // other == hi // other:
                return affine(lo // other, k)
        raise NotSymbolic

    def __mod__(self, other):
        # (d K + S) % d == S - d (S // d), where S // d is one value
        if type(other) is int and other > 0 and (found := self._split(other)) is not None:
            _k, lo, hi = found
            t = lo // other
            if t == hi // other:
                return affine(self.c0 - other * t, tuple(c % other for c in self.co))
        raise NotSymbolic

    def _refuse(self, *_args):
        raise NotSymbolic

    # Comparisons are exact only where every CTA of the run gives the same answer: inside a
    # run over a box of coordinates (`within`), decided from the expression's least and
    # greatest value there; anywhere else refused.
    def __lt__(self, other):
        return _decided(self - other, lambda lo, hi: hi < 0, lambda lo, hi: lo >= 0)

    def __le__(self, other):
        return _decided(self - other, lambda lo, hi: hi <= 0, lambda lo, hi: lo > 0)

    def __gt__(self, other):
        return _decided(self - other, lambda lo, hi: lo > 0, lambda lo, hi: hi <= 0)

    def __ge__(self, other):
        return _decided(self - other, lambda lo, hi: lo >= 0, lambda lo, hi: hi < 0)

    def __eq__(self, other):
        if type(other) not in (int, Affine):
            return NotImplemented
        return _decided(self - other, lambda lo, hi: lo == hi == 0, lambda lo, hi: lo > 0 or hi < 0)

    def __ne__(self, other):
        same = self.__eq__(other)
        return same if same is NotImplemented else not same

    def __bool__(self):
        return self != 0

    def __hash__(self):  # a set of bounds (blocks.split): only where comparisons are decided
        if _BOX.get() is None:
            raise NotSymbolic
        return hash((self.c0, self.co))

    __index__ = __int__ = __float__ = _refuse
    __truediv__ = __rtruediv__ = __rfloordiv__ = __rmod__ = __pow__ = __abs__ = _refuse


# remainder variables (`split_coordinates`): variable index -> the (least, greatest) of its
# unit, a property of the variable itself (c % d ranges over 0 .. d - 1 whatever the run), so
# known outside a box too; None outside a symbolic run
_FIXED: ContextVar[dict[int, tuple[int, int]] | None] = ContextVar("hbmsim_fixed", default=None)
# (variable index, divisor) of each floor division or modulo refused because that variable's
# coefficient is no multiple of the divisor: the axes to split on a second run
_HINTS: ContextVar[list | None] = ContextVar("hbmsim_hints", default=None)

# the box a run's symbolic coordinates span: per axis, (least, greatest) of its unit (the
# coordinate less the representative's); None outside such a run (comparisons refused). A
# context variable: the app builds workloads in several sessions' threads at once, and one
# thread's box must never decide another's comparisons
_BOX: ContextVar[tuple[tuple[int, int], ...] | None] = ContextVar("hbmsim_box", default=None)


def _range_of(value, box) -> tuple[int, int]:
    if type(value) is int:
        return value, value
    lo = hi = value.c0
    for c, (a, b) in zip(value.co, box, strict=True):
        lo += min(c * a, c * b)
        hi += max(c * a, c * b)
    return lo, hi


def _decided(diff, yes, no) -> bool:
    box = _BOX.get()
    if box is None:
        raise NotSymbolic
    lo, hi = _range_of(diff, box)
    if yes(lo, hi):
        return True
    if no(lo, hi):
        return False
    raise NotSymbolic  # true for some CTAs, false for others


class within:
    """A run over a box of coordinates: `with within(box):` lets comparisons be decided (box:
    per symbolic axis, the (least, greatest) unit)."""

    def __init__(self, box: tuple[tuple[int, int], ...]):
        self.box = box

    def __enter__(self):
        self.token = _BOX.set(tuple(self.box))
        return self

    def __exit__(self, *_exc):
        _BOX.reset(self.token)
        return False


class SymRange:
    """range(start, stop) whose ends may be Affine (a loop segment of a run over a box): its
    length, an int or an Affine; its k-th value (k an int or an Affine); iterable where its
    length is an int."""

    __slots__ = ("start", "stop")

    def __init__(self, start, stop):
        self.start, self.stop = start, stop

    @property
    def n(self):
        return self.stop - self.start

    def __getitem__(self, k):
        return self.start + k

    def __iter__(self):
        n = self.n
        if type(n) is not int:
            raise NotSymbolic
        return iter([self.start + k for k in range(n)])

    def __len__(self) -> int:
        n = self.n
        if type(n) is not int:
            raise NotSymbolic
        return n


def segment(a, b):
    """range(a, b), or a SymRange where an end is Affine."""
    return SymRange(a, b) if Affine in (type(a), type(b)) else range(a, b)


def affine(c0: int, co: tuple[int, ...]):
    """An Affine, or the int it is where no coefficient is left."""
    return Affine(c0, co) if any(co) else c0


def coordinates(rep: tuple[int, ...], axes: list[int]) -> tuple:
    """The representative's coordinates with `axes` symbolic (one unit coefficient each)."""
    return split_coordinates(rep, axes, {})[0]


def split_coordinates(rep: tuple[int, ...], axes: list[int], splits: dict[int, int]):
    """(coordinates, variables, remainder ranges): the representative's coordinates with `axes`
    symbolic, over variables: one per axis (its unit: the coordinate less the
    representative's), or two for an axis split by d (`splits`: axis -> d), its quotient and
    its remainder (c // d and c % d, each less the representative's), the coordinate
    d * quotient + remainder. Why: GQA's K/V head is the query head // group, no affine
    function of the head, yet affine in that axis's quotient; the remainder's range is known
    (`remainders`), so floor divisions and modulos by d are exact for every CTA.

    `variables`: (axis, kind, d) each, kind "unit", "quotient" or "remainder" (d 1 for a
    unit); `remainder ranges`: variable index -> (least, greatest)."""
    variables: list[tuple[int, str, int]] = []
    for axis in axes:
        d = splits.get(axis, 1)
        if d > 1:
            variables += [(axis, "quotient", d), (axis, "remainder", d)]
        else:
            variables.append((axis, "unit", 1))
    n = len(variables)
    out = list(rep)
    fixed = {}
    for i, (axis, kind, d) in enumerate(variables):
        if kind == "unit":
            out[axis] = Affine(int(rep[axis]), tuple(int(x == i) for x in range(n)))
        elif kind == "quotient":  # the remainder comes next
            co = tuple(d if x == i else int(x == i + 1) for x in range(n))
            out[axis] = Affine(int(rep[axis]), co)
            fixed[i + 1] = (-(rep[axis] % d), d - 1 - rep[axis] % d)
    return tuple(out), variables, fixed


def unit_values(variables, coords: np.ndarray, rep: tuple[int, ...]) -> np.ndarray:
    """(m, variables) each variable's unit at the CTAs at `coords` ((m, axes))."""
    out = np.empty((len(coords), len(variables)), dtype=np.int64)
    for i, (axis, kind, d) in enumerate(variables):
        c = coords[:, axis]
        if kind == "unit":
            out[:, i] = c - rep[axis]
        elif kind == "quotient":
            out[:, i] = c // d - rep[axis] // d
        else:
            out[:, i] = c % d - rep[axis] % d
    return out


class remainders:
    """A symbolic run's remainder variables and where its refused divisions are noted:
    `with remainders(fixed, hints):` (fixed: variable index -> (least, greatest) unit)."""

    def __init__(self, fixed: dict[int, tuple[int, int]], hints: list):
        self.fixed, self.hints = fixed, hints

    def __enter__(self):
        self.tokens = (_FIXED.set(dict(self.fixed)), _HINTS.set(self.hints))
        return self

    def __exit__(self, *_exc):
        _FIXED.reset(self.tokens[0])
        _HINTS.reset(self.tokens[1])
        return False


__all__ = [
    "Affine",
    "NotSymbolic",
    "SymRange",
    "affine",
    "coordinates",
    "remainders",
    "segment",
    "split_coordinates",
    "unit_values",
    "within",
]
