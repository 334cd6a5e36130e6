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

    Returns (segments, first_masked): the blocks visited, split so that each class is all
    masked or all unmasked (and the ragged last block apart); first_masked is the first block
    past the unmasked run (tc when nothing is masked). Blocks wholly outside the band a causal
    mask or a sliding window leaves are skipped; blocks the band's edges cross are computed in
    full and masked. Rows see monotone column ranges [first_col(i), last_col(i)], so the block
    range comes from the first and last rows alone.
    """
    tc = n_blocks(p.seq_k, bk)
    if not p.masked:
        return split(0, tc, ragged_points(p.seq_k, bk)), tc
    lo, hi = p.first_col(r0) // bk, p.last_col(r1 - 1) // bk + 1  # blocks [lo, hi) visited
    # block j needs no mask when every row sees all its columns: the last row's first column
    # is <= its first column, and the first row's last column >= its last column
    ua = max(lo, -(-p.first_col(r1 - 1) // bk))
    top = p.last_col(r0)
    ub = tc if top == p.seq_k - 1 else (top + 1) // bk
    ub = max(ua, min(hi, ub))
    return split(lo, hi, (ua, ub, *ragged_points(p.seq_k, bk))), ub


def q_blocks_for_kv(p: Problem, c0: int, c1: int, bq: int) -> tuple[list[range], int]:
    """Q blocks that see any of key columns [c0, c1), in iteration classes (FA1's inner loop,
    the backward's), split so that each class is all masked or all unmasked.

    Returns (segments, first_unmasked): the first block of the unmasked run (or the end).
    No block at all when no row sees these columns (a window's keys before the first row's).
    """
    tr = n_blocks(p.seq_q, bq)
    if not p.masked:
        return split(0, tr, ragged_points(p.seq_q, bq)), 0
    off, right, left = p.causal_offset, p.right_reach, p.left_reach
    first = 0 if right is None else max(0, c0 - off - right)  # last_col(i) >= c0
    last = p.seq_q - 1 if left is None else min(p.seq_q - 1, c1 - 1 - off + left)
    if first > last:
        return [], tr
    lo, hi = first // bq, last // bq + 1
    # block i needs no mask when its first row sees column c1 - 1 and its last row column c0
    ua = lo if right is None else max(lo, -(-(c1 - 1 - off - right) // bq))
    if left is None or p.seq_q <= c0 + 1 - off + left:
        ub = hi
    else:
        ub = min(hi, (c0 + 1 - off + left) // bq)
    if ua >= ub:
        ua = ub = hi
    return split(lo, hi, (ua, ub, *ragged_points(p.seq_q, bq))), ua


def tile_masked(p: Problem, rows: tuple[int, int], cols: tuple[int, int]) -> bool:
    """Whether any (row, col) of the tile is hidden by the causal mask or the window."""
    if not p.masked:
        return False
    return cols[1] - 1 > p.last_col(rows[0]) or cols[0] < p.first_col(rows[1] - 1)


def q_block_classes(p: Problem, bq: int, bk: int) -> list[range]:
    """Q blocks alike for FA2's grid (each visiting K/V blocks the same way, shifted), in
    launch order.

    Unmasked: every full block is alike. Causal: each block visits its own number of K/V
    blocks, so each is a class of its own. A sliding window's band has a steady state: past
    its first blocks (and before a right edge meets the end), every Q block visits the same
    run of K/V blocks shifted by bq / bk blocks, with the same masked blocks; such blocks are
    one class (when bk divides bq, so that the shift is whole blocks), which is what keeps a
    long windowed kernel's classes few."""
    tr = n_blocks(p.seq_q, bq)
    if not p.masked:
        return block_classes(p.seq_q, bq)
    if not p.windowed or bq % bk:
        return [range(i, i + 1) for i in range(tr)]
    step = bq // bk

    def shape(i: int):
        rows = span(i, bq, p.seq_q)
        segments, _ = kv_blocks_for_q(p, rows[0], rows[1], bk)
        lo = segments[0][0]
        return lo, (
            rows[1] - rows[0],
            tuple(
                (s[0] - lo, len(s), tile_masked(p, rows, span(s[0], bk, p.seq_k))) for s in segments
            ),
            any(len(s) and s[-1] == n_blocks(p.seq_k, bk) - 1 for s in segments) and p.seq_k % bk,
        )

    classes, start = [], 0
    lo0, sig0 = shape(0)
    for i in range(1, tr + 1):
        if i < tr:
            lo, sig = shape(i)
            if sig == sig0 and lo == lo0 + (i - start) * step:
                continue
        classes.append(range(start, i))
        if i < tr:
            start, lo0, sig0 = i, lo, sig
    return classes
