"""What the engine replays: per kernel, op templates, each CTA's template, and every access.

Two builders give the same `KernelWork`:

- `from_trace`: every CTA's own ops from a full trace (a plan traced now, or a trace file).
  CTAs whose records are identical up to offsets share a template found from the records.
  This is the reference: nothing is assumed about the schedule.
- `from_plan_fast`: one representative per declared CTA class, run once (classes whose ops
  are identical share a template, as `from_trace` would find them); every CTA's accesses are
  extrapolated from the representative and its neighbours along each grid axis ("identical up
  to offsets": one term per axis, affine where a step moves every tile alike, sampled at each
  value where not, as for GQA's query head -> K/V head), and checked against the last and a
  middle CTA of the class; where the check fails, that class's CTAs are run one by one.

An *access* is one load or store of one CTA, identified for the L2 model by its tile: the
tensor and the first and last element of its region (tile-granular keys).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .program import CtaClass, Plan
from .trace import (
    MAX_AXES,
    OP_ATOMIC,
    OP_COMPUTE,
    OP_LOAD,
    OP_STORE,
    Trace,
    TraceCtx,
    plan_meta,
)

TEMPLATE_DTYPE = np.dtype(
    [
        ("op", "u1"),
        ("tensor", "<i2"),
        ("buffer", "<i2"),
        ("start", "<i8", (MAX_AXES,)),
        ("stop", "<i8", (MAX_AXES,)),
        ("bytes", "<i8"),
        ("matmul_flops", "<i8"),
        ("vector_flops", "<i8"),
        ("exp_ops", "<i8"),
    ]
)


@dataclass
class KernelWork:
    name: str
    threads_per_cta: int
    stages: int
    sram_bytes: int
    tensor_cores: bool
    templates: list[np.ndarray]  # TEMPLATE_DTYPE records: one CTA's ops in program order
    cta_template: np.ndarray  # (n_ctas,) template index of each CTA, in launch order
    cta_coord: np.ndarray  # (n_ctas, MAX_AXES) grid coordinates
    # every load and store of every CTA (for the L2 model), CTAs in launch order:
    acc_cta: np.ndarray  # CTA launch index
    acc_index: np.ndarray  # position among the CTA's transfers
    acc_op: np.ndarray  # OP_LOAD, OP_STORE or OP_ATOMIC
    acc_key: np.ndarray  # (n, 2) int64: tile identity (tensor + first element, last element)
    acc_bytes: np.ndarray
    # each access's own region, kept when built from a trace (the timeline shows it):
    acc_start: np.ndarray | None = None
    acc_stop: np.ndarray | None = None
    registers_per_thread: int | None = None  # limits occupancy when known (Kernel's)

    @property
    def n_ctas(self) -> int:
        return len(self.cta_template)


@dataclass
class Workload:
    meta: dict  # trace-file style metadata: algo, problem, hardware, tiles, tensors, kernels
    kernels: list[KernelWork]


def _strides(shape: list[int]) -> np.ndarray:
    out = np.zeros(MAX_AXES, dtype=np.int64)
    acc = 1
    for axis in range(len(shape) - 1, -1, -1):
        out[axis] = acc
        acc *= shape[axis]
    return out


def tile_keys(
    tensor: np.ndarray, start: np.ndarray, stop: np.ndarray, strides: np.ndarray
) -> np.ndarray:
    """(n, 2) keys: (first element * 64 + tensor id, last element). A box is fixed by its two
    corners, so equal keys mean the same tile. Exact for tensors under 2^57 elements."""
    st = strides[tensor]  # (n, MAX_AXES); axes past a tensor's rank have stride 0
    first = (start * st).sum(axis=1)
    last = ((stop - 1) * st).sum(axis=1)
    return np.stack([first * 64 + tensor, last], axis=1)


def _tensor_strides(meta: dict) -> np.ndarray:
    return np.stack([_strides(t["shape"]) for t in meta["tensors"]])


def _transfers(ops: np.ndarray) -> np.ndarray:
    return ops[ops["op"] != OP_COMPUTE]


# --- reference: from a full trace ----------------------------------------------------------


def from_trace(trace: Trace) -> Workload:
    """Every CTA's ops exactly as traced."""
    r = trace.records
    strides = _tensor_strides(trace.meta)
    kernels = []
    groups = trace.cta_classes()
    template_of: dict[tuple[int, int], int] = {}
    per_kernel_templates: dict[int, list[np.ndarray]] = {}
    bounds = _cta_bounds(r)
    for group in groups:
        k = group[0][0]
        lst = per_kernel_templates.setdefault(k, [])
        a, b = bounds[group[0]]
        lst.append(_as_template(r[a:b]))
        for cta in group:
            template_of[cta] = len(lst) - 1
    for k, kmeta in enumerate(trace.meta["kernels"]):
        rk = r[r["kernel"] == k]
        n = kmeta["ctas"]
        cta_template = np.array([template_of[(k, c)] for c in range(n)], dtype=np.int64)
        coords = np.zeros((n, MAX_AXES), dtype=np.int64)
        if len(rk):
            coords[rk["cta"]] = rk["cta_coord"]
        tr = rk[rk["op"] != OP_COMPUTE]
        acc_cta = tr["cta"].astype(np.int64)
        first = (
            np.concatenate([[True], acc_cta[1:] != acc_cta[:-1]]) if len(tr) else np.zeros(0, bool)
        )
        starts_at = (
            np.maximum.accumulate(np.where(first, np.arange(len(tr)), 0))
            if len(tr)
            else np.zeros(0, np.int64)
        )
        kernels.append(
            KernelWork(
                name=kmeta["name"],
                threads_per_cta=kmeta["threads_per_cta"],
                stages=kmeta["stages"],
                tensor_cores=kmeta.get("tensor_cores", True),  # absent before it existed
                registers_per_thread=kmeta.get("registers_per_thread"),
                sram_bytes=kmeta["sram_bytes"],
                templates=per_kernel_templates.get(k, []),
                cta_template=cta_template,
                cta_coord=coords,
                acc_cta=acc_cta,
                acc_index=np.arange(len(tr)) - starts_at,
                acc_op=tr["op"].astype(np.int64),
                acc_key=tile_keys(tr["tensor"].astype(np.int64), tr["start"], tr["stop"], strides),
                acc_bytes=tr["bytes"].astype(np.int64),
                acc_start=tr["start"].copy(),
                acc_stop=tr["stop"].copy(),
            )
        )
    return Workload(trace.meta, kernels)


