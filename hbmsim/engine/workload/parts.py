"""A CTA's run as parts: rows of ints, and long loop segments laid out from one iteration.

A run of a tile program (recorder.py) keeps its ops as rows of ints (PENDING fields, then the
region's start and stop per axis) and each long loop segment as its first iteration, a step
per iteration and a count (`Laid`). The functions here lay parts out into template records,
and work out their transfers and tile keys without laying out every iteration.
"""

from __future__ import annotations

import numpy as np

from ...interpret.trace import (
    MAX_AXES,
    OP_COMPUTE,
)
from .work import (
    LEAN_TEMPLATE_DTYPE,
    TEMPLATE_DTYPE,
    tile_keys,
)

# A loop segment of at least this many iterations is traced at four of them (`OneCta.loop`)
SAMPLED_LOOP_MIN = 5
# one op's record as OneCta keeps it while a CTA runs: these fields, then its region's start
# and stop per axis (`REGION` on), in a row of ints
PENDING = ("op", "tensor", "buffer", "bytes", "matmul_flops", "vector_flops", "exp_ops")
REGION = len(PENDING)  # what iterations of one loop segment share are the columns before it
COLUMNS = REGION + 2 * MAX_AXES


class NotAffine(Exception):
    """A sampled loop segment whose iterations are not one another moved by a fixed step."""


