"""GPU presets from datasheets, each number citing its source (the table of sources below).

Datasheet peak rates are *dense* (no sparsity). Numbers no datasheet gives (latencies, L2
bandwidth, launch overhead) are marked "approx." and are what a calibrated profile (JSON,
written by `hbmsim validate` on a real GPU) replaces.
"""

from __future__ import annotations

from ..errors import ConfigError
from .hardware import KIB, KNOWN_PRESETS, MIB, TB, Hardware

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
#  [B200-DS]  NVIDIA HGX B200 datasheet (2024), per GPU at 1,000 W: FP4 tensor 9 PFLOPS dense
#             (18 sparse), FP8/FP6 4.5 dense (9 sparse), FP16/BF16 2.25 dense (4.5 sparse),
#             TF32 1.1 dense (2.2 sparse); HBM3e 8 TB/s (64 TB/s over the board's 8 GPUs). The
#             DGX B200 datasheet gives the same per-GPU peaks (72 PFLOPS FP8 sparse over 8
#             GPUs); the HGX column is the one transcribed.
#  [GB200-DS] NVIDIA GB200 NVL72 datasheet (2024), per GB200 superchip (one Grace, two
#             Blackwell GPUs at up to 1,200 W each): FP4 40 PFLOPS sparse, FP8/FP6 20 sparse,
#             FP16/BF16 10 sparse, TF32 5 sparse; HBM3e 16 TB/s. Per GPU: half of each.
#  [FA4]      Zadouri, Hoehnerbach, Shah, Liu, Thakkar, Dao, "FlashAttention-4" (arXiv
#             2603.05451, 2026) and its blog post (together.ai/blog/flashattention-4): H100 to
#             B200, BF16 tensor throughput 1 to 2.25 PFLOPS while the SFU count and shared-
#             memory bandwidth stay the same: 16 exponentials (MUFU.EX2) and 128 shared-memory
#             bytes per clock per SM; tcgen05.mma is issued by one thread and runs
#             asynchronously (accumulators in tensor memory) while the softmax warps use the
#             FP32 pipe and the SFU.
#  [CNC-B200] Chips and Cheese, "Nvidia's B200: Keeping the CUDA Juggernaut Rolling" (2025),
#             measured on a B200: 148 SMs (74 of 80 enabled on each of two dies), 126 MB of
#             L2, the same 256 KB L1/shared-memory pool per SM as H100, clocks like H100 SXM5.
#  [approx]   not published; order of magnitude from public pointer-chase microbenchmarks.
#             Replace with a calibrated profile.
#  [guess]    no public document gives it; the comment says the range that matters and why
#             this value. Never fitted to a timing.

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


# [CUDA-CC] 10.0 (GB100: B200, GB200): 228 KB of shared memory per SM, 227 KB a block, 32
# CTAs and 2,048 threads per SM, 64 K registers, as on 9.0 ([CNC-B200]: the same 256 KB
# L1/shared pool per SM as H100)
_BLACKWELL_SMEM = dict(sram_bytes_per_sm=228 * KIB, sram_bytes_per_block=227 * KIB)
B200_SMS = 148  # [CNC-B200] device properties of a B200: 2 dies x 74 SMs
# [FA4] dense BF16 per SM per clock: the H100's 4,096 doubled by the fifth-generation tensor
# core (2.25 / 0.989 PFLOPS = 2 x (148 / 132 SMs) x the clock ratio, 1.01)
BLACKWELL_BF16_PER_SM_CLOCK = 8192