def _cta_bounds(r: np.ndarray) -> dict[tuple[int, int], tuple[int, int]]:
    key = r["kernel"].astype(np.int64) << 32 | r["cta"].astype(np.int64)
    change = np.flatnonzero(key[1:] != key[:-1]) + 1
    starts = np.concatenate([[0], change])
    ends = np.concatenate([change, [len(r)]])
    return {
        (int(r["kernel"][a]), int(r["cta"][a])): (int(a), int(b))
        for a, b in zip(starts, ends, strict=True)
    }


def _as_template(records: np.ndarray) -> np.ndarray:
    out = np.empty(len(records), TEMPLATE_DTYPE)
    for name in TEMPLATE_DTYPE.names:
        out[name] = records[name]
    return out


# --- fast: one representative per class, accesses extrapolated ----------------------------


class _OneCta(TraceCtx):
    """Runs single CTAs of a plan and returns their ops as TEMPLATE_DTYPE records.

    The same records as `TraceCtx` (the fast path == trace replay property checks it), kept in
    flat columns rather than one tuple per op: a CTA of a long loop has tens of thousands of
    ops, and building a structured array from nested tuples cost more than running it. Runs
    are memoised per (kernel, CTA) within a class: its affine extrapolation asks for some twice.
    """

    def __init__(self, plan: Plan):
        super().__init__(plan)
        self.memo: dict[tuple, np.ndarray] = {}
        self.itemsize = {name: t.itemsize for name, t in plan.tensors.items()}

    def run(self, kernel_index: int, cta: tuple[int, ...]) -> np.ndarray:
        key = (kernel_index, cta)
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        self.cols = ([], [], [], [], [], [], [], [], [])
        kernel = self.plan.kernels[kernel_index]
        self.begin_kernel(kernel_index, kernel)
        self.begin_cta(cta, 1)
        kernel.program(self, cta)
        op, tensor, buffer, start, stop, nbytes, mm, vec, exp = self.cols
        out = np.zeros(len(op), TEMPLATE_DTYPE)
        if len(op):
            out["op"] = op
            out["tensor"] = tensor
            out["buffer"] = buffer
            out["start"] = np.array(start, dtype=np.int64).reshape(-1, MAX_AXES)
            out["stop"] = np.array(stop, dtype=np.int64).reshape(-1, MAX_AXES)
            out["bytes"] = nbytes
            out["matmul_flops"] = mm
            out["vector_flops"] = vec
            out["exp_ops"] = exp
        self.memo[key] = out
        return out

    def _transfer(self, op: int, buf: str, tensor: str, region) -> None:
        c = self.cols
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
        pad = [0] * (MAX_AXES - len(starts))
        c[0].append(op)
        c[1].append(self.tensor_ids[tensor])
        c[2].append(self.buffer_ids[buf])
        c[3].extend(starts + pad)
        c[4].extend(stops + pad)
        c[5].append(n * self.itemsize[tensor])
        c[6].append(0)
        c[7].append(0)
        c[8].append(0)

    def load(self, buf, tensor, region):
        self._transfer(OP_LOAD, buf, tensor, region)

    def store(self, buf, tensor, region, value=None):
        self._transfer(OP_STORE, buf, tensor, region)

    def atomic_add(self, buf, tensor, region, value=None):
        self._transfer(OP_ATOMIC, buf, tensor, region)

    def compute(self, fn, *args, matmul=0, vector=0, exp=0, out=None):
        c = self.cols
        c[0].append(OP_COMPUTE)
        c[1].append(-1)
        c[2].append(self.buffer_ids.get(out, -1) if out is not None else -1)
        c[3].extend(ZEROS)
        c[4].extend(ZEROS)
        c[5].append(0)
        c[6].append(matmul)
        c[7].append(vector)
        c[8].append(exp)


