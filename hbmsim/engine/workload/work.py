"""What the engine replays: per kernel, op templates, each CTA's template, and every access.

Two builders give the same `KernelWork`:

- `from_trace`: every CTA's own ops from a full trace (a plan traced now, or a trace file).
  CTAs whose records are identical up to offsets share a template found from the records.
  This is the reference: nothing is assumed about the schedule.
- `from_plan_fast` (classkeys.py): one representative per declared CTA class, run once;
  every CTA's tile keys are a per-class formula, computed only for the CTAs asked for.

A kernel's accesses are asked for by CTA (`KernelWork.accesses`): ops and bytes come from the
templates, keys from the builder. The `acc_*` arrays of every access exist for the reference
paths (the full replay, tests); the fast path never builds them.

An *access* is one load or store of one CTA, identified for the L2 model by its tile: the
tensor and the first and last element of its region (tile-granular keys).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ...interpret.trace import MAX_AXES, OP_COMPUTE, OP_LOAD, Trace, trace_plan
from ...program.plan import Plan
from .arrays import ranges

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
    ],
    align=True,  # fields on their own alignment: numpy copies unaligned ones byte by byte
)
# The fast path's templates when no timeline is asked for: regions only label timeline rows
# (tile keys come from classkeys' formulas), and they are 64 of a record's 104 bytes (fa2
# causal at 64k tokens: 1,024 templates of 4.6 M ops, 482 MB with them, 185 MB without, at
# 104 and 40 bytes an op).
LEAN_TEMPLATE_DTYPE = np.dtype(
    [
        (name, TEMPLATE_DTYPE.fields[name][0])
        for name in TEMPLATE_DTYPE.names
        if name not in ("start", "stop")
    ],
    align=True,
)


class ArrayCoords:
    """Grid coordinates of every CTA, held in full (a trace)."""

    def __init__(self, coords: np.ndarray):
        self.coords = coords

    def take(self, ctas: np.ndarray) -> np.ndarray:
        return self.coords[ctas]


class ArrayKeys:
    """Tile keys of every access, held in full (a trace, or a plan's keys materialised)."""

    def __init__(self, acc_key: np.ndarray, counts: np.ndarray):
        self.acc_key = acc_key  # (n, 2), CTAs in launch order
        self.starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)

    def take(self, ctas: np.ndarray) -> np.ndarray:
        return self.acc_key[ranges(self.starts[ctas], self.starts[ctas + 1] - self.starts[ctas])]


@dataclass
class KernelWork:
    """A kernel's CTAs and their accesses. The accesses of any set of CTAs come from
    `accesses(ctas)`: ops and bytes from the templates, tile keys from `keys` (held in full,
    or computed per CTA class on demand, so that a long kernel never needs all of them)."""

    name: str
    threads_per_cta: int
    stages: int
    sram_bytes: int
    tensor_cores: bool
    instructions_per_fma: float
    warp_mma: bool
    smem_bytes_per_flop: float
    # TEMPLATE_DTYPE records: one CTA's ops in program order (a list, or classkeys.Templates)
    templates: Sequence[np.ndarray]
    cta_template: np.ndarray  # (n_ctas,) template index of each CTA, in launch order
    coords: object  # .take(ctas) -> (len(ctas), MAX_AXES) grid coordinates
    keys: object  # .take(ctas) -> (accesses, 2) int64 tile keys of those CTAs, in CTA order
    # each access's own region, kept when built from a trace (the timeline shows it):
    acc_start: np.ndarray | None = None
    acc_stop: np.ndarray | None = None
    registers_per_thread: int | None = None  # limits occupancy when known (Kernel's)
    # a translation period of the CTA sequence when one is known (see classkeys.Period)
    period: object | None = None
    # local translation periods (P, run length) that hold inside runs of the launch order
    # (periods.segments)
    segments: tuple = ()
    # warp-specialised consumers whose pipes overlap (plan.Kernel.overlap_warpgroups)
    overlap_warpgroups: int = 0
    # thread-block clusters: loads of these tensor ids are shared by `cluster` CTAs
    cluster: int = 1
    multicast_ids: tuple[int, ...] = ()
    # atomic adds no compute waits for (plan.Kernel.posted_atomics)
    posted_atomics: bool = False
    # scheduler cycles per FMA with 1, 2, ... warps per scheduler (plan.Kernel's)
    cycles_per_fma_by_warps: tuple[float, ...] = ()

    @property
    def n_ctas(self) -> int:
        return len(self.cta_template)

    @cached_property
    def cta_coord(self) -> np.ndarray:
        """(n_ctas, MAX_AXES) grid coordinates, in launch order."""
        return self.coords.take(np.arange(self.n_ctas))

    @cached_property
    def transfer_rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Transfers of all templates end to end: (first row per template, count, op, bytes)."""
        ops, sizes = [], []  # the two columns, without copying whole records
        for t in range(len(self.templates)):
            op, nbytes, _tensor = template_columns(self.templates, t)
            kept = op != OP_COMPUTE
            ops.append(op[kept])
            sizes.append(nbytes[kept])
        counts = np.array([len(o) for o in ops], dtype=np.int64)
        first = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        op = np.concatenate(ops or [np.zeros(0)]).astype(np.int64)
        nbytes = np.concatenate(sizes or [np.zeros(0)]).astype(np.int64)
        return first, counts, op, nbytes

    def template_transfers(self, t_id: int) -> int:
        """Transfers of template t_id."""
        return int(self.transfer_rows[1][t_id])

    def transfers(self, ctas: np.ndarray) -> np.ndarray:
        """Transfers of each of the CTAs."""
        return self.transfer_rows[1][self.cta_template[ctas]]

    def accesses(self, ctas: np.ndarray) -> tuple[np.ndarray, ...]:
        """(cta, index, op, key, bytes) of every access of `ctas`, CTA by CTA in that order:
        CTA launch index, position among its transfers, OP_LOAD / OP_STORE / OP_ATOMIC, (n, 2)
        tile key (tensor + first element, last element), bytes."""
        ctas = np.asarray(ctas, dtype=np.int64)
        first, counts, op, nbytes = self.transfer_rows
        t = self.cta_template[ctas]
        n = counts[t]
        rows = ranges(first[t], n)
        cta = np.repeat(ctas, n)
        index = rows - np.repeat(first[t], n)
        return cta, index, op[rows], self.keys.take(ctas), nbytes[rows]

    @cached_property
    def _all(self) -> tuple[np.ndarray, ...]:
        return self.accesses(np.arange(self.n_ctas))

    # every load and store of every CTA, CTAs in launch order (the reference paths use them)
    @property
    def acc_cta(self) -> np.ndarray:
        return self._all[0]

    @property
    def acc_index(self) -> np.ndarray:
        return self._all[1]

    @property
    def acc_op(self) -> np.ndarray:
        return self._all[2]

    @property
    def acc_key(self) -> np.ndarray:
        return self._all[3]

    @property
    def acc_bytes(self) -> np.ndarray:
        return self._all[4]


def template_columns(templates, t: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(op, bytes, tensor) of each op of template t: from the builder's parts where the
    templates keep them (classkeys.Templates), else from its records."""
    columns = getattr(templates, "columns", None)
    if columns is not None:
        return columns(t)
    rows = templates[t]
    return rows["op"], rows["bytes"], rows["tensor"]


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


