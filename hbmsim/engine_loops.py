"""A group alone on the GPU, its long loops timed from a shortened copy.

Why: a stretched kernel (engine_stretch.py) times every group once, alone, and causal
attention's query-block classes differ only in how many K/V blocks their loop runs: fa2
causal at 64k tokens x 16 heads ran 1,124 alone timelines of 1,024 templates, half a second,
each a SimPy run whose loop's rounds were skipped (engine_group.Group.skip_rounds) after a few
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

from .engine_group import charged_bytes
from .trace import OP_ATOMIC, OP_COMPUTE, OP_LOAD, OP_STORE

SHORT_KEEP = 12  # iterations a shortened segment keeps: room for its state to settle (below)
SHORT_MIN = 2 * SHORT_KEEP  # only segments at least this long are shortened
# A group's steps settle into rounds a few steps in: Group.skip_rounds compares the state at
# step boundaries up to MAX_PERIOD (4) apart, and a K/V pipeline of s stages fills in s
# steps; SHORT_KEEP - 2 iterations before the cut leave that room twice over, and where a
# run has not settled by then its skip log says so and the whole template is run.

class Cut:
    """Iterations left out of one loop segment: where they would go in the short copy (op
    index and step index), how many steps they hold."""

    __slots__ = ("op", "step", "steps")

    def __init__(self, op: int, step: int, steps: int):
        self.op, self.step, self.steps = op, step, steps


def shortened(ops: np.ndarray, loops, counts: np.ndarray):
    """(iterations kept per shortened segment, short hit counts, cuts) of a template whose long
    segments repeat their hits (see the module docstring), or None where no segment can be
    shortened. `ops`: the op of each of the template's ops, in program order; `counts`: hit
    counts per transfer, in program order; `loops`: its segments (first op, ops per
    iteration, iterations). The short copy's records are the template's with each kept
    segment run that many times (classkeys.Templates.cut)."""
    if not loops:
        return None
    is_tr = ops != OP_COMPUTE
    tr_before = np.concatenate([[0], np.cumsum(is_tr)])  # transfers before each op
    keep_ops = np.ones(len(ops), dtype=bool)
    keep_tr = np.ones(len(counts), dtype=bool)
    keep, cuts = {}, []  # cuts: (op in the whole template, iterations left out, ops each)
    for i, (at, per, n) in enumerate(loops):
        if n < SHORT_MIN:
            continue
        t0, t_per = int(tr_before[at]), int(tr_before[at + per] - tr_before[at])
        hits = counts[t0 : t0 + t_per * n].reshape(n, t_per)
        if t_per and not (hits[1 : n - 1] == hits[1]).all():
            continue  # hits that change along the loop
        head = SHORT_KEEP - 2
        left_out = n - SHORT_KEEP
        a = at + head * per
        keep_ops[a : a + left_out * per] = False
        keep_tr[t0 + head * t_per : t0 + (head + left_out) * t_per] = False
        keep[i] = SHORT_KEEP
        cuts.append((a, left_out, per))
    if not cuts:
        return None
    # steps begin at each run of computes' first: a cut's place and size in steps
    comp = ops[keep_ops] == OP_COMPUTE
    first = comp.copy()
    first[1:] &= ~comp[:-1]
    begun = np.concatenate([[0], np.cumsum(first)])  # steps begun before each op
    out, removed = [], 0
    for a, left_out, per in cuts:
        here = a - removed  # the cut's op index in the short copy
        per_steps = int(begun[here + per] - begun[here])  # an iteration's steps (as the next)
        out.append(Cut(here, int(begun[here]), left_out * per_steps))
        removed += left_out * per
    return keep, counts[keep_tr], out


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
    and on DRAM: the sums engine_group.Group adds up transfer by transfer (_moved), and
    engine_links.Links moves (every copy of a transfer crosses the L2 path; those that miss,
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