ZEROS = (0,) * MAX_AXES


def from_plan_fast(plan: Plan) -> Workload:
    meta = plan_meta(plan)
    strides = _tensor_strides(meta)
    runner = _OneCta(plan)
    kernels = []
    for k, kernel in enumerate(plan.kernels):
        templates, cta_template, coords = [], [], []
        template_of: dict[bytes, int] = {}  # signature -> template index
        acc = {"cta": [], "index": [], "op": [], "key": [], "bytes": []}
        first_cta = 0
        for cls in kernel.grid:
            runner.memo.clear()  # a class's runs are asked for again only within the class
            rep_records = runner.run(k, cls.representative)
            template = _as_template(rep_records)
            t_id = template_of.setdefault(_signature(template), len(templates))
            if t_id == len(templates):
                templates.append(template)
            grid = _class_coords(cls)  # (size, naxes) in launch order
            size = len(grid)
            cta_template.append(np.full(size, t_id, dtype=np.int64))
            padded = np.zeros((size, MAX_AXES), dtype=np.int64)
            padded[:, : grid.shape[1]] = grid
            coords.append(padded)
            tr = _transfers(rep_records)
            keys = _class_keys(runner, k, cls, grid, tr, strides)  # (size, n, 2)
            n = len(tr)
            acc["cta"].append(np.repeat(np.arange(first_cta, first_cta + size), n))
            acc["index"].append(np.tile(np.arange(n), size))
            acc["op"].append(np.tile(tr["op"].astype(np.int64), size))
            acc["key"].append(keys.reshape(-1, 2))
            acc["bytes"].append(np.tile(tr["bytes"].astype(np.int64), size))
            first_cta += size
        cat = {name: np.concatenate(v) if v else np.zeros(0, np.int64) for name, v in acc.items()}
        cta_template = np.concatenate(cta_template)
        cta_coord = np.concatenate(coords)
        if kernel.launch_order is not None:
            cta_template, cta_coord = _to_launch_order(
                kernel.launch_order, cta_template, cta_coord, cat
            )
        kernels.append(
            KernelWork(
                name=kernel.name,
                threads_per_cta=kernel.threads_per_cta,
                stages=kernel.stages,
                tensor_cores=kernel.tensor_cores,
                registers_per_thread=kernel.registers_per_thread,
                sram_bytes=kernel.sram_bytes,
                templates=templates,
                cta_template=cta_template,
                cta_coord=cta_coord,
                acc_cta=cat["cta"],
                acc_index=cat["index"],
                acc_op=cat["op"],
                acc_key=cat["key"].reshape(-1, 2),
                acc_bytes=cat["bytes"],
            )
        )
    return Workload(meta, kernels)


def _to_launch_order(
    order: tuple[int, ...], cta_template: np.ndarray, cta_coord: np.ndarray, acc: dict
) -> tuple[np.ndarray, np.ndarray]:
    """Renumber the CTAs (built class by class) in the order the GPU starts them, as
    `program.launch_sequence` does for a trace: sorted by grid axes, slowest first. `acc` is
    updated in place, its accesses regrouped by the new CTA numbers."""
    perm = np.lexsort(tuple(cta_coord[:, a] for a in reversed(order)))  # new -> old
    new_of = np.empty_like(perm)
    new_of[perm] = np.arange(len(perm))
    acc["cta"] = new_of[acc["cta"]]
    regroup = np.argsort(acc["cta"], kind="stable")  # keeps each CTA's program order
    for name in acc:
        acc[name] = acc[name][regroup]
    return cta_template[perm], cta_coord[perm]


