"""Block arithmetic shared by the schedules: spans, and iteration classes for ctx.loop.

Every function here is O(1) in the sequence length: this is what lets counting run one
representative per class at a million tokens.
"""

from __future__ import annotations

from ..problem.attention import Problem
from ..program.symbolic import segment


def n_blocks(n: int, b: int) -> int:
    """ceil(n / b): how many blocks of size b cover n (the last may be ragged)."""
    return -(-n // b)


def span(i: int, b: int, n: int) -> tuple[int, int]:
    """Rows [start, stop) of block i; the last block is cut at n, never padded."""
    return i * b, min((i + 1) * b, n)


def split(lo: int, hi: int, points) -> list[range]:
    """Partition range(lo, hi) at the given points (clipped, deduplicated) into ranges."""
    cuts = sorted({lo, hi, *(p for p in points if lo < p < hi)})
    return [segment(a, b) for a, b in zip(cuts, cuts[1:], strict=False) if b > a]


def ragged_points(n: int, b: int) -> tuple[int, ...]:
    """Cut points isolating the ragged last block, if there is one."""
    t = n_blocks(n, b)
    return (t - 1, t) if n % b else ()


def block_classes(n: int, b: int) -> list[range]:
    """Block indices split into full blocks and the ragged last block (if any)."""
    return split(0, n_blocks(n, b), ragged_points(n, b))


def kv_blocks_for_q(p: Problem, r0: int, r1: int, bk: int) -> tuple[list[range], int]:
    """K/V blocks a Q block with rows [r0, r1) must visit, in iteration classes.

    Returns (segments, first_masked): blocks >= first_masked straddle the causal diagonal and
    need the mask applied. Causal: blocks wholly above the diagonal are skipped.
    """
    tc = n_blocks(p.seq_k, bk)
    if not p.causal:
        return split(0, tc, ragged_points(p.seq_k, bk)), tc
    off = p.causal_offset
    visible = min(tc, (r1 - 1 + off) // bk + 1)  # the last row sees columns <= r1 - 1 + off
    # block j needs no mask when the first row already sees its last column
    unmasked = min(visible, (r0 + off + 1) // bk)
    if p.seq_k % bk and unmasked == tc - 1 and p.seq_k - 1 <= r0 + off:
        unmasked = tc  # the ragged last block is also fully visible
    return split(0, visible, (unmasked, *ragged_points(p.seq_k, bk))), unmasked


def q_blocks_for_kv(p: Problem, c0: int, c1: int, bq: int) -> tuple[list[range], int]:
    """Q blocks that see any of key columns [c0, c1), in iteration classes (FA1's inner loop).

    Returns (segments, first_unmasked): blocks < first_unmasked straddle the diagonal.
    """
    tr = n_blocks(p.seq_q, bq)
    if not p.causal:
        return split(0, tr, ragged_points(p.seq_q, bq)), 0
    off = p.causal_offset
    first = max(0, c0 - off) // bq  # the first block holding a row >= c0 - off
    # block i needs no mask when its first row i*bq sees column c1 - 1
    need = c1 - 1 - off
    unmasked = max(first, n_blocks(need, bq) if need > 0 else 0)
    unmasked = min(unmasked, tr)
    return split(first, tr, (unmasked, *ragged_points(p.seq_q, bq))), unmasked


def tile_masked(p: Problem, rows: tuple[int, int], cols: tuple[int, int]) -> bool:
    """Whether any (row, col) of the tile is hidden by the causal mask."""
    return p.causal and cols[1] - 1 > rows[0] + p.causal_offset
