"""GPU specifications: the few numbers that decide where attention's time goes.

Every preset number cites its source. Datasheet peak rates are *dense* (no sparsity). Numbers
no datasheet gives (latencies, L2 bandwidth, launch overhead) are marked "approx." and are what
a calibrated profile (JSON, written by `hbmsim validate` on a real GPU) replaces.

What the model ignores: clock variation under load, memory-controller effects, bank conflicts,
and register pressure wherever a kernel's register count is not known (a GPU validation run
records it for the project's own kernels).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError, check_int
from .pipes import PIPES

DTYPES = ("fp32", "tf32", "fp16", "bf16")
"""Math modes every GPU gives a rate for. Problems use fp32/fp16/bf16; tf32 is fp32 on tensor
cores."""
OPTIONAL_DTYPES = ("fp8",)
"""Math modes only some GPUs have: fp8 (e4m3) tensor cores, Hopper and Ada. A table without the
key means the GPU has none, and a problem in that dtype is refused (Hardware.check_dtype)."""

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
SECONDS_RANGE = (0.0, 1.0)  # latencies and launch overhead: a real one is ~1e-6 s


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
    # kernels (program.Kernel.overlap_warpgroups) use it; () elsewhere: the pipes' times add
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
            having = [name for name, hw in PRESETS.items() if dtype in hw.matrix_flops_per_s]
            raise ConfigError(
                "dtype",
                f"{dtype} needs FP8 tensor cores (Hopper or Ada); {self.name} has none (its "
                f"matrix_flops_per_s has no {dtype} rate). Presets with them: "
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
        (`instructions_per_fma`, see program.Kernel) and the SM's issue rate binds first.
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

    def kernel_matmul_rate(self, dtype: str, kernel) -> float:
        """The matmul FLOP/s a kernel gets (a program.Kernel or a workload's KernelWork): its
        units' rate (`matrix_rate`), slowed by the shared-memory traffic its loops move per
        flop, which the SM's shared-memory port carries at `smem_rate` on top of the math."""
        rate = self.matrix_rate(
            dtype, kernel.tensor_cores, kernel.instructions_per_fma, kernel.warp_mma
        )
        if not kernel.smem_bytes_per_flop:
            return rate
        return 1.0 / (1.0 / rate + kernel.smem_bytes_per_flop / self.smem_rate())

    def matmul_units(self, dtype: str, kernel) -> str:
        """`kernel_matmul_rate` in words: which units, and what slows them."""
        if kernel.tensor_cores:
            warp = kernel.warp_mma and self.warp_mma_flops_per_s is not None
            words = "tensor cores, warp-level MMA" if warp else "tensor cores"
        else:
            words = f"FMA units, {kernel.instructions_per_fma:.2f} instructions per FMA"
            if self.issued_fma_rate(kernel.instructions_per_fma) < self.vector_flops_per_s["fp32"]:
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
            if isinstance(sm, int) and not isinstance(sm, bool) and sm > reserved:
                changes["sram_bytes_per_block"] = sm - reserved
        if changes and "name" not in changes:
            changes["name"] = self.name + "+custom"
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """The fields as JSON gives them back (a list for the tuple of pipes)."""
        d = dataclasses.asdict(self)
        d["async_mma_overlaps"] = list(self.async_mma_overlaps)
        return d


# --- Presets -------------------------------------------------------------------------------
# Sources:
#  [A100-WP]  NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020), tables 1 and 3.
#  [A100-DS]  NVIDIA A100 datasheet (2021): 40 GB HBM2 1,555 GB/s; 80 GB HBM2e 2,039 GB/s.
#  [H100-DS]  NVIDIA H100 Tensor Core GPU datasheet (2023), SXM column.
#  [H200-DS]  NVIDIA H200 Tensor Core GPU datasheet (2024).
#  [ADA-WP]   NVIDIA Ada GPU Architecture whitepaper v2.1, appendix table (RTX 4090).
#  [L4-DS]    NVIDIA L4 Tensor Core GPU datasheet (2023).
#  [L40S-DS]  NVIDIA L40S GPU datasheet (2023).
#  [GA102-WP] NVIDIA Ampere GA102 GPU Architecture whitepaper v2.1, appendix tables (GeForce
#             RTX 3090, RTX A6000).
#  [A10-DS]   NVIDIA A10 Tensor Core GPU datasheet (2021).
#  [CUDA-CC]  CUDA C++ Programming Guide, "Compute Capabilities" table: shared memory per SM /
#             per block, CTAs and threads per SM, and 16 SFU results per clock per SM.
#  [H100-WP]  NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022): four SM partitions,
#             each a warp scheduler dispatching 32 threads per clock.
#  [H200-CAL] this repository's calibration run on one H200, 2026-11-30 (kernels/device_run.sh;
#             kernels/results/raw/h200-2026-11-30-measurements.json): microbenchmarks only.
#  [approx]   not published; order of magnitude from public pointer-chase microbenchmarks.
#             Replace with a calibrated profile.

_AMPERE_SMEM = dict(sram_bytes_per_sm=164 * KIB, sram_bytes_per_block=163 * KIB)  # [CUDA-CC] 8.0
_HOPPER_SMEM = dict(sram_bytes_per_sm=228 * KIB, sram_bytes_per_block=227 * KIB)  # [CUDA-CC] 9.0
_ADA_SMEM = dict(sram_bytes_per_sm=100 * KIB, sram_bytes_per_block=99 * KIB)  # [CUDA-CC] 8.6, 8.9
_SFU_PER_SM_PER_CLOCK = 16  # [CUDA-CC] throughput of exp2/rsqrt etc.


def _a100(name: str, hbm_bytes_per_s: float, source: str) -> Hardware:
    clock = 1.41e9  # [A100-WP] boost clock 1410 MHz
    return Hardware(
        name=name,
        sm_count=108,  # [A100-WP]
        **_AMPERE_SMEM,
        l2_bytes=40 * MIB,  # [A100-WP]
        hbm_bytes_per_s=hbm_bytes_per_s,
        l2_bytes_per_s=5120 * clock,  # [A100-WP] L2 read bandwidth 5120 bytes/clock
        hbm_latency_s=600e-9,  # [approx]
        l2_latency_s=200e-9,  # [approx]
        sm_bytes_per_s=64 * clock,  # [approx] 64 bytes per clock per SM (one L1 line/2 clk)
        matrix_flops_per_s={
            "fp32": 19.5 * TB,
            "tf32": 156 * TB,
            "fp16": 312 * TB,
            "bf16": 312 * TB,
        },
        vector_flops_per_s={"fp32": 19.5 * TB, "tf32": 19.5 * TB, "fp16": 78 * TB, "bf16": 39 * TB},
        exp_ops_per_s=108 * _SFU_PER_SM_PER_CLOCK * clock,
        clock_hz=clock,
        launch_overhead_s=3e-6,  # [approx] typical launch-to-start latency
        max_ctas_per_sm=32,  # [CUDA-CC] 8.0
        max_threads_per_sm=2048,  # [CUDA-CC] 8.0
        source=source,
    )


# [H200-CAL] warp-level MMA (WMMA m16n16k16, mma.sync) measured by kernels/calibrate.cu
# wmma_loop on an H200 (the H100 SXM's SM and clock): 618.4 TFLOP/s fp16, 62.5% of the
# datasheet peak that only wgmma reaches. A property of the GH100 SM: another GH100 part
# (H100 PCIe) gets the same share of its own peak.
HOPPER_WARP_MMA_FP16 = 618.4 * TB
HOPPER_SXM_FP16 = 989.4 * TB  # [H100-DS] SXM, dense


def _hopper(
    name: str,
    hbm_bytes_per_s: float,
    l2_bytes: int,
    source: str,
    sm_count: int = 132,  # [H100-DS] SXM5
    clock: float = 1.98e9,  # [H100-DS] max boost 1980 MHz (66.9 TFLOPS fp32 = 132 x 256 x 1.98 GHz)
    fp32: float = 66.9 * TB,  # [H100-DS] FP32 (no tensor cores)
    fp16_vector: float = 133.8 * TB,  # [H100-WP] table 3: FP16 without tensor cores
    tensor: tuple[float, float, float] = (494.7 * TB, HOPPER_SXM_FP16, 1978.9 * TB),
) -> Hardware:
    """A GH100 part. `tensor`: dense tf32, fp16/bf16 and fp8 tensor-core peaks."""
    tf32, fp16, fp8 = tensor
    warp_fp16 = HOPPER_WARP_MMA_FP16 * (fp16 / HOPPER_SXM_FP16)
    return Hardware(
        name=name,
        sm_count=sm_count,
        **_HOPPER_SMEM,
        l2_bytes=l2_bytes,
        hbm_bytes_per_s=hbm_bytes_per_s,
        l2_bytes_per_s=5.5 * TB,  # [approx]
        hbm_latency_s=550e-9,  # [approx]
        l2_latency_s=180e-9,  # [approx]
        sm_bytes_per_s=64 * clock,  # [approx] 64 bytes per clock per SM
        matrix_flops_per_s={
            "fp32": fp32,
            "tf32": tf32,  # [H100-DS] SXM 494.7 (989 with sparsity), PCIe 378
            "fp16": fp16,  # [H100-DS] SXM 989.4 (1,979 with sparsity), PCIe 756
            "bf16": fp16,
            "fp8": fp8,  # [H100-DS] FP8 (e4m3/e5m2): SXM 1,979 (3,958 with sparsity), PCIe 1,513
        },
        vector_flops_per_s={"fp32": fp32, "tf32": fp32, "fp16": fp16_vector, "bf16": fp16_vector},
        # [H200-CAL] warp-level MMA (HOPPER_WARP_MMA_FP16 above). bf16 runs on the same
        # units; tf32 was not measured (peak)
        warp_mma_flops_per_s={"fp32": fp32, "tf32": tf32, "fp16": warp_fp16, "bf16": warp_fp16},
        exp_ops_per_s=sm_count * _SFU_PER_SM_PER_CLOCK * clock,
        clock_hz=clock,
        launch_overhead_s=3e-6,  # [approx]
        max_ctas_per_sm=32,  # [CUDA-CC] 9.0
        max_threads_per_sm=2048,  # [CUDA-CC] 9.0
        # [PTX-ISA] wgmma.mma_async is asynchronous: while the tensor cores run it, the
        # warpgroups issue FP32 instructions. Whether the SFU also runs then is in no datasheet
        # and no calibration here has measured it yet: [unmeasured] taken as not (pipes.py);
        # kernels/pipes_probe.cu measures it, and a calibrated profile takes what it saw
        async_mma_overlaps=("vector",),
        source=source,
    )


# [CUDA-CC] resident CTAs and threads per SM by compute capability (8.6: GA10x, 8.9: Ada)
_GA10X_ADA_LIMITS = {86: (16, 1536), 89: (24, 1536)}


def _ada(
    name, sm_count, clock, l2_bytes, hbm_bytes_per_s, fp32, fp16, tf32, fp8, source, cc=89
) -> Hardware:
    """A GA10x (cc 8.6) or Ada (8.9) part: 100 KB of shared memory per SM; `fp8` None where
    the tensor cores have no FP8 (GA10x)."""
    max_ctas, max_threads = _GA10X_ADA_LIMITS[cc]
    matrix = {"fp32": fp32, "tf32": tf32, "fp16": fp16, "bf16": fp16}
    if fp8 is not None:
        matrix["fp8"] = fp8
    return Hardware(
        name=name,
        sm_count=sm_count,
        **_ADA_SMEM,
        l2_bytes=l2_bytes,
        hbm_bytes_per_s=hbm_bytes_per_s,
        l2_bytes_per_s=3.0 * TB if sm_count > 100 else 1.5 * TB,  # [approx]
        hbm_latency_s=500e-9,  # [approx]
        l2_latency_s=150e-9,  # [approx]
        sm_bytes_per_s=64 * clock,  # [approx] 64 bytes per clock per SM
        matrix_flops_per_s=matrix,
        vector_flops_per_s={"fp32": fp32, "tf32": fp32, "fp16": fp32, "bf16": fp32},
        exp_ops_per_s=sm_count * _SFU_PER_SM_PER_CLOCK * clock,
        clock_hz=clock,
        launch_overhead_s=3e-6,  # [approx]
        max_ctas_per_sm=max_ctas,
        max_threads_per_sm=max_threads,
        source=source,
    )


PRESETS: dict[str, Hardware] = {
    "a100-40gb": _a100("a100-40gb", 1555e9, "[A100-WP], [A100-DS] SXM4 40 GB"),
    "a100-80gb": _a100("a100-80gb", 2039e9, "[A100-WP], [A100-DS] SXM4 80 GB"),
    # [A100-DS] PCIe: the same GA100 compute and clocks, 1,555 GB/s (40 GB) and 1,935 GB/s
    # (80 GB); at 250-300 W against the SXM4's 400 W it may clock lower under load, which no
    # preset models (see "What it ignores" in engine.py)
    "a100-pcie-40gb": _a100("a100-pcie-40gb", 1555e9, "[A100-WP], [A100-DS] PCIe 40 GB"),
    "a100-pcie-80gb": _a100("a100-pcie-80gb", 1935e9, "[A100-WP], [A100-DS] PCIe 80 GB"),
    "h100-sxm": _hopper("h100-sxm", 3.35 * TB, 50 * MIB, "[H100-DS] SXM5 80 GB, L2 50 MB"),
    # [H200-DS] 4.8 TB/s HBM3e, same GH100 compute as H100 SXM; L2 as reported by the device
    # properties of a real H200 (60 MiB).
    "h200": _hopper("h200", 4.8 * TB, 60 * MIB, "[H200-DS]; L2 from device properties"),
    # [H100-DS] PCIe column: 114 SMs, max boost 1755 MHz (51.2 TFLOPS fp32 = 114 x 256 x
    # 1.755 GHz), 2.0 TB/s HBM2e, L2 50 MB; tensor cores dense TF32 378, FP16/BF16 756, FP8
    # 1,513 TFLOPS; [H100-WP] table 3: FP16 without tensor cores 102.4 TFLOPS.
    "h100-pcie": _hopper(
        "h100-pcie",
        2.0 * TB,
        50 * MIB,
        "[H100-DS] PCIe 80 GB, L2 50 MB",
        sm_count=114,
        clock=1.755e9,
        fp32=51.2 * TB,
        fp16_vector=102.4 * TB,
        tensor=(378 * TB, 756 * TB, 1513 * TB),
    ),
    # [ADA-WP] RTX 4090: 128 SMs, 2520 MHz boost, 72 MB L2, 1,008 GB/s GDDR6X; FP32 82.6 TFLOPS,
    # FP16/BF16 tensor with FP32 accumulate 165.2 TFLOPS dense, TF32 82.6 TFLOPS dense, FP8
    # tensor with FP32 accumulate 330.3 TFLOPS dense.
    "rtx4090": _ada(
        "rtx4090",
        128,
        2.52e9,
        72 * MIB,
        1008e9,
        82.6 * TB,
        165.2 * TB,
        82.6 * TB,
        330.3 * TB,
        "[ADA-WP] GeForce RTX 4090",
    ),
    # [L4-DS] 58 SMs, 2040 MHz boost, 48 MB L2, 300 GB/s GDDR6; FP32 30.3 TFLOPS, FP16/BF16
    # tensor 121 TFLOPS dense (242 sparse), TF32 60 TFLOPS dense (120 sparse), FP8 242.5
    # TFLOPS dense (485 sparse).
    "l4": _ada(
        "l4", 58, 2.04e9, 48 * MIB, 300e9, 30.3 * TB, 121 * TB, 60 * TB, 242.5 * TB, "[L4-DS] L4"
    ),
    # [L40S-DS] 142 SMs, 2520 MHz boost, 96 MB L2, 864 GB/s GDDR6; FP32 91.6 TFLOPS, FP16/BF16
    # tensor 362.05 TFLOPS dense (733 sparse), TF32 183 dense (366 sparse), FP8 733 dense.
    "l40s": _ada(
        "l40s",
        142,
        2.52e9,
        96 * MIB,
        864e9,
        91.6 * TB,
        362.05 * TB,
        183 * TB,
        733 * TB,
        "[L40S-DS] L40S",
    ),
    # [A10-DS] 72 SMs (GA102), 1695 MHz boost, 6 MB L2, 600 GB/s GDDR6; FP32 31.2 TFLOPS,
    # FP16/BF16 tensor 125 TFLOPS dense (250 sparse), TF32 62.5 dense; no FP8.
    "a10": _ada(
        "a10",
        72,
        1.695e9,
        6 * MIB,
        600e9,
        31.2 * TB,
        125 * TB,
        62.5 * TB,
        None,
        "[A10-DS] A10",
        cc=86,
    ),
    # [GA102-WP] GeForce RTX 3090: 82 SMs, 1695 MHz boost, 6 MB L2, 936 GB/s GDDR6X; FP32 35.6
    # TFLOPS; FP16 tensor with FP32 accumulate 71 TFLOPS dense (GeForce: half the FP16-
    # accumulate rate; PyTorch's and FlashAttention's GEMMs accumulate in FP32), TF32 35.6.
    "rtx3090": _ada(
        "rtx3090",
        82,
        1.695e9,
        6 * MIB,
        936e9,
        35.6 * TB,
        71 * TB,
        35.6 * TB,
        None,
        "[GA102-WP] GeForce RTX 3090",
        cc=86,
    ),
    # [GA102-WP] RTX A6000: 84 SMs, 1800 MHz boost, 6 MB L2, 768 GB/s GDDR6; FP32 38.7
    # TFLOPS; FP16/BF16 tensor 154.8 TFLOPS dense (309.7 sparse), TF32 77.4 dense.
    "rtx-a6000": _ada(
        "rtx-a6000",
        84,
        1.8e9,
        6 * MIB,
        768e9,
        38.7 * TB,
        154.8 * TB,
        77.4 * TB,
        None,
        "[GA102-WP] RTX A6000",
        cc=86,
    ),
}


def get_hardware(name: str) -> Hardware:
    """A preset by name, e.g. "h100-sxm"; unknown names list the presets."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(
            "gpu",
            f"unknown GPU {name!r}; choose one of {', '.join(PRESETS)} or load a profile JSON",
        ) from None


MAX_PROFILE_BYTES = 1024 * 1024  # a profile is a few hundred bytes; calibrated ones a few KiB


def load_profile(path: str | Path) -> Hardware:
    """A hardware profile from JSON: {"base": PRESET (optional), FIELD: value, ...}.

    Calibration runs write these; a profile may also be written by hand to describe a GPU that
    has no preset (then it must give every field). Read as a hostile input (hbmsim/infile.py):
    size, encoding and syntax first, then every field's type here and its range in Hardware.
    """
    from ..files.reader import FileChecker, read_json_file

    data = read_json_file(path, "profile", MAX_PROFILE_BYTES)
    chk = FileChecker("profile", path)
    data = dict(chk.obj(data, "profile"))
    base_name = data.pop("base", None)
    if base_name is not None:
        base = get_hardware(chk.str(base_name, "base", choices=tuple(PRESETS)))
        data.setdefault("name", f"{base_name}+{Path(path).stem}")
        check_hardware_fields(chk, data, None, complete=False)
        with chk.fields_of(None):
            return base.with_overrides(**data)
    return check_hardware_fields(chk, data, None)


_FIELD_KINDS = {  # what JSON may give for each annotation of Hardware's fields
    "str": (str,),
    "int": (int,),
    "float": (int, float),
    "dict[str, float]": (dict, int, float),
    "dict[str, float] | None": (dict, int, float),  # null: not given (see the field)
    "dict[str, str]": (dict, str),
    "tuple[str, ...]": (list, str),
}


def _finite(value) -> bool:
    return not isinstance(value, float) or math.isfinite(value)


def check_hardware_fields(chk, data: dict, prefix: str | None, complete: bool = True):
    """Every field of a hardware description read from a file (`chk`: an infile.FileChecker):
    known names, JSON types, then Hardware's own range checks. With `complete`, the Hardware;
    otherwise (fields overriding a preset) None once the types are right."""
    fields = {f.name: f for f in dataclasses.fields(Hardware)}

    def name(key):
        return f"{prefix}.{key}" if prefix else key

    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise chk.error(name(unknown[0]), f"is not a hardware field; allowed: {', '.join(fields)}")
    if complete:
        missing = [
            n
            for n, f in fields.items()
            if n not in data
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        ]
        if missing:
            raise chk.error(
                prefix,
                f"lacks fields {', '.join(missing)}; give every field, or name a preset as 'base'",
            )
    for key, value in data.items():
        container, *scalar = _FIELD_KINDS[fields[key].type]
        if value is None and fields[key].type.endswith("| None"):
            continue
        if container is dict:
            table = chk.obj(value, name(key))
            for sub, v in table.items():
                if isinstance(v, bool) or not isinstance(v, tuple(scalar)) or not _finite(v):
                    want = "a finite number" if int in scalar else "a string"
                    raise chk.error(f"{name(key)}.{sub}", f"must be {want} (got {v!r:.40})")
        elif (
            isinstance(value, bool)
            or not isinstance(value, (container, *scalar))
            or not _finite(value)
        ):
            want = {"str": "a string", "int": "an integer"}.get(fields[key].type, "a finite number")
            raise chk.error(name(key), f"must be {want} (got {value!r:.40})")
    if not complete:
        return None
    with chk.fields_of(prefix):
        return Hardware(**data)


def resolve_hardware(gpu: str) -> Hardware:
    """A preset name, or a path to a profile JSON."""
    if gpu.endswith(".json"):
        return load_profile(gpu)
    return get_hardware(gpu)