def _signature(template: np.ndarray) -> bytes:
    """A CTA's ops without positions, as `Trace.cta_classes` groups CTAs.

    Declared classes that run identical ops share one template, so the engine groups their CTAs
    launched together into one cohort exactly as a replay of the trace does; a template per
    declared class would split cohorts the trace keeps whole, and the timings would differ.
    """
    shape = np.empty(
        len(template),
        dtype=[(name, TEMPLATE_DTYPE[name]) for name in SIGNATURE_FIELDS]
        + [("extent", "<i8", (MAX_AXES,))],
    )
    for name in SIGNATURE_FIELDS:
        shape[name] = template[name]
    shape["extent"] = template["stop"] - template["start"]
    return shape.tobytes()


SIGNATURE_FIELDS = ("op", "tensor", "buffer", "bytes", "matmul_flops", "vector_flops", "exp_ops")


def _class_coords(cls: CtaClass) -> np.ndarray:
    """All coordinates of a class in launch (itertools.product) order, as an int array."""
    axes = [np.asarray(r, dtype=np.int64) for r in cls.axes]
    mesh = np.meshgrid(*axes, indexing="ij")
    return np.stack([m.reshape(-1) for m in mesh], axis=1)


def _keys_of(records: np.ndarray, strides) -> np.ndarray:
    tr = _transfers(records)
    return tile_keys(tr["tensor"].astype(np.int64), tr["start"], tr["stop"], strides)


def _same_shape(a: np.ndarray, b: np.ndarray) -> bool:
    return (
        len(a) == len(b)
        and np.array_equal(a["op"], b["op"])
        and np.array_equal(a["bytes"], b["bytes"])
        and np.array_equal(a["tensor"], b["tensor"])
    )


def _class_keys(runner, k, cls: CtaClass, grid: np.ndarray, tr: np.ndarray, strides) -> np.ndarray:
    """Tile keys of every CTA's transfers, (size, n_transfers, 2).

    A CTA's offsets are a sum of one term per grid axis (batch, head, block). Each axis's term
    is affine when one step along it moves every tile by the same amount; an axis that is not
    (GQA: query head h reads K/V head h // group) is sampled at every value instead. The result
    is checked against the last and a middle CTA; if either differs, every CTA is run.
    """
    rep = cls.representative
    base = tile_keys(tr["tensor"].astype(np.int64), tr["start"], tr["stop"], strides)
    size = len(grid)
    if size == 1:
        return base[None]

    def keys_at(axis, value):
        cta = list(rep)
        cta[axis] = int(value)
        rec = _transfers(runner.run(k, tuple(cta)))
        return _keys_of(rec, strides) if _same_shape(rec, tr) else None

    keys = np.broadcast_to(base, (size,) + base.shape).copy()
    for axis, r in enumerate(cls.axes):
        if len(r) < 2:
            continue
        step = keys_at(axis, r[1])
        last = keys_at(axis, r[-1])
        if step is None or last is None:
            return _run_each(runner, k, grid, strides)
        delta = step - base
        offset = grid[:, axis] - rep[axis]
        if np.array_equal(last, base + (len(r) - 1) * delta):
            keys += offset[:, None, None] * delta[None]
            continue
        terms = {}
        for value in r:  # not affine along this axis: one run per value
            term = keys_at(axis, value)
            if term is None:
                return _run_each(runner, k, grid, strides)
            terms[value] = term - base
        table = np.stack([terms[v] for v in r])
        keys += table[grid[:, axis] - r[0]]
    for probe in {size - 1, size // 2}:
        rec = runner.run(k, tuple(int(x) for x in grid[probe]))
        if not _same_shape(_transfers(rec), tr) or not np.array_equal(
            _keys_of(rec, strides), keys[probe]
        ):
            return _run_each(runner, k, grid, strides)
    return keys


def _run_each(runner, k, grid: np.ndarray, strides) -> np.ndarray:
    """Fallback for classes whose offsets are not affine: run every CTA."""
    return np.stack([_keys_of(runner.run(k, tuple(int(x) for x in c)), strides) for c in grid])


def from_plan_exact(plan: Plan) -> Workload:
    from .trace import trace_plan

    return from_trace(trace_plan(plan))


__all__ = [
    "OP_LOAD",
    "KernelWork",
    "Workload",
    "from_plan_exact",
    "from_plan_fast",
    "from_trace",
]
