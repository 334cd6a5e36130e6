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
"""

from __future__ import annotations


class NotSymbolic(Exception):
    """A program did something with a symbolic coordinate that is not exact for every CTA."""


class Affine:
    """c0 + sum(co[a] * u[a]): a value at the representative (c0) and its change per unit of
    each symbolic axis's coordinate (u[a]: the coordinate less the representative's)."""

    __slots__ = ("c0", "co")
    __hash__ = None  # unhashable: a dict or set keyed by a coordinate is not symbolic

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

    def __floordiv__(self, other):
        if type(other) is int and other > 0 and all(c % other == 0 for c in self.co):
            # (c0 + d k) // d == c0 // d + k for every integer k
            return affine(self.c0 // other, tuple(c // other for c in self.co))
        raise NotSymbolic

    def __mod__(self, other):
        if type(other) is int and other > 0 and all(c % other == 0 for c in self.co):
            return self.c0 % other
        raise NotSymbolic

    def _refuse(self, *_args):
        raise NotSymbolic

    __bool__ = __index__ = __int__ = __float__ = _refuse
    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _refuse
    __truediv__ = __rtruediv__ = __rfloordiv__ = __rmod__ = __pow__ = __abs__ = _refuse


def affine(c0: int, co: tuple[int, ...]):
    """An Affine, or the int it is where no coefficient is left."""
    return Affine(c0, co) if any(co) else c0


def coordinates(rep: tuple[int, ...], axes: list[int]) -> tuple:
    """The representative's coordinates with `axes` symbolic (one unit coefficient each)."""
    out = list(rep)
    for j, axis in enumerate(axes):
        out[axis] = Affine(int(rep[axis]), tuple(int(i == j) for i in range(len(axes))))
    return tuple(out)


__all__ = ["Affine", "NotSymbolic", "affine", "coordinates"]
