"""A kernel's CTA classes in launch order, as runs: (class, CTAs launched one after another).

Why: the engine's work estimate and its choice of path (limits.py) ask how a launch order
interleaves a kernel's classes. Listing every CTA in launch order and sorting them costs memory
in the CTAs' number (a 1M-token forward over 64 x 64 (batch, head) instances launches about
10^8 CTAs: gigabytes), while the runs follow from the classes' boxes alone. A class is a box
(one range per grid axis) and the launch order is lexicographic over the axes, so along the
slowest axis the grid cuts into intervals over which the same boxes are present; within each,
every value repeats the runs of the faster axes. The work is in the boxes' and runs' number.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from .plan import CtaClass


def unit_steps(grid: Sequence[CtaClass]) -> bool:
    """Whether every class's ranges step by one (the boxes `class_runs` cuts)."""
    return all(r.step == 1 for cls in grid for r in cls.axes)


def class_runs(
    grid: Sequence[CtaClass], order: Sequence[int], limit: int
) -> list[tuple[int, int]] | None:
    """(class index, CTAs) runs of `grid`'s CTAs launched in `order` (its first axis slowest,
    as plan.launch_sequence sorts them), neighbouring runs of one class merged; None when there
    are more than `limit` runs. Every class's ranges must step by one (`unit_steps`)."""
    boxes = [(i, cls.axes) for i, cls in enumerate(grid) if cls.size]
    return _runs(boxes, tuple(order), 0, limit) if boxes else []


def _runs(boxes, order, depth, limit):
    axis = order[depth]
    cuts = sorted({r for _, axes in boxes for r in (axes[axis].start, axes[axis].stop)})
    by_start = sorted(boxes, key=lambda box: box[1][axis].start)
    ends: list[tuple[int, int]] = []  # a heap of (stop, box number) of the boxes present
    present: dict[int, tuple] = {}
    taken = 0
    out: list[tuple[int, int]] = []
    for lo, hi in zip(cuts, cuts[1:], strict=False):  # sweep: boxes enter and leave
        while taken < len(by_start) and by_start[taken][1][axis].start <= lo:
            heapq.heappush(ends, (by_start[taken][1][axis].stop, taken))
            present[taken] = by_start[taken]
            taken += 1
        while ends and ends[0][0] <= lo:
            del present[heapq.heappop(ends)[1]]
        if not present:
            continue
        inside = list(present.values())
        if depth == len(order) - 1:  # the fastest axis: the classes side by side on it
            seq, reps = [(c, hi - lo) for c, _ in inside], 1
        else:
            seq, reps = _runs(inside, order, depth + 1, limit), hi - lo
            if seq is None:
                return None
        if not _extend(out, seq, reps, limit):
            return None
    return out


def _extend(out: list[tuple[int, int]], seq: list[tuple[int, int]], reps: int, limit: int):
    """Append `seq` `reps` times to `out`, merging neighbours of one class; False past
    `limit` runs."""
    if len(seq) == 1:  # one class repeated: one run
        _append(out, seq[0][0], seq[0][1] * reps)
        return len(out) <= limit
    if len(out) + reps * (len(seq) - (seq[0][0] == seq[-1][0])) > limit + 1:
        return False
    for _ in range(reps):
        for c, n in seq:
            _append(out, c, n)
    return len(out) <= limit


def _append(out: list[tuple[int, int]], cls: int, n: int) -> None:
    if out and out[-1][0] == cls:
        out[-1] = (cls, out[-1][1] + n)
    else:
        out.append((cls, n))
