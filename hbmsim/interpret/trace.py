"""Traces: every op of every CTA as a record, CTA classes found in them, and the trace file.

A trace is the tracing interpretation's output: no values, one record per load, store and
compute, in program order per CTA and CTAs in launch order. It is what the animation draws, what
`hbmsim replay` feeds the engine, and the reference the exact counts are checked against.

The file (docs/trace-format.md) is written and read back by tracefile.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import TooLargeToExecuteError
from ..program.plan import Ctx, Plan, run_plan
from .counts import count_plan

MAX_AXES = 4
MAX_TRACE_RECORDS = 1_000_000  # ~10 s and ~0.6 GB to trace; count with `hbmsim simulate` beyond

OPS = ("load", "store", "compute", "atomic")
OP_LOAD, OP_STORE, OP_COMPUTE, OP_ATOMIC = range(4)

RECORD_DTYPE = np.dtype(
    [
        ("kernel", "<u2"),  # index into meta["kernels"]
        ("cta", "<u4"),  # launch-order index of the CTA within its kernel
        ("cta_coord", "<i4", (MAX_AXES,)),  # grid coordinates, e.g. (batch, head, q block, 0)
        ("op", "u1"),  # OP_LOAD, OP_STORE, OP_COMPUTE or OP_ATOMIC (add into a tensor)
        ("tensor", "<i2"),  # index into meta["tensors"]; -1 for compute
        ("buffer", "<i2"),  # index into meta["buffers"] (SRAM buffer); -1 if none
        ("start", "<i8", (MAX_AXES,)),  # region [start, stop) per tensor axis, zero-padded
        ("stop", "<i8", (MAX_AXES,)),
        ("bytes", "<i8"),
        ("matmul_flops", "<i8"),
        ("vector_flops", "<i8"),
        ("exp_ops", "<i8"),
    ]
)


@dataclass(frozen=True)
class Trace:
    """Records plus the metadata that names their indices (kernels, tensors, buffers)."""

    meta: dict
    records: np.ndarray

    @property
    def kernels(self) -> list[dict]:
        return self.meta["kernels"]

    @property
    def tensors(self) -> list[dict]:
        return self.meta["tensors"]

    def totals(self) -> dict:
        """Sums over the records, computed with NumPy alone (independent of counts.py)."""
        r = self.records
        transfers = r[r["op"] != OP_COMPUTE]
        by_kernel = []
        for k, kmeta in enumerate(self.kernels):
            rk = r[r["kernel"] == k]
            tk = rk[rk["op"] != OP_COMPUTE]
            by_kernel.append(
                {
                    "name": kmeta["name"],
                    "read_bytes": _read_bytes(tk),
                    "write_bytes": _write_bytes(tk),
                    "trips": int(len(tk)),
                    "matmul_flops": int(rk["matmul_flops"].sum()),
                    "vector_flops": int(rk["vector_flops"].sum()),
                    "exp_ops": int(rk["exp_ops"].sum()),
                    "ops": int(len(rk)),
                    "ctas": int(len(np.unique(rk["cta"]))),
                }
            )
        by_tensor = {}
        for t, tmeta in enumerate(self.tensors):
            rt = transfers[transfers["tensor"] == t]
            if len(rt):
                by_tensor[tmeta["name"]] = {
                    "read_bytes": _read_bytes(rt),
                    "write_bytes": _write_bytes(rt),
                    "trips": int(len(rt)),
                }
        return {
            "hbm_read_bytes": _read_bytes(transfers),
            "hbm_write_bytes": _write_bytes(transfers),
            "trips": int(len(transfers)),
            "matmul_flops": int(r["matmul_flops"].sum()),
            "vector_flops": int(r["vector_flops"].sum()),
            "exp_ops": int(r["exp_ops"].sum()),
            "by_tensor": by_tensor,
            "by_kernel": by_kernel,
        }

    def cta_classes(self) -> list[list[tuple[int, int]]]:
        """CTAs grouped by op sequence identical up to offsets: [[(kernel, cta), ...], ...].

        The signature of a CTA is its records without positions: op, tensor, buffer, region
        extents, bytes and flops, in order. Found from the trace alone, so tests can check the
        classes each schedule declares against what its programs really do.
        """
        r = self.records
        if len(r) == 0:
            return []
        key = np.stack([r["kernel"].astype(np.int64), r["cta"].astype(np.int64)], axis=1)
        bounds = np.flatnonzero(np.any(key[1:] != key[:-1], axis=1)) + 1
        starts = np.concatenate([[0], bounds])
        ends = np.concatenate([bounds, [len(r)]])
        shape = np.empty(
            len(r),
            dtype=[
                ("kernel", "<u2"),
                ("op", "u1"),
                ("tensor", "<i2"),
                ("buffer", "<i2"),
                ("extent", "<i8", (MAX_AXES,)),
                ("bytes", "<i8"),
                ("matmul_flops", "<i8"),
                ("vector_flops", "<i8"),
                ("exp_ops", "<i8"),
            ],
        )
        for name in (
            "kernel",
            "op",
            "tensor",
            "buffer",
            "bytes",
            "matmul_flops",
            "vector_flops",
            "exp_ops",
        ):
            shape[name] = r[name]
        shape["extent"] = r["stop"] - r["start"]
        groups: dict[bytes, list[tuple[int, int]]] = {}
        for a, b in zip(starts, ends, strict=True):
            groups.setdefault(shape[a:b].tobytes(), []).append(
                (int(r["kernel"][a]), int(r["cta"][a]))
            )
        return list(groups.values())


def _read_bytes(r: np.ndarray) -> int:
    """Loads, and the read half of atomic adds."""
    return int(r["bytes"][(r["op"] == OP_LOAD) | (r["op"] == OP_ATOMIC)].sum())


def _write_bytes(r: np.ndarray) -> int:
    """Stores, and the write half of atomic adds."""
    return int(r["bytes"][(r["op"] == OP_STORE) | (r["op"] == OP_ATOMIC)].sum())


class TraceCtx(Ctx):
    """Tracing interpretation: every CTA, every iteration, one record per op, no values."""

    def __init__(self, plan: Plan):
        super().__init__(plan)
        self.tensor_ids = {name: i for i, name in enumerate(plan.tensors)}
        self.buffer_ids: dict[str, int] = {}
        for k in plan.kernels:
            for b in k.buffers:
                self.buffer_ids.setdefault(b.name, len(self.buffer_ids))
        self.rows: list[tuple] = []
        self.kernel_index = 0
        self.cta_index = -1
        self.coord: tuple[int, ...] = ()

    def begin_kernel(self, index, kernel):
        super().begin_kernel(index, kernel)
        self.kernel_index = index
        self.cta_index = -1

    def begin_cta(self, cta, weight):
        super().begin_cta(cta, weight)
        self.cta_index += 1
        self.coord = tuple(cta) + (0,) * (MAX_AXES - len(cta))

    def _on_transfer(self, kind, buf, tensor, region, value):
        spec = self.plan.tensors[tensor]
        start = [a for a, _ in region] + [0] * (MAX_AXES - len(region))
        stop = [b for _, b in region] + [0] * (MAX_AXES - len(region))
        n = 1
        for a, b in region:
            n *= b - a
        op = {"load": OP_LOAD, "store": OP_STORE, "atomic": OP_ATOMIC}[kind]
        self.rows.append(
            (
                self.kernel_index,
                self.cta_index,
                self.coord,
                op,
                self.tensor_ids[tensor],
                self.buffer_ids[buf],
                start,
                stop,
                n * spec.itemsize,
                0,
                0,
                0,
            )
        )
        return None

    def _on_compute(self, fn, args, matmul, vector, exp, out):
        buf = self.buffer_ids.get(out, -1) if out is not None else -1
        self.rows.append(
            (
                self.kernel_index,
                self.cta_index,
                self.coord,
                OP_COMPUTE,
                -1,
                buf,
                [0] * MAX_AXES,
                [0] * MAX_AXES,
                0,
                matmul,
                vector,
                exp,
            )
        )
        return None


def plan_meta(plan: Plan) -> dict:
    """Everything a trace file needs to be read without the code that made it."""
    buffer_names: list[str] = []
    for k in plan.kernels:
        for b in k.buffers:
            if b.name not in buffer_names:
                buffer_names.append(b.name)
    return {
        "algo": plan.algo,
        "problem": plan.problem.to_dict(),
        "hardware": plan.hardware.to_dict(),
        "tiles": plan.tiles.to_dict(),
        "tensors": [
            {"name": t.name, "shape": list(t.shape), "itemsize": t.itemsize, "role": t.role}
            for t in plan.tensors.values()
        ],
        "buffers": buffer_names,
        "framework_ops": plan.framework_ops,
        "host_issued": plan.host_issued,
        "kernels": [
            {
                "name": k.name,
                "description": k.description,
                "ctas": k.n_ctas,
                "threads_per_cta": k.threads_per_cta,
                "stages": k.stages,
                "tensor_cores": k.tensor_cores,
                "instructions_per_fma": k.instructions_per_fma,
                "cycles_per_fma_by_warps": list(k.cycles_per_fma_by_warps),
                "warp_mma": k.warp_mma,
                "smem_bytes_per_flop": k.smem_bytes_per_flop,
                "registers_per_thread": k.registers_per_thread,
                "overlap_warpgroups": k.overlap_warpgroups,
                "cluster": k.cluster,
                "multicast": list(k.multicast),
                "posted_atomics": k.posted_atomics,
                "host_ops_before": k.host_ops_before,
                "sram_bytes": k.sram_bytes,
                "buffers": [
                    {"name": b.name, "shape": list(b.shape), "itemsize": b.itemsize}
                    for b in k.buffers
                ],
            }
            for k in plan.kernels
        ],
    }


def trace_plan(plan: Plan) -> Trace:
    """Every op of every CTA. Refuses plans whose trace would not fit in memory."""
    ops = count_plan(plan).ops
    if ops > MAX_TRACE_RECORDS:
        raise TooLargeToExecuteError(
            f"trace: this plan has {ops:,} ops; a trace holds at most {MAX_TRACE_RECORDS:,}. "
            "Use a smaller problem (counts and simulation work at any size)"
        )
    ctx = TraceCtx(plan)
    run_plan(ctx, every_cta=True)
    records = np.array(ctx.rows, dtype=RECORD_DTYPE) if ctx.rows else np.zeros(0, RECORD_DTYPE)
    return Trace(plan_meta(plan), records)