def tensor_strides(meta: dict) -> np.ndarray:
    return np.stack([_strides(t["shape"]) for t in meta["tensors"]])


# --- reference: from a full trace ----------------------------------------------------------


def tensor_ids(names, multicast) -> tuple[int, ...]:
    """The ids (places in `names`, the plan's tensors in order) of the tensors a kernel
    multicasts (KernelWork.multicast_ids), from a plan or from a trace's header alike."""
    return tuple(i for i, name in enumerate(names) if name in multicast)


def kernel_work(kmeta: dict, tensor_names: list[str], **work) -> KernelWork:
    """A KernelWork from a kernel's header (a trace file's, or `trace.plan_meta`'s of a plan:
    the same dict) and its CTAs' work (templates, cta_template, coords, keys and any other
    KernelWork field). The one place a header becomes a kernel's launch, so the trace replay
    and the fast path read it alike; fields a header written before they existed lacks take
    the value that meant then."""
    return KernelWork(
        name=kmeta["name"],
        threads_per_cta=kmeta["threads_per_cta"],
        stages=kmeta["stages"],
        tensor_cores=kmeta.get("tensor_cores", True),
        instructions_per_fma=kmeta.get("instructions_per_fma", 1.0),
        cycles_per_fma_by_warps=tuple(kmeta.get("cycles_per_fma_by_warps", ())),
        warp_mma=kmeta.get("warp_mma", False),
        smem_bytes_per_flop=kmeta.get("smem_bytes_per_flop", 0.0),
        registers_per_thread=kmeta.get("registers_per_thread"),
        overlap_warpgroups=kmeta.get("overlap_warpgroups", 0),
        cluster=kmeta.get("cluster", 1),
        posted_atomics=kmeta.get("posted_atomics", False),
        multicast_ids=tensor_ids(tensor_names, kmeta.get("multicast", ())),
        sram_bytes=kmeta["sram_bytes"],
        **work,
    )


def from_trace(trace: Trace) -> Workload:
    """Every CTA's ops exactly as traced."""
    r = trace.records
    strides = tensor_strides(trace.meta)
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
        per_cta = np.bincount(tr["cta"].astype(np.int64), minlength=n)
        kernels.append(
            kernel_work(
                kmeta,
                [t["name"] for t in trace.meta["tensors"]],
                templates=per_kernel_templates.get(k, []),
                cta_template=cta_template,
                coords=ArrayCoords(coords),
                keys=ArrayKeys(
                    tile_keys(tr["tensor"].astype(np.int64), tr["start"], tr["stop"], strides),
                    per_cta,
                ),
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


def from_plan_exact(plan: Plan) -> Workload:
    """Every CTA's own ops from a full trace of the plan (the reference)."""
    return from_trace(trace_plan(plan))


__all__ = [
    "OP_LOAD",
    "KernelWork",
    "Workload",
    "from_plan_exact",
    "from_trace",
]
