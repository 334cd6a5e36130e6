"""The registry of textbook algorithms: `--algo NAME` to its plan.

`make_plan` is the one entry point: it resolves default tiles, validates the user's tiles,
assembles the kernels of the requested pass (forward, backward or both) and checks that every
kernel's SRAM footprint fits one thread block.
"""

from __future__ import annotations

import dataclasses
import math

from ..errors import ConfigError, SramOverflowError, check_int
from ..gpu.hardware import Hardware
from ..problem.attention import Problem
from ..program.plan import Kernel, Plan, TensorSpec, Tiles
from . import decode, flash, flash_bwd, kernel_fa2, kernel_naive, standard
from .names import ALGOS, FORWARD_ONLY, KERNEL_MIRRORS, MATMUL_ALGOS, MAX_TILE

# matmul tiles (bq, bk, bd) from the largest down: a default is the first whose kernels fit
MATMUL_TILES = (
    (128, 128, 32),
    (128, 64, 32),
    (64, 64, 32),
    (64, 64, 16),
    (32, 32, 16),
    (16, 16, 16),
    (8, 8, 8),
    (1, 1, 1),
)


def _parts(
    algo: str, p: Problem, hw: Hardware, t: Tiles
) -> tuple[list[Kernel], list[Kernel], dict[str, TensorSpec]]:
    """(forward kernels, backward kernels, tensors) of an algorithm."""
    backward = "bwd" in p.pass_
    if algo == "standard":
        return (
            standard.forward(p, hw, t),
            standard.backward(p, hw, t) if backward else [],
            standard.tensors(p, backward),
        )
    if algo == "split-kv":
        fwd, tensors = decode.splitkv_forward(p, hw, t, t.splits)
        return fwd, [], tensors
    if algo in ("fa2-kernel", "fa2-wmma-kernel"):
        cuda = "flash_fwd_wmma" if algo == "fa2-wmma-kernel" else "flash_fwd"
        fwd, tensors = flash.fa2_forward(p, hw, t, cuda_kernel=cuda)
        return fwd, [], tensors
    if algo == "standard-kernel":
        tensors = {
            k: v for k, v in standard.tensors(p, False).items() if k != standard.mask_tensor(p)
        }
        return kernel_naive.forward(p, hw, t), [], tensors
    fwd, tensors = (flash.fa1_forward if algo == "fa1" else flash.fa2_forward)(p, hw, t)
    bwd: list[Kernel] = []
    if backward:
        bwd, grads = (flash_bwd.fa1_backward if algo == "fa1" else flash_bwd.fa2_backward)(p, hw, t)
        tensors = {**tensors, **grads}
    return fwd, bwd, tensors


def _peak(algo: str, p: Problem, hw: Hardware, t: Tiles) -> tuple[int, str]:
    fwd, bwd, _ = _parts(algo, p, hw, t)
    worst = max(fwd + bwd, key=lambda k: k.sram_bytes)
    return worst.sram_bytes, worst.name


