"""A group alone on the GPU, its long loops timed from a shortened copy.

Why: a stretched kernel (stretch.py) times every group once, alone, and causal
attention's query-block classes differ only in how many K/V blocks their loop runs: fa2
causal at 64k tokens x 16 heads ran 1,124 alone timelines of 1,024 templates, half a second,
each a SimPy run whose loop's rounds were skipped (groups.Group.skip_rounds) after a few
steps. Their durations are affine in the loop's length, and this is why: a run that skips R
rounds of k steps, each taking dt, from step x on, would skip R + q rounds from the same
step, in the same state, had its loop q k steps more of the same iterations (the periodic
steps Repeats finds are longer by them), and go on from the end of the skipped rounds
exactly as it did.

So a template whose laid-out loop segment (classkeys.py: first op, ops per iteration,
iterations) is long, and whose hit counts repeat from its second iteration to its last but
one, is run with only SHORT_KEEP of those iterations (the first SHORT_KEEP - 2 and the last
two): a short copy that every length of the same loop shares (the classes of a causal kernel
with the same hits: one run each, not one per class). Its run's skip log says whether the
argument holds: the iterations left out must go where the run skipped rounds (strictly after
the round it compared, no later than the skipped rounds' end), in whole rounds. Then the
group's duration is the short run's plus the left-out steps' rounds times that skip's round;
where it does not hold (a loop the run never settled in, hits that change along it), the
whole template is run as before. Bytes are never extrapolated: they are summed from the whole
template and its hit counts (`moved`), as the run adds them transfer by transfer (the same
integers). `python bench/engine.py` compares the two on causal kernels (the same durations
to float rounding, the same bytes), and tests/test_stretch.py on small ones.
"""

from __future__ import annotations

import numpy as np

from ..interpret.trace import OP_ATOMIC, OP_COMPUTE, OP_LOAD, OP_STORE
from .template import charged_bytes, step_heads

SHORT_KEEP = 12  # iterations a shortened segment keeps: room for its state to settle (below)
SHORT_MIN = 2 * SHORT_KEEP  # only segments at least this long are shortened
# A group's steps settle into rounds a few steps in: Group.skip_rounds compares the state at
# step boundaries up to MAX_PERIOD (4) apart, and a K/V pipeline of s stages fills in s
# steps; SHORT_KEEP - 2 iterations before the cut leave that room twice over, and where a
# run has not settled by then its skip log says so and the whole template is run.


class Cut:
    """Iterations left out of one loop segment: the step of the short copy where they would go,
    how many steps they hold."""

    __slots__ = ("step", "steps")

    def __init__(self, step: int, steps: int):
        self.step, self.steps = step, steps


def shortened(loops, counts: np.ndarray):
    """(iterations kept per shortened segment, short hit counts, iterations left out per
    shortened segment) of a template whose long segments repeat their hits (see the module
    docstring), or None where no segment can be shortened. `loops`: its laid-out segments,
    each (first op, ops per iteration, iterations, transfers before it, transfers per
    iteration); `counts`: hit counts per transfer, in program order. The short copy's records
    are the template's with each kept segment run that many times
    (classkeys.Templates.cut)."""
    keep, left_out, spans = {}, {}, []
    for i, (_at, _per, n, t0, t_per) in enumerate(loops):
        if n < SHORT_MIN:
            continue
        hits = counts[t0 : t0 + t_per * n].reshape(n, t_per)
        if t_per and not (hits[1 : n - 1] == hits[1]).all():
            continue  # hits that change along the loop
        keep[i], left_out[i] = SHORT_KEEP, n - SHORT_KEEP
        first = t0 + (SHORT_KEEP - 2) * t_per
        spans.append((first, first + left_out[i] * t_per))
    if not keep:
        return None
    ends = [0, *(x for span in spans for x in span), len(counts)]
    short = np.concatenate([counts[a:b] for a, b in zip(ends[::2], ends[1::2], strict=True)])
    return keep, short, left_out


