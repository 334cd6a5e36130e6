"""Translation periods of a kernel's CTA sequence, from the plan's class formula.

Why: the L2 model skips the repeated waves of a long kernel (l2/fast.py) only where the CTA
sequence is a translation of itself: CTA c + P runs CTA c's ops with every tile key moved by
one shift per tensor (the same shift for every tile of a tensor, zero allowed, so a shared
causal mask may stay put), for every c. Attention's (batch, head) instances are such a
translation when their tensors are laid out contiguously.
"""

from __future__ import annotations

import math

import numpy as np

from ...interpret.trace import OP_COMPUTE
from .arrays import distinct

MAX_SCANNED_CTAS = 2_000_000  # several classes interleaved: every CTA pair is looked at


def periods(kernel, classes, templates, layout) -> tuple[int, ...]:
    """The CTA strides P (in launch order) of `kernel` that are translations, smallest first;
    () when none is found. Classes with a table or explicit keys are never periodic here; a
    per-tensor shift by value (GQA's head axis) is where stepping its axis by some k moves
    every tile of a tensor by the same shift at every value (`shift_step`)."""
    if any(ck.explicit is not None or ck.tables for ck in classes):
        return ()
    if len(classes) == 1 and len(templates) == 1:
        return tuple(sorted(set(_one_class(kernel, classes, templates))))
    if layout.cls is None or layout.n > MAX_SCANNED_CTAS:
        return ()
    return _interleaved(classes, layout, kernel.launch_order)


def _per_tensor(shift: dict, tensor: np.ndarray, move: np.ndarray) -> bool:
    """Whether `move` ((n, 2) key differences of transfers of `tensor`) is a pure translation
    of each tile by its tensor's shift, consistent with (and added to) `shift`."""
    if not np.array_equal(move[:, 0], 64 * move[:, 1]):
        return False  # keys are (first element * 64 + tensor, last element): a box moved whole
    for x in np.flatnonzero(np.bincount(tensor)).tolist():  # tensor ids: small, from 0
        d = move[tensor == x, 1]
        if (d != d[0]).any():
            return False  # two tiles of one tensor move differently
        if shift.setdefault(x, int(d[0])) != int(d[0]):
            return False
    return True


def _interleaved(classes, layout, order) -> tuple[int, ...]:
    """Several classes in one launch order (held as arrays by the layout): P qualifies when
    CTA c + P is of CTA c's class for every c, and every (class, coordinate step) pair moves
    the keys by the same shift per tensor. Keys are affine within a class, so one CTA pair per
    (class, step) decides for all of them."""
    cls, coord, n = layout.cls, layout.coord, layout.n
    out = []
    p = 1
    for axis in reversed(order):  # fastest first: P spans the faster axes
        if p < n and _translates(classes, cls, coord, p):
            out.append(p)
        size = len(distinct(coord[:, axis]))
        # a shifted axis (GQA's heads) may translate by a step of k of its values first
        steps = [shift_step(ck, axis) for ck in classes if axis in ck.shifts]
        k = math.lcm(*steps) if steps else size
        if 1 < k < size and size % k == 0 and p * k < n and _translates(classes, cls, coord, p * k):
            out.append(p * k)
        p *= size
    return tuple(out)


def _translates(classes, cls, coord, p: int) -> bool:
    if not np.array_equal(cls[p:], cls[:-p]):
        return False
    step = np.concatenate([cls[:-p, None].astype(np.int64), coord[p:] - coord[:-p]], axis=1)
    _, first = np.unique(step, axis=0, return_index=True)
    shift: dict = {}
    for c in first.tolist():
        ck = classes[int(cls[c])]
        naxes = len(ck.axes)
        move = coord[c + p, :naxes] - coord[c, :naxes]
        if not all(_uniform(ck, axis, int(move[axis])) for axis in ck.shifts):
            return False  # the pair below stands for every CTA only where each shift is
        keys = ck.at(np.stack([coord[c, :naxes], coord[c + p, :naxes]]))
        tensor = ck.tensor
        if not _per_tensor(shift, tensor, keys[1] - keys[0]):
            return False
    return True


def _uniform(ck, axis: int, move: int) -> bool:
    """Whether moving `axis` by `move` (a coordinate difference) moves ck's per-tensor shift
    along it alike at every value (GQA: a whole group of query heads moves every K/V tile by
    one K/V head, wherever in the heads it starts)."""
    if move == 0:
        return True
    r = ck.axes[axis]
    if move % r.step:
        return False
    k = move // r.step
    table = ck.shifts[axis]
    if abs(k) >= len(table):
        return True  # no CTA of the class steps that far within it
    k = abs(k)
    diff = table[k:] - table[:-k]
    return bool((diff == diff[:1]).all())


def shift_step(ck, axis: int) -> int:
    """The smallest k (a divisor of the axis's length) such that stepping ck's shifted `axis`
    by k values moves every tile alike wherever it starts; its length where none shorter does."""
    n = len(ck.axes[axis])
    for k in range(1, n):
        if n % k == 0 and _uniform(ck, axis, k * ck.axes[axis].step):
            return k
    return n