def _blackwell(
    name: str,
    hbm_bytes_per_s: float,
    tensor: tuple[float, float, float],
    source: str,
) -> Hardware:
    """A GB100 part (compute capability 10.0). `tensor`: dense tf32, fp16/bf16 and fp8
    tensor-core peaks from its datasheet. NVIDIA publishes no clock for these parts, so the
    clock is the one at which the datasheet's dense BF16 peak holds: peak / (148 SMs x 8,192
    FLOP per clock) ([derived]; 1.856 GHz for the HGX B200, 2.06 GHz for the GB200's 1,200 W
    GPUs). The clock sets the FP32 pipe, the SFU, the shared-memory port and the issue rate;
    the boost clock may sit up to ~7% above it ([CNC-B200]: "similar to H100 SXM5", 1.98
    GHz), which would raise those rates by as much and leave the tensor peak where it is.
    FP4 tensor rates (9 PFLOPS dense on HGX B200, 10 per GB200 GPU) have no dtype in the
    model."""
    tf32, fp16, fp8 = tensor
    clock = fp16 / (B200_SMS * BLACKWELL_BF16_PER_SM_CLOCK)  # [derived], see above
    # [derived] 128 FP32 lanes per SM each doing one FMA (two FLOPs) per clock, the GH100 SM's
    # datapath ([FA4]: the FP32 ALUs do not scale with the tensor cores). No Blackwell
    # datasheet lists an FP32 rate
    fp32 = B200_SMS * 128 * 2 * clock
    # [guess] FP16 without tensor cores at twice FP32, as on GH100 ([H100-WP] table 3); the
    # model counts elementwise work in FP32 (Hardware.vector_rate), so no time depends on it
    fp16_vector = 2 * fp32
    # [guess] warp-level MMA (mma.sync, the sm80 instruction flash-attn 2.x and the WMMA
    # kernels issue) on the GB100 SM: no document gives its rate. The range that matters runs
    # from the GH100 SM's measured 2,560 FLOP per clock ([H200-CAL], 62.5% of its 4,096) to
    # the tcgen05 peak (8,192): taken as the GH100 SM's 2,560 per clock, since the doubled
    # tensor rate is reached through tcgen05 and tensor memory, which mma.sync does not use
    warp_fp16 = B200_SMS * (HOPPER_WARP_MMA_FP16 / HOPPER_SXM_FP16 * 4096) * clock
    return Hardware(
        name=name,
        sm_count=B200_SMS,
        **_BLACKWELL_SMEM,
        l2_bytes=126 * MIB,  # [CNC-B200] 126 MB
        hbm_bytes_per_s=hbm_bytes_per_s,
        # [approx] two GH100-sized L2s, one per die: twice the H100 preset's 5.5 TB/s. What
        # matters is that it is above the 8 TB/s of HBM (a DRAM-bound kernel stays DRAM-bound)
        l2_bytes_per_s=11 * TB,
        hbm_latency_s=550e-9,  # [approx] as H100
        l2_latency_s=180e-9,  # [approx] as H100 ([CNC-B200] ~150 ns within a die's partition)
        sm_bytes_per_s=64 * clock,  # [approx] 64 bytes per clock per SM
        matrix_flops_per_s={
            "fp32": fp32,
            "tf32": tf32,
            "fp16": fp16,
            "bf16": fp16,
            "fp8": fp8,
        },
        vector_flops_per_s={"fp32": fp32, "tf32": fp32, "fp16": fp16_vector, "bf16": fp16_vector},
        warp_mma_flops_per_s={"fp32": fp32, "tf32": tf32, "fp16": warp_fp16, "bf16": warp_fp16},
        # [FA4] 16 MUFU.EX2 results per clock per SM, unchanged from H100 ([CUDA-CC] 9.0: 16)
        exp_ops_per_s=B200_SMS * _SFU_PER_SM_PER_CLOCK * clock,
        clock_hz=clock,
        launch_overhead_s=3e-6,  # [approx]
        max_ctas_per_sm=32,  # [CUDA-CC] 10.0
        max_threads_per_sm=2048,  # [CUDA-CC] 10.0
        smem_bytes_per_clock_per_sm=128,  # [FA4] 128 bytes per clock per SM, as H100
        # [FA4] tcgen05.mma runs asynchronously beside both the FP32 pipe and the SFU (the
        # FlashAttention-4 pipeline overlaps the exponentials with the MMA). Only warp-
        # specialised kernels (plan.Kernel.overlap_warpgroups) use it
        async_mma_overlaps=("vector", "exp"),
        source=source,
    )


PRESETS: dict[str, Hardware] = {
    "a100-40gb": _a100("a100-40gb", 1555e9, "[A100-WP], [A100-DS] SXM4 40 GB"),
    "a100-80gb": _a100("a100-80gb", 2039e9, "[A100-WP], [A100-DS] SXM4 80 GB"),
    # [A100-DS] PCIe: the same GA100 compute and clocks, 1,555 GB/s (40 GB) and 1,935 GB/s
    # (80 GB); at 250-300 W against the SXM4's 400 W it may clock lower under load, which no
    # preset models (see docs/engine-model.md)
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
    # [B200-DS] HGX B200 (1,000 W): dense TF32 1.1, FP16/BF16 2.25, FP8 4.5 PFLOPS; 8 TB/s
    "b200": _blackwell(
        "b200", 8 * TB, (1.1e3 * TB, 2.25e3 * TB, 4.5e3 * TB), "[B200-DS] HGX B200, [CNC-B200]"
    ),
    # [GB200-DS] one GPU of a GB200 superchip (1,200 W): dense TF32 1.25, FP16/BF16 2.5, FP8 5
    # PFLOPS; 8 TB/s (16 TB/s over two GPUs). [guess] 148 SMs as a B200 reports: no SM count
    # is published for the GB200's GPUs; a different count would move the derived clock (and
    # with it the FP32, SFU and shared-memory rates) inversely, the tensor peak not at all
    "gb200": _blackwell(
        "gb200",
        8 * TB,
        (1.25e3 * TB, 2.5e3 * TB, 5e3 * TB),
        "[GB200-DS] one GPU of a GB200, [CNC-B200]",
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


KNOWN_PRESETS.update(PRESETS)  # for Hardware's messages that suggest another GPU


def get_hardware(name: str) -> Hardware:
    """A preset by name, e.g. "h100-sxm"; unknown names list the presets."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(
            "gpu",
            f"unknown GPU {str(name)[:40]!r}; choose one of {', '.join(PRESETS)} or load a "
            "profile JSON",
        ) from None
