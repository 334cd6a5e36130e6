"""The tile program of kernels/flash_fwd.cu, so the simulator replays what that kernel does.

Same grid (one CTA per Q block per batch x head), same loop (K/V tiles streamed up to the
causal diagonal, single-buffered), same traffic (Q once, K and V per tile, O and lse once),
and the same shared memory: `smem_bytes` is what the CUDA runner asks the driver for and what
the SRAM footprint here adds up to. The row state (output accumulator, m, l) lives in
registers in the kernel, so its buffers here are marked as registers.
"""

from __future__ import annotations

from ..problem import STAT_ITEMSIZE, Problem
from ..program import Buffer, Tiles

THREADS_PER_ROW = 1  # one thread per query row of the tile


def smem_layout(bq: int, bk: int, d: int, itemsize: int) -> list[tuple[str, tuple[int, ...], int]]:
    """(name, shape, item size) of the kernel's shared-memory carve-up, in order."""
    return [
        ("Qi", (bq, d), itemsize),
        ("Kj", (bk, d), itemsize),
        ("Vj", (bk, d), itemsize),
        ("S", (bq, bk), STAT_ITEMSIZE),
    ]


def smem_bytes(bq: int, bk: int, d: int, itemsize: int) -> int:
    """Dynamic shared memory of one flash_fwd CTA, in bytes."""
    return sum(_prod(shape) * size for _, shape, size in smem_layout(bq, bk, d, itemsize))


def buffers(p: Problem, t: Tiles) -> tuple[Buffer, ...]:
    """Full-tile buffers, as the kernel allocates them whatever the tile's raggedness."""
    d = p.head_dim
    smem = tuple(Buffer(n, s, size) for n, s, size in smem_layout(t.bq, t.bk, d, p.itemsize))
    regs = (
        Buffer("Oi", (t.bq, d), STAT_ITEMSIZE, registers=True),
        Buffer("m", (t.bq,), STAT_ITEMSIZE, registers=True),
        Buffer("l", (t.bq,), STAT_ITEMSIZE, registers=True),
    )
    return smem + regs


def _prod(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n
