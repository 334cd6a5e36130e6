"""What every implementation mirror needs: the GPU's architecture as the libraries test it,
head-dim buckets, the CUDA launch order, and the assembly of a plan from kernels.

Why here: each library asks the same questions of the device (`cudaGetDeviceProperties`:
compute capability, shared memory per block and per SM) and launches its grids the same way;
answering them once keeps each mirror to what its library decides.
"""

from __future__ import annotations

import dataclasses

from ..errors import ConfigError
from ..gpu.hardware import Hardware
from ..gpu.presets import PRESETS
from ..problem.attention import Problem
from ..program.plan import Kernel, Plan, TensorSpec, Tiles

# Compute capability (major * 10 + minor) by GPU name prefix ([CUDA-CC] table of the CUDA C++
# Programming Guide): every preset's name starts with one, as may a profile named after its
# GPU ("h100-sxm-mine"). First match wins: "a100" (GA100, 8.0) before "a10" (GA102, 8.6).
FAMILIES = (
    ("a100", 80),
    ("h100", 90),
    ("h200", 90),
    ("b200", 100),
    ("gb200", 100),
    ("rtx4090", 89),
    ("l40s", 89),
    ("l4", 89),
    ("a10", 86),
    ("rtx3090", 86),
    ("rtx-a6000", 86),
)

# A CUDA grid dim3(x, y, z) starts its blocks with x fastest, then y, then z. The mirrors keep
# hbmsim's (batch, head, block) grid axes and give the launch order separately:
# dim3(num_blocks, b, h) (flash-attn 2): head slowest, then batch, then the block.
GRID_BLOCK_B_H = (1, 0, 2)
# dim3(b, h, num_splits) (flash-attn 1.x): splits slowest, then head, then batch.
GRID_B_H_SPLIT = (2, 1, 0)


def sm_version(hw: Hardware) -> int:
    """The compute capability (major * 10 + minor) of a preset, or of the preset a profile
    names as its base ("a100-40gb+calibrated")."""
    base = hw.name.split("+")[0]
    for family, sm in FAMILIES:
        if base.startswith(family):
            return sm
    raise ConfigError(
        "gpu",
        f"implementation mirrors need the GPU architecture, known for the presets "
        f"({', '.join(PRESETS)}) and profiles named after one; {hw.name!r} is none of them",
    )


def round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def head_dim_bucket(d: int, buckets: tuple[int, ...]) -> int:
    """The compiled head dim a kernel uses for d: the smallest bucket >= d (the library's
    HEADDIM_SWITCH); the MMA runs on the whole bucket, the loads on the real d."""
    for b in buckets:
        if d <= b:
            return b
    raise AssertionError(f"head dim {d} above the largest bucket (checked before)")


def refuse(field: str, library_message: str) -> ConfigError:
    """A combination the library itself refuses, on one line: its own words where they read
    plainly, else the same rule in plain grammar (its own words cited beside the call)."""
    return ConfigError(field, library_message)


def check_head_dim(p: Problem, what: str, most: int = 256) -> None:
    """flash-attn's head-dim refusal (mha_fwd, 2.x and hopper/ alike: "at most 256"), and
    head dims that are not a multiple of 8, which mha_fwd pads to one with extra copies (torch
    pad) that the mirrors do not model."""
    if p.head_dim > most:
        raise refuse(
            "head_dim",
            f"{what}: FlashAttention forward only supports head dimension at most {most}",
        )
    if p.head_dim % 8:
        raise refuse(
            "head_dim",
            f"{what}: head dims that are not a multiple of 8 are padded by extra copies the "
            "mirror does not model; use a multiple of 8",
        )


def assemble(
    impl: str,
    p: Problem,
    hw: Hardware,
    tiles: Tiles,
    fwd: list[Kernel],
    bwd: list[Kernel],
    tensors: dict[str, TensorSpec],
    notes: tuple[str, ...],
    framework_ops: int,
    warp_mma: bool = False,
) -> Plan:
    """The plan of the problem's pass: forward kernels, backward kernels or both; a backward-
    only plan keeps the forward as its prologue (executed for the saved tensors, never counted
    or simulated), as registry.make_plan does. `warp_mma`: the library's tensor-core
    kernels are warp-level MMA (mma.sync), which marks every kernel that uses tensor cores."""
    if warp_mma:
        fwd, bwd = (
            [dataclasses.replace(k, warp_mma=k.tensor_cores) for k in ks] for ks in (fwd, bwd)
        )
    kernels = (fwd if "fwd" in p.pass_ else []) + (bwd if "bwd" in p.pass_ else [])
    prologue = tuple(fwd) if p.pass_ == "bwd" else ()
    plan = Plan(impl, p, hw, tiles, tensors, tuple(kernels), notes, prologue, framework_ops, True)
    plan.check_fits()
    return plan


def host_ops_first(kernels: list[Kernel], ops: int) -> list[Kernel]:
    """The kernels, the first one launched after `ops` framework operations of the wrapper
    (Kernel.host_ops_before; the rest right after the one before them)."""
    if not kernels:
        return kernels
    return [
        dataclasses.replace(k, host_ops_before=ops if i == 0 else 0) for i, k in enumerate(kernels)
    ]


def override_note(bq: int | None, bk: int | None, chosen: tuple[int, int]) -> tuple[str, ...]:
    if bq is None and bk is None:
        return ()
    return (
        f"tiles overridden by the user: bq={chosen[0]}, bk={chosen[1]} instead of the "
        "library's choice above",
    )
