"""GPU specifications: the few numbers that decide where attention's time goes.

The fields a model of a GPU needs and their checks; the presets (presets.py) fill them from
datasheets, each number citing its source, and a profile (profile.py) overrides them.

What the model ignores: clock variation under load, memory-controller effects, bank conflicts,
and register pressure wherever a kernel's register count is not known (a GPU validation run
records it for the project's own kernels).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..errors import ConfigError, check_int
from .pipes import PIPES

DTYPES = ("fp32", "tf32", "fp16", "bf16")
"""Math modes every GPU gives a rate for. Problems use fp32/fp16/bf16; tf32 is fp32 on tensor
cores."""
OPTIONAL_DTYPES = ("fp8",)
"""Math modes only some GPUs have: fp8 (e4m3) tensor cores, Hopper, Blackwell and Ada. A table
without the key means the GPU has none, and a problem in that dtype is refused
(Hardware.check_dtype)."""

FLOPS_PER_FMA = 2  # datasheet FLOP/s count one fused multiply-add as two operations
KIB = 1024
MIB = 1024 * KIB
TB = 1e12


# Allowed ranges: wide enough for any GPU past or foreseeable (an H200 moves 4.8e12 bytes/s
# and multiplies at ~1e15 FLOP/s, with latencies near 1e-6 s), narrow enough that every time
# the engine computes is a finite number it can resolve. Infinity and NaN are never a rate.
BYTES_PER_S_RANGE = (1e6, 1e16)  # 1 MB/s to 10 PB/s
OPS_PER_S_RANGE = (1e6, 1e18)
CLOCK_HZ_RANGE = (1e6, 1e11)  # 1 MHz to 100 GHz
# Every preset by name, filled by presets.py (which builds them from this module's Hardware):
# for messages that suggest another GPU, without this module depending on the presets
KNOWN_PRESETS: dict[str, Hardware] = {}
SECONDS_RANGE = (0.0, 1.0)  # latencies and launch overhead: a real one is ~1e-6 s


def issue_cycles_per_fma(kernel, warps_per_scheduler: float | None) -> float:
    """Scheduler cycles per FMA a scalar kernel's loops take with `warps_per_scheduler`
    warps on each scheduler, averaged over an SM's schedulers: its `cycles_per_fma_by_warps`
    (entry w - 1 for w warps, the last for more) where known; a fractional count mixes the
    two whole counts around it (the SM's schedulers hold one warp more or less), and below
    one warp only that fraction of the schedulers has a warp to issue from. Never below
    `instructions_per_fma` (every slot used); without a curve, `instructions_per_fma`."""
    ipf = kernel.instructions_per_fma
    curve = getattr(kernel, "cycles_per_fma_by_warps", ())
    if not curve or warps_per_scheduler is None:
        return ipf
    w = float(warps_per_scheduler)

    def at(n: int) -> float:
        return curve[min(n, len(curve)) - 1]

    if w < 1:  # idle schedulers: the SM's FMA rate falls with them
        return max(ipf, at(1) / max(w, 1e-9))
    lo = int(w)
    frac = w - lo
    if frac == 0:
        cycles = at(lo)
    else:  # schedulers with lo and lo + 1 warps: their FMA rates add
        rate = (1 - frac) / at(lo) + frac / at(lo + 1)
        cycles = 1 / rate
    return max(ipf, cycles)


def _check_range(field: str, value, bounds: tuple[float, float], unit: str) -> None:
    """Refuse anything but a real number within `bounds`, naming the range (NaN fails every
    comparison, so it is caught by the same test as an out-of-range value)."""
    lo, hi = bounds
    if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value <= hi:
        raise ConfigError(field, f"must be a number from {lo:g} to {hi:g} {unit} (got {value!r})")


@dataclass(frozen=True)
class Hardware:
    """One GPU. Rates are for the whole chip; `per_sm` helpers divide by `sm_count`."""

    name: str
    sm_count: int
    sram_bytes_per_sm: int  # shared memory one SM can give to resident CTAs
    sram_bytes_per_block: int  # the most one CTA (thread block) may request
    l2_bytes: int
    hbm_bytes_per_s: float  # peak DRAM bandwidth (read + write share it)
    l2_bytes_per_s: float  # peak L2 bandwidth seen by the SMs
    hbm_latency_s: float  # one DRAM round trip, unloaded
    l2_latency_s: float  # one L2 hit round trip, unloaded
    sm_bytes_per_s: float  # the most one SM can move to or from its SRAM (its memory port)
    matrix_flops_per_s: dict[str, float]  # tensor-core (or FMA for fp32) matmul rate per dtype
    vector_flops_per_s: dict[str, float]  # elementwise rate per dtype (CUDA cores)
    exp_ops_per_s: float  # special-function unit rate (exp2 and friends)
    clock_hz: float
    launch_overhead_s: float  # fixed cost of one kernel launch
    max_ctas_per_sm: int
    max_threads_per_sm: int
    registers_per_sm: int = 65536  # [CUDA-CC] 32-bit registers, 64 K on every preset's SM
    # [A100-WP], [H100-WP], Ada whitepaper: four SM partitions, each with a warp scheduler
    # dispatching one warp instruction (32 threads) per clock: 128 thread-instructions per clock
    issue_per_clock_per_sm: int = 128
    # [CUDA-CC] shared memory: 32 banks, each 4 bytes per clock, on every preset's SM
    smem_bytes_per_clock_per_sm: int = 128
    # tensor-core FLOP/s of warp-level MMA (mma.sync / WMMA) per dtype, where it is below
    # `matrix_flops_per_s` (Hopper: the datasheet peak needs warpgroup MMA); None: the same
    warp_mma_flops_per_s: dict[str, float] | None = None
    # [approx] CPU time a framework (PyTorch eager) spends on one op: Python, autograd,
    # dispatcher, allocator and the launch call, ~5-25 us per op in public breakdowns of the
    # PyTorch dispatch path; the host issues ahead of the GPU, so it only shows when a call's
    # kernels are shorter than its ops (small problems). A property of the host and framework,
    # not the GPU: a calibrated profile replaces it.
    host_op_s: float = 10e-6
    # the pipes that run while asynchronous warpgroup MMA (wgmma, Hopper) runs on the tensor
    # cores: "vector" (the FP32 pipe), "exp" (the SFU); see pipes.py. Only warp-specialised
    # kernels (plan.Kernel.overlap_warpgroups) use it; () elsewhere: the pipes' times add
    async_mma_overlaps: tuple[str, ...] = ()
    source: str = ""  # where these numbers come from (datasheet, or a calibration run)
    notes: dict[str, str] = field(default_factory=dict)

    def __post_init__(self):
        check_int("sm_count", self.sm_count, 1, 100_000)
        check_int("sram_bytes_per_sm", self.sram_bytes_per_sm, 1, 1 << 40)
        check_int("sram_bytes_per_block", self.sram_bytes_per_block, 1, self.sram_bytes_per_sm)
        check_int("l2_bytes", self.l2_bytes, 0, 1 << 40)
        for name in ("hbm_bytes_per_s", "l2_bytes_per_s", "sm_bytes_per_s"):
            _check_range(name, getattr(self, name), BYTES_PER_S_RANGE, "bytes/s")
        _check_range("exp_ops_per_s", self.exp_ops_per_s, OPS_PER_S_RANGE, "ops/s")
        _check_range("clock_hz", self.clock_hz, CLOCK_HZ_RANGE, "Hz")
        for name in ("hbm_latency_s", "l2_latency_s", "launch_overhead_s", "host_op_s"):
            _check_range(name, getattr(self, name), SECONDS_RANGE, "seconds")
        for table in ("matrix_flops_per_s", "vector_flops_per_s", "warp_mma_flops_per_s"):
            rates = getattr(self, table)
            if rates is None and table == "warp_mma_flops_per_s":
                continue
            if not isinstance(rates, dict):
                raise ConfigError(table, f"must map each dtype {DTYPES} to a rate (got {rates!r})")
            missing = [d for d in DTYPES if d not in rates]
            if missing:
                raise ConfigError(
                    table, f"needs a rate for every dtype {DTYPES}; missing {missing}"
                )
            extra = sorted(set(rates) - set(DTYPES) - set(OPTIONAL_DTYPES))
            if extra:
                raise ConfigError(
                    f"{table}[{extra[0]}]",
                    f"is not a dtype; allowed: {', '.join(DTYPES + OPTIONAL_DTYPES)}",
                )
            for dtype, rate in rates.items():
                _check_range(f"{table}[{dtype}]", rate, OPS_PER_S_RANGE, "FLOP/s")
        check_int("max_ctas_per_sm", self.max_ctas_per_sm, 1, 1024)
        check_int("max_threads_per_sm", self.max_threads_per_sm, 1, 1 << 20)
        check_int("registers_per_sm", self.registers_per_sm, 1, 1 << 24)
        check_int("issue_per_clock_per_sm", self.issue_per_clock_per_sm, 1, 4096)
        check_int("smem_bytes_per_clock_per_sm", self.smem_bytes_per_clock_per_sm, 1, 1 << 16)
        pipes = self.async_mma_overlaps
        if not isinstance(pipes, tuple | list) or any(
            not isinstance(x, str) or x not in PIPES for x in pipes
        ):
            raise ConfigError(
                "async_mma_overlaps",
                f"must be a list of pipes from {', '.join(PIPES)} (got {pipes!r})",
            )
        object.__setattr__(self, "async_mma_overlaps", tuple(pipes))

    def check_dtype(self, dtype: str) -> None:
        """Refuse a problem dtype this GPU has no tensor-core rate for (fp8 before Hopper/Ada)."""
        if dtype in OPTIONAL_DTYPES and dtype not in self.matrix_flops_per_s:
            having = [name for name, hw in KNOWN_PRESETS.items() if dtype in hw.matrix_flops_per_s]
            raise ConfigError(
                "dtype",
                f"{dtype} needs FP8 tensor cores (Hopper, Blackwell or Ada); {self.name} has none "
                f"(its matrix_flops_per_s has no {dtype} rate). Presets with them: "
                f"{', '.join(having)}; or use fp16, bf16 or fp32",
            )

    def matrix_rate(
        self,
        dtype: str,
        tensor_cores: bool = True,
        instructions_per_fma: float = 1.0,
        warp_mma: bool = False,
    ) -> float:
        """Whole-chip matmul FLOP/s for a problem dtype (fp32 matmul runs on FMA units), or
        for a scalar kernel (`tensor_cores=False`) the fp32 FMA units' rate (an FMA is two
        FLOPs, as in the datasheet), or less where the kernel's loop issues more than its FMAs
        (`instructions_per_fma`, see plan.Kernel) and the SM's issue rate binds first.
        `warp_mma`: the kernel's tensor-core matmuls are warp-level MMA instructions."""
        if tensor_cores:
            self.check_dtype(dtype)
            if warp_mma and self.warp_mma_flops_per_s is not None:
                return self.warp_mma_flops_per_s.get(dtype, self.matrix_flops_per_s[dtype])
            return self.matrix_flops_per_s[dtype]
        return min(self.vector_flops_per_s["fp32"], self.issued_fma_rate(instructions_per_fma))

    def issued_fma_rate(self, instructions_per_fma: float) -> float:
        """FLOP/s a scalar loop gets from the schedulers alone when it issues
        `instructions_per_fma` instructions per FMA (an FMA is two FLOPs)."""
        return FLOPS_PER_FMA * self.issue_rate() / instructions_per_fma

    def kernel_matmul_rate(
        self, dtype: str, kernel, warps_per_scheduler: float | None = None
    ) -> float:
        """The matmul FLOP/s a kernel gets (a plan.Kernel or a workload's KernelWork): its
        units' rate (`matrix_rate`), slowed by the shared-memory traffic its loops move per
        flop, which the SM's shared-memory port carries at `smem_rate` on top of the math.
        `warps_per_scheduler`: the warps each scheduler holds while the kernel runs; a
        scalar kernel whose loops were replayed on a scheduler (`cycles_per_fma_by_warps`)
        then issues at the pace those warps keep (`issue_cycles_per_fma`)."""
        rate = self.matrix_rate(
            dtype,
            kernel.tensor_cores,
            issue_cycles_per_fma(kernel, warps_per_scheduler),
            kernel.warp_mma,
        )
        if not kernel.smem_bytes_per_flop:
            return rate
        return 1.0 / (1.0 / rate + kernel.smem_bytes_per_flop / self.smem_rate())

    def matmul_units(self, dtype: str, kernel, warps_per_scheduler: float | None = None) -> str:
        """`kernel_matmul_rate` in words: which units, and what slows them."""
        if kernel.tensor_cores:
            warp = kernel.warp_mma and self.warp_mma_flops_per_s is not None
            words = "tensor cores, warp-level MMA" if warp else "tensor cores"
        else:
            words = f"FMA units, {kernel.instructions_per_fma:.2f} instructions per FMA"
            cycles = issue_cycles_per_fma(kernel, warps_per_scheduler)
            if cycles > kernel.instructions_per_fma:
                words += (
                    f", {warps_per_scheduler:.1f} warps per scheduler issuing in "
                    f"{kernel.instructions_per_fma / cycles:.0%} of its cycles"
                )
            if self.issued_fma_rate(cycles) < self.vector_flops_per_s["fp32"]:
                words += " (issue-bound)"
        if kernel.smem_bytes_per_flop:
            words += f", {kernel.smem_bytes_per_flop:.3f} shared-memory bytes per flop"
        n = kernel.overlap_warpgroups
        if n >= 2:
            beside = " and ".join(
                {"vector": "FP32 work", "exp": "exponentials"}[x] for x in self.async_mma_overlaps
            )
            words += f", warpgroup MMA by {n} warpgroups" + (
                f" with their {beside} beside it" if beside else ", nothing beside it"
            )
        return words

    def schedulers_per_sm(self) -> int:
        """Warp schedulers per SM: each issues one warp instruction (32 threads) per clock."""
        return max(1, self.issue_per_clock_per_sm // 32)

    def smem_rate(self) -> float:
        """Whole-chip shared-memory bytes per second: every SM's banks busy every clock."""
        return self.smem_bytes_per_clock_per_sm * self.sm_count * self.clock_hz

    def issue_rate(self) -> float:
        """Whole-chip thread-instructions per second: every scheduler issuing every clock."""
        return self.issue_per_clock_per_sm * self.sm_count * self.clock_hz

    def vector_rate(self, dtype: str) -> float:
        """Whole-chip elementwise operations per second. Tile programs count elementwise work
        in operations (a max, an add, a multiply-add: one each), and each takes one fp32 lane
        for one clock [CUDA-CC, arithmetic instruction throughput]; the datasheet's fp32 FLOP/s
        counts a fused multiply-add as two FLOPs, so the operation rate is half of it.
        Softmax math is done in fp32 whatever the inputs."""
        return self.vector_flops_per_s["fp32"] / FLOPS_PER_FMA

    def per_sm(self, rate: float) -> float:
        """A whole-chip rate divided evenly over the SMs."""
        return rate / self.sm_count

    def with_overrides(self, **changes) -> Hardware:
        """A copy with some fields replaced, validated like a preset (e.g. a custom SRAM size).

        Changing `sram_bytes_per_sm` alone moves the per-block limit with it, keeping the
        preset's reserve (1 KiB on NVIDIA parts), so "SRAM = 64 KiB" means what it says.
        """
        unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            allowed = ", ".join(f.name for f in dataclasses.fields(self))
            raise ConfigError(unknown[0], f"is not a hardware field; allowed: {allowed}")
        if "sram_bytes_per_sm" in changes and "sram_bytes_per_block" not in changes:
            reserved = self.sram_bytes_per_sm - self.sram_bytes_per_block
            sm = changes["sram_bytes_per_sm"]
            if isinstance(sm, int) and not isinstance(sm, bool):
                if sm <= reserved:  # named as the field given, not the block limit it moves
                    raise ConfigError(
                        "sram_bytes_per_sm",
                        f"must be more than the {reserved:,} bytes {self.name} reserves per "
                        f"SM (a thread block gets the rest) (got {sm:,})",
                    )
                changes["sram_bytes_per_block"] = sm - reserved
        if changes and "name" not in changes:
            changes["name"] = self.name + "+custom"
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """The fields as JSON gives them back (a list for the tuple of pipes)."""
        d = dataclasses.asdict(self)
        d["async_mma_overlaps"] = list(self.async_mma_overlaps)
        return d
