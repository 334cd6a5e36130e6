"""What the engine answers: per-kernel timings, the whole run, and its timeline's layout.

Apart from the engine so that the modules that read results (the API, the timeline CSV, the
animation) need not import the simulation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

LEVEL_COMPUTE, LEVEL_L2, LEVEL_DRAM = 0, 1, 2
LEVELS = ("compute", "l2", "dram")
# who in the CTA a timeline row is: the CTA as a whole, or in a warp-specialised kernel its
# producer (the loads and stores) and each consumer warpgroup's GEMMs and softmax
ROLE_CTA, ROLE_PRODUCER = 0, 1


def role_code(warpgroup: int, phase: str) -> int:
    """The row role of consumer warpgroup `warpgroup` in `phase` ("mma" or "softmax")."""
    return 2 + 2 * warpgroup + (phase == "softmax")


def role_parts(code: int) -> tuple[int, str]:
    """(warpgroup, phase) of a consumer warpgroup's role code: role_code's inverse."""
    w, softmax = divmod(code - 2, 2)
    return w, "softmax" if softmax else "mma"


def role_name(code: int) -> str:
    if code == ROLE_CTA:
        return "cta"
    if code == ROLE_PRODUCER:
        return "producer"
    w, phase = role_parts(code)
    return f"wg{w} {phase}"


TIMELINE_DTYPE = np.dtype(
    [
        ("start_s", "<f8"),
        ("end_s", "<f8"),
        ("kernel", "<u2"),
        ("cta", "<u4"),
        ("ctas", "<u4"),
        ("sm", "<i4"),
        ("op", "u1"),
        ("tensor", "<i2"),
        ("start", "<i8", (4,)),
        ("stop", "<i8", (4,)),
        ("bytes", "<i8"),
        ("level", "u1"),
        ("l2_hits", "<u4"),
        ("buffer", "<i2"),
        ("role", "u1"),  # ROLE_CTA, ROLE_PRODUCER or role_code(warpgroup, phase)
    ]
)


@dataclass(frozen=True)
class KernelTiming:
    name: str
    start_s: float  # launch (the overhead is inside [start_s, end_s])
    end_s: float
    ctas: int
    ctas_per_sm: int
    waves: int
    dram_read_bytes: int
    dram_write_bytes: int
    l2_hit_bytes: int
    stretched: bool = False  # timed by stretch.py, not step by step

    @property
    def time_s(self) -> float:
        return self.end_s - self.start_s

    def to_dict(self) -> dict:
        dram = self.dram_read_bytes + self.dram_write_bytes
        return {
            "name": self.name,
            "start_s": self.start_s,
            "end_s": self.end_s,
            "time_s": self.time_s,
            "ctas": self.ctas,
            "ctas_per_sm": self.ctas_per_sm,
            "waves": self.waves,
            "dram_read_bytes": self.dram_read_bytes,
            "dram_write_bytes": self.dram_write_bytes,
            "l2_hit_bytes": self.l2_hit_bytes,
            "achieved_dram_bytes_per_s": dram / self.time_s if self.time_s else 0.0,
            "stretched": self.stretched,
        }


@dataclass(frozen=True)
class EngineResult:
    time_s: float
    kernels: tuple[KernelTiming, ...]
    l2: bool
    exact: bool
    timeline: np.ndarray | None = None  # TIMELINE_DTYPE, or None when not asked for
    timeline_truncated: bool = False
    meta: dict = field(default_factory=dict)
    gpu_time_s: float | None = None  # the kernels alone, launch to last CTA (None: = time_s)
    host_time_s: float = 0.0  # what the host spends issuing the call (launches, framework ops)
    # one call timed by itself, the GPU idle until the host launches (host.py); None: =
    # time_s (a result built without it)
    synchronized_call_s: float | None = None
    timing: str = "loop"  # which of `times_s` the result reports as its time (timing.py)

    def _sum(self, attr):
        return sum(getattr(k, attr) for k in self.kernels)

    @property
    def dram_read_bytes(self) -> int:
        return self._sum("dram_read_bytes")

    @property
    def dram_write_bytes(self) -> int:
        return self._sum("dram_write_bytes")

    @property
    def l2_hit_bytes(self) -> int:
        return self._sum("l2_hit_bytes")

    @property
    def gpu_s(self) -> float:
        """The kernels alone (time_s where the result does not say)."""
        return self.time_s if self.gpu_time_s is None else self.gpu_time_s

    @property
    def host_bound(self) -> bool:
        """Whether the host, issuing the call, takes longer than the kernels it launches."""
        return self.gpu_time_s is not None and self.host_time_s > self.gpu_time_s

    @property
    def alone_s(self) -> float:
        """One call timed by itself (time_s where the result does not say)."""
        return self.time_s if self.synchronized_call_s is None else self.synchronized_call_s

    @property
    def times_s(self) -> dict[str, float]:
        """The call's time each way it can be measured (timing.TIMINGS)."""
        return {"kernel": self.gpu_s, "loop": self.time_s, "alone": self.alone_s}

    @property
    def reported_s(self) -> float:
        """The time of the result's `timing`: `time_s` itself is a call in a timed loop."""
        return self.times_s[self.timing]

    @property
    def engine_mode(self) -> str:
        return "exact" if self.exact else "fast"

    @property
    def achieved_dram_bytes_per_s(self) -> float:
        return (self.dram_read_bytes + self.dram_write_bytes) / self.time_s if self.time_s else 0

    def to_dict(self) -> dict:
        return {
            "time_s": self.reported_s,
            "timing": self.timing,
            "dram_read_bytes": self.dram_read_bytes,
            "dram_write_bytes": self.dram_write_bytes,
            "l2_hit_bytes": self.l2_hit_bytes,
            "achieved_dram_bytes_per_s": self.achieved_dram_bytes_per_s,
            "engine": {
                "mode": "exact" if self.exact else "fast",
                "gpu_time_s": self.gpu_s,
                "host_time_s": self.host_time_s,
                "host_bound": self.host_bound,
                "synchronized_call_s": self.alone_s,
                "times_s": self.times_s,
                "bound": "host" if self.host_bound else "gpu",
                "l2": self.l2,
                "kernels": [k.to_dict() for k in self.kernels],
            },
        }