class Laid:
    """A loop segment laid out from its first iteration: that iteration's rows, each row's
    step per iteration (its region's columns), and the number of iterations."""

    __slots__ = ("first", "step", "n")

    def __init__(self, first: np.ndarray, step: np.ndarray, n: int):
        self.first, self.step, self.n = first, step, n

    def __len__(self) -> int:
        return self.n * len(self.first)

    def rows(self) -> np.ndarray:
        out = np.tile(self.first, (self.n, 1)).reshape(self.n, len(self.first), COLUMNS)
        out[:, :, REGION:] += np.arange(self.n, dtype=np.int64)[:, None, None] * self.step[None]
        return out.reshape(-1, COLUMNS)

    def write(self, out: np.ndarray) -> None:
        """Lay the segment out into TEMPLATE_DTYPE records `out` (as many as it has ops): the
        first iteration's records copied whole to every iteration, then the regions that move
        stepped on, a few iterations at a time (a temporary of the whole would take
        gigabytes: 12.6 M ops for one CTA of flash-attn 1's first release at 64k tokens; and
        writing field by field passes over every record once per field)."""
        n, r = self.n, len(self.first)
        # as bytes: numpy copies structured records field by field, 10x slower
        first = records(self.first, out.dtype).view(np.uint8)
        out.view(np.uint8).reshape(n, -1)[:] = first[None]
        moving = np.flatnonzero(self.step.any(axis=1))
        if not len(moving) or n < 2 or "start" not in out.dtype.names:
            return
        per = max(1, (1 << 16) // len(moving))  # iterations per chunk: ~64 k moving rows
        for at, name in ((0, "start"), (MAX_AXES, "stop")):
            step = self.step[moving, at : at + MAX_AXES]
            if not step.any():
                continue
            field = out[name].reshape(n, r, MAX_AXES)
            for a in range(1, n, per):  # the first iteration is in place already
                k = np.arange(a, min(n, a + per), dtype=np.int64)[:, None, None]
                field[a : a + per, moving] += k * step[None]

    def moved(self) -> np.ndarray:
        """The second iteration's rows."""
        moved = self.first.copy()
        moved[:, REGION:] += self.step
        return moved

    def laid(self, shape: np.ndarray, first: np.ndarray, second: np.ndarray):
        """`transfers_of` for the whole segment, from the first and the second iteration's
        (`first`, `second`: their tile keys; `shape`: the first's transfers): tile keys are
        affine in a region's corners, so they move by one key step per iteration too."""
        step = second - first
        laid = first[None] + np.arange(self.n, dtype=np.int64)[:, None, None] * step[None]
        return np.tile(shape, (self.n, 1)), laid.reshape(-1, 2)


def laid_out(parts: list, regions: bool) -> np.ndarray:
    """A run's parts as TEMPLATE_DTYPE records (LEAN_TEMPLATE_DTYPE without `regions`)."""
    dtype = TEMPLATE_DTYPE if regions else LEAN_TEMPLATE_DTYPE
    out = np.empty(sum(len(p) for p in parts), dtype)
    at = 0
    for part in parts:
        mine = out[at : at + len(part)]
        if isinstance(part, Laid):
            part.write(mine)
        else:
            mine[:] = records(part, dtype)
        at += len(part)
    return out


def transfers_in(rows: np.ndarray) -> int:
    """How many of a part's rows (COLUMNS each) are transfers."""
    return int((rows[:, 0] != OP_COMPUTE).sum())


def compact_transfers(parts: list, strides) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """The transfers of a run's parts with each laid-out segment as its first two iterations:
    (op, bytes, tensor) and tile key of each, and how many each block holds."""
    blocks = []
    for p in parts:
        blocks += [p.first, p.moved()] if isinstance(p, Laid) else [p]
    rows = blocks[0] if len(blocks) == 1 else np.concatenate(blocks)
    shape, keys = transfers_of(rows, strides)
    return shape, keys, [transfers_in(b) for b in blocks]


def expanded(parts: list, shape: np.ndarray, keys: np.ndarray, counts: list[int]):
    """`compact_transfers`' answer with each laid-out segment laid out (its keys moving by
    the second iteration's step)."""
    if len(counts) == len(parts):  # no laid-out segment: the rows as they are
        return shape, keys
    ends = np.cumsum(counts).tolist()
    shapes, found, i = [], [], 0
    for p in parts:
        a = ends[i] - counts[i]
        if isinstance(p, Laid):
            b, c = ends[i], ends[i + 1]
            sh, ky = p.laid(shape[a:b], keys[a:b], keys[b:c])
            i += 2
        else:
            sh, ky = shape[a : ends[i]], keys[a : ends[i]]
            i += 1
        shapes.append(sh)
        found.append(ky)
    return np.concatenate(shapes), np.concatenate(found)


def records(rows: np.ndarray, dtype: np.dtype = TEMPLATE_DTYPE) -> np.ndarray:
    """Rows of ints (COLUMNS each) as records of `dtype` (TEMPLATE_DTYPE, or the lean one
    without regions)."""
    out = np.empty(len(rows), dtype)
    for i, name in enumerate(PENDING):
        out[name] = rows[:, i]
    if "start" in dtype.names:
        out["start"] = rows[:, REGION : REGION + MAX_AXES]
        out["stop"] = rows[:, REGION + MAX_AXES :]
    return out


def extents(parts: list) -> np.ndarray:
    """(ops, MAX_AXES) each op's region extents (stop - start), from a run's parts."""
    out = []
    for p in parts:
        if isinstance(p, Laid):
            first = p.first[:, REGION + MAX_AXES :] - p.first[:, REGION : REGION + MAX_AXES]
            step = p.step[:, MAX_AXES:] - p.step[:, :MAX_AXES]
            k = np.arange(p.n, dtype=np.int64)[:, None, None]
            out.append((first[None] + k * step[None]).reshape(-1, MAX_AXES))
        else:
            out.append(p[:, REGION + MAX_AXES :] - p[:, REGION : REGION + MAX_AXES])
    return np.concatenate(out) if out else np.zeros((0, MAX_AXES), np.int64)


def parts_rows(parts: list) -> np.ndarray:
    """A run's parts (row arrays and laid-out segments) as one array of rows."""
    rows = [p.rows() if isinstance(p, Laid) else p for p in parts]
    if len(rows) == 1:
        return rows[0]
    return np.concatenate(rows) if rows else np.zeros((0, COLUMNS), np.int64)


def coef_rows(parts: list, coefs: list, axes: int) -> np.ndarray:
    """A symbolic run's region coefficients of `parts` as one (axes, rows, columns) array, as
    parts_rows lays the parts out (a laid-out loop's coefficients are its first iteration's in
    every iteration)."""
    out = [
        np.tile(c, (1, p.n, 1)) if isinstance(p, Laid) else c
        for p, c in zip(parts, coefs, strict=True)
    ]
    if len(out) == 1:
        return out[0]
    return np.concatenate(out, axis=1) if out else np.zeros((axes, 0, COLUMNS), np.int64)


def key_deltas(parts: list, coefs: list, strides: np.ndarray) -> np.ndarray:
    """(axes, transfers, 2): how each transfer's tile key moves per unit of each symbolic axis,
    in program order (a laid-out loop's iterations one after another), from a symbolic run's
    parts and each part's region coefficients ((axes, rows, columns) per part; a laid-out
    loop's are its first iteration's, the same in every iteration, so its steps are worked
    out once and repeated). Tile keys are affine in the region's corners (tile_keys: first
    element * 64 + tensor, last element)."""
    return laid_steps(parts, row_steps(parts, coefs, strides))


def row_steps(parts: list, coefs: list, strides: np.ndarray) -> np.ndarray:
    """`key_deltas` of every part's rows (a laid-out loop's first iteration) once."""
    rows = np.concatenate([p.first if isinstance(p, Laid) else p for p in parts])
    coef = np.concatenate(coefs, axis=1)
    moves = rows[:, 0] != OP_COMPUTE
    st = strides[rows[moves, 1]][None]  # (1, transfers, MAX_AXES)
    moved = coef[:, moves]
    step = np.empty(moved.shape[:2] + (2,), dtype=np.int64)
    step[:, :, 0] = (moved[:, :, REGION : REGION + MAX_AXES] * st).sum(axis=2) * 64
    step[:, :, 1] = (moved[:, :, REGION + MAX_AXES :] * st).sum(axis=2)
    return step


def laid_steps(parts: list, step: np.ndarray) -> np.ndarray:
    """`row_steps`' answer for each transfer of the program (a loop's iterations its
    first's)."""
    if not any(isinstance(p, Laid) for p in parts):
        return step
    index, at = [], 0
    for p in parts:
        mine = at + np.arange(transfers_in(p.first if isinstance(p, Laid) else p))
        index.append(np.tile(mine, p.n) if isinstance(p, Laid) else mine)
        at += len(mine)
    return step[:, np.concatenate(index)]


def transfers_of(rows: np.ndarray, strides) -> tuple[np.ndarray, np.ndarray]:
    """The transfers among rows: (op, bytes, tensor) of each, and its tile key."""
    tr = rows[rows[:, 0] != OP_COMPUTE]
    start, stop = tr[:, REGION : REGION + MAX_AXES], tr[:, REGION + MAX_AXES :]
    return tr[:, [0, 3, 1]], tile_keys(tr[:, 1], start, stop, strides)


NO_REGION = (0,) * (2 * MAX_AXES)


def checked_step(blocks: list[np.ndarray], picks: tuple[int, ...]) -> np.ndarray:
    """Each row's step per iteration of a loop segment, from the rows of its iterations
    `picks` (the first, the second, then those that check the step): the second's regions
    less the first's. Raises NotAffine where an iteration differs from the first in anything
    but its regions, or a checked one is not where the step puts it."""
    first, second = blocks[0], blocks[1]
    for block in blocks[1:]:
        if block.shape != first.shape or not np.array_equal(block[:, :REGION], first[:, :REGION]):
            raise NotAffine
    step = second[:, REGION:] - first[:, REGION:]
    for k, block in zip(picks[2:], blocks[2:], strict=True):
        if not np.array_equal(block[:, REGION:], first[:, REGION:] + k * step):
            raise NotAffine
    return step
