"""The result type every fidelity fills in: counts, (later) simulated time, verification.

One type, so the CLI's JSON, the app and the tests read every interpretation the same way,
and so fidelities can be compared field by field.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .program.plan import Plan


@dataclass(frozen=True)
class TensorTraffic:
    read_bytes: int = 0
    write_bytes: int = 0
    trips: int = 0

    def to_dict(self) -> dict:
        return {"read_bytes": self.read_bytes, "write_bytes": self.write_bytes, "trips": self.trips}


@dataclass(frozen=True)
class KernelCounts:
    """Totals of one kernel launch, with its roofline time (bytes/bandwidth vs math/rate)."""

    name: str
    description: str
    ctas: int
    threads_per_cta: int
    sram_bytes: int
    read_bytes: int
    write_bytes: int
    trips: int
    matmul_flops: int
    vector_flops: int
    exp_ops: int
    ops: int  # loads, stores and computes: the records a full trace of this kernel holds
    memory_time_s: float
    compute_time_s: float
    by_tensor: dict[str, TensorTraffic]
    # where its matmuls run and at what rate (Hardware.kernel_matmul_rate), said in words
    matmul_rate_flops_per_s: float = 0.0
    matmul_units: str = ""
    # ops of one CTA of each class, in the grid's order (counting knows them; the engine's work
    # bound uses them, limits.py); not part of the reported counts
    class_ops: tuple[int, ...] = ()

    @property
    def roofline_time_s(self) -> float:
        return max(self.memory_time_s, self.compute_time_s)

    @property
    def bound(self) -> str:
        return "memory" if self.memory_time_s >= self.compute_time_s else "compute"

    @property
    def flops(self) -> int:
        return self.matmul_flops + self.vector_flops

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "description": self.description,
            "ctas": self.ctas,
            "threads_per_cta": self.threads_per_cta,
            "sram_bytes": self.sram_bytes,
            "read_bytes": self.read_bytes,
            "write_bytes": self.write_bytes,
            "trips": self.trips,
            "flops": self.flops,
            "matmul_flops": self.matmul_flops,
            "vector_flops": self.vector_flops,
            "exp_ops": self.exp_ops,
            "ops": self.ops,
            "memory_time_s": self.memory_time_s,
            "compute_time_s": self.compute_time_s,
            "matmul_rate_flops_per_s": self.matmul_rate_flops_per_s,
            "matmul_units": self.matmul_units,
            "roofline_time_s": self.roofline_time_s,
            "bound": self.bound,
            "by_tensor": {k: v.to_dict() for k, v in self.by_tensor.items()},
        }


@dataclass(frozen=True)
class Result:
    """Everything hbmsim knows about one plan. HBM figures follow the paper convention: every
    load and store counts as off-chip traffic (no cache)."""

    plan: Plan
    kernels: tuple[KernelCounts, ...]
    extra: dict = field(default_factory=dict)  # verify, engine results: added by later stages

    def _sum(self, attr: str) -> int:
        return sum(getattr(k, attr) for k in self.kernels)

    @property
    def hbm_read_bytes(self) -> int:
        return self._sum("read_bytes")

    @property
    def hbm_write_bytes(self) -> int:
        return self._sum("write_bytes")

    @property
    def hbm_bytes(self) -> int:
        return self.hbm_read_bytes + self.hbm_write_bytes

    @property
    def trips(self) -> int:
        return self._sum("trips")

    @property
    def matmul_flops(self) -> int:
        return self._sum("matmul_flops")

    @property
    def vector_flops(self) -> int:
        return self._sum("vector_flops")

    @property
    def exp_ops(self) -> int:
        return self._sum("exp_ops")

    @property
    def flops(self) -> int:
        return self.matmul_flops + self.vector_flops

    @property
    def ops(self) -> int:
        return self._sum("ops")

    @property
    def sram_peak_bytes(self) -> int:
        return max(k.sram_bytes for k in self.kernels)

    @property
    def roofline_time_s(self) -> float:
        """Sum over kernels of max(bytes / HBM bandwidth, math / rate); no launch overhead."""
        return sum(k.roofline_time_s for k in self.kernels)

    @property
    def by_tensor(self) -> dict[str, TensorTraffic]:
        out: dict[str, list[int]] = {}
        for k in self.kernels:
            for name, t in k.by_tensor.items():
                acc = out.setdefault(name, [0, 0, 0])
                acc[0] += t.read_bytes
                acc[1] += t.write_bytes
                acc[2] += t.trips
        order = list(self.plan.tensors)
        return {n: TensorTraffic(*out[n]) for n in sorted(out, key=order.index)}

    @property
    def by_pass(self) -> dict[str, dict]:
        """Totals per pass ("fwd", "bwd") of the kernels that belong to it."""
        out: dict[str, dict] = {}
        for kernel, k in zip(self.plan.kernels, self.kernels, strict=True):
            t = out.setdefault(
                kernel.pass_,
                {
                    "hbm_read_bytes": 0,
                    "hbm_write_bytes": 0,
                    "trips": 0,
                    "flops": 0,
                    "roofline_time_s": 0.0,
                },
            )
            t["hbm_read_bytes"] += k.read_bytes
            t["hbm_write_bytes"] += k.write_bytes
            t["trips"] += k.trips
            t["flops"] += k.flops
            t["roofline_time_s"] += k.roofline_time_s
        return out

    def to_dict(self) -> dict:
        p = self.plan
        d = {
            "algo": p.algo,
            "problem": p.problem.to_dict(),
            "hardware": p.hardware.to_dict(),
            "tiles": p.tiles.to_dict(),
            "notes": list(p.notes),
            "hbm_read_bytes": self.hbm_read_bytes,
            "hbm_write_bytes": self.hbm_write_bytes,
            "hbm_bytes": self.hbm_bytes,
            "trips": self.trips,
            "flops": self.flops,
            "matmul_flops": self.matmul_flops,
            "vector_flops": self.vector_flops,
            "exp_ops": self.exp_ops,
            "attention_flops": p.problem.attention_flops,
            "sram_peak_bytes": self.sram_peak_bytes,
            "roofline_time_s": self.roofline_time_s,
            "by_tensor": {k: v.to_dict() for k, v in self.by_tensor.items()},
            "by_kernel": [
                dict(k.to_dict(), **{"pass": kernel.pass_})
                for kernel, k in zip(p.kernels, self.kernels, strict=True)
            ],
            "passes": self.by_pass,
        }
        d.update({k: v for k, v in self.extra.items() if not k.startswith("_")})
        return d
