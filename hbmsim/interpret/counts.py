"""Exact totals for any size, without enumerating every op.

The counting interpretation runs one representative CTA per CTA class and one representative
iteration per loop segment, each weighted by how many it stands for. Its cost is
O(CTA classes x loop segments), independent of the sequence length for non-causal problems
and linear in the number of Q (or K/V) blocks for causal ones. The totals are exact integers:
tests check they equal the sum over a full trace (`trace.py`), op by op.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..algorithms.registry import make_plan
from ..errors import TooLargeToExecuteError
from ..gpu.hardware import Hardware
from ..gpu.occupancy import occupancy, warps_per_scheduler
from ..problem.attention import Problem
from ..program.plan import Ctx, Kernel, Plan, region_elements, run_plan
from ..result import KernelCounts, Result, TensorTraffic


@dataclass
class KernelTally:
    """Running totals of one kernel, filled by counting (CountCtx): a class at a time."""

    tensors: dict[str, list[int]] = field(default_factory=dict)  # name -> [read, write, trips]
    matmul_flops: int = 0
    vector_flops: int = 0
    exp_ops: int = 0
    # per class, in the grid's order: [ops weighted by the CTAs they stand for, CTAs]
    classes: list[list[int]] = field(default_factory=list)

    @property
    def ops(self) -> int:
        """Records a full trace of this kernel holds."""
        return sum(ops for ops, _ctas in self.classes)

    def transfer(self, kind: str, tensor: str, nbytes: int, weight: int) -> None:
        self.count(weight)
        acc = self.tensors.setdefault(tensor, [0, 0, 0])
        if kind != "store":  # loads, and the read half of an atomic add
            acc[0] += nbytes * weight
        if kind != "load":  # stores, and the write half of an atomic add
            acc[1] += nbytes * weight
        acc[2] += weight

    def count(self, weight: int) -> None:
        """One op of the class being counted, standing for `weight` (its CTAs times its
        loop's iterations)."""
        self.classes[-1][0] += weight

    def finish(self, kernel: Kernel, hw: Hardware, dtype: str) -> KernelCounts:
        read = sum(v[0] for v in self.tensors.values())
        write = sum(v[1] for v in self.tensors.values())
        warps = None
        if kernel.cycles_per_fma_by_warps:  # the warps the engine runs it with
            occ = occupancy(
                hw,
                kernel.sram_bytes,
                kernel.threads_per_cta,
                kernel.name,
                kernel.registers_per_thread,
            )
            warps = warps_per_scheduler(hw, kernel.n_ctas, kernel.threads_per_cta, occ)
        matmul_rate = hw.kernel_matmul_rate(dtype, kernel, warps)
        compute_s = (
            self.matmul_flops / matmul_rate
            + self.vector_flops / hw.vector_rate(dtype)
            + self.exp_ops / hw.exp_ops_per_s
        )
        return KernelCounts(
            name=kernel.name,
            description=kernel.description,
            ctas=kernel.n_ctas,
            threads_per_cta=kernel.threads_per_cta,
            sram_bytes=kernel.sram_bytes,
            read_bytes=read,
            write_bytes=write,
            trips=sum(v[2] for v in self.tensors.values()),
            matmul_flops=self.matmul_flops,
            vector_flops=self.vector_flops,
            exp_ops=self.exp_ops,
            ops=self.ops,
            memory_time_s=(read + write) / hw.hbm_bytes_per_s,
            compute_time_s=compute_s,
            by_tensor={k: TensorTraffic(*v) for k, v in self.tensors.items()},
            matmul_rate_flops_per_s=matmul_rate,
            matmul_units=hw.matmul_units(dtype, kernel, warps),
            class_ops=tuple(ops // max(1, ctas) for ops, ctas in self.classes),
        )


class CountCtx(Ctx):
    """Counting interpretation: no values, loops compressed, every op weighted."""

    compress_loops = True

    def __init__(self, plan: Plan):
        super().__init__(plan)
        self.tallies: list[KernelTally] = []

    def begin_kernel(self, index, kernel):
        super().begin_kernel(index, kernel)
        self.tallies.append(KernelTally())

    def begin_cta(self, cta, weight):
        super().begin_cta(cta, weight)
        self.tallies[-1].classes.append([0, weight])  # one CTA per class, standing for them all

    def _on_transfer(self, kind, buf, tensor, region, value):
        nbytes = region_elements(region) * self.plan.tensors[tensor].itemsize
        self.tallies[-1].transfer(kind, tensor, nbytes, self.weight)
        return None

    def _on_compute(self, fn, args, matmul, vector, exp, out):
        t = self.tallies[-1]
        w = self.weight
        t.matmul_flops += matmul * w
        t.vector_flops += vector * w
        t.exp_ops += exp * w
        t.count(w)
        return None


# Counting runs one CTA per class (tens of microseconds each: docs/benchmarks.md, "The engine's
# bounds"), so this bound keeps any count under about ten seconds. Causal problems have one class
# per Q (or K/V) block: seq 16M with 16-row tiles is a million classes.
MAX_COUNT_CLASSES = 1 << 18


def check_countable(plan: Plan) -> int:
    """The plan's CTA classes (counting's work), or TooLargeToExecuteError past the bound."""
    classes = sum(len(k.grid) for k in plan.kernels)
    if classes > MAX_COUNT_CLASSES:
        factor = -(-classes // MAX_COUNT_CLASSES)
        raise TooLargeToExecuteError(
            f"counts: this plan has {classes:,} classes of CTAs to count (one per tile row "
            f"when causal); counting handles at most {MAX_COUNT_CLASSES:,} (about ten seconds): "
            f"use tiles {factor}x larger (bq, bk) or a {factor}x shorter sequence"
        )
    return classes


def count_plan(plan: Plan) -> Result:
    """Exact totals of a plan (refused past MAX_COUNT_CLASSES, before any work)."""
    check_countable(plan)
    ctx = CountCtx(plan)
    run_plan(ctx, every_cta=False)
    hw, dtype = plan.hardware, plan.problem.dtype
    return Result(
        plan, tuple(t.finish(k, hw, dtype) for t, k in zip(ctx.tallies, plan.kernels, strict=True))
    )


def count(
    problem: Problem,
    hw: Hardware,
    algo: str,
    bq: int | None = None,
    bk: int | None = None,
    bd: int | None = None,
) -> Result:
    """Exact totals of `algo` on `problem` (tiles default per algorithm)."""
    return count_plan(make_plan(algo, problem, hw, bq, bk, bd))