def default_tiles(
    algo: str, p: Problem, hw: Hardware, splits: int | None = None
) -> tuple[Tiles, tuple[str, ...]]:
    """The algorithm's default tiles for this problem, and notes on how they were chosen."""
    cap = hw.sram_bytes_per_block
    if algo == "fa1":
        return _default_fa1(p, hw)
    if algo in MATMUL_ALGOS:
        candidates = list(MATMUL_TILES)
        first = "128 x 128 x 32 matmul tiles"
    elif algo == "fa2-wmma-kernel":  # whole 16 x 16 fragments only
        candidates = [
            (64, 64, None),
            (64, 32, None),
            (32, 32, None),
            (32, 16, None),
            (16, 16, None),
        ]
        first = "64 x 64 tiles"
    else:  # fa2, split-kv, fa2-kernel: 64 x 64 or the largest powers of two below
        candidates = [
            (s, s2, None)
            for s in (64, 32, 16, 8, 4, 2, 1)
            for s2 in ((s, s // 2) if s > 1 else (1,))
        ]
        first = "64 x 64 tiles"
    for bq, bk, bd in candidates:
        tiles = _with_splits(algo, p, hw, Tiles(bq, bk, bd), splits)
        peak, _ = _peak(algo, p, hw, tiles)
        if peak <= cap:
            if (bq, bk, bd) == candidates[0]:
                return tiles, ()
            return tiles, (
                f"{first} do not fit {cap:,} bytes of SRAM at head_dim "
                f"{p.head_dim} {p.dtype}; default reduced to {tiles.describe()}",
            )
    peak, name = _peak(algo, p, hw, tiles)
    raise SramOverflowError(name, peak, cap, tiles.describe())


def _default_fa1(p: Problem, hw: Hardware) -> tuple[Tiles, tuple[str, ...]]:
    """Paper Algorithm 1 line 1: Bc = ceil(M / 4d), Br = min(Bc, d), M = SRAM in elements.

    The formula bounds the tiles only loosely; where its tiles overflow the SRAM (large d, or
    the backward's larger footprint), Bc is halved until they fit, and the plan says so.
    """
    m_elems = hw.sram_bytes_per_sm // p.itemsize
    bc = paper = math.ceil(m_elems / (4 * p.head_dim))
    while True:
        tiles = Tiles(bq=min(bc, p.head_dim), bk=bc)
        peak, name = _peak("fa1", p, hw, tiles)
        if peak <= hw.sram_bytes_per_block:
            break
        if bc == 1:
            raise SramOverflowError(name, peak, hw.sram_bytes_per_block, tiles.describe())
        bc = max(1, bc // 2)
    notes = (
        f"paper tiles Bc = ceil(M/4d) = {paper}, Br = min(Bc, d) from M = {m_elems:,} "
        "elements of SRAM",
    )
    if bc != paper:
        notes += (f"those overflow {hw.sram_bytes_per_block:,} bytes of SRAM; Bc halved to {bc}",)
    return tiles, notes


def _with_splits(algo: str, p: Problem, hw: Hardware, t: Tiles, splits: int | None) -> Tiles:
    if algo != "split-kv":
        return t
    if splits is None:
        splits = decode.default_splits(p, hw, t)
    decode.check_splits(p, t, splits)
    return dataclasses.replace(t, splits=splits)


def make_plan(
    algo: str,
    problem: Problem,
    hw: Hardware,
    bq: int | None = None,
    bk: int | None = None,
    bd: int | None = None,
    splits: int | None = None,
) -> Plan:
    """The plan of `algo` for `problem` (and its pass) on `hw`. Tiles left as None take the
    algorithm's default.

    Raises ConfigError for an unknown algorithm or bad tile values, SramOverflowError when the
    tiles do not fit the SRAM of one thread block.
    """
    if algo not in ALGOS:
        raise ConfigError("algo", f"must be one of {', '.join(ALGOS)} (got {algo!r})")
    for name, value in (("bq", bq), ("bk", bk), ("bd", bd), ("splits", splits)):
        if value is not None:
            check_int(name, value, 1, MAX_TILE)
    if bd is not None and algo not in MATMUL_ALGOS:
        raise ConfigError("bd", "only applies to the standard algorithm's matmul kernels")
    if splits is not None and algo != "split-kv":
        raise ConfigError("splits", "only applies to the split-kv algorithm")
    if algo in FORWARD_ONLY and problem.pass_ != "fwd":
        raise ConfigError("pass", f"{algo} is forward only; use fwd")
    if problem.page_size is not None:
        raise ConfigError(
            "page_size",
            f"{algo}: the textbook programs read a contiguous K/V cache; a paged one is "
            "--impl flash-decoding's (flash_attn_with_kvcache's block table)",
        )
    if algo in KERNEL_MIRRORS and problem.windowed:
        raise ConfigError(
            "window", f"{algo} mirrors a CUDA kernel without a sliding window; use -1 (none)"
        )
    if algo in KERNEL_MIRRORS and not problem.plain_kv:
        raise ConfigError(
            "head_dim_v",
            f"{algo} mirrors a CUDA kernel with Q, K and V of one head dim in separate tensors "
            f"(head_dim_v {problem.dv}, head_dim {problem.head_dim}, latent_kv "
            f"{str(problem.latent_kv).lower()}): use fa2, fa1, split-kv or standard",
        )
    if algo in KERNEL_MIRRORS and problem.dropout > 0:
        raise ConfigError("dropout", f"{algo} mirrors a CUDA kernel without dropout; use 0")
    hw.check_dtype(problem.dtype)
    if algo in KERNEL_MIRRORS and problem.dtype == "fp8":
        raise ConfigError("dtype", f"{algo} mirrors a CUDA kernel of fp16, bf16 or fp32 inputs")
    if algo == "fa2-wmma-kernel":
        kernel_fa2.check_wmma(problem, bq, bk)  # before defaults, which are whole fragments
    notes: tuple[str, ...] = ()
    if bq is None or bk is None or (algo in MATMUL_ALGOS and bd is None):
        defaults, notes = default_tiles(algo, problem, hw, splits)
        chosen = (bq or defaults.bq, bk or defaults.bk, bd or defaults.bd)
        if chosen != (defaults.bq, defaults.bk, defaults.bd):
            notes = ()  # the user chose some of the tiles: the default's story no longer applies
        bq, bk, bd = chosen
    has_bd = algo in MATMUL_ALGOS
    tiles = _with_splits(algo, problem, hw, Tiles(bq, bk, bd if has_bd else None), splits)
    if algo == "split-kv" and splits is None:
        notes += (f"{tiles.splits} splits: enough CTAs for two per SM",)
    fwd, bwd, tensors = _parts(algo, problem, hw, tiles)
    kernels = (fwd if "fwd" in problem.pass_ else []) + bwd
    prologue = tuple(fwd) if problem.pass_ == "bwd" else ()
    plan = Plan(algo, problem, hw, tiles, tensors, tuple(kernels), notes, prologue)
    plan.check_fits()
    return plan


__all__ = ["ALGOS", "default_tiles", "make_plan"]