def _affine_class(kernel, classes, templates):
    """(the class's keys, the launch order's axes slowest first, their sizes, each
    transfer's tensor) for a kernel of one class whose keys are affine in every axis, else
    None."""
    if len(classes) != 1 or len(templates) != 1:
        return None
    ck = classes[0]
    if ck.explicit is not None or ck.tables:
        return None
    naxes = len(ck.axes)
    order = list(kernel.launch_order) if kernel.launch_order is not None else list(range(naxes))
    if sorted(order) != list(range(naxes)) or any(r.step < 1 for r in ck.axes):
        return None
    digits = []  # the launch order's mixed radix, slowest first: (axis, place value, size)
    for a in order:
        n = len(ck.axes[a])
        k = shift_step(ck, a) if a in ck.shifts else 1
        if 1 < k < n:  # a shifted axis: its quotient by k (affine), then its remainder
            digits += [(a, k, n // k), (a, 1, k)]
        else:
            digits.append((a, 1, n))
    ops = templates[0]
    return (
        ck,
        digits,
        [size for *_rest, size in digits],
        ops["tensor"][ops["op"] != OP_COMPUTE].astype(np.int64),
    )


def _uneven(ck, digit) -> bool:
    """Whether stepping this mixed-radix digit moves a tile differently at different values:
    a shifted axis's remainder, or a shifted axis no shorter step of which is even."""
    axis, place, size = digit
    return axis in ck.shifts and place == 1 and size > 1


def _coords(ck, digits, idx: list[int]) -> np.ndarray:
    """The grid coordinates of the CTA whose mixed-radix digits are `idx`."""
    value = [0] * len(ck.axes)
    for (a, place, _size), i in zip(digits, idx, strict=True):
        value[a] += place * i
    return np.array([ck.axes[a][v] for a, v in enumerate(value)], dtype=np.int64)


def _axis_steps(sizes: list[int]):
    """(s, P) for each axis of the launch order from the fastest: the step of axis order[s - 1]
    is P CTAs, the product of the faster axes' sizes."""
    for s in range(len(sizes), 0, -1):
        yield s, math.prod(sizes[s:])


def _one_class(kernel, classes, templates) -> tuple[int, ...]:
    """A kernel of one class whose keys are affine in every axis: in the launch order's mixed
    radix, c -> c + P with P the product of the fastest axes' sizes
    steps the next axis by one, with carries into slower ones; each carry pattern moves the
    keys by a constant amount, computed from the formula on one pair of CTAs per pattern. P
    qualifies when every pattern moves them alike and that move is one shift per tensor.
    """
    affine = _affine_class(kernel, classes, templates)
    if affine is None:
        return ()
    ck, digits, sizes, tensor = affine
    ndigits, n, out = len(digits), math.prod(sizes), []
    for s, p in _axis_steps(sizes):  # digits s.. are inside one period
        if p >= n:
            break
        if any(_uneven(ck, digit) for digit in digits[:s]):
            continue  # P steps (or carries into) a digit whose move differs by value
        moves = []
        for q in range(s):  # carry through the q digits s-q .. s-1
            if sizes[s - 1 - q] < 2:
                continue
            idx = [0] * ndigits
            for j in range(s - q, s):
                idx[j] = sizes[j] - 1
            after = list(idx)
            after[s - 1 - q] += 1
            for j in range(s - q, s):
                after[j] = 0
            pair = np.stack([_coords(ck, digits, idx), _coords(ck, digits, after)])
            keys = ck.at(pair)
            moves.append(keys[1] - keys[0])
        if not moves or any(not np.array_equal(m, moves[0]) for m in moves[1:]):
            continue
        if _per_tensor({}, tensor, moves[0]):
            out.append(p)
    return tuple(out)


def segments(kernel, classes, templates, whole=()) -> tuple[tuple[int, int], ...]:
    """Local translation periods of a one-class kernel whose keys are affine: (P, L) where
    c -> c + P (a step of one axis, P the product of the faster axes' sizes) moves every
    tile by one shift per tensor whenever c and c + P lie in one run [kL, (k + 1)L) of the
    launch order, L being that axis's size times P: the step that does not wrap. Across runs
    the carry may move the keys otherwise (a head's rows reading a causal mask that starts
    over at the next head), which is why P is not a period of the whole kernel. The
    kernel's own periods (`whole`, as `periods` found them) are left out; () when none."""
    affine = _affine_class(kernel, classes, templates)
    if affine is None:
        return ()
    ck, digits, sizes, tensor = affine
    n, out = math.prod(sizes), []
    for s, p in _axis_steps(sizes):
        if sizes[s - 1] < 2 or p in whole or p >= n or _uneven(ck, digits[s - 1]):
            continue
        idx = [0] * len(digits)
        after = list(idx)
        after[s - 1] = 1
        keys = ck.at(np.stack([_coords(ck, digits, idx), _coords(ck, digits, after)]))
        if _per_tensor({}, tensor, keys[1] - keys[0]):
            out.append((p, sizes[s - 1] * p))
    return tuple(out)


__all__ = ["periods", "segments"]