class ShortRun:
    """A short copy's alone run, for every template of its family: its duration and skip log,
    where each shortened segment's cut goes (its step) and the steps one iteration holds, and
    the bytes of the short copy and of one more iteration of each segment (a middle one: every
    middle iteration has the same ops and hits), and its run's marks (Group.mark: where its
    prologue ends and its epilogue begins, which the cuts leave where they are)."""

    def __init__(
        self, seconds: float, skips, short_rows, short_counts, m, multicast, loops, keep, marks=()
    ):
        self.seconds, self.skips, self.marks = seconds, skips, marks
        ops = short_rows["op"]
        columns = (ops, short_rows["bytes"], short_rows["tensor"])
        self.moved = moved(columns, short_counts, m, multicast)
        begun = np.concatenate([[0], np.cumsum(step_heads(ops))])  # steps begun before each op
        self.places, self.iteration = {}, {}
        op_shift = tr_shift = 0  # ops and transfers the segments before left out
        head = SHORT_KEEP - 2
        for i, (at, per, n, t0, t_per) in enumerate(loops):
            if i not in keep:
                continue
            here, t_here = at - op_shift + head * per, t0 - tr_shift + head * t_per
            self.places[i] = (int(begun[here]), int(begun[here + per] - begun[here]))
            one = slice(here - per, here)  # the iteration before the cut
            self.iteration[i] = moved(
                tuple(c[one] for c in columns), short_counts[t_here - t_per : t_here], m, multicast
            )
            op_shift += (n - SHORT_KEEP) * per
            tr_shift += (n - SHORT_KEEP) * t_per

    def whole(self, left_out: dict[int, int]):
        """(duration, counters, L2-path bytes, DRAM bytes) of the template that left out
        `left_out` iterations of each shortened segment, or None where the run's skips do not
        cover its cuts (see `extended`)."""
        cuts = [Cut(self.places[i][0], q * self.places[i][1]) for i, q in left_out.items()]
        seconds = extended(self.seconds, self.skips, cuts)
        if seconds is None:
            return None
        (read, hit, write), l2_path, dram = self.moved
        for i, q in left_out.items():
            (r1, h1, w1), l1, d1 = self.iteration[i]
            read, hit, write = read + q * r1, hit + q * h1, write + q * w1
            l2_path, dram = l2_path + q * l1, dram + q * d1
        return seconds, [read, hit, write], l2_path, dram


def extended(duration: float, skips, cuts) -> float | None:
    """The whole template's duration from its short copy's (`duration`, its run's skip log
    `skips`: (front, period, rounds, one round's seconds) each), or None where a cut does not
    fall inside skipped rounds in whole rounds (see the module docstring)."""
    total = duration
    for cut in cuts:
        for front, period, rounds, one in skips:
            first = front + 1  # the first skipped step (steps front - period + 1..front compared)
            if first <= cut.step <= first + rounds * period and cut.steps % period == 0:
                total += (cut.steps // period) * one
                break
        else:
            return None
    return total


def moved(
    columns: tuple[np.ndarray, np.ndarray, np.ndarray], counts: np.ndarray, m: int, multicast
) -> tuple[list[int], int, int]:
    """(DRAM read, L2 hit, DRAM write) bytes of m CTAs of a template (`columns`: the op, bytes
    and tensor of each of its ops) with these hit counts, and what they move on the L2 path
    and on DRAM: the sums groups.Group adds up transfer by transfer (moved_bytes), and
    links.Links moves (every copy of a transfer crosses the L2 path; those that miss,
    and stores, DRAM too)."""
    ops, nbytes, tensor = columns
    tr = ops != OP_COMPUTE
    op = ops[tr].astype(np.int64)
    nbytes = charged_bytes(op, nbytes[tr].astype(np.int64), tensor[tr], multicast)
    hits = np.where((op == OP_LOAD) | (op == OP_ATOMIC), counts.astype(np.int64), 0)
    load, store, atomic = op == OP_LOAD, op == OP_STORE, op == OP_ATOMIC
    missed = nbytes * (m - hits)
    read = int(missed[load | atomic].sum())
    l2_hit = int((nbytes * hits)[load | atomic].sum())
    write = int((nbytes[store] * m).sum()) + int(missed[atomic].sum())
    return [read, l2_hit, write], int(nbytes.sum()) * m, int(missed.sum())
