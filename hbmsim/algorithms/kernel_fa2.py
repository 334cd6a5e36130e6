"""The tile programs of kernels/flash_fwd.cu and kernels/flash_fwd_wmma.cu, so the simulator
replays what those kernels do.

Same grid (one CTA per Q block per batch x head), same loop (K/V tiles streamed up to the
causal diagonal, single-buffered), same traffic (Q once, K and V per tile, O and lse once),
and the same shared memory: `smem_bytes` is what the CUDA runner asks the driver for and what
the SRAM footprint here adds up to.

flash_fwd (scalar): one thread per query row; the row state (output accumulator, m, l) lives
in registers, so those buffers are marked as registers. Its matmuls run on the FMA units. Qi
and S are stored transposed (the lanes of a warp read consecutive addresses), which changes
their shape, not their size.
flash_fwd_wmma (tensor cores): BQ / 16 warps; P is stored in the input type for the second
product and the output accumulator lives in shared memory (WMMA fragments cannot be rescaled
per row), so both count towards the footprint; m and l stay in registers. Every row of its
shared memory is padded by 16 bytes against bank conflicts, and the padding is part of the
footprint the launch asks for.
"""

from __future__ import annotations

from ..errors import ConfigError
from ..problem.attention import STAT_ITEMSIZE, Problem
from ..program.plan import Buffer, Tiles

WMMA_TILE = 16  # the m16n16k16 fragment shape
ROW_PAD_BYTES = 16  # padding per shared-memory row, flash_fwd_wmma's and naive.cu's matmul's
WMMA_DTYPES = ("fp16", "bf16")


def threads_per_cta(bq: int, wmma: bool = False) -> int:
    """Block size: one thread per query row, or one warp per 16 query rows."""
    return bq // WMMA_TILE * 32 if wmma else bq


def smem_layout(
    bq: int, bk: int, d: int, itemsize: int, wmma: bool = False
) -> list[tuple[str, tuple[int, int], int, int]]:
    """(name, shape, item size, row padding in items) of the kernel's shared-memory carve-up,
    in order. A region takes rows x (columns + padding) items; the padding is never read."""
    if not wmma:
        return [
            ("Qi", (d, bq), itemsize, 0),  # transposed
            ("Kj", (bk, d), itemsize, 0),
            ("Vj", (bk, d), itemsize, 0),
            ("S", (bk, bq), STAT_ITEMSIZE, 0),  # transposed
        ]
    pad, stat_pad = ROW_PAD_BYTES // itemsize, ROW_PAD_BYTES // STAT_ITEMSIZE
    return [
        ("Qi", (bq, d), itemsize, pad),
        ("Kj", (bk, d), itemsize, pad),
        ("Vj", (bk, d), itemsize, pad),
        ("S", (bq, bk), STAT_ITEMSIZE, stat_pad),
        ("P", (bq, bk), itemsize, pad),
        ("Oi", (bq, d), STAT_ITEMSIZE, stat_pad),
    ]


def smem_bytes(bq: int, bk: int, d: int, itemsize: int, wmma: bool = False) -> int:
    """Dynamic shared memory of one CTA of flash_fwd (or flash_fwd_wmma), in bytes."""
    return sum(
        rows * (cols + pad) * size
        for _, (rows, cols), size, pad in smem_layout(bq, bk, d, itemsize, wmma)
    )


def buffers(p: Problem, t: Tiles, wmma: bool = False) -> tuple[Buffer, ...]:
    """Full-tile buffers, as the kernel allocates them whatever the tile's raggedness."""
    d = p.head_dim
    layout = smem_layout(t.bq, t.bk, d, p.itemsize, wmma)
    smem = tuple(Buffer(n, (rows, cols + pad), size) for n, (rows, cols), size, pad in layout)
    regs = (
        Buffer("m", (t.bq,), STAT_ITEMSIZE, registers=True),
        Buffer("l", (t.bq,), STAT_ITEMSIZE, registers=True),
    )
    if not wmma:
        regs = (Buffer("Oi", (t.bq, d), STAT_ITEMSIZE, registers=True), *regs)
    return smem + regs


def check_wmma(p: Problem, bq: int | None, bk: int | None) -> None:
    """What flash_fwd_wmma.cu can run: fp16/bf16 inputs, tiles and head dim in 16s (tiles left
    to the default are)."""
    if p.dtype not in WMMA_DTYPES:
        raise ConfigError(
            "dtype",
            f"fa2-wmma-kernel runs on tensor cores with fp16 or bf16 inputs (got {p.dtype}); "
            "fa2-kernel takes fp32",
        )
    for name, value in (("head_dim", p.head_dim), ("bq", bq), ("bk", bk)):
        if value is not None and value % WMMA_TILE:
            raise ConfigError(
                name, f"fa2-wmma-kernel needs a multiple of {WMMA_TILE} (got {value})"
            )
