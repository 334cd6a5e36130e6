"""The fast workload builder: one representative per CTA class, every CTA's keys extrapolated.

One representative per declared CTA class is run once (classes whose ops are identical share a
template, as `workload.from_trace` would find them), first with the coordinates the class
spans symbolic (classsym.py): where its program only adds and multiplies them, that run gives
every CTA's tile keys, affine along each axis, for every CTA at once (a causal kernel's
query-block classes over the batch and the heads). Where it does more with them (GQA's query
head -> K/V head, a query block's ragged end), every CTA's tile keys are extrapolated from
the representative and its neighbours along each grid axis ("identical up to offsets": one term
per axis, affine where a step moves every tile alike, sampled at each value where not, as for
GQA's query head -> K/V head), and checked against the last and a middle CTA of the class; where
the check fails, that class's CTAs are run one by one. A run itself traces a long loop segment
at four of its iterations and lays out the rest from them, checked the same way (`_OneCta`).

Consecutive classes that are one value each along one axis, alike along the others (a causal
kernel's query blocks), are a family: run once with that axis symbolic too, comparisons
decided over the box the family spans (classsym.within) and a loop's length affine in the
axis (its loop checked at its first three iterations and its last), each class is laid out
from that run by arithmetic (`_OneCta.family`, `_families`); where the run is not exact for
the whole family, it is tried without its first and last classes, and whatever is left runs
class by class as above.

Keys are kept as that per-class formula, not as arrays: `PlanKeys.take(ctas)` computes the keys
of the CTAs asked for, so a kernel of millions of accesses costs only the CTAs the engine
looks at (see l2fast.py). The formula also gives a kernel's translation periods (periods.py),
which the L2 model uses to compute a long kernel's hits from a few of its waves.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from ...interpret.trace import (
    MAX_AXES,
    OP_ATOMIC,
    OP_COMPUTE,
    OP_LOAD,
    OP_STORE,
    TraceCtx,
    plan_meta,
)
from ...program import symbolic as classsym
from ...program.plan import CtaClass, Plan
from .periods import periods, segments
from .work import (
    LEAN_TEMPLATE_DTYPE,
    TEMPLATE_DTYPE,
    Workload,
    _tensor_strides,
    distinct,
    kernel_work,
    put_keys,
    ranges,
    tile_keys,
)


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
        # classes laid out from one family's run (`_OneCta.family`) share this mark: their
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
        for c, sel in _by_class(cls, len(self.axes)):
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
        for c, sel in _by_class(cls, len(self.classes)):
            ck = self.classes[c]
            keys = ck.at(coords[sel, : len(ck.axes)])
            if isinstance(sel, slice):  # a run of CTAs of one class: one block of keys
                at = int(offsets[sel.start])
                out[at : at + keys.shape[0] * keys.shape[1]] = keys.reshape(-1, 2)
            else:
                put_keys(out, ranges(offsets[sel], counts[sel]), keys.reshape(-1, 2))
        return out


def _by_class(cls: np.ndarray, classes: int):
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


# A loop segment of at least this many iterations is traced at four of them (`_OneCta.loop`)
SAMPLED_LOOP_MIN = 5
# one op's record as _OneCta keeps it while a CTA runs: these fields, then its region's start
# and stop per axis (`_REGION` on), in a row of ints
_PENDING = ("op", "tensor", "buffer", "bytes", "matmul_flops", "vector_flops", "exp_ops")
_REGION = len(_PENDING)  # what iterations of one loop segment share are the columns before it
_COLUMNS = _REGION + 2 * MAX_AXES


class _NotAffine(Exception):
    """A sampled loop segment whose iterations are not one another moved by a fixed step."""


class _Laid:
    """A loop segment laid out from its first iteration: that iteration's rows, each row's
    step per iteration (its region's columns), and the number of iterations."""

    __slots__ = ("first", "step", "n")

    def __init__(self, first: np.ndarray, step: np.ndarray, n: int):
        self.first, self.step, self.n = first, step, n

    def __len__(self) -> int:
        return self.n * len(self.first)

    def rows(self) -> np.ndarray:
        out = np.tile(self.first, (self.n, 1)).reshape(self.n, len(self.first), _COLUMNS)
        out[:, :, _REGION:] += np.arange(self.n, dtype=np.int64)[:, None, None] * self.step[None]
        return out.reshape(-1, _COLUMNS)

    def write(self, out: np.ndarray) -> None:
        """Lay the segment out into TEMPLATE_DTYPE records `out` (as many as it has ops): the
        first iteration's records copied whole to every iteration, then the regions that move
        stepped on, a few iterations at a time (a temporary of the whole would take
        gigabytes: 12.6 M ops for one CTA of flash-attn 1's first release at 64k tokens; and
        writing field by field passes over every record once per field)."""
        n, r = self.n, len(self.first)
        # as bytes: numpy copies structured records field by field, 10x slower
        first = _records(self.first, out.dtype).view(np.uint8)
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
        moved[:, _REGION:] += self.step
        return moved

    def laid(self, shape: np.ndarray, first: np.ndarray, second: np.ndarray):
        """`_transfers_of` for the whole segment, from the first and the second iteration's
        (`first`, `second`: their tile keys; `shape`: the first's transfers): tile keys are
        affine in a region's corners, so they move by one key step per iteration too."""
        step = second - first
        laid = first[None] + np.arange(self.n, dtype=np.int64)[:, None, None] * step[None]
        return np.tile(shape, (self.n, 1)), laid.reshape(-1, 2)


def _laid_out(parts: list, regions: bool) -> np.ndarray:
    """A run's parts as TEMPLATE_DTYPE records (LEAN_TEMPLATE_DTYPE without `regions`)."""
    dtype = TEMPLATE_DTYPE if regions else LEAN_TEMPLATE_DTYPE
    out = np.empty(sum(len(p) for p in parts), dtype)
    at = 0
    for part in parts:
        mine = out[at : at + len(part)]
        if isinstance(part, _Laid):
            part.write(mine)
        else:
            mine[:] = _records(part, dtype)
        at += len(part)
    return out


class Templates(Sequence):
    """A kernel's templates, each kept as its representative's run (its parts: rows, and long
    loop segments as one iteration and a count), laid out into records when asked for; the
    last ones asked for are kept laid out, up to CACHE_BYTES.

    Why: causal attention's query-block classes are a template each, and their loops are what
    they hold: fa2 causal at 64k tokens x 16 heads is 1,024 templates of 4.2 M ops, 168 MB of
    records, where their parts take a few. The engine reads a template at a time (a group's
    program, a short copy's, engine_loops.py), the L2 model only its transfers (KernelWork._tr)."""

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
        at = [_PENDING.index(name) for name in ("op", "bytes", "tensor")]
        blocks = [
            np.tile(p.first[:, at], (p.n, 1)) if isinstance(p, _Laid) else p[:, at]
            for p in self.parts[t]
        ]
        out = np.concatenate(blocks) if blocks else np.zeros((0, 3), np.int64)
        return out[:, 0], out[:, 1], out[:, 2]

    def loops(self, t: int) -> list[tuple[int, int, int, int, int]]:
        """Template t's laid-out loop segments: (first op, ops per iteration, iterations,
        transfers before it, transfers per iteration) each (engine_loops.py)."""
        out, at, tr = [], 0, 0
        for p in self.parts[t]:
            per = _transfers_in(p.first if isinstance(p, _Laid) else p)
            if isinstance(p, _Laid):
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
            if isinstance(p, _Laid):
                n = keep.get(i, p.n)
                out += [b"L", n.to_bytes(8, "little"), p.first[:, :_REGION].tobytes()]
                i += 1
            else:
                out += [b"R", len(p).to_bytes(8, "little"), p[:, :_REGION].tobytes()]
        return b"".join(out)

    def cut(self, t: int, keep: dict[int, int]) -> np.ndarray:
        """Template t's records with its i-th laid-out loop segment run keep[i] times (a short
        copy, engine_loops.py): the same as leaving its middle iterations out, as the records'
        fields but their regions are alike in every iteration."""
        parts, i = [], 0
        for p in self.parts[t]:
            if isinstance(p, _Laid):
                p = _Laid(p.first, p.step, keep[i]) if i in keep else p
                i += 1
            parts.append(p)
        return _laid_out(parts, self.regions)

    def __getitem__(self, t):
        if isinstance(t, slice):
            return [self[i] for i in range(*t.indices(len(self)))]
        t = range(len(self))[t]
        found = self.cache.get(t)
        if found is not None:
            self.cache.move_to_end(t)
            return found
        found = _laid_out(self.parts[t], self.regions)
        found.flags.writeable = False  # shared by every reader
        self.cache[t] = found
        self.cached += found.nbytes
        while self.cached > self.CACHE_BYTES and len(self.cache) > 1:
            _, old = self.cache.popitem(last=False)
            self.cached -= old.nbytes
        return found


def _transfers_in(rows: np.ndarray) -> int:
    """How many of a part's rows (_COLUMNS each) are transfers."""
    return int((rows[:, 0] != OP_COMPUTE).sum())


def _compact_transfers(parts: list, strides) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """The transfers of a run's parts with each laid-out segment as its first two iterations:
    (op, bytes, tensor) and tile key of each, and how many each block holds."""
    blocks = []
    for p in parts:
        blocks += [p.first, p.moved()] if isinstance(p, _Laid) else [p]
    rows = blocks[0] if len(blocks) == 1 else np.concatenate(blocks)
    shape, keys = _transfers_of(rows, strides)
    return shape, keys, [_transfers_in(b) for b in blocks]


def _expanded(parts: list, shape: np.ndarray, keys: np.ndarray, counts: list[int]):
    """`_compact_transfers`' answer with each laid-out segment laid out (its keys moving by
    the second iteration's step)."""
    if len(counts) == len(parts):  # no laid-out segment: the rows as they are
        return shape, keys
    ends = np.cumsum(counts).tolist()
    shapes, found, i = [], [], 0
    for p in parts:
        a = ends[i] - counts[i]
        if isinstance(p, _Laid):
            b, c = ends[i], ends[i + 1]
            sh, ky = p.laid(shape[a:b], keys[a:b], keys[b:c])
            i += 2
        else:
            sh, ky = shape[a : ends[i]], keys[a : ends[i]]
            i += 1
        shapes.append(sh)
        found.append(ky)
    return np.concatenate(shapes), np.concatenate(found)


def _records(rows: np.ndarray, dtype: np.dtype = TEMPLATE_DTYPE) -> np.ndarray:
    """Rows of ints (_COLUMNS each) as records of `dtype` (TEMPLATE_DTYPE, or the lean one
    without regions)."""
    out = np.empty(len(rows), dtype)
    for i, name in enumerate(_PENDING):
        out[name] = rows[:, i]
    if "start" in dtype.names:
        out["start"] = rows[:, _REGION : _REGION + MAX_AXES]
        out["stop"] = rows[:, _REGION + MAX_AXES :]
    return out


def _extents(parts: list) -> np.ndarray:
    """(ops, MAX_AXES) each op's region extents (stop - start), from a run's parts."""
    out = []
    for p in parts:
        if isinstance(p, _Laid):
            first = p.first[:, _REGION + MAX_AXES :] - p.first[:, _REGION : _REGION + MAX_AXES]
            step = p.step[:, MAX_AXES:] - p.step[:, :MAX_AXES]
            k = np.arange(p.n, dtype=np.int64)[:, None, None]
            out.append((first[None] + k * step[None]).reshape(-1, MAX_AXES))
        else:
            out.append(p[:, _REGION + MAX_AXES :] - p[:, _REGION : _REGION + MAX_AXES])
    return np.concatenate(out) if out else np.zeros((0, MAX_AXES), np.int64)


def _rows(parts: list) -> np.ndarray:
    """A run's parts (row arrays and laid-out segments) as one array of rows."""
    rows = [p.rows() if isinstance(p, _Laid) else p for p in parts]
    if len(rows) == 1:
        return rows[0]
    return np.concatenate(rows) if rows else np.zeros((0, _COLUMNS), np.int64)


def _coef_rows(parts: list, coefs: list, axes: int) -> np.ndarray:
    """A symbolic run's region coefficients of `parts` as one (axes, rows, columns) array, as
    _rows lays the parts out (a laid-out loop's coefficients are its first iteration's in
    every iteration)."""
    out = [
        np.tile(c, (1, p.n, 1)) if isinstance(p, _Laid) else c
        for p, c in zip(parts, coefs, strict=True)
    ]
    if len(out) == 1:
        return out[0]
    return np.concatenate(out, axis=1) if out else np.zeros((axes, 0, _COLUMNS), np.int64)


def _key_deltas(parts: list, coefs: list, strides: np.ndarray) -> np.ndarray:
    """(axes, transfers, 2): how each transfer's tile key moves per unit of each symbolic axis,
    in program order (a laid-out loop's iterations one after another), from a symbolic run's
    parts and each part's region coefficients ((axes, rows, columns) per part; a laid-out
    loop's are its first iteration's, the same in every iteration, so its steps are worked
    out once and repeated). Tile keys are affine in the region's corners (tile_keys: first
    element * 64 + tensor, last element)."""
    return _laid_steps(parts, _row_steps(parts, coefs, strides))


def _row_steps(parts: list, coefs: list, strides: np.ndarray) -> np.ndarray:
    """`_key_deltas` of every part's rows (a laid-out loop's first iteration) once."""
    rows = np.concatenate([p.first if isinstance(p, _Laid) else p for p in parts])
    coef = np.concatenate(coefs, axis=1)
    moves = rows[:, 0] != OP_COMPUTE
    st = strides[rows[moves, 1]][None]  # (1, transfers, MAX_AXES)
    moved = coef[:, moves]
    step = np.empty(moved.shape[:2] + (2,), dtype=np.int64)
    step[:, :, 0] = (moved[:, :, _REGION : _REGION + MAX_AXES] * st).sum(axis=2) * 64
    step[:, :, 1] = (moved[:, :, _REGION + MAX_AXES :] * st).sum(axis=2)
    return step


def _laid_steps(parts: list, step: np.ndarray) -> np.ndarray:
    """`_row_steps`' answer for each transfer of the program (a loop's iterations its
    first's)."""
    if not any(isinstance(p, _Laid) for p in parts):
        return step
    index, at = [], 0
    for p in parts:
        mine = at + np.arange(_transfers_in(p.first if isinstance(p, _Laid) else p))
        index.append(np.tile(mine, p.n) if isinstance(p, _Laid) else mine)
        at += len(mine)
    return step[:, np.concatenate(index)]


def _transfers_of(rows: np.ndarray, strides) -> tuple[np.ndarray, np.ndarray]:
    """The transfers among rows: (op, bytes, tensor) of each, and its tile key."""
    tr = rows[rows[:, 0] != OP_COMPUTE]
    start, stop = tr[:, _REGION : _REGION + MAX_AXES], tr[:, _REGION + MAX_AXES :]
    return tr[:, [0, 3, 1]], tile_keys(tr[:, 1], start, stop, strides)


class _OneCta(TraceCtx):
    """Runs single CTAs of a plan: a representative's ops as TEMPLATE_DTYPE records, any
    CTA's transfers and tile keys (to learn and check its class's formula).

    The same records as `TraceCtx` (the fast path == trace replay property checks it). Ops are
    kept as one tuple each and laid into rows of ints a part at a time: a CTA of a long loop
    has tens of thousands of ops or more (fa2 at 1M tokens: 115,000 per CTA, run five times
    to learn its class formula; flash-attn 1's first release at 32k tokens: 1.3 M), and
    running the program costs microseconds per op.

    So a loop segment (`ctx.loop`: iterations alike in their ops, the counting contract) of
    SAMPLED_LOOP_MIN iterations or more is run at four of them: the first, the second, the
    middle and the last. The first two give each op's step per iteration (its region moves by
    a fixed amount: K/V blocks along the keys, query steps along the rows); the segment is
    laid out from the first by that step (`_Laid`), once the middle and the last iterations
    are found where the step puts them, op for op and field for field. Where they are not
    (a region that does not move evenly) or a program leaves a loop early, the CTA is run
    again with every iteration. A run is kept as its parts, laid-out segments unexpanded,
    memoised per (kernel, CTA) within a class (its affine extrapolation asks for some twice);
    the CTAs that only check the formula are never expanded into rows, only their keys.
    """

    def __init__(self, plan: Plan):
        super().__init__(plan)
        self.memo: dict[tuple, list] = {}
        self.itemsize = {name: t.itemsize for name, t in plan.tensors.items()}
        self.sampling = True
        self.symbolic_axes = 0  # axes of the symbolic run under way (`symbolic`), 0: none
        self.pending_coefs: list[tuple] = []  # (op, column, coefficients) of pending ops
        self.coefs: list[np.ndarray] = []  # per part of a symbolic run: (axes, rows, columns)

    def symbolic(self, kernel_index: int, cls: CtaClass, strides) -> tuple | None:
        """The class's representative run once with every axis the class spans symbolic
        (classsym.py): (those axes, each transfer's key step per unit of each, (axes,
        transfers, 2)), its parts memoised as its own run would make them; None where the
        program did something with a coordinate that is not exact for every CTA (then
        nothing is kept, and the class is learned from runs)."""
        rep = cls.representative
        axes = [axis for axis, r in enumerate(cls.axes) if len(r) >= 2]
        if not axes:
            return None
        self.symbolic_axes, self.pending_coefs, self.coefs = len(axes), [], []
        try:
            parts = self._traced(kernel_index, classsym.coordinates(rep, axes), sampling=True)
            deltas = _key_deltas(parts, self.coefs, strides)
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
                parts = self._traced(kernel_index, classsym.coordinates(rep, axes), sampling=True)
            coefs = self.coefs
        except Exception:  # noqa: BLE001 - any failure: each class runs on its own
            return None
        finally:
            self.symbolic_axes, self.pending_coefs, self.coefs = 0, [], []
        j = axes.index(axis)
        others = [x for x in range(len(axes)) if x != j]
        for p in parts:  # a loop's length may follow the family's axis, not the others'
            if isinstance(p, _Laid) and type(p.n) is not int and any(p.n.co[x] for x in others):
                return None

        def parts_at(u: int) -> list:
            mine = []
            for p, coef in zip(parts, coefs, strict=True):
                if isinstance(p, _Laid):
                    n = p.n if type(p.n) is int else p.n.c0 + p.n.co[j] * u
                    mine.append(_Laid(p.first + u * coef[j], p.step, n))
                else:
                    mine.append(p + u * coef[j])
            return mine

        # the other axes' steps are the same rows' for every class (the loops' lengths aside),
        # and the transfers' keys, affine in the regions, affine in the family's axis: worked
        # out at its first two values, then laid out at each
        theirs = [c[others] for c in coefs]
        first = parts_at(0)
        row_steps = _row_steps(first, theirs, strides)
        shape, keys0, counts = _compact_transfers(first, strides)
        keys_step = _compact_transfers(parts_at(1), strides)[1] - keys0
        out, mark = {}, object()
        for v in cls.axes[axis]:
            u = v - rep[axis]
            mine = parts_at(u)
            own = _expanded(mine, shape, keys0 + u * keys_step, counts)
            found = ([axes[x] for x in others], _laid_steps(mine, row_steps), mark)
            out[v] = (mine, found, own)
        return out

    def run(self, kernel_index: int, cta: tuple[int, ...], regions: bool = True) -> np.ndarray:
        """The CTA's ops as TEMPLATE_DTYPE records (LEAN_TEMPLATE_DTYPE without `regions`),
        each part laid out in place."""
        return _laid_out(self._parts(kernel_index, cta), regions)

    def extents(self, kernel_index: int, cta: tuple[int, ...]) -> np.ndarray:
        """The CTA's ops' region extents (stop - start), as from_plan_fast compares them."""
        return _extents(self._parts(kernel_index, cta))

    def transfers(self, kernel_index: int, cta: tuple[int, ...], strides):
        """The CTA's transfers: (op, bytes, tensor) of each, and its tile key. One
        `_transfers_of` for all the parts' rows (a laid-out segment's first two iterations
        stand for it): a CTA has a few parts, and each call has a fixed cost."""
        parts = self._parts(kernel_index, cta)
        if not parts:
            return np.zeros((0, 3), np.int64), np.zeros((0, 2), np.int64)
        return _expanded(parts, *_compact_transfers(parts, strides))

    def _parts(self, kernel_index: int, cta: tuple[int, ...]) -> list:
        key = (kernel_index, cta)
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        try:
            parts = self._traced(kernel_index, cta, sampling=True)
        except _NotAffine:
            parts = self._traced(kernel_index, cta, sampling=False)
        self.memo[key] = parts
        return parts

    def _traced(self, kernel_index: int, cta: tuple[int, ...], sampling: bool) -> list:
        self.sampling, self.left_early = sampling, False
        self.parts: list = []  # row arrays and laid-out segments (_Laid), in program order
        self.pending: list[tuple] = []  # _PENDING fields, then start and stop per axis
        kernel = self.plan.kernels[kernel_index]
        self.begin_kernel(kernel_index, kernel)
        self.begin_cta(cta, 1)
        kernel.program(self, cta)
        if self.left_early:
            raise _NotAffine
        self._flush()
        return self.parts

    def _flush(self) -> None:
        """Lay the pending ops into one more part: an int array, a row per op (_COLUMNS);
        in a symbolic run, its region coefficients too."""
        if self.pending:
            self.parts.append(np.array(self.pending, dtype=np.int64))
            if self.symbolic_axes:
                coef = np.zeros((self.symbolic_axes, len(self.pending), _COLUMNS), np.int64)
                for op, column, co in self.pending_coefs:
                    coef[:, op, column] = co
                self.coefs.append(coef)
                self.pending_coefs = []
            self.pending = []

    def _mark(self) -> int:
        self._flush()
        return len(self.parts)

    def _block(self, since: int) -> tuple[np.ndarray, np.ndarray | None]:
        """The rows recorded since `_mark` returned `since`, taken out of the parts, and in a
        symbolic run their region coefficients (else None)."""
        self._flush()
        block, coef = _rows(self.parts[since:]), None
        if self.symbolic_axes:
            coef = _coef_rows(self.parts[since:], self.coefs[since:], self.symbolic_axes)
            del self.coefs[since:]
        del self.parts[since:]
        return block, coef

    def loop(self, segments):
        if not self.sampling:
            for seg in segments:
                yield from seg
            return
        for seg in segments:
            n = seg.n if isinstance(seg, classsym.SymRange) else len(seg)
            if n < SAMPLED_LOOP_MIN:  # (decided for every CTA in a run over a box)
                yield from seg
                continue
            # a length that differs between the classes of a family run (`family`): the
            # second and third iterations check the step, the last (symbolic) where it lands
            picks = (0, 1, n // 2, n - 1) if type(n) is int else (0, 1, 2, n - 1)
            blocks, coefs = [], []
            for k in picks:
                at = self._mark()
                try:
                    yield seg[k]
                except GeneratorExit:  # the program left the loop: run it again in full
                    self.left_early = True
                    raise
                block, coef = self._block(at)
                blocks.append(block)
                coefs.append(coef)
            at_rep = tuple(k if type(k) is int else k.c0 for k in picks)
            step = _checked_step(blocks, at_rep)
            self.parts.append(_Laid(blocks[0], step, n))
            if self.symbolic_axes:  # laid out as its first iteration's: each must be alike,
                for k, c in zip(picks, coefs, strict=True):  # a symbolic one moved by its step
                    want = coefs[0]
                    if type(k) is not int:
                        want = want.copy()
                        for a, co in enumerate(k.co):
                            want[a, :, _REGION:] += co * step
                    if c.shape != want.shape or (c != want).any():
                        raise classsym.NotSymbolic
                self.coefs.append(coefs[0])

    def _transfer(self, op: int, buf: str, tensor: str, region) -> None:
        if self.symbolic_axes:
            self._symbolic_transfer(op, buf, tensor, region)
            return
        n = 1
        starts, stops = [], []
        for r in region:  # as program.as_region: an int i is the span (i, i + 1)
            if isinstance(r, int):
                a, b = r, r + 1
            else:
                a, b = int(r[0]), int(r[1])
            starts.append(a)
            stops.append(b)
            n *= b - a
        self._transfer_row(op, buf, tensor, n, starts, stops)

    def _transfer_row(self, op: int, buf: str, tensor: str, n: int, starts, stops) -> None:
        """One transfer of n elements as a pending row (_PENDING, then its region's starts and
        stops, padded to MAX_AXES)."""
        pad = [0] * (MAX_AXES - len(starts))
        nbytes = n * self.itemsize[tensor]
        row = (op, self.tensor_ids[tensor], self.buffer_ids[buf], nbytes, 0, 0, 0)
        self.pending.append((*row, *starts, *pad, *stops, *pad))

    def _symbolic_transfer(self, op: int, buf: str, tensor: str, region) -> None:
        """`_transfer` in a symbolic run: a region's ends may be classsym.Affine, whose value
        at the representative goes in the row and whose coefficients in `pending_coefs`; its
        extent must not depend on them."""
        n = 1
        starts, stops = [], []
        at = len(self.pending)
        for axis, r in enumerate(region):
            if isinstance(r, (int, classsym.Affine)):
                a, b = r, r + 1
            else:
                a, b = r[0], r[1]
                a = a if type(a) is classsym.Affine else int(a)
                b = b if type(b) is classsym.Affine else int(b)
                extent = b - a
                if type(extent) is not int:
                    raise classsym.NotSymbolic
                n *= extent
            if type(a) is classsym.Affine:
                self.pending_coefs.append((at, _REGION + axis, a.co))
                a = a.c0
            if type(b) is classsym.Affine:
                self.pending_coefs.append((at, _REGION + MAX_AXES + axis, b.co))
                b = b.c0
            starts.append(a)
            stops.append(b)
        self._transfer_row(op, buf, tensor, n, starts, stops)

    def load(self, buf, tensor, region):
        self._transfer(OP_LOAD, buf, tensor, region)

    def store(self, buf, tensor, region, value=None):
        self._transfer(OP_STORE, buf, tensor, region)

    def atomic_add(self, buf, tensor, region, value=None):
        self._transfer(OP_ATOMIC, buf, tensor, region)

    def compute(self, fn, *args, matmul=0, vector=0, exp=0, out=None):
        if self.symbolic_axes and classsym.Affine in (type(matmul), type(vector), type(exp)):
            raise classsym.NotSymbolic  # work that differs between the class's CTAs
        buffer = self.buffer_ids.get(out, -1) if out is not None else -1
        self.pending.append((OP_COMPUTE, -1, buffer, 0, matmul, vector, exp) + _NO_REGION)


_NO_REGION = (0,) * (2 * MAX_AXES)


def _checked_step(blocks: list[np.ndarray], picks: tuple[int, ...]) -> np.ndarray:
    """Each row's step per iteration of a loop segment, from the rows of its iterations
    `picks` (the first, the second, then those that check the step): the second's regions
    less the first's. Raises _NotAffine where an iteration differs from the first in anything
    but its regions, or a checked one is not where the step puts it."""
    first, second = blocks[0], blocks[1]
    for block in blocks[1:]:
        if block.shape != first.shape or not np.array_equal(block[:, :_REGION], first[:, :_REGION]):
            raise _NotAffine
    step = second[:, _REGION:] - first[:, _REGION:]
    for k, block in zip(picks[2:], blocks[2:], strict=True):
        if not np.array_equal(block[:, _REGION:], first[:, _REGION:] + k * step):
            raise _NotAffine
    return step


def from_plan_fast(
    plan: Plan,
    learn_shifts: bool = True,
    learn_steps: bool = True,
    regions: bool = True,
    symbolic: bool = True,
) -> Workload:
    """The fast workload (see the module docstring); `learn_shifts=False` samples a non-affine
    axis in every class, as if no class had learned its per-tensor shifts, `learn_steps=False`
    runs every class's own first step of each affine axis, `symbolic=False` learns every
    class from runs, none from one symbolic run (the benchmark's comparisons);
    `regions=False`: templates without regions (LEAN_TEMPLATE_DTYPE), which only a timeline
    reads."""
    meta = plan_meta(plan)
    tensor_names = [t["name"] for t in meta["tensors"]]
    strides = _tensor_strides(meta)
    runner = _OneCta(plan)
    kernels = []
    for k, kernel in enumerate(plan.kernels):
        templates, class_template, classes = Templates(regions), [], []
        by_length: dict[int, list[int]] = {}  # ops -> the templates of that many ops
        shifts: dict[tuple, np.ndarray] = {}  # (axis, values) -> per-tensor shifts, learned once
        steps: dict[tuple, np.ndarray] = {}  # (axis, stride) -> per-tensor affine steps
        untaught: list[tuple] = []  # (class, keys) found symbolically, not yet in `steps`
        owners: list[tuple[int, ...]] = []  # each template's first CTA, to compare extents
        extents: dict[int, np.ndarray] = {}  # a template's region extents, once compared
        families = _families(runner, k, kernel.grid, strides) if symbolic else {}
        for z, cls in enumerate(kernel.grid):
            runner.memo.clear()  # a class's runs are asked for again only within the class
            rep = cls.representative
            own = None
            if z in families:  # its parts and keys from its family's run
                parts, found, own = families.pop(z)
                runner.memo[(k, rep)] = parts
            else:
                found = runner.symbolic(k, cls, strides) if symbolic else None
            parts = runner._parts(k, rep)
            alike = by_length.setdefault(sum(len(p) for p in parts), [])
            t_id, mine = len(templates), None
            # laid out only to be compared with a template of as many ops
            template = _laid_out(parts, regions) if alike else None
            for t in alike:
                if not _same_signature(templates[t], template):
                    continue
                if t not in extents:  # its first CTA run again once (the memo is per class)
                    extents[t] = runner.extents(k, owners[t])
                mine = runner.extents(k, rep) if mine is None else mine
                if np.array_equal(extents[t], mine):
                    t_id = t
                    break
            if t_id == len(templates):
                templates.append(parts)
                owners.append(rep)
                alike.append(t_id)
            class_template.append(t_id)
            learned = shifts if learn_shifts else None
            own = runner.transfers(k, rep, strides) if own is None else own
            taught = steps if learn_steps else None
            if found is not None:  # every CTA's keys, from the one symbolic run
                classes.append(_symbolic_keys(cls, own, found))
                untaught.append((cls, classes[-1]))
            else:  # learned from runs: first taught what the symbolic classes found
                if taught is not None:
                    for done, keys in untaught:
                        _learn_steps(taught, done, keys.affine, keys.tensor)
                untaught = []
                classes.append(_class_keys(runner, k, cls, own, strides, learned, taught))
        layout = Layout(kernel.grid, kernel.launch_order)
        kind = np.uint8 if len(templates) < 256 else np.int32
        if len(set(class_template)) == 1:  # one template: a read-only view, not n copies
            # (standard attention's score kernel at 1M tokens x 16 heads has 1 G CTAs)
            cta_template = np.broadcast_to(np.array(class_template[0], dtype=kind), (layout.n,))
        else:
            cta_template = np.array(class_template, dtype=kind)[layout.classes(np.arange(layout.n))]
        kernels.append(
            kernel_work(
                meta["kernels"][k],
                tensor_names,
                templates=templates,
                cta_template=cta_template,
                coords=layout,
                keys=PlanKeys(classes, layout),
                period=(period := periods(kernel, classes, templates, layout)),
                segments=segments(kernel, classes, templates, period),
            )
        )
    return Workload(meta, kernels)


def _families(runner: _OneCta, k: int, grid: tuple, strides) -> dict[int, tuple]:
    """Classes of a kernel taken from one run of their family (`_OneCta.family`): consecutive
    classes that are one value each along one axis, those values consecutive, and alike
    along every other axis. Where the whole family's run is not exact, its first classes
    (short loops) or its last (a ragged block) may be what differs: it is tried without them
    too. Returns {class index: (parts, found, transfers)}."""
    found = _family_axis(grid)
    if found is None:
        return {}
    axis, first, last = found
    for a, b in ((first, last), (first + 8, last), (first, last - 1), (first + 8, last - 1)):
        if b - a < 8:
            continue
        axes = list(grid[a].axes)
        axes[axis] = range(grid[a].axes[axis][0], grid[b].axes[axis][0] + 1)
        got = runner.family(k, CtaClass(tuple(axes)), axis, strides)
        if got is not None:
            return {z: got[grid[z].axes[axis][0]] for z in range(a, b + 1)}
    return {}


def _family_axis(grid: tuple) -> tuple[int, int, int] | None:
    """(axis, first class, last class) of the longest run of consecutive classes one value
    each along one axis, consecutive values, alike along every other axis; None if none."""
    if len(grid) < 16 or len({len(c.axes) for c in grid}) != 1:
        return None
    best = None
    for axis in range(len(grid[0].axes)):
        start = 0
        for z in range(1, len(grid) + 1):
            ok = z < len(grid)
            if ok:
                a, b = grid[z - 1].axes, grid[z].axes
                ok = (
                    len(a[axis]) == len(b[axis]) == 1
                    and b[axis][0] == a[axis][0] + 1
                    and all(a[x] == b[x] for x in range(len(a)) if x != axis)
                )
            if not ok:
                if best is None or z - 1 - start > best[2] - best[1]:
                    best = (axis, start, z - 1)
                start = z
    return best if best is not None and best[2] - best[1] >= 15 else None


def _same_signature(a: np.ndarray, b: np.ndarray) -> bool:
    """Two CTAs' ops alike in every field but their regions; with the same region extents
    (compared by from_plan_fast, from the runs: a lean template keeps none), they are alike
    but for positions, as `Trace.cta_classes` groups CTAs.

    Declared classes that run identical ops share one template, so the engine groups their CTAs
    launched together into one cohort exactly as a replay of the trace does; a template per
    declared class would split cohorts the trace keeps whole, and the timings would differ.
    """
    return len(a) == len(b) and all(np.array_equal(a[name], b[name]) for name in SIGNATURE_FIELDS)


SIGNATURE_FIELDS = ("op", "tensor", "buffer", "bytes", "matmul_flops", "vector_flops", "exp_ops")


def _class_coords(cls: CtaClass) -> np.ndarray:
    """All coordinates of a class in its product order, as an int array."""
    axes = [np.asarray(r, dtype=np.int64) for r in cls.axes]
    mesh = np.meshgrid(*axes, indexing="ij")
    return np.stack([m.reshape(-1) for m in mesh], axis=1)


def _class_member(cls: CtaClass, index: int) -> tuple[int, ...]:
    """The index-th CTA of a class in its product order."""
    out = []
    for r in reversed(cls.axes):
        out.append(r[index % len(r)])
        index //= len(r)
    return tuple(reversed(out))


def _symbolic_keys(cls: CtaClass, own, found) -> ClassKeys:
    """Tile keys of every CTA of a class from its symbolic run (`_OneCta.symbolic`): the
    representative's, plus each symbolic axis's key step per unit of its coordinate, which
    holds for every CTA (no check needed). Its steps are taught to the kernel's learned steps
    (as a confirmed class's are) only once a later class is learned from runs and needs them
    (from_plan_fast), in the same order."""
    shape, base = own
    out = ClassKeys(cls, base, shape[:, 2].copy())
    axes, deltas, *family = found
    out.affine = {axis: deltas[j] for j, axis in enumerate(axes)}
    out.family = family[0] if family else None
    return out


def _class_keys(runner, k, cls: CtaClass, own, strides, shifts=None, steps=None) -> ClassKeys:
    """Tile keys of every CTA's transfers, as a formula (ClassKeys).

    A CTA's offsets are a sum of one term per grid axis (batch, head, block). Each axis's term
    is affine when one step along it moves every tile by the same amount; an axis that is not
    (GQA: query head h reads K/V head h // group) is sampled at every value instead. Where
    the sampled term moves every tile of a tensor alike (a shift per tensor: where the
    tensor's slice of that head starts), the shifts are kept in `shifts` for the kernel's
    other classes, which then check them at the axis's second, last and middle values
    instead of running every value (a class of a causal kernel, one per query block, would
    otherwise run its program once per head). The result is checked against the last and a
    middle CTA; if either differs, every CTA is run. Every axis affine is tried first, from
    each axis's first step and those two checks alone (a CTA of fa2 at 1M tokens runs 115,000
    ops: five runs instead of seven). An affine step that moves every tile of a tensor alike
    (one step per tensor: the head axis) is kept in `steps` for the kernel's other classes,
    which try it before running their own first step (a causal kernel's query-block classes:
    three runs each instead of four, the checks unchanged).
    """
    rep = cls.representative
    shape, base = own  # the representative's transfers: (op, bytes, tensor) and tile keys
    out = ClassKeys(cls, base, shape[:, 2].copy())
    size = cls.size
    if size == 1:
        return out

    def keys_at(axis, value):
        cta = list(rep)
        cta[axis] = int(value)
        own, keys = runner.transfers(k, tuple(cta), strides)
        return keys if np.array_equal(own, shape) else None

    def confirmed(keys: ClassKeys) -> bool:
        """The formula gives the last and a middle CTA's own keys (runs memoised)."""
        for probe in {size - 1, size // 2}:
            cta = _class_member(cls, probe)
            own, found = runner.transfers(k, cta, strides)
            if not np.array_equal(own, shape) or not np.array_equal(
                found, keys.at(np.array([cta], dtype=np.int64))[0]
            ):
                return False
        return True

    # Most classes are affine along every axis: try the steps per tensor another class of the
    # kernel learned, then the first step of each axis, each confirmed at the last and a
    # middle CTA, before checking each axis at its last value (which an axis that is not
    # affine needs to be found and handled).
    moved = [(axis, r) for axis, r in enumerate(cls.axes) if len(r) >= 2]
    known = [None if steps is None else steps.get((axis, r.step)) for axis, r in moved]
    if moved and all(s is not None and _learned(s[None], out.tensor) for s in known):
        trial = ClassKeys(cls, base, out.tensor)
        trial.affine = {axis: s[out.tensor] for (axis, _), s in zip(moved, known, strict=True)}
        if confirmed(trial):
            return trial
    first_steps = {}
    for axis, r in moved:
        step = keys_at(axis, r[1])
        if step is None:
            return _run_each(runner, k, cls, strides, out)
        first_steps[axis] = step - base
    trial = ClassKeys(cls, base, out.tensor)
    trial.affine = dict(first_steps)
    if confirmed(trial):
        if steps is not None:
            _learn_steps(steps, cls, trial.affine, out.tensor)
        return trial
    for axis, r in enumerate(cls.axes):
        if len(r) < 2:
            continue
        step = keys_at(axis, r[1])
        last = keys_at(axis, r[-1])
        if step is None or last is None:
            return _run_each(runner, k, cls, strides, out)
        delta = step - base
        if np.array_equal(last, base + (len(r) - 1) * delta):
            out.affine[axis] = delta
            continue
        known = None if shifts is None else shifts.get((axis, tuple(r)))
        if (
            known is not None
            and _learned(known, out.tensor)
            and all(
                (term := keys_at(axis, v)) is not None
                and np.array_equal(term - base, known[r.index(v)][out.tensor])
                for v in (r[1], r[-1], r[len(r) // 2])
            )
        ):
            out.shifts[axis] = known
            continue
        terms = {}
        for value in r:  # not affine along this axis: one run per value
            term = keys_at(axis, value)
            if term is None:
                return _run_each(runner, k, cls, strides, out)
            terms[value] = term - base
        table = np.stack([terms[v] for v in r])
        per_tensor = _per_tensor_shift(table, out.tensor)
        if per_tensor is not None and shifts is not None:
            shifts[(axis, tuple(r))] = per_tensor
            out.shifts[axis] = per_tensor
        else:
            out.tables[axis] = table
    return out if confirmed(out) else _run_each(runner, k, cls, strides, out)


NOT_LEARNED = np.iinfo(np.int64).min  # a shift row's mark for a tensor its class never moved


def _learn_steps(steps: dict, cls: CtaClass, affine: dict, tensor: np.ndarray) -> None:
    """Keep a confirmed class's affine steps that move every tile of a tensor alike, per
    (axis, the range's stride), as (tensors, 2) rows (NOT_LEARNED for tensors it never moved),
    merged with what earlier classes taught."""
    for axis, delta in affine.items():
        per_tensor = _per_tensor_shift(delta[None], tensor)
        if per_tensor is None:
            continue
        key = (axis, cls.axes[axis].step)
        old = steps.get(key)
        new = per_tensor[0]
        if old is not None:
            width = max(len(old), len(new))
            merged = np.full((width, 2), NOT_LEARNED, dtype=np.int64)
            merged[: len(old)] = old
            fresh = new[:, 0] != NOT_LEARNED
            merged[: len(new)][fresh] = new[fresh]
            new = merged
        steps[key] = new


def _learned(shift: np.ndarray, tensor: np.ndarray) -> bool:
    """Whether `shift` was learned from a class that moved every tensor in `tensor` (tensor
    ids index the shift's rows: a lookup, where np.isin's set machinery cost 90 µs a class)."""
    learned = shift[0, :, 0] != NOT_LEARNED
    return bool(len(tensor) == 0 or (int(tensor.max()) < len(learned) and learned[tensor].all()))


def _per_tensor_shift(table: np.ndarray, tensor: np.ndarray) -> np.ndarray | None:
    """(values, tensors, 2) when every transfer of a tensor takes the same term at every value
    of `table` ((values, n, 2)), else None. Tensors the class does not move are marked
    NOT_LEARNED, so a class that moves them samples its own terms."""
    if not len(tensor):
        return None
    shift = np.full((len(table), int(tensor.max()) + 1, 2), NOT_LEARNED, dtype=np.int64)
    shift[:, tensor] = table  # one of each tensor's transfers lands last: check them all
    return shift if np.array_equal(shift[:, tensor], table) else None


def _run_each(runner, k, cls, strides, out: ClassKeys) -> ClassKeys:
    """Fallback for classes whose offsets are not affine: run every CTA."""
    grid = _class_coords(cls)
    out.affine, out.tables, out.shifts = {}, {}, {}
    out.explicit = np.stack(
        [runner.transfers(k, tuple(int(x) for x in c), strides)[1] for c in grid]
    )
    return out


__all__ = ["ClassKeys", "Layout", "PlanKeys", "from_plan_fast"]
